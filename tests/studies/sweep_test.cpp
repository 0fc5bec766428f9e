// roundoff sweep: grid parsing and expansion, run naming, local running with resume and skip, interrupted
// sweeps, runs.csv, and the Slurm scripts. The running tests drive the real `roundoff` executable on tiny
// runs (d 16, 1 layer, seq 8, batch 2) of the committed excerpt.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "studies/data/corpus.hpp"
#include "studies/sweep/grid.hpp"
#include "studies/sweep/runner.hpp"
#include "studies/sweep/slurm.hpp"
#include "studies/sweep/store.hpp"
#include "studies/sweep/table.hpp"

namespace sw = roundoff::studies::sweep;
namespace fs = std::filesystem;

namespace {

/// The train flags these tests use, plus one switch (train has none that changes a run today).
const sw::TrainFlags kFlags = {
    {"config", sw::FlagKind::Value},       {"d", sw::FlagKind::Value},       {"layers", sw::FlagKind::Value},
    {"heads", sw::FlagKind::Value},        {"seq", sw::FlagKind::Value},     {"batch", sw::FlagKind::Value},
    {"steps", sw::FlagKind::Value},        {"seed", sw::FlagKind::Value},    {"precision", sw::FlagKind::Value},
    {"eval-tokens", sw::FlagKind::Value},  {"corpus", sw::FlagKind::Value},  {"progress-every", sw::FlagKind::Value},
    {"lr", sw::FlagKind::Value},           {"residual-scale", sw::FlagKind::Value},
    {"out", sw::FlagKind::Value},          {"threads", sw::FlagKind::Value}, {"resume", sw::FlagKind::Switch},
    {"tie-embeddings", sw::FlagKind::Switch}};

fs::path fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("roundoff_sweep_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A grid of tiny runs: fp32 and ane-fp16, seeds 1 and 2, `steps` steps in shards of `shard`.
std::string tiny_grid(const std::string& study, int steps, int shard, const std::string& extra_policy = "") {
  nlohmann::ordered_json g;
  g["study"] = study;
  g["fixed"] = {{"config", "custom"}, {"d", 16},      {"layers", 1},           {"heads", 2},
                {"seq", 8},           {"batch", 2},   {"eval-tokens", 256},    {"progress-every", 0},
                {"steps", steps},     {"corpus", roundoff::studies::data::excerpt_dir().string()}};
  std::vector<std::string> policies{"fp32", "ane-fp16"};
  if (!extra_policy.empty()) policies.push_back(extra_policy);
  g["axes"] = {{"precision", policies}, {"seed", {1, 2}}};
  g["shard"] = shard;
  return g.dump();
}

sw::LocalOptions local(int jobs) { return {ROUNDOFF_EXE, jobs, 1, nullptr}; }

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json summary(const sw::Store& store, const sw::Run& r) {
  return nlohmann::json::parse(read(store.run_dir(r) / "summary.json"));
}

/// RFC 4180 reader for the checks below: rows of fields.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, fresh_field = true;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && fresh_field) {
      quoted = true;
      fresh_field = false;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
      fresh_field = true;
    } else if (c == '\n') {
      rows.back().push_back(field);
      field.clear();
      fresh_field = true;
      rows.emplace_back();
    } else {
      field += c;
      fresh_field = false;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

}  // namespace

TEST(SweepGrid, ExpandsTheProductFirstAxisOutermost) {
  const sw::Grid g = sw::parse_grid(R"({"study": "s", "fixed": {"config": "T0", "lr": 0.003},
      "axes": {"precision": ["fp32", "ane-fp16"],
               "arm": {"plain": {}, "scaled": {"residual-scale": "inv-sqrt-2L", "tie-embeddings": true}},
               "seed": [1, 2, 3]}, "shard": 25})",
                                    "t.json", kFlags);
  EXPECT_EQ(g.study, "s");
  EXPECT_EQ(g.shard, 25);
  const std::vector<sw::Run> runs = g.expand();
  ASSERT_EQ(runs.size(), 12u);
  // Last axis innermost: seed changes fastest, precision slowest.
  EXPECT_EQ(runs[0].labels, (std::vector<std::pair<std::string, std::string>>{
                                {"precision", "fp32"}, {"arm", "plain"}, {"seed", "1"}}));
  EXPECT_EQ(runs[1].labels[2].second, "2");
  EXPECT_EQ(runs[3].labels[1].second, "scaled");
  EXPECT_EQ(runs[6].labels[0].second, "ane-fp16");
  // Flags sorted by name; a number keeps JSON's text; a true switch is a bare flag.
  EXPECT_EQ(runs[0].train_args(), (std::vector<std::string>{"--config", "T0", "--lr", "0.003", "--precision", "fp32",
                                                            "--seed", "1"}));
  EXPECT_EQ(runs[3].train_args(),
            (std::vector<std::string>{"--config", "T0", "--lr", "0.003", "--precision", "fp32", "--residual-scale",
                                      "inv-sqrt-2L", "--seed", "1", "--tie-embeddings"}));
  std::set<std::string> names;
  for (const sw::Run& r : runs) names.insert(r.name);
  EXPECT_EQ(names.size(), runs.size());
}

