#include "numerics/exact_dot.hpp"

#include <gmp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace roundoff::numerics {

namespace {

using Limbs = std::array<std::uint64_t, ExactSum::kLimbs>;


/// Index of the highest set bit of the array, or -1 when it is zero.
int top_bit(const Limbs& a) {
  for (int i = ExactSum::kLimbs - 1; i >= 0; --i)
    if (a[static_cast<std::size_t>(i)] != 0)
      return i * 64 + 63 - std::countl_zero(a[static_cast<std::size_t>(i)]);
  return -1;
}

/// Bits [s, s+count) of the array (count <= 128), as an integer.
u128 get_bits(const Limbs& a, int s, int count) {
  u128 r = 0;
  for (int k = count - 1; k >= 0; --k) {
    const int b = s + k;
    r <<= 1;
    if (b >= 0 && b < ExactSum::kLimbs * 64) r |= (a[static_cast<std::size_t>(b >> 6)] >> (b & 63)) & 1u;
  }
  return r;
}

/// True when any bit below index s is set.
bool any_below(const Limbs& a, int s) {
  if (s <= 0) return false;
  const int full = s >> 6;
  for (int i = 0; i < full; ++i)
    if (a[static_cast<std::size_t>(i)] != 0) return true;
  const int rem = s & 63;
  return rem != 0 && (a[static_cast<std::size_t>(full)] & ((std::uint64_t{1} << rem) - 1)) != 0;
}

}  // namespace

void ExactSum::add(double x) {
  if (!std::isfinite(x)) {
    if (std::isnan(x)) nan_ = true;
    else if (x > 0) pos_inf_ = true;
    else neg_inf_ = true;
    return;
  }
  if (x == 0) return;
  std::uint64_t m;
  int e;
  split_double(x, m, e);
  add_parts(std::signbit(x), m, e);
}

void ExactSum::add_product(double x, double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) {
    add(x * y);  // inf·0 = NaN, inf·y = ±inf, NaN propagates
    return;
  }
  if (x == 0 || y == 0) return;
  std::uint64_t mx, my;
  int ex, ey;
  split_double(x, mx, ex);
  split_double(y, my, ey);
  add_parts(std::signbit(x) != std::signbit(y), u128{mx} * my, ex + ey);
}

void ExactSum::add_parts(bool neg, u128 m, int exp) {
  if (m == 0) return;
  if (exp < kLowExp) throw std::invalid_argument("ExactSum: term below the accumulator's range");
  const int off = exp - kLowExp;
  const int li = off >> 6, b = off & 63;
  const auto lo = static_cast<std::uint64_t>(m), hi = static_cast<std::uint64_t>(m >> 64);
  std::uint64_t w[3];
  w[0] = lo << b;
  w[1] = b == 0 ? hi : (hi << b) | (lo >> (64 - b));
  w[2] = b == 0 ? 0 : hi >> (64 - b);
  if (!neg) {
    std::uint64_t carry = 0;
    int i = li;
    for (int k = 0; k < 3 && i < kLimbs; ++k, ++i) {
      const u128 s = u128{limb_[static_cast<std::size_t>(i)]} + w[k] + carry;
      limb_[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(s);
      carry = static_cast<std::uint64_t>(s >> 64);
    }
    for (; carry != 0 && i < kLimbs; ++i) carry = ++limb_[static_cast<std::size_t>(i)] == 0 ? 1 : 0;
  } else {
    std::uint64_t borrow = 0;
    int i = li;
    for (int k = 0; k < 3 && i < kLimbs; ++k, ++i) {
      const std::uint64_t a = limb_[static_cast<std::size_t>(i)];
      const std::uint64_t d1 = a - w[k];
      const std::uint64_t b1 = a < w[k] ? 1 : 0;
      const std::uint64_t d2 = d1 - borrow;
      const std::uint64_t b2 = d1 < borrow ? 1 : 0;
      limb_[static_cast<std::size_t>(i)] = d2;
      borrow = b1 | b2;
    }
    for (; borrow != 0 && i < kLimbs; ++i) borrow = limb_[static_cast<std::size_t>(i)]-- == 0 ? 1 : 0;
  }
}

void ExactSum::add(const ExactSum& other) {
  nan_ = nan_ || other.nan_;
  pos_inf_ = pos_inf_ || other.pos_inf_;
  neg_inf_ = neg_inf_ || other.neg_inf_;
  std::uint64_t carry = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(kLimbs); ++i) {
    const u128 s = u128{limb_[i]} + other.limb_[i] + carry;
    limb_[i] = static_cast<std::uint64_t>(s);
    carry = static_cast<std::uint64_t>(s >> 64);
  }
}

