// The `roundoff` executable at its edges: bad input gets a non-zero exit and one line naming what was wrong,
// never a silent wrong or empty answer (issue 11). Each case below was reproduced as a silent exit-0 answer
// before the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/telemetry_rows.hpp"

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `roundoff ARGS` in `cwd` (under a 60 s timeout) and collects its exit status and output. exe = false:
/// ARGS is the whole command line.
Outcome run_roundoff(const std::string& args, const fs::path& cwd = fs::temp_directory_path(), bool exe = true) {
  const std::string cmd =
      "cd '" + cwd.string() + "' && timeout 60 " + (exe ? std::string(ROUNDOFF_EXE) + " " : "") + args + " 2>&1";
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, p)) o.output.append(buf, n);
  const int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

/// A fresh empty directory for one test.
fs::path scratch(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("roundoff_cli_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A tiny model that trains in well under a second on the committed excerpt.
const std::string kTiny =
    "train --config custom --d 8 --layers 1 --heads 2 --seq 8 --batch 1 --eval-tokens 64 --progress-every 0 ";

void expect_refused(const Outcome& o, const std::string& must_contain, const std::string& what) {
  EXPECT_NE(o.status, 0) << what << " was accepted:\n" << o.output;
  EXPECT_NE(o.output.find(must_contain), std::string::npos) << what << " gave:\n" << o.output;
  EXPECT_EQ(o.output.find("results in"), std::string::npos) << what << " ran:\n" << o.output;
}

TEST(Cli, EmptyOutIsRefused) {
  expect_refused(run_roundoff(kTiny + "--steps 1 --out ''"), "--out must name a directory", "train --out ''");
  expect_refused(run_roundoff("op-error --op rmsnorm --out ''"), "--out must name a directory", "op-error --out ''");
  expect_refused(run_roundoff("accumulate --quick --out ''"), "--out must name a directory", "accumulate --out ''");
}

TEST(Cli, UncheckedNumbersAreRefused) {
  const fs::path d = scratch("numbers");
  const struct {
    const char* flag;
    const char* value;
  } cases[] = {{"--lr", "inf"},           {"--lr", "nan"},          {"--lr", "0"},
               {"--weight-decay", "nan"}, {"--clip", "-1"},         {"--clip", "nan"},
               {"--warmup", "-1"},        {"--seed", "-1"},         {"--seed", "99999999999999999999999"},
               {"--checkpoint-every", "-1"}, {"--stop-after", "-1"}, {"--eval-every", "-1"},
               {"--telemetry-every", "-1"}, {"--shadow-units", "0"}, {"--threads", "1000"},
               {"--steps", "abc"},        {"--eval-tokens", "1.5"}};
  for (const auto& c : cases) {
    const std::string what = std::string(c.flag) + " " + c.value;
    expect_refused(run_roundoff(kTiny + "--steps 1 " + what + " --out '" + (d / "run").string() + "'"), c.flag, what);
    EXPECT_FALSE(fs::exists(d / "run" / "summary.json")) << what;
  }
  expect_refused(run_roundoff("round --seed 99999999999999999999999 -f fp16 0.1"), "--seed", "round --seed 1e23");
  expect_refused(run_roundoff("accumulate --trials 0 --out '" + (d / "acc").string() + "'"), "--trials", "--trials 0");
  const Outcome abc = run_roundoff("accumulate --trials abc --out '" + (d / "acc").string() + "'");
  expect_refused(abc, "--trials: must be an integer in 1..", "--trials abc");
  EXPECT_LT(abc.output.size(), 300u) << abc.output;  // not a 309-digit range
}

TEST(Cli, DotListsWithEmptyFieldsOrNoValuesAreRefused) {
  const fs::path d = scratch("dot");
  { std::ofstream(d / "empty.txt"); }
  expect_refused(run_roundoff("dot --x ''"), "holds no values", "--x ''");
  expect_refused(run_roundoff("dot --x ,"), "empty value", "--x ,");
  expect_refused(run_roundoff("dot --x 1,,2"), "empty value", "--x 1,,2");
  expect_refused(run_roundoff("dot --x 1,2,"), "empty value", "--x 1,2,");
  expect_refused(run_roundoff("dot --x '@" + d.string() + "'"), "is a directory", "--x @DIR");
  expect_refused(run_roundoff("dot --x '@" + (d / "empty.txt").string() + "'"), "holds no values", "--x @empty");
  const Outcome ok = run_roundoff("dot --x '1, 2 3'");  // comma-space and spaces are separators
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("sum of 3 fp16 values"), std::string::npos) << ok.output;
}

TEST(Cli, OperandsMustBeValuesOfTheFormat) {
  expect_refused(run_roundoff("arith -f e4m3 add inf 1"), "has no infinities", "e4m3 inf");
  expect_refused(run_roundoff("dot --inputs e4m3 --x inf,1"), "has no infinities", "dot e4m3 inf");
  expect_refused(run_roundoff("arith -f p5:emin-6:emax7:nospecials add inf 1"), "has no infinities", "nospecials inf");
  expect_refused(run_roundoff("arith -f p5:emin-6:emax7:nospecials add nan 1"), "has no NaN", "nospecials nan");
  expect_refused(run_roundoff("arith -f fp16 add 1e999 1"), "not representable", "fp16 1e999");
  const Outcome ok = run_roundoff("arith -f fp16 add inf 1");
  EXPECT_EQ(ok.status, 0) << ok.output;
  const Outcome nan = run_roundoff("arith -f e4m3 add nan 1");
  EXPECT_EQ(nan.status, 0) << nan.output;
}

TEST(Cli, NegativeSpecialsSayHowToPassThem) {
  expect_refused(run_roundoff("round -f fp16 -inf"), "after --", "round -inf");
  expect_refused(run_roundoff("arith add inf -inf"), "after --", "arith add inf -inf");
  const Outcome ok = run_roundoff("round -f fp16 -- -inf");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("-inf -> -inf"), std::string::npos) << ok.output;
}

TEST(Cli, PolicyPresetsWinOverFilesAndOddFilesAreRefused) {
  const fs::path d = scratch("policy");
  { std::ofstream(d / "fp32") << "ane-fp16\n"; }
  { std::ofstream(d / "empty.policy") << "# nothing but a comment\n\n"; }
  fs::create_directories(d / "dir.policy");
  ASSERT_EQ(::mkfifo((d / "fifo.policy").c_str(), 0644), 0);
  const Outcome preset = run_roundoff("policy show fp32", d);
  EXPECT_EQ(preset.status, 0) << preset.output;
  EXPECT_EQ(preset.output, "fp32\n");
  const Outcome file = run_roundoff("policy show @fp32", d);
  EXPECT_EQ(file.status, 0) << file.output;
  EXPECT_NE(file.output.find("read file fp32"), std::string::npos) << file.output;
  EXPECT_NE(file.output.find("ane-fp16\n"), std::string::npos) << file.output;
  expect_refused(run_roundoff("policy show /dev/zero", d), "not a regular file", "/dev/zero");
  expect_refused(run_roundoff("policy show fifo.policy", d), "not a regular file", "FIFO");
  expect_refused(run_roundoff("policy show dir.policy", d), "is a directory", "directory");
  expect_refused(run_roundoff("policy show empty.policy", d), "holds no policy items", "empty file");
  expect_refused(run_roundoff("policy show missing.policy", d), "neither a policy preset", "missing file");
  expect_refused(run_roundoff("policy show @missing.policy", d), "does not exist", "@missing file");
}

TEST(Cli, SummaryCommandHoldsTheWholeArgumentList) {
  const fs::path d = scratch("command");
  const Outcome o = run_roundoff(kTiny + "--steps 2 --seed 5 --lr 0.002 --precision @fp32 --out '" + (d / "run").string() +
                             "'");
  // --precision @fp32 names a file that does not exist: refused, nothing written.
  expect_refused(o, "does not exist", "@fp32 without a file");
  const Outcome ok = run_roundoff(kTiny + "--steps 2 --seed 5 --lr 0.002 --out '" + (d / "run").string() + "'");
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("(from spec)"), std::string::npos) << ok.output;
  std::ifstream in(d / "run" / "summary.json");
  const nlohmann::json s = nlohmann::json::parse(in);
  const std::string cmd = s.at("command").get<std::string>();
  for (const char* part : {"train --config custom --d 8", "--steps 2 --seed 5 --lr 0.002 --out"})
    EXPECT_NE(cmd.find(part), std::string::npos) << cmd;
}

