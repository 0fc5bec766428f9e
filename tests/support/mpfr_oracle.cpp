#include "tests/support/mpfr_oracle.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace roundoff::test {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// An mpfr_t freed on scope exit.
struct Var {
  mpfr_t v;
  explicit Var(mpfr_prec_t p) { mpfr_init2(v, p); }
  ~Var() { mpfr_clear(v); }
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;
  operator mpfr_ptr() { return v; }
};

/// Per-thread scratch variables (up to 128 bits) reused across calls: mpfr_init2/mpfr_clear cost a malloc each.
struct Scratch {
  mpfr_t v[7];  ///< 0-3: the oracle's own; 4-6: operands of oracle_op/oracle_elementary
  Scratch() {
    for (auto& x : v) mpfr_init2(x, 128);
  }
  ~Scratch() {
    for (auto& x : v) mpfr_clear(x);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  /// Variable i at precision p (p <= 128: mpfr_set_prec then reuses the limbs).
  mpfr_ptr get(int i, mpfr_prec_t p) {
    mpfr_set_prec(v[i], p);
    return v[i];
  }
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/// Sets MPFR's exponent range for the lifetime of the object and restores the previous one.
struct RangeGuard {
  mpfr_exp_t old_min, old_max;
  RangeGuard(mpfr_exp_t lo, mpfr_exp_t hi) : old_min(mpfr_get_emin()), old_max(mpfr_get_emax()) {
    mpfr_set_emin(lo);
    mpfr_set_emax(hi);
  }
  ~RangeGuard() {
    mpfr_set_emin(old_min);
    mpfr_set_emax(old_max);
  }
  RangeGuard(const RangeGuard&) = delete;
  RangeGuard& operator=(const RangeGuard&) = delete;
};

int index_of(Rounding r) {
  for (int i = 0; i < 6; ++i)
    if (numerics::kDeterministicRoundings[static_cast<std::size_t>(i)] == r) return i;
  throw std::logic_error("oracle: stochastic rounding has no single result");
}

/// One evaluation in the format's exponent range with subnormals (MPFR's own rounding).
struct Eval {
  double v = 0;     ///< the rounded value on the subnormal grid (may exceed max_finite; inf on MPFR overflow)
  int t = 0;        ///< ternary after subnormalize
  bool nan = false;
  bool exact_inf = false;  ///< an exact infinite result (no overflow), e.g. x/0
};

Eval eval_in_format(const Format& f, const MpfrCompute& compute, mpfr_rnd_t rnd) {
  mpfr_ptr y = scratch().get(0, f.precision);
  Eval e;
  bool overflow = false;
  {
    RangeGuard g(f.emin - f.precision + 2, f.emax + 1);
    mpfr_clear_flags();
    e.t = compute(y, rnd);
    overflow = mpfr_overflow_p() != 0;
    e.t = mpfr_subnormalize(y, e.t, rnd);
  }
  if (mpfr_nan_p(y)) {
    e.nan = true;
    e.v = kNaN;
    return e;
  }
  e.exact_inf = mpfr_inf_p(y) && !overflow;
  e.v = mpfr_get_d(y, MPFR_RNDN);  // exact: p <= 53 and |y| < 2^(emax+1) <= 2^1024
  return e;
}

/// True when the format value v (on the subnormal grid) has an odd last significand bit.
bool odd_significand(const Format& f, double v) {
  if (v == 0 || !std::isfinite(v)) return false;
  const int e = std::max(std::ilogb(v), f.emin);
  const double m = std::ldexp(std::fabs(v), f.precision - 1 - e);  // an integer < 2^p
  return std::fmod(m, 2.0) == 1.0;
}

double overflow_value(const Format& f, Rounding mode, bool neg) {
  const double big = numerics::max_finite(f);
  bool to_max = f.saturate || f.specials == numerics::Specials::None;
  switch (mode) {
    case Rounding::NearestEven:
    case Rounding::NearestAway:
    case Rounding::Stochastic: break;
    case Rounding::TowardZero:
    case Rounding::Odd: to_max = true; break;
    case Rounding::Up: to_max = to_max || neg; break;
    case Rounding::Down: to_max = to_max || !neg; break;
  }
  if (to_max) return neg ? -big : big;
  if (f.specials == numerics::Specials::NanOnly) return kNaN;
  return neg ? -kInf : kInf;
}

double exact_infinity(const Format& f, bool neg) {
  if (f.saturate || f.specials == numerics::Specials::None) return neg ? -numerics::max_finite(f) : numerics::max_finite(f);
  if (f.specials == numerics::Specials::NanOnly) return kNaN;
  return neg ? -kInf : kInf;
}

/// Everything the per-mode rules need about one exact result.
struct Bracket {
  Eval z;            ///< RNDZ
  double a = 0;      ///< RNDA (same as z.v when exact)
  double n = 0;      ///< RNDN
  double zero_down = 0;  ///< RNDD of an exact zero (carries IEEE's sign rule)
  bool tie = false;  ///< exact value is the midpoint of z and a
  bool neg = false;
  bool tiny = false;  ///< 0 < |x| < 2^emin (only matters without subnormals)
  int vs_half = 0;   ///< sign of |x| - 2^(emin-1) when tiny
};

Bracket make_bracket(const Format& f, const MpfrCompute& compute) {
  Bracket b;
  b.z = eval_in_format(f, compute, MPFR_RNDZ);
  if (b.z.nan || b.z.exact_inf) return b;
  b.neg = std::signbit(b.z.v);
  if (b.z.t == 0) {
    b.a = b.n = b.z.v;
    if (b.z.v == 0) b.zero_down = eval_in_format(f, compute, MPFR_RNDD).v;
  } else {
    b.a = eval_in_format(f, compute, MPFR_RNDA).v;
    b.n = eval_in_format(f, compute, MPFR_RNDN).v;
    // Tie test: midpoints have at most p + 1 bits, so an exact evaluation at p + 2 bits decides it.
    mpfr_ptr mid = scratch().get(1, f.precision + 8);
    mpfr_ptr y = scratch().get(2, f.precision + 2);
    mpfr_ptr up = scratch().get(3, f.precision + 8);
    mpfr_set_d(mid, b.z.v, MPFR_RNDN);
    if (std::isinf(b.a)) {
      mpfr_set_ui_2exp(up, 1, f.emax + 1, MPFR_RNDN);
      if (b.neg) mpfr_neg(up, up, MPFR_RNDN);
    } else {
      mpfr_set_d(up, b.a, MPFR_RNDN);
    }
    mpfr_add(mid, mid, up, MPFR_RNDN);  // exact
    mpfr_div_2ui(mid, mid, 1, MPFR_RNDN);
    const int t = compute(y, MPFR_RNDN);
    b.tie = t == 0 && mpfr_equal_p(y, mid);
  }
  const double min_normal = numerics::min_normal(f);
  const double az = std::fabs(b.z.v);
  b.tiny = az < min_normal && (az != 0 || b.z.t != 0);
  if (b.tiny) {
    const double half = min_normal / 2;
    if (az < half) b.vs_half = -1;
    else if (az > half) b.vs_half = 1;
    else b.vs_half = b.z.t != 0 ? 1 : 0;
  }
  return b;
}

double apply_contract(const Format& f, Rounding mode, const Bracket& b, double candidate) {
  if (!f.subnormals && b.tiny) {
    bool away = false;
    switch (mode) {
      case Rounding::NearestEven: away = b.vs_half > 0; break;
      case Rounding::NearestAway: away = b.vs_half >= 0; break;
      case Rounding::TowardZero: away = false; break;
      case Rounding::Up: away = !b.neg; break;
      case Rounding::Down: away = b.neg; break;
      case Rounding::Odd: away = true; break;
      case Rounding::Stochastic: throw std::logic_error("apply_contract: stochastic");
    }
    const double mag = away ? numerics::min_normal(f) : 0.0;
    return b.neg ? -mag : mag;
  }
  if (std::fabs(candidate) > numerics::max_finite(f)) return overflow_value(f, mode, b.neg);
  return candidate;
}

double candidate_for(const Bracket& b, const Format& f, Rounding mode) {
  const bool exact = b.z.t == 0;
  switch (mode) {
    case Rounding::NearestEven: return b.n;
    case Rounding::NearestAway: return b.tie ? b.a : b.n;
    case Rounding::TowardZero: return b.z.v;
    case Rounding::Up: return b.neg ? b.z.v : b.a;
    case Rounding::Down:
      if (exact && b.z.v == 0) return b.zero_down;
      return b.neg ? b.a : b.z.v;
    case Rounding::Odd: return exact || odd_significand(f, b.z.v) ? b.z.v : b.a;
    case Rounding::Stochastic: break;
  }
  throw std::logic_error("candidate_for: stochastic");
}

OracleResults from_bracket(const Format& f, const Bracket& b) {
  OracleResults r;
  if (b.z.nan || b.z.exact_inf) {
    const double v = b.z.nan ? kNaN : exact_infinity(f, std::signbit(b.z.v));
    for (double& m : r.mode) m = v;
    r.down = r.up = v;
    r.exact = true;
    return r;
  }
  for (const Rounding m : numerics::kDeterministicRoundings)
    r.mode[index_of(m)] = apply_contract(f, m, b, candidate_for(b, f, m));
  r.exact = b.z.t == 0 && !(b.tiny && !f.subnormals) && std::fabs(b.z.v) <= numerics::max_finite(f);
  // Stochastic candidates: toward zero and away from zero; overflow as in the nearest modes.
  if (!f.subnormals && b.tiny) {
    r.down = b.neg ? -0.0 : 0.0;
    r.up = b.neg ? -numerics::min_normal(f) : numerics::min_normal(f);
  } else {
    auto finish = [&](double c) {
      return std::fabs(c) > numerics::max_finite(f) ? overflow_value(f, Rounding::Stochastic, b.neg) : c;
    };
    r.down = finish(b.z.v);
    r.up = finish(b.a);
  }
  return r;
}

}  // namespace

double OracleResults::value(Rounding r) const { return mode[index_of(r)]; }

OracleResults oracle(const Format& f, const MpfrCompute& compute) { return from_bracket(f, make_bracket(f, compute)); }

double oracle(const Format& f, Rounding mode, const MpfrCompute& compute) { return oracle(f, compute).value(mode); }

namespace {

MpfrCompute op_compute(Op op, mpfr_ptr a, mpfr_ptr b, mpfr_ptr c, double da) {
  switch (op) {
    case Op::Convert: return [da](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_set_d(y, da, r); };
    case Op::Add: return [a, b](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_add(y, a, b, r); };
    case Op::Sub: return [a, b](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_sub(y, a, b, r); };
    case Op::Mul: return [a, b](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_mul(y, a, b, r); };
    case Op::Div: return [a, b](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_div(y, a, b, r); };
    case Op::Fma: return [a, b, c](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_fma(y, a, b, c, r); };
    case Op::Sqrt: return [a](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_sqrt(y, a, r); };
  }
  throw std::logic_error("op_compute");
}

MpfrCompute elementary_compute(Elementary fn, mpfr_ptr x) {
  switch (fn) {
    case Elementary::Exp: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_exp(y, x, r); };
    case Elementary::Log: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_log(y, x, r); };
    case Elementary::Sigmoid: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_sigmoid(y, x, r); };
    case Elementary::Tanh: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_tanh(y, x, r); };
    case Elementary::Rsqrt: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_rec_sqrt(y, x, r); };
    case Elementary::Sin: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_sin(y, x, r); };
    case Elementary::Cos: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_cos(y, x, r); };
    case Elementary::Erf: return [x](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_erf(y, x, r); };
  }
  throw std::logic_error("elementary_compute");
}

}  // namespace

