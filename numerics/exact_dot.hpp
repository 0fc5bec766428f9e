#pragma once
/// \file exact_dot.hpp
/// Exact sums and dot products: the oracles that accumulation errors are measured against.
///
/// ExactSum is a Kulisch-style long accumulator: a two's-complement fixed-point integer of kLimbs·64 bits whose
/// bit 0 weighs 2^kLowExp. Every binary64 value and every product of two binary64 values is a multiple of
/// 2^-2148 below 2^2048 in magnitude, so any sum of up to 2^100 such terms is held exactly (no rounding, ever).
/// Non-finite terms are tracked apart and combined as IEEE 754 says: NaN absorbs, +inf + -inf is NaN.
///
/// For inputs in a narrow format (fp16, e5m2, e4m3: products are multiples of 2^(2·qmin) below 2^(2·emax+2),
/// 2^-48..2^32 for fp16) exact_dot() sums in one 128-bit integer instead (the wide fixed-point reference of
/// NUMERICS.md), which holds any sum of up to 2^40 fp16 products exactly; both paths are tested against each
/// other and against MPFR.
#include <mpfr.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

/// An exact real number formed as a sum of binary64 values and products of binary64 values.
class ExactSum {
 public:
  static constexpr int kLowExp = -2176;  ///< weight of bit 0 (a multiple of 64 below 2^-2148)
  static constexpr int kLimbs = 68;      ///< 4352 bits: magnitudes up to 2^2175, then the sign bit

  /// Adds x exactly.
  void add(double x);
  /// Adds x·y exactly (the exact product, never a rounded one).
  void add_product(double x, double y);
  /// Adds (-1)^neg·m·2^exp exactly; requires exp >= kLowExp and m·2^exp < 2^2100.
  void add_parts(bool neg, u128 m, int exp);
  /// Adds another exact sum.
  void add(const ExactSum& other);
  /// Negates the value (specials too).
  void negate();

  bool is_nan() const { return nan_ || (pos_inf_ && neg_inf_); }
  bool is_finite() const { return !nan_ && !pos_inf_ && !neg_inf_; }
  /// -1, 0 or +1: the sign of the value (of the infinity when one is present; 0 for NaN).
  int sign() const;
  /// floor(log2 |v|) for a finite nonzero value.
  int ilogb() const;
  /// The value rounded once to the plan's format in `mode` (NaN/inf per IEEE and the format's specials).
  double round(const RoundingPlan& plan, Rounding mode, std::uint64_t draw = 0) const;
  /// The value rounded to nearest binary64.
  double to_double() const;
  /// Sets r to the value rounded at r's precision; returns the ternary value (0 when exact).
  int to_mpfr(mpfr_ptr r, mpfr_rnd_t rnd = MPFR_RNDN) const;
  /// The exact value in decimal ("-0.000123", "2048", "inf", "nan"): every digit, no exponent.
  std::string to_decimal() const;
  /// The exact value as parts (magnitude truncated to its top 120 bits, the rest in `sticky`). Finite only.
  ExactParts parts() const;

 private:
  bool negative() const { return (limb_[kLimbs - 1] >> 63) != 0; }
  std::array<std::uint64_t, kLimbs> magnitude() const;
  std::array<std::uint64_t, kLimbs> limb_{};
  bool nan_ = false, pos_inf_ = false, neg_inf_ = false;
};

/// Σ x_i exactly.
ExactSum exact_sum(const double* x, std::ptrdiff_t incx, std::size_t n);
/// Σ x_i·y_i exactly (Kulisch accumulator; any binary64 inputs).
ExactSum exact_dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n);
/// Σ x_i·y_i exactly for inputs that are values of `inputs`. Narrow formats whose products and up to 2^40 of
/// their sums fit a signed 128-bit fixed-point integer (fp16, e5m2, e4m3) use that; others use the Kulisch path.
/// Throws std::invalid_argument when a finite input is not a value of `inputs`.
ExactSum exact_dot(const Format& inputs, const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy,
                   std::size_t n);
/// Σ |x_i·y_i| exactly (the condition denominator of the dot product error bounds).
ExactSum exact_abs_dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n);

/// |result − exact| / ulp_F(exact), with ulp_F(v) = 2^(max(floor(log2|v|), emin) − p + 1) (NUMERICS.md): the
/// error in units in the last place of F at the exact value. 0 when both are the same infinity; inf when the
/// result is non-finite and the exact value is not (or NaN appears). Computed exactly, then rounded once.
double error_ulps(const Format& f, const ExactSum& exact, double result);
/// (result − exact) rounded to nearest binary64 (signed error); NaN when either is non-finite.
double signed_error(const ExactSum& exact, double result);

}  // namespace roundoff::numerics
