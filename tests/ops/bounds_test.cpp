// Emulated errors within a-priori bounds from the policy's unit roundoffs, and closed-form cases.
// Bounds (u = unit roundoff of the named format, γ_n = n·u/(1 − n·u)); each is derived in the comment of
// its test from the op's rounding contract, and checked elementwise against the MPFR reference.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/matmul.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;

double gamma(double n, double u) { return n * u / (1 - n * u); }

/// Matmul, fused sequential accumulation in format a (exact products), result rounded to storage s:
///   |ŝ − y| ≤ γ_K(u_a)·Σ|x||w|    (K roundings of partial sums, each relative ≤ u_a)
///   |ŷ − ŝ| ≤ u_s·|ŝ| ≤ u_s·(|y| + γ_K Σ|x||w|)       (compute = storage here)
void check_matmul(const Policy& pol, std::uint64_t seed) {
  const OpPrecision& p = pol.at(OpKind::Matmul, Pass::Forward);
  const MatmulShape s{8, 64, 16};
  const auto x = randn(s.n * s.in, 1.0, p.storage, seed), w = randn(s.out * s.in, 0.2, p.storage, seed + 1);
  std::vector<double> y(s.n * s.out);
  matmul_forward<Emulated>(y, cs(x), cs(w), s, Ctx<Emulated>(p));
  std::vector<Ref> yr(y.size()), ya(y.size());
  const Ctx<Reference> rc(p);
  matmul_forward<Reference>(yr, lift(x), lift(w), s, rc);
  std::vector<double> ax(x.size()), aw(w.size());
  for (std::size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
  for (std::size_t i = 0; i < w.size(); ++i) aw[i] = std::fabs(w[i]);
  matmul_forward<Reference>(ya, lift(ax), lift(aw), s, rc);
  const double ua = numerics::unit_roundoff(p.accumulate.format), us = numerics::unit_roundoff(p.storage);
  const double g = gamma(static_cast<double>(s.in), ua);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double exact = static_cast<double>(yr[i]), sa = static_cast<double>(ya[i]);
    const double bound = g * sa + us * (std::fabs(exact) + g * sa);
    ASSERT_LE(std::fabs(y[i] - exact), bound) << "element " << i;
  }
}

TEST(ErrorBound, MatmulUnderPresets) {
  check_matmul(Policy::preset("ane-fp16"), 1);
  check_matmul(Policy::preset("ane-fp16-acc32"), 2);
  check_matmul(Policy::preset("amp-bf16"), 3);
  check_matmul(Policy::preset("pure-bf16"), 4);
}

/// Softmax with storage = compute = fp16 and fp16 sequential accumulation, row of n = t+1 logits, D = max|x−m|:
///   d̂ = (x−m)(1+δ1), ê = exp(d̂)(1+δ2) = e·(1+ε), |ε| ≤ E = (exp(D·u) − 1)(1 + u) + u   (before underflow)
///   Ẑ = Σ ê·(1+θ), |θ| ≤ γ_{n−1} (positive terms),  â = (ê/Ẑ)(1+δ4)
///   ⇒ |â − p| ≤ p·[(1+E)²(1+u)/(1 − γ_{n−1}) − 1] + 2^-24 (subnormal ê and â: absolute ≤ 2^-25 each, Z ≥ 1).
TEST(ErrorBound, SoftmaxFp16) {
  const Policy pol = Policy::preset("ane-fp16");
  const OpPrecision& p = pol.at(OpKind::Softmax, Pass::Forward);
  const AttnShape s{1, 2, 32, 8};
  const auto pre = randn(s.att_size(), 2.0, fmts::fp16, 7);
  std::vector<double> att(pre.size());
  softmax_forward<Emulated>(att, cs(pre), s, Ctx<Emulated>(p));
  std::vector<Ref> ar(pre.size());
  softmax_forward<Reference>(ar, lift(pre), s, Ctx<Reference>(p));
  const double u = numerics::unit_roundoff(fmts::fp16);
  for (std::int64_t row = 0; row < s.heads() * s.T; ++row) {
    const std::int64_t t = row % s.T;
    const double* x = pre.data() + row * s.T;
    double m = x[0], lo = x[0];
    for (std::int64_t j = 0; j <= t; ++j) m = std::max(m, x[j]), lo = std::min(lo, x[j]);
    const double E = std::expm1((m - lo) * u) * (1 + u) + u;
    const double rel = (1 + E) * (1 + E) * (1 + u) / (1 - gamma(static_cast<double>(t), u)) - 1;
    for (std::int64_t j = 0; j <= t; ++j) {
      const double pj = static_cast<double>(ar[static_cast<std::size_t>(row * s.T + j)]);
      ASSERT_LE(std::fabs(att[static_cast<std::size_t>(row * s.T + j)] - pj), pj * rel + 0x1p-24)
          << "row " << row << " j " << j;
    }
  }
}

