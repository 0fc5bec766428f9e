// Stochastic rounding: results are always one of the two neighbours the oracle names; the frequency of
// rounding up matches the exact probability (two-sided binomial test at level 1e-6, fixed seed); the result
// of an array rounding is bit-identical with 1 and 2 threads and whatever the split.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "numerics/arith.hpp"
#include "numerics/round.hpp"
#include "tests/support/exhaustive.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::Op;
using roundoff::test::same_value;

namespace {

/// log P(K = k) for K ~ Binomial(n, p), 0 < p < 1.
double log_pmf(std::int64_t n, std::int64_t k, double p) {
  const auto nd = static_cast<double>(n), kd = static_cast<double>(k);
  return std::lgamma(nd + 1) - std::lgamma(kd + 1) - std::lgamma(nd - kd + 1) + kd * std::log(p) +
         (nd - kd) * std::log1p(-p);
}

/// P(K <= k) and P(K >= k), summed exactly over the pmf (n is small enough to sum every term).
struct Tails {
  double lower = 0, upper = 0;
};
Tails binomial_tails(std::int64_t n, std::int64_t k, double p) {
  Tails t;
  if (p <= 0) return {1.0, k == 0 ? 1.0 : 0.0};
  if (p >= 1) return {k == n ? 1.0 : 0.0, 1.0};
  for (std::int64_t j = 0; j <= n; ++j) {
    const double q = std::exp(log_pmf(n, j, p));
    if (j <= k) t.lower += q;
    if (j >= k) t.upper += q;
  }
  return t;
}

/// The test's level: a correct implementation fails one of these checks with probability <= 1e-6 each.
constexpr double kAlpha = 1e-6;
constexpr std::int64_t kDraws = 100'000;

/// Rounds x kDraws times with consecutive draws of one stream and runs the two-sided binomial test on the
/// number of results equal to the oracle's upper neighbour.
void binomial_check(const Format& f, Op op, double a, double b, std::uint64_t seed) {
  const RoundingPlan plan(f);
  const auto want = roundoff::test::stochastic_oracle_op(f, op, a, b);
  const StochasticBits bits{seed, 7};
  std::int64_t ups = 0;
  for (std::int64_t i = 0; i < kDraws; ++i) {
    const std::uint64_t draw = bits.draw(static_cast<std::uint64_t>(i));
    const double r = op == Op::Convert ? round_to(plan, Rounding::Stochastic, a, draw)
                                       : add(plan, Rounding::Stochastic, a, b, draw);
    if (same_value(r, want.up) && !same_value(want.up, want.down)) ++ups;
    else ASSERT_TRUE(same_value(r, want.down)) << hex_float(a) << " gave " << hex_float(r);
  }
  const Tails t = binomial_tails(kDraws, ups, want.p_up);
  EXPECT_GT(t.lower, kAlpha / 2) << name_of(f) << " x=" << hex_float(a) << "+" << hex_float(b) << " p=" << want.p_up
                                 << " ups=" << ups;
  EXPECT_GT(t.upper, kAlpha / 2) << name_of(f) << " x=" << hex_float(a) << "+" << hex_float(b) << " p=" << want.p_up
                                 << " ups=" << ups;
}

}  // namespace

TEST(Stochastic, BinomialTailsAreExact) {
  // Sanity of the test's own arithmetic: symmetric tails at p = 1/2, and a known small case.
  const Tails t = binomial_tails(10, 5, 0.5);
  EXPECT_NEAR(t.lower, 638.0 / 1024, 1e-12);
  EXPECT_NEAR(t.upper, 638.0 / 1024, 1e-12);
  EXPECT_NEAR(binomial_tails(kDraws, 50'000, 0.5).lower, 0.5 + std::exp(log_pmf(kDraws, 50'000, 0.5)) / 2, 1e-9);
}

