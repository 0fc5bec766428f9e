// Scaled fp8 operands (ops/fp8_scaling.hpp; issue 44): Transformer Engine's per-tensor scales (current and delayed)
// and DeepSeek-V3's block scales against written-out definitions on adversarial tensors (amax 0, amax at a binade
// edge, ±inf and NaN, an amax history longer than the run), the fp8 casts exhaustively over every bf16 input, the
// policy text of the recipes, and the refusals (history length 0, negative margin, a block that does not divide).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace roundoff::ops
