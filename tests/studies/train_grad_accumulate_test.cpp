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
#include <limits>
#include <span>
#include <stdexcept>
#include <utility>
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

// accumulate_and_clear_binary32 (the binary32 sums of finish_gradients and finish_slice) against its definition:
// the total widened, accumulate_and_clear (the binary64 sum rounded to fp32) and narrowed back. Operand pairs
// chosen where a wrong binary32 sum would show: ties of the last place (to even), sums just above and below a tie
// (a double rounding through a narrower format would break them), far-apart exponents, subnormal sums, cancellation
// to ±0, signed zeros, and random values across binary32's whole range; then the refusals: a non-finite micro
// value or sum, each leaving total and micro as they were.
TEST(TrainGradAccumulate, Binary32SumsEqualTheWidenedDefinition) {
  std::vector<std::pair<float, float>> pairs = {
      {1.0f, 0x1p-24f},                   // a tie: stays at 1 (even)
      {1.0f + 0x1p-23f, 0x1p-24f},        // a tie: rounds up to even
      {1.0f, 0x1p-24f + 0x1p-47f},        // just above the tie
      {1.0f, 0x1p-24f - 0x1p-48f},        // just below
      {-1.0f, -0x1p-24f},                 // negative tie
      {0x1p100f, 0x1p-100f},              // far apart
      {0x1p-126f, -0x1p-127f},            // subnormal result
      {0x1p-149f, 0x1p-149f},             // subnormals
      {3.0f, -3.0f},                      // cancellation: +0
      {-0.0f, -0.0f},                     // -0
      {-0.0f, 0.0f},                      // +0
      {0x1.fffffep127f, -0x1p103f},       // near the largest value
  };
  std::uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::uint32_t>(state >> 32);
  };
  while (pairs.size() < kAccumulatePiece) {
    float a = std::bit_cast<float>(next()), b = std::bit_cast<float>(next());
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    if (pairs.size() % 2 == 0) b = std::ldexp(a, -static_cast<int>(next() % 30)) * ((next() & 1) ? 1.0f : -1.0f);
    if (std::isfinite(a + b)) pairs.emplace_back(a, b);
  }
  for (const bool first : {false, true}) {
    std::vector<float> total32(pairs.size()), micro32(pairs.size());
    std::vector<double> total64(pairs.size()), micro64(pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      total32[i] = pairs[i].first;
      micro32[i] = pairs[i].second;
      total64[i] = pairs[i].first;
      micro64[i] = pairs[i].second;
    }
    accumulate_and_clear(total64, micro64, first);
    ASSERT_TRUE(accumulate_and_clear_binary32(total32, micro32, first));
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const std::string what = (first ? "first, " : "") + std::string("pair ") + std::to_string(i);
      ASSERT_EQ(std::bit_cast<std::uint32_t>(total32[i]), std::bit_cast<std::uint32_t>(static_cast<float>(total64[i])))
          << what;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(micro32[i]), 0u) << what;
    }
  }
  // Refused: nothing written, so the caller's widened path sees the operands as they were.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::pair<float, float> refused[] = {{1.0f, inf}, {1.0f, nan}, {inf, 1.0f}, {nan, 1.0f},
                                             {0x1.fffffep127f, 0x1.fffffep127f}};  // the sum overflows
  for (const auto& [t, m] : refused) {
    std::vector<float> total = {2.0f, t}, micro = {3.0f, m};
    EXPECT_FALSE(accumulate_and_clear_binary32(total, micro, false)) << t << " + " << m;
    EXPECT_EQ(total[0], 2.0f);
    EXPECT_EQ(micro[0], 3.0f);
  }
  std::vector<float> first_total = {2.0f}, first_micro = {inf};
  EXPECT_FALSE(accumulate_and_clear_binary32(first_total, first_micro, true));
  std::vector<float> longer(3);
  EXPECT_THROW(accumulate_and_clear_binary32(longer, std::span<float>(longer).first(2), false), std::logic_error);
}

}  // namespace
}  // namespace roundoff::studies::train