TEST(SweepGrid, SwitchAxisOffLeavesTheFlagOutAndNoAxesIsOneRun) {
  const sw::Grid g = sw::parse_grid(R"({"study": "s", "axes": {"tie-embeddings": [false, true]}})", "t", kFlags);
  const auto runs = g.expand();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].labels[0].second, "off");
  EXPECT_TRUE(runs[0].train_args().empty());
  EXPECT_EQ(runs[1].train_args(), std::vector<std::string>{"--tie-embeddings"});
  // A switch that is off is the same run as one never mentioned.
  const auto plain = sw::parse_grid(R"({"study": "s"})", "t", kFlags).expand();
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].name.substr(plain[0].name.size() - 8), runs[0].name.substr(runs[0].name.size() - 8));
  EXPECT_EQ(sw::parse_grid(R"({"study": "s"})", "t", kFlags).shard, 0);
}

TEST(SweepGrid, BadInputGetsOneLineNamingWhatIsWrongAndWhatIsValid) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"study": "s", )", "not valid JSON"},
      {R"([1, 2])", "must be a JSON object with keys study, fixed, axes, shard"},
      {R"({"study": "s", "axis": {}})", "unknown key 'axis' (valid: study, fixed, axes, shard)"},
      {R"({"axes": {}})", "\"study\" must be given as a string"},
      {R"({"study": "a/b"})", "must be letters, digits"},
      {R"({"study": ".x"})", "not starting with '.'"},
      {R"({"study": "s", "fixed": {"kv-head": 2}})", "'kv-head' is not a `roundoff train` flag (valid: batch config"},
      {R"({"study": "s", "fixed": {"--seed": 2}})", "write flag names without the leading dashes ('seed', not '--seed')"},
      {R"({"study": "s", "fixed": {"out": "x"}})", "--out is set by the sweep itself"},
      {R"({"study": "s", "axes": {"threads": [1, 2]}})", "--threads is set by the sweep itself"},
      {R"({"study": "s", "fixed": {"tie-embeddings": "yes"}})", "is a switch; give true (on) or false (off)"},
      {R"({"study": "s", "fixed": {"seed": true}})", "--seed takes a value; give a string or a number"},
      {R"({"study": "s", "fixed": {"precision": ""}})", "--precision has an empty value"},
      {R"({"study": "s", "fixed": {"precision": "a\nb"}})", "control character"},
      {R"({"study": "s", "fixed": []})", "\"fixed\" must be an object of train flags"},
      {R"({"study": "s", "axes": []})", "\"axes\" must be an object"},
      {R"({"study": "s", "axes": {"seed": []}})", "axis 'seed' has no values"},
      {R"({"study": "s", "axes": {"seed": [1, 1]}})", "axis 'seed' lists the value '1' twice"},
      {R"({"study": "s", "axes": {"seed": 3}})", "must be a list of values of flag --seed or an object of named"},
      {R"({"study": "s", "axes": {"arm": {}}})", "axis 'arm' has no variants"},
      {R"({"study": "s", "axes": {"arm": {"a": {"nope": 1}}}})", "axis 'arm' variant 'a': 'nope' is not a"},
      {R"({"study": "s", "axes": {"run": {"a": {}}}})", "an axis may not be named 'run'"},
      {R"({"study": "s", "fixed": {"seed": 1}, "axes": {"seed": [2, 3]}})",
       "flag --seed is set by both \"fixed\" and axis 'seed'"},
      {R"({"study": "s", "axes": {"arm": {"a": {}, "b": {}}}})", "get the same arguments; make the variants of each axis differ"},
      {R"({"study": "s", "shard": 0})", "\"shard\" must be a whole number of steps >= 1"},
      {R"({"study": "s", "shard": 2.5})", "\"shard\" must be a whole number of steps >= 1"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      sw::parse_grid(text, "g.json", kFlags);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("grid g.json: ", 0), 0u) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << "for " << text << "\n got: " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(sw::load_grid("/nonexistent/grid.json", kFlags), std::invalid_argument);
}

