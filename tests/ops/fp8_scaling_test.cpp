// Scaled fp8 operands (ops/fp8_scaling.hpp; issue 44): Transformer Engine's per-tensor scales (current and delayed)
// and DeepSeek-V3's block scales against written-out definitions on adversarial tensors (amax 0, amax at a binade
// edge, ±inf and NaN, an amax history longer than the run), the fp8 casts exhaustively over every bf16 input, the
// policy text of the recipes, and the refusals (history length 0, negative margin, a block that does not divide).
// The decoded model's fp8-rescale (deepseek-fp8-nopromote-rescaled; docs/studies/fp8-recipes.md amendment 2): the power
// of two by search, the rescaled GEMM against its written-out definition on adversarial operands (amax 0, a binade
// edge, NaN and ±inf, decoded values of 1e-6 against the 14-bit accumulator's error bound from the model's
// definition), exact power-of-two scaling of its result, and its policy text and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/round.hpp"
#include "ops/fp8_scaling.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/runner.hpp"

namespace roundoff::ops {
namespace {

// ---- written-out definitions (double arithmetic; a binary32 operation on binary32 operands is the double result
// rounded once to binary32: double rounding through binary64 is innocuous for +, ·, / since 53 >= 2·24 + 2) ---------

float f32(double x) { return static_cast<float>(x); }
float div32(float a, float b) { return f32(static_cast<double>(a) / static_cast<double>(b)); }
float mul32(float a, float b) { return f32(static_cast<double>(a) * static_cast<double>(b)); }

/// Every finite non-negative value of the fp8 element, ascending (E4M3: 0..448 without the NaN code; E5M2: 0..57344).
std::vector<double> fp8_values(Fp8Elem e) {
  std::vector<double> v;
  const int man = e == Fp8Elem::E4M3 ? 3 : 2, bias = e == Fp8Elem::E4M3 ? 7 : 15;
  for (int code = 0; code < 128; ++code) {
    const int ex = code >> man, m = code & ((1 << man) - 1);
    if (e == Fp8Elem::E4M3 && code == 0x7F) continue;  // NaN
    if (e == Fp8Elem::E5M2 && ex == 31) continue;      // inf, NaN
    const double val = ex == 0 ? std::ldexp(m, 1 - bias - man) : std::ldexp((1 << man) + m, ex - bias - man);
    v.push_back(val);
  }
  return v;
}

/// The saturating nearest-even fp8 value of x by search: the nearest value, a tie to the one with an even code
/// (even index in the ascending list), |x| beyond the largest value gives it (CUDA's satfinite), NaN stays NaN.
double cast_by_search(Fp8Elem e, double x) {
  if (std::isnan(x)) return x;
  static const std::vector<double> e4 = fp8_values(Fp8Elem::E4M3), e5 = fp8_values(Fp8Elem::E5M2);
  const std::vector<double>& v = e == Fp8Elem::E4M3 ? e4 : e5;
  const double a = std::fabs(x);
  double best = v.back();
  std::size_t bi = v.size() - 1;
  if (a < v.back()) {
    for (std::size_t i = 0; i + 1 < v.size(); ++i)
      if (a >= v[i] && a <= v[i + 1]) {
        const double dl = a - v[i], dh = v[i + 1] - a;
        bi = dl < dh ? i : dh < dl ? i + 1 : (i % 2 == 0 ? i : i + 1);
        best = v[bi];
        break;
      }
  }
  return std::copysign(best, x);
}

TEST(Fp8Scaling, CastEqualsTheSearchOnEveryBf16Input) {
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2})
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float x = std::bit_cast<float>(b << 16);
      const double want = cast_by_search(e, x);
      const float got = fp8_cast(e, x);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << b;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(static_cast<float>(want)), std::bit_cast<std::uint32_t>(got))
            << name_of(e) << " input bits " << b;
      }
    }
}

TEST(Fp8Scaling, CastTiesAndSaturation) {
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, 464.0f), 448.0f);  // the tie above the largest value saturates
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, 1e30f), 448.0f);
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, -INFINITY), -448.0f);
  EXPECT_EQ(fp8_cast(Fp8Elem::E5M2, INFINITY), 57344.0f);
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, 1.0625f), 1.0f);   // tie between 1 and 1.125: even
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, 1.1875f), 1.25f);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, std::ldexp(1.0f, -10)), 0.0f);  // half the smallest subnormal 2^-9: even (0)
  EXPECT_TRUE(std::isnan(fp8_cast(Fp8Elem::E5M2, NAN)));
}

TEST(Fp8Scaling, AmaxSkipsNanAndKeepsInf) {
  const std::vector<double> v{1.0, -3.0, std::nan(""), 2.0};
  EXPECT_EQ(tensor_amax(v), 3.0f);
  EXPECT_EQ(tensor_amax(std::vector<double>{std::nan(""), std::nan("")}), 0.0f);
  EXPECT_EQ(tensor_amax(std::vector<double>{1.0, -INFINITY}), INFINITY);
  EXPECT_EQ(tensor_amax(std::vector<double>{}), 0.0f);
  EXPECT_EQ(tensor_amax(std::vector<double>{1e300}), INFINITY);  // |fp32(x)|: overflows binary32
}

TEST(Fp8Scaling, CurrentScaleOnAdversarialAmax) {
  const float m = scaled_max(Fp8Elem::E4M3, 0);
  EXPECT_EQ(m, 448.0f);
  EXPECT_EQ(scaled_max(Fp8Elem::E5M2, 3), 7168.0f);  // 57344 / 8
  EXPECT_EQ(current_scale(0.0f, m), 1.0f);
  EXPECT_EQ(current_scale(INFINITY, m), 1.0f);
  EXPECT_EQ(current_scale(NAN, m), 1.0f);
  EXPECT_EQ(current_scale(std::numeric_limits<float>::denorm_min(), m), FLT_MAX);  // 448 / 2^-149 overflows
  for (int k = -140; k <= 127; ++k) {  // amax at a binade edge, and one ulp below it
    const float edge = std::ldexp(1.0f, k), below = std::nextafter(edge, 0.0f);
    for (float a : {edge, below}) {
      const double q = 448.0 / static_cast<double>(a);
      const float want = q > static_cast<double>(FLT_MAX) * (1 + std::ldexp(1.0, -25)) ? FLT_MAX : div32(448.0f, a);
      EXPECT_EQ(std::bit_cast<std::uint32_t>(current_scale(a, m)), std::bit_cast<std::uint32_t>(want)) << a;
    }
  }
  EXPECT_EQ(scale_inverse(3.0f), div32(1.0f, 3.0f));
}

