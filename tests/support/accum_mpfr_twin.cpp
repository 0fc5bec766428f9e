#include "tests/support/accum_mpfr_twin.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace roundoff::test {

using numerics::Accumulation;
using numerics::Format;
using numerics::Order;
using numerics::Rounding;
using numerics::Specials;
using numerics::StochasticBits;

namespace {

constexpr mpfr_prec_t kExact = 2400;  // any sum or product of binary64 values is exact at this precision
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// An mpfr_t at kExact bits.
struct Big {
  Big() { mpfr_init2(v, kExact); }
  ~Big() { mpfr_clear(v); }
  Big(const Big&) = delete;
  Big& operator=(const Big&) = delete;
  mpfr_t v;
};

/// Sets and restores MPFR's exponent range.
struct Range {
  Range(mpfr_exp_t lo, mpfr_exp_t hi) : old_lo(mpfr_get_emin()), old_hi(mpfr_get_emax()) {
    mpfr_set_emin(lo);
    mpfr_set_emax(hi);
  }
  ~Range() {
    mpfr_set_emin(old_lo);
    mpfr_set_emax(old_hi);
  }
  mpfr_exp_t old_lo, old_hi;
};

double fmt_max(const Format& f) {
  const int drop = f.specials == Specials::NanOnly ? 2 : 1;
  return (2.0 - std::ldexp(1.0, drop - f.precision)) * std::ldexp(1.0, f.emax);
}

/// What the format gives for an exact infinity.
double special_inf(const Format& f, bool neg) {
  if (f.saturate || f.specials == Specials::None) return neg ? -fmt_max(f) : fmt_max(f);
  if (f.specials == Specials::NanOnly) return kNaN;
  return neg ? -kInf : kInf;
}

/// What the format gives when the unbounded rounding exceeds max_finite (numerics/round.hpp contract).
double overflow_result(const Format& f, Rounding mode, bool neg) {
  bool to_max = f.saturate || f.specials == Specials::None;
  switch (mode) {
    case Rounding::NearestEven:
    case Rounding::NearestAway:
    case Rounding::Stochastic: break;
    case Rounding::TowardZero:
    case Rounding::Odd: to_max = true; break;
    case Rounding::Up: to_max = to_max || neg; break;
    case Rounding::Down: to_max = to_max || !neg; break;
  }
  if (to_max) return neg ? -fmt_max(f) : fmt_max(f);
  return special_inf(f, neg);
}

/// v rounded to f with an MPFR mode (RNDN/Z/U/D/A), subnormals by mpfr_subnormalize, exponent unbounded above.
/// Values below the smallest subnormal (outside the narrowed exponent range) are rounded by hand: to 0 or to
/// the smallest subnormal 2^(emin-p+1) by the mode, nearest sending the exact midpoint 2^(emin-p) to 0 (even).
void round_mpfr(const Format& f, mpfr_srcptr v, mpfr_rnd_t rnd, Big& out) {
  const mpfr_exp_t lo = f.emin - f.precision + 2;  // MPFR exponent of the smallest subnormal
  if (mpfr_get_exp(v) < lo) {
    // |v| < 2^(emin-p+1).
    const bool neg = mpfr_signbit(v) != 0;
    Big half;
    mpfr_set_ui_2exp(half.v, 1, f.emin - f.precision, MPFR_RNDN);
    bool up = false;
    switch (rnd) {
      case MPFR_RNDN: up = mpfr_cmpabs(v, half.v) > 0; break;
      case MPFR_RNDZ: up = false; break;
      case MPFR_RNDU: up = !neg; break;
      case MPFR_RNDD: up = neg; break;
      case MPFR_RNDA: up = true; break;
      default: throw std::logic_error("round_mpfr: mode");
    }
    if (up) mpfr_set_ui_2exp(out.v, 1, f.emin - f.precision + 1, MPFR_RNDN);
    else mpfr_set_zero(out.v, 1);
    if (neg) mpfr_neg(out.v, out.v, MPFR_RNDN);
    return;
  }
  Range r(lo, mpfr_get_emax_max());
  mpfr_t y;
  mpfr_init2(y, f.precision);
  const int t = mpfr_set(y, v, rnd);
  mpfr_subnormalize(y, t, rnd);
  mpfr_set(out.v, y, MPFR_RNDN);
  mpfr_clear(y);
}

/// The last significand bit of the format value z (nonzero) at its quantum.
bool last_bit_odd(const Format& f, mpfr_srcptr z) {
  const long e = std::max<long>(mpfr_get_exp(z) - 1, f.emin);
  Big t;
  mpfr_mul_2si(t.v, z, -(e - f.precision + 1), MPFR_RNDN);
  mpz_t m;
  mpz_init(m);
  mpfr_get_z(m, t.v, MPFR_RNDN);
  const bool odd = mpz_odd_p(m) != 0;
  mpz_clear(m);
  return odd;
}

}  // namespace

