// exp and sigmoid rounded to binary64 over spans: the double-double lanes, their rounding test, and the scalar
// numerics::elementary for the lanes the test leaves undecided (argument in elementary_dd_span.hpp).
#include "numerics/elementary_dd_span.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "numerics/elementary_dd_lanes.hpp"

namespace roundoff::numerics {

namespace {

constexpr std::size_t kChunk = 256;
/// -log2 of the enclosures' relative error bounds (elementary_dd.cpp, docs/numerics.md).
constexpr int kExpErrorBits = 102;
constexpr int kSigmoidErrorBits = 100;
/// The lane domains: the scaled results stay normal and sigmoid's E·2^scale never drops (elementary_dd_lanes.hpp).
constexpr double kExpLaneMax = 700.0;
constexpr double kSigmoidLaneMax = 600.0;

}  // namespace

bool elementary_dd_span_applies(Elementary f, const RoundingPlan& plan, Rounding mode, const KernelOptions& opts) {
  return (f == Elementary::Exp || f == Elementary::Sigmoid) && plan.format == formats::fp64 &&
         mode == Rounding::NearestEven && opts.isa() != kernels::Isa::None;
}

bool elementary_dd_span(const RoundingPlan& plan, Rounding mode, Elementary f, std::span<const double> in,
                        std::span<double> out, const KernelOptions& opts) {
  if (!elementary_dd_span_applies(f, plan, mode, opts) || in.size() != out.size()) return false;
  const bool sigmoid = f == Elementary::Sigmoid;
  const bool wide = opts.isa() != kernels::Isa::Avx2;
  const auto enclose = wide ? dd_lanes::avx512::enclose : dd_lanes::avx2::enclose;
  const auto round = wide ? dd_lanes::avx512::round_rn64 : dd_lanes::avx2::round_rn64;
  const double lane_max = sigmoid ? kSigmoidLaneMax : kExpLaneMax;
  const int error_bits = sigmoid ? kSigmoidErrorBits : kExpErrorBits;
  double x[kChunk], hi[kChunk], lo[kChunk], y[kChunk];
  std::int64_t scale[kChunk];
  for (std::size_t c = 0; c < in.size(); c += kChunk) {
    const std::size_t n = std::min(kChunk, in.size() - c);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::fabs(in[c + i]) <= lane_max ? in[c + i] : 0.0;  // NaN: 0
    enclose(sigmoid, x, n, hi, lo, scale);
    round(hi, lo, scale, error_bits, n, y);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = in[c + i];
      out[c + i] = std::fabs(v) <= lane_max && !std::isnan(y[i]) ? y[i] : elementary(plan, mode, f, v);
    }
  }
  return true;
}

}  // namespace roundoff::numerics
