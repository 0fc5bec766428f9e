// exp and sigmoid rounded to binary64 over spans (numerics/elementary_dd_span.hpp): the lanes' double-double
// enclosures equal the scalar evaluate_dd bit for bit (so its proven bound holds for them), and the span equals
// numerics::elementary_mpfr (MPFR, correctly rounded) bit for bit at every ISA tier this CPU has, on random
// arguments over the whole lane domain and beyond, edge values (±0, subnormals, the lane bounds, overflow and
// underflow of exp, NaN, ±inf), and arguments whose results lie near a binary64 midpoint (where the lanes' test
// must hand over to the scalar path). The default suite runs a sample; ElementaryDdSpanExhaustive.* (ctest
// label `exhaustive`) runs 20 million more arguments.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numerics/elementary_dd.hpp"
#include "numerics/elementary_dd_lanes.hpp"
#include "numerics/elementary_dd_span.hpp"
#include "numerics/elementary_span.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;

bool bits_equal(double x, double y) { return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y); }

std::vector<k::Isa> tiers() {
  std::vector<k::Isa> out;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512})
    if (k::detected_isa() >= isa) out.push_back(isa);
  return out;
}

/// Random arguments: uniform over ±800, Gaussian of scale 1 and 8, tiny magnitudes, random exponents.
std::vector<double> arguments(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<double> wide(-800.0, 800.0), unit(-1.0, 1.0);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> x(n);
  for (auto& v : x) {
    switch (rng() % 5) {
      case 0: v = wide(rng); break;
      case 1: v = g(rng); break;
      case 2: v = 8 * g(rng); break;
      case 3: v = std::ldexp(unit(rng), -static_cast<int>(rng() % 1074)); break;
      default: v = std::ldexp(unit(rng), static_cast<int>(rng() % 12) - 2); break;
    }
  }
  return x;
}

/// Edge arguments: zeros, subnormals, the lane bounds and their neighbours, exp's overflow and underflow
/// thresholds, specials.
std::vector<double> edges() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = {0.0, -0.0, std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::denorm_min(),
                           0x1p-1022, -0x1p-1022, 0x1p-54, -0x1p-54, 0x1p-53, 0x1.8p-53, 1.0, -1.0,
                           600.0, -600.0, 700.0, -700.0, 709.78, 709.79, -708.4, -745.1, -745.2, 1000.0, -1000.0,
                           inf, -inf, std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN()};
  for (const double b : {600.0, 700.0, 0.5 * 0.6931471805599453, 0.6931471805599453 / 64}) {
    x.push_back(std::nextafter(b, 0.0));
    x.push_back(std::nextafter(b, 1e9));
    x.push_back(-std::nextafter(b, 0.0));
    x.push_back(-std::nextafter(b, 1e9));
  }
  // Arguments where exp's result is within a few ulps of 1 (e^x ≈ 1 + x): results on both sides of 1 and
  // the power-of-two case of the test's gap.
  for (int e = 30; e <= 60; ++e) {
    x.push_back(std::ldexp(1.0, -e));
    x.push_back(-std::ldexp(1.0, -e));
    x.push_back(std::ldexp(1.5, -e));
  }
  return x;
}

/// Arguments whose exp (or sigmoid) lies close to a binary64 midpoint: x = log(m) for midpoints m between two
/// binary64 values in a random binade, so the true result is within ~2^-53 relative of a midpoint and the lane
/// test must hand these over (their rounding decided by the double-double or MPFR).
std::vector<double> near_midpoints(std::mt19937_64& rng, std::size_t n) {
  std::vector<double> x(n);
  std::uniform_real_distribution<double> u(1.0, 2.0);
  for (auto& v : x) {
    const double a = u(rng);
    const double mid = a + 0.5 * (std::nextafter(a, 3.0) - a);  // rounds to a or its neighbour
    v = std::log(mid) + std::ldexp(1.0, static_cast<int>(rng() % 40) - 8) * std::log(2.0) * static_cast<double>(rng() % 3);
  }
  return x;
}

void check_span(Elementary f, const std::vector<double>& x, k::Isa isa, bool mpfr) {
  const RoundingPlan fp64(formats::fp64);
  std::vector<double> got(x.size());
  ASSERT_TRUE(elementary_dd_span(fp64, Rounding::NearestEven, f, x, got, KernelOptions{true, isa}));
  std::vector<double> via_span(x.size());
  elementary_span(fp64, Rounding::NearestEven, f, x, via_span, {}, KernelOptions{true, isa});
  int bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = mpfr ? elementary_mpfr(fp64, Rounding::NearestEven, f, x[i])
                             : elementary(fp64, Rounding::NearestEven, f, x[i]);
    if ((!bits_equal(got[i], want) || !bits_equal(via_span[i], want)) && bad++ < 5)
      ADD_FAILURE() << name_of(f) << " at " << k::name_of(isa) << " x = " << std::hexfloat << x[i] << ": " << got[i]
                    << " vs " << want;
  }
}