/// RMSNorm, everything fp16 (pure-fp16), row of C with exact mean square ms:
///   ŝ = Σx²(1+θ), |θ| ≤ γ_C;  t̂ = (ŝ/C (1+δ) + ε̂)(1+δ), ε̂ = fp16(eps)  ⇒ t̂ = t(1+ρ),
///   |ρ| ≤ (1+γ_C)(1+u)² − 1 + |ε̂ − eps|/ms;  r̂ = t̂^{-1/2}(1+δ) ⇒ rel(r̂) ≤ (1−|ρ|)^{-1/2}(1+u) − 1;
///   ŷ = ((x·r̂)(1+δ)·w)(1+δ) ⇒ rel(ŷ) ≤ (1 + rel(r̂))(1+u)² − 1, plus 2^-25 absolute for subnormal outputs.
TEST(ErrorBound, RmsNormFp16) {
  const Policy pol = Policy::preset("pure-fp16");
  const OpPrecision& p = pol.at(OpKind::RmsNorm, Pass::Forward);
  const RowShape s{8, 64};
  const double eps = 1e-5;
  const auto x = randn(s.size(), 1.0, fmts::fp16, 9), w = randn(s.cols, 1.0, fmts::fp16, 10);
  std::vector<double> y(s.size()), r(s.rows);
  rmsnorm_forward<Emulated>(y, r, cs(x), cs(w), s, eps, Ctx<Emulated>(p));
  std::vector<Ref> yr(y.size()), rr(s.rows);
  rmsnorm_forward<Reference>(yr, rr, lift(x), lift(w), s, eps, Ctx<Reference>(p));
  const double u = numerics::unit_roundoff(fmts::fp16);
  const double eps16 = numerics::round_to(fmts::fp16, numerics::Rounding::NearestEven, eps);
  for (std::int64_t i = 0; i < s.rows; ++i) {
    double ms = 0;
    for (std::int64_t j = 0; j < s.cols; ++j) ms += x[i * s.cols + j] * x[i * s.cols + j];
    ms /= static_cast<double>(s.cols);
    const double rho = (1 + gamma(static_cast<double>(s.cols), u)) * (1 + u) * (1 + u) - 1 + std::fabs(eps16 - eps) / ms;
    const double rel_r = (1 + u) / std::sqrt(1 - rho) - 1;
    const double rel_y = (1 + rel_r) * (1 + u) * (1 + u) - 1;
    for (std::int64_t j = 0; j < s.cols; ++j) {
      const auto e = static_cast<std::size_t>(i * s.cols + j);
      const double ex = static_cast<double>(yr[e]);
      ASSERT_LE(std::fabs(y[e] - ex), std::fabs(ex) * rel_y * (1 + 1e-12) + 0x1p-25) << "row " << i << " col " << j;
    }
  }
}

