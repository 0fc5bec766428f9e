#pragma once
/// \file elementary_dd.hpp
/// The binary64 path of the elementary functions: f(x) evaluated in double-double with a proven relative error
/// bound, then rounded once when that bound decides the rounding (Ziv's first step at ~100 bits).
///
/// Contract: elementary_dd(plan, mode, f, x, draw) returns either nothing (x outside the function's fast
/// domain, or the enclosure straddles a rounding boundary) or exactly the value elementary_mpfr returns for the
/// same arguments, in every format and mode, stochastic included: every rounding mode with a fixed draw is a
/// monotone function of the exact value, so when both ends of an interval that contains f(x) round to the same
/// value, f(x) rounds to it too. The error bounds and their derivations are in docs/numerics.md ("Binary64
/// elementary functions"); tests/numerics/elementary_dd_test.cpp checks them and the rounding against MPFR.
///
/// Fast domains (everything else, NaN, infinities and the functions not listed returns nothing):
///   exp      |x| < 1024                       error <= 2^-102
///   log      0 < x < inf, x != 1              error <= 2^-100
///   sigmoid  |x| < 1024                       error <= 2^-100
///   rsqrt    0 < x < inf                      error <= 2^-102
#include <cstdint>
#include <optional>

#include "numerics/arith.hpp"
#include "numerics/double_double.hpp"

namespace roundoff::numerics {

/// f(x) ≈ (v.hi + v.lo)·2^scale with |(v.hi + v.lo)·2^scale - f(x)| <= 2^-error_bits·|f(x)|.
struct DdEnclosure {
  DD v;
  int scale = 0;
  int error_bits = 0;
};

/// The double-double evaluation alone; nothing outside the fast domain.
std::optional<DdEnclosure> evaluate_dd(Elementary f, double x);

/// The rounding of the real number the enclosure contains, when every number within its error bound rounds
/// the same way (draw as in round_parts); nothing otherwise.
std::optional<double> round_enclosure(const RoundingPlan& plan, Rounding mode, const DdEnclosure& e,
                                      std::uint64_t draw = 0);

/// round_enclosure(evaluate_dd(f, x)).
std::optional<double> elementary_dd(const RoundingPlan& plan, Rounding mode, Elementary f, double x,
                                    std::uint64_t draw = 0);

}  // namespace roundoff::numerics
