#include "numerics/round.hpp"
#include "numerics/pair_parts.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "numerics/round_simd.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::numerics {

RoundingPlan::RoundingPlan(const Format& f)
    : format(f),
      // ldexp rather than the constexpr helpers' loops: plans are built per reduction call, on hot paths.
      max_finite(std::ldexp(2.0 - std::ldexp(1.0, (f.specials == Specials::NanOnly ? 2 : 1) - f.precision), f.emax)),
      min_normal(std::ldexp(1.0, f.emin)),
      qexp_min(f.subnormals ? f.emin - f.precision + 1 : f.emin),
      fast_lo_bits(0),
      fast_hi_bits(0),
      drop_bits(53 - f.precision) {
  check_valid(f);
  fast_lo_bits = std::bit_cast<std::uint64_t>(std::ldexp(1.0, f.emin));
  fast_hi_bits = f.emax < 1023 ? std::bit_cast<std::uint64_t>(std::ldexp(1.0, f.emax + 1)) - 1
                               : std::bit_cast<std::uint64_t>(std::numeric_limits<double>::max());
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int msb_index(u128 m) {
  const auto hi = static_cast<std::uint64_t>(m >> 64);
  if (hi) return 127 - std::countl_zero(hi);
  return 63 - std::countl_zero(static_cast<std::uint64_t>(m));
}

/// The value a format gives when the rounded magnitude exceeds max_finite.
double overflow_value(const RoundingPlan& plan, Rounding mode, bool neg) {
  const Format& f = plan.format;
  const double big = plan.max_finite;
  bool to_max = f.saturate || f.specials == Specials::None;
  if (!to_max) {
    switch (mode) {
      case Rounding::NearestEven:
      case Rounding::NearestAway:
      case Rounding::Stochastic: break;
      case Rounding::TowardZero:
      case Rounding::Odd: to_max = true; break;
      case Rounding::Up: to_max = neg; break;
      case Rounding::Down: to_max = !neg; break;
    }
  }
  if (to_max) return neg ? -big : big;
  if (f.specials == Specials::NanOnly) return kNaN;
  return neg ? -kInf : kInf;
}

double special_value(const RoundingPlan& plan, double x) {
  if (std::isnan(x)) return kNaN;
  // x is ±inf
  const Format& f = plan.format;
  if (f.saturate || f.specials == Specials::None) return std::signbit(x) ? -plan.max_finite : plan.max_finite;
  if (f.specials == Specials::NanOnly) return kNaN;
  return x;
}


}  // namespace

