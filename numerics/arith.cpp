#include "numerics/arith.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/elementary_dd.hpp"
#include "numerics/mpfr_util.hpp"

namespace roundoff::numerics {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The sign IEEE 754 (§6.3) gives an exact zero sum x + y: two zeros of the same sign keep it (x + x = x, in
/// every mode); otherwise +0, or -0 in Down.
double zero_sum(Rounding m, double a, double b) {
  if (a == 0 && b == 0 && std::signbit(a) == std::signbit(b)) return a;
  return m == Rounding::Down ? -0.0 : 0.0;
}

/// r/d nudged one binary64 ulp toward zero, so that a quotient remainder never reads as an exact midpoint.
double remainder_term(double r, double d) {
  if (r == 0) return 0.0;
  return std::nextafter(r / d, 0.0);
}

}  // namespace

double add(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw) {
  if (!std::isfinite(a) || !std::isfinite(b)) return round_to(p, m, a + b, draw);
  double s, e;
  two_sum(a, b, s, e);
  if (std::isinf(s)) {  // binary64 overflow: both operands are huge, so halving them is exact
    two_sum(a * 0.5, b * 0.5, s, e);
    return round_pair_scaled(p, m, s, e, 1, draw);
  }
  if (s == 0 && e == 0) return zero_sum(m, a, b);
  return round_pair(p, m, s, e, draw);
}

double sub(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw) { return add(p, m, a, -b, draw); }

double mul(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw) {
  if (!std::isfinite(a) || !std::isfinite(b) || a == 0 || b == 0) return round_to(p, m, a * b, draw);
  {
    double hi, lo;  // fast path: a product exact in binary64, far from its underflow and overflow
    two_prod(a, b, hi, lo);
    const double ah = std::fabs(hi);
    if (lo == 0 && ah >= 0x1p-960 && ah <= 0x1p1000) return round_to(p, m, hi, draw);
  }
  int ea, eb;
  const double ma = std::frexp(a, &ea), mb = std::frexp(b, &eb);
  double hi, lo;
  two_prod(ma, mb, hi, lo);  // exact: |hi| in [1/4, 1), no underflow
  return round_pair_scaled(p, m, hi, lo, ea + eb, draw);
}

double div(const RoundingPlan& p, Rounding m, double a, double b, std::uint64_t draw) {
  if (!std::isfinite(a) || !std::isfinite(b) || a == 0 || b == 0) return round_to(p, m, a / b, draw);
  int ea, eb;
  const double ma = std::frexp(a, &ea), mb = std::frexp(b, &eb);
  const double q = ma / mb;                  // in (1/2, 2)
  const double r = __builtin_fma(-q, mb, ma);  // exact remainder
  return round_pair_scaled(p, m, q, remainder_term(r, mb), ea - eb, draw);
}

double sqrt(const RoundingPlan& p, Rounding m, double a, std::uint64_t draw) {
  if (std::isnan(a)) return kNaN;
  if (a == 0) return round_to(p, m, a, draw);  // sqrt(±0) = ±0
  if (a < 0) return kNaN;
  if (std::isinf(a)) return round_to(p, m, a, draw);
  int ea;
  double ma = std::frexp(a, &ea);
  if (ea & 1) {
    ma *= 2;
    ea -= 1;
  }
  const double s = std::sqrt(ma);
  const double r = __builtin_fma(-s, s, ma);
  return round_pair_scaled(p, m, s, remainder_term(r, 2 * s), ea / 2, draw);
}

double fma(const RoundingPlan& p, Rounding m, double a, double b, double c, std::uint64_t draw) {
  if (m == Rounding::NearestEven && p.format == formats::fp64) {
    // binary64 under nearest-even: the hardware FMA is IEEE 754's fusedMultiplyAdd, the correctly rounded a·b + c
    // with the overflow, gradual underflow and signed-zero rules the rest of this function implements; only a NaN's
    // bits differ (round_to gives the positive quiet NaN).
    const double r = __builtin_fma(a, b, c);
    return std::isnan(r) ? kNaN : r;
  }
  if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(c)) return round_to(p, m, __builtin_fma(a, b, c), draw);
  if (a == 0 || b == 0) return add(p, m, a * b, c, draw);
  if (c == 0) {
    // The product is nonzero, so the sum is the product.
    return mul(p, m, a, b, draw);
  }
  double hi, lo;
  two_prod(a, b, hi, lo);
  if (lo == 0 && std::isfinite(hi) && std::fabs(hi) >= 0x1p-960) return add(p, m, hi, c, draw);
  // The product needs more than 53 bits (or leaves binary64): MPFR at p+2 bits, toward zero, then one rounding.
  Mpfr ma(53), mb(53), mc(53), y(rz_precision(p, m));
  mpfr_set_d(ma, a, MPFR_RNDN);
  mpfr_set_d(mb, b, MPFR_RNDN);
  mpfr_set_d(mc, c, MPFR_RNDN);
  const int t = mpfr_fma(y, ma, mb, mc, MPFR_RNDZ);
  if (mpfr_zero_p(y)) return zero_sum(m, hi, c);
  return round_from_rz(p, m, y, t != 0, draw);
}

