// The exact dot-product oracle against MPFR at high precision, the fixed-point fp16 path against the Kulisch
// path, exact decimal output, error measurement, and Higham's error bounds for every order against the oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/mpfr_util.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {
namespace {

std::vector<double> random_values(const Format& f, std::size_t n, std::mt19937_64& rng, bool wide) {
  const RoundingPlan plan(f);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) {
    double r = normal(rng);
    if (wide) r = std::ldexp(r, static_cast<int>(f.emin - f.precision + unit(rng) * (f.emax - f.emin + f.precision)));
    x = round_to(plan, Rounding::NearestEven, r);
  }
  return v;
}

/// Σ x_i·y_i by MPFR at 4500 bits (exact for binary64 inputs: products span 2^-2148..2^2048).
void mpfr_dot(mpfr_ptr out, const std::vector<double>& x, const std::vector<double>& y) {
  Mpfr p(4500), a(53), b(53);
  mpfr_set_zero(out, 1);
  for (std::size_t i = 0; i < x.size(); ++i) {
    mpfr_set_d(a, x[i], MPFR_RNDN);
    mpfr_set_d(b, y[i], MPFR_RNDN);
    mpfr_mul(p, a, b, MPFR_RNDN);
    mpfr_add(out, out, p, MPFR_RNDN);
  }
}

TEST(ExactDot, AgreesWithMpfrForFp16Bf16Fp32AndBinary64Inputs) {
  std::mt19937_64 rng(9);
  for (const Format& f : {formats::fp16, formats::bf16, formats::fp32, formats::fp64}) {
    for (bool wide : {false, true}) {
      for (std::size_t n : {1, 2, 17, 256, 1000}) {
        const auto x = random_values(f, n, rng, wide), y = random_values(f, n, rng, wide);
        Mpfr want(4500), got(4500);
        mpfr_dot(want, x, y);
        const ExactSum kulisch = exact_dot(x.data(), 1, y.data(), 1, n);
        EXPECT_EQ(kulisch.to_mpfr(got), 0);
        EXPECT_TRUE(mpfr_equal_p(want, got)) << name_of(f) << " n=" << n << " wide=" << wide;
        if (f == formats::fp64) continue;
        const ExactSum typed = exact_dot(f, x.data(), 1, y.data(), 1, n);  // fixed-point path for fp16
        typed.to_mpfr(got);
        EXPECT_TRUE(mpfr_equal_p(want, got)) << name_of(f) << " n=" << n << " wide=" << wide;
        // Correct rounding to any format: the same as MPFR's rounding of the exact value.
        const RoundingPlan plan(formats::fp32);
        EXPECT_EQ(kulisch.round(plan, Rounding::NearestEven), static_cast<double>(mpfr_get_flt(want, MPFR_RNDN)));
        EXPECT_EQ(kulisch.to_double(), mpfr_get_d(want, MPFR_RNDN));
      }
    }
  }
}

TEST(ExactDot, Fp16FixedPointHandlesTheExtremes) {
  // Largest and smallest fp16 products: 65504² = 4290774016 and (2^-24)² = 2^-48, with cancellation down to the
  // smallest product.
  const std::vector<double> x{65504.0, 0x1p-24, -65504.0}, y{65504.0, 0x1p-24, 65504.0};
  const ExactSum s = exact_dot(formats::fp16, x.data(), 1, y.data(), 1, 3);
  EXPECT_EQ(s.to_double(), 0x1p-48);
  EXPECT_EQ(s.to_decimal(), "0.000000000000003552713678800500929355621337890625");
  EXPECT_EQ(exact_dot(formats::fp16, x.data(), 1, y.data(), 1, 2).to_decimal(), "4290774016.000000000000003552713678800500929355621337890625");
  EXPECT_THROW(exact_dot(formats::fp16, std::vector<double>{0.1}.data(), 1, y.data(), 1, 1), std::invalid_argument);
}

TEST(ExactDot, DecimalIsExactAndSpecialsFollowIeee) {
  ExactSum s;
  s.add(-0.375);
  EXPECT_EQ(s.to_decimal(), "-0.375");
  s.add(1024.0);
  EXPECT_EQ(s.to_decimal(), "1023.625");
  ExactSum z;
  EXPECT_EQ(z.to_decimal(), "0");
  // Round trip of a long decimal through MPFR.
  ExactSum t;
  t.add_product(0x1.5p-140, 0x1.3p-130);
  t.add(3.0);
  Mpfr back(2400), direct(2400);
  mpfr_set_str(back, t.to_decimal().c_str(), 10, MPFR_RNDN);
  t.to_mpfr(direct);
  EXPECT_TRUE(mpfr_equal_p(back, direct));
  constexpr double inf = std::numeric_limits<double>::infinity();
  ExactSum sp;
  sp.add(inf);
  EXPECT_EQ(sp.to_decimal(), "inf");
  sp.add(-inf);
  EXPECT_TRUE(sp.is_nan());
  ExactSum nn;
  nn.add_product(inf, 0.0);
  EXPECT_TRUE(nn.is_nan());
}

