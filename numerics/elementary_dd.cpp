#include "numerics/elementary_dd.hpp"

#include <bit>
#include <cmath>

#include "numerics/elementary_dd_tables.hpp"
#include "numerics/pair_parts.hpp"

namespace roundoff::numerics {

namespace {

/// Error bounds as -log2 of the relative error (docs/numerics.md derives each).
constexpr int kExpErrorBits = 102;      // 11.2u² derived, 16u² claimed
constexpr int kLogErrorBits = 100;      // 43.2u² derived, 64u² claimed
constexpr int kSigmoidErrorBits = 100;  // 32.8u² derived, 64u² claimed
constexpr int kRsqrtErrorBits = 102;    // 11.1u² derived, 16u² claimed

/// Σ_{n<N} c[n]·r^n by Horner's rule in double-double (|error| <= u²(5.01·M + 9.01·S), docs/numerics.md).
template <std::size_t N>
DD horner(const DD (&c)[N], DD r) {
  DD q = c[N - 1];
  for (std::size_t i = N - 1; i-- > 0;) q = dd_add(c[i], dd_mul(r, q));
  return q;
}

/// e^x = (v.hi + v.lo)·2^scale for |x| < 1024: x = k·ln2/64 + r, e^x = 2^(k>>6)·2^((k&63)/64)·e^r.
DdEnclosure exp_dd(double x) {
  using namespace dd_tables;
  const double kd = std::nearbyint(x * k64ByLn2);  // |k| <= 94549 < 2^17
  const double t1 = x - kd * kLn2By64[0];          // exact (docs/numerics.md)
  double rh, rl;
  two_sum(t1, -(kd * kLn2By64[1]), rh, rl);        // exact: k·kLn2By64[1] is exact
  const DD r = dd_add({rh, rl}, {-(kd * kLn2By64[2]), 0.0});
  const int k = static_cast<int>(kd);
  return {dd_mul(kExp2Table[k & 63], horner(kExpTaylor, r)), k >> 6, kExpErrorBits};
}

/// log x for finite x > 0: x = 2^e·m, m in [0.75, 1.5), log x = e·ln2 - log(inv_j) + log1p(m·inv_j - 1).
DdEnclosure log_dd(double x) {
  using namespace dd_tables;
  int e;
  double m = std::frexp(x, &e) * 2;  // [1, 2), exact (subnormal x included)
  e -= 1;
  if (m >= 1.5) {
    m *= 0.5;
    e += 1;
  }
  const auto i = static_cast<std::size_t>(std::nearbyint(m * 128) - 96);  // j - 96, j in [96, 192]
  double ph, pl;
  two_prod(m, kLogInv[i], ph, pl);
  double rh, rl;
  two_sum(ph - 1.0, pl, rh, rl);  // r = m·inv_j - 1 exactly: ph - 1 is exact (Sterbenz)
  const DD r{rh, rl};
  const DD log1p_r = dd_mul(r, horner(kLog1pTaylor, r));
  const DD head = dd_add(dd_mul(kLn2, static_cast<double>(e)), kLogTable[i]);
  return {dd_add(head, log1p_r), 0, kLogErrorBits};
}

/// 1/(1 + e^-x) for |x| < 1024: 1/(1 + E) with E = e^-x for x >= 0, E/(1 + E) with E = e^x for x < 0.
DdEnclosure sigmoid_dd(double x) {
  const bool pos = x >= 0;
  const DdEnclosure e = exp_dd(pos ? -x : x);  // E = e.v·2^e.scale <= 1
  // E·2^scale: below 2^-960 it is dropped (relative change of 1 + E under 2^-959) so no part is subnormal.
  const DD scaled = e.scale < -960 ? DD{} : dd_ldexp(e.v, e.scale);
  const DD d = dd_add({1.0, 0.0}, scaled);
  if (pos) return {dd_div({1.0, 0.0}, d), 0, kSigmoidErrorBits};
  return {dd_div(e.v, d), e.scale, kSigmoidErrorBits};
}

/// 1/sqrt(x) for finite x > 0: x = m·2^(2h), m in [0.5, 2); one Newton step from y0 = RN(1/RN(sqrt(m))).
DdEnclosure rsqrt_dd(double x) {
  int e;
  double m = std::frexp(x, &e);  // [0.5, 1)
  if (e & 1) {
    m *= 2;
    e -= 1;
  }
  const double y0 = 1.0 / std::sqrt(m);
  double s, t;
  two_prod(y0, y0, s, t);
  const DD p = dd_mul(DD{s, t}, m);               // m·y0²
  const double residual = (1.0 - p.hi) - p.lo;     // 1 - p.hi exact (Sterbenz)
  const double c = (0.5 * y0) * residual;
  return {fast_two_sum(y0, c), -e / 2, kRsqrtErrorBits};
}

}  // namespace

std::optional<DdEnclosure> evaluate_dd(Elementary f, double x) {
  if (!std::isfinite(x)) return std::nullopt;
  switch (f) {
    case Elementary::Exp:
      if (std::fabs(x) < 1024) return exp_dd(x);
      return std::nullopt;
    case Elementary::Log:
      if (x > 0 && x != 1) return log_dd(x);
      return std::nullopt;
    case Elementary::Sigmoid:
      if (std::fabs(x) < 1024) return sigmoid_dd(x);
      return std::nullopt;
    case Elementary::Rsqrt:
      if (x > 0) return rsqrt_dd(x);
      return std::nullopt;
    case Elementary::Tanh:
    case Elementary::Sin:
    case Elementary::Cos:
    case Elementary::Erf: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<double> round_enclosure(const RoundingPlan& plan, Rounding mode, const DdEnclosure& e,
                                      std::uint64_t draw) {
  const double hi = e.v.hi, lo = e.v.lo;
  if (hi == 0 || !std::isfinite(hi) || !std::isfinite(lo)) return std::nullopt;
  // hi + lo lies in [m_lo, m_hi]·2^exp, m_hi < 2^118 (hi's 53 bits at bits 64..116, |lo| <= u·hi).
  const ExactParts v = pair_parts(hi, lo);
  const u128 m_lo = v.m, m_hi = v.m + (v.sticky ? 1 : 0);
  const int exp = v.exp;
  const bool neg = v.neg;
  // |f(x) - v| <= ε|f(x)| gives |f(x) - v| <= ε|v|/(1 - ε) < 2ε|v| <= 2^(1-error_bits)·m_hi·2^exp.
  const u128 delta = (m_hi >> (e.error_bits - 1)) + 1;
  const ExactParts lower{neg, m_lo - delta, exp + e.scale, false};
  const ExactParts upper{neg, m_hi + delta, exp + e.scale, false};
  const double a = round_parts(plan, mode, lower, draw);
  const double b = round_parts(plan, mode, upper, draw);
  if (std::bit_cast<std::uint64_t>(a) != std::bit_cast<std::uint64_t>(b)) return std::nullopt;
  return a;
}

std::optional<double> elementary_dd(const RoundingPlan& plan, Rounding mode, Elementary f, double x,
                                    std::uint64_t draw) {
  const auto e = evaluate_dd(f, x);
  if (!e) return std::nullopt;
  return round_enclosure(plan, mode, *e, draw);
}

}  // namespace roundoff::numerics
