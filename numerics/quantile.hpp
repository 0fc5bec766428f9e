#pragma once
/// \file quantile.hpp
/// The one quantile definition of the project (per-op error statistics, the accumulation study, the
/// trainer's telemetry): the nearest-rank quantile. For n sorted values v[1..n] and 0 < q ≤ 1,
///   Q(q) = v[⌈q·n⌉],
/// so the median of {1, 2, 3, 4} is 2, the 0.95 quantile of 20 values is v[19], and Q(1) is the maximum.
/// It is always one of the data (no interpolation), so an ulp statistic stays a value that occurred.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace roundoff::numerics {

/// Nearest-rank quantile of values already sorted ascending; NaN for an empty span. q is clamped to (0, 1].
inline double quantile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const std::size_t k = rank < 1 ? 1 : std::min(sorted.size(), static_cast<std::size_t>(rank));
  return sorted[k - 1];
}

/// Nearest-rank quantile of unsorted values (sorts a copy).
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, q);
}

}  // namespace roundoff::numerics
