#pragma once
/// \file slurm.hpp
/// Submitting a sweep to Slurm: one job array with one task per unfinished run (each task runs
/// `roundoff sweep GRID --run NAME`, which resumes its run shard by shard until it is complete), and one
/// collect job that waits for the array (afterany) and writes runs.csv. Scripts are plain bash with
/// #SBATCH lines; every path in them is absolute.
#include <filesystem>
#include <string>
#include <vector>

#include "studies/sweep/grid.hpp"
#include "studies/sweep/store.hpp"

namespace roundoff::studies::sweep {

struct SlurmOptions {
  std::string partition, time, mem, account;  ///< #SBATCH --partition/--time/--mem/--account (empty: left out)
  std::vector<std::string> extra;             ///< further sbatch options, each written as one #SBATCH line
  int threads = 1;                            ///< --threads per run and --cpus-per-task per array task
  int max_parallel = 0;                       ///< array throttle (%N); 0: Slurm decides
};

/// Everything the scripts run: the roundoff executable, the grid snapshot and the table path.
struct SlurmPaths {
  std::filesystem::path exe, grid, table;
};

/// The job-array script for `todo` (non-empty).
std::string array_script(const Grid& g, const Store& store, const std::vector<Run>& todo, const SlurmPaths& paths,
                         const SlurmOptions& opts);
/// The collect job's script.
std::string collect_script(const Grid& g, const Store& store, const SlurmPaths& paths, const SlurmOptions& opts);

/// Runs `sbatch --parsable [--dependency=afterany:<after>] script` and returns the job id it printed.
std::string submit(const std::filesystem::path& script, const std::string& after);

/// `s` single-quoted for bash.
std::string shell_quote(const std::string& s);

}  // namespace roundoff::studies::sweep