TEST(SweepGrid, RunNamesAreStable) {
  // These names are the run directories of existing sweeps: changing the scheme orphans them.
  const auto runs = sw::parse_grid(R"({"study": "s", "fixed": {"config": "T0", "steps": 1000},
      "axes": {"precision": ["fp32", "ane-fp16,softmax=fp32"], "seed": [1]}})",
                                   "t", kFlags)
                        .expand();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "precision-fp32_seed-1_" + runs[0].name.substr(runs[0].name.size() - 8));
  EXPECT_EQ(runs[0].name, "precision-fp32_seed-1_49e598d6");
  EXPECT_EQ(runs[1].name, "precision-ane-fp16-softmax-fp32_seed-1_2313fc69");
  // The hash depends on the arguments only: the layout of the grid (key order, fixed vs variant) does not
  // change it, while any argument does.
  const auto same = sw::parse_grid(R"({"study": "other", "fixed": {"seed": 1, "steps": 1000},
      "axes": {"precision": ["fp32"], "config": ["T0"]}})",
                                   "t", kFlags)
                        .expand();
  EXPECT_EQ(same[0].name.substr(same[0].name.size() - 8), "49e598d6");
  const auto longer = sw::parse_grid(R"({"study": "s", "fixed": {"config": "T0", "steps": 2000},
      "axes": {"precision": ["fp32"], "seed": [1]}})",
                                     "t", kFlags)
                          .expand();
  EXPECT_EQ(longer[0].name.substr(0, 22), "precision-fp32_seed-1_");
  EXPECT_NE(longer[0].name, runs[0].name);
}

TEST(SweepLocal, RunsShardByShardThenSkipsWhatIsComplete) {
  const fs::path root = fresh("local");
  const sw::Grid g = sw::parse_grid(tiny_grid("tiny", 4, 2), "t", kFlags);
  const auto runs = g.expand();
  const sw::Store store{root, g.study};
  const sw::LocalReport first = sw::run_local(g, store, runs, local(2));
  EXPECT_TRUE(first.failed.empty());
  EXPECT_FALSE(first.interrupted);
  ASSERT_EQ(first.shards.size(), 8u);  // 4 runs x 2 shards
  std::map<std::string, std::vector<sw::ShardRecord>> by_run;
  for (const auto& s : first.shards) by_run[s.run].push_back(s);
  for (const sw::Run& r : runs) {
    const auto& s = by_run[r.name];
    ASSERT_EQ(s.size(), 2u) << r.name;
    EXPECT_FALSE(s[0].resumed);
    EXPECT_EQ(s[0].from_step, 0);
    EXPECT_EQ(s[0].to_step, 2);
    EXPECT_TRUE(s[1].resumed);
    EXPECT_EQ(s[1].from_step, 2);
    EXPECT_EQ(s[1].to_step, 4);
    EXPECT_EQ(sw::run_status(store.run_dir(r)).state, sw::RunState::Complete);
    EXPECT_EQ(summary(store, r)["steps_completed"], 4);
  }
  const sw::Collected t1 = sw::collect(g, store, runs);
  EXPECT_EQ(t1.complete, 4u);
  const std::string before = read(store.run_dir(runs[0]) / "summary.json");
  const sw::LocalReport again = sw::run_local(g, store, runs, local(2));
  EXPECT_TRUE(again.shards.empty());  // nothing repeated
  EXPECT_EQ(read(store.run_dir(runs[0]) / "summary.json"), before);
  EXPECT_EQ(sw::collect(g, store, runs).csv, t1.csv);
}