TEST(Fp8Scaling, DelayedUpdateWrittenOut) {
  // H = 4: the history written out step by step (TE's roll: a_i = h[i+1], a_{H-1} = h[0]; new h = [0, a_1..a_{H-1}]).
  std::vector<float> h(4, 0.0f);
  float s = 1.0f;
  const float m = 448.0f;
  h[0] = 2.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);
  EXPECT_EQ(s, 224.0f);
  EXPECT_EQ(h, (std::vector<float>{0, 0, 0, 2}));
  h[0] = 8.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);
  EXPECT_EQ(s, 56.0f);
  EXPECT_EQ(h, (std::vector<float>{0, 0, 2, 8}));
  h[0] = 1.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);
  EXPECT_EQ(s, 56.0f);  // 8 is still in the window
  EXPECT_EQ(h, (std::vector<float>{0, 2, 8, 1}));
  h[0] = 1.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);
  EXPECT_EQ(h, (std::vector<float>{0, 8, 1, 1}));
  h[0] = 1.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);  // the window is 4 amaxes: 8 (2 steps ago... ) still inside
  EXPECT_EQ(s, 56.0f);
  EXPECT_EQ(h, (std::vector<float>{0, 1, 1, 1}));
  h[0] = 1.0f;
  s = delayed_update(h, s, AmaxAlgo::Max, m);
  EXPECT_EQ(s, 448.0f);  // 8 has left the window
  // most-recent: the amax of this step only; NaN and inf keep the previous scale; 0 keeps it too.
  std::vector<float> g(3, 0.0f);
  g[0] = 3.0f;
  float t = delayed_update(g, 1.0f, AmaxAlgo::MostRecent, m);
  EXPECT_EQ(t, div32(448.0f, 3.0f));
  g[0] = 0.0f;
  EXPECT_EQ(delayed_update(g, t, AmaxAlgo::MostRecent, m), t);
  g[0] = INFINITY;
  EXPECT_EQ(delayed_update(g, t, AmaxAlgo::MostRecent, m), t);
  EXPECT_EQ(g.back(), INFINITY);  // kept in the history: max then keeps the scale until it leaves
  EXPECT_EQ(delayed_update(g, t, AmaxAlgo::Max, m), t);
  // Tiny amax: the quotient overflows binary32 → FLT_MAX.
  std::vector<float> k(2, 0.0f);
  k[0] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(delayed_update(k, 1.0f, AmaxAlgo::Max, m), FLT_MAX);
}

TEST(Fp8Scaling, HistoryLongerThanTheRun) {
  // TE's default H = 1024 over 5 steps: the zeros of the unfilled history never win a max (amaxes are >= 0), so the
  // scale is 448 / (max of the amaxes so far), each written out.
  Fp8ScalingState st(parse_fp8_scaling("delayed"));
  Fp8TensorState& t = st.tensor("L0.matmul.q.x", Fp8Elem::E4M3);
  ASSERT_EQ(t.history.size(), 1024u);
  const float amaxes[] = {0.5f, 3.0f, 0.25f, 1.0f, 2.0f};
  float mx = 0;
  for (float a : amaxes) {
    EXPECT_EQ(t.scale, mx == 0 ? 1.0f : div32(448.0f, mx));  // the scale this step casts with
    t.history[0] = a;
    mx = std::fmax(mx, a);
    st.update();
    EXPECT_EQ(t.scale, div32(448.0f, mx));
    EXPECT_EQ(t.history[0], 0.0f);
    EXPECT_EQ(t.history.back(), a);
  }
}

TEST(Fp8Scaling, PerTensorQuantizeWrittenOut) {
  const std::vector<double> x{0.0, 1.0, -2.5, 1000.0, 3.140625, -1e-8, 65504.0, std::nan("")};
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2})
    for (float scale : {1.0f, 0.1f, 448.0f / 65504.0f, FLT_MAX}) {
      std::vector<double> v = x;
      quantize_per_tensor(v, e, scale);
      const float inv = div32(1.0f, scale);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double q = cast_by_search(e, mul32(static_cast<float>(x[i]), scale));
        const double want = std::isnan(q) ? q : mul32(static_cast<float>(q), inv);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(v[i]));
        else EXPECT_EQ(v[i], want) << name_of(e) << " scale " << scale << " x " << x[i];
      }
    }
}

TEST(Fp8Scaling, BlockScaleWrittenOut) {
  // s = fp32(max(amax, fp32(1e-4)) / 448); decoded = fp32(fp8(fp32(x / s)) · s).
  const float tiny = 1e-4f;
  EXPECT_EQ(block_scale(0.0f, Fp8Elem::E4M3), div32(tiny, 448.0f));  // amax 0: the clamp
  EXPECT_EQ(block_scale(448.0f, Fp8Elem::E4M3), 1.0f);
  for (int k = -20; k <= 20; ++k) {
    const float edge = std::ldexp(1.0f, k), below = std::nextafter(edge, 0.0f);
    for (float a : {edge, below}) {
      const float s = div32(std::fmax(a, tiny), 448.0f);
      EXPECT_EQ(block_scale(a, Fp8Elem::E4M3), s);
      std::vector<double> v{a, -a / 3, a / 1000, 0.0};
      for (double& y : v) y = static_cast<float>(y);
      const std::vector<double> x = v;
      quantize_block(v, Fp8Elem::E4M3);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double q = cast_by_search(Fp8Elem::E4M3, div32(static_cast<float>(x[i]), s));
        EXPECT_EQ(v[i], static_cast<double>(mul32(static_cast<float>(q), s))) << a << " " << x[i];
      }
    }
  }
  std::vector<double> zeros(4, 0.0);
  quantize_block(zeros, Fp8Elem::E4M3);
  for (double z : zeros) EXPECT_EQ(z, 0.0);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    std::vector<double> v{1.0, bad, 2.0};
    quantize_block(v, Fp8Elem::E4M3);
    for (double y : v) EXPECT_TRUE(std::isnan(y));
  }
}

/// Adversarial binary32 inputs of the fp8 casts (as doubles): every fp8 value of both elements and both signs, each
/// midpoint between neighbours, the binary32 neighbours of both, the subnormal range and its ties, the saturation
/// edges (464, 480, 61440, 65536 and past them), binary32 subnormals, ±0, ±inf, NaN, and log-uniform random values
/// of every binade; shuffled, so that chunks mix the lanes the SIMD rounding keeps with those it hands back.
std::vector<double> cast_inputs() {
  std::vector<float> f;
  const auto near = [&f](float x) {
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
      f.push_back(y);
      f.push_back(-y);
    }
  };
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2}) {
    const std::vector<double> v = fp8_values(e);
    for (std::size_t i = 0; i < v.size(); ++i) {
      near(static_cast<float>(v[i]));
      if (i + 1 < v.size()) near(static_cast<float>((v[i] + v[i + 1]) / 2));
    }
  }
  for (float x : {464.0f, 480.0f, 61440.0f, 65536.0f, 1e30f, FLT_MAX, FLT_MIN, 0x1p-149f, 0x1p-10f, 0x1p-17f,
                  0x1p-18f, 0x1p-130f})
    near(x);
  for (float x : {INFINITY, -INFINITY, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()}) f.push_back(x);
  std::mt19937_64 rng(44);
  std::uniform_real_distribution<double> ex(-150.0, 128.0);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(std::exp2(ex(rng)) * (rng() % 2 ? 1.0 : -1.0));
    f.push_back(x);
  }
  std::shuffle(f.begin(), f.end(), rng);
  return std::vector<double>(f.begin(), f.end());
}

std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }

