// nf4-dq (QLoRA's double quantization, numerics/block_format.hpp "Double quantization") against the rule written
// out a second way: the offset as the exact mean rounded once (the sum exact in binary64 for these inputs), each
// code as the count of the dynamic map's fp32 midpoints below t, a tie on a midpoint going to the even index (where
// bitsandbytes' binary search ends), the decoded scales and values in fp32 steps; the nf4 codes equal nf4's.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "numerics/block_format.hpp"
#include "numerics/round.hpp"

using namespace roundoff::numerics;

namespace {

std::uint32_t code_by_midpoints(float t) {
  if (std::isnan(t)) return 0;
  const float* d = dynamic_map_8bit();
  std::uint32_t c = 0;
  for (int i = 0; i < 255; ++i) {
    const float m = (d[i] + d[i + 1]) * 0.5f;
    if (m < t) ++c;
    else if (m == t) return (i % 2 == 0) ? static_cast<std::uint32_t>(i) : static_cast<std::uint32_t>(i + 1);
  }
  return c;
}

}  // namespace

TEST(Nf4DoubleQuant, DynamicMapIsBitsandbytesSigned8BitMap) {
  const float* d = dynamic_map_8bit();
  for (int i = 0; i < 255; ++i) EXPECT_LT(d[i], d[i + 1]) << i;
  EXPECT_EQ(d[127], 0.0f);
  EXPECT_EQ(d[255], 1.0f);
  // i = 0 has 2 boundaries (0.1, 1): one midpoint 0.55 · 10^-6; the largest magnitude below 1: 10^0 · the last
  // midpoint of linspace(0.1, 1, 65).
  EXPECT_EQ(d[128], 0.55f * 1e-6f);
  EXPECT_EQ(d[126], -d[128]);
  EXPECT_EQ(d[0], -d[254]);
}

TEST(Nf4DoubleQuant, FollowsTheWrittenOutRule) {
  const BlockFormat dq = parse_block_format("nf4-dq"), nf4 = parse_block_format("nf4");
  EXPECT_EQ(dq.scale_block, 256);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> e(-6.0, 6.0);
  for (std::size_t blocks : {std::size_t{1}, std::size_t{5}, std::size_t{256}, std::size_t{300}, std::size_t{1000}}) {
    std::vector<double> x(blocks * 64);
    for (std::size_t j = 0; j < blocks; ++j) {
      const double s = std::exp2(std::round(e(rng)));
      for (std::size_t i = 0; i < 64; ++i) x[j * 64 + i] = static_cast<float>(g(rng) * s);
    }
    if (blocks == 5) std::fill(x.begin() + 64, x.begin() + 128, 0.0);  // an all-zero block: S = 0
    const BlockCodes q = quantize(dq, x, 64);
    const BlockCodes r = quantize(nf4, x, 64);
    ASSERT_EQ(q.codes, r.codes);
    ASSERT_EQ(q.scales.size(), blocks);
    // offset: the exact sum (exact in binary64: fp32 values within 2^-7..2^9) over n, rounded once to fp32
    double sum = 0;
    for (std::uint32_t s : r.scales) sum += static_cast<double>(std::bit_cast<float>(s));
    const double n = static_cast<double>(blocks), m = sum / n;
    const auto offset = static_cast<float>(round_pair(RoundingPlan(formats::fp32), Rounding::NearestEven, m,
                                                      std::fma(-m, n, sum) / n));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(q.scale_offset), std::bit_cast<std::uint32_t>(offset)) << blocks;
    ASSERT_EQ(q.scale_scales.size(), (blocks + 255) / 256);
    std::vector<float> want_scale(blocks);
    for (std::size_t k = 0; k < q.scale_scales.size(); ++k) {
      float a = 0;
      const std::size_t end = std::min(blocks, (k + 1) * 256);
      for (std::size_t j = k * 256; j < end; ++j) a = std::max(a, std::fabs(std::bit_cast<float>(r.scales[j]) - offset));
      ASSERT_EQ(std::bit_cast<float>(q.scale_scales[k]), a);
      for (std::size_t j = k * 256; j < end; ++j) {
        const float t = (std::bit_cast<float>(r.scales[j]) - offset) * (1.0f / a);
        ASSERT_EQ(q.scales[j], code_by_midpoints(t)) << "block " << j << " t=" << t;
        want_scale[j] = dynamic_map_8bit()[q.scales[j]] * a + offset;
      }
    }
    const std::vector<float> got = double_quantized_scales(dq, q.scales, q.scale_scales, q.scale_offset);
    ASSERT_EQ(got, want_scale);
    const std::vector<double> v = dequantize(dq, q, formats::fp32);
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(v[i], static_cast<double>(nf4_codebook()[q.codes[i]] * want_scale[i / 64])) << i;
  }
}

TEST(Nf4DoubleQuant, TiesOnAMidpointGoToTheEvenIndexAndBadInputIsRefused) {
  const float* d = dynamic_map_8bit();
  // t exactly on the fp32 midpoint of D[i] and D[i+1] for a few i: the binary search's final even pivot wins.
  const BlockFormat dq = parse_block_format("nf4-dq");
  for (int i : {3, 4, 100, 127, 128, 200, 253, 254}) {
    const float mid = (d[i] + d[i + 1]) * 0.5f;
    EXPECT_EQ(code_by_midpoints(mid), static_cast<std::uint32_t>(i % 2 == 0 ? i : i + 1));
  }
  // One block with three scales: mean m, c = S − m; the largest |c| gives t = ±1 → codes 0 (−0.99…) or 255 (1).
  const BlockCodes q = quantize(dq, std::vector<double>(64, 1.0), 64);
  EXPECT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(q.scale_offset, 1.0f);
  EXPECT_EQ(q.scales[0], 0u);  // c = 0, A = 0: t = NaN → 0, decoding to 0 · 0 + 1 = 1
  EXPECT_EQ(dequantize(dq, q, formats::fp32)[5], 1.0);
  try {
    dequantize(dq, q.codes, q.scales, 1.0f, formats::fp32);
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("double-quantized"), std::string::npos) << e.what();
  }
}
