// Slurm job-array and collect scripts for a sweep, and their submission with sbatch.
#include "studies/sweep/slurm.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace roundoff::studies::sweep {

namespace {

void sbatch_line(std::ostringstream& s, const std::string& option, const std::string& value) {
  if (value.find_first_of("\n\r") != std::string::npos)
    throw std::invalid_argument("sweep: the sbatch option --" + option + " holds a line break");
  if (!value.empty()) s << "#SBATCH --" << option << "=" << value << "\n";
}

void common_lines(std::ostringstream& s, const SlurmOptions& opts) {
  sbatch_line(s, "partition", opts.partition);
  sbatch_line(s, "account", opts.account);
  sbatch_line(s, "time", opts.time);
  sbatch_line(s, "mem", opts.mem);
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string array_script(const Grid& g, const Store& store, const std::vector<Run>& todo, const SlurmPaths& paths,
                         const SlurmOptions& opts) {
  if (todo.empty()) throw std::invalid_argument("sweep: no unfinished runs to put in a job array");
  std::ostringstream s;
  s << "#!/bin/bash\n";
  s << "#SBATCH --job-name=sweep-" << g.study << "\n";
  s << "#SBATCH --array=0-" << todo.size() - 1;
  if (opts.max_parallel > 0) s << "%" << opts.max_parallel;
  s << "\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=" << opts.threads << "\n";
  s << "#SBATCH --output=" << (store.slurm_dir() / "%A_%a.out").string() << "\n";
  common_lines(s, opts);
  for (const std::string& e : opts.extra) {
    if (e.find_first_of("\n\r") != std::string::npos || e.rfind("--", 0) != 0)
      throw std::invalid_argument("sweep: --sbatch '" + e + "' must be one sbatch option such as --qos=long");
    s << "#SBATCH " << e << "\n";
  }
  s << "# roundoff sweep, study " << g.study << ": one task per unfinished run; each task runs train on its run\n";
  if (g.shard > 0)
    s << "# in shards (--stop-after " << g.shard << ", then --resume) until it is complete. docs/sweep.md.\n";
  else
    s << "# (with --resume if it has a checkpoint) until it is complete. docs/sweep.md.\n";
  s << "set -euo pipefail\nruns=(\n";
  for (const Run& r : todo) s << "  " << shell_quote(r.name) << "\n";
  s << ")\n";
  s << "exec " << shell_quote(paths.exe.string()) << " sweep " << shell_quote(paths.grid.string())
    << " --run \"${runs[$SLURM_ARRAY_TASK_ID]}\" --runs-dir " << shell_quote(store.root.string())
    << " --threads " << opts.threads << "\n";
  return s.str();
}

std::string collect_script(const Grid& g, const Store& store, const SlurmPaths& paths, const SlurmOptions& opts) {
  std::ostringstream s;
  s << "#!/bin/bash\n";
  s << "#SBATCH --job-name=sweep-" << g.study << "-collect\n";
  s << "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n";
  s << "#SBATCH --output=" << (store.slurm_dir() / "%j-collect.out").string() << "\n";
  common_lines(s, opts);
  s << "# roundoff sweep, study " << g.study << ": collect the finished runs into the table.\n"
    << "set -euo pipefail\n";
  s << "exec " << shell_quote(paths.exe.string()) << " sweep " << shell_quote(paths.grid.string())
    << " --collect --runs-dir " << shell_quote(store.root.string()) << " --table "
    << shell_quote(paths.table.string()) << "\n";
  return s.str();
}

std::string submit(const std::filesystem::path& script, const std::string& after) {
  std::string command = "sbatch --parsable";
  if (!after.empty()) command += " --dependency=afterany:" + shell_quote(after);
  command += " " + shell_quote(script.string()) + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  if (!p) throw std::runtime_error("sweep: cannot run sbatch");
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == 127)
    throw std::runtime_error("sweep: sbatch not found on PATH (is Slurm installed here? --dry-run prints the script)");
  if (code != 0) {
    for (char& c : out)
      if (c == '\n') c = ' ';
    throw std::runtime_error("sweep: sbatch failed (exit " + std::to_string(code) + "): " + out);
  }
  const std::string id = out.substr(0, out.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error("sweep: sbatch printed '" + out + "', not a job id");
  return id;
}

}  // namespace roundoff::studies::sweep