TEST(Fp8Scaling, ChunkedCastsEqualTheElementCastBitForBit) {
  // quantize_per_tensor and quantize_block cast through round_array a chunk at a time (ops/fp8_scaling.cpp); the
  // element definition is x ← fp8_cast(e, fp32(x) · scale) (· scale_inv), resp. fp8_cast(e, fp32(x) / s) (· s).
  // Equal bits everywhere, NaN payloads included, in both element formats, decoded and codes_only, at scales that put
  // the inputs in the subnormal, normal and saturating ranges, over sizes that end a chunk early, exactly or after it.
  const std::vector<double> all = cast_inputs();
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2})
    for (float scale : {1.0f, 0.37f, 3.5e3f, 0x1p-20f, 1e-30f, FLT_MAX})
      for (bool codes : {false, true})
        for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{512}, std::size_t{513}, all.size()}) {
          std::vector<double> got(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)), want = got;
          quantize_per_tensor(got, e, scale, codes);
          const float inv = scale_inverse(scale);
          for (double& x : want) {
            const float q = fp8_cast(e, static_cast<float>(x) * scale);
            x = codes ? static_cast<double>(q) : static_cast<double>(q * inv);
          }
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(bits_of(got[i]), bits_of(want[i]))
                << name_of(e) << " scale " << scale << " codes " << codes << " n " << n << " x " << all[i];
        }
  // Blocks: finite inputs only (a non-finite block is all NaN), each block's own scale, in blocks of 1, 128 and
  // 1500 (three chunks).
  std::vector<double> finite;
  for (double x : all)
    if (std::isfinite(x)) finite.push_back(x);
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2})
    for (bool codes : {false, true})
      for (std::size_t B : {std::size_t{1}, std::size_t{128}, std::size_t{1500}})
        for (std::size_t b0 = 0; b0 + B <= finite.size(); b0 += B) {
          std::vector<double> got(finite.begin() + static_cast<std::ptrdiff_t>(b0),
                                  finite.begin() + static_cast<std::ptrdiff_t>(b0 + B));
          const std::vector<double> x = got;
          const float s = quantize_block(got, e, codes);
          float amax = 0.0f;
          for (double y : x) amax = std::fmax(amax, std::fabs(static_cast<float>(y)));
          ASSERT_EQ(s, block_scale(amax, e));
          for (std::size_t i = 0; i < B; ++i) {
            const float q = fp8_cast(e, static_cast<float>(x[i]) / s);
            const double want = codes ? static_cast<double>(q) : static_cast<double>(q * s);
            ASSERT_EQ(bits_of(got[i]), bits_of(want)) << name_of(e) << " block " << B << " x " << x[i];
          }
        }
}

TEST(Fp8Scaling, CastCountsEqualTheElementCastCounts) {
  // count_fp8_cast skips the cast of a |y| at or above the smallest normal (it cannot round to 0); the counts equal
  // those of the definition that casts every element.
  const std::vector<double> all = cast_inputs();
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2})
    for (float factor : {1.0f, 0.37f, 3.5e3f, 0x1p-20f, 1e-30f})
      for (bool divide : {false, true}) {
        Fp8CastCounts got, want;
        count_fp8_cast(all, e, factor, divide, got);
        const float mid = e == Fp8Elem::E4M3 ? 464.0f : 61440.0f;
        for (double x : all) {
          ++want.elements;
          if (std::isnan(x)) continue;
          const float y = divide ? static_cast<float>(x) / factor : static_cast<float>(x) * factor;
          const float a = std::fabs(y);
          if (e == Fp8Elem::E4M3 ? a > mid : a >= mid) ++want.saturated;
          else if (x != 0 && std::isfinite(x) && fp8_cast(e, y) == 0.0f) ++want.underflowed;
        }
        EXPECT_EQ(got, want) << name_of(e) << " factor " << factor << " divide " << divide;
        EXPECT_GT(want.underflowed + want.saturated, 0u);
      }
}

TEST(Fp8Scaling, OperandBlocksAndRefusals) {
  // 1×4 blocks along a row of 8: each block its own scale; 2×2 tiles of a 2×4 matrix.
  std::vector<double> v{1, 2, 3, 4, 100, 200, 300, 400};
  std::vector<double> w = v;
  quantize_fp8_operand(parse_fp8_operand("e4m3:1x4"), w, 1, 8, {}, nullptr, false, "t");
  std::vector<double> a(v.begin(), v.begin() + 4), b(v.begin() + 4, v.end());
  quantize_block(a, Fp8Elem::E4M3);
  quantize_block(b, Fp8Elem::E4M3);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(w[i], a[i]);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(w[4 + i], b[i]);
  std::vector<double> t = v;  // 2 × 4, tiles 2×2: {1,2,100,200} and {3,4,300,400}
  quantize_fp8_operand(parse_fp8_operand("e4m3:2x2"), t, 2, 4, {}, nullptr, false, "t");
  std::vector<double> t0{1, 2, 100, 200}, t1{3, 4, 300, 400};
  quantize_block(t0, Fp8Elem::E4M3);
  quantize_block(t1, Fp8Elem::E4M3);
  EXPECT_EQ(t[0], t0[0]);
  EXPECT_EQ(t[4], t0[2]);
  EXPECT_EQ(t[7], t1[3]);
  // :pad: a ragged last block, as DeepGEMM's zero padding (zeros change neither the amax nor the values).
  std::vector<double> r{1, 2, 3, 4, 500, 7};
  quantize_fp8_operand(parse_fp8_operand("e4m3:1x4:pad"), r, 1, 6, {}, nullptr, false, "t");
  std::vector<double> r0{1, 2, 3, 4}, r1{500, 7, 0, 0};
  quantize_block(r0, Fp8Elem::E4M3);
  quantize_block(r1, Fp8Elem::E4M3);
  EXPECT_EQ(r[3], r0[3]);
  EXPECT_EQ(r[4], r1[0]);
  EXPECT_EQ(r[5], r1[1]);
  // Refusals, one line each, naming what is valid.
  const auto one_line = [](const auto& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "not refused: " << needle;
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  one_line([&] { quantize_fp8_operand(parse_fp8_operand("e4m3:1x128"), w, 1, 8, {}, nullptr, false, "t"); },
           "valid: a block size that divides the contraction axis (8)");
  one_line([&] { quantize_fp8_operand(parse_fp8_operand("e4m3:3x3"), t, 2, 4, {}, nullptr, false, "t"); },
           "valid: a block size that divides both dimensions");
  one_line([] { parse_fp8_scaling("delayed:0"); }, "H an amax history length >= 1");
  one_line([] { parse_fp8_scaling("delayed:16:max:-1"); }, "MARGIN an integer in 0..100");
  one_line([] { parse_fp8_scaling("current:-2"); }, "margin '-2' is not in 0..100");
  one_line([] { parse_fp8_scaling("delayed:16:mean"); }, "ALGO max or most-recent");
  one_line([] { parse_fp8_operand("e4m3:2x3"); }, "valid: off, e4m3, e5m2");
  one_line([] { Policy::parse("te-fp8-delayed,fp8-scaling=delayed:0"); }, "history length");
  one_line([] { Policy::parse("te-fp8-current,fp8-scaling=current:-1"); }, "valid: current[:MARGIN]");
  one_line([] { Policy::parse("fp32,softmax.fp8=e4m3"); }, "block quantization applies to the GEMM ops");
  one_line([&] {
    Fp8Scaling d = parse_fp8_scaling("delayed:4");
    std::vector<double> x{1.0};
    quantize_fp8_operand(parse_fp8_operand("e4m3"), x, 1, 1, d, nullptr, false, "t");
  }, "valid here: fp8-scaling=current");
}

TEST(Fp8Scaling, CastCountsSaturationAndUnderflow) {
  // Per tensor, scale 1, E4M3 (max 448, next 480 with a wider exponent, midpoint 464; smallest subnormal 2^-9):
  // 500, -1000 and +inf saturate; 448.5 and 464 (the tie, to even: 448) round to 448 and do not; 2^-10 (the tie
  // between 0 and 2^-9, to even: 0) and 1e-30 underflow; 0, NaN, 448 and 0.6·2^-9 (rounds up to 2^-9) are neither.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x{500, -1000, inf, 448.5, std::ldexp(1.0, -10), 1e-30, 0, std::nan(""), 448,
                              0.6 * std::ldexp(1.0, -9), 464};
  Fp8CastCounts c;
  count_fp8_cast(x, Fp8Elem::E4M3, 1.0f, false, c);
  EXPECT_EQ(c, (Fp8CastCounts{11, 3, 2}));
  for (double y : {448.5, 464.0, 464.0001}) EXPECT_EQ(fp8_cast(Fp8Elem::E4M3, static_cast<float>(y)), 448.0f);
  // E5M2 (max 57344, next 65536, midpoint 61440 ties to 65536): 61440 saturates, 61439 does not.
  Fp8CastCounts c5;
  count_fp8_cast(std::vector<double>{61440, 61439, 57344, 1e9}, Fp8Elem::E5M2, 1.0f, false, c5);
  EXPECT_EQ(c5, (Fp8CastCounts{4, 2, 0}));
  // The scale multiplies first: at 2^-4 only +inf saturates (-1000 → -62.5), and 2^-10, 1e-30 and 0.6·2^-9 (now
  // below 2^-10, half the smallest subnormal) underflow.
  Fp8CastCounts c2;
  count_fp8_cast(x, Fp8Elem::E4M3, 0.0625f, false, c2);
  EXPECT_EQ(c2, (Fp8CastCounts{11, 1, 3}));
  // Per block (divide by s): s = 1000/448; 1e-6/s underflows, 1000/s = 448 does not saturate.
  Fp8CastCounts cb;
  const float s = block_scale(1000.0f, Fp8Elem::E4M3);
  count_fp8_cast(std::vector<double>{1000, 1e-6, 0, 3}, Fp8Elem::E4M3, s, true, cb);
  EXPECT_EQ(cb, (Fp8CastCounts{4, 0, 1}));

  // quantize_fp8_operand adds the same counts and leaves the same values as without counting.
  const std::vector<double> v{1000, 1, std::ldexp(1.0, -11), 0, -600, 3};  // delayed, initial scale 1: 2 saturate
  Fp8ScalingState st(parse_fp8_scaling("delayed:4"));
  for (bool count : {false, true}) {
    std::vector<double> y = v;
    Fp8CastCounts k;
    Fp8TensorState& t = st.tensor("t", Fp8Elem::E4M3);
    quantize_fp8_operand(parse_fp8_operand("e4m3"), y, 1, 6, st.config(), &t, false, "t", nullptr,
                         count ? &k : nullptr);
    std::vector<double> want = v;
    quantize_per_tensor(want, Fp8Elem::E4M3, 1.0f);
    EXPECT_EQ(y, want);
    EXPECT_EQ(k, count ? (Fp8CastCounts{6, 2, 1}) : Fp8CastCounts{});
  }
  // Blocks of 1×4 (the second ragged under :pad): {1000, 1e-6, 0, 3} as above, {1e-7, NaN}: a non-finite block
  // counts its elements only.
  std::vector<double> b{1000, 1e-6, 0, 3, 1e-7, std::nan("")};
  Fp8CastCounts kb;
  quantize_fp8_operand(parse_fp8_operand("e4m3:1x4:pad"), b, 1, 6, {}, nullptr, false, "t", nullptr, &kb);
  EXPECT_EQ(kb, (Fp8CastCounts{6, 0, 1}));
}