/// Softmax of equal logits: exp(0) = 1 exactly, Z = n exactly (small integers), so att = fl(1/n) — exactly 1/n
/// when n is a power of two — in every format and rounding-to-nearest.
TEST(ClosedForm, SoftmaxOfEqualLogits) {
  for (const char* name : {"fp32", "pure-fp16", "pure-bf16", "fp64"}) {
    const OpPrecision p = Policy::preset(name).at(OpKind::Softmax, Pass::Forward);
    const AttnShape s{1, 1, 16, 4};
    std::vector<double> pre(s.att_size(), 0.75), att(s.att_size());
    softmax_forward<Emulated>(att, cs(pre), s, Ctx<Emulated>(p));
    for (std::int64_t t = 0; t < s.T; ++t)
      for (std::int64_t j = 0; j < s.T; ++j) {
        const double want =
            j <= t ? numerics::round_to(p.compute, numerics::Rounding::NearestEven, 1.0 / static_cast<double>(t + 1)) : 0.0;
        EXPECT_EQ(att[static_cast<std::size_t>(t * s.T + j)], want) << name << " t " << t;
      }
  }
}

/// RMSNorm of a constant row c = 2 over C = 64 with eps = 0: Σx² = 256, mean 4, rsqrt 0.5, all exact, y = w.
TEST(ClosedForm, RmsNormOfConstantRow) {
  for (const char* name : {"fp32", "pure-fp16", "pure-bf16"}) {
    const OpPrecision p = Policy::preset(name).at(OpKind::RmsNorm, Pass::Forward);
    const RowShape s{2, 64};
    const std::vector<double> x(s.size(), 2.0);
    const auto w = randn(s.cols, 1.0, p.storage, 5);
    std::vector<double> y(s.size()), r(s.rows);
    rmsnorm_forward<Emulated>(y, r, cs(x), cs(w), s, 0.0, Ctx<Emulated>(p));
    for (std::int64_t i = 0; i < s.size(); ++i) EXPECT_EQ(y[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(i % 64)]) << name;
    EXPECT_EQ(r[0], 0.5);
  }
}

/// RoPE at position 0 is the identity (cos 0 = 1, sin 0 = 0 exactly in every format), under every preset.
TEST(ClosedForm, RopeAtPositionZeroIsIdentity) {
  for (const std::string& name : Policy::preset_names()) {
    const Policy pol = Policy::preset(name);
    const AttnShape s{2, 2, 3, 8};
    std::vector<double> ct(s.T * 4), st(s.T * 4), y(s.qkv_size());
    rope_angles<Emulated>(ct, st, s.T, s.hs, 10000.0, Ctx<Emulated>(pol.at(OpKind::RopeAngles, Pass::Forward)));
    const OpPrecision& p = pol.at(OpKind::RopeRotate, Pass::Forward);
    const auto x = randn(s.qkv_size(), 1.0, p.storage, 6);
    rope_forward<Emulated>(y, cs(x), cs(ct), cs(st), s, Ctx<Emulated>(p));
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t c = 0; c < s.C(); ++c) {
        const auto e = static_cast<std::size_t>(b * s.T * s.C() + c);
        EXPECT_EQ(y[e], x[e]) << name;
      }
  }
}

/// SiLU is one correctly rounded sigmoid and one product: |ŷ − y| ≤ |y|·((1+u)² − 1) + 2^-25 (fp16).
TEST(ErrorBound, SiluFp16) {
  const OpPrecision p = Policy::preset("ane-fp16").at(OpKind::Silu, Pass::Forward);
  const RowShape s{4, 64};
  const auto x = randn(s.size(), 3.0, fmts::fp16, 12);
  std::vector<double> y(x.size());
  silu_forward<Emulated>(y, cs(x), s, Ctx<Emulated>(p));
  std::vector<Ref> yr(x.size());
  silu_forward<Reference>(yr, lift(x), s, Ctx<Reference>(p));
  const double u = numerics::unit_roundoff(fmts::fp16);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double ex = static_cast<double>(yr[i]);
    ASSERT_LE(std::fabs(y[i] - ex), std::fabs(ex) * ((1 + u) * (1 + u) - 1) + 0x1p-25) << i;
  }
}

}  // namespace
}  // namespace roundoff::ops
