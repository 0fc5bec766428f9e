// Block-scaled quantization (numerics/block_format.hpp): each rule on adversarial blocks against a
// written-out definition (amax at a binade edge, amax / X above the element max, all zeros, NaN/Inf in a
// block, subnormal elements, one nonzero, scales clamped at 2^-127), quantize -> dequantize -> quantize, and
// one-line refusals of bad input.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "numerics/block_format.hpp"
#include "numerics/round.hpp"

using namespace roundoff::numerics;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> block_with(int n, std::initializer_list<std::pair<int, double>> set) {
  std::vector<double> v(static_cast<std::size_t>(n), 0.0);
  for (auto [i, x] : set) v[static_cast<std::size_t>(i)] = x;
  return v;
}

/// f() must throw std::invalid_argument whose one-line message contains `needle`.
template <class F>
void refused(F f, const char* needle) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << needle;
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

/// The MX definition written out: X = 2^s with s from the rule, elements round(V/X) saturated (via the
/// MPFR-tested round_to of the element format), NaN scale for NaN/Inf.
void expect_mx_definition(const BlockFormat& b, const std::vector<double>& x) {
  const BlockCodes q = quantize(b, x, x.size());
  const std::size_t k = static_cast<std::size_t>(b.block_size);
  for (std::size_t j = 0; j < x.size() / k; ++j) {
    double amax = 0;
    bool special = false;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      special |= !std::isfinite(x[i]);
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    }
    int s = -127;
    if (b.rule == ScaleRule::MlxRound) {
      // q = fp32(fp32(amax) / max), each step one rounding of the exact value (round_pair on the remainder);
      // s = the integer nearest log2 q, found by search: the smallest s with q² < 2^(2s+1).
      const double a32 = round_to(formats::fp32, Rounding::NearestEven, amax), m = element_max(b.element);
      special |= std::isinf(a32);
      const double t = a32 / m;
      const double ratio = a32 == 0 || special ? 0.0
                                               : round_pair(RoundingPlan(formats::fp32), Rounding::NearestEven, t,
                                                            std::fma(-t, m, a32) / m);
      if (ratio > 0) {
        s = -1100;
        while (ratio * ratio >= std::ldexp(1.0, 2 * s + 1)) ++s;
        s = std::min(s, 127);
      }
    } else if (amax > 0) {
      if (b.rule == ScaleRule::OcpFloor) {
        s = -1100;
        while (std::ldexp(1.0, s + 1) <= amax) ++s;  // floor(log2 amax) by search
        s -= element_emax(b.element);
      } else {
        s = -1200;
        while (element_max(b.element) * std::ldexp(1.0, s) < amax) ++s;  // smallest s with max·2^s >= amax
      }
    }
    if (special || s > 127) {
      EXPECT_EQ(q.scales[j], 0xFF) << b.name << " block " << j;
      for (std::size_t i = j * k; i < (j + 1) * k; ++i) EXPECT_EQ(q.codes[i], 0) << b.name;
      continue;
    }
    s = std::max(s, -127);
    ASSERT_EQ(q.scales[j], s + 127) << b.name << " block " << j << " amax " << amax;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      const double t = std::ldexp(x[i], -s);  // exact for these inputs
      double want = 0;
      if (b.element.is_int) {
        const double u = std::nearbyint(std::ldexp(t, b.element.fraction_bits));  // ties to even (default mode)
        want = std::ldexp(std::clamp(u, -127.0, 127.0), -b.element.fraction_bits);
      } else {
        want = round_to(b.element.fp, Rounding::NearestEven, t);
      }
      EXPECT_EQ(element_value(b.element, q.codes[i]), want) << b.name << " x=" << x[i];
      EXPECT_EQ(std::signbit(element_value(b.element, q.codes[i])), b.element.is_int ? want < 0 : std::signbit(x[i]))
          << b.name << " x=" << x[i];
    }
  }
}

std::vector<double> random_tensor(std::mt19937_64& rng, std::size_t n, double spread) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> e(-spread, spread);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<double>(static_cast<float>(g(rng) * std::exp2(std::round(e(rng)))));
  return v;
}

}  // namespace

TEST(BlockFormat, NamesParseAndBadInputIsRefusedInOneLine) {
  for (const auto& n : block_format_names()) EXPECT_EQ(parse_block_format(n).name, n);
  EXPECT_EQ(parse_block_format("mxfp4:nv-ceil").rule, ScaleRule::NvidiaCeil);
  EXPECT_EQ(parse_block_format("mxfp4:ocp-floor").name, "mxfp4");
  refused([] { parse_block_format("mxfp5"); }, "unknown block format 'mxfp5'; valid: mxfp8-e4m3");
  refused([] { parse_block_format("nvfp4:nv-ceil"); }, "only MX formats take a rule");
  refused([] { parse_block_format("mxfp4:round"); }, "valid: ocp-floor, nv-ceil");
  const std::vector<double> x(48, 1.0);
  refused([&] { quantize(parse_block_format("mxfp4"), x, 48); }, "block size 32 does not divide the axis length 48");
  refused([&] { quantize(parse_block_format("int4-g32"), block_with(32, {{3, kInf}}), 32); }, "is not finite");
  refused([&] { quantize(parse_block_format("nvfp4"), block_with(16, {{3, std::nan("")}}), 16); }, "is not finite");
  const BlockFormat b = parse_block_format("mxfp4");
  refused([&] { dequantize(b, std::vector<std::uint8_t>(32), std::vector<std::uint32_t>(2), 1, formats::fp64); },
          "need 1 scales");
}