TEST(Cli, ResumeMismatchNamesTheField) {
  const fs::path d = scratch("resume");
  const std::string out = " --out '" + (d / "run").string() + "'";
  ASSERT_EQ(run_roundoff(kTiny + "--steps 3 --stop-after 1" + out).status, 0);
  const Outcome o = run_roundoff(kTiny + "--steps 3 --lr 0.002 --resume" + out);
  expect_refused(o, "recipe.lr: checkpoint 0.001, this run 0.002", "resume with another --lr");
  EXPECT_EQ(o.output.find("\"config\""), std::string::npos) << "dumps the whole identity:\n" << o.output;
}

TEST(Cli, DivergedRunIsNotComplete) {
  const fs::path d = scratch("diverged");
  // lr 1e300 rounds to inf in fp32: the first update turns the masters non-finite and the run stops at step 0.
  const Outcome o = run_roundoff(kTiny + "--steps 4 --warmup 0 --lr 1e300 --out '" + (d / "run").string() + "'");
  ASSERT_EQ(o.status, 0) << o.output;
  std::ifstream in(d / "run" / "summary.json");
  const nlohmann::json s = nlohmann::json::parse(in);
  EXPECT_TRUE(s.at("diverged").get<bool>());
  EXPECT_FALSE(s.at("complete").get<bool>());
  ASSERT_FALSE(s.at("first_nonfinite_step").is_null());
  EXPECT_EQ(s.at("first_nonfinite_step").get<int>(), 0);
  EXPECT_EQ(s.at("first_nonfinite_op").get<std::string>(), "adamw.fwd(master)");
}

}  // namespace

TEST(Cli, KjvCorpusErrorsNameTheFix) {
  const fs::path d = scratch("kjv");
  expect_refused(run_roundoff("data prepare --corpus bible"), "unknown --corpus 'bible' (valid: brown, kjv, children)",
                 "data prepare --corpus bible");
  expect_refused(run_roundoff("data prepare --corpus brown --out " + (d / "b").string()), "needs --package",
                 "data prepare --corpus brown without --package");
  const Outcome missing = run_roundoff("data prepare --corpus kjv --data-file " + (d / "absent.data").string() +
                                   " --out " + (d / "kjv").string());
  expect_refused(missing, "apt-get install bible-kjv-text=4.38", "data prepare --corpus kjv, no data file");
  EXPECT_FALSE(fs::exists(d / "kjv"));
  // train --corpus kjv before the KJV is prepared: the error names the KJV's own command.
  ::setenv("ROUNDOFF_DATA", d.c_str(), 1);
  const Outcome train = run_roundoff(kTiny + "--steps 1 --corpus kjv --out " + (d / "run").string());
  ::unsetenv("ROUNDOFF_DATA");
  expect_refused(train, "./scripts/fetch-corpus --corpus kjv", "train --corpus kjv unprepared");
}

TEST(Cli, ChildrenCorpusErrorsNameTheFix) {
  const fs::path d = scratch("children");
  expect_refused(run_roundoff("data prepare --corpus children --out " + (d / "c").string()), "needs --package",
                 "data prepare --corpus children without --package");
  const Outcome missing = run_roundoff("data prepare --corpus children --package " + (d / "absent").string() +
                                   " --out " + (d / "children").string());
  expect_refused(missing, "./scripts/fetch-corpus --corpus children", "data prepare --corpus children, no package");
  EXPECT_FALSE(fs::exists(d / "children"));
  // train --corpus children before it is prepared: the error names its own command.
  ::setenv("ROUNDOFF_DATA", d.c_str(), 1);
  const Outcome train = run_roundoff(kTiny + "--steps 1 --corpus children --out " + (d / "run").string());
  ::unsetenv("ROUNDOFF_DATA");
  expect_refused(train, "./scripts/fetch-corpus --corpus children", "train --corpus children unprepared");
}

TEST(Cli, TensorcoreFitNamesWhatIsWrongWithItsInput) {
  const fs::path d = scratch("tcfit");
  {
    std::ofstream(d / "junk.bin") << "not a probe dump";
  }
  expect_refused(run_roundoff("tensorcore-fit " + (d / "junk.bin").string()), "not a probe dump (no RTCPROBE header)",
                 "tensorcore-fit on a text file");
  const std::string wg = std::string(ROUNDOFF_SOURCE_DIR) + "/notebooks-data/tensorcore-h200-wgmma/wg-f16-k16-imp0.bin";
  expect_refused(run_roundoff("tensorcore-fit " + wg), "name the models to score with --model",
                 "tensorcore-fit on a wgmma dump without --model");
  expect_refused(run_roundoff("tensorcore-fit " + wg + " --model 'tc-h100,group=x'"), "--model 'tc-h100,group=x'",
                 "tensorcore-fit with a bad model");
  const Outcome ok = run_roundoff("tensorcore-fit " + wg + " --model tc-h100");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("0 of 32768 wrong"), std::string::npos) << ok.output;
}

TEST(Cli, EvalCheckpointReproducesTheRunsEvaluationAndRefusesAMismatch) {
  const fs::path d = scratch("evalck");
  const Outcome run = run_roundoff(kTiny + "--steps 2 --precision pure-fp16 --out " + (d / "run").string());
  ASSERT_EQ(run.status, 0) << run.output;
  nlohmann::json s;
  {
    std::ifstream in(d / "run" / "summary.json");
    s = nlohmann::json::parse(in);
  }
  const std::string ck = (d / "run" / "checkpoint.bin").string();
  auto eval = [&](const std::string& precision, const std::string& out) {
    const Outcome o = run_roundoff(kTiny + "--steps 2 --precision " + precision + " --eval-checkpoint " + ck + " --out " +
                               (d / out).string());
    EXPECT_EQ(o.status, 0) << o.output;
    std::ifstream in(d / out / "eval.json");
    return nlohmann::json::parse(in);
  };
  // Under the run's own policy the evaluation is the run's own-precision one, bit for bit; under fp32 it is
  // the run's fp32 evaluation.
  const nlohmann::json own = eval("pure-fp16", "own");
  EXPECT_EQ(own["val_loss"].get<double>(), s["val_loss_own"].get<double>());
  EXPECT_EQ(own["checkpoint_policy"], "pure-fp16");
  EXPECT_EQ(own["weights_sha256"], s["weights_sha256"]);
  const nlohmann::json f32 = eval("fp32", "fp32");
  EXPECT_EQ(f32["val_loss"].get<double>(), s["val_loss_fp32"].get<double>());
  EXPECT_NE(f32["val_loss"].get<double>(), own["val_loss"].get<double>());
  // Another model shape, or --resume, is refused with the reason.
  expect_refused(run_roundoff("train --config custom --d 16 --layers 1 --heads 2 --seq 8 --batch 1 --eval-tokens 64 "
                          "--progress-every 0 --eval-checkpoint " + ck + " --out " + (d / "bad").string()),
                 "parameters; the model of this config has", "--eval-checkpoint on another shape");
  expect_refused(run_roundoff(kTiny + "--eval-checkpoint " + ck + " --resume --out " + (d / "run").string()),
                 "cannot --resume", "--eval-checkpoint with --resume");
}

namespace {

using roundoff::test::shadow_rows;

}  // namespace