void ExactSum::negate() {
  std::swap(pos_inf_, neg_inf_);
  std::uint64_t carry = 1;
  for (auto& l : limb_) {
    l = ~l + carry;
    carry = (carry != 0 && l == 0) ? 1 : 0;
  }
}

std::array<std::uint64_t, ExactSum::kLimbs> ExactSum::magnitude() const {
  Limbs m = limb_;
  if (negative()) {
    std::uint64_t carry = 1;
    for (auto& l : m) {
      l = ~l + carry;
      carry = (carry != 0 && l == 0) ? 1 : 0;
    }
  }
  return m;
}

int ExactSum::sign() const {
  if (is_nan()) return 0;
  if (pos_inf_) return 1;
  if (neg_inf_) return -1;
  if (negative()) return -1;
  for (auto l : limb_)
    if (l != 0) return 1;
  return 0;
}

int ExactSum::ilogb() const {
  const int t = top_bit(magnitude());
  if (t < 0 || !is_finite()) throw std::logic_error("ExactSum::ilogb of zero or a non-finite value");
  return t + kLowExp;
}

ExactParts ExactSum::parts() const {
  const Limbs mag = magnitude();
  const int t = top_bit(mag);
  ExactParts p;
  p.neg = negative();
  if (t < 0) return p;
  const int s = t >= 119 ? t - 119 : 0;
  p.m = get_bits(mag, s, t - s + 1);
  p.exp = s + kLowExp;
  p.sticky = any_below(mag, s);
  return p;
}

double ExactSum::round(const RoundingPlan& plan, Rounding mode, std::uint64_t draw) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (is_nan()) return round_to(plan, mode, std::numeric_limits<double>::quiet_NaN());
  if (pos_inf_) return round_to(plan, mode, kInf);
  if (neg_inf_) return round_to(plan, mode, -kInf);
  const ExactParts p = parts();
  if (p.m == 0) return 0.0;
  return round_parts(plan, mode, p, draw);
}

double ExactSum::to_double() const {
  static const RoundingPlan plan(formats::fp64);
  return round(plan, Rounding::NearestEven);
}

namespace {
/// The signed fixed-point integer as an mpz (value = z·2^kLowExp).
void to_mpz(mpz_t z, const Limbs& mag, bool neg) {
  mpz_import(z, mag.size(), -1, sizeof(std::uint64_t), 0, 0, mag.data());
  if (neg) mpz_neg(z, z);
}
}  // namespace

int ExactSum::to_mpfr(mpfr_ptr r, mpfr_rnd_t rnd) const {
  if (is_nan()) {
    mpfr_set_nan(r);
    return 0;
  }
  if (pos_inf_ || neg_inf_) {
    mpfr_set_inf(r, pos_inf_ ? 1 : -1);
    return 0;
  }
  mpz_t z;
  mpz_init(z);
  to_mpz(z, magnitude(), negative());
  const int t = mpfr_set_z_2exp(r, z, kLowExp, rnd);
  mpz_clear(z);
  return t;
}

std::string ExactSum::to_decimal() const {
  if (is_nan()) return "nan";
  if (pos_inf_) return "inf";
  if (neg_inf_) return "-inf";
  const Limbs mag = magnitude();
  if (top_bit(mag) < 0) return "0";
  mpz_t z;
  mpz_init(z);
  to_mpz(z, mag, false);
  // value = z·2^kLowExp; drop trailing zero bits, then z·2^-k = z·5^k / 10^k.
  const auto tz = static_cast<long>(mpz_scan1(z, 0));
  mpz_fdiv_q_2exp(z, z, static_cast<mp_bitcnt_t>(tz));
  const long k = -(static_cast<long>(kLowExp) + tz);
  std::string digits;
  if (k <= 0) {
    mpz_mul_2exp(z, z, static_cast<mp_bitcnt_t>(-k));
    char* s = mpz_get_str(nullptr, 10, z);
    digits = s;
    void (*freefunc)(void*, size_t);
    mp_get_memory_functions(nullptr, nullptr, &freefunc);
    freefunc(s, std::char_traits<char>::length(s) + 1);
  } else {
    mpz_t f;
    mpz_init(f);
    mpz_ui_pow_ui(f, 5, static_cast<unsigned long>(k));
    mpz_mul(z, z, f);
    mpz_clear(f);
    char* s = mpz_get_str(nullptr, 10, z);
    std::string all = s;
    void (*freefunc)(void*, size_t);
    mp_get_memory_functions(nullptr, nullptr, &freefunc);
    freefunc(s, all.size() + 1);
    const auto ku = static_cast<std::size_t>(k);
    if (all.size() <= ku) all.insert(0, ku - all.size() + 1, '0');
    digits = all.substr(0, all.size() - ku) + "." + all.substr(all.size() - ku);
  }
  mpz_clear(z);
  return negative() ? "-" + digits : digits;
}

