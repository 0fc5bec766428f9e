// Below fp32, bit for bit (issue 11): the ops of the ane-fp16 and amp-bf16 presets (matmul and classifier in
// all three passes, SiLU, SwiGLU, the fused FFN residual) against scalar references
// written here from each op's rounding contract, with their own rounding function (ref_round below, which
// shares no code with numerics/round.cpp). The bounds tests are one-sided: an accumulator wider than asked
// (fp32 where fp16-seq is asked), a rounding skipped, or a Runner reading another (op, pass) entry stays
// inside a bound but fails these.
//
// Why the references are exact. Every operand is a value of its format. A fused step acc ← fl(a·b + acc) is
// fma in binary64 then ref_round: a·b of two ≤ 11-bit significands is exact, and binary64's own rounding of
// a·b + acc can only happen when one term is below 2^-53 of the other, far below the target's half-ulp, so it
// cannot create or break a tie. A single +, −, × of p-bit values is exact or double-rounding innocuous in
// binary64 (53 ≥ 2p + 2 for p ≤ 24). σ(x) is computed in binary64 and rounded once (correct unless the exact
// value lies within 2^-50 relative of a midpoint, which would show up as a failure here, not pass silently).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/residual.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;

/// Round-to-nearest-even of x to a format with precision p and exponents [emin, emax] (IEEE overflow to
/// inf): the quantum of x's binade (or of the subnormal range) is q = 2^(max(⌊log2|x|⌋, emin) − p + 1),
/// x/q is exact in binary64, and nearbyint rounds it to an even integer on ties.
double ref_round(double x, const numerics::Format& f) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::max(std::ilogb(x), f.emin);
  const double q = std::ldexp(1.0, e - f.precision + 1);
  const double r = std::nearbyint(x / q) * q;
  const double max = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.precision), f.emax);
  return std::fabs(r) > max ? std::copysign(INFINITY, x) : r;
}

/// The entries under test (a Policy kept alive: at() returns a reference into it).
const OpPrecision& entry(const char* preset, OpKind op, Pass pass) {
  static const Policy ane = Policy::preset("ane-fp16"), amp = Policy::preset("amp-bf16");
  return (std::string(preset) == "ane-fp16" ? ane : amp).at(op, pass);
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]) && bad++ < 3) ADD_FAILURE() << what << "[" << i << "]: op " << got[i] << " reference " << want[i];
  EXPECT_EQ(bad, 0u) << what;
}

/// The sequential fused accumulation of numerics::gemm: acc ← fl_acc(a·b + acc), k = 0..K-1, from `init`.
struct Acc {
  numerics::Format f;
  double run(double init, std::int64_t K, const auto& a, const auto& b) const {
    double acc = init;
    for (std::int64_t k = 0; k < K; ++k) acc = ref_round(std::fma(a(k), b(k), acc), f);
    return acc;
  }
};

class HalfBitExact : public ::testing::TestWithParam<const char*> {};

TEST_P(HalfBitExact, MatmulAndClassifier) {
  const char* preset = GetParam();
  std::vector<std::pair<OpKind, Pass>> entries;
  for (const OpKind op : {OpKind::Matmul, OpKind::Classifier})
    for (const Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeight}) entries.emplace_back(op, pass);
  for (const auto& [op, pass] : entries) {
    const OpPrecision& p = entry(preset, op, pass);
    const Ctx<Emulated> ctx(p);
    const numerics::Format st = p.storage, cp = p.compute;
    const Acc acc{p.accumulate.format};
    ASSERT_TRUE(p.accumulate.fused && p.accumulate.order == numerics::Order::Sequential) << preset;
    const MatmulShape s{5, 40, 6};
    const auto x = randn(s.n * s.in, 1.0, st, 1), w = randn(s.out * s.in, 0.3, st, 2);
    const auto dy = randn(s.n * s.out, 1.0, st, 3);
    auto out_of = [&](double a) { return ref_round(ref_round(a, cp), st); };
    std::vector<double> got, want;
    switch (pass) {
      case Pass::Forward: {
        got.assign(s.n * s.out, 0.0);
        matmul_forward<Emulated>(got, cs(x), cs(w), s, ctx);
        for (std::int64_t n = 0; n < s.n; ++n)
          for (std::int64_t o = 0; o < s.out; ++o)
            want.push_back(out_of(acc.run(0.0, s.in, [&](std::int64_t k) { return x[n * s.in + k]; },
                                          [&](std::int64_t k) { return w[o * s.in + k]; })));
        break;
      }
      case Pass::BackwardData: {
        got = randn(s.n * s.in, 0.1, st, 4);
        const auto before = got;
        matmul_backward_data<Emulated>(got, cs(dy), cs(w), s, ctx);
        for (std::int64_t n = 0; n < s.n; ++n)
          for (std::int64_t i = 0; i < s.in; ++i)
            want.push_back(out_of(acc.run(before[n * s.in + i], s.out, [&](std::int64_t o) { return dy[n * s.out + o]; },
                                          [&](std::int64_t o) { return w[o * s.in + i]; })));
        break;
      }
      case Pass::BackwardWeight: {
        got = randn(s.out * s.in, 0.1, st, 5);
        const auto before = got;
        matmul_backward_weight<Emulated>(got, cs(dy), cs(x), s, ctx);
        for (std::int64_t o = 0; o < s.out; ++o)
          for (std::int64_t i = 0; i < s.in; ++i)
            want.push_back(out_of(acc.run(before[o * s.in + i], s.n, [&](std::int64_t n) { return dy[n * s.out + o]; },
                                          [&](std::int64_t n) { return x[n * s.in + i]; })));
        break;
      }
    }
    expect_same(got, want, std::string(preset) + " " + std::string(name_of(op)) + "." + std::string(name_of(pass)));
  }
}

