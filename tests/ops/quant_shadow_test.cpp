// The shadow's second reference of a GEMM with quantized operands (ops/quant_shadow.hpp, OpRecord::acc; telemetry
// shadow_acc_*): against written-out computations (fp8 codes decoded with their scales, the exact products summed
// in MPFR, the normwise error of the op's output), 0 for a GEMM that sums exactly into a binary64 output, DeepSeek's
// K = 4096 finding with and without promotion, and that the second reference changes no bit and no fp8 state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "numerics/round.hpp"
#include "ops/fp8_scaling.hpp"
#include "ops/policy.hpp"
#include "ops/probe.hpp"
#include "ops/runner.hpp"

namespace roundoff::ops {
namespace {

float f32(double x) { return static_cast<float>(x); }
float div32(float a, float b) { return f32(static_cast<double>(a) / static_cast<double>(b)); }
float mul32(float a, float b) { return f32(static_cast<double>(a) * static_cast<double>(b)); }

/// rows × cols N(0, σ²) values rounded to bf16 (so the bf16 entry cast of the fp8 presets keeps them).
std::vector<double> bf16_normal(std::size_t rows, std::size_t cols, unsigned seed, double sigma = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<double> v(rows * cols);
  for (double& x : v) x = numerics::round_to(numerics::formats::bf16, numerics::Rounding::NearestEven, d(g));
  return v;
}

/// The record of the one shadowed call on `tape`.
const OpRecord& only(const Tape& tape) {
  EXPECT_EQ(tape.records().size(), 1u);
  return tape.records().front();
}

/// ‖y − r‖₂/‖r‖₂ and Σ(y − r)·r/Σr², y and r element by element (the same sums, in the same order, as the probe).
struct Norms {
  double norm_rel, signed_rel;
};
Norms norms(const std::vector<double>& y, const std::vector<Ref>& r) {
  double e2 = 0, r2 = 0, cross = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(Ref(y[i]) - r[i]), rv = static_cast<double>(r[i]);
    e2 += d * d;
    r2 += rv * rv;
    cross += d * rv;
  }
  return {std::sqrt(e2 / r2), cross / r2};
}

TEST(QuantShadow, PerTensorForwardWrittenOut) {
  // te-fp8-current, forward (the exact per-tensor model): x and W cast to e4m3 with their current scales, decoded
  // as code · fp32(1/scale), the products summed in MPFR; the recorded error of y against that is the written-out
  // one, while the MPFR shadow's own error (against the unquantized x·Wᵀ) is the quantization's, far larger.
  const std::size_t n = 3, K = 96, m = 5;
  const std::vector<double> x = bf16_normal(n, K, 1), w = bf16_normal(m, K, 2, 0.05);
  Runner run(Policy::parse("te-fp8-current"));
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 0});
  std::vector<double> y(n * m);
  run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, MatmulShape{3, 96, 5});
  const OpRecord& rec = only(tape);
  ASSERT_TRUE(rec.acc.has_value());

  const float sx = current_scale(tensor_amax(x), 448.0f), sw = current_scale(tensor_amax(w), 448.0f);
  const double ix = div32(1.0f, sx), iw = div32(1.0f, sw);
  std::vector<Ref> r(n * m);
  std::vector<double> unit(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < m; ++j) {
      Ref s = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double qa = fp8_cast(Fp8Elem::E4M3, mul32(f32(x[i * K + k]), sx));
        const double qb = fp8_cast(Fp8Elem::E4M3, mul32(f32(w[j * K + k]), sw));
        s += (Ref(qa) * ix) * (Ref(qb) * iw);
      }
      r[i * m + j] = s;
    }
    unit[i] = norms(std::vector<double>(y.begin() + i * m, y.begin() + (i + 1) * m),
                    std::vector<Ref>(r.begin() + i * m, r.begin() + (i + 1) * m)).norm_rel;
  }
  const Norms want = norms(y, r);
  // The MPFR sum rounds at 133 bits, the exact sum once: the same doubles after the subtraction.
  EXPECT_DOUBLE_EQ(rec.acc->error.norm_rel, want.norm_rel);
  EXPECT_DOUBLE_EQ(rec.acc->error.signed_rel, want.signed_rel);
  EXPECT_EQ(rec.acc->units, 3);
  EXPECT_DOUBLE_EQ(rec.acc->unit_max, *std::max_element(unit.begin(), unit.end()));
  std::sort(unit.begin(), unit.end());
  EXPECT_DOUBLE_EQ(rec.acc->unit_median, unit[1]);
  // Against the quantized operands' product y errs by its accumulation and bf16 output rounding (≤ 2^-8 relative
  // per element); against the unquantized one, by e4m3's quantization too (a few percent).
  EXPECT_GT(want.norm_rel, 0.0);
  EXPECT_LT(want.norm_rel, std::ldexp(1.0, -8));
  EXPECT_GT(rec.error.norm_rel, 5 * want.norm_rel);
}

