// Running a sweep's runs locally: a small process pool over `roundoff train` shards.
#include "studies/sweep/runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <ostream>
#include <stdexcept>

extern char** environ;

namespace roundoff::studies::sweep {

namespace {

volatile std::sig_atomic_t g_stop = 0;

struct Active {
  std::size_t run;  ///< index into the runs given to run_local
  ShardRecord record;
};

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

/// Starts argv with stdout and stderr appended to `log`; returns the child's pid.
pid_t spawn_logged(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  std::filesystem::create_directories(log.parent_path());
  {
    std::ofstream header(log, std::ios::app);
    header << "== sweep: " << shell_line(argv) << "\n";
    if (!header) throw std::runtime_error("sweep: cannot write the log " + log.string());
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  // The child's environment, plus ROUNDOFF_SWEEP_PARENT=<this pid>: each train shard dies with this process
  // (main.cpp: PR_SET_PDEATHSIG), so a SIGKILLed sweep leaves no orphan writing into a run directory.
  const std::string parent = std::string(kSweepParentEnv) + "=" + std::to_string(::getpid());
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, parent.c_str(), std::strlen(kSweepParentEnv) + 1) != 0) env.push_back(*e);
  env.push_back(const_cast<char*>(parent.c_str()));
  env.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("sweep: cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

void nap() {
  const timespec t{0, 50'000'000};
  nanosleep(&t, nullptr);
}

/// Waits (up to `seconds`) until no process holds the run directory's lock (studies::OutDirLock): a train of
/// an earlier sweep that was SIGKILLed may still be ending. Without the wait the new shard failed at once
/// ("another roundoff run is writing into ...") and the run was marked FAILED.
void wait_for_run_lock(const std::filesystem::path& dir, double seconds) {
  const std::filesystem::path lock = dir / ".roundoff.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;  // no lock file: nobody ran here yet
  for (double waited = 0; waited < seconds; waited += 0.05) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ::flock(fd, LOCK_UN);
      break;
    }
    nap();
  }
  ::close(fd);
}

}  // namespace

void request_stop() { g_stop = 1; }
void clear_stop() { g_stop = 0; }

std::vector<std::string> shard_command(const Grid& g, const Store& store, const Run& r, int threads, bool resume) {
  std::vector<std::string> argv{"roundoff", "train"};
  for (std::string& a : r.train_args()) argv.push_back(std::move(a));
  argv.insert(argv.end(), {"--out", store.run_dir(r).string(), "--threads", std::to_string(threads)});
  if (g.shard > 0) argv.insert(argv.end(), {"--stop-after", std::to_string(g.shard)});
  if (resume) argv.push_back("--resume");
  return argv;
}

LocalReport run_local(const Grid& g, const Store& store, const std::vector<Run>& runs, const LocalOptions& opts) {
  if (opts.jobs < 1) throw std::invalid_argument("sweep: --jobs must be >= 1");
  LocalReport report;
  std::deque<std::size_t> queue;
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (run_status(store.run_dir(runs[i])).state != RunState::Complete) queue.push_back(i);
  const std::size_t total = queue.size();
  std::size_t finished = 0;
  std::map<pid_t, Active> active;
  bool signalled = false;
  for (;;) {
    while (!g_stop && static_cast<int>(active.size()) < opts.jobs && !queue.empty()) {
      const std::size_t i = queue.front();
      queue.pop_front();
      const Run& r = runs[i];
      wait_for_run_lock(store.run_dir(r), 10.0);
      const RunStatus before = run_status(store.run_dir(r));
      const bool resume = before.state == RunState::Partial;
      std::vector<std::string> argv = shard_command(g, store, r, opts.threads, resume);
      argv[0] = opts.exe.string();
      const pid_t pid = spawn_logged(argv, store.log_file(r));
      Active a{i, {r.name, resume, before.steps_completed, before.steps_completed, 0}};
      active.emplace(pid, a);
      if (opts.progress)
        *opts.progress << "sweep: " << (resume ? "resume " : "start ") << r.name
                       << (resume ? " from its checkpoint" : "") << " (log " << store.log_file(r).string() << ")\n"
                       << std::flush;
    }
    if (active.empty()) break;
    if (g_stop && !signalled) {
      for (const auto& [pid, a] : active) kill(pid, SIGTERM);
      signalled = true;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      nap();
      continue;
    }
    if (pid < 0) throw std::runtime_error(std::string("sweep: waitpid failed: ") + std::strerror(errno));
    const auto it = active.find(pid);
    if (it == active.end()) continue;
    Active a = it->second;
    active.erase(it);
    const Run& r = runs[a.run];
    const RunStatus after = run_status(store.run_dir(r));
    a.record.exit_status = exit_status_of(status);
    a.record.to_step = after.steps_completed;
    report.shards.push_back(a.record);
    if (after.state == RunState::Complete) {
      ++finished;
      if (opts.progress)
        *opts.progress << "sweep: complete " << r.name << " (" << finished << "/" << total << ")\n" << std::flush;
    } else if (g_stop) {
      if (opts.progress)
        *opts.progress << "sweep: interrupted " << r.name << " (" << describe(after) << ")\n" << std::flush;
    } else if (a.record.exit_status == 0 && after.steps_completed > a.record.from_step) {
      queue.push_front(a.run);  // next shard of the same run, in the slot it had
    } else {
      report.failed.push_back(r.name);
      if (opts.progress)
        *opts.progress << "sweep: FAILED " << r.name << " (exit " << a.record.exit_status << ", "
                       << describe(after) << "; see " << store.log_file(r).string() << ")\n"
                       << std::flush;
    }
  }
  report.interrupted = g_stop != 0;
  return report;
}

}  // namespace roundoff::studies::sweep