TEST_P(HalfBitExact, SiluAndSwiGlu) {
  const char* preset = GetParam();
  const RowShape s{4, 24};
  for (const Pass pass : {Pass::Forward, Pass::BackwardData}) {
    const OpPrecision& ps = entry(preset, OpKind::Silu, pass);
    const OpPrecision& pg = entry(preset, OpKind::SwiGlu, pass);
    const Ctx<Emulated> cs_(ps), cg(pg);
    const numerics::Format st = ps.storage, cp = ps.compute;
    auto c = [&](double v) { return ref_round(v, cp); };
    auto sig = [&](double v) { return c(1.0 / (1.0 + std::exp(-v))); };
    const auto x = randn(s.rows * s.cols, 2.0, st, 6), u = randn(s.rows * s.cols, 1.0, st, 7);
    const auto dy = randn(s.rows * s.cols, 1.0, st, 8);
    std::vector<double> got(x.size(), 0.0), want;
    if (pass == Pass::Forward) {
      silu_forward<Emulated>(got, cs(x), s, cs_);
      for (const double v : x) want.push_back(ref_round(c(v * sig(v)), st));
      expect_same(got, want, std::string(preset) + " silu.fwd");
      std::vector<double> h(x.size(), 0.0), wh;
      swiglu_forward<Emulated>(h, cs(x), cs(u), s, cg);
      for (std::size_t i = 0; i < x.size(); ++i) wh.push_back(ref_round(ref_round(x[i] * u[i], pg.compute), pg.storage));
      expect_same(h, wh, std::string(preset) + " swiglu.fwd");
    } else {
      got = randn(x.size(), 0.1, st, 9);
      const auto before = got;
      silu_backward_data<Emulated>(got, cs(dy), cs(x), s, cs_);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double sg = sig(x[i]);
        const double t = c(1.0 + c(x[i] * c(1.0 - sg)));
        const double d = c(c(dy[i] * sg) * t);
        want.push_back(ref_round(c(before[i] + d), st));
      }
      expect_same(got, want, std::string(preset) + " silu.bwd-data");
      auto da = randn(x.size(), 0.1, pg.storage, 10), du = randn(x.size(), 0.1, pg.storage, 11);
      const auto da0 = da, du0 = du;
      swiglu_backward_data<Emulated>(da, du, cs(dy), cs(x), cs(u), s, cg);
      std::vector<double> wa, wu;
      auto cgr = [&](double v) { return ref_round(v, pg.compute); };
      for (std::size_t i = 0; i < x.size(); ++i) {
        wa.push_back(ref_round(cgr(da0[i] + cgr(dy[i] * u[i])), pg.storage));
        wu.push_back(ref_round(cgr(du0[i] + cgr(dy[i] * x[i])), pg.storage));
      }
      expect_same(da, wa, std::string(preset) + " swiglu.bwd-data da");
      expect_same(du, wu, std::string(preset) + " swiglu.bwd-data du");
    }
  }
}

TEST(HalfBitExactAne, ResidualFfnForward) {
  const OpPrecision& p = entry("ane-fp16", OpKind::ResidualFfn, Pass::Forward);
  ASSERT_EQ(p.storage, fmts::fp16);
  const Ctx<Emulated> ctx(p);
  const RowShape s{3, 32};
  const auto x = randn(s.rows * s.cols, 4.0, p.storage, 12), f = randn(s.rows * s.cols, 0.05, p.storage, 13);
  for (const double alpha : {1.0, 0.5, 0.3}) {
    std::vector<double> got(x.size(), 0.0), want;
    residual_forward<Emulated>(got, cs(x), cs(f), alpha, s, ctx);
    const double a = ref_round(alpha, p.compute);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double fi = alpha != 1.0 ? ref_round(a * f[i], p.compute) : f[i];
      want.push_back(ref_round(ref_round(x[i] + fi, p.compute), p.storage));
    }
    expect_same(got, want, "ane-fp16 residual-ffn.fwd alpha " + std::to_string(alpha));
  }
}

TEST(HalfBitExactReference, RoundingAgreesOnKnownValues) {
  EXPECT_EQ(ref_round(1.0 + 0x1p-11, fmts::fp16), 1.0);                 // tie to even
  EXPECT_EQ(ref_round(1.0 + 3 * 0x1p-11, fmts::fp16), 1.0 + 0x1p-9);    // tie to even (up)
  EXPECT_EQ(ref_round(65520.0, fmts::fp16), INFINITY);                   // overflow
  EXPECT_EQ(ref_round(0x1p-25, fmts::fp16), 0.0);                        // half the smallest subnormal: even 0
  EXPECT_EQ(ref_round(3 * 0x1p-25, fmts::fp16), 0x1p-23);                // subnormal tie to even
  EXPECT_EQ(ref_round(1.0 + 0x1p-8, fmts::bf16), 1.0);
  EXPECT_EQ(ref_round(1.0 + 0x1p-8 + 0x1p-30, fmts::bf16), 1.0 + 0x1p-7);
}

INSTANTIATE_TEST_SUITE_P(Presets, HalfBitExact, ::testing::Values("ane-fp16", "amp-bf16"));

}  // namespace
}  // namespace roundoff::ops