ExactSum exact_sum(const double* x, std::ptrdiff_t incx, std::size_t n) {
  ExactSum s;
  for (std::size_t i = 0; i < n; ++i) s.add(x[static_cast<std::ptrdiff_t>(i) * incx]);
  return s;
}

ExactSum exact_dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n) {
  ExactSum s;
  for (std::size_t i = 0; i < n; ++i)
    s.add_product(x[static_cast<std::ptrdiff_t>(i) * incx], y[static_cast<std::ptrdiff_t>(i) * incy]);
  return s;
}

ExactSum exact_abs_dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n) {
  ExactSum s;
  for (std::size_t i = 0; i < n; ++i)
    s.add_product(std::fabs(x[static_cast<std::ptrdiff_t>(i) * incx]), std::fabs(y[static_cast<std::ptrdiff_t>(i) * incy]));
  return s;
}

ExactSum exact_dot(const Format& inputs, const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy,
                   std::size_t n) {
  const RoundingPlan plan(inputs);
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = x[static_cast<std::ptrdiff_t>(i) * incx], yi = y[static_cast<std::ptrdiff_t>(i) * incy];
    if (!is_representable(plan, xi) || !is_representable(plan, yi))
      throw std::invalid_argument("exact_dot: input " + std::to_string(i) + " is not a value of " + name_of(inputs));
  }
  const int qmin = inputs.emin - inputs.precision + 1;  // every value is a multiple of 2^qmin
  const int bits = 2 * (inputs.emax + 1) - 2 * qmin;    // products are below 2^bits in units of 2^(2·qmin)
  if (bits + 40 > 126 || n > (std::size_t{1} << 40)) return exact_dot(x, incx, y, incy, n);
  __extension__ typedef __int128 i128;
  i128 acc = 0;
  ExactSum s;
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = x[static_cast<std::ptrdiff_t>(i) * incx], yi = y[static_cast<std::ptrdiff_t>(i) * incy];
    if (!std::isfinite(xi) || !std::isfinite(yi)) {
      s.add_product(xi, yi);
      continue;
    }
    // Scaling by a power of two is exact; both are integers below 2^(emax+1-qmin) <= 2^63.
    const auto xs = static_cast<std::int64_t>(std::ldexp(xi, -qmin));
    const auto ys = static_cast<std::int64_t>(std::ldexp(yi, -qmin));
    acc += static_cast<i128>(xs) * ys;
  }
  const bool neg = acc < 0;
  s.add_parts(neg, static_cast<u128>(neg ? -acc : acc), 2 * qmin);
  return s;
}

double error_ulps(const Format& f, const ExactSum& exact, double result) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!exact.is_finite() || !std::isfinite(result)) {
    if (!exact.is_nan() && !std::isnan(result) && !exact.is_finite() && std::isinf(result) &&
        (result > 0) == (exact.sign() > 0))
      return 0.0;
    return kInf;
  }
  const int e = exact.sign() == 0 ? f.emin : std::max(exact.ilogb(), f.emin);
  ExactSum d = exact;
  d.add(-result);
  const ExactParts p = d.parts();
  if (p.m == 0) return 0.0;
  return std::ldexp(static_cast<double>(p.m), p.exp - (e - f.precision + 1));
}

double signed_error(const ExactSum& exact, double result) {
  if (!exact.is_finite() || !std::isfinite(result)) return std::numeric_limits<double>::quiet_NaN();
  ExactSum d = exact;
  d.negate();
  d.add(result);
  return d.to_double();
}

}  // namespace roundoff::numerics
