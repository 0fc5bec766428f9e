// `roundoff sweep`: expand a grid of train runs, run them locally or on Slurm, collect runs.csv (docs/sweep.md).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "studies/cli/commands.hpp"
#include "studies/common/provenance.hpp"
#include "studies/data/sha256.hpp"
#include "studies/sweep/grid.hpp"
#include "studies/sweep/runner.hpp"
#include "studies/sweep/slurm.hpp"
#include "studies/sweep/table.hpp"

namespace roundoff::cli {

namespace {

namespace sw = studies::sweep;
namespace fs = std::filesystem;

struct SweepArgs {
  std::string grid, runs_dir = "out/sweep", table, run;
  int jobs = 1, threads = 1;
  bool slurm = false, dry_run = false, collect = false;
  std::string partition, time, mem, account;
  std::vector<std::string> sbatch;
};

/// The flags of `roundoff train`, read from its own option table.
sw::TrainFlags train_flags() {
  CLI::App probe;
  add_train_command(probe);
  sw::TrainFlags flags;
  for (const CLI::Option* o : probe.get_subcommand("train")->get_options()) {
    for (const std::string& name : o->get_lnames()) {
      if (name == "help") continue;
      flags[name] = o->get_expected_max() == 0 ? sw::FlagKind::Switch : sw::FlagKind::Value;  // add_flag: no value
    }
  }
  return flags;
}

std::string read_text(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec))
    throw CliError("sweep: grid " + p.string() + ": no such file (give the path of a JSON grid file)");
  std::ifstream in(p, std::ios::binary);
  if (!in.is_open()) throw CliError("sweep: grid " + p.string() + ": cannot be opened for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void on_signal(int) { sw::request_stop(); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

/// argv as a shell command line, quoting only the arguments that need it.
std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_.,+=:/@%") == std::string::npos;
    s += (s.empty() ? "" : " ") + (plain ? a : sw::shell_quote(a));
  }
  return s;
}

/// Collects the table and writes it atomically; returns the number of complete runs.
std::size_t write_table(const sw::Grid& g, const sw::Store& store, const std::vector<sw::Run>& runs,
                        const fs::path& table, const std::string& grid_path) {
  const sw::Collected c = sw::collect(g, store, runs);
  std::error_code ec;
  if (fs::exists(table, ec)) {  // never replace what is not our table, nor drop runs it already holds
    if (fs::equivalent(table, grid_path, ec))
      throw CliError("sweep: --table " + table.string() + " is the grid file itself; name a .csv file for the table");
    if (!fs::is_regular_file(table, ec))
      throw CliError("sweep: --table " + table.string() + " is not a regular file; name a .csv file for the table");
    std::ifstream in(table, std::ios::binary);
    const std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!old.empty()) {
      std::vector<std::string> listed;
      try {
        listed = sw::tabled_runs(old);
      } catch (const std::invalid_argument& e) {
        throw CliError("sweep: --table " + table.string() + " exists and is " + e.what() +
                       "; refusing to overwrite it: name another --table");
      }
      std::vector<std::string> lost;
      for (const std::string& r : listed)
        if (std::find(c.runs.begin(), c.runs.end(), r) == c.runs.end()) lost.push_back(r);
      if (!lost.empty())
        throw CliError("sweep: " + table.string() + " lists " + std::to_string(lost.size()) +
                       " run(s) that are not complete under " + store.study_dir().string() + " (first " +
                       lost.front() + ": its directory is missing or unfinished); refusing to drop them: restore "
                       "the run directories (or --runs-dir), or write another --table");
    }
  }
  studies::write_file_atomic(table, c.csv);
  std::cout << "sweep: " << c.complete << " of " << c.total << " runs complete; table " << table.string() << "\n";
  return c.complete;
}