TEST(QuantShadow, BlockWeightGradientWrittenOut) {
  // deepseek-fp8, weight gradient (the exact per-block model, K = tokens = 256 in two 1×128 blocks of dy's and x's
  // columns), added into a nonzero dW: r(o, i) = dW_before(o, i) + Σ_k (q_dy · s_dy(o, k/128)) · (q_x · s_x(i, k/128)).
  const std::size_t N = 256, O = 4, I = 3;
  const std::vector<double> dy = bf16_normal(N, O, 3, 1e-3), x = bf16_normal(N, I, 4);
  std::vector<double> dw = bf16_normal(O, I, 5, 0.1);
  const std::vector<double> before = dw;
  Runner run(Policy::parse("deepseek-fp8"));
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 0});
  run.matmul_backward_weight({OpKind::Matmul, 0, "dwq", Observe::Outputs, "q"}, dw, dy, x, MatmulShape{256, 3, 4});
  const OpRecord& rec = only(tape);
  ASSERT_TRUE(rec.acc.has_value());
  // Column c of a (N × C) operand, decoded block by block along the tokens.
  const auto decoded_column = [&](const std::vector<double>& v, std::size_t C, std::size_t c) {
    std::vector<double> d(N);
    for (std::size_t b = 0; b < N / 128; ++b) {
      float amax = 0;
      for (std::size_t k = b * 128; k < (b + 1) * 128; ++k) amax = std::fmax(amax, std::fabs(f32(v[k * C + c])));
      const float s = div32(std::fmax(amax, 1e-4f), 448.0f);
      for (std::size_t k = b * 128; k < (b + 1) * 128; ++k)
        d[k] = static_cast<double>(fp8_cast(Fp8Elem::E4M3, div32(f32(v[k * C + c]), s))) * static_cast<double>(s);
    }
    return d;
  };
  std::vector<Ref> r(O * I);
  for (std::size_t o = 0; o < O; ++o)
    for (std::size_t i = 0; i < I; ++i) {
      const std::vector<double> a = decoded_column(dy, O, o), b = decoded_column(x, I, i);
      Ref s = before[o * I + i];
      for (std::size_t k = 0; k < N; ++k) s += Ref(a[k]) * b[k];
      r[o * I + i] = s;
    }
  const Norms want = norms(dw, r);
  EXPECT_DOUBLE_EQ(rec.acc->error.norm_rel, want.norm_rel);
  EXPECT_DOUBLE_EQ(rec.acc->error.signed_rel, want.signed_rel);
  EXPECT_EQ(rec.acc->units, 4);
  EXPECT_GT(rec.error.norm_rel, 5 * want.norm_rel);
}

