#pragma once
// Shared helpers of the ops tests: random inputs already rounded to a format, and a contiguous-span view.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "numerics/round.hpp"
#include "ops/backend.hpp"

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

template <class T>
std::span<const T> cs(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace roundoff::ops::test
