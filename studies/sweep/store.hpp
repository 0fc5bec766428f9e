#pragma once
/// \file store.hpp
/// Where a sweep keeps its runs and what state each is in. Layout under the runs root:
///   <root>/<study>/<run>/       the run's `train --out` directory (only train writes there)
///   <root>/<study>/logs/<run>.log  every train invocation's stdout and stderr, appended
///   <root>/<study>/slurm/       submitted scripts, grid snapshots and Slurm's per-task output
#include <cstdint>
#include <filesystem>
#include <string>

#include "studies/sweep/grid.hpp"

namespace roundoff::studies::sweep {

struct Store {
  std::filesystem::path root;  ///< absolute
  std::string study;

  std::filesystem::path study_dir() const { return root / study; }
  std::filesystem::path run_dir(const Run& r) const { return study_dir() / r.name; }
  std::filesystem::path log_file(const Run& r) const { return study_dir() / "logs" / (r.name + ".log"); }
  std::filesystem::path slurm_dir() const { return study_dir() / "slurm"; }
};

/// New: nothing to resume from. Partial: a checkpoint to resume from. Complete: finished — summary.json says
/// `"complete": true` (the run reached its last step) or `"diverged": true` (it stopped at non-finite master
/// weights; its summary says `"complete": false`, and it is a result, so it goes into the table).
enum class RunState { New, Partial, Complete };

struct RunStatus {
  RunState state = RunState::New;
  std::int64_t steps_completed = 0;  ///< from summary.json (0 when there is none)
  std::int64_t steps = 0;            ///< the run's target from summary.json (0 when there is none)
};

/// The state of the run in train's output directory `dir`.
RunStatus run_status(const std::filesystem::path& dir);

/// "new", "partial k/N" or "complete".
std::string describe(const RunStatus& s);

}  // namespace roundoff::studies::sweep
