#pragma once
/// \file scale_format.hpp
/// Formats of the shared scale of a block-scaled format, as a typed value with its own rounding.
///
/// - E8M0 (OCP MX v1.0): 8 unsigned exponent bits, bias 127; code E in 0..254 is 2^(E-127), 0xFF is NaN.
///   No zero, no sign, no infinity. Rounding of a real x >= 0 in a deterministic mode (a 1-bit significand):
///   x = 2^e exactly stays; otherwise, with lo = 2^floor(log2 x) and hi = 2 lo, nearest-even and
///   nearest-away give hi when x >= 1.5 lo (a tie goes to hi: MPFR's rounding at precision 1, whose only
///   significand bit is odd, carries into the exponent), else lo; toward-zero, down and odd give lo (odd: the
///   one significand bit is already 1); up gives hi. The result is then clamped to [2^-127, 2^127]: there is
///   neither zero (0 and values below 2^-127 give 2^-127) nor infinity (values above 2^127 give 2^127).
///   NaN and +inf give NaN.
/// - UE4M3: the non-negative values of OCP E4M3 (sign bit 0; code 0x7F is NaN), rounded as E4M3 with
///   saturation at 448 (NVFP4's block scale): NaN gives NaN, +inf and values above 448 give 448.
/// - FP16: IEEE binary16 with saturation at 65504 (the group scale of the integer group-wise formats).
/// - FP32: IEEE binary32 with saturation at FLT_MAX (NF4's absmax scale).
/// - BF16: bfloat16 with saturation at its largest finite value (with FP16 and FP32, the dtypes of MLX's
///   affine scales and biases, which are signed: the affine rule stores their IEEE bits, sign included, and
///   does not go through scale_code; see block_format.hpp).
/// Negative inputs are refused (std::invalid_argument): a scale is non-negative. Stochastic rounding is
/// refused: scales are rounded deterministically.
#include <cstdint>
#include <string_view>

#include "numerics/format.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::numerics {

enum class ScaleFormat : std::uint8_t { E8M0, UE4M3, FP16, FP32, BF16 };
inline constexpr ScaleFormat kAllScaleFormats[] = {ScaleFormat::E8M0, ScaleFormat::UE4M3, ScaleFormat::FP16,
                                                   ScaleFormat::FP32, ScaleFormat::BF16};

/// "e8m0", "ue4m3", "fp16", "fp32", "bf16".
std::string_view name_of(ScaleFormat s);
/// Parses a name; throws std::invalid_argument listing the valid names.
ScaleFormat parse_scale_format(std::string_view text);

/// Bits of a code (8 for E8M0 and UE4M3, 16 for FP16 and BF16, 32 for FP32).
int scale_bits(ScaleFormat s);
/// Whether the format has a NaN code (E8M0 0xFF, UE4M3 0x7F; FP16's NaNs are not used as scales).
bool scale_has_nan(ScaleFormat s);
/// The value of a code (NaN for a NaN code). Throws for a code wider than the format.
double scale_value(ScaleFormat s, std::uint32_t code);
/// The code of a value of the format (or of NaN where the format has one). Throws for anything else.
std::uint32_t scale_code(ScaleFormat s, double value);
/// True when x is a finite value of the format.
bool is_scale_value(ScaleFormat s, double x);
/// Rounds x >= 0 (or NaN, or +inf) to the format in a deterministic mode, per the rules above.
double round_scale(ScaleFormat s, Rounding mode, double x);

/// The E8M0 value 2^k, k in [-127, 127], and its code k + 127.
constexpr double e8m0_min = pow2(-127);
constexpr double e8m0_max = pow2(127);

/// The saturating Formats the non-E8M0 scales round through.
inline constexpr Format kUe4m3Rounding{4, -6, 8, true, Specials::NanOnly, true};
inline constexpr Format kFp16Saturating{11, -14, 15, true, Specials::Ieee, true};
inline constexpr Format kFp32Saturating{24, -126, 127, true, Specials::Ieee, true};
inline constexpr Format kBf16Saturating{8, -126, 127, true, Specials::Ieee, true};
/// The IEEE format of FP16, BF16 and FP32 (fp16, bf16, fp32); throws std::invalid_argument for E8M0 and UE4M3.
Format ieee_format_of(ScaleFormat s);

}  // namespace roundoff::numerics