TEST(Stochastic, UpFrequencyMatchesExactProbability) {
  const double ulp1 = 0x1p-10;  // fp16 spacing in [1, 2)
  std::uint64_t seed = 11;
  for (const double frac : {0.5, 0.25, 0.75, 0.125, 0.3, 0.9, 1.0 / 1024, 1023.0 / 1024})
    binomial_check(formats::fp16, Op::Convert, 1.0 + frac * ulp1, 0, ++seed);
  binomial_check(formats::fp16, Op::Convert, -(1.0 + 0.3 * ulp1), 0, ++seed);        // negative: up in magnitude
  binomial_check(formats::fp16, Op::Convert, 0.3 * 0x1p-24, 0, ++seed);              // below the smallest subnormal
  binomial_check(Format{11, -14, 15, false}, Op::Convert, 0.6 * 0x1p-14, 0, ++seed);  // no-subnormal gap
  binomial_check(formats::bf16, Op::Convert, 1.0 + 0.37 * 0x1p-7, 0, ++seed);
  binomial_check(formats::fp16, Op::Convert, 65504.0 + 0.4 * 32.0, 0, ++seed);        // upper neighbour overflows
  binomial_check(formats::e4m3, Op::Convert, 1.0 + 0.6 * 0.125, 0, ++seed);
  // Through arithmetic: the probability carries the exact sum's bits far below binary64.
  binomial_check(formats::bf16, Op::Add, 1.0, 0x1p-100, ++seed);   // p = 2^-93: never up
  binomial_check(formats::bf16, Op::Add, 1.0, 0x1.8p-9, ++seed);   // p = 3/8 exactly
  binomial_check(formats::bf16, Op::Add, 1.0, -0x1.8p-9, ++seed);  // below 1, where the spacing halves: p = 1/2
}

TEST(Stochastic, ResultsAreAlwaysANeighbour) {
  for (const Format f : {formats::e4m3, formats::e5m2, formats::fp16, formats::bf16, Format{11, -14, 15, false}}) {
    const RoundingPlan plan(f);
    const auto inputs = roundoff::test::conversion_inputs(f);
    roundoff::test::Mismatches bad;
    const StochasticBits bits{3, 1};
    roundoff::test::parallel_for(static_cast<std::int64_t>(inputs.size()), [&](std::int64_t i) {
      const double x = inputs[static_cast<std::size_t>(i)];
      const auto want = roundoff::test::stochastic_oracle_op(f, Op::Convert, x);
      const double r = round_to(plan, Rounding::Stochastic, x, bits.draw(static_cast<std::uint64_t>(i)));
      if (!same_value(r, want.down) && !same_value(r, want.up))
        bad.add("x=" + hex_float(x) + " got " + hex_float(r) + " want " + hex_float(want.down) + " or " +
                hex_float(want.up));
    });
    EXPECT_EQ(bad.count(), 0u) << name_of(f) << ": " << bad.report();
  }
}

TEST(Stochastic, ArrayRoundingIsIdenticalForOneAndTwoThreadsAndAnySplit) {
  const RoundingPlan plan(formats::bf16);
  const StochasticBits bits{2024, 5};
  const std::size_t n = 1 << 20;
  std::vector<double> src(n);
  std::vector<float> srcf(n);
  for (std::size_t i = 0; i < n; ++i) {
    src[i] = std::ldexp(static_cast<double>(mix64(i) >> 11), -53 + static_cast<int>(i % 40) - 20) *
             (i % 3 == 0 ? -1.0 : 1.0);
    srcf[i] = static_cast<float>(src[i]);
  }
  std::vector<double> one(n), two(n), three(n);
  round_array(plan, Rounding::Stochastic, src, one, bits, 0);
  const std::size_t half = n / 2 + 12345;  // an uneven split
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    const std::size_t lo = t == 0 ? 0 : half, hi = t == 0 ? half : n;
    if (omp_get_num_threads() == 2 || t == 0) {
      const std::size_t end = omp_get_num_threads() == 2 ? hi : n;
      round_array(plan, Rounding::Stochastic, std::span<const double>(src).subspan(lo, end - lo),
                  std::span<double>(two).subspan(lo, end - lo), bits, lo);
    }
  }
  for (std::size_t lo = 0; lo < n;) {  // pieces of 1, 7, 1000, 1, 7, 1000, ...
    const std::size_t len = std::min<std::size_t>(n - lo, lo % 3 == 0 ? 1 : lo % 3 == 1 ? 7 : 1000);
    round_array(plan, Rounding::Stochastic, std::span<const double>(src).subspan(lo, len),
                std::span<double>(three).subspan(lo, len), bits, lo);
    lo += len;
  }
  std::size_t ups = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(same_value(one[i], two[i])) << i;
    ASSERT_TRUE(same_value(one[i], three[i])) << i;
    ASSERT_TRUE(same_value(one[i], round_to(plan, Rounding::Stochastic, src[i], bits.draw(i)))) << i;
    ups += std::fabs(one[i]) > std::fabs(src[i]);
  }
  EXPECT_GT(ups, n / 4);  // the draws are used: about half the inexact inputs round up in magnitude
  EXPECT_LT(ups, 3 * n / 4);
  // float arrays (SIMD fast paths where the CPU has them) agree with the scalar rounding too.
  std::vector<float> f1(n), f2(n);
  round_array(plan, Rounding::Stochastic, srcf, f1, bits, 0);
