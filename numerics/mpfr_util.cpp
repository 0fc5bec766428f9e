#include "numerics/mpfr_util.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace roundoff::numerics {

ExactParts parts_from_mpfr(mpfr_srcptr y, bool inexact) {
  // y = mant · 2^(exp - prec) with mant an integer of prec bits.
  const mpfr_prec_t prec = mpfr_get_prec(y);
  if (prec > 120) throw std::logic_error("parts_from_mpfr: precision above 120 bits");
  mpz_t z;
  mpz_init(z);
  const mpfr_exp_t e = mpfr_get_z_2exp(z, y);
  ExactParts p;
  p.neg = mpz_sgn(z) < 0;
  mpz_abs(z, z);
  // Read the magnitude 64 bits at a time.
  u128 m = 0;
  std::size_t count = 0;
  std::uint64_t words[2] = {0, 0};
  mpz_export(words, &count, -1, sizeof(std::uint64_t), 0, 0, z);
  m = (static_cast<u128>(words[1]) << 64) | words[0];
  mpz_clear(z);
  p.m = m;
  // Exponents far outside binary64 are clamped: anything above 2^1100 overflows every format and anything
  // below 2^-1200 is far under half the smallest subnormal, so the rounding decision does not change.
  long long ex = static_cast<long long>(e);
  if (ex > 4000) ex = 4000;
  if (ex < -4000) ex = -4000;
  p.exp = static_cast<int>(ex);
  p.sticky = inexact;
  return p;
}

double round_from_rz(const RoundingPlan& plan, Rounding mode, mpfr_srcptr y, bool inexact, std::uint64_t draw) {
  if (mpfr_nan_p(y)) return std::numeric_limits<double>::quiet_NaN();
  if (mpfr_inf_p(y)) return round_to(plan, mode, mpfr_sgn(y) < 0 ? -HUGE_VAL : HUGE_VAL, draw);
  if (mpfr_zero_p(y)) {
    if (!inexact) return mpfr_signbit(y) ? -0.0 : 0.0;
    throw std::logic_error("round_from_rz: zero with an inexact flag");
  }
  return round_parts(plan, mode, parts_from_mpfr(y, inexact), draw);
}

double parse_and_round(const RoundingPlan& plan, Rounding mode, const std::string& text, std::uint64_t draw) {
  Mpfr y(rz_precision(plan, mode));
  char* end = nullptr;
  const int t = mpfr_strtofr(y, text.c_str(), &end, 0, MPFR_RNDZ);
  // mpfr_strtofr skips leading white space; a literal has none.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end == nullptr || *end != '\0')
    throw std::invalid_argument("not a number: '" + text + "' (expected decimal, hex-float like 0x1.8p+3, inf or nan)");
  if (mpfr_zero_p(y) && t != 0) {
    // A nonzero literal below MPFR's own range (0x1p-4294967296): far under half the smallest subnormal of
    // every format, so it rounds as any tiny value of its sign does (to 0, or the smallest subnormal when
    // rounding away from zero), just as a literal above the range rounds as an overflow.
    ExactParts tiny;
    tiny.neg = mpfr_signbit(y) != 0;
    tiny.m = 1;
    tiny.exp = -4000;
    tiny.sticky = true;
    return round_parts(plan, mode, tiny, draw);
  }
  return round_from_rz(plan, mode, y, t != 0, draw);
}

std::string hex_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

}  // namespace roundoff::numerics