double twin_round(const Format& f, Rounding mode, mpfr_srcptr v, std::uint64_t draw, bool* overflow) {
  if (!f.subnormals) throw std::invalid_argument("twin_round: formats without subnormals are not modelled");
  if (overflow) *overflow = false;
  if (mpfr_nan_p(v)) return kNaN;
  if (mpfr_inf_p(v)) return special_inf(f, mpfr_signbit(v) != 0);
  if (mpfr_zero_p(v)) return mpfr_signbit(v) ? -0.0 : 0.0;
  const bool neg = mpfr_signbit(v) != 0;
  Big res;
  switch (mode) {
    case Rounding::NearestEven: round_mpfr(f, v, MPFR_RNDN, res); break;
    case Rounding::TowardZero: round_mpfr(f, v, MPFR_RNDZ, res); break;
    case Rounding::Up: round_mpfr(f, v, MPFR_RNDU, res); break;
    case Rounding::Down: round_mpfr(f, v, MPFR_RNDD, res); break;
    case Rounding::NearestAway:
    case Rounding::Odd:
    case Rounding::Stochastic: {
      Big z, a;
      round_mpfr(f, v, MPFR_RNDZ, z);
      round_mpfr(f, v, MPFR_RNDA, a);
      if (mpfr_cmp(z.v, v) == 0) {
        mpfr_set(res.v, z.v, MPFR_RNDN);  // exact
        break;
      }
      if (mode == Rounding::NearestAway) {
        Big mid;
        mpfr_add(mid.v, z.v, a.v, MPFR_RNDN);
        mpfr_div_2ui(mid.v, mid.v, 1, MPFR_RNDN);
        const int c = mpfr_cmpabs(v, mid.v);
        mpfr_set(res.v, c >= 0 ? a.v : z.v, MPFR_RNDN);
      } else if (mode == Rounding::Odd) {
        mpfr_set(res.v, (!mpfr_zero_p(z.v) && last_bit_odd(f, z.v)) ? z.v : a.v, MPFR_RNDN);
      } else {
        // frac = (|v| - |z|) / (|a| - |z|), exactly; F = floor(frac·2^64).
        Big num, gap;
        mpfr_sub(num.v, v, z.v, MPFR_RNDN);
        mpfr_sub(gap.v, a.v, z.v, MPFR_RNDN);
        mpfr_abs(num.v, num.v, MPFR_RNDN);
        mpfr_abs(gap.v, gap.v, MPFR_RNDN);
        Big frac;
        mpfr_div(frac.v, num.v, gap.v, MPFR_RNDZ);  // gap is a power of two: exact
        mpfr_mul_2ui(frac.v, frac.v, 64, MPFR_RNDN);
        Big whole;
        mpfr_floor(whole.v, frac.v);
        const auto F = static_cast<std::uint64_t>(mpfr_get_ui(whole.v, MPFR_RNDZ));
        const bool rest = !mpfr_equal_p(whole.v, frac.v);
        const bool up = draw < F || (rest && draw == F);
        mpfr_set(res.v, up ? a.v : z.v, MPFR_RNDN);
      }
      break;
    }
  }
  const double m = fmt_max(f);
  if (mpfr_cmp_d(res.v, m) > 0 || mpfr_cmp_d(res.v, -m) < 0) {
    if (overflow) *overflow = true;
    return overflow_result(f, mode, neg);
  }
  const double d = mpfr_get_d(res.v, MPFR_RNDN);
  if (d == 0) return neg ? -0.0 : 0.0;
  return d;
}