TEST(ExactDot, ErrorInUlpsAtTheExactValue) {
  ExactSum s;
  s.add(2048.0);
  s.add(1.0);  // exact 2049; fp16 ulp at 2049 is 2
  EXPECT_EQ(error_ulps(formats::fp16, s, 2048.0), 0.5);
  EXPECT_EQ(error_ulps(formats::fp16, s, 2050.0), 0.5);
  EXPECT_EQ(signed_error(s, 2048.0), -1.0);
  ExactSum zero;
  EXPECT_EQ(error_ulps(formats::fp16, zero, 0x1p-24), 1.0);  // ulp(0) = smallest subnormal
  EXPECT_EQ(error_ulps(formats::fp16, s, std::numeric_limits<double>::infinity()),
            std::numeric_limits<double>::infinity());
}

/// γ_k for unit roundoff u: k·u/(1 − k·u); infinite (no bound) when k·u >= 1.
double gamma(double k, double u) { return k * u < 1 ? k * u / (1 - k * u) : std::numeric_limits<double>::infinity(); }

TEST(AccumulationBounds, ErrorsStayWithinHighamBounds) {
  // Higham 2002: sequential dot |e| <= γ_n Σ|x_i y_i| (γ_(n−1) for sums); pairwise γ_(⌈log2 n⌉+1) (leaves round
  // the products); blocked (1+u)^b (1+u_outer)^(⌈n/b⌉) − 1; promotion likewise with N; Kahan 2u + O(n u²) plus
  // one rounding per product. Directed and stochastic rounding have |δ| < 2u. N(0,1) data (no underflow issue:
  // absolute underflow errors are far below u·Σ|x_i y_i|). SequentialBreaksThePairwiseBound shows the bounds
  // discriminate between orders.
  std::mt19937_64 rng(123);
  struct Case {
    const char* name;
    std::function<double(double n, double u)> bound;
  };
  const double u32 = unit_roundoff(formats::fp32);
  const Case cases[] = {
      {"fp16-seq", [](double n, double u) { return gamma(n, u); }},
      {"bf16-seq", [](double n, double u) { return gamma(n, u); }},
      {"fp16-unfused-seq", [](double n, double u) { return gamma(n, u); }},
      {"fp16-reverse", [](double n, double u) { return gamma(n, u); }},
      {"fp16-pairwise", [](double n, double u) { return gamma(std::ceil(std::log2(n)) + 1, u); }},
      {"bf16-pairwise", [](double n, double u) { return gamma(std::ceil(std::log2(n)) + 1, u); }},
      {"fp16-splitk32-fp32",
       [u32](double n, double u) { return std::pow(1 + u, 32) * std::pow(1 + u32, std::ceil(n / 32)) - 1; }},
      {"fp16-promote128-fp32",
       [u32](double n, double u) { return std::pow(1 + u, 128) * std::pow(1 + u32, std::ceil(n / 128)) - 1; }},
      {"fp16-kahan", [](double n, double u) { return 3 * u + 4 * n * u * u; }},
      {"bf16-kahan", [](double n, double u) { return 3 * u + 4 * n * u * u; }},
      {"fp16-sr", [](double n, double u) { return gamma(n, 2 * u); }},
      {"acc=fp16:toward-zero", [](double n, double u) { return gamma(n, 2 * u); }},
  };
  for (const Case& c : cases) {
    const Accumulation a = parse_accumulation(c.name);
    const double u = unit_roundoff(a.format);
    double worst_ratio = 0;
    for (std::size_t n : {16, 100, 512, 2000}) {
      for (int t = 0; t < 6; ++t) {
        const auto x = random_values(formats::fp16, n, rng, false), y = random_values(formats::fp16, n, rng, false);
        const double r = dot(a, x, y, StochasticBits{static_cast<std::uint64_t>(t), n});
        const ExactSum exact = exact_dot(x.data(), 1, y.data(), 1, n);
        const double scale = exact_abs_dot(x.data(), 1, y.data(), 1, n).to_double();
        const double err = std::fabs(signed_error(exact, r));
        const double bound = c.bound(static_cast<double>(n), u) * scale;
        if (std::isinf(bound)) continue;  // n·u >= 1: the bound says nothing
        EXPECT_LE(err, bound) << c.name << " n=" << n;
        worst_ratio = std::max(worst_ratio, err / bound);
      }
    }
    EXPECT_GT(worst_ratio, 0.0) << c.name << ": no rounding error at all (the test could not fail)";
  }
}

TEST(AccumulationBounds, SequentialBreaksThePairwiseBound) {
  // Same-sign terms (a sum of squares): sequential fp16 accumulation loses far more than pairwise may.
  std::mt19937_64 rng(5);
  const std::size_t n = 2000;
  const auto x = random_values(formats::fp16, n, rng, false);
  const ExactSum exact = exact_dot(x.data(), 1, x.data(), 1, n);
  const double scale = exact.to_double();
  const double u = unit_roundoff(formats::fp16);
  const double pairwise_bound = gamma(std::ceil(std::log2(static_cast<double>(n))) + 1, u) * scale;
  EXPECT_GT(std::fabs(signed_error(exact, dot(parse_accumulation("fp16-seq"), x, x))), pairwise_bound);
  EXPECT_LE(std::fabs(signed_error(exact, dot(parse_accumulation("fp16-pairwise"), x, x))), pairwise_bound);
}

}  // namespace
}  // namespace roundoff::numerics