TEST(BlockFormat, MxFloorOnAdversarialBlocks) {
  const BlockFormat fp4 = parse_block_format("mxfp4");
  // amax exactly at a binade edge: 4 = 2^2 -> s = 2 - 2 = 0; 0.25 is a tie between 0 and 0.5 -> 0.
  auto q = quantize(fp4, block_with(32, {{0, 4.0}, {1, 0.25}, {2, -0.75}}), 32);
  EXPECT_EQ(q.scales[0], 127);
  EXPECT_EQ(q.codes[0], 0x6);   // 4
  EXPECT_EQ(q.codes[1], 0x0);   // 0.25 -> 0 (even)
  EXPECT_EQ(q.codes[2], 0xA);   // -0.75 -> -1 (tie to even significand)
  // amax / X above the element max: 7.5 -> s = 0, 7.5 saturates to 6.
  q = quantize(fp4, block_with(32, {{5, 7.5}, {6, -7.9}}), 32);
  EXPECT_EQ(q.scales[0], 127);
  EXPECT_EQ(q.codes[5], 0x7);
  EXPECT_EQ(q.codes[6], 0xF);
  // All zeros: the smallest scale 2^-127, codes 0 (a negative zero keeps its sign bit).
  q = quantize(fp4, block_with(32, {{7, -0.0}}), 32);
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(q.codes[0], 0);
  EXPECT_EQ(q.codes[7], 0x8);
  // NaN or Inf in the block: NaN scale (all ones), every code 0, every value NaN.
  for (double bad : {std::nan(""), kInf, -kInf}) {
    q = quantize(fp4, block_with(64, {{1, 2.0}, {40, bad}}), 64);
    EXPECT_EQ(q.scales[0], 127 + 1 - 2);
    EXPECT_EQ(q.scales[1], 0xFF);
    const auto v = dequantize(fp4, q.codes, q.scales, q.tensor_scale, formats::fp64);
    EXPECT_EQ(v[1], 2.0);
    EXPECT_TRUE(std::isnan(v[33]));
  }
  // One nonzero: -3 -> s = 1 - 2 = -1, -3 / 2^-1 = -6.
  q = quantize(fp4, block_with(32, {{9, -3.0}}), 32);
  EXPECT_EQ(q.scales[0], 126);
  EXPECT_EQ(q.codes[9], 0xF);
  // Subnormal elements of E4M3: amax 448 -> s = 0; 2^-9 is the smallest subnormal, 1.5·2^-9 a tie -> 2^-8.
  const BlockFormat e4m3 = parse_block_format("mxfp8-e4m3");
  q = quantize(e4m3, block_with(32, {{0, 448.0}, {1, 0x1p-9}, {2, 0x1.8p-9}, {3, 0x1p-11}, {4, 500.0}}), 32);
  EXPECT_EQ(q.scales[0], 127 + 8 - 8);
  EXPECT_EQ(q.codes[1], 0x01);
  EXPECT_EQ(q.codes[2], 0x02);
  EXPECT_EQ(q.codes[3], 0x00);
  EXPECT_EQ(q.codes[4], 0x7E);  // 500 / 1 -> 448 saturated (not the NaN 0x7F)
  // Clamped scale: amax 2^-140 -> s = -142 clamps to -127; 2^-140 / 2^-127 = 2^-13 rounds to 0.
  q = quantize(fp4, block_with(32, {{0, 0x1p-140}}), 32);
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(q.codes[0], 0);
  // Scale above 2^127 (only float64 inputs reach it): NaN scale.
  q = quantize(parse_block_format("mxint8"), block_with(32, {{0, 0x1p200}}), 32);
  EXPECT_EQ(q.scales[0], 0xFF);
  // mxint8: q / 64 with q in [-127, 127]; amax 3 -> s = 1, 3 / 2 = 1.5 = 96 / 64; -2^s·2 saturates to -127.
  q = quantize(parse_block_format("mxint8"), block_with(32, {{0, 3.0}, {1, -0x1.ffp1}, {2, 0x1p-6}}), 32);
  EXPECT_EQ(q.scales[0], 128);
  EXPECT_EQ(q.codes[0], 96);
  EXPECT_EQ(q.codes[1], static_cast<std::uint8_t>(-127));
  EXPECT_EQ(q.codes[2], 0);  // 2^-6 / 2 = 2^-7 = 0.5 / 64: a tie -> 0
  // Every adversarial block above and random blocks against the written-out definition, every MX name.
  std::mt19937_64 rng(41);
  for (const auto& name : {"mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e3m2", "mxfp6-e2m3", "mxfp4", "mxint8",
                           "mxfp8-e4m3:nv-ceil", "mxfp4:nv-ceil", "mxfp6-e2m3:nv-ceil", "mxint8:nv-ceil",
                           "mxfp4:mlx-round", "mxfp8-e4m3:mlx-round", "mxfp6-e3m2:mlx-round", "mxint8:mlx-round"}) {
    const BlockFormat b = parse_block_format(name);
    auto x = random_tensor(rng, 32 * 64, 20);
    for (std::size_t i = 0; i < 32; ++i) x[i] = 0;                               // all zeros
    x[32] = 4.0;                                                                  // binade edge
    x[64] = 7.75;                                                                 // above max / binade
    for (std::size_t i = 96; i < 128; ++i) x[i] = i == 96 ? 0x1p-140 : 0.0;       // clamped scale
    x[130] = std::nan("");                                                        // NaN block
    x[170] = -kInf;                                                               // Inf block
    for (std::size_t i = 192; i < 224; ++i) x[i] = i == 200 ? -3.0 : 0.0;         // one nonzero
    for (std::size_t i = 224; i < 256; ++i) x[i] = std::ldexp(static_cast<double>(i), -150);  // tiny
    for (std::size_t i = 256; i < 352; ++i) x[i] = 0.0;
    x[260] = 6 * 0x1.6a09e8p0;  // amax/6 near 2^(1/2), the fp32 neighbour above it
    x[290] = 6 * 0x1.6a09e6p0;  // ... and the one below
    x[330] = 0x1p300;           // overflows fp32: NaN under mlx-round, 2^(300 - emax) > 2^127 -> NaN elsewhere
    expect_mx_definition(b, x);
  }
}