TEST(ElementaryDdSpan, Applies) {
  const RoundingPlan fp64(formats::fp64), fp32(formats::fp32);
  if (k::detected_isa() >= k::Isa::Avx2) {
    EXPECT_TRUE(elementary_dd_span_applies(Elementary::Exp, fp64, Rounding::NearestEven, {}));
    EXPECT_TRUE(elementary_dd_span_applies(Elementary::Sigmoid, fp64, Rounding::NearestEven, {}));
  }
  EXPECT_FALSE(elementary_dd_span_applies(Elementary::Log, fp64, Rounding::NearestEven, {}));
  EXPECT_FALSE(elementary_dd_span_applies(Elementary::Exp, fp64, Rounding::Up, {}));
  EXPECT_FALSE(elementary_dd_span_applies(Elementary::Exp, fp32, Rounding::NearestEven, {}));
  EXPECT_FALSE(elementary_dd_span_applies(Elementary::Exp, fp64, Rounding::NearestEven, KernelOptions{true, k::Isa::None}));
}

TEST(ElementaryDdSpan, LaneEnclosuresAreTheScalarBits) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const k::Isa isa : tiers())
    for (const bool sigmoid : {false, true}) {
      const double max = sigmoid ? 600.0 : 700.0;
      std::vector<double> x = edges();
      std::erase_if(x, [&](double v) { return !(std::fabs(v) <= max); });
      for (int i = 0; i < 20000; ++i) x.push_back(rng() % 2 ? max * u(rng) : std::ldexp(u(rng), -static_cast<int>(rng() % 80)));
      std::vector<double> hi(x.size()), lo(x.size());
      std::vector<std::int64_t> scale(x.size());
      (isa == k::Isa::Avx2 ? dd_lanes::avx2::enclose : dd_lanes::avx512::enclose)(sigmoid, x.data(), x.size(),
                                                                                  hi.data(), lo.data(), scale.data());
      int bad = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const auto e = evaluate_dd(sigmoid ? Elementary::Sigmoid : Elementary::Exp, x[i]);
        ASSERT_TRUE(e.has_value());
        if ((!bits_equal(hi[i], e->v.hi) || !bits_equal(lo[i], e->v.lo) || scale[i] != e->scale) && bad++ < 5)
          ADD_FAILURE() << (sigmoid ? "sigmoid" : "exp") << " at " << k::name_of(isa) << " x = " << std::hexfloat
                        << x[i] << ": (" << hi[i] << ", " << lo[i] << ", " << scale[i] << ") vs (" << e->v.hi << ", "
                        << e->v.lo << ", " << e->scale << ")";
      }
    }
}

TEST(ElementaryDdSpan, EqualsMpfr) {
  std::mt19937_64 rng(11);
  for (const k::Isa isa : tiers())
    for (const Elementary f : {Elementary::Exp, Elementary::Sigmoid}) {
      check_span(f, edges(), isa, true);
      check_span(f, arguments(rng, 30000), isa, true);
      check_span(f, near_midpoints(rng, 3000), isa, true);
      // Sizes that are not multiples of the lanes or of the chunk, and a span aliased in place.
      for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{257}, std::size_t{515}})
        check_span(f, arguments(rng, n), isa, false);
      std::vector<double> x = arguments(rng, 300), want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = elementary(RoundingPlan(formats::fp64), Rounding::NearestEven, f, x[i]);
      ASSERT_TRUE(elementary_dd_span(RoundingPlan(formats::fp64), Rounding::NearestEven, f, x, x, KernelOptions{true, isa}));
      for (std::size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(bits_equal(x[i], want[i]));
    }
}

/// A classic hard case for binary64 exp (Lefèvre & Muller's worst cases): x = 0x1.9e9cbbfd6080bp-31, whose exp is
/// within about 2^-113 relative of a midpoint, and neighbours of it; the span must still give MPFR's bits.
TEST(ElementaryDdSpan, HardToRoundCases) {
  std::vector<double> x = {0x1.9e9cbbfd6080bp-31, -0x1.9e9cbbfd6080bp-31, 0x1.48ae5a67204f5p-14,
                           0x1.bd5ee31b09e36p+5, 0x1.62e42fefa39efp-1};
  const std::size_t base = x.size();
  for (std::size_t i = 0; i < base; ++i) {
    x.push_back(std::nextafter(x[i], 1e9));
    x.push_back(std::nextafter(x[i], -1e9));
  }
  for (const k::Isa isa : tiers())
    for (const Elementary f : {Elementary::Exp, Elementary::Sigmoid}) check_span(f, x, isa, true);
}

TEST(ElementaryDdSpanExhaustive, TwentyMillionArguments) {
  std::mt19937_64 rng(12345);
  for (const k::Isa isa : tiers())
    for (const Elementary f : {Elementary::Exp, Elementary::Sigmoid})
      for (int block = 0; block < 50; ++block) {
        check_span(f, arguments(rng, 90000), isa, true);
        check_span(f, near_midpoints(rng, 10000), isa, true);
      }
}

}  // namespace
}  // namespace roundoff::numerics
