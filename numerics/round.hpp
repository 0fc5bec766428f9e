#pragma once
/// \file round.hpp
/// Correct rounding of exact values to any Format in any Rounding mode.
///
/// Contract: round_to(plan, mode, x) returns the format value that `mode` selects for the exact value x
/// (a double or float is exact), with
///   - subnormals when the format has them, otherwise rounding onto {0, ±2^emin, normals};
///   - overflow per IEEE 754 with an unbounded exponent: nearest modes and the directed mode pointing away
///     from zero give ±inf (NaN for NanOnly formats), the others ±max_finite; saturating formats (and
///     Specials::None) always give ±max_finite; round-to-odd gives ±max_finite;
///   - NaN in, NaN out; ±inf in: ±inf, or ±max_finite when saturating, or NaN for non-saturating NanOnly;
///   - the sign of zero preserved (a negative value that rounds to zero gives -0).
/// Stochastic rounding rounds up (in magnitude) with probability equal to the distance to the lower
/// neighbour over the gap, computed from a 64-bit draw: the probability is exact to 2^-64.
#include <bit>
#include <cstdint>
#include <span>

#include "numerics/format.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::numerics {

/// 128-bit unsigned integer (a GCC/Clang extension; __extension__ keeps -Wpedantic quiet).
__extension__ typedef unsigned __int128 u128;

/// Constants of a format precomputed once (cpfloat's COMPUTE_GLOBAL_PARAMS as a value).
struct RoundingPlan {
  Format format;
  double max_finite;
  double min_normal;
  int qexp_min;  ///< exponent of the smallest quantum: emin-p+1 (subnormals) or emin (no subnormals)
  // Fast path of round_to for doubles whose magnitude lies in the format's normal binades: the magnitude's
  // bit pattern is in [fast_lo_bits, fast_hi_bits] and rounding clears the low `drop_bits` bits.
  std::uint64_t fast_lo_bits;
  std::uint64_t fast_hi_bits;
  int drop_bits;
  explicit RoundingPlan(const Format& f);
};

/// An exact value in parts: (-1)^neg · (m + δ) · 2^exp, with δ = 0 when !sticky and δ ∈ (0, 1) when sticky.
/// Every rounding in the library goes through round_parts.
struct ExactParts {
  bool neg = false;
  u128 m = 0;
  int exp = 0;
  bool sticky = false;
};

/// Splits a finite nonzero double into m·2^e with m an integer < 2^53 (exact).
inline void split_double(double x, std::uint64_t& m, int& e) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const int ef = static_cast<int>((bits >> 52) & 0x7FF);
  m = bits & ((std::uint64_t{1} << 52) - 1);
  if (ef == 0) {
    e = -1074;
  } else {
    m |= std::uint64_t{1} << 52;
    e = ef - 1075;
  }
}

/// Rounds an exact value given in parts. `draw` is the 64-bit random number used by Rounding::Stochastic.
double round_parts(const RoundingPlan& plan, Rounding mode, ExactParts v, std::uint64_t draw = 0);

/// Rounds the exact double x.
double round_to(const RoundingPlan& plan, Rounding mode, double x, std::uint64_t draw = 0);
/// Rounds the exact value hi + lo, where hi and lo are doubles with |lo| <= ulp_binary64(hi)
/// (e.g. the outputs of TwoSum or TwoProduct).
double round_pair(const RoundingPlan& plan, Rounding mode, double hi, double lo, std::uint64_t draw = 0);
/// Rounds hi·2^scale + lo·2^scale (same condition on lo), for results whose exponent leaves binary64.
double round_pair_scaled(const RoundingPlan& plan, Rounding mode, double hi, double lo, int scale,
                         std::uint64_t draw = 0);

/// Convenience for tests and the CLI: builds the plan each call.
double round_to(const Format& f, Rounding mode, double x, std::uint64_t draw = 0);

/// Array rounding, dst[i] = round(src[i]); stochastic draws come from bits.draw(first_index + i), so the
/// result is independent of how the array is split. Uses SIMD fast paths when the CPU has them; every
/// fast path is bit-identical to round_to. dst may alias src. Doubles in a deterministic mode take
/// round_doubles_avx512 (numerics/round_span.hpp) when the CPU has AVX-512F, else round_doubles_avx2 when it has
/// AVX2 and F16C.
void round_array(const RoundingPlan& plan, Rounding mode, std::span<const double> src, std::span<double> dst,
                 StochasticBits bits = {}, std::uint64_t first_index = 0);
void round_array(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                 StochasticBits bits = {}, std::uint64_t first_index = 0);

/// Portable reference implementation of the float array rounding (no SIMD), for tests and benchmarks.
void round_array_portable(const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                          std::span<float> dst, StochasticBits bits = {}, std::uint64_t first_index = 0);

/// True when x is a value of the format (finite values, and NaN/inf where the format has them).
bool is_representable(const RoundingPlan& plan, double x);

}  // namespace roundoff::numerics