TEST(BlockFormat, NvidiaCeilNeverSaturatesAndDiffersFromFloorWhereOcpSaturates) {
  const BlockFormat floor4 = parse_block_format("mxfp4"), ceil4 = parse_block_format("mxfp4:nv-ceil");
  // 7.5: floor gives X = 1 and saturates to 6; ceil gives X = 2^ceil(log2 1.25) = 2, 3.75 -> 4.
  auto q = quantize(ceil4, block_with(32, {{0, 7.5}}), 32);
  EXPECT_EQ(q.scales[0], 128);
  EXPECT_EQ(q.codes[0], 0x6);
  EXPECT_EQ(quantize(floor4, block_with(32, {{0, 7.5}}), 32).codes[0], 0x7);
  // amax exactly max·2^k: both rules agree (6 -> X = 1 under ceil; floor(log2 6) - 2 = 0 under floor).
  EXPECT_EQ(quantize(ceil4, block_with(32, {{0, 6.0}}), 32).scales[0], 127);
  EXPECT_EQ(quantize(floor4, block_with(32, {{0, 6.0}}), 32).scales[0], 127);
  std::mt19937_64 rng(7);
  const auto x = random_tensor(rng, 32 * 200, 30);
  for (const auto& name : {"mxfp8-e4m3:nv-ceil", "mxfp6-e3m2:nv-ceil", "mxfp4:nv-ceil"}) {
    const BlockFormat b = parse_block_format(name);
    const auto c = quantize(b, x, x.size());
    for (std::size_t j = 0; j < c.scales.size(); ++j) {
      double amax = 0;
      for (std::size_t i = j * 32; i < (j + 1) * 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      EXPECT_LE(amax / scale_value(ScaleFormat::E8M0, c.scales[j]), element_max(b.element)) << name;
      EXPECT_GT(amax / scale_value(ScaleFormat::E8M0, c.scales[j]), element_max(b.element) / 2) << name;
    }
  }
}

TEST(BlockFormat, Nvfp4FollowsTheWrittenOutFp32Chain) {
  const BlockFormat b = parse_block_format("nvfp4");
  EXPECT_EQ(b.block_size, 16);
  std::mt19937_64 rng(3);
  auto x = random_tensor(rng, 16 * 64, 12);
  for (std::size_t i = 0; i < 16; ++i) x[i] = 0;                                    // all-zero block
  for (std::size_t i = 16; i < 32; ++i) x[i] = i == 20 ? 1e-30 : 0.0;               // tiny: S_dec rounds to 0
  const auto q = quantize(b, x, x.size());
  // Written out (docs/numerics.md): every step one fp32 operation.
  float amax_t = 0;
  for (double v : x) amax_t = std::max(amax_t, std::fabs(static_cast<float>(v)));
  float s_enc = 2688.0f / amax_t;
  if (std::isinf(s_enc)) s_enc = FLT_MAX;
  EXPECT_EQ(q.tensor_scale, s_enc);
  const float sixth = 1.0f / 6.0f;
  for (std::size_t j = 0; j < 64; ++j) {
    float amax = 0;
    for (std::size_t i = j * 16; i < (j + 1) * 16; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
    const float scaled = amax * (s_enc * sixth);
    const double s_dec = round_to(formats::e4m3, Rounding::NearestEven, std::fmin(scaled, 448.0f));
    ASSERT_EQ(scale_value(ScaleFormat::UE4M3, q.scales[j]), s_dec) << j;
    float enc = 1.0f / (static_cast<float>(s_dec) * (1.0f / s_enc));
    if (std::isinf(enc)) enc = FLT_MAX;
    for (std::size_t i = j * 16; i < (j + 1) * 16; ++i) {
      const float t = static_cast<float>(x[i]) * enc;
      const double want = round_to(formats::e2m1, Rounding::NearestEven, static_cast<double>(t));
      ASSERT_EQ(element_value(b.element, q.codes[i]), want) << i;
    }
  }
  EXPECT_EQ(q.scales[0], 0);  // all-zero block: S_dec = 0, codes 0
  // The element ties of rn-satfinite E2M1 (x·enc = 1 exactly when the tensor is one block with amax 6·2^k).
  const std::vector<double> ties = {6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 5.5, 0, 0, 0, 0, 0};
  const auto t = quantize(b, ties, 16);
  const double want[] = {6, 0, 1, 1, 2, 2, 4, 4, -0.0, -4, 6, 0, 0, 0, 0, 0};
  EXPECT_EQ(scale_value(ScaleFormat::UE4M3, t.scales[0]), 448.0);
  for (std::size_t i = 0; i < ties.size(); ++i) EXPECT_EQ(element_value(b.element, t.codes[i]), want[i]) << ties[i];
}

TEST(BlockFormat, Int4GroupsAreSymmetricAbsmaxWithFp16Scales) {
  const BlockFormat b = parse_block_format("int4-g32");
  // amax 7 -> S = fp16(1) = 1; 2.5 -> 2 (ties to even), -7 -> -7, 3.5 -> 4.
  auto q = quantize(b, block_with(32, {{0, 7.0}, {1, 2.5}, {2, -7.0}, {3, 3.5}}), 32);
  EXPECT_EQ(q.scales[0], 0x3C00);
  EXPECT_EQ(q.codes[1], 2);
  EXPECT_EQ(q.codes[2], 0x9);  // -7 in two's complement
  EXPECT_EQ(q.codes[3], 4);
  // amax 1: S = fp16(1/7) (one rounding of the exact quotient); codes round(x / S) exactly.
  std::mt19937_64 rng(5);
  for (const auto& name : {"int4-g32", "int4-g64", "int4-g128"}) {
    const BlockFormat g = parse_block_format(name);
    const auto x = random_tensor(rng, 128 * 8, 10);
    const auto c = quantize(g, x, x.size());
    const auto k = static_cast<std::size_t>(g.block_size);
    for (std::size_t j = 0; j < c.scales.size(); ++j) {
      double amax = 0;
      for (std::size_t i = j * k; i < (j + 1) * k; ++i) amax = std::max(amax, std::fabs(x[i]));
      // x values are floats: amax / 7 in long double has 64 bits, enough to decide fp16 rounding here.
      const double s = scale_value(ScaleFormat::FP16, c.scales[j]);
      const long double ex = static_cast<long double>(amax) / 7.0L;
      EXPECT_LE(std::fabs(static_cast<long double>(s) - ex), std::ldexp(std::fabs(static_cast<double>(ex)), -11))
          << name;
      for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
        const long double u = static_cast<long double>(x[i]) / static_cast<long double>(s);
        const double want = std::clamp(static_cast<double>(std::nearbyint(u)), -8.0, 7.0);
        ASSERT_EQ(element_value(g.element, c.codes[i]), want) << name << " x=" << x[i] << " s=" << s;
      }
    }
  }
  q = quantize(b, std::vector<double>(32, 0.0), 32);
  EXPECT_EQ(q.scales[0], 0);
}

TEST(BlockFormat, QuantizeDequantizeQuantizeIsAFixedPoint) {
  // Not for MLX's rules, whose re-quantization moves values (the next test shows how).
  std::mt19937_64 rng(11);
  for (const auto& name : block_format_names()) {
    for (const std::string rule : {"", ":nv-ceil"}) {
      if (!rule.empty() && !name.starts_with("mx")) continue;
      const BlockFormat b = parse_block_format(name + rule);
      if (b.rule == ScaleRule::AffineMlx || b.scale_block > 0) continue;  // nf4-dq: its scales move with their mean
      auto x = random_tensor(rng, 128 * 16, 16);
      x[5] = 0x1p-140;
      const auto q1 = quantize(b, x, 128);
      for (const Format out : {formats::fp64, formats::fp32}) {
        const auto v1 = dequantize(b, q1.codes, q1.scales, q1.tensor_scale, out, q1.biases, 128);
        const auto q2 = quantize(b, v1, 128);
        const auto v2 = dequantize(b, q2.codes, q2.scales, q2.tensor_scale, out, q2.biases, 128);
        EXPECT_EQ(v1, v2) << b.name << " values";
        if (b.rule == ScaleRule::OcpFloor || (b.rule == ScaleRule::AbsmaxCodebook && out == formats::fp64)) {
          EXPECT_EQ(q1.codes, q2.codes) << b.name;
          EXPECT_EQ(q1.scales, q2.scales) << b.name;
        }
      }
    }
  }
}

TEST(BlockFormat, MlxRulesAreNotIdempotent) {
  // mlx-round: 4.3 -> s = round(log2(4.3 / 6)) = 0, e2m1(4.3) = 4; re-quantizing 4 gives s = round(log2(4/6)) = -1,
  // 4 / 2^-1 = 8 saturates to 6, so the value becomes 3: quantize∘dequantize moves values (OCP's floor does not).
  const BlockFormat r = parse_block_format("mxfp4:mlx-round");
  const auto q1 = quantize(r, block_with(32, {{0, 4.3}}), 32);
  const auto v1 = dequantize(r, q1.codes, q1.scales, 1, formats::fp64);
  const auto q2 = quantize(r, v1, 32);
  const auto v2 = dequantize(r, q2.codes, q2.scales, 1, formats::fp64);
  EXPECT_EQ(v1[0], 4.0);
  EXPECT_EQ(v2[0], 3.0);
  // affine-mlx: the zero point snaps to an integer, so the grid depends on the range, and the range of the
  // decoded values is not the input's. -3 .. 1.3 in 64 steps, 4 bits: edge -3, scale 4.3/15 = 0.2867, q0 =
  // rint(-10.47) = -10, so scale = 0.3 and bias = -3: the grid -3 + 0.3·q tops out at 1.2 (code 14) below 1.3.
  // The second pass sees -3 .. 1.2: scale 0.28, q0 = rint(-10.71) = -11, scale = 3/11, and values move.
  std::vector<double> x(64);
  for (int i = 0; i < 64; ++i) x[static_cast<std::size_t>(i)] = -3.0 + i * (4.3 / 63);
  const BlockFormat a = parse_block_format("mlx-int4-g64");
  const auto a1 = quantize(a, x, 64);
  EXPECT_EQ(from_bits(formats::fp16, a1.scales[0]), round_to(formats::fp16, Rounding::NearestEven, 0.3f));
  const auto w1 = dequantize(a, a1.codes, a1.scales, 1, formats::fp64, a1.biases);
  const auto a2 = quantize(a, w1, 64);
  EXPECT_EQ(from_bits(formats::fp16, a2.scales[0]), round_to(formats::fp16, Rounding::NearestEven, 3.0f / 11.0f));
  EXPECT_NE(dequantize(a, a2.codes, a2.scales, 1, formats::fp64, a2.biases), w1);
}

namespace {

/// NF4 written out: S = fp32(amax); the code is the index of the codebook value nearest to x / S, the lower
/// index on a tie, found by comparing the distances |x - c_i·S| in long double (exact for the inputs below:
/// c_i·S has 48 significant bits and x lies within 2^12 of S, or far from every tie); S = 0 gives code 7.
void expect_nf4_definition(const std::vector<double>& x) {
  const BlockFormat b = parse_block_format("nf4");
  const BlockCodes q = quantize(b, x, x.size());
  const float* c = nf4_codebook();
  const std::size_t k = 64;
  ASSERT_EQ(q.scales.size(), x.size() / k);
  for (std::size_t j = 0; j < x.size() / k; ++j) {
    double amax = 0;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) amax = std::max(amax, std::fabs(x[i]));
    const auto s = static_cast<float>(amax);  // nearest-even
    EXPECT_EQ(q.scales[j], std::bit_cast<std::uint32_t>(s)) << "block " << j;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      int want = 7;
      if (s > 0) {
        long double best = INFINITY;
        for (int t = 0; t < kCodebookSize; ++t) {
          const long double d = std::fabs(static_cast<long double>(x[i]) -
                                          static_cast<long double>(c[t]) * static_cast<long double>(s));
          if (d < best) best = d, want = t;  // strict: a tie keeps the lower index
        }
      }
      EXPECT_EQ(q.codes[i], want) << "x[" << i << "] = " << x[i] << " (S = " << s << ")";
    }
  }
  const auto v = dequantize(b, q.codes, q.scales, 1.0f, formats::fp64);
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(v[i], static_cast<double>(c[q.codes[i]]) * static_cast<double>(std::bit_cast<float>(q.scales[i / k])));
}

}  // namespace