namespace {

/// The twin of one reduction: each rounding takes the next draw index, as accumulate.hpp specifies.
class Twin {
 public:
  Twin(const Accumulation& a, std::span<const double> x, std::span<const double> y, bool dot, StochasticBits bits)
      : a_(a), x_(x), y_(y), dot_(dot), n_(dot ? std::min(x.size(), y.size()) : x.size()), bits_(bits) {}

  TwinResult run(bool has_init, double init) {
    double v = 0;
    if (a_.splitk.count > 0) v = split(has_init, init);
    else if (a_.adder.group > 0) v = adder(has_init, init);
    else if (a_.tile.size > 0) v = tiled(has_init, init);
    else {
      switch (a_.order) {
        case Order::Sequential:
        case Order::Reverse:
          if (a_.promote_every > 0) v = chunked(static_cast<std::size_t>(a_.promote_every), a_.promote_format,
                                                has_init, init);
          else v = seq_range(0, n_, has_init, init);
          break;
        case Order::Pairwise:
          if (n_ == 0) v = has_init ? init : 0.0;
          else {
            const double t = tree(0, n_);
            v = has_init ? op_add(a_.format, init, t) : t;
          }
          break;
        case Order::Blocked: v = chunked(static_cast<std::size_t>(a_.block), a_.outer_format, has_init, init); break;
        case Order::Kahan: v = kahan(has_init, init); break;
      }
    }
    return TwinResult{v, overflows_};
  }

 private:
  std::uint64_t next_draw() {
    const std::uint64_t k = step_++;
    const bool stochastic = a_.rounding == Rounding::Stochastic || a_.splitk.rounding == Rounding::Stochastic;
    return stochastic ? bits_.draw(k) : 0;
  }
  mpfr_rnd_t zero_rnd() const { return zero_rnd(a_.rounding); }
  /// The sign of an exact zero sum (x + (−x)): −0 when rounding down, else +0 (IEEE 754 §6.3).
  static mpfr_rnd_t zero_rnd(Rounding mode) { return mode == Rounding::Down ? MPFR_RNDD : MPFR_RNDN; }

  double finish(const Format& f, const Big& exact, bool finite_operands) {
    return finish(f, a_.rounding, exact, finite_operands);
  }
  double finish(const Format& f, Rounding mode, const Big& exact, bool finite_operands) {
    bool ov = false;
    const double r = twin_round(f, mode, exact.v, next_draw(), &ov);
    if (ov && finite_operands) ++overflows_;
    return r;
  }
  double op_round(const Format& f, double v) { return op_round(f, a_.rounding, v); }
  double op_round(const Format& f, Rounding mode, double v) {
    Big e;
    mpfr_set_d(e.v, v, MPFR_RNDN);
    return finish(f, mode, e, std::isfinite(v));
  }
  double op_add(const Format& f, double u, double v) { return op_add(f, a_.rounding, u, v); }
  double op_add(const Format& f, Rounding mode, double u, double v) {
    Big e, a, b;
    mpfr_set_d(a.v, u, MPFR_RNDN);
    mpfr_set_d(b.v, v, MPFR_RNDN);
    mpfr_add(e.v, a.v, b.v, zero_rnd(mode));
    return finish(f, mode, e, std::isfinite(u) && std::isfinite(v));
  }
  double op_mul(const Format& f, double u, double v) {
    Big e, a, b;
    mpfr_set_d(a.v, u, MPFR_RNDN);
    mpfr_set_d(b.v, v, MPFR_RNDN);
    mpfr_mul(e.v, a.v, b.v, MPFR_RNDN);
    return finish(f, e, std::isfinite(u) && std::isfinite(v));
  }
  double op_fma(const Format& f, double u, double v, double w) {
    Big e, a, b, c;
    mpfr_set_d(a.v, u, MPFR_RNDN);
    mpfr_set_d(b.v, v, MPFR_RNDN);
    mpfr_set_d(c.v, w, MPFR_RNDN);
    mpfr_fma(e.v, a.v, b.v, c.v, zero_rnd());
    return finish(f, e, std::isfinite(u) && std::isfinite(v) && std::isfinite(w));
  }