OracleResults oracle_op(const Format& f, Op op, double a, double b, double c) {
  mpfr_ptr ma = scratch().get(4, 53), mb = scratch().get(5, 53), mc = scratch().get(6, 53);
  mpfr_set_d(ma, a, MPFR_RNDN);
  mpfr_set_d(mb, b, MPFR_RNDN);
  mpfr_set_d(mc, c, MPFR_RNDN);
  return oracle(f, op_compute(op, ma, mb, mc, a));
}

OracleResults oracle_elementary(const Format& f, Elementary fn, double x) {
  mpfr_ptr mx = scratch().get(4, 53);
  mpfr_set_d(mx, x, MPFR_RNDN);
  return oracle(f, elementary_compute(fn, mx));
}

OracleResults oracle_parse(const Format& f, const std::string& text) {
  return oracle(f, [&text](mpfr_ptr y, mpfr_rnd_t r) { return mpfr_strtofr(y, text.c_str(), nullptr, 0, r); });
}

StochasticOracle stochastic_oracle_op(const Format& f, Op op, double a, double b) {
  Var ma(53), mb(53), mc(53);
  mpfr_set_d(ma, a, MPFR_RNDN);
  mpfr_set_d(mb, b, MPFR_RNDN);
  mpfr_set_d(mc, 0.0, MPFR_RNDN);
  const MpfrCompute compute = op_compute(op, ma, mb, mc, a);
  const Bracket br = make_bracket(f, compute);
  const OracleResults res = from_bracket(f, br);
  StochasticOracle s{res.down, res.up, 0.0};
  const bool nosub_gap = br.tiny && !f.subnormals;
  if (br.z.nan || br.z.exact_inf || (br.z.t == 0 && !nosub_gap)) return s;  // nothing to draw
  // p = (|x| - |lo|) / (|hi| - |lo|) with hi the unbounded-exponent neighbour away from zero.
  Var x(4096), lo(64), hi(64), num(4096), den(64), p(64);
  compute(x, MPFR_RNDN);  // exact for add, sub, mul and conversion of doubles
  mpfr_abs(x, x, MPFR_RNDN);
  if (nosub_gap) {
    mpfr_set_zero(lo, 1);
    mpfr_set_d(hi, numerics::min_normal(f), MPFR_RNDN);
  } else {
    mpfr_set_d(lo, std::fabs(br.z.v), MPFR_RNDN);
    if (std::isinf(br.a)) mpfr_set_ui_2exp(hi, 1, f.emax + 1, MPFR_RNDN);
    else mpfr_set_d(hi, std::fabs(br.a), MPFR_RNDN);
  }
  mpfr_sub(num, x, lo, MPFR_RNDN);
  mpfr_sub(den, hi, lo, MPFR_RNDN);
  mpfr_div(p, num, den, MPFR_RNDN);
  s.p_up = mpfr_get_d(p, MPFR_RNDN);
  return s;
}