TEST(BlockFormat, Nf4IsTheNearestCodebookValueOfXOverAbsmax) {
  const float* c = nf4_codebook();
  EXPECT_EQ(c[0], -1.0f);
  EXPECT_EQ(c[7], 0.0f);
  EXPECT_EQ(c[15], 1.0f);
  EXPECT_EQ(c[1], -0.6961928009986877f);
  for (int t = 0; t + 1 < kCodebookSize; ++t) EXPECT_LT(c[t], c[t + 1]);
  const BlockFormat b = parse_block_format("nf4");
  EXPECT_EQ(b.block_size, 64);
  EXPECT_EQ(b.scale, ScaleFormat::FP32);
  // All zeros: S = 0, every code 7 (the value 0), values +0.
  {
    const auto q = quantize(b, std::vector<double>(64, 0.0), 64);
    EXPECT_EQ(q.scales[0], 0u);
    EXPECT_EQ(q.codes, std::vector<std::uint8_t>(64, 7));
    expect_nf4_definition(std::vector<double>(64, -0.0));
  }
  // One nonzero, negative: S = 3.5, code 0 (-1·S); the zeros code 7.
  {
    const auto x = block_with(64, {{5, -3.5}});
    const auto q = quantize(b, x, 64);
    EXPECT_EQ(q.codes[5], 0);
    EXPECT_EQ(q.codes[6], 7);
    expect_nf4_definition(x);
  }
  // Ties: with S = 1, each exact midpoint of two codebook values takes the lower code; one ulp either side
  // takes the nearer one.
  for (int t = 0; t + 1 < kCodebookSize; ++t) {
    const double m = (static_cast<double>(c[t]) + static_cast<double>(c[t + 1])) / 2;
    const auto x = block_with(64, {{0, 1.0}, {1, m}, {2, std::nextafter(m, 2.0)}, {3, std::nextafter(m, -2.0)}});
    const auto q = quantize(b, x, 64);
    EXPECT_EQ(q.codes[1], t) << "tie at " << m;
    EXPECT_EQ(q.codes[2], t + 1) << "above " << m;
    EXPECT_EQ(q.codes[3], t) << "below " << m;
    expect_nf4_definition(x);
    // The same ties scaled by a power of two (exact) and by 3 (the product m·3 is exact, and so is S = 3).
    auto y = x;
    for (double& v : y) v *= 0x1p-100;
    expect_nf4_definition(y);
    for (double& v : y) v = v * 0x1p100 * 3;
    const auto q3 = quantize(b, y, 64);
    EXPECT_EQ(q3.codes[1], t) << "tie at 3·" << m;
    expect_nf4_definition(y);
  }
  // A float64 amax that is not an fp32 value: S rounds (here down to 1), so x / S exceeds 1 and takes code 15.
  expect_nf4_definition(block_with(64, {{0, 1 + 0x1p-30}, {1, -0.7}}));
  // An amax that rounds to 0 in fp32 (S = 0): codes 7. An amax below FLT_MIN: a subnormal fp32 scale.
  expect_nf4_definition(block_with(64, {{0, 1e-50}, {1, -3e-51}}));
  expect_nf4_definition(block_with(64, {{0, 3e-41}, {1, -1e-41}, {2, 7e-42}}));
  // Random blocks, float32 and float64 values, scales 2^-60 .. 2^60.
  std::mt19937_64 rng(64);
  std::normal_distribution<double> g;
  std::uniform_int_distribution<int> e(-60, 60);
  for (const bool f32 : {true, false}) {
    std::vector<double> x(64 * 64);
    for (std::size_t j = 0; j < 64; ++j) {
      const int ej = e(rng);
      for (std::size_t i = 0; i < 64; ++i) {
        const double v = std::ldexp(g(rng), ej);
        x[j * 64 + i] = f32 ? static_cast<double>(static_cast<float>(v)) : v;
      }
    }
    expect_nf4_definition(x);
  }
  // Refusals: NaN, inf, an absmax above FLT_MAX.
  const auto refused = [&](const std::vector<double>& x, const char* needle) {
    try {
      quantize(b, x, 64);
      ADD_FAILURE() << "not refused: " << needle;
    } catch (const std::invalid_argument& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  refused(block_with(64, {{3, std::nan("")}}), "is not finite");
  refused(block_with(64, {{3, -kInf}}), "is not finite");
  refused(block_with(64, {{3, 1e39}}), "overflows its fp32 scale");
}

namespace {

/// One binary32 operation written out: the exact result of `op` on two fp32 values, rounded once by the
/// MPFR-tested round_pair (TwoSum / the FMA remainder give the exact value as hi + lo).
double f32_sub(double a, double b) {
  const double hi = a - b, bb = hi - a;
  const double lo = (a - (hi - bb)) + (-b - bb);
  return round_pair(RoundingPlan(formats::fp32), Rounding::NearestEven, hi, lo);
}
double f32_div(double a, double b) {
  const double q = a / b;
  if (!std::isfinite(q) || q == 0) return round_to(formats::fp32, Rounding::NearestEven, q);
  return round_pair(RoundingPlan(formats::fp32), Rounding::NearestEven, q, std::fma(-q, b, a) / b);
}
double rint_even(double t) {  // nearest integer, ties to even, written out
  const double fl = std::floor(t), d = t - fl;
  if (d > 0.5 || (d == 0.5 && std::fmod(fl, 2.0) != 0)) return fl + 1;
  return fl;
}

/// MLX affine written out (block_format.hpp) with f32_sub/f32_div for every binary32 step.
void expect_affine_definition(const BlockFormat& b, const std::vector<double>& x) {
  const BlockCodes q = quantize(b, x, x.size());
  const Format t = ieee_format_of(b.scale);
  const auto k = static_cast<std::size_t>(b.block_size);
  const double n = (1 << b.element.bits) - 1;
  ASSERT_EQ(q.biases.size(), q.scales.size());
  for (std::size_t j = 0; j < x.size() / k; ++j) {
    double lo = kInf, hi = -kInf;
    std::vector<double> w(k);
    for (std::size_t i = 0; i < k; ++i) {
      w[i] = round_to(t, Rounding::NearestEven, x[j * k + i]);
      lo = std::min(lo, w[i]);
      hi = std::max(hi, w[i]);
    }
    const bool low_edge = std::fabs(lo) > std::fabs(hi);
    double scale = std::max(f32_div(f32_sub(hi, lo), n), static_cast<double>(1e-7f));
    if (!low_edge) scale = -scale;
    const double edge = low_edge ? lo : hi;
    const double q0 = rint_even(f32_div(edge, scale));
    double bias = 0;
    if (q0 != 0) scale = f32_div(edge, q0), bias = edge;
    EXPECT_EQ(q.scales[j], to_bits(t, round_to(t, Rounding::NearestEven, scale))) << b.name << " block " << j;
    EXPECT_EQ(q.biases[j], to_bits(t, round_to(t, Rounding::NearestEven, bias))) << b.name << " block " << j;
    for (std::size_t i = 0; i < k; ++i) {
      const double want = std::clamp(rint_even(f32_div(f32_sub(w[i], bias), scale)), 0.0, n);
      EXPECT_EQ(q.codes[j * k + i], want) << b.name << " x[" << j * k + i << "] = " << x[j * k + i];
    }
  }
  // Decoded: code·scale_T + bias_T exact, rounded once (long double holds it for these magnitudes only when
  // the exponents are close, so the check uses the MPFR-tested round_pair on an exact TwoSum instead).
  const auto v = dequantize(b, q.codes, q.scales, 1.0f, formats::fp32, q.biases);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double s = from_bits(t, q.scales[i / k]), bias = from_bits(t, q.biases[i / k]);
    const double p = q.codes[i] * s, hi = p + bias, bb = hi - p;
    const double lo = (p - (hi - bb)) + (bias - bb);
    EXPECT_EQ(v[i], round_pair(RoundingPlan(formats::fp32), Rounding::NearestEven, hi, lo)) << i;
  }
}

}  // namespace

TEST(BlockFormat, MlxAffineFollowsTheWrittenOutFp32Steps) {
  std::mt19937_64 rng(41);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_int_distribution<int> ex(-30, 10);
  for (const std::string dtype : {"", "-bf16", "-fp32"}) {
    for (const int bits : {2, 3, 4, 5, 6, 8}) {
      for (const int g : {32, 64, 128}) {
        const BlockFormat b = parse_block_format("mlx-int" + std::to_string(bits) + "-g" + std::to_string(g) + dtype);
        ASSERT_EQ(b.rule, ScaleRule::AffineMlx);
        ASSERT_EQ(element_bits(b.element), bits);
        std::vector<double> x;
        const auto gs = static_cast<std::size_t>(g);
        for (int blk = 0; blk < 12; ++blk) {
          std::vector<double> v(gs);
          const double sc = std::ldexp(1.0, ex(rng));
          for (auto& e : v) e = nd(rng) * sc;
          switch (blk) {
            case 0: std::fill(v.begin(), v.end(), 0.0); break;              // all zero: q0 = 0, bias 0
            case 1: std::fill(v.begin(), v.end(), 0.75); break;             // constant: the eps scale
            case 2: std::fill(v.begin(), v.end(), -3.0); break;
            case 3: for (auto& e : v) e = std::fabs(e); break;              // one-signed: the min edge is 0
            case 4: for (auto& e : v) e = -std::fabs(e); break;
            case 5: v.assign(gs, 0.0), v[3] = 2.5; break;                   // one nonzero
            case 6: for (auto& e : v) e *= 1e-9; break;                     // range below eps·n
            case 7: v[0] = 1000.0, v[1] = -999.0; break;                    // wide range
            default: break;
          }
          x.insert(x.end(), v.begin(), v.end());
        }
        expect_affine_definition(b, x);
      }
    }
  }
}

TEST(BlockFormat, MlxAffineByHandAndItsRefusals) {
  // 0, 1/8, .., 63/8 in one group of 64, 4 bits: w_max = 7.875 is the edge, scale = -(7.875/15) = -0.525 (fp32),
  // q0 = rint(7.875 / -0.525) = -15, so scale = 7.875 / -15 and bias = 7.875; x = 0 gets code 15.
  std::vector<double> x(64);
  for (int i = 0; i < 64; ++i) x[static_cast<std::size_t>(i)] = i / 8.0;
  const BlockFormat b = parse_block_format("mlx-int4-g64");
  const BlockCodes q = quantize(b, x, 64);
  EXPECT_EQ(q.codes[0], 15);
  EXPECT_EQ(q.codes[63], 0);
  EXPECT_EQ(from_bits(formats::fp16, q.biases[0]), 7.875);
  EXPECT_EQ(from_bits(formats::fp16, q.scales[0]), round_to(formats::fp16, Rounding::NearestEven,
                                                            static_cast<double>(7.875f / -15.0f)));
  EXPECT_EQ(parse_block_format("mlx-int4-g64-fp16").name, "mlx-int4-g64");
  EXPECT_EQ(parse_block_format("mlx-int3-g32-bf16").scale, ScaleFormat::BF16);
  refused([] { parse_block_format("mlx-int7-g64"); }, "7 bits; valid: mlx-intB-gG");
  refused([] { parse_block_format("mlx-int4-g48"); }, "group size 48");
  refused([] { parse_block_format("mlx-int4"); }, "no group size");
  refused([] { parse_block_format("mlx-intx-g64"); }, "'x' is not a number");
  refused([&] { quantize(b, block_with(64, {{3, kInf}}), 64); }, "is not finite");
  refused([&] { quantize(b, block_with(64, {{3, 1e6}}), 64); }, "overflows fp16");
  // A scale overflows only when w_max - w_min does (|edge / q0| <= |edge| otherwise): fp32 near FLT_MAX.
  refused([&] { quantize(parse_block_format("mlx-int4-g64-fp32"), block_with(64, {{3, 3e38}, {4, -3e38}}), 64); },
          "has scale -inf, which overflows fp32");
  refused([&] { dequantize(b, q.codes, q.scales, 1, formats::fp64); }, "0 biases given; valid: 1 (one per block)");
  refused([&] { dequantize(parse_block_format("mxfp4"), std::vector<std::uint8_t>(32), std::vector<std::uint32_t>(1), 1,
                           formats::fp64, std::vector<std::uint32_t>(1)); },
          "1 biases given; valid: none");
}

TEST(ScaleFormat, Bf16EveryNonNegativeCode) {
  for (std::uint32_t c = 0; c < 0x8000; ++c) {
    const double v = scale_value(ScaleFormat::BF16, c);
    EXPECT_EQ(v == v ? 0 : 1, (c & 0x7F80) == 0x7F80 && (c & 0x7F) ? 1 : 0) << c;  // NaN exactly at NaN codes
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(v, from_bits(formats::bf16, c));
    EXPECT_EQ(scale_code(ScaleFormat::BF16, v), c);
    EXPECT_EQ(round_scale(ScaleFormat::BF16, Rounding::NearestEven, v), v);
  }
  EXPECT_EQ(round_scale(ScaleFormat::BF16, Rounding::Up, 1e300), max_finite(formats::bf16));
  EXPECT_EQ(ieee_format_of(ScaleFormat::BF16), formats::bf16);
  EXPECT_THROW(ieee_format_of(ScaleFormat::E8M0), std::invalid_argument);
}

TEST(BlockFormat, GptqGridFollowsTheWrittenOutFp32Steps) {
  // x_min = min(min x, 0), x_max = max(max x, 0) (±1 when both are 0); scale = f32(x_max − x_min) / n;
  // zero = rint(−x_min / scale); P = clamp(rint(x / scale) + zero, 0, n); stored fp16(scale) and zero; decoded
  // fp16(scale)·(P − zero).
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (const int bits : {2, 3, 4, 8}) {
    for (const int g : {32, 64, 128}) {
      const BlockFormat b = parse_block_format("gptq-int" + std::to_string(bits) + "-g" + std::to_string(g));
      ASSERT_EQ(b.rule, ScaleRule::MinMaxZeroPoint);
      const auto gs = static_cast<std::size_t>(g);
      std::vector<double> x(gs * 6);
      for (auto& e : x) e = nd(rng) * 0.05;
      std::fill(x.begin(), x.begin() + g, 0.0);                                      // all zero: ±1
      for (std::size_t i = gs; i < 2 * gs; ++i) x[i] = std::fabs(x[i]);               // x_min = 0
      for (std::size_t i = 2 * gs; i < 3 * gs; ++i) x[i] = -std::fabs(x[i]);          // x_max = 0
      for (std::size_t i = 3 * gs; i < 4 * gs; ++i) x[i] = std::ldexp(x[i], -20);     // tiny
      const BlockCodes q = quantize(b, x, x.size());
      const double n = (1 << bits) - 1;
      for (std::size_t j = 0; j < 6; ++j) {
        double lo = 0, hi = 0;
        for (std::size_t i = j * gs; i < (j + 1) * gs; ++i) {
          lo = std::min(lo, round_to(formats::fp32, Rounding::NearestEven, x[i]));
          hi = std::max(hi, round_to(formats::fp32, Rounding::NearestEven, x[i]));
        }
        if (lo == 0 && hi == 0) lo = -1, hi = 1;
        const double scale = f32_div(f32_sub(hi, lo), n);
        const double zero = rint_even(f32_div(-lo, scale));
        EXPECT_EQ(q.scales[j], to_bits(formats::fp16, round_to(formats::fp16, Rounding::NearestEven, scale)));
        EXPECT_EQ(q.biases[j], zero);
        for (std::size_t i = j * gs; i < (j + 1) * gs; ++i) {
          const double xf = round_to(formats::fp32, Rounding::NearestEven, x[i]);
          EXPECT_EQ(q.codes[i], std::clamp(rint_even(f32_div(xf, scale)) + zero, 0.0, n)) << b.name << " " << i;
        }
      }
      const auto v = dequantize(b, q.codes, q.scales, 1, formats::fp64, q.biases);
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(v[i], from_bits(formats::fp16, q.scales[i / gs]) * (q.codes[i] - static_cast<double>(q.biases[i / gs])));
    }
  }
  EXPECT_THROW(parse_block_format("gptq-int5-g64"), std::invalid_argument);
  EXPECT_THROW(quantize(parse_block_format("gptq-int4-g32"), block_with(32, {{1, 1e7}}), 32), std::invalid_argument);
}