TEST(Cli, ShadowCheckpointGivesTheRunsShadowRowsAtItsStep) {
  const fs::path d = scratch("shadowck");
  // A run that shadows at step 2, and the same run stopped after 2 updates (the same schedule, so the same
  // weights at step 2): attributing the stopped run's checkpoint must give the first run's rows bit for bit.
  const std::string run = kTiny + "--steps 3 --precision pure-fp16 --shadow-units 2 ";
  const Outcome full = run_roundoff(run + "--shadow-every 2 --out " + (d / "full").string());
  ASSERT_EQ(full.status, 0) << full.output;
  const Outcome part = run_roundoff(run + "--stop-after 2 --out " + (d / "part").string());
  ASSERT_EQ(part.status, 0) << part.output;
  const std::string ck = (d / "part" / "checkpoint.bin").string();
  const Outcome sh = run_roundoff(run + "--shadow-checkpoint " + ck + " --out " + (d / "sh").string());
  ASSERT_EQ(sh.status, 0) << sh.output;
  const std::vector<std::string> expected = shadow_rows(d / "full" / "telemetry.csv", 2);
  ASSERT_GT(expected.size(), 20u);
  EXPECT_EQ(shadow_rows(d / "sh" / "telemetry.csv", 2), expected);
  nlohmann::json j;
  {
    std::ifstream in(d / "sh" / "shadow.json");
    j = nlohmann::json::parse(in);
  }
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["checkpoint_policy"], "pure-fp16");
  EXPECT_EQ(j["shadow_units"], 2);
  // Under another policy the rows differ (fp32's local errors are in fp32 ulps of other outputs).
  const Outcome f32 = run_roundoff(kTiny + "--steps 3 --precision fp32 --shadow-units 2 --shadow-checkpoint " + ck +
                               " --out " + (d / "f32").string());
  ASSERT_EQ(f32.status, 0) << f32.output;
  EXPECT_NE(shadow_rows(d / "f32" / "telemetry.csv", 2), expected);
  expect_refused(run_roundoff(run + "--shadow-checkpoint " + ck + " --resume --out " + (d / "part").string()),
                 "cannot --resume", "--shadow-checkpoint with --resume");
  expect_refused(run_roundoff(run + "--shadow-checkpoint " + ck + " --eval-checkpoint " + ck + " --out " +
                          (d / "both").string()),
                 "excludes", "--shadow-checkpoint with --eval-checkpoint");
  expect_refused(run_roundoff("train --config custom --d 16 --layers 1 --heads 2 --seq 8 --batch 1 --eval-tokens 64 "
                          "--progress-every 0 --shadow-checkpoint " + ck + " --out " + (d / "bad").string()),
                 "parameters; the model of this config has", "--shadow-checkpoint on another shape");
}

// ---- Issue 43 ("Edges, second pass"): files that get lost, silent wrong answers, hangs. ----

TEST(Cli, TensorcoreFitNeverOverwritesItsSourceDumpAndRefusesFifosAndShortFiles) {
  const fs::path d = scratch("tctrim");
  const fs::path src = fs::path(ROUNDOFF_SOURCE_DIR) / "notebooks-data/tensorcore-h100/tc-f16-f32.bin";
  fs::copy_file(src, d / "tc-f16-f32.bin");
  const auto size = fs::file_size(d / "tc-f16-f32.bin");
  // Item 7: --trim-dir naming the dump's own directory would replace the dump (a GPU is needed to regenerate it).
  expect_refused(run_roundoff("tensorcore-fit tc-f16-f32.bin --trim 5 --trim-dir .", d), "would overwrite the source dump",
                 "--trim-dir onto the source");
  expect_refused(run_roundoff("tensorcore-fit " + (d / "tc-f16-f32.bin").string() + " --trim 5 --trim-dir " + d.string()),
                 "would overwrite the source dump", "--trim-dir onto the source (absolute)");
  EXPECT_EQ(fs::file_size(d / "tc-f16-f32.bin"), size);
  const Outcome ok = run_roundoff("tensorcore-fit tc-f16-f32.bin --trim 5 --trim-dir small", d);
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_LT(fs::file_size(d / "small" / "tc-f16-f32.bin"), size);
  EXPECT_EQ(fs::file_size(d / "tc-f16-f32.bin"), size);
  // Item 12: a FIFO would block the reader forever.
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  expect_refused(run_roundoff("tensorcore-fit fifo", d), "not a regular file", "tensorcore-fit on a FIFO");
  // Item 13: a header claiming more tiles than the file holds is refused before anything is allocated.
  {
    std::ifstream in(d / "tc-f16-f32.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 40u);
    for (int i = 0; i < 4; ++i) bytes[16 + static_cast<std::size_t>(i)] = '\xff';  // head[2], the tile count
    std::ofstream(d / "huge.bin", std::ios::binary) << bytes;
  }
  const Outcome huge = run_roundoff("tensorcore-fit huge.bin", d);
  expect_refused(huge, "truncated (header says 4294967295 tiles", "a dump claiming 2^32-1 tiles");
  EXPECT_EQ(huge.output.find("bad_alloc"), std::string::npos) << huge.output;
}

namespace {

const std::string kTinyShape = "train --config custom --d 8 --layers 1 --heads 2 --seq 8 --batch 1 --progress-every 0 ";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Cli, EvalTokensBelowOneWindowIsRefused) {  // issue 43 item 1
  const fs::path d = scratch("evaltokens");
  expect_refused(run_roundoff(kTinyShape + "--steps 1 --eval-tokens 7 --out " + (d / "run").string()),
                 "--eval-tokens 7 is shorter than one evaluation window of --seq 8", "--eval-tokens below --seq");
  EXPECT_FALSE(fs::exists(d / "run" / "summary.json"));
  const Outcome ok = run_roundoff(kTinyShape + "--steps 1 --eval-tokens 8 --out " + (d / "ok").string());
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(read_json(d / "ok" / "summary.json").at("val_tokens").get<int>(), 8);
}

TEST(Cli, EvalCheckpointRefusesAnotherModelWithTheSameParameterCount) {  // issue 43 item 2
  const fs::path d = scratch("evalmodel");
  ASSERT_EQ(run_roundoff(kTiny + "--steps 2 --out " + (d / "run").string()).status, 0);
  const std::string ck = (d / "run" / "checkpoint.bin").string();
  // --heads 4 has exactly the parameters of --heads 2 (no GQA): the same numbers read as another model.
  expect_refused(run_roundoff("train --config custom --d 8 --layers 1 --heads 4 --seq 8 --batch 1 --eval-tokens 64 "
                          "--progress-every 0 --eval-checkpoint " + ck + " --out " + (d / "heads").string()),
                 "config.heads 2, this command 4", "--eval-checkpoint with another head count");
  expect_refused(run_roundoff(kTiny + "--residual-scale inv-sqrt-2L --eval-checkpoint " + ck + " --out " +
                          (d / "res").string()),
                 "residual_scale \"none\", this command \"inv-sqrt-2L\"", "--eval-checkpoint with another residual");
  EXPECT_FALSE(fs::exists(d / "heads" / "eval.json"));
  const Outcome ok = run_roundoff(kTiny + "--precision pure-fp16 --eval-checkpoint " + ck + " --out " + (d / "ok").string());
  ASSERT_EQ(ok.status, 0) << ok.output;
  const nlohmann::json e = read_json(d / "ok" / "eval.json");  // the evaluation's own config is recorded
  EXPECT_EQ(e.at("config").at("heads"), 2);
  EXPECT_EQ(e.at("residual_scale"), "none");
  EXPECT_EQ(e.at("eval_tokens"), 64);
}

TEST(Cli, GqaMismatchDefectOnAModelWithoutGqaIsRefused) {  // issue 43 item 4
  const fs::path d = scratch("gqadefect");
  expect_refused(run_roundoff(kTiny + "--steps 1 --defect gqa-mismatch --out " + (d / "mha").string()),
                 "--defect gqa-mismatch changes nothing", "gqa-mismatch with kv-heads = heads");
  expect_refused(run_roundoff("train --config T0 --steps 1 --defect gqa-mismatch --out " + (d / "t0").string()),
                 "--defect gqa-mismatch changes nothing", "gqa-mismatch on T0");
  expect_refused(run_roundoff("train --config custom --d 8 --layers 1 --heads 4 --kv-heads 1 --seq 8 --batch 1 "
                          "--eval-tokens 64 --progress-every 0 --steps 1 --defect gqa-mismatch --out " +
                          (d / "kv1").string()),
                 "--defect gqa-mismatch changes nothing", "gqa-mismatch with kv-heads 1");
  const Outcome ok = run_roundoff("train --config custom --d 8 --layers 1 --heads 4 --kv-heads 2 --seq 8 --batch 1 "
                              "--eval-tokens 64 --progress-every 0 --steps 1 --defect gqa-mismatch --out " +
                              (d / "gqa").string());
  EXPECT_EQ(ok.status, 0) << ok.output;
}

TEST(Cli, ResumeRefusesAnotherCorpusWithTheSameSourceLabel) {  // issue 43 item 5
  const fs::path d = scratch("resumecorpus");
  const fs::path excerpt = fs::path(ROUNDOFF_SOURCE_DIR) / "studies/data/excerpt";
  for (const char* c : {"c1", "c2"}) fs::copy(excerpt, d / c);
  // c2: the same manifest (source "excerpt") but one byte of val.txt changed, and its hash updated to match.
  std::string val = slurp(d / "c2" / "val.txt");
  val[0] = val[0] == 'X' ? 'Y' : 'X';
  { std::ofstream(d / "c2" / "val.txt", std::ios::binary | std::ios::trunc) << val; }
  nlohmann::json m = read_json(d / "c2" / "manifest.json");
  {
    FILE* p = popen(("sha256sum '" + (d / "c2" / "val.txt").string() + "'").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char hex[65] = {};
    ASSERT_EQ(std::fread(hex, 1, 64, p), 64u);
    pclose(p);
    m["splits"]["val"]["sha256"] = std::string(hex, 64);
  }
  { std::ofstream(d / "c2" / "manifest.json", std::ios::trunc) << m.dump(2); }
  const std::string out = " --out " + (d / "run").string();
  const Outcome first = run_roundoff(kTiny + "--steps 3 --stop-after 1 --corpus " + (d / "c1").string() + out);
  ASSERT_EQ(first.status, 0) << first.output;
  expect_refused(run_roundoff(kTiny + "--steps 3 --resume --corpus " + (d / "c2").string() + out),
                 "was trained on another corpus: data_sha256.val", "--resume on another corpus, same label");
  const Outcome same = run_roundoff(kTiny + "--steps 3 --resume --corpus " + (d / "c1").string() + out);
  EXPECT_EQ(same.status, 0) << same.output;
}

TEST(Cli, ShadowCheckpointNeverReplacesARunsTelemetry) {  // issue 43 item 8
  const fs::path d = scratch("shadowout");
  const std::string run = kTiny + "--steps 2 --precision pure-fp16 --shadow-units 2 ";
  ASSERT_EQ(run_roundoff(run + "--out " + (d / "run").string()).status, 0);
  const std::string telemetry = slurp(d / "run" / "telemetry.csv");
  expect_refused(run_roundoff(run + "--shadow-checkpoint " + (d / "run" / "checkpoint.bin").string() + " --out " +
                          (d / "run").string()),
                 "holds a training run", "--shadow-checkpoint into the run's own --out");
  EXPECT_EQ(slurp(d / "run" / "telemetry.csv"), telemetry);
  EXPECT_FALSE(fs::exists(d / "run" / "shadow.json"));
  // Into its own directory, again and again: fine.
  for (int i = 0; i < 2; ++i) {
    const Outcome ok = run_roundoff(run + "--shadow-checkpoint " + (d / "run" / "checkpoint.bin").string() + " --out " +
                                (d / "sh").string());
    EXPECT_EQ(ok.status, 0) << ok.output;
  }
}

TEST(Cli, AnotherRunNeverOverwritesAnOldSummaryWhenTheCheckpointIsGone) {  // issue 43 item 11
  const fs::path d = scratch("overwrite");
  const std::string out = " --out " + (d / "run").string();
  ASSERT_EQ(run_roundoff(kTiny + "--steps 2" + out).status, 0);
  fs::remove(d / "run" / "checkpoint.bin");
  const std::string summary = slurp(d / "run" / "summary.json"), curves = slurp(d / "run" / "curves.csv");
  expect_refused(run_roundoff(kTiny + "--steps 2 --lr 0.002" + out),
                 "holds the results of another run (recipe.lr: that run 0.001, this run 0.002)",
                 "another config into an --out with a summary and no checkpoint");
  EXPECT_EQ(slurp(d / "run" / "summary.json"), summary);
  EXPECT_EQ(slurp(d / "run" / "curves.csv"), curves);
  const Outcome again = run_roundoff(kTiny + "--steps 2" + out);  // the same run again recomputes the same results
  EXPECT_EQ(again.status, 0) << again.output;
}

namespace {

/// One RFC 4180 record (no embedded newlines) as fields.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') f.back() += line[++i];
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) f.emplace_back();
    else f.back() += c;
  }
  return f;
}

}  // namespace