TEST(SweepLocal, InterruptedSweepResumesToTheSameBitsAndRepeatsNothing) {
  const sw::Grid g = sw::parse_grid(tiny_grid("tiny", 4, 2), "t", kFlags);
  const auto runs = g.expand();
  // Reference: the same sweep, never interrupted.
  const sw::Store ref{fresh("interrupt_ref"), g.study};
  ASSERT_TRUE(sw::run_local(g, ref, runs, local(2)).failed.empty());

  // The state an interrupted sweep leaves: run 0 complete, run 1 stopped after its first shard (checkpoint
  // at step 2), run 2 killed before its first checkpoint (a stray temp file), run 3 never started.
  const sw::Store store{fresh("interrupt"), g.study};
  ASSERT_TRUE(sw::run_local(g, store, {runs[0]}, local(1)).failed.empty());
  {  // what `train --stop-after 2` leaves: a checkpoint at step 2 and a summary with complete: false
    std::vector<std::string> argv = sw::shard_command(g, store, runs[1], 1, false);
    argv[0] = ROUNDOFF_EXE;
    std::string cmd;
    for (const auto& a : argv) cmd += sw::shell_quote(a) + " ";
    ASSERT_EQ(std::system((cmd + ">/dev/null 2>&1").c_str()), 0);
  }
  ASSERT_EQ(sw::run_status(store.run_dir(runs[1])).state, sw::RunState::Partial);
  EXPECT_EQ(sw::run_status(store.run_dir(runs[1])).steps_completed, 2);
  fs::create_directories(store.run_dir(runs[2]));
  std::ofstream(store.run_dir(runs[2]) / "summary.json.roundoff-tmp.12345") << "{\"complete\": tr";
  const std::string done_before = read(store.run_dir(runs[0]) / "summary.json");

  const sw::LocalReport rerun = sw::run_local(g, store, runs, local(2));
  EXPECT_TRUE(rerun.failed.empty());
  std::map<std::string, std::vector<sw::ShardRecord>> by_run;
  for (const auto& s : rerun.shards) by_run[s.run].push_back(s);
  EXPECT_EQ(by_run.count(runs[0].name), 0u);  // complete: not started again
  EXPECT_EQ(read(store.run_dir(runs[0]) / "summary.json"), done_before);
  ASSERT_EQ(by_run[runs[1].name].size(), 1u);  // partial: one more shard, from its checkpoint
  EXPECT_TRUE(by_run[runs[1].name][0].resumed);
  EXPECT_EQ(by_run[runs[1].name][0].from_step, 2);
  EXPECT_EQ(by_run[runs[2].name].size(), 2u);  // killed before a checkpoint: from the start
  EXPECT_FALSE(by_run[runs[2].name][0].resumed);
  EXPECT_EQ(by_run[runs[3].name].size(), 2u);
  for (const sw::Run& r : runs)
    EXPECT_EQ(summary(store, r)["weights_sha256"], summary(ref, r)["weights_sha256"]) << r.name;
}

TEST(SweepLocal, KilledSweepProcessRerunsToTheSameTable) {
  const fs::path dir = fresh("kill");
  const std::string grid_text = tiny_grid("killed", 12, 3);
  std::ofstream(dir / "grid.json") << grid_text;
  const sw::Grid g = sw::parse_grid(grid_text, "t", kFlags);
  const auto runs = g.expand();
  const sw::Store ref{dir / "ref", g.study};
  ASSERT_TRUE(sw::run_local(g, ref, runs, local(2)).failed.empty());

  auto sweep_cli = [&](bool background) {
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      const std::string grid = (dir / "grid.json").string(), runs_dir = (dir / "runs").string(),
                        table = (dir / "runs.csv").string(), out = (dir / "sweep.out").string();
      if (!freopen(out.c_str(), "a", stdout)) _exit(3);
      execl(ROUNDOFF_EXE, ROUNDOFF_EXE, "sweep", grid.c_str(), "--jobs", "2", "--runs-dir", runs_dir.c_str(),
            "--table", table.c_str(), static_cast<char*>(nullptr));
      _exit(4);
    }
    setpgid(pid, pid);
    if (!background) {
      int st = 0;
      waitpid(pid, &st, 0);
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return pid;
  };
  // Kill the sweep and its train processes with SIGKILL as soon as the first checkpoint exists.
  const pid_t pid = sweep_cli(true);
  const sw::Store store{dir / "runs", g.study};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const sw::Run& r : runs) seen = seen || fs::exists(store.run_dir(r) / "checkpoint.bin");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(seen);
  sweep_cli(false);
  const std::vector<std::vector<std::string>> table = parse_csv(read(dir / "runs.csv"));
  ASSERT_EQ(table.size(), 1 + runs.size());
  for (const sw::Run& r : runs)
    EXPECT_EQ(summary(store, r)["weights_sha256"], summary(ref, r)["weights_sha256"]) << r.name;
}

