// A micro-step of an accumulated update through Transformer::loss_and_grad_accumulate (the gradient-role
// rounding, its finiteness scan, the fp32 sum into the update's total and the clearing of the micro-step buffer in
// one pass) against its definition, Model's default: loss_and_grad, accumulate_gradients, zeroing. Same loss,
// total and first non-finite tensor, bit for bit, over three micro-steps (the first overwrites the total; the
// later ones reuse the cleared buffer without zeroing it), for presets whose gradient role is fp32 and fp64, a
// bf16 gradient role over fp32 gradients (the role rounding changes values), an
// fp16 gradient role, stochastic rounding, and a loss scale that overflows the fp16 gradients.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/optimizer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

bool same(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

TEST(TrainGradAccumulate, FusedMicroStepsEqualTheDefinition) {
  ModelConfig c = testing::small_config(16, 8, 2);
  c.heads = 4;
  c.kv_heads = 2;
  const Recipe r;
  const std::vector<double> w = init_params(c, r, residual_rule(ResidualScale::None, c.layers), 3);
  const auto data = testing::excerpt_data(c);
  struct Case {
    std::string policy;
    double scale;
  };
  const Case cases[] = {{"fp32", 1.0},
                        {"fp64", 1.0},
                        {"ane-fp16", 256.0},
                        {"pure-fp16", 1.0},
                        {"fp32,grads=bf16", 1.0},  // the gradient role rounds the fp32 gradients
                        {"ane-fp16,all.rounding=stochastic", 1.0},
                        {"pure-fp16", 0x1p40}};  // fp16 gradients overflow: a tensor is named
  for (const Case& k : cases) {
    const ops::Policy pol = ops::Policy::parse(k.policy);
    Transformer fused(c, ResidualScale::None, pol, 7), plain(c, ResidualScale::None, pol, 7);
    std::vector<double> micro_f(w.size(), 5.0), micro_p(w.size()), total_f(w.size(), 3.0), total_p(w.size(), 3.0);
    for (int j = 0; j < 3; ++j) {
      const Batch b = train_batch(data.train, c.seq, c.batch, 11, j);
      StepTelemetry tf, tp;
      tf.step = tp.step = j;
      const double lf = fused.loss_and_grad_accumulate(b, w, k.scale, micro_f, total_f, j == 0, tf);
      const double lp = plain.Model::loss_and_grad_accumulate(b, w, k.scale, micro_p, total_p, j == 0, tp);
      const std::string what = k.policy + " scale " + std::to_string(k.scale) + " micro-step " + std::to_string(j);
      ASSERT_TRUE(same(lf, lp)) << what;
      EXPECT_EQ(tf.first_nonfinite_op, tp.first_nonfinite_op) << what;
      for (std::size_t i = 0; i < w.size(); ++i) {
        ASSERT_TRUE(same(total_f[i], total_p[i])) << what << " total element " << i;
        ASSERT_EQ(std::bit_cast<std::uint64_t>(micro_f[i]), 0u) << what << " micro element " << i << " not +0";
      }
      if (k.scale == 0x1p40) {
        EXPECT_FALSE(tf.first_nonfinite_op.empty()) << what;
      }
    }
  }
}

}  // namespace
}  // namespace roundoff::studies::train
