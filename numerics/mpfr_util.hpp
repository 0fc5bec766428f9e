#pragma once
/// \file mpfr_util.hpp
/// Small RAII helpers over raw MPFR, and the bridge from an MPFR value to ExactParts.
#include <mpfr.h>

#include <string>

#include "numerics/round.hpp"

namespace roundoff::numerics {

/// An mpfr_t with a fixed precision, freed on destruction.
class Mpfr {
 public:
  explicit Mpfr(mpfr_prec_t prec) { mpfr_init2(v_, prec); }
  ~Mpfr() { mpfr_clear(v_); }
  Mpfr(const Mpfr&) = delete;
  Mpfr& operator=(const Mpfr&) = delete;
  mpfr_ptr get() { return v_; }
  mpfr_srcptr get() const { return v_; }
  operator mpfr_ptr() { return v_; }
  operator mpfr_srcptr() const { return v_; }

 private:
  mpfr_t v_;
};

/// The exact value of y, or of the real number r when y = RZ(r) at y's precision and `inexact` says r != y,
/// as parts for round_parts. y must be finite and nonzero; precision(y) <= 120.
ExactParts parts_from_mpfr(mpfr_srcptr y, bool inexact);

/// Working precision for an MPFR value rounded toward zero that is then rounded once to the plan's format:
/// p+2 bits suffice for every deterministic mode (round-to-odd argument: truncation plus a sticky bit);
/// stochastic rounding needs the fraction to 64 bits, hence p+66.
inline mpfr_prec_t rz_precision(const RoundingPlan& plan, Rounding mode) {
  return plan.format.precision + (mode == Rounding::Stochastic ? 66 : 2);
}

/// Rounds r to the plan's format, given y = round-toward-zero of r at a precision >= p+2 (unbounded exponent)
/// and whether it was inexact. Handles zero, inf and NaN in y.
double round_from_rz(const RoundingPlan& plan, Rounding mode, mpfr_srcptr y, bool inexact, std::uint64_t draw);

/// Parses a decimal or C99 hex-float literal (also "inf", "-inf", "nan") exactly and rounds it once.
/// Throws std::invalid_argument naming the text when it is not a number.
double parse_and_round(const RoundingPlan& plan, Rounding mode, const std::string& text, std::uint64_t draw = 0);

/// "0x1.02p+0", "-0x0p+0", "inf", "-inf", "nan".
std::string hex_float(double x);

}  // namespace roundoff::numerics
