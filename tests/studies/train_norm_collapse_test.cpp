// RMSNorm collapse: a row whose Σx² overflows the norm's compute format has rstd = 1/√inf = 0 and turns into
// zeros without any inf in the op's output; the trainer must still report it with its step and site.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

nlohmann::json run_injected(const std::string& policy_text, double factor) {
  omp_set_num_threads(1);
  const ModelConfig c = testing::small_config(16, 16, 2);
  const TrainData& data = testing::excerpt_data(c);
  const ops::Policy policy = ops::load_policy(policy_text);
  Transformer own(c, ResidualScale::None, policy, 3), fp32(c, ResidualScale::None, ops::Policy::preset("fp32"), 3);
  // Layer 0's FFN output ×factor at step 2: the fp16 stream stays finite (|x| < 65504) but layer 1's Σx² does not.
  own.inject(2, ops::OpKind::Matmul, 0, "w2", factor);
  TrainOptions o;
  o.config = c;
  o.steps = 4;
  o.recipe.warmup = 2;
  o.progress_every = 0;
  o.loss_scale = LossScaleSpec::parse("none");
  o.policy = policy.canonical();
  o.out = testing::fresh_dir("norm_collapse_" + policy_text);
  Trainer t(o, own, fp32, data, nullptr);
  return t.run();
}

TEST(TrainRangeEvents, Fp16NormSumOfSquaresOverflowIsReported) {
  const auto s = run_injected("ane-fp16,rmsnorm.fwd=fp16", 3e5);
  ASSERT_FALSE(s["first_collapsed_norm_step"].is_null()) << s.dump();
  EXPECT_EQ(s["first_collapsed_norm_step"], 2);
  EXPECT_EQ(s["first_collapsed_norm"], "rmsnorm.fwd(ln1)[layer 1]");
  EXPECT_TRUE(s["first_nonfinite_step"].is_null()) << "the collapse must not show up as inf/NaN: " << s.dump();
}

TEST(TrainRangeEvents, Fp32NormDoesNotCollapseOnTheSameInjection) {
  const auto s = run_injected("ane-fp16", 3e5);  // RMSNorm in fp32: the same Σx² (≈ 10⁵–10⁶) is representable
  EXPECT_TRUE(s["first_collapsed_norm_step"].is_null()) << s.dump();
  EXPECT_EQ(s["collapsed_norm_steps"], 0);
}

}  // namespace
}  // namespace roundoff::studies::train