TEST(Fp8Scaling, RunnerCountsPerTensorOnlyWhenRecordingAndCounting) {
  // te-fp8-delayed, first step (every scale 1): x has 2 saturating and 1 underflowing element of 8, W none of 6
  // saturating and 1 underflowing; the output is the same with counting on and off.
  const MatmulShape sh{2, 4, 3};
  const std::vector<double> x{1000, 1, 2, std::ldexp(1.0, -12), -700, 0.5, 0.25, 0};
  const std::vector<double> w{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, std::ldexp(1.0, -13)};
  std::vector<double> ys[2];
  for (int count = 0; count < 2; ++count) {
    Runner run(Policy::parse("te-fp8-delayed"));
    run.set_fp8_recording(true);
    run.set_fp8_counting(count == 1);
    ys[count].assign(6, 0.0);
    run.matmul_forward({OpKind::Matmul, 0, "q"}, ys[count], x, w, sh);
    if (count == 0) {
      EXPECT_TRUE(run.fp8_counts().empty());
      continue;
    }
    const auto& k = run.fp8_counts();
    ASSERT_EQ(k.size(), 3u);  // the entry's three scaled roles; the forward casts no dy (the trainer logs none)
    EXPECT_EQ(k.at("L0.matmul.q.x"), (Fp8CastCounts{8, 2, 1}));
    EXPECT_EQ(k.at("L0.matmul.q.w"), (Fp8CastCounts{12, 0, 1}));
    EXPECT_EQ(k.at("L0.matmul.q.dy"), Fp8CastCounts{});
    run.clear_fp8_counts();
    run.set_fp8_recording(false);  // an evaluation pass counts nothing
    std::vector<double> y(6);
    run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, sh);
    EXPECT_TRUE(run.fp8_counts().empty());
  }
  EXPECT_EQ(ys[0], ys[1]);
}

/// x (n × K) and W (m × K), bf16 values, a few columns scaled apart so that blocks differ.
std::vector<double> bf16_matrix(std::size_t rows, std::size_t K, unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(rows * K);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = numerics::round_to(numerics::formats::bf16, numerics::Rounding::NearestEven,
                              d(g) * std::ldexp(1.0, static_cast<int>((i % K) / 32) * 3 - 6));
  return v;
}

