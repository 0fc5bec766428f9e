#pragma once
// Random GEMM operands of the kernel tests (gemm_kernels_test, gemm_ranged_test): values of a format in the
// regimes the kernels must get right.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics::test {

enum class Regime { Normal, Specials, Overflow, Tiny };

/// The kernels' equality: the same bits, or both NaN.
inline bool same(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

/// An accumulation in format f, order `order` (block size `block` when blocked; outer sum fp32), otherwise default.
inline Accumulation make_acc(const Format& f, Order order = Order::Sequential, int block = 0) {
  Accumulation a;
  a.format = f;
  a.order = order;
  a.block = block;
  a.outer_format = formats::fp32;
  return a;
}

/// Random values of `f` (fp16, bf16 or fp32) in a regime. Tiny: products whose sums land in the accumulator's
/// subnormal range. Overflow: magnitudes whose products overflow the accumulator after a few terms.
inline std::vector<double> random_values(std::mt19937_64& rng, const Format& f, std::size_t n, Regime regime) {
  const RoundingPlan plan(f);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const bool half = f == formats::fp16;
  std::vector<double> v(n);
  for (auto& x : v) {
    double y = gauss(rng);
    switch (regime) {
      case Regime::Normal: break;
      case Regime::Specials: {
        const double u = unit(rng);
        if (u < 0.01) y = std::numeric_limits<double>::infinity();
        else if (u < 0.02) y = -std::numeric_limits<double>::infinity();
        else if (u < 0.03) y = std::numeric_limits<double>::quiet_NaN();
        else if (u < 0.08) y = 0.0;
        else if (u < 0.10) y = -0.0;
        break;
      }
      case Regime::Overflow: y = half ? 300.0 * y : std::ldexp(std::clamp(y, -1.9, 1.9), 62); break;
      case Regime::Tiny: y = std::ldexp(y, half ? -9 : -62); break;
    }
    x = round_to(plan, Rounding::NearestEven, y);
    if (!half && std::isfinite(x) && x != 0 && std::fabs(x) < std::ldexp(1.0, -63)) x = 0.0;  // kernel range
  }
  return v;
}

}  // namespace roundoff::numerics::test