TEST(Cli, OpErrorReportsNonFiniteOutputsInsteadOfAPerfectZero) {  // issue 43 item 3
  const fs::path d = scratch("opnan");
  const Outcome o = run_roundoff("op-error --op rmsnorm --precision pure-fp16 --sigma 1,60000 --rows 4 --out " + d.string());
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("outputs are not finite"), std::string::npos) << o.output;
  std::ifstream in(d / "rmsnorm.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = csv_fields(line);
  auto col = [&](const char* name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  ASSERT_LT(col("nan"), header.size());
  int all_nan_rows = 0;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = csv_fields(line);
    ASSERT_EQ(f.size(), header.size()) << line;
    if (f[col("count")] != "0") continue;
    ++all_nan_rows;
    EXPECT_NE(f[col("inf")] + f[col("nan")], "00") << line;  // nothing compared because nothing was finite
    for (const char* stat : {"median_ulp", "p95_ulp", "max_ulp", "norm_rel"}) EXPECT_EQ(f[col(stat)], "nan") << line;
  }
  EXPECT_GT(all_nan_rows, 0) << "sigma 6e4 overflows pure-fp16's RMSNorm";
  // A LUT whose range the compute format cannot hold gives NaN for every output: refused when parsed.
  expect_refused(run_roundoff("policy show 'ane-fp16,silu.approx=ane-lut:33:-1e308:1e308'"),
                 "overflows the compute format fp16", "a LUT range beyond fp16");
  const Outcome ok = run_roundoff("policy show 'ane-fp16,silu.approx=ane-lut:33:-8:8'");
  EXPECT_EQ(ok.status, 0) << ok.output;
}

TEST(Cli, WorkThatCannotFitInMemoryIsRefusedWithItsSize) {  // issue 43 item 15
  const fs::path d = scratch("memory");
  const Outcome t = run_roundoff("train --config custom --d 100000 --heads 2 --steps 1 --out " + (d / "t").string());
  expect_refused(t, "needs at least", "train --d 100000");
  EXPECT_NE(t.output.find("valid: a smaller --d or --layers"), std::string::npos) << t.output;
  EXPECT_EQ(t.output.find("bad_alloc"), std::string::npos) << t.output;
  const Outcome o = run_roundoff("op-error --op matmul --shape in=100000000 --out " + (d / "o").string());
  expect_refused(o, "needs at least", "op-error --shape in=100000000");
  EXPECT_EQ(o.output.find("bad_alloc"), std::string::npos) << o.output;
  // Item 17: a shape key given twice is refused, not "last one wins".
  expect_refused(run_roundoff("op-error --op rmsnorm --shape d=3,d=5 --out " + (d / "s").string()), "given twice",
                 "--shape d=3,d=5");
}