const char* name_of(Elementary f) {
  switch (f) {
    case Elementary::Exp: return "exp";
    case Elementary::Log: return "log";
    case Elementary::Sigmoid: return "sigmoid";
    case Elementary::Tanh: return "tanh";
    case Elementary::Rsqrt: return "rsqrt";
    case Elementary::Sin: return "sin";
    case Elementary::Cos: return "cos";
    case Elementary::Erf: return "erf";
  }
  return "?";
}

namespace {

double libm_value(Elementary f, double x) {
  switch (f) {
    case Elementary::Exp: return std::exp(x);
    case Elementary::Log: return std::log(x);
    case Elementary::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Elementary::Tanh: return std::tanh(x);
    case Elementary::Rsqrt: return 1.0 / std::sqrt(x);
    case Elementary::Sin: return std::sin(x);
    case Elementary::Cos: return std::cos(x);
    case Elementary::Erf: return std::erf(x);
  }
  return kNaN;
}

/// Whether the libm check below can change a result. Skipping it changes nothing when the format has p >= 49
/// bits and binary64's exponent range over [2^-1000, 2^1000]: in a deterministic mode an accepted value is the
/// correct rounding, which the rest of the chain returns too; stochastic acceptance needs the accepted interval,
/// at least 2·(kLibmUlps + 1) = 18 binary64 ulps wide, free of format values, which lie at most 16 binary64
/// ulps apart there.
bool libm_check_decides(const RoundingPlan& p) {
  return p.format.precision < 49 || p.format.emin > -1000 || p.format.emax < 1000;
}

/// sigmoid(x) = 1/(1 + e^-x) rounded toward zero at y's precision, by Ziv's strategy. Returns the inexact flag.
bool sigmoid_rz(mpfr_ptr y, double x) {
  const mpfr_prec_t target = mpfr_get_prec(y);
  if (x == 0) {
    mpfr_set_d(y, 0.5, MPFR_RNDZ);
    return false;
  }
  if (x < -1000) {
    // sigmoid(x) < e^x < 2^-1442, below half of every format's smallest subnormal: report an inexact zero (the
    // caller's underflow branch). The loop below would never end: e^-x overflows MPFR's exponent range.
    mpfr_set_zero(y, 1);
    return true;
  }
  Mpfr xm(53);
  mpfr_set_d(xm, x, MPFR_RNDN);
  if (x > 0) {
    // For e^-x < 2^-(target+2): sigmoid in (1 - 2^-(target+2), 1), whose truncation is 1 - 2^-target.
    Mpfr t(32);
    mpfr_neg(t, xm, MPFR_RNDN);
    mpfr_exp(t, t, MPFR_RNDU);
    if (mpfr_cmp_ui_2exp(t, 1, -static_cast<mpfr_exp_t>(target) - 2) < 0) {
      mpfr_set_ui_2exp(y, 1, -static_cast<mpfr_exp_t>(target), MPFR_RNDN);
      mpfr_ui_sub(y, 1, y, MPFR_RNDN);  // exact: 1 - 2^-target has target bits
      return true;
    }
  }
  for (mpfr_prec_t w = target + 40;; w *= 2) {
    Mpfr t(w);
    mpfr_neg(t, xm, MPFR_RNDN);
    mpfr_exp(t, t, MPFR_RNDN);
    mpfr_add_ui(t, t, 1, MPFR_RNDN);
    mpfr_ui_div(t, 1, t, MPFR_RNDN);  // relative error <= 3.01·2^-w, i.e. < 2^(EXP - (w - 2))
    if (mpfr_can_round(t, w - 3, MPFR_RNDN, MPFR_RNDZ, target + 1)) {
      // sigmoid(x) for x != 0 is transcendental, hence never equal to a target-bit number.
      mpfr_set(y, t, MPFR_RNDZ);
      return true;
    }
  }
}

}  // namespace

