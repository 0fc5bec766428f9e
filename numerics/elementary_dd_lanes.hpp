#pragma once
/// \file elementary_dd_lanes.hpp
/// Internal to numerics/elementary_dd_span.cpp (and its tests): the double-double exp and sigmoid of
/// numerics/elementary_dd.cpp in SIMD lanes (elementary_dd_lanes.inc compiled once per ISA tier), and the rounding
/// of their enclosures to binary64 under round-to-nearest-even. Contract and argument: elementary_dd_span.hpp.
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::dd_lanes {

/// hi[i] + lo[i] and scale[i] are, bit for bit, the v.hi, v.lo and scale that evaluate_dd(f, x[i]) returns, for
/// every i < n with |x[i]| <= 700 (exp) or <= 600 (sigmoid) (elementary_dd_span.hpp's lane domain); unspecified
/// values otherwise. sigmoid: false for exp.
/// y[i] = RN64((hi[i] + lo[i])·2^scale[i]) when the error bound 2^-error_bits decides it (see the header), NaN when
/// it does not; hi[i] must be in [0.25, 2] and the scaled result normal, as the lane domain guarantees.
namespace avx512 {
inline constexpr std::size_t kW = 8;
void enclose(bool sigmoid, const double* x, std::size_t n, double* hi, double* lo, std::int64_t* scale);
void round_rn64(const double* hi, const double* lo, const std::int64_t* scale, int error_bits, std::size_t n,
                double* y);
}  // namespace avx512
namespace avx2 {
inline constexpr std::size_t kW = 4;
void enclose(bool sigmoid, const double* x, std::size_t n, double* hi, double* lo, std::int64_t* scale);
void round_rn64(const double* hi, const double* lo, const std::int64_t* scale, int error_bits, std::size_t n,
                double* y);
}  // namespace avx2

}  // namespace roundoff::numerics::dd_lanes