TEST(SweepLocal, AFailingRunIsReportedOnceAndTheOthersFinish) {
  const sw::Grid g = sw::parse_grid(tiny_grid("fail", 2, 1, "no-such-policy"), "t", kFlags);
  const auto runs = g.expand();
  const sw::Store store{fresh("fail"), g.study};
  const sw::LocalReport rep = sw::run_local(g, store, runs, local(2));
  ASSERT_EQ(rep.failed.size(), 2u);  // two seeds of the bad policy
  for (const std::string& name : rep.failed) EXPECT_NE(name.find("no-such-policy"), std::string::npos);
  std::size_t bad_shards = 0;
  for (const auto& s : rep.shards)
    if (s.run.find("no-such-policy") != std::string::npos) {
      ++bad_shards;
      EXPECT_EQ(s.exit_status, 2);
    }
  EXPECT_EQ(bad_shards, 2u);  // tried once each, not retried
  EXPECT_EQ(sw::collect(g, store, runs).complete, 4u);
  const std::string log = read(store.log_file(runs.back()));
  EXPECT_NE(log.find("no-such-policy"), std::string::npos);
}

TEST(SweepTable, RunsCsvHoldsAxesMetricsAndProvenancePerRun) {
  const sw::Grid g = sw::parse_grid(tiny_grid("table", 2, 1), "t", kFlags);
  const auto runs = g.expand();
  const sw::Store store{fresh("table"), g.study};
  ASSERT_TRUE(sw::run_local(g, store, runs, local(2)).failed.empty());
  // One run left partial: it has no row.
  fs::remove_all(store.run_dir(runs[3]));
  const sw::Collected c = sw::collect(g, store, runs);
  EXPECT_EQ(c.total, 4u);
  EXPECT_EQ(c.complete, 3u);
  const auto rows = parse_csv(c.csv);
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::string>& h = rows[0];
  auto col = [&](const std::string& name) {
    const auto it = std::find(h.begin(), h.end(), name);
    EXPECT_NE(it, h.end()) << name;
    return static_cast<std::size_t>(it - h.begin());
  };
  EXPECT_EQ(h[0], "study");
  EXPECT_EQ(h[1], "run");
  EXPECT_EQ(h[2], "precision");
  EXPECT_EQ(h[3], "seed");
  EXPECT_EQ(h.back(), "segments");
  EXPECT_EQ(h[h.size() - 2], "command");
  EXPECT_EQ(std::count(h.begin(), h.end(), "seed"), 1);  // the summary's seed is left to the axis column
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), h.size());
    const sw::Run& r = runs[i - 1];
    const nlohmann::json s = summary(store, r);
    EXPECT_EQ(row[0], "table");
    EXPECT_EQ(row[1], r.name);
    EXPECT_EQ(row[2], r.labels[0].second);
    EXPECT_EQ(row[3], r.labels[1].second);
    EXPECT_EQ(std::stod(row[col("val_loss_fp32")]), s["val_loss_fp32"].get<double>());  // shortest round-trip text
    EXPECT_EQ(row[col("policy")], s["policy"].get<std::string>());
    EXPECT_EQ(row[col("weights_sha256")], s["weights_sha256"].get<std::string>());
    EXPECT_EQ(row[col("git_revision")], s["git_revision"].get<std::string>());
    EXPECT_EQ(row[col("build_flags")], s["build_flags"].get<std::string>());
    EXPECT_EQ(row[col("config.d")], "16");
    EXPECT_EQ(row[col("steps_completed")], "2");
    EXPECT_EQ(row[col("first_nonfinite_step")], "");  // null
  }
}