TEST(Cli, OperandsBeforeAndAfterTheMarkAreAllRead) {  // issue 43 item 16
  const Outcome r = run_roundoff("round -f fp16 0.1 -- -0 -1");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* want : {"0.1 -> 0x1.998p-4", "-0 -> -0x0p+0", "-1 -> -0x1p+0"})
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  const Outcome a = run_roundoff("arith add 1 -- -inf");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("add 1 -inf -> -inf"), std::string::npos) << a.output;
  const Outcome f = run_roundoff("arith --format fp32 add -- 1 -2");  // an option's value stays with its option
  ASSERT_EQ(f.status, 0) << f.output;
  EXPECT_NE(f.output.find("bits 0xbf800000"), std::string::npos) << f.output;
  // a flag takes no value: the option after it keeps its own (a flag once swallowed --seed, and 5 moved past --)
  const Outcome g = run_roundoff("arith -m stochastic --json --seed 5 add -- 1 -2");
  ASSERT_EQ(g.status, 0) << g.output;
  EXPECT_NE(g.output.find("\"result\":\"-0x1p+0\""), std::string::npos) << g.output;
  const Outcome h = run_roundoff("round -m stochastic --json --seed 11 0.1 -- -inf");
  ASSERT_EQ(h.status, 0) << h.output;
  EXPECT_NE(h.output.find("\"result\":\"-inf\""), std::string::npos) << h.output;
}

TEST(Cli, RoundAndArithEdgesSayWhatHappened) {  // issue 43 item 6
  const Outcome tiny = run_roundoff("round 1e-999999");
  ASSERT_EQ(tiny.status, 0) << tiny.output;
  EXPECT_EQ(tiny.output.find("error 0 ulp"), std::string::npos) << "an inexact result:\n" << tiny.output;
  EXPECT_NE(tiny.output.find("error < 1e-300 ulp"), std::string::npos) << tiny.output;
  const Outcome below = run_roundoff("round -m up 0x1p-4294967296 -- -0x1p-4294967296");
  ASSERT_EQ(below.status, 0) << below.output;  // as 0x1p18446744073709551616 is accepted (an overflow)
  EXPECT_NE(below.output.find("0x1p-4294967296 -> 0x1p-24"), std::string::npos) << below.output;
  EXPECT_NE(below.output.find("-0x1p-4294967296 -> -0x0p+0"), std::string::npos) << below.output;
  EXPECT_EQ(below.output.find("error 0 ulp"), std::string::npos) << "both are inexact:\n" << below.output;
  expect_refused(run_roundoff("arith -f p5:emin-6:emax7:nospecials div 0 0"), "cannot encode", "nospecials 0/0");
  expect_refused(run_roundoff("round -f p5:emin-6:emax7:nospecials nan"), "cannot encode", "nospecials round nan");
  const Outcome sat = run_roundoff("arith -f p5:emin-6:emax7:nospecials div 1 0");  // saturates: a value
  EXPECT_EQ(sat.status, 0) << sat.output;
}

TEST(Cli, RepeatedOrConflictingKeysAreRefused) {  // issue 43 item 17
  expect_refused(run_roundoff("round -f p11:emin-14:emax15:emax16 1"), "repeats or contradicts an earlier emax",
                 "emax twice");
  expect_refused(run_roundoff("round -f fp16:nanonly:nospecials 1"), "repeats or contradicts", "nanonly and nospecials");
  expect_refused(run_roundoff("dot --accumulation 'acc=fp16,acc=fp32' --x 1,2"), "repeats or contradicts an earlier acc",
                 "acc twice");
  expect_refused(run_roundoff("dot --accumulation 'fp32-seq,fused,unfused' --x 1,2"), "at most one of fused, unfused",
                 "fused and unfused");
  const Outcome ok = run_roundoff("dot --accumulation 'fp32-seq,unfused' --x 1,2");  // a preset then a key: fine
  EXPECT_EQ(ok.status, 0) << ok.output;
  const Outcome custom = run_roundoff("round -f p11:emin-14:emax15:nosub 1");
  EXPECT_EQ(custom.status, 0) << custom.output;
}

TEST(Cli, CorpusAndCheckpointMessagesSayWhatIsMeant) {  // issue 43 item 19
  const fs::path d = scratch("item19");
  std::ofstream(d / "afile") << "x";
  expect_refused(run_roundoff(kTiny + "--steps 1 --corpus '' --out " + (d / "r1").string()),
                 "--corpus must name a corpus", "--corpus ''");
  const Outcome afile = run_roundoff(kTiny + "--steps 1 --corpus " + (d / "afile").string() + " --out " +
                                 (d / "r2").string());
  expect_refused(afile, "is not a directory", "--corpus afile");
  EXPECT_EQ(afile.output.find("fetch-corpus"), std::string::npos) << "a user's file, not Brown:\n" << afile.output;
  // --eval-checkpoint trains nothing: its header does not announce 200 updates.
  ASSERT_EQ(run_roundoff(kTiny + "--steps 2 --out " + (d / "run").string()).status, 0);
  const Outcome ev = run_roundoff(kTiny + "--eval-checkpoint " + (d / "run" / "checkpoint.bin").string() + " --out " +
                              (d / "ev").string());
  ASSERT_EQ(ev.status, 0) << ev.output;
  EXPECT_EQ(ev.output.find("200 updates"), std::string::npos) << ev.output;
  EXPECT_NE(ev.output.find("no training (--eval-checkpoint)"), std::string::npos) << ev.output;
  // data info on a corpus whose val split is empty: no bytes per token to report (it printed 1.0000).
  fs::copy(fs::path(ROUNDOFF_SOURCE_DIR) / "studies/data/excerpt", d / "emptyval");
  { std::ofstream(d / "emptyval" / "val.txt", std::ios::trunc); }
  nlohmann::json m = read_json(d / "emptyval" / "manifest.json");
  m["splits"]["val"]["sha256"] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  m["splits"]["val"]["bytes"] = 0;
  { std::ofstream(d / "emptyval" / "manifest.json", std::ios::trunc) << m.dump(2); }
  const Outcome info = run_roundoff("data info --dir " + (d / "emptyval").string());
  ASSERT_EQ(info.status, 0) << info.output;
  EXPECT_EQ(info.output.find("1.0000"), std::string::npos) << info.output;
}

namespace {

/// An .npy (format 1.0) of shape (rows, cols), or (rows,) when cols == 0, with raw little-endian data.
void write_npy(const fs::path& p, std::size_t rows, std::size_t cols, const std::string& descr, const std::string& data,
               const std::string& order = "False") {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': (" + std::to_string(rows) +
                  (cols ? ", " + std::to_string(cols) + ")" : ",)") + ", }";
  h.append(63 - (10 + h.size()) % 64, ' ');
  h += '\n';
  std::ofstream out(p, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(h.size() & 0xFF), static_cast<char>(h.size() >> 8)};
  out.write(len, 2);
  out << h << data;
}

/// A float32 .npy of shape (rows, cols) holding `v` (row-major), written by hand (format 1.0).
void write_npy_f32(const fs::path& p, std::size_t rows, std::size_t cols, const std::vector<float>& v,
                   const std::string& descr = "<f4", const std::string& order = "False") {
  write_npy(p, rows, cols, descr, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)), order);
}

}  // namespace

