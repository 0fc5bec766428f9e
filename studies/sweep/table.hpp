#pragma once
/// \file table.hpp
/// Collecting a sweep's finished runs into one tidy table, runs.csv: one row per complete run, in the
/// grid's order. Columns: `study`, `run` (the run directory's name), one column per axis holding the run's
/// label on it, then every scalar field of the run's summary.json (nested objects flattened as
/// `config.d`, `recipe.lr`, …; a field named like an axis is left to the axis column) in name order, and
/// last the provenance: `policy` (canonical), `loss_scale`, `data_source`, `git_revision`, `build_flags`,
/// `weights_sha256`, `created_utc`, `command`, `segments` (JSON: which build trained which updates). New summary fields become new columns with no change here.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "studies/sweep/grid.hpp"
#include "studies/sweep/store.hpp"

namespace roundoff::studies::sweep {

struct Collected {
  std::string csv;           ///< the table, RFC 4180 (numerics::csv_field: fields quoted where needed, "\n" line ends)
  std::size_t complete = 0;  ///< rows (complete runs)
  std::size_t total = 0;     ///< runs in the grid
  std::vector<std::string> runs;  ///< the rows' run names, in order
};

/// The `run` column of an existing runs.csv (RFC 4180, as collect writes it). Throws std::invalid_argument when
/// `csv` is not such a table (its header does not start with `study,run`).
std::vector<std::string> tabled_runs(const std::string& csv);

/// Reads every run's summary.json and builds the table.
Collected collect(const Grid& g, const Store& store, const std::vector<Run>& runs);

}  // namespace roundoff::studies::sweep