TEST(SweepSlurm, ArrayScriptHasOneTaskPerUnfinishedRunAndAbsolutePaths) {
  const sw::Grid g = sw::parse_grid(tiny_grid("slurm", 4, 2), "t", kFlags);
  const auto runs = g.expand();
  const sw::Store store{"/abs/runs", g.study};
  const sw::SlurmPaths paths{"/opt/rx/roundoff", "/abs/runs/slurm/grid-1.json", "/abs/it's/runs.csv"};
  sw::SlurmOptions opts;
  opts.partition = "cpu";
  opts.time = "01:30:00";
  opts.threads = 4;
  opts.max_parallel = 2;
  opts.extra = {"--qos=long"};
  const std::vector<sw::Run> todo{runs[1], runs[3]};
  const std::string a = sw::array_script(g, store, todo, paths, opts);
  for (const std::string& line : std::vector<std::string>{"#!/bin/bash\n", "#SBATCH --array=0-1%2\n", "#SBATCH --cpus-per-task=4\n", "#SBATCH --partition=cpu\n",
        "#SBATCH --time=01:30:00\n", "#SBATCH --qos=long\n", "#SBATCH --output=/abs/runs/slurm/slurm/%A_%a.out\n",
        "  '" + runs[1].name + "'\n", "  '" + runs[3].name + "'\n",
        "exec '/opt/rx/roundoff' sweep '/abs/runs/slurm/grid-1.json' --run \"${runs[$SLURM_ARRAY_TASK_ID]}\" "
        "--runs-dir '/abs/runs' --threads 4\n"})
    EXPECT_NE(a.find(line), std::string::npos) << line << "\nin\n" << a;
  EXPECT_EQ(a.find(runs[0].name), std::string::npos);
  EXPECT_EQ(a.find("--mem"), std::string::npos);  // not given: left out
  const std::string c = sw::collect_script(g, store, paths, opts);
  EXPECT_NE(c.find("--collect --runs-dir '/abs/runs' --table '/abs/it'\\''s/runs.csv'\n"), std::string::npos) << c;
  EXPECT_EQ(c.find("--array"), std::string::npos);
  opts.extra = {"qos=long"};
  EXPECT_THROW(sw::array_script(g, store, todo, paths, opts), std::invalid_argument);
  EXPECT_THROW(sw::array_script(g, store, {}, paths, {}), std::invalid_argument);
}

TEST(SweepCli, BadGridIsOneLineOnStderrWithExitStatus2) {
  const fs::path dir = fresh("cli");
  std::ofstream(dir / "g.json") << R"({"study": "s", "fixed": {"kv-head": 2}})";
  const std::string cmd = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "g.json").string() + " --dry-run 2>" +
                          (dir / "err").string();
  const int st = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
  const std::string err = read(dir / "err");
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("'kv-head' is not a `roundoff train` flag (valid: "), std::string::npos) << err;
  EXPECT_NE(err.find(" precision "), std::string::npos) << err;  // read from train's own option table
}

TEST(SweepCli, SwitchesAndValueFlagsAreReadFromTrainsOptionTable) {
  // --profile is a value-less switch of train and --seed takes a value: the sweep must know which is which
  // without being told (flags added to train later work the same way).
  const fs::path dir = fresh("cli_switch");
  std::ofstream(dir / "g.json") << R"({"study": "s", "fixed": {"profile": true}, "axes": {"seed": [1, 2]}})";
  const std::string cmd = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "g.json").string() + " --runs-dir " +
                          (dir / "runs").string() + " --dry-run >" + (dir / "out").string() + " 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0) << read(dir / "out");
  const std::string out = read(dir / "out");
  EXPECT_NE(out.find("train --profile --seed 1 --out"), std::string::npos) << out;
  std::ofstream(dir / "g.json") << R"({"study": "s", "fixed": {"profile": "yes"}})";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
  EXPECT_NE(read(dir / "out").find("--profile is a switch; give true (on) or false (off)"), std::string::npos)
      << read(dir / "out");
}