TEST(Cli, QuantizeWritesAnNpzAndReportsTheError) {  // issue 41
  const fs::path d = scratch("quantize");
  std::vector<float> x(2 * 32, 0.0f);
  x[0] = 7.5f, x[1] = 1.2f, x[2] = -0.3f, x[3] = 0.25f;  // the mxfp4 example of python/roundoff/blocks.py
  x[32] = 1.0f;
  write_npy_f32(d / "x.npy", 2, 32, x);
  const Outcome ok = run_roundoff("quantize --format mxfp4 x.npy --out q.npz", d);
  ASSERT_EQ(ok.status, 0) << ok.output;
  const nlohmann::json j = nlohmann::json::parse(ok.output);
  EXPECT_EQ(j["format"], "mxfp4");
  EXPECT_EQ(j["count"], 64);
  EXPECT_EQ(j["nonzero_count"], 5);
  EXPECT_EQ(j["max_abs_error"].get<double>(), 1.5);                     // 7.5 -> 6
  EXPECT_EQ(j["max_rel_error"].get<double>(), 1.0);                     // 0.25 -> 0
  const std::string z = slurp(d / "q.npz");
  for (const char* member : {"values.npy", "codes.npy", "scales.npy"})
    EXPECT_NE(z.find(member), std::string::npos) << member;
  EXPECT_EQ(z.find("tensor_scale.npy"), std::string::npos);
  // codes.npy's data: 7, 2, 9, 0 (e2m1 6, 1, -0.5, 0); scales: 127, 127.
  const auto codes_at = z.find("codes.npy");
  ASSERT_NE(codes_at, std::string::npos);
  const auto codes_data = z.find('\n', z.find("\x93NUMPY", codes_at)) + 1;
  EXPECT_EQ(z.substr(codes_data, 4), std::string("\x07\x02\x09\x00", 4));
  // Rerunning onto its own output is fine; nothing else is overwritten.
  EXPECT_EQ(run_roundoff("quantize --format mxfp4 x.npy --out q.npz", d).status, 0);
  std::ofstream(d / "mine.npz") << "a user's file";
  expect_refused(run_roundoff("quantize --format mxfp4 x.npy --out mine.npz", d), "not written by roundoff quantize",
                 "--out onto a user's file");
  EXPECT_EQ(slurp(d / "mine.npz"), "a user's file");
  expect_refused(run_roundoff("quantize --format mxfp4 x.npy --out x.npy", d), "is the input file", "--out onto the input");
  const Outcome n = run_roundoff("quantize --format nvfp4 x.npy --out n.npz", d);
  EXPECT_EQ(n.status, 0) << n.output;
  EXPECT_NE(slurp(d / "n.npz").find("tensor_scale.npy"), std::string::npos);
  // --rule is the same as NAME:RULE; MLX affine writes biases.
  const Outcome r = run_roundoff("quantize --format mxfp4 --rule nv-ceil x.npy --out r.npz", d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["format"], "mxfp4:nv-ceil");
  const Outcome m = run_roundoff("quantize --format mlx-int4-g32-bf16 x.npy --out m.npz", d);
  ASSERT_EQ(m.status, 0) << m.output;
  EXPECT_EQ(nlohmann::json::parse(m.output)["format"], "mlx-int4-g32-bf16");
  EXPECT_NE(slurp(d / "m.npz").find("biases.npy"), std::string::npos);
  EXPECT_EQ(slurp(d / "q.npz").find("biases.npy"), std::string::npos);
}

TEST(Cli, QuantizeNf4DqAndPaletteWriteTheirMembersAndRefuseInOneLine) {  // issue 41
  const fs::path d = scratch("quantize_dq_palette");
  std::vector<float> x(4 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) / 4.0f;
  write_npy_f32(d / "x.npy", 4, 64, x);
  const Outcome dq = run_roundoff("quantize -f nf4-dq x.npy -o dq.npz", d);
  ASSERT_EQ(dq.status, 0) << dq.output;
  EXPECT_EQ(nlohmann::json::parse(dq.output)["format"], "nf4-dq");
  const std::string z = slurp(d / "dq.npz");
  for (const char* member : {"values.npy", "codes.npy", "scales.npy", "scale_scales.npy", "scale_offset.npy"})
    EXPECT_NE(z.find(member), std::string::npos) << member;
  // A LUT of 4 entries, unsorted: x = k/4 - 1.5 .. 1.5; entries -1, 0, 1, 0.5; ties (0.25, 0.75, -0.5) go to the
  // lowest index.
  write_npy_f32(d / "lut.npy", 4, 0, {-1.0f, 0.0f, 1.0f, 0.5f});
  const Outcome p = run_roundoff("quantize -f palette --lut lut.npy x.npy -o p.npz", d);
  ASSERT_EQ(p.status, 0) << p.output;
  const nlohmann::json j = nlohmann::json::parse(p.output);
  EXPECT_EQ(j["lut_entries"], 4);
  EXPECT_EQ(j["max_abs_error"].get<double>(), 0.5);  // -1.5 -> -1
  const std::string pz = slurp(d / "p.npz");
  const auto codes_data = pz.find('\n', pz.find("\x93NUMPY", pz.find("codes.npy"))) + 1;
  // x[0..7] = -1.5, -1.25, -1, -0.75, -0.5, -0.25, 0, 0.25 -> 0, 0, 0, 0, 0 (tie -1/0: index 0), 1, 1, 1 (tie 0/0.5)
  EXPECT_EQ(pz.substr(codes_data, 8), std::string("\x00\x00\x00\x00\x00\x01\x01\x01", 8));
  EXPECT_NE(pz.find("lut.npy"), std::string::npos);
  expect_refused(run_roundoff("quantize -f palette x.npy -o p.npz", d), "needs --lut", "palette without a LUT");
  expect_refused(run_roundoff("quantize -f palette --axis 0 --lut lut.npy x.npy -o p.npz", d), "--axis does not apply",
                 "palette with --axis");
  expect_refused(run_roundoff("quantize -f mxfp4 --lut lut.npy x.npy -o p.npz", d), "--lut applies to --format palette",
                 "--lut with a block format");
  write_npy_f32(d / "lut3.npy", 3, 4, std::vector<float>(12, 1.0f));
  expect_refused(run_roundoff("quantize -f palette --lut lut3.npy x.npy -o p.npz", d), "3 LUTs do not split axis 0",
                 "3 LUT groups for 4 rows");
}

TEST(Cli, QuantizeRefusesWhatItCannotRead) {  // issue 41
  const fs::path d = scratch("quantize_bad");
  const std::vector<float> x(32, 1.0f);
  write_npy_f32(d / "fortran.npy", 1, 32, x, "<f4", "True");
  write_npy_f32(d / "int.npy", 1, 32, x, "<i4");
  write_npy_f32(d / "big_endian.npy", 1, 32, x, ">f4");
  write_npy_f32(d / "short.npy", 2, 32, x);
  write_npy_f32(d / "ok.npy", 1, 32, x);
  std::ofstream(d / "junk.npy") << "not numpy at all";
  ASSERT_EQ(::mkfifo((d / "fifo.npy").c_str(), 0644), 0);
  fs::create_directories(d / "dir.npy");
  const struct {
    const char* args;
    const char* says;
  } cases[] = {{"-f mxfp4 fortran.npy -o q.npz", "Fortran-order"},
               {"-f mxfp4 int.npy -o q.npz", "dtype '<i4' is not supported"},
               {"-f mxfp4 big_endian.npy -o q.npz", "dtype '>f4' is not supported"},
               {"-f mxfp4 short.npy -o q.npz", "needs 64 values"},
               {"-f mxfp4 junk.npy -o q.npz", "not an .npy file"},
               {"-f mxfp4 fifo.npy -o q.npz", "not a regular file"},
               {"-f mxfp4 dir.npy -o q.npz", "not a regular file"},
               {"-f mxfp4 missing.npy -o q.npz", "no such file"},
               {"-f nvfp4 ok.npy --axis 0 -o q.npz", "has blocks of 16 but axis 0 has length 1"},
               {"-f mxfp4 ok.npy --axis 2 -o q.npz", "--axis 2 is out of range"},
               {"-f mxfp9 ok.npy -o q.npz", "unknown block format 'mxfp9'"},
               {"-f mxfp4:nv-ceil --rule mlx-round ok.npy -o q.npz", "which already names a rule"},
               {"-f nf4 --rule nv-ceil ok.npy -o q.npz", "only MX formats take a rule"},
               {"-f mxfp4 --rule floor ok.npy -o q.npz", "rule 'floor' does not apply"},
               {"-f mxfp4 ok.npy -o ''", "--out must name a file"},
               {"-f mxfp4 ok.npy -o dir.npy", "is not a regular file"}};
  for (const auto& c : cases) {
    const Outcome o = run_roundoff(std::string("quantize ") + c.args, d);
    expect_refused(o, c.says, c.args);
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << c.args << ":\n" << o.output;
    EXPECT_NE(o.output.find("valid"), std::string::npos) << c.args << ":\n" << o.output;
  }
  EXPECT_FALSE(fs::exists(d / "q.npz"));
  const Outcome help = run_roundoff("quantize --help", d);
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("Examples:"), std::string::npos);
}

