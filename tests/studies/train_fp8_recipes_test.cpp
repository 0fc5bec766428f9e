// The fp8 training recipes (issue 44, ops/fp8_scaling.hpp) in the trainer: the same weights for one and two threads
// (deepseek-fp8-nopromote-rescaled among them),
// and a run killed after 4 of 6 steps and resumed from its checkpoint (which carries the delayed-scaling amax
// histories) equal to the uninterrupted run; --eval-checkpoint and --shadow-checkpoint of a delayed-scaling run cast with
// the checkpoint's scales. Each run in a directory of its own (ctest runs tests in parallel).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "studies/train/checkpoint.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/train_test_util.hpp"
#include "tests/support/telemetry_rows.hpp"

namespace roundoff::studies::train {
namespace {

using testing::fresh_dir;
using testing::small_config;

/// deepseek-fp8 with 16-wide blocks and promotion every 16 products (small_config(32, ...) has no dimension of 128):
/// the exact per-block GEMM model.
const std::string kDeepseekSmall =
    "deepseek-fp8,matmul.fp8-x=e4m3:1x16,matmul.fp8-w=e4m3:16x16,matmul.fp8-dy=e4m3:1x16,"
    "matmul.acc=[tc-h100-fp8,promote=16:fp32]";
/// deepseek-fp8-nopromote-rescaled with 16-wide blocks (amendment 2 of docs/studies/fp8-recipes.md): the decoded
/// model with its operands rescaled by powers of two (ops/matmul_quant.hpp, rescaled_gemm).
const std::string kDeepseekRescaledSmall =
    "deepseek-fp8-nopromote-rescaled,matmul.fp8-x=e4m3:1x16,matmul.fp8-w=e4m3:16x16,matmul.fp8-dy=e4m3:1x16";


TEST(TrainFp8Recipes, SameWeightsForOneAndTwoThreads) {
  const ModelConfig c = small_config(32, 16, 2);
  // The per-tensor state (delayed), the exact per-block GEMM and the rescaled decoded GEMM; two steps (two threads
  // spin on a loaded machine).
  for (const std::string& policy :
       {std::string("te-fp8-delayed,fp8-scaling=delayed:4:max:0"), kDeepseekSmall, kDeepseekRescaledSmall}) {
    const auto a = testing::train_run(c, policy, fresh_dir("fp8_threads_1"), 2);
    const auto b = testing::train_run(c, policy, fresh_dir("fp8_threads_2"), 2,
                                      [](TrainOptions&) { omp_set_num_threads(2); });
    omp_set_num_threads(1);
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
    EXPECT_EQ(a["val_loss_own"], b["val_loss_own"]) << policy;
  }
}

TEST(TrainFp8Recipes, ResumeWithTheAmaxHistoryEqualsUninterrupted) {
  const ModelConfig c = small_config(32, 16, 2);
  // H = 3 (shorter than the run: the window slides) and TE's default 1024 (longer than the run).
  for (const std::string& policy : {std::string("te-fp8-delayed,fp8-scaling=delayed:3:max:1"),
                                   std::string("te-fp8-delayed")}) {
    const auto a = testing::train_run(c, policy, fresh_dir("fp8_resume_whole"), 6);
    const auto dir = fresh_dir("fp8_resume_parts");
    testing::train_run(c, policy, dir, 6, [](TrainOptions& o) { o.stop_after = 4; });
    // The checkpoint after step 4 holds a history per tensor, with scales that are no longer the initial 1.
    const Checkpoint ck = load_checkpoint(dir / "checkpoint.bin");
    ASSERT_TRUE(ck.meta.contains("fp8_scaling")) << policy;
    const auto& tensors = ck.meta.at("fp8_scaling").at("tensors");
    EXPECT_EQ(tensors.size(), 2u * 7u * 3u);  // 2 layers × Q K V O W1 W3 W2 × x, w, dy
    EXPECT_NE(tensors.at("L0.matmul.q.x").at("scale").get<std::uint32_t>(), 0x3f800000u);
    const auto b = testing::train_run(c, policy, dir, 6, [](TrainOptions& o) { o.resume = true; });
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
  }
  // Delayed and current scaling train differently (the state matters: a resume that lost it would differ too).
  const auto d = testing::train_run(c, "te-fp8-delayed", fresh_dir("fp8_resume_delayed"), 3);
  const auto cur = testing::train_run(c, "te-fp8-current", fresh_dir("fp8_resume_current"), 3);
  EXPECT_NE(d["weights_sha256"], cur["weights_sha256"]);
}


/// evaluate_checkpoint / shadow_checkpoint of `ck` under `policy` with the options of testing::train_run.
SessionSpec checkpoint_spec(const ModelConfig& c, const std::string& policy, const std::filesystem::path& out) {
  omp_set_num_threads(1);
  SessionSpec spec;
  spec.policy = ops::load_policy(policy);
  spec.options.config = c;
  spec.options.seed = 3;
  spec.options.out = out;
  return spec;
}

using roundoff::test::shadow_rows;

TEST(TrainFp8Recipes, EvalCheckpointCastsWithTheCheckpointsScales) {
  const ModelConfig c = small_config(32, 16, 2);
  const std::string policy = "te-fp8-delayed,fp8-scaling=delayed:3:max:1";
  const auto dir = fresh_dir("fp8_eval_run");
  const auto run = testing::train_run(c, policy, dir, 4);
  const auto ck = dir / "checkpoint.bin";
  // The trainer's own evaluation of its final weights, bit for bit: the same scales (a fresh history's scales
  // are all 1, which gives another loss).
  const auto e = evaluate_checkpoint(checkpoint_spec(c, policy, fresh_dir("fp8_eval_same")), testing::excerpt_data(c),
                                     ck);
  EXPECT_EQ(e.at("val_loss").get<double>(), run.at("val_loss_own").get<double>());
  // Under current scaling the checkpoint's histories play no part (each cast takes its own amax).
  const auto cur = evaluate_checkpoint(checkpoint_spec(c, "te-fp8-current", fresh_dir("fp8_eval_cur")),
                                       testing::excerpt_data(c), ck);
  EXPECT_TRUE(std::isfinite(cur.at("val_loss").get<double>()));
  EXPECT_NE(cur.at("val_loss").get<double>(), e.at("val_loss").get<double>());
  // Another delayed scaling than the checkpoint's, and a checkpoint without fp8 histories: refused in one line.
  auto refused = [&](const std::string& pol, const std::filesystem::path& from, const std::string& what) {
    try {
      evaluate_checkpoint(checkpoint_spec(c, pol, fresh_dir("fp8_eval_refused")), testing::excerpt_data(c), from);
      ADD_FAILURE() << pol << ": not refused";
    } catch (const std::runtime_error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find(what), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  refused("te-fp8-delayed,fp8-scaling=delayed:4:max:1", ck,
          "holds fp8 scales for fp8-scaling=delayed:3:max:1, this command uses fp8-scaling=delayed:4:max:1");
  const auto bf16 = fresh_dir("fp8_eval_bf16");
  testing::train_run(c, "h100-amp-bf16", bf16, 1);
  refused(policy, bf16 / "checkpoint.bin", "has no fp8 amax history for L0.matmul.");
}

TEST(TrainFp8Recipes, ShadowCheckpointGivesTheRunsShadowRowsUnderDelayedScaling) {
  // A run that shadows at step 2, and the same run stopped after 2 updates: attributing the stopped run's checkpoint
  // must give the first run's rows bit for bit, which needs the scales of its amax histories.
  const ModelConfig c = small_config(32, 16, 2);
  const std::string policy = "te-fp8-delayed,fp8-scaling=delayed:3:max:1";
  const auto full = fresh_dir("fp8_shadow_full");
  testing::train_run(c, policy, full, 3, [](TrainOptions& o) { o.shadow_every = 2; });
  const auto part = fresh_dir("fp8_shadow_part");
  testing::train_run(c, policy, part, 3, [](TrainOptions& o) { o.stop_after = 2; });
  const auto sh = fresh_dir("fp8_shadow_ck");
  SessionSpec spec = checkpoint_spec(c, policy, sh);
  shadow_checkpoint(spec, testing::excerpt_data(c), part / "checkpoint.bin");
  const std::vector<std::string> expected = shadow_rows(full / "telemetry.csv", 2);
  ASSERT_GT(expected.size(), 20u);
  EXPECT_EQ(shadow_rows(sh / "telemetry.csv", 2), expected);
}

/// The fp8 cast share rows of telemetry.csv: (step, metric) -> count of rows, and every value in [0, 1].
std::map<std::pair<std::int64_t, std::string>, int> share_rows(const std::filesystem::path& telemetry) {
  std::ifstream in(telemetry);
  std::map<std::pair<std::int64_t, std::string>, int> n;
  for (std::string line; std::getline(in, line);) {
    for (const std::string m : {"fp8_saturated_share", "fp8_underflow_share"}) {
      const auto at = line.find("," + m + ",");
      if (at == std::string::npos) continue;
      const double v = std::stod(line.substr(at + m.size() + 2));
      EXPECT_TRUE(v >= 0 && v <= 1) << line;
      ++n[{std::stoll(line.substr(0, line.find(','))), m}];
    }
  }
  return n;
}

TEST(TrainFp8Recipes, TelemetryStepsRecordCastSharesPerTensorAndChangeNoBit) {
  // Every scaled tensor (2 layers × q k v o w1 w3 w2 × x, w, dy) gets its saturation and underflow shares at each
  // telemetry step, per tensor (TE) and per block (DeepSeek) alike; a run with them has the weights of one without.
  const ModelConfig c = small_config(32, 16, 2);
  for (const std::string& policy : {std::string("te-fp8-delayed,fp8-scaling=delayed:4:max:0"), kDeepseekSmall}) {
    const auto on = fresh_dir("fp8_shares_on");
    const auto a = testing::train_run(c, policy, on, 3, [](TrainOptions& o) { o.telemetry_every = 2; });
    const auto b = testing::train_run(c, policy, fresh_dir("fp8_shares_off"), 3,
                                      [](TrainOptions& o) { o.telemetry_every = 0; });
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
    const auto n = share_rows(on / "telemetry.csv");
    for (std::int64_t step : {0, 2})
      for (const std::string m : {"fp8_saturated_share", "fp8_underflow_share"})
        EXPECT_EQ(n.count({step, m}) ? n.at({step, m}) : 0, 2 * 7 * 3) << policy << " step " << step << " " << m;
    EXPECT_FALSE(n.count({1, "fp8_saturated_share"})) << policy;
  }
  // A policy without scaled fp8 has no such rows.
  const auto none = fresh_dir("fp8_shares_none");
  testing::train_run(c, "amp-bf16", none, 1, [](TrainOptions& o) { o.telemetry_every = 1; });
  EXPECT_TRUE(share_rows(none / "telemetry.csv").empty());
}

}  // namespace
}  // namespace roundoff::studies::train
