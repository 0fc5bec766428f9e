#pragma once
/// \file format.hpp
/// Floating-point formats as typed values.
///
/// A Format is (p, emin, emax, subnormals, specials, saturate). Its finite values are
///   0, ±m·2^(e-p+1) with e in [emin, emax] and 2^(p-1) <= m < 2^p (normals), and, when subnormals are on,
///   ±m·2^(emin-p+1) with 0 < m < 2^(p-1). With Specials::NanOnly (OCP E4M3FN) the encoding with all
///   exponent and significand bits set is NaN, so the largest significand at emax is 2^p - 2.
/// Every supported format is a subset of binary64: 2 <= p <= 53, emin >= -1022, emax <= 1023 and
/// emin - p + 1 >= -1074, so an emulated value is always held exactly in a double.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace roundoff::numerics {

/// Which special values a format encodes.
enum class Specials : std::uint8_t {
  Ieee,     ///< ±inf and NaN (all-ones exponent field).
  NanOnly,  ///< no infinities; the all-ones encoding is NaN (OCP E4M3FN).
  None,     ///< no inf and no NaN: every encoding is finite; overflow always saturates.
};

/// A binary floating-point format. Structural, so usable as a C++20 template argument.
struct Format {
  int precision;  ///< p: significand bits including the hidden bit
  int emin;       ///< exponent of the smallest normal number
  int emax;       ///< exponent of the largest normal binade
  bool subnormals = true;             ///< gradual underflow; off = values below 2^emin round to 0 or ±2^emin
  Specials specials = Specials::Ieee;
  bool saturate = false;              ///< overflow gives ±max_finite instead of ±inf (or NaN)
  friend constexpr bool operator==(const Format&, const Format&) = default;
};

namespace formats {
inline constexpr Format fp64{53, -1022, 1023};
inline constexpr Format fp32{24, -126, 127};
inline constexpr Format tf32{11, -126, 127};
inline constexpr Format bf16{8, -126, 127};
inline constexpr Format fp16{11, -14, 15};
inline constexpr Format e4m3{4, -6, 8, true, Specials::NanOnly, false};  ///< OCP FP8 E4M3 (fn), max 448
inline constexpr Format e5m2{3, -14, 15};                                ///< OCP FP8 E5M2, IEEE-like
// OCP MX v1.0 element formats: no inf, no NaN (Specials::None, so overflow always saturates), subnormals.
inline constexpr Format e3m2{3, -2, 4, true, Specials::None, false};  ///< OCP FP6 E3M2, bias 3, max 28
inline constexpr Format e2m3{4, 0, 2, true, Specials::None, false};   ///< OCP FP6 E2M3, bias 1, max 7.5
inline constexpr Format e2m1{2, 0, 2, true, Specials::None, false};   ///< OCP FP4 E2M1, bias 1, max 6
}  // namespace formats

/// Empty when the format is valid, else the reason it is not (for error messages).
std::optional<std::string> validate(const Format& f);
/// Throws std::invalid_argument with the reason when the format is invalid.
void check_valid(const Format& f);

/// True when every value of f (±inf and NaN aside, which binary32 has too) is a binary32 value: at most 24
/// significand bits, the largest binade at most binary32's (2^127), and the smallest quantum, 2^(emin − p + 1),
/// at least binary32's smallest subnormal 2^-149. Then a tensor of f can be stored in binary32 and widened back
/// to the same binary64 value (issue 45, typed storage).
constexpr bool fits_binary32(const Format& f) {
  return f.precision <= 24 && f.emax <= 127 && f.emin - f.precision + 1 >= -149;
}

/// True when f holds every binary32 value (±inf and NaN included): at least 24 significand bits, binary32's
/// exponent range or wider, subnormals, IEEE specials, no saturation. Then rounding a binary32 value to f (any
/// mode) returns it unchanged, NaN aside (round_to's NaN rule may change a NaN's bits).
constexpr bool holds_binary32(const Format& f) {
  return f.precision >= 24 && f.emin <= -126 && f.emax >= 127 && f.subnormals && f.specials == Specials::Ieee &&
         !f.saturate;
}

/// u = 2^-p, the unit roundoff of round-to-nearest.
constexpr double unit_roundoff(const Format& f) {
  double u = 1.0;
  for (int i = 0; i < f.precision; ++i) u *= 0.5;
  return u;
}
/// 2^k for integer k in the double range, exactly (constexpr).
constexpr double pow2(int k) {
  double r = 1.0;
  if (k >= 0) for (int i = 0; i < k; ++i) r *= 2.0;
  else for (int i = 0; i < -k; ++i) r *= 0.5;
  return r;
}
/// Largest finite value: (2 - 2^(1-p))·2^emax, or (2 - 2^(2-p))·2^emax for NanOnly.
constexpr double max_finite(const Format& f) {
  const int drop = f.specials == Specials::NanOnly ? 2 : 1;
  return (2.0 - pow2(drop - f.precision)) * pow2(f.emax);
}
/// Smallest positive normal, 2^emin.
constexpr double min_normal(const Format& f) { return pow2(f.emin); }
/// Smallest positive value: 2^(emin-p+1) with subnormals, else 2^emin.
constexpr double min_positive(const Format& f) {
  return f.subnormals ? pow2(f.emin - f.precision + 1) : pow2(f.emin);
}
/// The distance between consecutive format values around x (for |x| at a binade boundary, the one above):
/// ulp(x) = 2^(max(floor(log2|x|), emin) - p + 1). ulp(0) is the smallest subnormal spacing.
double ulp(const Format& f, double x);

/// Bit layout of a format when it has one (sign, w exponent bits, p-1 fraction bits).
struct Encoding {
  int exponent_bits;
  int fraction_bits;
  int bias;
  int total_bits() const { return 1 + exponent_bits + fraction_bits; }
};
/// The encoding of a format, if (emin, emax, specials) matches an IEEE-style or OCP-style layout.
std::optional<Encoding> encoding_of(const Format& f);
/// The encoding of value x (which must be a value of f, or NaN/inf where f has them).
std::uint64_t to_bits(const Format& f, double x);
/// The value of an encoding (NaN for NaN encodings).
double from_bits(const Format& f, std::uint64_t bits);

/// Canonical name: a preset name ("bf16") or "p<P>:emin<A>:emax<B>[:nosub][:nanonly|:nospecials][:sat]".
std::string name_of(const Format& f);
/// Parses a preset name or a custom spec. Throws std::invalid_argument naming the token and listing the
/// valid names when the text is not a format.
Format parse_format(std::string_view text);
/// The preset names, in table order.
const std::vector<std::string>& preset_format_names();

}  // namespace roundoff::numerics
