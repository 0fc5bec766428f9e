#pragma once
/// \file arith.hpp
/// Correctly rounded arithmetic in any target format and any rounding mode.
///
/// Each function takes operands that are values of (or at least exactly held in) binary64 and returns
/// round_F(exact result) for the plan's format F and the given mode: one rounding of the exact real result,
/// never a rounding of a rounded binary64 result (NUMERICS.md traps 1 and 2).
///
/// How (contract of the fast paths, each exact):
///   add/sub  TwoSum gives hi + lo = a ± b exactly; round_pair rounds the pair.
///   mul      the significands' product via TwoProduct (std::fma), exponents kept apart (no underflow).
///   div      q = a/b on scaled significands and the exact remainder fma(-q, b, a) fix the side of q the
///            quotient lies on; lo = r/b only needs the right sign (midpoints of p <= 53 formats are never
///            strictly between two adjacent binary64 numbers, and p = 53 quotients have no ties).
///   sqrt     as div, with remainder fma(-s, s, a).
///   fma      binary64 under nearest-even: the hardware FMA (IEEE 754 fusedMultiplyAdd; NaN made canonical).
///            Otherwise exact product + c by TwoSum when the product fits 53 bits (every format with p <= 26);
///            otherwise MPFR at p+2 bits rounded toward zero, then rounded once (round-to-odd argument).
/// IEEE specials: NaN propagates, inf - inf and 0 * inf are NaN, x/0 is ±inf, sqrt(-x) is NaN; the sign of
/// an exact zero sum is + except in Rounding::Down (IEEE 754 §6.3).
///
/// Elementary functions (exp, log, sigmoid = 1/(1+e^-x), tanh, rsqrt = 1/√x, sin, cos, erf): correctly rounded in
/// every mode. A binary64 libm value y with error below kLibmUlps binary64 ulps is accepted when rounding
/// y - bound and y + bound gives the same result (rounding is monotone, so that result is the correct one);
/// otherwise exp, log, sigmoid and rsqrt try the double-double path (numerics/elementary_dd.hpp: a proven
/// ~2^-100 enclosure rounded once when it decides, bit for bit MPFR's result), and what remains is evaluated by
/// MPFR at p+2 bits (Ziv's strategy for sigmoid) and rounded once.
/// Stochastic rounding of a function uses the binary64 value's fraction: the up-probability is within
/// kLibmUlps·2^(p-52) of exact. Hard cases are handled by the fallback, so the only assumption is the libm
/// error bound; tests/numerics/elementary_test.cpp verifies every 16-bit input of every function and mode
/// against MPFR.
#include <cstdint>

#include "numerics/round.hpp"

namespace roundoff::numerics {

/// Binary64 ulps of error assumed for glibc's exp, log, tanh, sin, cos, erf and for 1/sqrt(x) and
/// 1/(1+exp(-x)) evaluated in binary64 (glibc documents at most 1-2 ulps for these; 8 leaves margin).
inline constexpr int kLibmUlps = 8;

double add(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw = 0);
double sub(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw = 0);
double mul(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw = 0);
double div(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw = 0);
double fma(const RoundingPlan& p, Rounding m, double a, double b, double c, std::uint64_t draw = 0);
double sqrt(const RoundingPlan& p, Rounding m, double a, std::uint64_t draw = 0);

/// Unary elementary functions, one rounding each.
enum class Elementary : std::uint8_t { Exp, Log, Sigmoid, Tanh, Rsqrt, Sin, Cos, Erf };
inline constexpr Elementary kAllElementary[] = {Elementary::Exp,   Elementary::Log,   Elementary::Sigmoid,
                                                Elementary::Tanh,  Elementary::Rsqrt, Elementary::Sin,
                                                Elementary::Cos,   Elementary::Erf};
const char* name_of(Elementary f);

double elementary(const RoundingPlan& p, Rounding m, Elementary f, double x, std::uint64_t draw = 0);
/// The same through MPFR only (no binary64 fast path); used by tests and by the fallback.
double elementary_mpfr(const RoundingPlan& p, Rounding m, Elementary f, double x, std::uint64_t draw = 0);

inline double exp(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Exp, x, d); }
inline double log(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Log, x, d); }
inline double sigmoid(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Sigmoid, x, d); }
inline double tanh(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Tanh, x, d); }
inline double rsqrt(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Rsqrt, x, d); }
inline double sin(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Sin, x, d); }
inline double cos(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Cos, x, d); }
inline double erf(const RoundingPlan& p, Rounding m, double x, std::uint64_t d = 0) { return elementary(p, m, Elementary::Erf, x, d); }

/// Error-free transformations (Knuth's TwoSum; TwoProduct with one FMA). Exact barring overflow.
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = __builtin_fma(a, b, -p);
}

}  // namespace roundoff::numerics