// Issue 43 item 10: --collect never drops rows of runs whose directories went missing, and never overwrites a
// file that is not a runs table (the grid itself, say).
TEST(SweepCli, CollectNeverDropsTabledRunsNorOverwritesTheGrid) {
  const fs::path dir = fresh("collect_keep");
  const std::string grid_text = tiny_grid("keep", 2, 2);
  std::ofstream(dir / "grid.json") << grid_text;
  const std::string base = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "grid.json").string() + " --runs-dir " +
                           (dir / "runs").string();
  const std::string log = " >" + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(WEXITSTATUS(std::system((base + " --jobs 2 --table " + (dir / "runs.csv").string() + log).c_str())), 0)
      << read(dir / "out");
  const std::string table = read(dir / "runs.csv");
  ASSERT_EQ(parse_csv(table).size(), 5u);
  EXPECT_EQ(sw::tabled_runs(table).size(), 4u);
  const sw::Grid g = sw::parse_grid(grid_text, "t", kFlags);
  const sw::Store store{dir / "runs", g.study};
  const sw::Run moved = g.expand()[1];
  fs::rename(store.run_dir(moved), dir / "moved-away");
  EXPECT_NE(WEXITSTATUS(std::system((base + " --collect --table " + (dir / "runs.csv").string() + log).c_str())), 0);
  EXPECT_NE(read(dir / "out").find("refusing to drop them"), std::string::npos) << read(dir / "out");
  EXPECT_NE(read(dir / "out").find(moved.name), std::string::npos) << read(dir / "out");
  EXPECT_EQ(read(dir / "runs.csv"), table);
  EXPECT_NE(WEXITSTATUS(std::system((base + " --collect --table " + (dir / "grid.json").string() + log).c_str())), 0);
  EXPECT_NE(read(dir / "out").find("is the grid file itself"), std::string::npos) << read(dir / "out");
  EXPECT_EQ(read(dir / "grid.json"), grid_text);
  std::ofstream(dir / "notes.csv") << "my,own\nnotes,here\n";
  EXPECT_NE(WEXITSTATUS(std::system((base + " --collect --table " + (dir / "notes.csv").string() + log).c_str())), 0);
  EXPECT_NE(read(dir / "out").find("not a runs table"), std::string::npos) << read(dir / "out");
  EXPECT_EQ(read(dir / "notes.csv"), "my,own\nnotes,here\n");
  fs::rename(dir / "moved-away", store.run_dir(moved));  // back: collecting rewrites the same table
  EXPECT_EQ(WEXITSTATUS(std::system((base + " --collect --table " + (dir / "runs.csv").string() + log).c_str())), 0)
      << read(dir / "out");
  EXPECT_EQ(parse_csv(read(dir / "runs.csv")).size(), 5u);
}

// Issue 43 item 18: failed runs exit with status 1 as docs/sweep.md says (2 is a bad grid or an interrupt).
TEST(SweepCli, FailedRunsExitWithStatus1) {
  const fs::path dir = fresh("cli_fail_status");
  nlohmann::ordered_json g = nlohmann::ordered_json::parse(tiny_grid("failstatus", 1, 1));
  g["axes"] = {{"precision", {"no-such-policy"}}};
  std::ofstream(dir / "g.json") << g.dump();
  const std::string cmd = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "g.json").string() + " --runs-dir " +
                          (dir / "runs").string() + " --table " + (dir / "runs.csv").string() + " >" +
                          (dir / "out").string() + " 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 1) << read(dir / "out");
  EXPECT_NE(read(dir / "out").find("1 run(s) failed"), std::string::npos) << read(dir / "out");
}

