#pragma once
/// \file experiments.hpp
/// The four targeted measurements of the per-op error study (issue 4, STUDY_PROTOCOL.md §4.1).
///
///   RMSNorm Σx² overflow    rows of d values N(0, σ²) (rounded to the op's storage); a row overflows when the
///                           Σx² reduction of ops::rmsnorm_forward's contract (one dot under the Accumulation)
///                           returns inf. With a format of largest finite value M the prediction is
///                           rms ≈ √(M/d) (= 8.0 for fp16 at d = 1024).
///   residual swamping       out = x + u with x ~ N(0, 1) and the branch update u ~ N(0, 1/ρ²), both values of
///                           the format, one rounding (ops::residual_forward with α = 1); the applied update is
///                           out − x (exact in binary64); error ‖(out − x) − u‖₂ / ‖u‖₂ and the fraction of
///                           elements whose update is lost entirely (out = x, u ≠ 0) versus the measured
///                           ratio ρ = rms(x)/rms(u).
///   softmax denominator     Z = Σ_j exp(x_j − max x) over a row of S logits N(0, s²) under a softmax
///                           OpPrecision (exp and subtraction in its compute format, Z under its Accumulation);
///                           bias = mean over rows of (Z − Z_exact)/Z_exact, Z_exact the binary64 sum of the same
///                           rounded terms (exact for fp16 terms: S ≤ 2^12 terms on a 2^-24 grid).
///   RoPE angles             the cos/sin table of ops::rope_angles under a RopeAngles OpPrecision against the
///                           MPFR table; angle error |atan2(sin, cos) − θ| (wrapped to (−π, π]) per position.
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "ops/policy.hpp"

namespace roundoff::studies::op_error {

struct OverflowPoint {
  double sigma = 0;
  std::int64_t rows = 0;
  double mean_rms = 0;           ///< mean over rows of √(Σx²/d), binary64
  double overflow_fraction = 0;  ///< rows whose Σx² reduction returned inf
};
/// One point per sigma; `prec` is the RMSNorm forward precision (its accumulation and storage are used).
std::vector<OverflowPoint> rmsnorm_overflow(const ops::OpPrecision& prec, std::int64_t d,
                                            const std::vector<double>& sigmas, std::int64_t rows, std::uint64_t seed);
/// The row rms at which half the rows overflow: linear interpolation of (mean rms, fraction) between the last
/// sigma below 1/2 and the first at or above it (NaN when no sigma reaches 1/2).
double overflow_threshold_rms(const std::vector<OverflowPoint>& pts);

struct SwampPoint {
  double ratio = 0;           ///< requested rms(x)/rms(u)
  double measured_ratio = 0;  ///< rms(x)/rms(u) of the rounded draws
  double rel_error = 0;       ///< ‖(out − x) − u‖ / ‖u‖
  double lost_fraction = 0;   ///< elements with out == x and u ≠ 0
};
std::vector<SwampPoint> residual_swamping(const ops::OpPrecision& prec, std::int64_t d, std::int64_t rows,
                                          const std::vector<double>& ratios, std::uint64_t seed);
/// The first measured ratio at which `rel_error` (lost = false) or `lost_fraction` (lost = true) reaches 1/2.
double swamping_ratio(const std::vector<SwampPoint>& pts, bool lost);

struct SoftmaxBiasPoint {
  std::int64_t S = 0;
  std::int64_t rows = 0;
  double mean_rel_bias = 0;  ///< mean (Z − Z_exact)/Z_exact
  double max_abs_rel = 0;
  double mean_Z = 0;
};
std::vector<SoftmaxBiasPoint> softmax_bias(const ops::OpPrecision& prec, const std::vector<std::int64_t>& lengths,
                                           double logit_std, std::uint64_t seed);

struct RopePoint {
  std::int64_t position = 0;
  double max_angle_error = 0;   ///< radians, over the hs/2 frequencies
  double mean_angle_error = 0;
  double max_table_error = 0;   ///< max |table − MPFR table| over cos and sin
};
/// Positions 0, step, 2·step, ... < T.
std::vector<RopePoint> rope_angle_error(const ops::OpPrecision& prec, std::int64_t T, std::int64_t hs,
                                        std::int64_t step);

}  // namespace roundoff::studies::op_error