double round_parts(const RoundingPlan& plan, Rounding mode, ExactParts v, std::uint64_t draw) {
  const Format& f = plan.format;
  if (v.m == 0) return v.neg ? -0.0 : 0.0;  // callers never pass m = 0 with sticky set
  // Normalise so that the leading bit is bit 120: the sticky part then lies far below any quantum.
  const int msb = msb_index(v.m);
  v.m <<= (120 - msb);
  v.exp -= (120 - msb);
  const int e = v.exp + 120;  // exponent of the leading bit of the exact value
  int qexp;
  if (e >= f.emin) qexp = e - f.precision + 1;
  else qexp = plan.qexp_min;
  const long long s = static_cast<long long>(qexp) - v.exp;  // >= 68 by construction

  std::uint64_t q = 0;
  bool nonzero = v.sticky, above = false, tie = false;
  std::uint64_t frac64 = 0;  // top 64 bits of the fraction (remainder / 2^s)
  bool frac_rest = v.sticky;
  if (s >= 128) {
    // The whole significand is fraction; m < 2^121 <= 2^(s-1): strictly below half.
    nonzero = true;
    if (s < 192) {
      const int sh = static_cast<int>(s - 64);
      frac64 = static_cast<std::uint64_t>(v.m >> sh);
      frac_rest = frac_rest || (v.m & ((u128{1} << sh) - 1)) != 0;
    } else {
      frac_rest = true;
    }
  } else {
    const int si = static_cast<int>(s);
    q = static_cast<std::uint64_t>(v.m >> si);
    const u128 r = v.m & ((u128{1} << si) - 1);
    const u128 half = u128{1} << (si - 1);
    nonzero = nonzero || r != 0;
    above = r > half || (r == half && v.sticky);
    tie = r == half && !v.sticky;
    frac64 = static_cast<std::uint64_t>(r >> (si - 64));
    frac_rest = frac_rest || (r & ((u128{1} << (si - 64)) - 1)) != 0;
  }

  bool inc = false;
  switch (mode) {
    case Rounding::NearestEven: inc = above || (tie && (q & 1)); break;
    case Rounding::NearestAway: inc = above || tie; break;
    case Rounding::TowardZero: inc = false; break;
    case Rounding::Up: inc = nonzero && !v.neg; break;
    case Rounding::Down: inc = nonzero && v.neg; break;
    case Rounding::Odd: inc = nonzero && (q & 1) == 0; break;
    case Rounding::Stochastic:
      // P(up) = (frac64 + δ)/2^64 with δ in [0,1): up iff draw < frac64, or draw == frac64 when δ > 0.
      inc = draw < frac64 || (frac_rest && draw == frac64);
      break;
  }
  q += inc;
  const double mag = std::ldexp(static_cast<double>(q), qexp);
  if (mag > plan.max_finite) return overflow_value(plan, mode, v.neg);
  return v.neg ? -mag : mag;
}

double round_to(const RoundingPlan& plan, Rounding mode, double x, std::uint64_t draw) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t mag = bits & ~(std::uint64_t{1} << 63);
  if (mag >= plan.fast_lo_bits && mag <= plan.fast_hi_bits && mode != Rounding::Stochastic) {
    // Normal binades of the format: rounding is integer arithmetic on the binary64 encoding (a carry out of the
    // significand correctly moves to the next binade; past 2^(emax+1) the overflow rule applies).
    const int sh = plan.drop_bits;
    if (sh == 0) return x;
    const bool neg = bits >> 63;
    const std::uint64_t low = (std::uint64_t{1} << sh) - 1;
    const std::uint64_t rem = mag & low;
    std::uint64_t r = mag & ~low;
    const std::uint64_t half = std::uint64_t{1} << (sh - 1);
    bool inc = false;
    switch (mode) {
      case Rounding::NearestEven: inc = rem > half || (rem == half && ((mag >> sh) & 1)); break;
      case Rounding::NearestAway: inc = rem >= half; break;
      case Rounding::TowardZero: break;
      case Rounding::Up: inc = rem != 0 && !neg; break;
      case Rounding::Down: inc = rem != 0 && neg; break;
      case Rounding::Odd: inc = rem != 0 && ((mag >> sh) & 1) == 0; break;
      case Rounding::Stochastic: break;  // excluded above
    }
    if (inc) r += low + 1;
    const double y = std::bit_cast<double>(r);
    if (y > plan.max_finite) return overflow_value(plan, mode, neg);
    return neg ? -y : y;
  }
  if (mode == Rounding::Stochastic) {
    // round_parts's stochastic rounding of a normal double x = m·2^(E-52) (m < 2^53, leading bit E) whose
    // quantum 2^qexp lies at most 64 bits above its last bit (sh = qexp − (E − 52) <= 64), in 64-bit integers:
    // q = ⌊m / 2^sh⌋, and frac64 = (m mod 2^sh)·2^(64−sh) is round_parts's frac64 with nothing below it
    // (frac_rest false), so up iff draw < frac64; the result and its overflow as round_parts computes them.
    const int ef = static_cast<int>((bits >> 52) & 0x7FF);
    if (ef != 0 && ef != 0x7FF) {
      const int E = ef - 1023;
      const int qexp = E >= plan.format.emin ? E - plan.format.precision + 1 : plan.qexp_min;
      const int sh = qexp - (E - 52);
      if (sh <= 64) {
        const bool neg = bits >> 63;
        double y = std::bit_cast<double>(mag);
        if (sh > 0) {
          const std::uint64_t m = (mag & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
          const std::uint64_t q = sh == 64 ? 0 : m >> sh;
          const std::uint64_t frac64 = sh == 64 ? m : (m & ((std::uint64_t{1} << sh) - 1)) << (64 - sh);
          const auto up = static_cast<double>(q + (draw < frac64 ? 1 : 0));  // < 2^54: exact
          // up·2^qexp, exact either way (a normal power of two times an integer >= 1 stays normal); the
          // multiplication saves ldexp's call on the common path
          y = qexp >= -1022 && qexp <= 1023
                  ? up * std::bit_cast<double>(static_cast<std::uint64_t>(qexp + 1023) << 52)
                  : std::ldexp(up, qexp);
        }  // else: x is a format value (exact), and its fraction 0 never rounds up
        if (y > plan.max_finite) return overflow_value(plan, mode, neg);
        return neg ? -y : y;
      }
    }
  }
  if (!std::isfinite(x)) return special_value(plan, x);
  if (x == 0) return x;
  std::uint64_t m;
  int e;
  split_double(x, m, e);
  return round_parts(plan, mode, ExactParts{std::signbit(x), m, e, false}, draw);
}

