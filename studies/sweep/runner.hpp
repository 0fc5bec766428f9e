#pragma once
/// \file runner.hpp
/// Running a sweep's runs on this machine, N train processes at a time. Each run is driven to completion
/// by a sequence of `roundoff train ARGS --out DIR --threads T [--stop-after K] [--resume]` invocations
/// (one per shard of K steps; --resume whenever DIR holds a checkpoint). A complete run is never started
/// again; a partial one continues from its checkpoint, so an interrupted sweep loses at most the steps
/// since each active run's last checkpoint (at most one shard) and repeats nothing that finished.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "studies/sweep/grid.hpp"
#include "studies/sweep/store.hpp"

namespace roundoff::studies::sweep {

/// Environment variable run_local sets to its own pid for the train processes it starts: `roundoff` asks the
/// kernel to kill it when that process ends (PR_SET_PDEATHSIG), and exits at once if it has already ended.
inline constexpr const char* kSweepParentEnv = "ROUNDOFF_SWEEP_PARENT";

struct LocalOptions {
  std::filesystem::path exe;   ///< the roundoff executable to run `train` with
  int jobs = 1;                ///< runs at once
  int threads = 1;             ///< --threads of every train invocation
  std::ostream* progress = nullptr;  ///< one line per shard started and finished (null: quiet)
};

/// One train invocation the runner made.
struct ShardRecord {
  std::string run;
  bool resumed = false;            ///< invoked with --resume
  std::int64_t from_step = 0;      ///< steps_completed before the invocation
  std::int64_t to_step = 0;        ///< steps_completed after it
  int exit_status = 0;             ///< the process's exit status (128 + signal if killed by one)
};

struct LocalReport {
  std::vector<ShardRecord> shards;    ///< in the order they finished
  std::vector<std::string> failed;    ///< runs stopped by a failing invocation (see their log)
  bool interrupted = false;           ///< request_stop() was called
};

/// The command line of one shard of run r (argv[0] is opts.exe).
std::vector<std::string> shard_command(const Grid& g, const Store& store, const Run& r, int threads, bool resume);

/// Drives every run in `runs` that is not complete to completion, opts.jobs at a time.
LocalReport run_local(const Grid& g, const Store& store, const std::vector<Run>& runs, const LocalOptions& opts);

/// Asks run_local to stop: it starts no further shard, sends SIGTERM to the active train processes and
/// returns once they have exited. Async-signal-safe (call it from a SIGINT/SIGTERM handler).
void request_stop();
/// Clears a previous request_stop() (for a later run_local in the same process).
void clear_stop();

}  // namespace roundoff::studies::sweep