/// Runs `roundoff train ARGS --check` for every run: a flag value train refuses (--threads 3 on 2 processors,
/// "steps": 2.0, an unknown policy) is reported by the dry run and before a Slurm submission, not by every run
/// failing later. Throws CliError naming the first run and train's own error line.
void check_runs(const sw::Grid& g, const sw::Store& store, const std::vector<sw::Run>& runs, const fs::path& exe,
                int threads) {
  for (const sw::Run& r : runs) {
    std::vector<std::string> argv = sw::shard_command(g, store, r, threads, false);
    argv[0] = exe.string();
    argv.push_back("--check");
    std::string line;
    for (const std::string& arg : argv) line += sw::shell_quote(arg) + " ";
    FILE* p = ::popen((line + "2>&1").c_str(), "r");
    if (p == nullptr) throw CliError("sweep: cannot run " + argv[0] + " to check run " + r.name);
    std::string out;
    char buf[4096];
    while (const std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int st = ::pclose(p);
    if (st != 0) {
      std::string why = out.substr(0, out.find('\n'));
      if (why.rfind("roundoff: ", 0) == 0) why = why.substr(10);
      throw CliError("sweep: run " + r.name + " would fail: " + why);
    }
  }
}

void run_sweep(const SweepArgs& a) {
  if (a.jobs < 1) throw CliError("sweep: --jobs must be >= 1");
  if (a.threads < 1) throw CliError("sweep: --threads must be >= 1");
  if (a.runs_dir.empty()) throw CliError("sweep: --runs-dir must not be empty");
  const int modes = int(a.slurm) + int(a.collect) + int(!a.run.empty());
  if (modes > 1) throw CliError("sweep: give at most one of --slurm, --collect, --run");
  if (a.dry_run && (a.collect || !a.run.empty()))
    throw CliError("sweep: --dry-run goes with a local or --slurm sweep, not with --collect or --run");
  const bool slurm_opts = !a.partition.empty() || !a.time.empty() || !a.mem.empty() || !a.account.empty() ||
                          !a.sbatch.empty();
  if (slurm_opts && !a.slurm)
    throw CliError("sweep: --partition, --time, --mem, --account and --sbatch are only used with --slurm");

  const std::string text = read_text(a.grid);
  const sw::Grid g = sw::parse_grid(text, a.grid, train_flags());
  const std::vector<sw::Run> runs = g.expand();
  const sw::Store store{fs::absolute(a.runs_dir).lexically_normal(), g.study};
  const fs::path table =
      fs::absolute(a.table.empty() ? fs::path("notebooks-data") / g.study / "runs.csv" : fs::path(a.table))
          .lexically_normal();
  const fs::path exe = fs::read_symlink("/proc/self/exe");

  if (a.collect) {
    write_table(g, store, runs, table, a.grid);
    return;
  }
  if (!a.run.empty()) {
    const sw::Run* run = nullptr;
    for (const sw::Run& r : runs)
      if (r.name == a.run) run = &r;
    if (!run)
      throw CliError("sweep: grid " + a.grid + " has no run named '" + a.run + "' (it has " +
                     std::to_string(runs.size()) + " runs; --dry-run lists them)");
    install_stop_handlers();
    const sw::LocalReport rep = sw::run_local(g, store, {*run}, {exe, 1, a.threads, &std::cout});
    const sw::RunStatus s = sw::run_status(store.run_dir(*run));
    std::cout << "sweep: " << run->name << " " << sw::describe(s) << "\n";
    if (rep.interrupted) throw CliError("sweep: interrupted; run the same command again to resume");
    // Exit status 1 (std::runtime_error), as docs/sweep.md says; 2 is a bad grid or an interrupted sweep.
    if (s.state != sw::RunState::Complete) throw std::runtime_error("sweep: run " + run->name + " did not complete");
    return;
  }

  std::vector<sw::Run> todo;
  for (const sw::Run& r : runs)
    if (sw::run_status(store.run_dir(r)).state != sw::RunState::Complete) todo.push_back(r);
  std::cout << "sweep: study " << g.study << ", " << runs.size() << " runs, " << runs.size() - todo.size()
            << " complete, " << todo.size() << " to run; runs in " << store.study_dir().string() << "\n";

  if (a.slurm) {
    if (todo.empty()) {
      if (a.dry_run)
        std::cout << "sweep: every run is complete; nothing to submit\n";
      else
        write_table(g, store, runs, table, a.grid);
      return;
    }
    const fs::path snapshot = store.slurm_dir() / ("grid-" + studies::data::sha256_hex(text).substr(0, 8) + ".json");
    const sw::SlurmPaths paths{exe, snapshot, table};
    const sw::SlurmOptions opts{a.partition, a.time, a.mem, a.account, a.sbatch, a.threads, a.jobs > 1 ? a.jobs : 0};
    const std::string array = sw::array_script(g, store, todo, paths, opts);
    const std::string collect = sw::collect_script(g, store, paths, opts);
    check_runs(g, store, todo, exe, a.threads);
    if (a.dry_run) {
      std::cout << "# --- job array (" << todo.size() << " tasks) ---\n"
                << array << "# --- collect job (after the array, afterany) ---\n"
                << collect;
      return;
    }
    studies::write_file_atomic(snapshot, text);
    const fs::path array_file = store.slurm_dir() / ("array-" + studies::data::sha256_hex(array).substr(0, 8) + ".sbatch");
    const fs::path collect_file =
        store.slurm_dir() / ("collect-" + studies::data::sha256_hex(collect).substr(0, 8) + ".sbatch");
    studies::write_file_atomic(array_file, array);
    studies::write_file_atomic(collect_file, collect);
    const std::string array_id = sw::submit(array_file, "");
    const std::string collect_id = sw::submit(collect_file, array_id);
    std::cout << "sweep: submitted job array " << array_id << " (" << todo.size() << " tasks, " << array_file.string()
              << ") and collect job " << collect_id << "; the table will be " << table.string() << "\n";
    return;
  }

  if (a.dry_run) {
    check_runs(g, store, runs, exe, a.threads);
    for (const sw::Run& r : runs) {
      const sw::RunStatus s = sw::run_status(store.run_dir(r));
      std::vector<std::string> argv = sw::shard_command(g, store, r, a.threads, s.state == sw::RunState::Partial);
      std::cout << sw::describe(s) << "\t" << r.name << "\t"
                << (s.state == sw::RunState::Complete ? "" : join(argv)) << "\n";
    }
    return;
  }
  install_stop_handlers();
  const sw::LocalReport rep = sw::run_local(g, store, runs, {exe, a.jobs, a.threads, &std::cout});
  write_table(g, store, runs, table, a.grid);
  if (rep.interrupted) throw CliError("sweep: interrupted; run the same command again to resume");
  if (!rep.failed.empty())
    throw std::runtime_error("sweep: " + std::to_string(rep.failed.size()) + " run(s) failed, first " + rep.failed.front() +
                   " (see " + (store.study_dir() / "logs").string() + ")");
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = app.add_subcommand("sweep", "Run a grid of train runs locally or on Slurm; collect runs.csv");
  cmd->footer(
      "Examples:\n"
      "  roundoff sweep grid.json --jobs 2                 # run locally, 2 at a time, then write the table\n"
      "  roundoff sweep grid.json --dry-run                # each run's state and train command\n"
      "  roundoff sweep grid.json --slurm --partition cpu --time 02:00:00 --threads 4\n"
      "  roundoff sweep grid.json --slurm --dry-run        # print the sbatch scripts\n"
      "  roundoff sweep grid.json --collect                # write notebooks-data/<study>/runs.csv\n"
      "Re-running the same command resumes partial runs and skips complete ones. Grid format: docs/sweep.md.");
  cmd->add_option("grid", args->grid, "grid file (JSON; docs/sweep.md)")->required();
  cmd->add_option("--jobs", args->jobs, "runs at once (locally: processes; --slurm: array throttle %N)")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "--threads of each run (--slurm: also --cpus-per-task)")
      ->capture_default_str();
  cmd->add_option("--runs-dir", args->runs_dir, "runs go to DIR/<study>/<run>/")->capture_default_str();
  cmd->add_option("--table", args->table, "the collected table (default notebooks-data/<study>/runs.csv); an existing file is only replaced "
                  "when it is a runs table whose runs are all still complete (never the grid, never other files)");
  cmd->add_flag("--slurm", args->slurm, "submit a Slurm job array (one task per unfinished run) and a collect job");
  cmd->add_flag("--dry-run", args->dry_run, "print what would run (--slurm: the sbatch scripts); change nothing");
  cmd->add_flag("--collect", args->collect, "only collect the finished runs into the table");
  cmd->add_option("--run", args->run, "run only the named run to completion (what each array task does)");
  cmd->add_option("--partition", args->partition, "--slurm: #SBATCH --partition");
  cmd->add_option("--time", args->time, "--slurm: #SBATCH --time per array task, e.g. 02:00:00");
  cmd->add_option("--mem", args->mem, "--slurm: #SBATCH --mem per array task, e.g. 2G");
  cmd->add_option("--account", args->account, "--slurm: #SBATCH --account");
  cmd->add_option("--sbatch", args->sbatch, "--slurm: a further sbatch option for the array, e.g. --qos=long")
      ->allow_extra_args(false);
  cmd->callback([args] { run_sweep(*args); });
}

}  // namespace roundoff::cli