  /// The subnormal flush (accumulate.hpp `flush`): v becomes a zero of its sign when 0 < |v| < 2^emin, decided
  /// by MPFR on the exact values.
  static double flush_below(double v, int emin) {
    if (!std::isfinite(v) || v == 0) return v;
    Big x, bound;
    mpfr_set_d(x.v, v, MPFR_RNDN);
    mpfr_set_ui_2exp(bound.v, 1, emin, MPFR_RNDN);
    if (mpfr_cmpabs(x.v, bound.v) >= 0) return v;
    return mpfr_signbit(x.v) ? -0.0 : 0.0;
  }
  /// A rounded partial sum of the accumulator under flush.step.
  double step_flush(double s) const {
    if (!a_.flush.step) return s;
    return flush_below(s, a_.flush.step_format ? a_.flush.step_format->emin : a_.format.emin);
  }

  std::size_t at(std::size_t k) const { return a_.order == Order::Reverse ? n_ - 1 - k : k; }
  double xv(std::size_t i) const { return x_[i]; }
  double yv(std::size_t i) const { return dot_ ? y_[i] : 1.0; }

  double rounded_product(std::size_t i) { return op_mul(a_.product_format, xv(i), yv(i)); }
  double start(std::size_t i) {
    if (!dot_) return op_round(a_.format, xv(i));
    if (a_.fused) return op_mul(a_.format, xv(i), yv(i));
    const double t = rounded_product(i);
    return op_round(a_.format, t);
  }
  double step(double s, std::size_t i) {
    if (!dot_) return op_add(a_.format, s, xv(i));
    if (a_.fused) return op_fma(a_.format, xv(i), yv(i), s);
    const double t = rounded_product(i);
    return op_add(a_.format, s, t);
  }

  double seq_range(std::size_t k0, std::size_t k1, bool has_init, double init) {
    if (k0 == k1) return has_init ? init : 0.0;
    std::size_t k = k0;
    double s = has_init ? init : step_flush(start(at(k++)));
    for (; k < k1; ++k) s = step_flush(step(s, at(k)));
    return s;
  }

  double chunked(std::size_t every, const Format& total_format, bool has_init, double init) {
    double total = init;
    bool have = has_init;
    for (std::size_t c = 0; c < n_; c += every) {
      const double part = seq_range(c, std::min(n_, c + every), false, 0.0);
      total = have ? op_add(total_format, total, part) : op_round(total_format, part);
      have = true;
    }
    return have ? total : 0.0;
  }

  double tree(std::size_t lo, std::size_t count) {
    if (count == 1) return start(lo);
    const std::size_t h = count / 2;
    const double l = tree(lo, h);
    const double r = tree(lo + h, count - h);
    return op_add(a_.format, l, r);
  }