double elementary_mpfr(const RoundingPlan& p, Rounding m, Elementary f, double x, std::uint64_t draw) {
  if (std::isnan(x)) return kNaN;
  Mpfr y(rz_precision(p, m)), xm(53);
  mpfr_set_d(xm, x, MPFR_RNDN);
  int t = 0;
  switch (f) {
    case Elementary::Exp: t = mpfr_exp(y, xm, MPFR_RNDZ); break;
    case Elementary::Log: t = mpfr_log(y, xm, MPFR_RNDZ); break;
    case Elementary::Sigmoid:
      if (std::isinf(x)) {
        mpfr_set_d(y, x > 0 ? 1.0 : 0.0, MPFR_RNDZ);
        t = 0;
      } else {
        t = sigmoid_rz(y, x) ? 1 : 0;
      }
      break;
    case Elementary::Tanh: t = mpfr_tanh(y, xm, MPFR_RNDZ); break;
    case Elementary::Rsqrt: t = mpfr_rec_sqrt(y, xm, MPFR_RNDZ); break;
    case Elementary::Sin: t = mpfr_sin(y, xm, MPFR_RNDZ); break;
    case Elementary::Cos: t = mpfr_cos(y, xm, MPFR_RNDZ); break;
    case Elementary::Erf: t = mpfr_erf(y, xm, MPFR_RNDZ); break;
  }
  if (mpfr_zero_p(y) && t != 0) {
    // Only exp and sigmoid of very negative x underflow MPFR's range; the value is a tiny positive number.
    return round_parts(p, m, ExactParts{false, 1, -100000, false}, draw);
  }
  return round_from_rz(p, m, y, t != 0, draw);
}

double elementary(const RoundingPlan& p, Rounding m, Elementary f, double x, std::uint64_t draw) {
  const double y = libm_check_decides(p) ? libm_value(f, x) : kNaN;
  const double a = std::fabs(y);
  if (std::isfinite(x) && std::isfinite(y) && a >= 0x1p-1000 && a <= 0x1p1000) {
    const double bound = a * ((kLibmUlps + 1) * 0x1p-52);
    const double lo = y - bound, hi = y + bound;
    if (m == Rounding::Stochastic) {
      const double d1 = round_to(p, Rounding::Down, lo), d2 = round_to(p, Rounding::Down, hi);
      const double u1 = round_to(p, Rounding::Up, lo), u2 = round_to(p, Rounding::Up, hi);
      if (d1 == d2 && u1 == u2 && d1 != u1) return round_to(p, m, y, draw);
    } else {
      const double r1 = round_to(p, m, lo), r2 = round_to(p, m, hi);
      if (r1 == r2 && std::signbit(r1) == std::signbit(r2)) return r1;
    }
  }
  if (const auto r = elementary_dd(p, m, f, x, draw)) return *r;
  return elementary_mpfr(p, m, f, x, draw);
}

}  // namespace roundoff::numerics