TEST(Fp8Scaling, ExactGemmWrittenOut) {
  // The forward GEMM of the linear layer under te-fp8-current (per tensor: codes, the whole GEMM under tc-h100-fp8,
  // then fp32(P · fp32(ia · ib))) and deepseek-fp8 with 32-wide blocks and promote=32 (per block: P_b without
  // promotion, T = fmaf(P_b, fp32(sa · sb), T)), each then rounded to the entry's compute and storage (bf16).
  const std::size_t n = 3, K = 96, m = 2;
  const std::vector<double> x = bf16_matrix(n, K, 1), w = bf16_matrix(m, K, 2);
  const auto out = [&](const char* spec) {
    const Policy p = Policy::parse(spec);
    const Ctx<Emulated> ctx(p.at(OpKind::Matmul, Pass::Forward));
    std::vector<double> y(n * m);
    matmul_forward<Emulated>(y, x, w, MatmulShape{static_cast<std::int64_t>(n), static_cast<std::int64_t>(K),
                                                  static_cast<std::int64_t>(m)}, ctx);
    return y;
  };
  const auto bf = [](double v) { return numerics::round_to(numerics::formats::bf16, numerics::Rounding::NearestEven, v); };
  {
    const std::vector<double> y = out("te-fp8-current");
    const float sx = current_scale(tensor_amax(x), 448.0f), sw = current_scale(tensor_amax(w), 448.0f);
    const numerics::Accumulation acc = numerics::parse_accumulation("tc-h100-fp8");
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        std::vector<double> qa(K), qb(K);
        for (std::size_t k = 0; k < K; ++k) {
          qa[k] = cast_by_search(Fp8Elem::E4M3, mul32(static_cast<float>(x[i * K + k]), sx));
          qb[k] = cast_by_search(Fp8Elem::E4M3, mul32(static_cast<float>(w[j * K + k]), sw));
        }
        const float P = static_cast<float>(numerics::dot(acc, qa, qb));
        const float want = mul32(P, mul32(div32(1.0f, sx), div32(1.0f, sw)));
        EXPECT_EQ(y[i * m + j], bf(want)) << i << "," << j;
      }
    // The decoded model (the same operands decoded to fp32, then the same GEMM) differs on this data: at (2, 1)
    // 0.15625 against the exact 0.1572265625, so the check above tells the two models apart.
    std::vector<double> dx = x, dw = w;
    quantize_per_tensor(dx, Fp8Elem::E4M3, sx);
    quantize_per_tensor(dw, Fp8Elem::E4M3, sw);
    int differ = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j)
        differ += bf(numerics::dot(acc, std::span<const double>(dx).subspan(i * K, K),
                                   std::span<const double>(dw).subspan(j * K, K))) != y[i * m + j];
    EXPECT_GT(differ, 0);
  }
  {
    const std::vector<double> y = out(
        "deepseek-fp8,matmul.fp8-x=e4m3:1x32,matmul.fp8-w=e4m3:32x32:pad,matmul.fp8-dy=e4m3:1x32,"
        "matmul.acc=[tc-h100-fp8,promote=32:fp32]");
    const numerics::Accumulation acc = numerics::parse_accumulation("tc-h100-fp8");
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        float T = 0.0f;
        for (std::size_t b = 0; b < K / 32; ++b) {
          // x's 1×32 block of row i; W's 32×32 tile holding row j (rows 0..1 of a 2-row matrix: one ragged tile row).
          float ax = 0, aw = 0;
          for (std::size_t k = 0; k < 32; ++k) ax = std::fmax(ax, std::fabs(static_cast<float>(x[i * K + b * 32 + k])));
          for (std::size_t r = 0; r < m; ++r)
            for (std::size_t k = 0; k < 32; ++k) aw = std::fmax(aw, std::fabs(static_cast<float>(w[r * K + b * 32 + k])));
          const float sa = div32(std::fmax(ax, 1e-4f), 448.0f), sb = div32(std::fmax(aw, 1e-4f), 448.0f);
          std::vector<double> qa(32), qb(32);
          for (std::size_t k = 0; k < 32; ++k) {
            qa[k] = cast_by_search(Fp8Elem::E4M3, div32(static_cast<float>(x[i * K + b * 32 + k]), sa));
            qb[k] = cast_by_search(Fp8Elem::E4M3, div32(static_cast<float>(w[j * K + b * 32 + k]), sb));
          }
          const double P = numerics::dot(acc, qa, qb);
          // fmaf: P·s is exact in binary64 (14 + 24 bits); its sum with T rounded once, through TwoSum + round_pair.
          const double prod = P * static_cast<double>(mul32(sa, sb)), hi = prod + static_cast<double>(T);
          const double bv = hi - prod, lo = (prod - (hi - bv)) + (static_cast<double>(T) - bv);
          T = static_cast<float>(numerics::round_pair(numerics::RoundingPlan(numerics::formats::fp32),
                                                      numerics::Rounding::NearestEven, hi, lo));
        }
        EXPECT_EQ(y[i * m + j], bf(T)) << i << "," << j;
      }
  }
}

TEST(Fp8Scaling, RecipesParsePrintAndRoundTrip) {
  for (const char* spec : {"te-fp8-delayed", "te-fp8-current", "deepseek-fp8", "deepseek-fp8-nopromote",
                           "te-fp8-delayed,fp8-scaling=delayed:16:most-recent:2", "te-fp8-current,fp8-scaling=current:1",
                           "deepseek-fp8,matmul.acc=tc-h100-fp8", "h100-amp-bf16,matmul.fp8-x=e4m3:1x64,matmul.fp8-w=e5m2"}) {
    const Policy p = Policy::parse(spec);
    EXPECT_EQ(Policy::parse(p.canonical()), p) << spec << " -> " << p.canonical();
  }
  EXPECT_EQ(Policy::parse("deepseek-fp8,matmul.acc=tc-h100-fp8").canonical(), "deepseek-fp8-nopromote");
  // A role has one quantization: the later of block-R and fp8-R wins; `off` clears only its own field.
  const Policy mixed = Policy::parse("mxfp8,matmul.fp8-x=e4m3");
  EXPECT_FALSE(mixed.at(OpKind::Matmul, Pass::Forward).quant.of(GemmRole::X).has_value());
  EXPECT_EQ(to_string(mixed.at(OpKind::Matmul, Pass::Forward).quant.fp8_of(GemmRole::X)), "e4m3");
  EXPECT_TRUE(mixed.at(OpKind::Matmul, Pass::Forward).quant.of(GemmRole::W).has_value());
  EXPECT_EQ(Policy::parse(mixed.canonical()), mixed) << mixed.canonical();
  const Policy back = Policy::parse("te-fp8-current,matmul.block-w=mxfp8-e4m3,matmul.block=off");
  EXPECT_FALSE(back.at(OpKind::Matmul, Pass::Forward).quant.fp8_of(GemmRole::W).on());
  EXPECT_TRUE(back.at(OpKind::Matmul, Pass::Forward).quant.fp8_of(GemmRole::X).on());
  EXPECT_EQ(Policy::parse(back.canonical()), back) << back.canonical();
  for (const char* spec : {"te-fp8-delayed,matmul.rht=on", "deepseek-fp8,matmul.bwd-weight.rht=on:7"})
    EXPECT_EQ(Policy::parse(Policy::parse(spec).canonical()), Policy::parse(spec)) << spec;
  const Policy d = Policy::parse("te-fp8-delayed");
  EXPECT_EQ(to_string(d.fp8_scaling()), "delayed:1024:max:0");
  const OpPrecision& fwd = d.at(OpKind::Matmul, Pass::Forward);
  EXPECT_EQ(to_string(fwd.quant.fp8_of(GemmRole::X)), "e4m3");
  EXPECT_EQ(to_string(fwd.quant.fp8_of(GemmRole::Dy)), "e5m2");
  EXPECT_FALSE(d.at(OpKind::Classifier, Pass::Forward).quant.active());  // the output head stays bf16
  const Policy s = Policy::parse("deepseek-fp8");
  EXPECT_EQ(to_string(s.at(OpKind::Matmul, Pass::BackwardWeight).quant.fp8_of(GemmRole::W)), "e4m3:128x128:pad");
  EXPECT_EQ(to_string(s.at(OpKind::Matmul, Pass::BackwardWeight).quant.fp8_of(GemmRole::X)), "e4m3:1x128:pad");
}

// ---- fp8-rescale: the decoded model on operands scaled by powers of two into E4M3's range -------------------------

/// The largest k with amax·2^k <= top, by search from k = 0 (one binade at a time): the written-out definition of
/// rescale_exponent (0 for amax 0 or non-finite).
int rescale_by_search(double amax, double top) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  int k = 0;
  while (std::ldexp(amax, k) > top) --k;
  while (std::ldexp(amax, k + 1) <= top) ++k;
  return k;
}

