#pragma once
/// \file mpfr_oracle.hpp
/// An MPFR oracle for rounding to any Format in any Rounding mode, written independently of
/// numerics/round.cpp and numerics/arith.cpp (it shares only the Format description and the contract).
///
/// Method (NUMERICS.md, "MPFR as the oracle"): the exact operation is evaluated by MPFR at precision p with
/// mpfr_set_emin(emin - p + 2) and mpfr_set_emax(emax + 1) (MPFR's exponents are one more than IEEE's), and
/// mpfr_subnormalize is applied with the ternary value; the previous exponent range is restored afterwards.
/// MPFR supplies RNDN, RNDZ, RNDA, RNDU and RNDD directly; the other modes are derived:
///   - nearest-away: RNDN, except on an exact tie (the exact result equals the midpoint of RNDZ and RNDA,
///     decided by an exact evaluation at p + 2 bits), where it is RNDA;
///   - round-to-odd: RNDZ when exact, else whichever of RNDZ, RNDA has an odd last significand bit;
///   - stochastic: RD, RU and the exact probability of rounding to RU, (x - RD)/(RU - RD).
/// Then the format's contract (numerics/round.hpp) is applied on top:
///   - overflow (|rounded| > max_finite, which also covers the NaN-only top binade): ±max_finite when the
///     format saturates or has no specials, else per mode: nearest and the directed mode away from zero
///     give ±inf (NaN for NaN-only formats), toward zero, the directed mode toward zero and odd give
///     ±max_finite;
///   - no subnormals: an exact value x with 0 < |x| < 2^emin rounds onto {0, 2^emin}: nearest to the
///     nearer (a tie at 2^(emin-1) goes to 0 in nearest-even, to 2^emin in nearest-away), directed modes by
///     direction, odd to 2^emin; the sign is kept;
///   - exact infinities (x/0, exp(inf), log(0), inf inputs) map to ±inf, ±max_finite (saturating or no
///     specials) or NaN (non-saturating NaN-only); NaN stays NaN.
#include <mpfr.h>

#include <cstdint>
#include <functional>
#include <string>

#include "numerics/arith.hpp"
#include "numerics/format.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::test {

using numerics::Elementary;
using numerics::Format;
using numerics::Rounding;

/// Computes the exact operation into rop (whose precision the oracle chooses) rounded with rnd, and
/// returns MPFR's ternary value. It must be a correctly rounded MPFR evaluation that respects the
/// current exponent range (every mpfr_* function does).
using MpfrCompute = std::function<int(mpfr_ptr rop, mpfr_rnd_t rnd)>;

/// The result of one exact operation under every deterministic mode, plus the stochastic neighbours.
struct OracleResults {
  double mode[6] = {};     ///< indexed by the position in numerics::kDeterministicRoundings
  double down = 0, up = 0; ///< RD and RU neighbours for stochastic rounding (after the contract)
  bool exact = false;      ///< the exact value is a value of the format (no rounding happened)
  double value(Rounding r) const;
};

/// Evaluates `compute` under the format's rules for all deterministic modes.
OracleResults oracle(const Format& f, const MpfrCompute& compute);
/// One mode only (same work as oracle(); convenience).
double oracle(const Format& f, Rounding mode, const MpfrCompute& compute);

/// Operations the tests need, as computes over doubles (operands are exact doubles).
enum class Op : std::uint8_t { Convert, Add, Sub, Mul, Div, Fma, Sqrt };
OracleResults oracle_op(const Format& f, Op op, double a, double b = 0, double c = 0);
OracleResults oracle_elementary(const Format& f, Elementary fn, double x);
/// The exact value of a decimal or hex-float literal (mpfr_strtofr), rounded by the oracle.
OracleResults oracle_parse(const Format& f, const std::string& text);

/// Stochastic rounding of the exact result: the two candidates (after the contract; equal when exact)
/// and the probability of the upper one, (x - RD)/(RU - RD), computed at 4096 bits and rounded to double.
struct StochasticOracle {
  double down = 0, up = 0;
  double p_up = 0;
};
StochasticOracle stochastic_oracle_op(const Format& f, Op op, double a, double b = 0);

/// Correctly rounded sigmoid 1/(1 + e^-x) by Ziv's strategy with interval bounds, respecting the current
/// exponent range. Independent of numerics/arith.cpp's implementation.
int mpfr_sigmoid(mpfr_ptr rop, mpfr_srcptr x, mpfr_rnd_t rnd);

/// Bitwise identity of two doubles, treating every NaN as equal (NaN payloads are not part of any contract).
bool same_value(double a, double b);

}  // namespace roundoff::test
