#include "numerics/scale_format.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "numerics/named.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_mode(ScaleFormat s, Rounding mode) {
  if (mode == Rounding::Stochastic)
    throw std::invalid_argument("scale format " + std::string(name_of(s)) +
                                " is rounded deterministically; valid modes: nearest-even, nearest-away, "
                                "toward-zero, up, down, odd");
}

double round_e8m0(Rounding mode, double x) {
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  if (x < e8m0_min) return e8m0_min;  // no zero: 0 and everything below the smallest power give 2^-127
  if (x > e8m0_max) return e8m0_max;  // no infinity
  const int e = std::ilogb(x);
  const double lo = std::ldexp(1.0, e);
  if (x == lo) return x;
  const double hi = 2 * lo;
  double r = lo;
  switch (mode) {
    case Rounding::NearestEven:
    case Rounding::NearestAway: r = x >= 1.5 * lo ? hi : lo; break;
    case Rounding::Up: r = hi; break;
    case Rounding::TowardZero:
    case Rounding::Down:
    case Rounding::Odd: r = lo; break;
    case Rounding::Stochastic: break;  // refused by check_mode
  }
  return std::fmin(r, e8m0_max);
}
}  // namespace

std::string_view name_of(ScaleFormat s) {
  switch (s) {
    case ScaleFormat::E8M0: return "e8m0";
    case ScaleFormat::UE4M3: return "ue4m3";
    case ScaleFormat::FP16: return "fp16";
    case ScaleFormat::FP32: return "fp32";
    case ScaleFormat::BF16: return "bf16";
  }
  return "?";
}

ScaleFormat parse_scale_format(std::string_view text) {
  return parse_named<ScaleFormat>(text, kAllScaleFormats, "scale format");
}

int scale_bits(ScaleFormat s) {
  switch (s) {
    case ScaleFormat::E8M0:
    case ScaleFormat::UE4M3: return 8;
    case ScaleFormat::FP16:
    case ScaleFormat::BF16: return 16;
    case ScaleFormat::FP32: return 32;
  }
  return 0;
}

bool scale_has_nan(ScaleFormat s) {
  switch (s) {
    case ScaleFormat::E8M0:
    case ScaleFormat::UE4M3: return true;
    case ScaleFormat::FP16:
    case ScaleFormat::FP32:
    case ScaleFormat::BF16: return false;
  }
  return false;
}

double scale_value(ScaleFormat s, std::uint32_t code) {
  if (scale_bits(s) < 32 && (code >> scale_bits(s)) != 0)
    throw std::invalid_argument("scale code " + std::to_string(code) + " does not fit " + std::string(name_of(s)) +
                                " (" + std::to_string(scale_bits(s)) + " bits)");
  switch (s) {
    case ScaleFormat::E8M0: return code == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(code) - 127);
    case ScaleFormat::UE4M3:
      if (code & 0x80)
        throw std::invalid_argument("ue4m3 scale code " + std::to_string(code) + " has the sign bit set; valid: 0..127");
      return from_bits(formats::e4m3, code);
    case ScaleFormat::FP16: return from_bits(formats::fp16, code);
    case ScaleFormat::FP32: return from_bits(formats::fp32, code);
    case ScaleFormat::BF16: return from_bits(formats::bf16, code);
  }
  return kNaN;
}

bool is_scale_value(ScaleFormat s, double x) {
  if (!std::isfinite(x) || std::signbit(x)) return false;
  switch (s) {
    case ScaleFormat::E8M0: {
      if (x < e8m0_min || x > e8m0_max) return false;
      int e = 0;
      return std::frexp(x, &e) == 0.5;
    }
    case ScaleFormat::UE4M3: return is_representable(RoundingPlan(formats::e4m3), x);
    case ScaleFormat::FP16: return is_representable(RoundingPlan(formats::fp16), x);
    case ScaleFormat::FP32: return is_representable(RoundingPlan(formats::fp32), x);
    case ScaleFormat::BF16: return is_representable(RoundingPlan(formats::bf16), x);
  }
  return false;
}

std::uint32_t scale_code(ScaleFormat s, double value) {
  if (std::isnan(value) && scale_has_nan(s)) return s == ScaleFormat::E8M0 ? 0xFFu : 0x7Fu;
  if (!is_scale_value(s, value))
    throw std::invalid_argument("value " + std::to_string(value) + " is not a " + std::string(name_of(s)) +
                                " scale value");
  switch (s) {
    case ScaleFormat::E8M0: return static_cast<std::uint32_t>(std::ilogb(value) + 127);
    case ScaleFormat::UE4M3: return static_cast<std::uint32_t>(to_bits(formats::e4m3, value));
    case ScaleFormat::FP16: return static_cast<std::uint32_t>(to_bits(formats::fp16, value));
    case ScaleFormat::FP32: return static_cast<std::uint32_t>(to_bits(formats::fp32, value));
    case ScaleFormat::BF16: return static_cast<std::uint32_t>(to_bits(formats::bf16, value));
  }
  return 0;
}

double round_scale(ScaleFormat s, Rounding mode, double x) {
  check_mode(s, mode);
  if (x < 0)
    throw std::invalid_argument("scale format " + std::string(name_of(s)) + " is unsigned; got " +
                                std::to_string(x) + " (valid: x >= 0, NaN, +inf)");
  if (x == 0) x = 0.0;  // -0 is zero: a scale has no sign
  switch (s) {
    case ScaleFormat::E8M0: return round_e8m0(mode, x);
    case ScaleFormat::UE4M3: return round_to(kUe4m3Rounding, mode, x);
    case ScaleFormat::FP16: return round_to(kFp16Saturating, mode, x);
    case ScaleFormat::FP32: return round_to(kFp32Saturating, mode, x);
    case ScaleFormat::BF16: return round_to(kBf16Saturating, mode, x);
  }
  return kNaN;
}

Format ieee_format_of(ScaleFormat s) {
  switch (s) {
    case ScaleFormat::FP16: return formats::fp16;
    case ScaleFormat::BF16: return formats::bf16;
    case ScaleFormat::FP32: return formats::fp32;
    case ScaleFormat::E8M0:
    case ScaleFormat::UE4M3: break;
  }
  throw std::invalid_argument("scale format " + std::string(name_of(s)) + " is not an IEEE format; valid: fp16, bf16, fp32");
}

}  // namespace roundoff::numerics