TEST(Fp8Scaling, RescaleExponentOnAdversarialAmax) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {0.0, -0.0, inf, -inf, std::nan("")}) EXPECT_EQ(rescale_exponent(bad, Fp8Elem::E4M3), 0) << bad;
  EXPECT_EQ(rescale_exponent(448.0, Fp8Elem::E4M3), 0);
  EXPECT_EQ(rescale_exponent(224.0, Fp8Elem::E4M3), 1);   // 448 exactly
  EXPECT_EQ(rescale_exponent(256.0, Fp8Elem::E4M3), 0);   // 512 would be above
  EXPECT_EQ(rescale_exponent(57344.0, Fp8Elem::E5M2), 0);
  EXPECT_EQ(rescale_exponent(1e-6, Fp8Elem::E4M3), 28);   // 1e-6 · 2^28 = 268.4; · 2^29 = 536.9
  for (Fp8Elem e : {Fp8Elem::E4M3, Fp8Elem::E5M2}) {
    const double top = fp8_max(e);
    // Every binade edge 2^b and the values one ulp either side, fp8_max·2^b and its neighbours, from subnormal
    // binary64 to the top of binary32's range.
    for (int b = -1074; b <= 130; ++b) {
      for (double c : {std::ldexp(1.0, b), std::ldexp(top, b)}) {
        if (c == 0 || !std::isfinite(c)) continue;
        for (double a : {c, std::nextafter(c, 0.0), std::nextafter(c, inf)}) {
          if (!(a > 0)) continue;
          const int k = rescale_exponent(a, e);
          ASSERT_EQ(k, rescale_by_search(a, top)) << a;
          ASSERT_LE(std::ldexp(a, k), top);
          ASSERT_GT(std::ldexp(a, k + 1), top);
        }
      }
    }
  }
}

namespace rescaled {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The backward-weight entry of deepseek-fp8-nopromote-rescaled (tc-h100-fp8, fp8-rescale=e4m3).
OpPrecision entry(const char* spec = "deepseek-fp8-nopromote-rescaled") {
  return Policy::parse(spec).at(OpKind::Matmul, Pass::BackwardWeight);
}

/// C (M×N) (+)= A (M×K) · B (K×N) by the written-out definition of the rescaled GEMM: a_i, b_j by search over the
/// finite amax of each row of A / column of B, the scaled row and column and C'_ij = C_ij·2^(a_i+b_j), the
/// tc-h100-fp8 model on them (numerics::gemm of that one 1×1 product, from C'_ij when accumulating), and the
/// result times 2^−(a_i+b_j).
std::vector<double> written_out(const std::vector<double>& A, const std::vector<double>& B, std::vector<double> C,
                                std::size_t M, std::size_t N, std::size_t K, bool accumulate) {
  const numerics::Accumulation acc = numerics::parse_accumulation("tc-h100-fp8");
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double ma = 0, mb = 0;
      for (std::size_t k = 0; k < K; ++k) {
        if (std::isfinite(A[i * K + k])) ma = std::max(ma, std::fabs(A[i * K + k]));
        if (std::isfinite(B[k * N + j])) mb = std::max(mb, std::fabs(B[k * N + j]));
      }
      const int a = rescale_by_search(ma, 448.0), b = rescale_by_search(mb, 448.0);
      std::vector<double> row(K), col(K);
      for (std::size_t k = 0; k < K; ++k) {
        row[k] = A[i * K + k] * std::ldexp(1.0, a);
        col[k] = B[k * N + j] * std::ldexp(1.0, b);
      }
      double c = accumulate ? C[i * N + j] * std::ldexp(1.0, a + b) : 0.0;
      numerics::gemm(acc, 1, 1, K, numerics::ConstMatrix{row.data(), K}, numerics::ConstMatrix{col.data(), 1}, &c, 1,
                     accumulate);
      C[i * N + j] = c * std::ldexp(1.0, -(a + b));
    }
  return C;
}

/// rescaled_gemm under the preset's entry, A given transposed or not (the op's layouts).
std::vector<double> run(const OpPrecision& p, const std::vector<double>& A, const std::vector<double>& B,
                        std::vector<double> C, std::size_t M, std::size_t N, std::size_t K, bool accumulate,
                        bool a_transposed = false) {
  const Ctx<Emulated> ctx(p);
  std::vector<double> At = A;
  if (a_transposed)
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t k = 0; k < K; ++k) At[k * M + i] = A[i * K + k];
  const numerics::ConstMatrix a = a_transposed ? numerics::ConstMatrix{At.data(), M, true}
                                               : numerics::ConstMatrix{A.data(), K};
  rescaled_gemm(ctx, p.quant.rescale, M, N, K, a, numerics::ConstMatrix{B.data(), N}, C.data(), N, accumulate, Key{});
  return C;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); }

/// Decoded DeepSeek 1×128 blocks (along each row) of the values v (rows × K).
std::vector<double> decoded_rows(std::vector<double> v, std::size_t rows, std::size_t K) {
  for (double& x : v) x = static_cast<float>(x);
  quantize_fp8_operand(parse_fp8_operand("e4m3:1x128:pad"), v, rows, K, {}, nullptr, false, "test");
  return v;
}

/// The error bound of the tc-h100-fp8 model (numerics/accumulate.hpp: groups of g = 32 terms and the running sum
/// aligned on the largest anchor E — a product's anchor the sum of its factors' exponents, each clamped below at the
/// input emin −6; the sum's its leading bit — every addend truncated to a multiple of 2^(E−13); the aligned sum
/// truncated to 14 bits, binary32's range) for Σ x_k·y_k from the exact start c: per step j, with σ the bound on
/// |s_{j−1}| (|c| + the |terms| so far + the error so far), G the step's Σ|t_k| and Â the largest 2^anchor of its
/// products, error_j < n_j·2^−13·max(σ, Â) (alignment; n_j addends) + 2^−13·(σ + G) (the truncation to 14 bits)
/// + 2^−139 (its subnormal spacing). The bound is evaluated in binary64 and widened by 2^−40 for that evaluation.
double model_bound(const std::vector<double>& x, const std::vector<double>& y, double c) {
  const double u = std::ldexp(1.0, -13);
  double err = 0, seen = std::fabs(c);
  for (std::size_t k0 = 0; k0 < x.size(); k0 += 32) {
    double G = 0, Ahat = 0, n = c != 0 || k0 > 0 ? 1 : 0;
    for (std::size_t k = k0; k < std::min(x.size(), k0 + 32); ++k) {
      if (x[k] == 0 || y[k] == 0) continue;
      G += std::fabs(x[k] * y[k]);
      Ahat = std::max(Ahat, std::ldexp(1.0, std::max(std::ilogb(x[k]), -6) + std::max(std::ilogb(y[k]), -6)));
      n += 1;
    }
    const double sigma = seen + err;
    err += n * u * std::max(sigma, Ahat) + u * (sigma + G) + std::ldexp(1.0, -139);
    seen += G;
  }
  return err * (1 + std::ldexp(1.0, -40));
}

}  // namespace rescaled