TEST(QuantShadow, ExactSumIntoBinary64MeasuresNothing) {
  // te-fp8-current with the matmul entries in binary64 and fp64-seq accumulation (the decoded model: a binary64
  // result is no fp32 register). Each operand's amax is 56, so its scale is a power of two (448/56 = 8 for the
  // e4m3 x and W, 57344/56 = 1024 for the e5m2 dy) and the decoded values code/scale are the fp8 grid's values,
  // exact in fp32. Every |element| is at least 1/8, so the decoded values are multiples of 2^-6 (3 or 2 fraction
  // bits), their products multiples of 2^-12 below 2^12, and every partial sum of 96 of them (plus the gradient's
  // old value, 0.25 or -0.5) a multiple of 2^-12 below 2^19: 31 bits, exact in binary64. So the GEMM sums exactly
  // into a binary64 output and the new error is 0 in every pass, while the shadow's own error is the quantization's.
  const std::size_t n = 96, in = 96, out = 96;
  std::vector<double> x = bf16_normal(n, in, 6, 8.0), w = bf16_normal(out, in, 7, 8.0), dy = bf16_normal(n, out, 8, 8.0);
  for (auto* v : {&x, &w, &dy}) {
    for (double& e : *v) e = std::copysign(std::clamp(std::fabs(e), 0.125, 55.0), e);
    (*v)[5] = -56.0;
  }
  ASSERT_EQ(current_scale(56.0f, 448.0f), 8.0f);
  ASSERT_EQ(current_scale(56.0f, 57344.0f), 1024.0f);
  Runner run(Policy::parse("te-fp8-current,matmul=fp64"));
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 0});
  const MatmulShape sh{96, 96, 96};
  std::vector<double> y(n * out), dx(n * in, 0.25), dw(out * in, -0.5);
  run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, sh);
  run.matmul_backward_data({OpKind::Matmul, 0, "dx", Observe::Outputs, "q"}, dx, dy, w, sh);
  run.matmul_backward_weight({OpKind::Matmul, 0, "dwq", Observe::Outputs, "q"}, dw, dy, x, sh);
  ASSERT_EQ(tape.records().size(), 3u);
  for (const OpRecord& rec : tape.records()) {
    ASSERT_TRUE(rec.acc.has_value()) << name_of(rec.pass);
    EXPECT_EQ(rec.acc->error.norm_rel, 0.0) << name_of(rec.pass);
    EXPECT_EQ(rec.acc->error.max_ulp, 0.0) << name_of(rec.pass);
    EXPECT_EQ(rec.acc->unit_max, 0.0) << name_of(rec.pass);
    EXPECT_EQ(rec.acc->units, 96);
    EXPECT_GT(rec.error.norm_rel, 1e-3) << name_of(rec.pass);  // e4m3 quantization (3 significant bits)
  }
}

TEST(QuantShadow, UnquantizedGemmHasNoSecondReference) {
  Runner run(Policy::parse("h100-amp-bf16"));
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 0});
  const std::vector<double> x = bf16_normal(4, 32, 9), w = bf16_normal(8, 32, 10);
  std::vector<double> y(32);
  run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, MatmulShape{4, 32, 8});
  EXPECT_FALSE(only(tape).acc.has_value());
}