  double kahan(bool has_init, double init) {
    if (n_ == 0) return has_init ? init : 0.0;
    std::size_t k = 0;
    double s = has_init ? init : start(at(k++));
    double c = 0;
    for (; k < n_; ++k) {
      const std::size_t i = at(k);
      double y;
      if (!dot_) y = op_add(a_.format, xv(i), -c);
      else if (a_.fused) y = op_fma(a_.format, xv(i), yv(i), -c);
      else {
        const double t = rounded_product(i);
        y = op_add(a_.format, t, -c);
      }
      const double t = op_add(a_.format, s, y);
      const double d = op_add(a_.format, t, -s);
      c = op_add(a_.format, d, -y);
      s = t;
    }
    return s;
  }

  /// One multi-term adder step over processing positions [k0, k1), executed on exact MPFR values.
  /// Non-finite terms of a multi-term step, kept apart from the exact values.
  struct Nonfinite {
    bool any = false, finite_operands = true;
    double sum = 0.0;
    void add(double t) {
      any = true;
      finite_operands = false;
      sum += t;
    }
  };

  /// The exact nonzero terms at processing positions [k0, k1), appended to vals[nv...]; non-finite ones to nf.
  /// anchors (when given) receives each collected value's alignment exponent: its leading-bit exponent, or for a
  /// fused product under anchor=exp-sum the sum of its factors' exponents, each at least adder.input_emin.
  void collect(std::size_t k0, std::size_t k1, std::vector<Big>& vals, std::size_t& nv, Nonfinite& nf,
               std::vector<long>* anchors = nullptr) {
    std::vector<std::size_t> positions;
    for (std::size_t k = k0; k < k1; ++k) positions.push_back(k);
    collect(positions, vals, nv, nf, anchors);
  }
  /// The same over an explicit list of processing positions.
  void collect(const std::vector<std::size_t>& positions, std::vector<Big>& vals, std::size_t& nv, Nonfinite& nf,
               std::vector<long>* anchors = nullptr) {
    for (const std::size_t k : positions) {
      const std::size_t i = at(k);
      const double x = xv(i), y = yv(i);
      if (dot_ && a_.fused) {
        if (!std::isfinite(x) || !std::isfinite(y)) {
          nf.add(x * y);
        } else if (x != 0 && y != 0) {
          Big bx, by;
          mpfr_set_d(bx.v, x, MPFR_RNDN);
          mpfr_set_d(by.v, y, MPFR_RNDN);
          mpfr_mul(vals[nv].v, bx.v, by.v, MPFR_RNDN);
          if (anchors) {
            long anchor = mpfr_get_exp(vals[nv].v) - 1;
            if (a_.adder.anchor == numerics::AdderAnchor::ExponentSum) {
              int fx = 0, fy = 0;
              std::frexp(x, &fx);
              std::frexp(y, &fy);
              anchor = std::max<long>(fx - 1, a_.adder.input_emin) + std::max<long>(fy - 1, a_.adder.input_emin);
            }
            anchors->push_back(anchor);
          }
          ++nv;
        }
        continue;
      }
      double t = x;
      if (dot_) {
        if (!std::isfinite(x) || !std::isfinite(y)) nf.finite_operands = false;
        t = rounded_product(i);
      }
      if (!std::isfinite(t)) {
        nf.add(t);
      } else if (t != 0) {
        mpfr_set_d(vals[nv].v, t, MPFR_RNDN);
        if (anchors) anchors->push_back(mpfr_get_exp(vals[nv].v) - 1);
        ++nv;
      }
    }
  }