#pragma omp parallel for num_threads(2) schedule(static, 4096)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(n / 4096); ++c) {
    const auto lo = static_cast<std::size_t>(c) * 4096;
    round_array(plan, Rounding::Stochastic, std::span<const float>(srcf).subspan(lo, 4096),
                std::span<float>(f2).subspan(lo, 4096), bits, lo);
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f1[i]), std::bit_cast<std::uint32_t>(f2[i])) << i;
    ASSERT_EQ(static_cast<double>(f1[i]), round_to(plan, Rounding::Stochastic, static_cast<double>(srcf[i]), bits.draw(i)))
        << i;
  }
}

namespace {

/// The definition of stochastic rounding, round_parts on x's exact parts (round_to's integer path for normal doubles
/// must give exactly its bits).
double sr_definition(const RoundingPlan& plan, double x, std::uint64_t draw) {
  std::uint64_t m;
  int e;
  split_double(x, m, e);
  return round_parts(plan, Rounding::Stochastic, ExactParts{std::signbit(x), m, e, false}, draw);
}

/// The least draw at which x is no longer rounded up (the definition is monotone: up iff draw < threshold), or 2^64
/// when x rounds up at every draw (as the u128 2^64).
u128 up_threshold(const RoundingPlan& plan, double x) {
  const double up = sr_definition(plan, x, 0);
  if (sr_definition(plan, x, ~std::uint64_t{0}) == up) return static_cast<u128>(1) << 64;
  std::uint64_t lo = 0, hi = ~std::uint64_t{0};  // up at lo, not at hi
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    (sr_definition(plan, x, mid) == up ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

// round_to's stochastic path for normal doubles (64-bit integer arithmetic instead of round_parts' 128-bit
// normalisation) against round_parts itself, bit for bit: random values over every binade of each format (subnormal,
// normal, beyond max), values with short fractions, and the draws at, just below and just above each value's
// threshold as well as random ones. Would fail if the fast path's quantum, fraction or overflow differed.
TEST(Stochastic, RoundToEqualsRoundPartsBitForBitAtEveryThreshold) {
  const Format nosub{5, -4, 4, false, Specials::Ieee, false};
  const Format list[] = {formats::e2m1, formats::e3m2, formats::e2m3, formats::e4m3, formats::e5m2,
                            formats::fp16, formats::bf16, formats::fp32, nosub};
  std::mt19937_64 rng(2026);
  for (const Format& f : list) {
    const RoundingPlan plan(f);
    std::vector<double> xs;
    for (int e = f.emin - f.precision - 14; e <= f.emax + 3; ++e)
      for (int i = 0; i < 24; ++i) {
        const double m = 1.0 + static_cast<double>(rng() >> 11) * 0x1p-53;  // [1, 2), 52 random fraction bits
        xs.push_back(std::ldexp(m, e));
        xs.push_back(-std::ldexp(1.0 + static_cast<double>(rng() % 64) / 64.0, e));  // a short fraction
      }
    xs.push_back(plan.max_finite);
    xs.push_back(-plan.min_normal);
    for (const double x : xs) {
      const u128 t = up_threshold(plan, x);
      std::vector<std::uint64_t> draws{0, ~std::uint64_t{0}, rng(), rng(), std::uint64_t{1} << 63};
      for (const u128 d : {t - 1, t, t + 1})
        if (d <= ~std::uint64_t{0}) draws.push_back(static_cast<std::uint64_t>(d));
      for (const std::uint64_t d : draws) {
        const double want = sr_definition(plan, x, d), got = round_to(plan, Rounding::Stochastic, x, d);
        ASSERT_TRUE(same_value(got, want)) << name_of(f) << " x " << x << " draw " << d << ": " << got << " != " << want;
      }
    }
  }
}