TEST(QuantShadow, DeepSeekPromotionAtK4096) {
  // docs/studies/fp8-gemm-accumulation.md, on the same tensor-core model (tc-h100-fp8) with N(0,1) operands at
  // K = 4096: normwise 0.13 % without promotion and 0.013 % with promote=128:fp32 (16,384 outputs, per-tensor
  // scales). Here DeepSeek's block-scaled operands (x 1×128, W 128×128) in the linear layer's forward, 8 × 64 = 512
  // outputs, the output kept in fp32 so that bf16's rounding (≈ 7·10⁻⁴ normwise, amendment 1 of fp8-recipes.md) does
  // not hide the promoted error: the new metric must find the same orders of magnitude (within a factor of 3, half
  // a decade: the scale granularity and the sample differ, the accumulator does not), promotion must buy at least
  // a factor of 3 of the page's 10, and both must lie far below the quantization error the MPFR shadow reports.
  // The error of a promoted GEMM is bounded by its unpromoted 128-product chunks (the page: equal at K = 128).
  const std::size_t n = 8, K = 4096, m = 64;
  const std::vector<double> x = bf16_normal(n, K, 11), w = bf16_normal(m, K, 12);
  const auto measure = [&](const std::string& spec) {
    Runner run(Policy::parse(spec));
    Tape tape;
    run.enable_shadow(&tape, {.every = 1, .units = 0});
    std::vector<double> y(n * m);
    run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, MatmulShape{8, 4096, 64});
    return only(tape);
  };
  const OpRecord promoted = measure("deepseek-fp8,matmul.fwd=fp32,matmul.fwd.acc=[tc-h100-fp8,promote=128:fp32]");
  const OpRecord unpromoted = measure("deepseek-fp8-nopromote,matmul.fwd=fp32,matmul.fwd.acc=tc-h100-fp8");
  ASSERT_TRUE(promoted.acc && unpromoted.acc);
  const double p = promoted.acc->error.norm_rel, u = unpromoted.acc->error.norm_rel;
  EXPECT_GT(p, 1.3e-4 / 3);
  EXPECT_LT(p, 1.3e-4 * 3);
  EXPECT_GT(u, 1.3e-3 / 3);
  EXPECT_LT(u, 1.3e-3 * 3);
  EXPECT_GT(u, 3 * p);
  EXPECT_GT(promoted.error.norm_rel, 10 * u);  // e4m3's quantization: ≈ 2^-4 / √3 · ... a few percent
  std::printf("K = 4096 normwise: promoted %.3g, unpromoted %.3g (quantization %.3g, %.3g)\n", p, u,
              promoted.error.norm_rel, unpromoted.error.norm_rel);
}

TEST(QuantShadow, ChangesNoBitAndNoFp8State) {
  // te-fp8-delayed records amax during a training pass: the recomputation of the operands for the second reference
  // must neither record again nor count casts; outputs, histories and counts equal with the shadow on and off.
  const MatmulShape sh{16, 32, 16};  // nvfp4's 16×16 weight tiles need 16 | out
  const std::vector<double> x = bf16_normal(16, 32, 13), w = bf16_normal(16, 32, 14), dy = bf16_normal(16, 16, 15);
  for (const char* spec : {"te-fp8-delayed", "deepseek-fp8", "nvfp4"}) {
    std::vector<double> out[2];
    Fp8ScalingState state[2];
    std::map<std::string, Fp8CastCounts> counts[2];
    for (int shadow = 0; shadow < 2; ++shadow) {
      Runner run(Policy::parse(spec), 7);
      Tape tape;
      if (shadow == 1) run.enable_shadow(&tape, {.every = 1, .units = 3});
      run.set_fp8_recording(true);
      run.set_fp8_counting(true);
      std::vector<double> y(16 * 16), dx(16 * 32), dw(16 * 32);
      run.matmul_forward({OpKind::Matmul, 0, "q"}, y, x, w, sh);
      run.matmul_backward_data({OpKind::Matmul, 0, "dx", Observe::Outputs, "q"}, dx, dy, w, sh);
      run.matmul_backward_weight({OpKind::Matmul, 0, "dwq", Observe::Outputs, "q"}, dw, dy, x, sh);
      run.fp8_update();
      out[shadow] = y;
      out[shadow].insert(out[shadow].end(), dx.begin(), dx.end());
      out[shadow].insert(out[shadow].end(), dw.begin(), dw.end());
      state[shadow] = run.fp8_state();
      counts[shadow] = run.fp8_counts();
      if (shadow == 1) {
        ASSERT_EQ(tape.records().size(), 3u) << spec;
        for (const OpRecord& r : tape.records()) EXPECT_TRUE(r.acc.has_value()) << spec;
      }
    }
    EXPECT_EQ(out[0], out[1]) << spec;
    EXPECT_TRUE(state[0] == state[1]) << spec;
    EXPECT_TRUE(counts[0] == counts[1]) << spec;
  }
}

}  // namespace
}  // namespace roundoff::ops