  double adder_step(double s, std::size_t k0, std::size_t k1) {
    std::vector<std::size_t> positions;
    for (std::size_t k = k0; k < k1; ++k) positions.push_back(k);
    return adder_step(s, positions);
  }
  /// One multi-term step: s and the terms at the given processing positions.
  double adder_step(double s, const std::vector<std::size_t>& positions) {
    const auto& ad = a_.adder;
    std::vector<Big> vals(positions.size() + 1);
    std::size_t nv = 0;
    Nonfinite nf;
    std::vector<long> anchors;
    if (!std::isfinite(s)) {
      nf.add(s);
    } else if (s != 0) {
      mpfr_set_d(vals[nv].v, s, MPFR_RNDN);
      anchors.push_back(mpfr_get_exp(vals[nv].v) - 1);
      ++nv;
    }
    collect(positions, vals, nv, nf, &anchors);
    const bool special = nf.any, finite_operands = nf.finite_operands;
    const double special_sum = nf.sum;
    if (special) {
      Big e;
      mpfr_set_d(e.v, special_sum, MPFR_RNDN);
      return twin_round(a_.format, ad.normalize, e.v, 0);
    }
    if (nv == 0) return 0.0;
    long top = std::numeric_limits<long>::min();
    for (std::size_t k = 0; k < nv; ++k) top = std::max<long>(top, anchors[k]);
    long q = top - (a_.format.precision - 1) - ad.extra_bits;
    Big sum;
    mpfr_set_zero(sum.v, 1);
    for (std::size_t k = 0; k < nv; ++k) {
      Big t;
      mpfr_mul_2si(t.v, vals[k].v, -q, MPFR_RNDN);
      if (ad.align == Rounding::TowardZero) mpfr_trunc(t.v, t.v);
      else mpfr_rint(t.v, t.v, MPFR_RNDN);
      mpfr_add(sum.v, sum.v, t.v, MPFR_RNDN);
    }
    if (mpfr_zero_p(sum.v)) return 0.0;
    // sum is an integer; its bit length is its MPFR exponent.
    const long width = a_.format.precision + ad.extra_bits + ad.carry_bits;
    if (mpfr_get_exp(sum.v) > width)
      mpfr_prec_round(sum.v, width, ad.align == Rounding::TowardZero ? MPFR_RNDZ : MPFR_RNDN);
    mpfr_prec_round(sum.v, kExact, MPFR_RNDN);
    mpfr_mul_2si(sum.v, sum.v, q, MPFR_RNDN);
    bool ov = false;
    const double r = twin_round(a_.format, ad.normalize, sum.v, 0, &ov);
    if (ov && finite_operands) ++overflows_;
    if (ad.edges == numerics::AdderEdges::InfPositiveZero) {
      if (r == 0) return 0.0;
      // |sum| >= 2^(emax+1): MPFR's exponent e puts |sum| in [2^(e-1), 2^e)
      if (mpfr_get_exp(sum.v) - 1 >= a_.format.emax + 1)
        return mpfr_signbit(sum.v) ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    }
    return r;
  }

  /// One tile over processing positions [k0, k1): the exact MPFR sum of its terms, rounded once to the tile
  /// format. Every binary64 product is a multiple of 2^-2148 below 2^2048, so kTile bits hold any tile sum.
  double tile_value(std::size_t k0, std::size_t k1) {
    constexpr mpfr_prec_t kTile = 4600;
    const auto& ts = a_.tile;
    std::vector<Big> vals(k1 - k0);
    std::size_t nv = 0;
    Nonfinite nf;
    collect(k0, k1, vals, nv, nf);
    if (nf.any) {
      Big e;
      mpfr_set_d(e.v, nf.sum, MPFR_RNDN);
      return twin_round(ts.format, ts.rounding, e.v, 0);
    }
    mpfr_t sum;
    mpfr_init2(sum, kTile);
    mpfr_set_zero(sum, 1);
    for (std::size_t k = 0; k < nv; ++k)
      if (mpfr_add(sum, sum, vals[k].v, MPFR_RNDN) != 0) throw std::logic_error("twin tile: inexact sum");
    double r = 0.0;
    if (!mpfr_zero_p(sum)) {
      bool ov = false;
      r = twin_round(ts.format, ts.rounding, sum, 0, &ov);
      if (ov && nf.finite_operands) ++overflows_;
    }
    mpfr_clear(sum);
    return r;
  }

