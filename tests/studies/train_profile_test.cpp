// --profile: the per-(op, pass) table counts every op call of a step, and profiling changes no bit.
#include <gtest/gtest.h>

#include <sstream>

#include "ops/profile.hpp"
#include "studies/train/model.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

std::string weights_after(const ModelConfig& c, const std::string& policy, int steps, ops::Profile* profile) {
  omp_set_num_threads(1);
  const ops::Policy p = ops::load_policy(policy);
  TrainOptions o;
  o.config = c;
  o.steps = 100;
  o.policy = p.canonical();
  o.progress_every = 0;
  o.telemetry_every = 1;  // detailed steps: the trainer's telemetry phases run too
  o.loss_scale = resolve_loss_scale("auto", p);
  Transformer own(c, o.residual, p, o.seed), fp32(c, o.residual, ops::Policy::preset("fp32"), o.seed);
  Trainer t(o, own, fp32, testing::excerpt_data(c), nullptr);
  t.set_profile(profile);
  t.start();
  for (int i = 0; i < steps; ++i) t.step();
  return t.weights_sha256();
}

TEST(TrainProfile, CountsEveryOpCallAndChangesNoBit) {
  const ModelConfig c = testing::small_config(32, 16, 2);
  ops::Profile prof;
  const std::string with = weights_after(c, "ane-fp16", 2, &prof);
  EXPECT_EQ(with, weights_after(c, "ane-fp16", 2, nullptr));
  EXPECT_EQ(prof.steps(), 2);
  // Per step and layer: 7 projections (q k v o w1 w3 w2), so 2 layers · 7 · 2 steps matmul forward calls.
  EXPECT_EQ(prof.calls(ops::OpKind::Matmul, ops::Pass::Forward), 2 * c.layers * 7);
  EXPECT_EQ(prof.calls(ops::OpKind::CrossEntropy, ops::Pass::Forward), 2);
  EXPECT_EQ(prof.calls(ops::OpKind::AdamW, ops::Pass::Forward) % 2, 0);
  EXPECT_GT(prof.calls(ops::OpKind::AdamW, ops::Pass::Forward), 0);
  double ops_total = 0;
  for (ops::OpKind k : ops::kAllOps)
    for (ops::Pass p : ops::kAllPasses) ops_total += prof.seconds(k, p);
  EXPECT_GT(ops_total, 0);
  EXPECT_LE(ops_total, prof.step_seconds());
  std::ostringstream table, csv;
  prof.print(table);
  prof.write_csv(csv);
  EXPECT_NE(table.str().find("matmul"), std::string::npos);
  EXPECT_NE(table.str().find("trainer: unscale"), std::string::npos);
  EXPECT_NE(table.str().find("trainer: underflow telemetry"), std::string::npos);
  EXPECT_NE(table.str().find("model: output checks"), std::string::npos);
  EXPECT_NE(table.str().find("model: range telemetry"), std::string::npos);
  EXPECT_NE(table.str().find("model: buffer growth"), std::string::npos);
  EXPECT_NE(table.str().find("model: gradient zeroing"), std::string::npos);
  EXPECT_NE(table.str().find("model: gradient rounding"), std::string::npos);
  EXPECT_EQ(csv.str().rfind("op,pass,calls_per_step,ms_per_step,percent\nstep,,1,", 0), 0u);
  EXPECT_NE(csv.str().find("\nmatmul,fwd,14,"), std::string::npos);
  EXPECT_NE(csv.str().find("\nstep-cpu-median,,1,"), std::string::npos);
  EXPECT_GT(prof.median_step_cpu_seconds(), 0);
}

TEST(TrainProfile, TimesEachEvaluationWithItsWindows) {
  omp_set_num_threads(1);
  const ModelConfig c = testing::small_config(16, 16, 2);
  const ops::Policy p = ops::load_policy("ane-fp16");
  TrainOptions o;
  o.config = c;
  o.steps = 2;
  o.eval_every = 1;
  o.policy = p.canonical();
  o.progress_every = 0;
  o.loss_scale = resolve_loss_scale("auto", p);
  Transformer own(c, o.residual, p, o.seed), fp32(c, o.residual, ops::Policy::preset("fp32"), o.seed);
  const TrainData& data = testing::excerpt_data(c);
  Trainer t(o, own, fp32, data, nullptr);
  ops::Profile prof;
  t.set_profile(&prof);
  t.run();
  std::int64_t val_windows = 0, test_windows = 0;
  for (const Batch& b : data.val.batches) val_windows += b.batch;
  for (const Batch& b : data.test.batches) test_windows += b.batch;
  ASSERT_GT(val_windows, 0);
  // Validation after step 1 (eval_every) and at the end, in fp32 and own precision; test at the end only.
  EXPECT_EQ(prof.outside_units("evaluation: val fp32"), 2 * val_windows);
  EXPECT_EQ(prof.outside_units("evaluation: val own"), 2 * val_windows);
  EXPECT_EQ(prof.outside_units("evaluation: test fp32"), test_windows);
  EXPECT_GT(prof.outside_seconds("evaluation: val own"), 0);
  EXPECT_EQ(prof.outside_units("no such pass"), 0);
  std::ostringstream table, csv;
  prof.print(table);
  prof.write_csv(csv);
  EXPECT_NE(table.str().find("outside the steps"), std::string::npos);
  EXPECT_NE(table.str().find("evaluation: test fp32"), std::string::npos);
  EXPECT_NE(csv.str().find("\nevaluation: val fp32,outside," + std::to_string(2 * val_windows) + ","),
            std::string::npos);
}

}  // namespace
}  // namespace roundoff::studies::train