int mpfr_sigmoid(mpfr_ptr rop, mpfr_srcptr x, mpfr_rnd_t rnd) {
  if (mpfr_nan_p(x)) {
    mpfr_set_nan(rop);
    return 0;
  }
  if (mpfr_inf_p(x)) {
    if (mpfr_sgn(x) > 0) return mpfr_set_ui(rop, 1, rnd);
    mpfr_set_zero(rop, 1);
    return 0;
  }
  if (mpfr_zero_p(x)) return mpfr_set_d(rop, 0.5, rnd);
  const mpfr_prec_t prec = mpfr_get_prec(rop);
  int t = 0;
  {
    RangeGuard wide(mpfr_get_emin_min(), mpfr_get_emax_max());
    if (mpfr_cmp_si(x, -2000) < 0 || mpfr_cmp_si(x, 2000) > 0) {
      // |sigmoid(x) - {0 or 1}| < e^-2000 < 2^-2885: the stand-in 2^-3000 (or 1 - 2^-3000) lies in the same open
      // interval between consecutive numbers of 54 bits or fewer (and below half of 2^-1074), so it rounds
      // identically in every mode at every precision <= 53.
      Var s(3001);
      mpfr_set_ui_2exp(s, 1, -3000, MPFR_RNDN);
      if (mpfr_sgn(x) > 0) mpfr_ui_sub(s, 1, s, MPFR_RNDN);  // exact at 3001 bits
      t = mpfr_set(rop, s, rnd);
    } else {
      for (mpfr_prec_t w = prec + 32;; w *= 2) {
        Var nx(53), el(w), eh(w), lo(w), hi(w);
        mpfr_neg(nx, x, MPFR_RNDN);
        mpfr_exp(el, nx, MPFR_RNDD);
        mpfr_exp(eh, nx, MPFR_RNDU);
        mpfr_add_ui(el, el, 1, MPFR_RNDD);
        mpfr_add_ui(eh, eh, 1, MPFR_RNDU);
        mpfr_ui_div(lo, 1, eh, MPFR_RNDD);  // lo <= sigmoid(x) <= hi, strictly: sigmoid(x != 0) is irrational
        mpfr_ui_div(hi, 1, el, MPFR_RNDU);
        Var a(prec), b(prec);
        mpfr_set(a, lo, rnd);
        mpfr_set(b, hi, rnd);
        if (!mpfr_equal_p(a, b)) continue;
        if (mpfr_cmp(a, hi) >= 0) t = 1;
        else if (mpfr_cmp(a, lo) <= 0) t = -1;
        else continue;  // the rounded value lies inside the bracket: its side of sigmoid(x) is unknown yet
        mpfr_set(rop, a, MPFR_RNDN);
        break;
      }
    }
  }
  return mpfr_check_range(rop, t, rnd);
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace roundoff::test