  double tiled(bool has_init, double init) {
    const auto g = static_cast<std::size_t>(a_.tile.size);
    double s = init;
    bool have = has_init;
    for (std::size_t k = 0; k < n_; k += g) {
      double t = tile_value(k, std::min(n_, k + g));
      if (a_.flush.tile) t = flush_below(t, a_.tile.format.emin);
      s = step_flush(have ? op_add(a_.format, s, t) : op_round(a_.format, t));
      have = true;
    }
    return have ? s : 0.0;
  }

  /// Split-K: chunks of L = G·ceil(n/(G·S)) terms, each run by a twin of the accumulation without splitk over
  /// those terms alone (continuing this twin's draw indices), their results summed in chunk order in the outer
  /// format with splitk.rounding, starting from init when given.
  double split(bool has_init, double init) {
    const auto S = static_cast<std::size_t>(a_.splitk.count), G = static_cast<std::size_t>(a_.splitk.granule);
    const std::size_t len = G * ((n_ + G * S - 1) / (G * S));
    Accumulation whole = a_;
    whole.splitk = numerics::SplitK{};
    double total = init;
    bool have = has_init;
    for (std::size_t c = 0; c < n_; c += len) {
      const std::size_t m = std::min(len, n_ - c);
      Twin chunk(whole, x_.subspan(c, m), dot_ ? y_.subspan(c, m) : std::span<const double>{}, dot_, bits_);
      chunk.step_ = step_;
      const TwinResult r = chunk.run(false, 0.0);
      step_ = chunk.step_;
      overflows_ += r.overflows;
      total = have ? op_add(a_.outer_format, a_.splitk.rounding, total, r.value)
                   : op_round(a_.outer_format, a_.splitk.rounding, r.value);
      have = true;
    }
    return have ? total : 0.0;
  }

  /// The multi-term steps over processing positions [c, end), starting from s. feed=even-pairs-first: blocks of
  /// 2g positions, each split into the positions whose pair index within the block is even, then odd.
  double adder_chunk(double s, std::size_t c, std::size_t end) {
    const auto g = static_cast<std::size_t>(a_.adder.group);
    if (a_.adder.feed == numerics::AdderFeed::InOrder) {
      for (std::size_t k = c; k < end; k += g) s = adder_step(s, k, std::min(end, k + g));
      return s;
    }
    for (std::size_t b = c; b < end; b += 2 * g) {
      std::vector<std::size_t> even, odd;
      for (std::size_t k = b; k < std::min(end, b + 2 * g); ++k) (((k - b) / 2) % 2 == 0 ? even : odd).push_back(k);
      s = adder_step(s, even);
      if (!odd.empty()) s = adder_step(s, odd);
    }
    return s;
  }

  double adder(bool has_init, double init) {
    const bool promote = a_.promote_every > 0;
    if (n_ == 0) return has_init ? init : 0.0;
    if (!promote) return adder_chunk(has_init ? init : 0.0, 0, n_);
    double total = init;
    bool have = has_init;
    const auto every = static_cast<std::size_t>(a_.promote_every);
    for (std::size_t c = 0; c < n_; c += every) {
      const std::size_t end = std::min(n_, c + every);
      const double s = adder_chunk(0.0, c, end);
      total = have ? op_add(a_.promote_format, total, s) : op_round(a_.promote_format, s);
      have = true;
    }
    return total;
  }

  const Accumulation& a_;
  std::span<const double> x_, y_;
  bool dot_;
  std::size_t n_;
  StochasticBits bits_;
  std::uint64_t step_ = 0;
  std::int64_t overflows_ = 0;
};

}  // namespace

TwinResult twin_sum(const Accumulation& a, std::span<const double> x, StochasticBits bits) {
  return Twin(a, x, {}, false, bits).run(false, 0.0);
}

TwinResult twin_dot(const Accumulation& a, std::span<const double> x, std::span<const double> y, StochasticBits bits,
                    bool has_init, double init) {
  return Twin(a, x, y, true, bits).run(has_init, init);
}

}  // namespace roundoff::test
