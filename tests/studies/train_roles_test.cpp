// The tensor roles the trainer honours (issue 11): the forward reads a `weights`-format copy of the masters,
// and the unscaled gradients, their norm and the clip stay in binary64 under the fp64 policy.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/round.hpp"
#include "studies/train/model.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using namespace testing;
namespace fmts = numerics::formats;

struct Pass {
  double loss;
  std::vector<double> grads;
};

Pass run(const std::string& policy, std::span<const double> w, const ModelConfig& c, const Batch& b) {
  Transformer model(c, ResidualScale::None, ops::load_policy(policy), 1);
  Pass p{0, std::vector<double>(w.size())};
  StepTelemetry tel;
  p.loss = model.loss_and_grad(b, w, 1.0, p.grads, tel);
  return p;
}

TEST(TrainRoles, ForwardReadsTheWeightsRoleCopy) {
  const ModelConfig c = small_config(16, 16, 2);
  const std::vector<double> master = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 5);
  std::vector<double> bf16(master.size());
  numerics::round_array(numerics::RoundingPlan(fmts::bf16), numerics::Rounding::NearestEven, master, bf16);
  ASSERT_NE(master, bf16);  // the masters are fp32 values, most not bf16 values
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);

  const Pass staged = run("fp32,weights=bf16", master, c, b);
  const Pass by_hand = run("fp32", bf16, c, b);
  const Pass plain = run("fp32", master, c, b);
  // weights=bf16 is exactly the fp32 model on bf16-rounded weights (gradients taken at those weights) ...
  EXPECT_EQ(staged.loss, by_hand.loss);
  EXPECT_EQ(staged.grads, by_hand.grads);
  // ... and not the fp32 model on the masters (what it was when the role was ignored).
  EXPECT_NE(staged.loss, plain.loss);
  // The fp32 default is unchanged: its copy of fp32 masters is the masters, bit for bit.
  const Pass identity = run("fp32,weights=fp64", master, c, b);
  EXPECT_EQ(identity.loss, plain.loss);
  EXPECT_EQ(identity.grads, plain.grads);
}

TEST(TrainRoles, EvaluationReadsTheWeightsRoleCopyToo) {
  const ModelConfig c = small_config(16, 16, 2);
  const std::vector<double> master = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 5);
  std::vector<double> bf16(master.size());
  numerics::round_array(numerics::RoundingPlan(fmts::bf16), numerics::Rounding::NearestEven, master, bf16);
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);
  Transformer staged(c, ResidualScale::None, ops::load_policy("fp32,weights=bf16"), 1);
  Transformer plain(c, ResidualScale::None, ops::Policy::preset("fp32"), 1);
  EXPECT_EQ(staged.total_loss(b, master), plain.total_loss(b, bf16));
}

TEST(TrainRoles, UpdateFormatFollowsTheGradsRoleButNeverBelowFp32) {
  EXPECT_EQ(update_format(fmts::fp64), fmts::fp64);
  EXPECT_EQ(update_format(fmts::fp32), fmts::fp32);
  EXPECT_EQ(update_format(fmts::fp16), fmts::fp32);
  EXPECT_EQ(update_format(fmts::bf16), fmts::fp32);
  EXPECT_EQ(update_format(ops::Policy::preset("fp64").storage_for(ops::TensorRole::Gradient)), fmts::fp64);
  for (const char* p : {"fp32", "ane-fp16", "amp-fp16", "amp-bf16", "pure-fp16", "pure-bf16"})
    EXPECT_EQ(update_format(ops::Policy::preset(p).storage_for(ops::TensorRole::Gradient)), fmts::fp32) << p;
}

TEST(TrainRoles, Fp64GradientsAreNotRoundedToFp32) {
  const double g0 = 1.0 + 0x1p-40;  // a binary64 value that fp32 rounds to 1
  std::vector<double> g{g0 * 1024, -3 * g0 * 1024};
  ASSERT_TRUE(unscale_gradients(g, 1024, 1, fmts::fp64));
  EXPECT_EQ(g[0], g0);
  EXPECT_EQ(g[1], -3 * g0);
  EXPECT_EQ(global_norm(g, fmts::fp64), std::sqrt(g0 * g0 + 9 * g0 * g0));
  EXPECT_EQ(clip_coefficient(10.0, 1.0, fmts::fp64), 1.0 / (10.0 + 1e-6));
  std::vector<double> g32{g0 * 1024};
  ASSERT_TRUE(unscale_gradients(g32, 1024, 1, fmts::fp32));
  EXPECT_EQ(g32[0], 1.0);
}

}  // namespace
}  // namespace roundoff::studies::train

namespace roundoff::studies::train {
namespace {

/// The first non-finite op of one forward+backward at loss scale 2^40 under `policy` (only the named pass
/// of one op is fp16, so it is the first to overflow; everything else is fp32).
std::string first_overflow(const std::string& policy) {
  const ModelConfig c = testing::small_config(16, 16, 2);
  const std::vector<double> w = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 5);
  const Batch b = train_batch(testing::excerpt_data(c).train, c.seq, c.batch, 9, 0);
  Transformer model(c, ResidualScale::None, ops::load_policy(policy), 1);
  std::vector<double> g(w.size());
  StepTelemetry tel;
  (void)model.loss_and_grad(b, w, 0x1p40, g, tel);
  return tel.first_nonfinite_op;
}

TEST(TrainAttribution, EveryOpOutputIsScannedAndNamed) {
  // Weight-gradient GEMMs, norm-gain gradients and RoPE backward were not scanned: their overflow was reported
  // as the whole gradient buffer's ("embedding.bwd-weight(grads)") or as the next op's.
  EXPECT_EQ(first_overflow("fp32,matmul.bwd-weight=fp16").rfind("matmul.bwd-weight(w2)[layer ", 0), 0u)
      << first_overflow("fp32,matmul.bwd-weight=fp16");
  EXPECT_EQ(first_overflow("fp32,rmsnorm.bwd-weight=fp16"), "rmsnorm.bwd-weight(lnfw)");
  EXPECT_EQ(first_overflow("fp32,rope.bwd-data=fp16").rfind("rope.bwd-data(dq)[layer ", 0), 0u)
      << first_overflow("fp32,rope.bwd-data=fp16");
  EXPECT_EQ(first_overflow("fp32,embedding.bwd-weight=fp16"), "embedding.bwd-weight(wte)");
  EXPECT_EQ(first_overflow("fp32,grads=fp16").rfind("grads-role rounding(", 0), 0u) << first_overflow("fp32,grads=fp16");
  EXPECT_EQ(first_overflow("fp32"), "");
}

}  // namespace
}  // namespace roundoff::studies::train