ExactParts pair_parts(double hi, double lo) {
  std::uint64_t mh, ml;
  int eh, el;
  split_double(hi, mh, eh);
  ExactParts v{std::signbit(hi), u128{mh} << 64, eh - 64, false};
  if (lo != 0) {
    split_double(lo, ml, el);
    const bool same = std::signbit(lo) == std::signbit(hi);
    const int d = v.exp - el;  // lo = ml·2^el = (ml·2^-d)·2^v.exp
    u128 part;
    bool lost = false;
    if (d <= 0) {
      part = u128{ml} << (-d);  // |lo| <= 2^eh·2 so this fits below bit 66
    } else if (d < 128) {
      part = u128{ml} >> d;
      lost = (u128{ml} & ((u128{1} << d) - 1)) != 0;
    } else {
      part = 0;
      lost = true;
    }
    if (same) {
      v.m += part;
      v.sticky = lost;
    } else {
      v.m -= part;
      if (lost) {
        v.m -= 1;
        v.sticky = true;
      }
    }
  }
  return v;
}

double round_pair_scaled(const RoundingPlan& plan, Rounding mode, double hi, double lo, int scale,
                         std::uint64_t draw) {
  if (!std::isfinite(hi) || !std::isfinite(lo)) return round_to(plan, mode, hi + lo, draw);
  if (lo == 0 && scale == 0) return round_to(plan, mode, hi, draw);
  if (hi == 0) {
    if (lo == 0) return hi;  // signed zero as computed by the caller
    std::uint64_t m;
    int e;
    split_double(lo, m, e);
    return round_parts(plan, mode, ExactParts{std::signbit(lo), m, e + scale, false}, draw);
  }
  ExactParts v = pair_parts(hi, lo);
  v.exp += scale;
  return round_parts(plan, mode, v, draw);
}

double round_pair(const RoundingPlan& plan, Rounding mode, double hi, double lo, std::uint64_t draw) {
  return round_pair_scaled(plan, mode, hi, lo, 0, draw);
}

double round_to(const Format& f, Rounding mode, double x, std::uint64_t draw) {
  return round_to(RoundingPlan(f), mode, x, draw);
}

bool is_representable(const RoundingPlan& plan, double x) {
  if (std::isnan(x)) return plan.format.specials != Specials::None;
  if (std::isinf(x)) return plan.format.specials == Specials::Ieee;
  return round_to(plan, Rounding::TowardZero, x) == x && round_to(plan, Rounding::Up, x) == x;
}

