#pragma once
/// \file grad_telemetry.hpp
/// The element counts behind the trainer's two gradient telemetry metrics (STUDY_PROTOCOL §4.4), one
/// parameter tensor at a time:
///   underflow fraction   lost / nonzero, nonzero = #{k : ref[k] ≠ 0}, lost = #{k : ref[k] ≠ 0 ∧ own[k] = 0}
///                        (ref: the fp32 pass's gradient, own: the run's precision)
///   stagnation fraction  stuck / pushed, pushed = #{k : g[k] ≠ 0}, stuck = #{k : g[k] ≠ 0 ∧ after[k] = before[k]}
/// Comparisons are IEEE: −0 = +0, and NaN ≠ 0 (a NaN gradient counts as non-zero) and NaN ≠ NaN.
/// Branch-free loops (a data-dependent branch per element mispredicts on scattered zeros); exact integer
/// counts, so any order gives the same result.
#include <cstdint>
#include <span>

namespace roundoff::studies::train {

struct MaskedCount {
  std::int64_t selected = 0;  ///< elements whose gradient is non-zero (nonzero, pushed)
  std::int64_t hits = 0;      ///< of those, the ones the metric counts (lost, stuck)
};

/// selected = #{k : ref[k] ≠ 0}, hits = #{k : ref[k] ≠ 0 ∧ own[k] = 0}. Equal sizes.
MaskedCount count_underflow(std::span<const double> own, std::span<const double> ref);
/// selected = #{k : g[k] ≠ 0}, hits = #{k : g[k] ≠ 0 ∧ after[k] = before[k]}. Equal sizes.
MaskedCount count_stagnation(std::span<const double> g, std::span<const double> after,
                             std::span<const double> before);

}  // namespace roundoff::studies::train