namespace {

/// The values of a little-endian float32 ('<f4') or float64 .npy written by roundoff, and its descr.
std::vector<double> read_npy_values(const fs::path& p, std::string* descr = nullptr) {
  const std::string b = slurp(p);
  const auto end = b.find('\n');
  const bool f8 = b.find("'<f8'") < end;
  if (descr) *descr = f8 ? "<f8" : b.find("'<f4'") < end ? "<f4" : "?";
  std::vector<double> v;
  for (std::size_t at = end + 1; at + (f8 ? 8 : 4) <= b.size(); at += f8 ? 8 : 4) {
    if (f8) {
      double x;
      std::memcpy(&x, b.data() + at, 8);
      v.push_back(x);
    } else {
      float x;
      std::memcpy(&x, b.data() + at, 4);
      v.push_back(x);
    }
  }
  return v;
}
template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

TEST(Cli, GemmComputesWritesAndComparesBits) {  // issue 40
  const fs::path d = scratch("gemm");
  // A (2x3) fp16 values as float16, B (3x2) as float32, C (2x2) float64: D = A·B + C exactly in fp32-seq.
  // 1.5 = 0x3e00, -2 = 0xc000, 0.25 = 0x3400, 3 = 0x4200, 1 = 0x3c00, 0.5 = 0x3800.
  write_npy(d / "a.npy", 2, 3, "<f2", raw(std::vector<std::uint16_t>{0x3e00, 0xc000, 0x3400, 0x4200, 0x3c00, 0x3800}));
  write_npy(d / "b.npy", 3, 2, "<f4", raw(std::vector<float>{1, 2, 0.5f, -1, 4, 8}));
  write_npy(d / "c.npy", 2, 2, "<f8", raw(std::vector<double>{0.125, 0, 0, -100}));
  const Outcome o = run_roundoff("gemm a.npy b.npy --c c.npy --inputs fp16 --accumulation fp32-seq --out d.npy --json", d);
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json j = nlohmann::json::parse(o.output);
  EXPECT_EQ(j["m"], 2);
  EXPECT_EQ(j["n"], 2);
  EXPECT_EQ(j["k"], 3);
  EXPECT_EQ(j["accumulation"], "fp32-seq");
  EXPECT_EQ(j["out_dtype"], "float32");
  // Row 0: 1.5·1 − 2·0.5 + 0.25·4 + 0.125 = 1.625; 1.5·2 − 2·(−1) + 0.25·8 = 7. Row 1: 3 + 0.5 + 2 = 5.5;
  // 6 − 1 + 4 − 100 = −91.
  std::string descr;
  EXPECT_EQ(read_npy_values(d / "d.npy", &descr), (std::vector<double>{1.625, 7, 5.5, -91}));
  EXPECT_EQ(descr, "<f4");
  EXPECT_NE(slurp(d / "d.npy").find("'shape': (2, 2)"), std::string::npos);
  // --expect: equal bits exit 0; one element 1 ulp off exits 1 and is described.
  write_npy(d / "e.npy", 2, 2, "<f4", raw(std::vector<float>{1.625f, 7, 5.5f, -91}));
  write_npy(d / "e1.npy", 2, 2, "<f4", raw(std::vector<float>{1.625f, 7, std::nextafter(5.5f, 9.0f), -91}));
  const Outcome same = run_roundoff("gemm a.npy b.npy --c c.npy --inputs fp16 --accumulation fp32-seq --out d2.npy "
                                "--expect e.npy --json", d);
  ASSERT_EQ(same.status, 0) << same.output;
  EXPECT_EQ(nlohmann::json::parse(same.output)["expect"]["differing_elements"], 0);
  const Outcome off = run_roundoff("gemm a.npy b.npy --c c.npy --inputs fp16 --accumulation fp32-seq --out d3.npy "
                               "--expect e1.npy --json", d);
  EXPECT_EQ(off.status, 1) << off.output;
  const nlohmann::json e = nlohmann::json::parse(off.output.substr(0, off.output.find('\n')));
  EXPECT_EQ(e["expect"]["differing_elements"], 1);
  EXPECT_EQ(e["expect"]["differing_bits"], 1);
  EXPECT_EQ(e["expect"]["first_difference"]["index"], (std::vector<int>{1, 0}));
  EXPECT_EQ(e["expect"]["first_difference"]["got_bits"], "0x40b00000");
  EXPECT_EQ(e["expect"]["first_difference"]["expected_bits"], "0x40b00001");
  EXPECT_NE(off.output.find("1 elements differ from --expect e1.npy"), std::string::npos) << off.output;
  // Split-K: 1 + 2^-24 + 2^-24 + 2^-24 is 1 in fp32-seq, 1 + 2^-23 in two chunks summed in binary32.
  write_npy(d / "x.npy", 1, 4, "<f4", raw(std::vector<float>{1, 0x1p-24f, 0x1p-24f, 0x1p-24f}));
  write_npy(d / "ones.npy", 4, 1, "<f4", raw(std::vector<float>{1, 1, 1, 1}));
  for (const auto& [spec, want] : {std::pair<std::string, double>{"fp32-seq", 1.0}, {"fp32-seq,splitk=2", 1 + 0x1p-23}}) {
    const std::string name = spec == "fp32-seq" ? "s1.npy" : "s2.npy";
    ASSERT_EQ(run_roundoff("gemm x.npy ones.npy --inputs fp32 --accumulation " + spec + " --out " + name, d).status, 0);
    EXPECT_EQ(read_npy_values(d / name), std::vector<double>{want}) << spec;
  }
  // A result format wider than binary32 is written as float64.
  const Outcome wide = run_roundoff("gemm x.npy ones.npy --inputs fp32 --accumulation fp64-seq --out w.npy --json", d);
  ASSERT_EQ(wide.status, 0) << wide.output;
  EXPECT_EQ(nlohmann::json::parse(wide.output)["out_dtype"], "float64");
  EXPECT_EQ(read_npy_values(d / "w.npy", &descr), std::vector<double>{1 + 0x1.8p-23});
  EXPECT_EQ(descr, "<f8");
  // --like cublas-h100 --splitk 2 with fp16 inputs is tc-h100,splitk=2:64: K = 4 is one chunk, one 4-product
  // adder step that keeps 1 + 3·2^-24 and truncates it to binary32: 1 + 2^-23. The summary names the model.
  const Outcome text = run_roundoff("gemm x.npy ones.npy --inputs fp16 --like cublas-h100 --splitk 2 --out t.npy", d);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("splitk=2:64:nearest-even"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("wrote t.npy (float32"), std::string::npos) << text.output;
  EXPECT_EQ(read_npy_values(d / "t.npy"), std::vector<double>{1 + 0x1p-23});
}

TEST(Cli, GemmRefusesBadInputInOneLine) {  // issue 40
  const fs::path d = scratch("gemm_bad");
  write_npy(d / "a.npy", 2, 2, "<f4", raw(std::vector<float>{1, 0.1f, 2, 3}));
  write_npy(d / "ok.npy", 2, 2, "<f4", raw(std::vector<float>{1, 2, 3, 4}));
  write_npy(d / "b3.npy", 3, 2, "<f4", raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  write_npy(d / "one.npy", 4, 0, "<f4", raw(std::vector<float>{1, 2, 3, 4}));
  std::ofstream(d / "mine.npy") << "a user's file";
  const struct {
    const char* args;
    const char* says;
  } cases[] = {
      {"a.npy ok.npy --inputs fp16 --accumulation tc-h100 -o d.npy", "element [0, 1] = 0.10000000149011612 is not a value of fp16"},
      {"ok.npy b3.npy --inputs fp16 --accumulation tc-h100 -o d.npy", "same K"},
      {"one.npy ok.npy --inputs fp16 --accumulation tc-h100 -o d.npy", "has shape 4; valid: a 2-D array"},
      {"ok.npy ok.npy --inputs fp16 --accumulation tc-h100 -o mine.npy", "never replaces a file"},
      {"ok.npy ok.npy --inputs fp16 -o d.npy", "exactly one of --accumulation"},
      {"ok.npy ok.npy --inputs fp16 --accumulation tc-h100 --like cublas-h100 -o d.npy", "exactly one of"},
      {"ok.npy ok.npy --inputs fp16 --like cublas-a100 -o d.npy", "--like 'cublas-a100' is not known"},
      {"ok.npy ok.npy --inputs fp32 --like cublas-h100 -o d.npy", "no model for --inputs fp32"},
      {"ok.npy ok.npy --inputs fp16 --accumulation tc-h100 --splitk 3 -o d.npy", "go with --like"},
      {"ok.npy ok.npy --inputs fp16 --like cublas-h100 --fast-accum -o d.npy", "fp8 inputs"},
      {"ok.npy ok.npy --inputs fp16 --like cublas-h100 --splitk x -o d.npy", "'x'"},
      {"ok.npy ok.npy --inputs fp16 --like cublas-h100 --splitk auto -o d.npy", "--splitk auto needs --expect"},
      {"ok.npy ok.npy --inputs fp16 --accumulation 'tc-h100,splitk=2:0' -o d.npy", "granule"},
      {"ok.npy ok.npy --inputs fp99 --accumulation tc-h100 -o d.npy", "fp99"},
      {"missing.npy ok.npy --inputs fp16 --accumulation tc-h100 -o d.npy", "no such file"},
      {"ok.npy ok.npy --c b3.npy --inputs fp16 --accumulation tc-h100 -o d.npy", "valid: M x N = 2x2"},
      {"ok.npy ok.npy --inputs fp16 --accumulation tc-h100 -o d.npy --expect b3.npy", "the result's shape 2x2"},
      {"ok.npy ok.npy --inputs fp16 --accumulation tc-h100 -o '' ", "--out must name a file"},
  };
  for (const auto& c : cases) {
    const Outcome o = run_roundoff(std::string("gemm ") + c.args, d);
    expect_refused(o, c.says, c.args);
    EXPECT_EQ(o.status, 2) << c.args;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << c.args << ":\n" << o.output;
  }
  EXPECT_FALSE(fs::exists(d / "d.npy"));
  EXPECT_EQ(slurp(d / "mine.npy"), "a user's file");
  const Outcome help = run_roundoff("gemm --help", d);
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("Examples:"), std::string::npos);
}

namespace {

/// The train_loss values of a run's curves.csv, in step order.
std::vector<double> train_losses(const fs::path& run) {
  std::vector<double> v;
  std::istringstream in(slurp(run / "curves.csv"));
  std::string line;
  while (std::getline(in, line))
    if (line.find(",train_loss,") != std::string::npos) v.push_back(std::stod(line.substr(line.rfind(',') + 1)));
  return v;
}

}  // namespace

// issue 45 step 5: a GELU feed-forward (--ffn gelu: erf form, --ffn gelu-tanh: tanh form) trains T0, with the
// MPFR shadow sampling its ops; the run names its FFN, a SwiGLU run does not (its identity is unchanged).
TEST(Cli, TrainT0WithGeluFfn) {
  const fs::path d = scratch("gelu");
  std::vector<double> last;
  for (const char* ffn : {"gelu", "gelu-tanh"}) {
    const fs::path run = d / ffn;
    const Outcome o = run_roundoff("train --config T0 --ffn " + std::string(ffn) +
                               " --steps 10 --warmup 4 --lr 0.003 --eval-tokens 128 --shadow-every 5 "
                               "--progress-every 0 --out " + run.string());
    ASSERT_EQ(o.status, 0) << o.output;
    const nlohmann::json s = read_json(run / "summary.json");
    EXPECT_EQ(s.at("config").at("ffn"), ffn);
    EXPECT_FALSE(s.at("diverged").get<bool>());
    const std::vector<double> l = train_losses(run);
    ASSERT_EQ(l.size(), 10u) << ffn;
    EXPECT_LT(l.back(), 0.85 * l.front()) << ffn << ": first " << l.front() << ", last " << l.back();
    last.push_back(l.back());
  }
  EXPECT_NE(last[0], last[1]) << "--ffn gelu and gelu-tanh trained the same model";
  const Outcome sw = run_roundoff(kTiny + "--steps 1 --out " + (d / "swiglu").string());
  ASSERT_EQ(sw.status, 0) << sw.output;
  EXPECT_FALSE(read_json(d / "swiglu" / "summary.json").at("config").contains("ffn"));
  expect_refused(run_roundoff(kTiny + "--steps 1 --ffn relu --out " + (d / "relu").string()),
                 "unknown --ffn 'relu' (valid: swiglu, gelu, gelu-tanh)", "--ffn relu");
}

// `train --isa` lowers the kernels' instruction set for timing another CPU's tier: the same weights bit for bit
// under every tier (policies with fp16, tile-stage and fp32 kernels; the summary names the tier), and a name that
// is not a tier, or a tier this CPU lacks, is refused in one line.
TEST(Cli, TrainIsaLimitChangesNoBit) {
  const fs::path d = scratch("isa");
  for (const char* policy : {"fp32", "ane-fp16", "ane-guide"}) {
    std::string best;
    for (const char* isa : {"best", "avx2", "none"}) {
      const fs::path run = d / (std::string(policy) + "-" + isa);
      const Outcome o = run_roundoff(kTiny + "--steps 3 --precision " + policy + " --isa " + isa + " --out " +
                                     run.string());
      if (std::string(isa) == "avx2" && o.output.find("this CPU lacks") != std::string::npos) continue;
      ASSERT_EQ(o.status, 0) << policy << " --isa " << isa << ":\n" << o.output;
      const nlohmann::json s = read_json(run / "summary.json");
      const std::string sha = s.at("weights_sha256");
      if (std::string(isa) != "best") {
        EXPECT_EQ(s.at("kernel_isa"), isa) << policy;
      }
      if (best.empty()) best = sha;
      EXPECT_EQ(sha, best) << policy << " --isa " << isa;
    }
  }
  expect_refused(run_roundoff(kTiny + "--steps 1 --isa sse4 --out " + (d / "sse4").string()),
                 "--isa: must be best, avx512fp16, avx512, avx2 or none (got 'sse4')", "--isa sse4");
}

// roundoff re-executes itself with glibc.malloc.hugetlb=1 where the kernel lends huge pages on request
// (studies/common/huge_pages.hpp), unless ROUNDOFF_HUGE_PAGES=0: the summary says which, and the weights are the
// same bits either way.
TEST(Cli, HugePagesChangeNoBitAndTheSummarySaysWhetherTheyWereAskedFor) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("glibc.malloc.hugetlb") != std::string::npos)
    GTEST_SKIP() << "GLIBC_TUNABLES already sets glibc.malloc.hugetlb (" << tunables << ")";
  const fs::path d = scratch("huge_pages");
  const Outcome on = run_roundoff(kTiny + "--steps 2 --out " + (d / "on").string());
  const Outcome off = run_roundoff("env ROUNDOFF_HUGE_PAGES=0 " + std::string(ROUNDOFF_EXE) + " " + kTiny +
                                   "--steps 2 --out " + (d / "off").string(), fs::temp_directory_path(), false);
  ASSERT_EQ(on.status, 0) << on.output;
  ASSERT_EQ(off.status, 0) << off.output;
  const nlohmann::json s_on = read_json(d / "on" / "summary.json"), s_off = read_json(d / "off" / "summary.json");
  EXPECT_EQ(s_on.at("malloc_huge_pages").get<bool>(), mode.find("[madvise]") != std::string::npos) << mode;
  EXPECT_FALSE(s_off.at("malloc_huge_pages").get<bool>());
  EXPECT_EQ(s_on.at("weights_sha256"), s_off.at("weights_sha256"));
}