// Issue 43 item 14: SIGKILL of the sweep process alone (not its process group) used to orphan its train shards,
// which kept their run directories locked, so an immediate rerun marked those runs FAILED. The shards now die
// with the sweep, and a new shard waits for a lock that is still being released.
TEST(SweepCli, RerunRightAfterKillingOnlyTheSweepProcessCompletesEveryRun) {
  const fs::path dir = fresh("kill_sweep_only");
  const std::string grid_text = tiny_grid("orphans", 1600, 800);  // shards long enough to outlive the kill
  std::ofstream(dir / "grid.json") << grid_text;
  const sw::Grid g = sw::parse_grid(grid_text, "t", kFlags);
  const auto runs = g.expand();
  const sw::Store store{dir / "runs", g.study};
  const std::string grid = (dir / "grid.json").string(), runs_dir = (dir / "runs").string(),
                    table = (dir / "runs.csv").string(), out = (dir / "sweep.out").string();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out.c_str(), "a", stdout)) _exit(3);
    execl(ROUNDOFF_EXE, ROUNDOFF_EXE, "sweep", grid.c_str(), "--jobs", "2", "--runs-dir", runs_dir.c_str(),
          "--table", table.c_str(), static_cast<char*>(nullptr));
    _exit(4);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const sw::Run& r : runs) seen = seen || fs::exists(store.run_dir(r) / "checkpoint.bin");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the next shards are running now
  kill(pid, SIGKILL);  // the sweep only: its trains are not signalled by us
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(seen);
  const std::string rerun = std::string(ROUNDOFF_EXE) + " sweep " + grid + " --jobs 2 --runs-dir " + runs_dir +
                            " --table " + table + " >>" + out + " 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(rerun.c_str())), 0) << read(dir / "sweep.out");
  EXPECT_EQ(read(dir / "sweep.out").find("FAILED"), std::string::npos) << read(dir / "sweep.out");
  EXPECT_EQ(parse_csv(read(dir / "runs.csv")).size(), 1 + runs.size());
}

// Issue 43 items 17 and 18: a grid whose runs train would refuse fails its dry run (it passed and then every run
// failed), and a key given twice in one object of the grid is refused (the JSON parser kept the last one).
TEST(SweepCli, DryRunChecksEveryRunsArgumentsAndDuplicateKeysAreRefused) {
  const fs::path dir = fresh("cli_dry_check");
  auto dry = [&](const std::string& grid, const std::string& extra) {
    std::ofstream(dir / "g.json", std::ios::trunc) << grid;
    const std::string cmd = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "g.json").string() + " --runs-dir " +
                            (dir / "runs").string() + " --dry-run " + extra + " >" + (dir / "out").string() + " 2>&1";
    return WEXITSTATUS(std::system(cmd.c_str()));
  };
  const std::string fixed = R"("config": "custom", "d": 8, "layers": 1, "heads": 2, "seq": 8, "batch": 1)";
  EXPECT_EQ(dry(R"({"study": "s", "fixed": {)" + fixed + R"(, "steps": 2.0}, "axes": {"seed": [1, 2]}})", ""), 2);
  EXPECT_NE(read(dir / "out").find("would fail: --steps: must be an integer >= 1 (got '2.0')"), std::string::npos)
      << read(dir / "out");
  const std::string good = R"({"study": "s", "fixed": {)" + fixed + R"(, "steps": 2}, "axes": {"seed": [1, 2]}})";
  EXPECT_EQ(dry(good, "--threads 100000"), 2);
  EXPECT_NE(read(dir / "out").find("would fail: --threads"), std::string::npos) << read(dir / "out");
  EXPECT_EQ(dry(good, ""), 0) << read(dir / "out");
  EXPECT_FALSE(fs::exists(dir / "runs" / "s"));  // checking writes nothing
  EXPECT_EQ(dry(R"({"study": "s", "axes": {"v": {"a": {"seed": 1}, "a": {"seed": 2}}}})", ""), 2);
  EXPECT_NE(read(dir / "out").find("the key 'a' is given twice in one object"), std::string::npos)
      << read(dir / "out");
}

// Issue 43 item 19: --table naming a directory is refused and leaves no temporary behind (it left tdir.tmp.PID).
TEST(SweepCli, TableThatIsADirectoryIsRefusedWithoutLeftovers) {
  const fs::path dir = fresh("cli_table_dir");
  std::ofstream(dir / "g.json") << R"({"study": "s", "axes": {"seed": [1, 2]}})";
  fs::create_directories(dir / "tdir");
  const std::string cmd = std::string(ROUNDOFF_EXE) + " sweep " + (dir / "g.json").string() + " --runs-dir " +
                          (dir / "runs").string() + " --collect --table " + (dir / "tdir").string() + " >" +
                          (dir / "out").string() + " 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
  EXPECT_NE(read(dir / "out").find("is not a regular file"), std::string::npos) << read(dir / "out");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find("tdir."), std::string::npos) << e.path();
}