TEST(Fp8Scaling, RescaledGemmWrittenOut) {
  using namespace rescaled;
  const OpPrecision p = entry();
  ASSERT_EQ(p.quant.rescale, Fp8Elem::E4M3);
  // A (6 × 64) decoded from DeepSeek blocks, then made adversarial row by row: row 0 zeros (amax 0), row 1 with
  // amax 448·2^−20 exactly (a binade edge of the choice: a = 20), row 2 one binary64 ulp above it (a = 19), row 3
  // with a NaN, row 4 with −inf beside finite values, row 5 of decoded values ~1e-6. B (64 × 5) by column: column 0
  // zeros, column 1 around 2^4, column 2 with a NaN, column 3 with +inf, column 4 ~1e-6. C nonzero (beta = 1).
  const std::size_t M = 6, K = 64, N = 5;
  std::mt19937_64 g(7);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> A(M * K), B(K * N), C(M * N);
  for (std::size_t e = 0; e < A.size(); ++e) A[e] = d(g) * (e / K == 5 ? 1e-6 : e / K == 1 || e / K == 2 ? 1e-4 : 1.0);
  for (std::size_t e = 0; e < B.size(); ++e) B[e] = d(g) * (e % N == 4 ? 1e-6 : e % N == 1 ? 16.0 : 1.0);
  for (double& v : C) v = static_cast<float>(d(g) * 1e-3);
  A = decoded_rows(A, M, K);
  std::vector<double> Bt(N * K);  // B's columns decoded as 1×128 blocks along K, as the op's x in bwd-weight
  for (std::size_t j = 0; j < N; ++j)
    for (std::size_t k = 0; k < K; ++k) Bt[j * K + k] = B[k * N + j];
  Bt = decoded_rows(Bt, N, K);
  for (std::size_t j = 0; j < N; ++j)
    for (std::size_t k = 0; k < K; ++k) B[k * N + j] = Bt[j * K + k];
  for (std::size_t k = 0; k < K; ++k) {
    A[0 * K + k] = 0.0;
    A[1 * K + k] = std::fmin(std::fabs(A[1 * K + k]), 1e-4) * (k % 2 ? 1 : -1);
    A[2 * K + k] = A[1 * K + k];
    B[k * N + 0] = 0.0;
  }
  A[1 * K + 3] = std::ldexp(448.0, -20);                       // 4.27e-4: the row's amax
  A[2 * K + 3] = std::nextafter(std::ldexp(448.0, -20), kInf);
  A[3 * K + 10] = kNan;
  A[4 * K + 20] = -kInf;
  B[5 * N + 2] = kNan;
  B[9 * N + 3] = kInf;
  EXPECT_EQ(rescale_exponent(std::ldexp(448.0, -20), Fp8Elem::E4M3), 20);
  EXPECT_EQ(rescale_exponent(A[2 * K + 3], Fp8Elem::E4M3), 19);
  for (bool accumulate : {false, true})
    for (bool at : {false, true}) {
      const std::vector<double> got = run(p, A, B, C, M, N, K, accumulate, at);
      const std::vector<double> want = written_out(A, B, C, M, N, K, accumulate);
      for (std::size_t e = 0; e < M * N; ++e)
        EXPECT_TRUE(same(got[e], want[e])) << "element " << e << " accumulate " << accumulate << ": " << got[e]
                                           << " vs " << want[e];
    }
  // The adversarial rows and columns do what they say: with finite columns the zero row gives C through the 14-bit
  // accumulator (C truncated to 14 bits: the adder's step normalises the running sum even with no product), and so
  // does the zero column; NaN propagates (0·NaN is NaN: a NaN column is NaN even in the zero row); −inf and +inf
  // give ±inf or NaN.
  const std::vector<double> got = run(p, A, B, C, M, N, K, true);
  const auto trunc14 = [](double v) {
    return numerics::round_to(numerics::Format{14, -126, 127}, numerics::Rounding::TowardZero, v);
  };
  for (std::size_t j : {0u, 1u, 4u}) EXPECT_EQ(got[0 * N + j], trunc14(C[0 * N + j])) << j;
  for (std::size_t i : {0u, 1u, 2u, 5u}) EXPECT_EQ(got[i * N + 0], trunc14(C[i * N + 0])) << i;
  for (std::size_t j = 0; j < N; ++j) EXPECT_TRUE(std::isnan(got[3 * N + j])) << j;
  for (std::size_t i = 0; i < M; ++i) EXPECT_TRUE(std::isnan(got[i * N + 2])) << i;
  EXPECT_TRUE(std::isinf(got[4 * N + 1]));
  EXPECT_TRUE(std::isinf(got[1 * N + 3]) || std::isnan(got[1 * N + 3]));
}

TEST(Fp8Scaling, RescaledGemmKeepsSmallDecodedOperandsWithinTheAccumulatorsBound) {
  using namespace rescaled;
  // T1's weight-gradient GEMM in miniature: K = 256 tokens, dy decoded from 1×128 DeepSeek blocks of values ~1e-6
  // (A: 4 output features × 256 tokens, the pass's dyᵀ), x ~ N(0, 1) decoded likewise (B: 256 tokens × 6 in-features).
  // Against the same fp8 operands summed exactly: the rescaled arm stays within the 14-bit accumulator's bound for
  // every element; the unrescaled deepseek-fp8-nopromote model flushes (its error exceeds that bound).
  const std::size_t M = 4, K = 256, N = 6;
  std::mt19937_64 g(11);
  std::normal_distribution<double> d(0.0, 1.0);
  for (bool positive : {false, true}) {
    std::vector<double> A(M * K), Bt(N * K);
    for (double& v : A) v = (positive ? std::fabs(d(g)) : d(g)) * 1e-6;
    for (double& v : Bt) v = positive ? std::fabs(d(g)) : d(g);
    A = decoded_rows(A, M, K);
    Bt = decoded_rows(Bt, N, K);
    std::vector<double> B(K * N);
    for (std::size_t j = 0; j < N; ++j)
      for (std::size_t k = 0; k < K; ++k) B[k * N + j] = Bt[j * K + k];
    const std::vector<double> zero(M * N, 0.0);
    const std::vector<double> rescaled = run(entry(), A, B, zero, M, N, K, false);
    std::vector<double> plain = zero;  // deepseek-fp8-nopromote's decoded model: the same GEMM, unscaled
    const Ctx<Emulated> ctx(entry("deepseek-fp8-nopromote"));
    ctx.gemm(M, N, K, numerics::ConstMatrix{A.data(), K}, numerics::ConstMatrix{B.data(), N}, plain.data(), N, false,
             Key{});
    int plain_beyond = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const numerics::ExactSum exact = numerics::exact_dot(&A[i * K], 1, &B[j], static_cast<std::ptrdiff_t>(N), K);
        const numerics::ExactSum abs = numerics::exact_abs_dot(&A[i * K], 1, &B[j], static_cast<std::ptrdiff_t>(N), K);
        // The bound on the operands the model sees (row i · 2^a, column j · 2^b), scaled back.
        double ma = 0, mb = 0;
        std::vector<double> row(K), col(K);
        for (std::size_t k = 0; k < K; ++k) {
          ma = std::max(ma, std::fabs(A[i * K + k]));
          mb = std::max(mb, std::fabs(B[k * N + j]));
        }
        const int a = rescale_by_search(ma, 448.0), b = rescale_by_search(mb, 448.0);
        for (std::size_t k = 0; k < K; ++k) {
          row[k] = std::ldexp(A[i * K + k], a);
          col[k] = std::ldexp(B[k * N + j], b);
        }
        const double bound = std::ldexp(model_bound(row, col, 0.0), -(a + b));
        EXPECT_LE(std::fabs(numerics::signed_error(exact, rescaled[i * N + j])), bound) << i << "," << j;
        EXPECT_LT(bound, 0.04 * abs.to_double()) << "the bound is informative";  // about 34·8·2^−13 of Σ|t|
        plain_beyond += std::fabs(numerics::signed_error(exact, plain[i * N + j])) > bound;
        if (positive) {  // every product positive: the flush loses most of the sum
          EXPECT_GT(std::fabs(numerics::signed_error(exact, plain[i * N + j])), 0.5 * exact.to_double()) << i << "," << j;
        }
      }
    if (positive) {
      EXPECT_EQ(plain_beyond, static_cast<int>(M * N));
    }
  }
}

