#pragma once
/// \file error_growth.hpp
/// The accumulation error-growth study (`roundoff accumulate`): how the error of a sum or dot product grows with
/// its length n, for each accumulation order and format, against Higham's deterministic γ bound and the
/// Higham–Mary probabilistic λ√n·u bound.
///
/// Design. For n = 16, 32, ..., 4096 and input formats fp16 and bf16, `trials` independent inputs per (n, data):
///   zero-mean  dot(x, y), x_i, y_i ~ N(0,1) rounded to the input format (a projection's inner product);
///   sumsq      dot(x, x), x_i ~ N(0,1) rounded: Σ x_i², same-sign terms (an RMSNorm variance);
///   softmax    Σ e_i, e_i = round(exp(z_i − max z)), z_i ~ N(0,1): same-sign terms in (0, 1] (a softmax
///              denominator).
/// Every accumulation sees the same inputs (paired comparison). The exact value comes from the exact oracle
/// (numerics/exact_dot.hpp). Per run: error in ulps of the result format at the exact value (NUMERICS.md
/// convention); the normalised error |ŝ − s| / (u·Σ|x_i y_i|) with u the accumulator format's unit roundoff; and
/// the signed relative error (ŝ − s)/s for the same-sign data (the bias). Per cell: median, p95, max, and means.
/// Growth exponents: least squares of log(metric) on log(n) per (inputs, accumulation, data), for the median and
/// p95 error in ulps and the median normalised error.
///
/// Data are drawn from a counter-based stream (StochasticBits keyed by seed and cell), so a run is bit-reproducible
/// from its seed and independent of evaluation order.
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace roundoff::studies {

struct ErrorGrowthOptions {
  std::filesystem::path out = "notebooks-data/accumulation";
  std::uint64_t seed = 20260101;
  int trials = 0;      ///< 0 = default (the full run's, or the quick run's)
  bool quick = false;  ///< n up to 1024 and a few trials: a smoke run
  std::string command; ///< the command line, for the provenance sidecar
};

/// One summary row of the tidy CSV.
struct ErrorGrowthRow {
  std::string inputs, accumulation, data;
  std::size_t n = 0;
  int trials = 0;
  double median_ulps = 0, p95_ulps = 0, max_ulps = 0, mean_ulps = 0;
  double median_norm = 0, p95_norm = 0, max_norm = 0;
  double mean_signed_norm = 0;  ///< mean of (ŝ − s)/(u·Σ|x_i y_i|): the bias in the normalised unit
  double mean_signed_rel = 0;   ///< mean of (ŝ − s)/s (same-sign data; NaN for zero-mean)
  double gamma_norm = 0;        ///< Higham's deterministic bound / (u·Σ|x_i y_i|)
  double prob_norm = 0;         ///< probabilistic bound (first order, λ = kLambda) / (u·Σ|x_i y_i|); NaN if none
  double frac_over_prob = 0;    ///< fraction of runs whose normalised error exceeds prob_norm
  std::int64_t overflows = 0;
};

/// Growth fit metric = C·n^α over n (metric: median_ulps, p95_ulps or median_norm): ordinary least squares
/// of log(metric) on log(n) over the k points with metric > 0. exponent_se is the slope's standard error
/// √(s²/Sxx), s² = Σ residual²/(k − 2), Sxx = Σ(log n − mean)²; exponent_ci95 is the half-width of its 95 %
/// confidence interval, t(0.975, k − 2)·se (Student's t, for independent normal residuals). NaN when k < 3.
struct ErrorGrowthFit {
  std::string inputs, accumulation, data, metric;
  double exponent = 0, exponent_se = 0, exponent_ci95 = 0, constant = 0, r2 = 0;
  int points = 0;
};

/// The fit of `pts` (n, metric) as described at ErrorGrowthFit (labels left empty).
ErrorGrowthFit fit_growth(const std::vector<std::pair<double, double>>& pts);

/// λ of the probabilistic bound: 1 − P(λ) = 2·exp(−λ²(1−u)²/2) ≈ 3e-8 per rounding, so the bound holds for a
/// whole length-4096 dot product with probability > 0.9998 (Higham & Mary 2019, Theorem 2.4).
inline constexpr double kLambda = 6.0;

struct ErrorGrowthResult {
  std::vector<ErrorGrowthRow> rows;
  std::vector<ErrorGrowthFit> fits;
};

/// Runs the study and returns the rows and fits (no files written).
ErrorGrowthResult run_error_growth(const ErrorGrowthOptions& opt, std::ostream* progress = nullptr);
/// Runs the study and writes <out>/error_growth.csv, <out>/error_growth_fits.csv and <out>/error_growth.json
/// (provenance, seed, command, parameters, files), atomically.
ErrorGrowthResult run_and_write_error_growth(const ErrorGrowthOptions& opt, std::ostream* progress = nullptr);

}  // namespace roundoff::studies
