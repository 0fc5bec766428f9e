#pragma once
// Shared helpers of the ops tests: random inputs already rounded to a format, and a contiguous-span view.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "numerics/round.hpp"
#include "ops/backend.hpp"
#include "ops/policy.hpp"
#include "tests/support/switch_guards.hpp"

namespace roundoff::ops::test {

/// n values N(0, sigma²) rounded (nearest-even) to f.
inline std::vector<double> randn(std::size_t n, double sigma, const numerics::Format& f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  const numerics::RoundingPlan plan(f);
  std::vector<double> v(n);
  for (double& x : v) x = numerics::round_to(plan, numerics::Rounding::NearestEven, d(rng));
  return v;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, std::int32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

/// Every preset's name, then the extra policy specs.
inline std::vector<std::string> presets_and(std::initializer_list<const char*> extra) {
  std::vector<std::string> p = Policy::preset_names();
  p.insert(p.end(), extra.begin(), extra.end());
  return p;
}

template <class T>
std::span<const T> cs(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

/// Input regimes of the fast-path tests: N(0,1); magnitudes around √max_finite (products overflow); around
/// √min_normal / 4 (products underflow); N(0,1) with ±0, ±inf and NaN mixed in.
enum class Regime { Normal, Overflow, Subnormal, Specials };
inline constexpr Regime kRegimes[] = {Regime::Normal, Regime::Overflow, Regime::Subnormal, Regime::Specials};

/// n values of `regime` rounded (nearest-even) to f.
inline std::vector<double> inputs(std::size_t n, Regime regime, const numerics::Format& f, std::uint64_t seed) {
  const double sigma = regime == Regime::Overflow ? std::sqrt(numerics::RoundingPlan(f).max_finite)
                       : regime == Regime::Subnormal ? std::sqrt(numerics::RoundingPlan(f).min_normal) / 4
                                                      : 1.0;
  std::vector<double> v = randn(n, sigma, f, seed);
  if (regime == Regime::Specials) {
    std::mt19937_64 rng(seed + 1);
    const double inf = std::numeric_limits<double>::infinity();
    const double special[] = {0.0, -0.0, -0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
    for (double& x : v)
      if (rng() % 5 == 0) x = special[rng() % 7];
  }
  // Whole rows of −0 so that some dot products are exact −0 sums (zero padding would give +0).
  for (std::size_t i = 0; i < n / 7; ++i) v[i] = -0.0;
  return v;
}

/// Bitwise equality; any NaN equal to any NaN unless nan_bits.
inline bool same(double a, double b, bool nan_bits = false) {
  return (!nan_bits && std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

inline void expect_same(const std::vector<double>& fast, const std::vector<double>& oracle, const std::string& what,
                        bool nan_bits = false) {
  ASSERT_EQ(fast.size(), oracle.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < fast.size(); ++i)
    if (!same(fast[i], oracle[i], nan_bits) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << fast[first] << " vs " << oracle[first];
}

/// Runs f twice, with the fast paths on and off, and returns both results.
template <class F>
std::pair<std::vector<std::vector<double>>, std::vector<std::vector<double>>> both(F&& f) {
  auto fast = [&] {
    const ::roundoff::test::FastPathsGuard on(true);
    return f();
  }();
  auto oracle = [&] {
    const ::roundoff::test::FastPathsGuard off(false);
    return f();
  }();
  return {fast, oracle};
}

}  // namespace roundoff::ops::test