TEST(Fp8Scaling, RescaledGemmScalesExactlyByPowersOfTwo) {
  using namespace rescaled;
  // The property the arm rests on: A·2^j (or B·2^j, and C·2^j with it) gives the result times 2^j exactly, for j
  // far beyond where the unscaled model stops commuting (which the last check shows).
  const std::size_t M = 3, K = 160, N = 4;
  std::mt19937_64 g(5);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> A(M * K), B(K * N), C(M * N);
  for (std::size_t e = 0; e < A.size(); ++e) A[e] = static_cast<float>(d(g) * std::ldexp(1.0, static_cast<int>(e % 7)));
  for (double& v : B) v = static_cast<float>(d(g));
  for (double& v : C) v = static_cast<float>(d(g));
  A = decoded_rows(A, M, K);
  const OpPrecision p = entry();
  for (bool accumulate : {false, true}) {
    const std::vector<double> base = run(p, A, B, C, M, N, K, accumulate);
    for (int j : {-60, -20, -7, -1, 1, 3, 30}) {
      std::vector<double> As = A, Bs = B, Cs = C;
      for (double& v : As) v = std::ldexp(v, j);
      for (double& v : Bs) v = std::ldexp(v, j);
      for (double& v : Cs) v = std::ldexp(v, j);
      const std::vector<double> ra = run(p, As, B, Cs, M, N, K, accumulate);
      const std::vector<double> rb = run(p, A, Bs, Cs, M, N, K, accumulate);
      Cs = C;
      for (double& v : Cs) v = std::ldexp(v, 2 * j);
      const std::vector<double> rab = run(p, As, Bs, Cs, M, N, K, accumulate);
      for (std::size_t e = 0; e < M * N; ++e) {
        EXPECT_EQ(ra[e], std::ldexp(base[e], j)) << j << " " << e;
        EXPECT_EQ(rb[e], std::ldexp(base[e], j)) << j << " " << e;
        EXPECT_EQ(rab[e], std::ldexp(base[e], 2 * j)) << j << " " << e;
      }
    }
  }
  // The unscaled model does not commute at j = −20 (products below its input range): the check above can fail.
  const Ctx<Emulated> plain(entry("deepseek-fp8-nopromote"));
  std::vector<double> r0(M * N, 0.0), r1(M * N, 0.0), As = A;
  for (double& v : As) v = std::ldexp(v, -20);
  plain.gemm(M, N, K, numerics::ConstMatrix{A.data(), K}, numerics::ConstMatrix{B.data(), N}, r0.data(), N, false, Key{});
  plain.gemm(M, N, K, numerics::ConstMatrix{As.data(), K}, numerics::ConstMatrix{B.data(), N}, r1.data(), N, false, Key{});
  int differ = 0;
  for (std::size_t e = 0; e < M * N; ++e) differ += r1[e] != std::ldexp(r0[e], -20);
  EXPECT_GT(differ, 0);
}

TEST(Fp8Scaling, RescaledPresetInTheLinearLayer) {
  // deepseek-fp8-nopromote-rescaled in the op (every pass): the operands' quantization is deepseek-fp8-nopromote's,
  // the GEMM rescaled_gemm. dy·2^j with every block's amax above DeepSeek's 1e-4 clamp gives codes equal and decoded
  // values times 2^j, so dW (rounded to fp32, stored bf16, in range) is exactly 2^j times; a one-row call (Select)
  // gives the whole GEMM's row.
  const std::size_t n = 256, in = 64, out = 16;
  const MatmulShape s{static_cast<std::int64_t>(n), static_cast<std::int64_t>(in), static_cast<std::int64_t>(out)};
  std::mt19937_64 g(3);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(n * in), dy(n * out);
  for (double& v : x) v = numerics::round_to(numerics::formats::bf16, numerics::Rounding::NearestEven, d(g));
  for (double& v : dy) v = numerics::round_to(numerics::formats::bf16, numerics::Rounding::NearestEven, d(g) / 64);
  const Policy p = Policy::parse("deepseek-fp8-nopromote-rescaled,matmul.fp8-x=e4m3:1x64,matmul.fp8-dy=e4m3:1x64");
  const Ctx<Emulated> ctx(p.at(OpKind::Matmul, Pass::BackwardWeight));
  const auto dw_of = [&](const std::vector<double>& g_dy, Select sel = {}) {
    std::vector<double> dw(out * in, 0.0);
    matmul_backward_weight<Emulated>(dw, g_dy, x, s, ctx, sel);
    return dw;
  };
  const std::vector<double> base = dw_of(dy);
  for (int j : {-5, -1, 2, 6}) {
    std::vector<double> dys = dy;
    for (double& v : dys) v = std::ldexp(v, j);
    const std::vector<double> r = dw_of(dys);
    for (std::size_t e = 0; e < r.size(); ++e) ASSERT_EQ(r[e], std::ldexp(base[e], j)) << j << " " << e;
  }
  const std::vector<std::int64_t> rows{5};
  const std::vector<double> one = dw_of(dy, Select(rows));
  for (std::size_t c = 0; c < in; ++c) EXPECT_EQ(one[5 * in + c], base[5 * in + c]) << c;
}

TEST(Fp8Scaling, RescalePolicyTextAndRefusals) {
  const Policy r = Policy::parse("deepseek-fp8-nopromote-rescaled");
  EXPECT_EQ(r.canonical(), "deepseek-fp8-nopromote-rescaled");
  EXPECT_EQ(Policy::parse("deepseek-fp8-nopromote,matmul.fp8-rescale=e4m3").canonical(),
            "deepseek-fp8-nopromote-rescaled");
  EXPECT_EQ(Policy::parse("deepseek-fp8-nopromote-rescaled,matmul.fp8-rescale=off").canonical(),
            "deepseek-fp8-nopromote");
  for (OpKind k : kAllOps)
    for (Pass ps : kAllPasses) {
      const bool projection = group_of(k) == OpGroup::Projection;
      EXPECT_EQ(r.at(k, ps).quant.rescale, projection ? Fp8Elem::E4M3 : Fp8Elem::Off);
      // Everything else is deepseek-fp8-nopromote's.
      OpPrecision e = r.at(k, ps);
      e.quant.rescale = Fp8Elem::Off;
      EXPECT_EQ(e, Policy::parse("deepseek-fp8-nopromote").at(k, ps));
    }
  EXPECT_EQ(Policy::parse("deepseek-fp8-nopromote").at(OpKind::Matmul, Pass::Forward).quant.rescale, Fp8Elem::Off);
  for (const char* spec : {"deepseek-fp8-nopromote-rescaled,matmul.bwd-weight.fp8-rescale=e5m2",
                           "te-fp8-current,matmul.fwd.fp8-rescale=e4m3"})
    EXPECT_EQ(Policy::parse(Policy::parse(spec).canonical()), Policy::parse(spec)) << spec;
  const auto one_line = [](const char* spec, const std::string& needle) {
    try {
      Policy::parse(spec);
      ADD_FAILURE() << "not refused: " << spec;
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  one_line("deepseek-fp8-nopromote,matmul.fp8-rescale=e4m4", "unknown fp8-rescale value 'e4m4'; valid: off, e4m3, e5m2");
  one_line("deepseek-fp8-nopromote,matmul.fp8-rescale=", "empty value");
  one_line("fp32,softmax.fp8-rescale=e4m3", "block quantization applies to the GEMM ops");
  one_line("deepseek-fp8-nopromote-rescaled,matmul.fp8-rescales=e4m3", "fp8-rescale");
}

}  // namespace
}  // namespace roundoff::ops