namespace {

/// Chunks of round_array(double) that may take the binary32 paths.
constexpr std::size_t kFloatChunk = 1024;

/// The scalar definition on src[c, c + n).
void round_doubles(const RoundingPlan& plan, Rounding mode, const double* src, double* dst, std::size_t n,
                   StochasticBits bits, std::uint64_t first_index) {
  if (mode == Rounding::Stochastic) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = round_to(plan, mode, src[i], bits.draw(first_index + i));
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = round_to(plan, mode, src[i]);
  }
}

}  // namespace

void round_array(const RoundingPlan& plan, Rounding mode, std::span<const double> src, std::span<double> dst,
                 StochasticBits bits, std::uint64_t first_index) {
  if (src.size() != dst.size()) throw std::invalid_argument("round_array: source and destination sizes differ");
  // Deterministic modes: round_to's fast path on 8 or 4 lanes (numerics/round_span.hpp), any format.
  if (round_doubles_avx512(plan, mode, src, dst) || round_doubles_avx2(plan, mode, src, dst)) return;
  // A chunk whose every element is a binary32 number (NaN excluded) is rounded on floats: such a value is exact
  // in binary32, so rounding it is the same computation (same exact value, same draw index) as on the double,
  // and the float paths are bit-identical to round_to. For the IEEE binary32 format itself the values are
  // already representable, and rounding a representable value returns it in every mode (stochastic: the
  // fraction is 0). Other chunks, and formats beyond the binary32 range, take the scalar definition.
  const bool is_fp32 = plan.format == formats::fp32;
  const bool float_range = plan.format.emax <= 127 && plan.qexp_min >= -149;
  float buf[kFloatChunk];
  for (std::size_t c = 0; c < src.size(); c += kFloatChunk) {
    const std::size_t n = std::min(kFloatChunk, src.size() - c);
    bool floats = is_fp32 || float_range;
    if (floats) {
      for (std::size_t i = 0; i < n; ++i) {
        buf[i] = static_cast<float>(src[c + i]);
        floats &= static_cast<double>(buf[i]) == src[c + i];
      }
    }
    if (floats && is_fp32) {
      for (std::size_t i = 0; i < n; ++i) dst[c + i] = src[c + i];
      continue;
    }
    if (floats && simd::round_float_fast(plan, mode, std::span<const float>(buf, n), std::span<float>(buf, n), bits,
                                         first_index + c)) {
      for (std::size_t i = 0; i < n; ++i) dst[c + i] = static_cast<double>(buf[i]);
      continue;
    }
    round_doubles(plan, mode, src.data() + c, dst.data() + c, n, bits, first_index + c);
  }
}

namespace {
void check_float_format(const RoundingPlan& plan) {
  const Format& f = plan.format;
  if (f.emax > 127 || plan.qexp_min < -149)  // 2^qexp_min = min_positive(f)
    throw std::invalid_argument("round_array(float): format " + name_of(f) + " exceeds the binary32 range");
}
}  // namespace

void round_array_portable(const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                          std::span<float> dst, StochasticBits bits, std::uint64_t first_index) {
  if (src.size() != dst.size()) throw std::invalid_argument("round_array: source and destination sizes differ");
  check_float_format(plan);
  if (simd::round_float_portable(plan, mode, src, dst, bits, first_index)) return;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const std::uint64_t draw = mode == Rounding::Stochastic ? bits.draw(first_index + i) : 0;
    dst[i] = static_cast<float>(round_to(plan, mode, static_cast<double>(src[i]), draw));
  }
}

void round_array(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                 StochasticBits bits, std::uint64_t first_index) {
  if (src.size() != dst.size()) throw std::invalid_argument("round_array: source and destination sizes differ");
  check_float_format(plan);
  if (simd::round_float_fast(plan, mode, src, dst, bits, first_index)) return;
  round_array_portable(plan, mode, src, dst, bits, first_index);
}

}  // namespace roundoff::numerics
