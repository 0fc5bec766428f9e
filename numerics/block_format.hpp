#pragma once
/// \file block_format.hpp
/// Block-scaled quantization as a typed value: element type, scale format, block size (1×k blocks along the
/// last axis: consecutive runs of k values of a row), scale rule and element rounding; quantize gives the
/// element codes and block scale codes (the bit-exact storage) and dequantize the values.
///
/// Rules (docs/numerics.md, "Block-scaled formats"), for a block V_1..V_k with amax = max |V_i| (exact):
/// - OcpFloor (OCP MX v1.0): a NaN or ±inf in the block gives the NaN scale (all ones) and element codes 0.
///   Else s = floor(log2 amax) - emax_elem (s = -127 for an all-zero block), clamped below at -127; s > 127
///   gives the NaN scale. X = 2^s; P_i = round(V_i / X) to the element format in the element rounding,
///   saturating to ±max_elem (amax / X can reach 2^(emax_elem + 1)).
/// - NvidiaCeil: as OcpFloor with s = ceil(log2(amax / max_elem)), so amax / X <= max_elem: no saturation.
/// - Nvfp4 (Transformer Engine's chain, every step an fp32 operation): x is first rounded to fp32;
///   S_enc = 2688 / amax_tensor (2688 = 448·6), FLT_MAX when that overflows, 1 when amax_tensor is 0 or
///   S_enc is 0; S_dec = ue4m3(amax_block · (S_enc · fp32(1/6))) (nearest-even, saturating at 448; may be 0);
///   enc = 1 / (S_dec · (1 / S_enc)), FLT_MAX when that is inf; P_i = e2m1(fp32(x_i · enc)), nearest-even,
///   saturating. Decoded value: P_i · S_dec / S_enc. Non-finite inputs are refused.
/// - AbsmaxInt (symmetric group-wise integers, no zero point): S = fp16(amax / qmax) (one rounding of the
///   exact quotient, nearest-even, saturating at 65504), qmax = 7 for int4; P_i = round(V_i / S) to an
///   integer (one rounding of the exact quotient, nearest-even), saturated to [-8, 7]; S = 0 gives P_i = 0.
///   Decoded value: P_i · S. Non-finite inputs are refused.
/// - AbsmaxCodebook (nf4, QLoRA's NormalFloat4): S = fp32(amax) (nearest-even; an amax above FLT_MAX is
///   refused); with the codebook c_0 < ... < c_15 (fp32 values, c_0 = -1, c_7 = 0, c_15 = 1) and its midpoints
///   m_j = (c_j + c_{j+1}) / 2, P_i = the number of j with V_i > m_j · S, compared exactly: the index of the
///   codebook value nearest to the exact quotient V_i / S, a tie going to the lower index (bitsandbytes'
///   decision tree takes the lower code when x equals a threshold: `x > t` picks the upper one). S = 0 (all
///   zeros, or an amax that rounds to 0 in fp32) gives code 7 (the value 0). Decoded value: c_P · S (exact in
///   double). Non-finite inputs are refused.
/// Integer elements of MX (mxint8) are fixed point: code q in [-127, 127] (OCP's and microxcaling's symmetric
/// range; -128 unused) is the value q / 64, so emax_elem = 0 and max_elem = 127/64.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/int_format.hpp"
#include "numerics/rounding.hpp"
#include "numerics/scale_format.hpp"

namespace roundoff::numerics {

enum class ScaleRule : std::uint8_t { OcpFloor, NvidiaCeil, Nvfp4, AbsmaxInt, AbsmaxCodebook };
inline constexpr ScaleRule kAllScaleRules[] = {ScaleRule::OcpFloor, ScaleRule::NvidiaCeil, ScaleRule::Nvfp4,
                                               ScaleRule::AbsmaxInt, ScaleRule::AbsmaxCodebook};
/// "ocp-floor", "nv-ceil", "nvfp4", "absmax", "absmax-codebook".
std::string_view name_of(ScaleRule r);
ScaleRule parse_scale_rule(std::string_view text);

/// The element type: a saturating floating-point Format, an integer type with `fraction_bits` (the value
/// of code q is q · 2^-fraction_bits; mxint8 has 6), or (`codebook` set) a 16-entry ascending codebook whose
/// code is the index.
struct BlockElement {
  bool is_int = false;
  Format fp{};                  ///< when !is_int (a saturating variant: overflow gives ±max)
  IntFormat integer = IntFormat::Int8;
  int fraction_bits = 0;
  int int_lo = 0, int_hi = 0;   ///< the codes used (mxint8: [-127, 127]; int4: [-8, 7])
  const float* codebook = nullptr;  ///< when set: kCodebookSize ascending values, code = index (nf4)
  friend bool operator==(const BlockElement&, const BlockElement&) = default;
};

struct BlockFormat {
  std::string name;  ///< canonical name ("mxfp4", "mxfp4:nv-ceil", ...)
  BlockElement element;
  ScaleFormat scale = ScaleFormat::E8M0;
  int block_size = 32;
  ScaleRule rule = ScaleRule::OcpFloor;
  Rounding element_rounding = Rounding::NearestEven;
};

/// Entries of a codebook element.
inline constexpr int kCodebookSize = 16;
/// NF4's 16 values, ascending (QLoRA, Dettmers et al. 2023; the fp32 table `nf4_dequantization_lut` of
/// bitsandbytes' csrc/kernels.cu).
const float* nf4_codebook();

/// mxfp8-e4m3 mxfp8-e5m2 mxfp6-e3m2 mxfp6-e2m3 mxfp4 mxint8 nvfp4 int4-g32 int4-g64 int4-g128 nf4.
const std::vector<std::string>& block_format_names();
/// A name, optionally with a rule for the MX formats: "mxfp4:nv-ceil" (or ":ocp-floor", the default).
/// Throws std::invalid_argument naming what was wrong and listing the valid names.
BlockFormat parse_block_format(std::string_view text);

/// Largest element magnitude and emax_elem (exponent of the largest normal binade; 0 for integers).
double element_max(const BlockElement& e);
int element_emax(const BlockElement& e);
/// Bits of an element code.
int element_bits(const BlockElement& e);

/// Storage of a quantized tensor: one element code per value (low bits), one scale code per block, and the
/// fp32 tensor scale S_enc (NVFP4; 1 for the others).
struct BlockCodes {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint32_t> scales;
  float tensor_scale = 1.0f;
};

/// Quantizes x, a C-order tensor whose last axis has `axis_len` elements (x.size() a multiple of it), in
/// blocks of b.block_size along that axis. Throws std::invalid_argument when the block size does not divide
/// axis_len, or (NVFP4, integers) for a non-finite input.
BlockCodes quantize(const BlockFormat& b, std::span<const double> x, std::size_t axis_len);
/// The values of the codes, each the exact decoded value rounded once to `out` (fp32 or fp64, nearest-even).
std::vector<double> dequantize(const BlockFormat& b, std::span<const std::uint8_t> codes,
                               std::span<const std::uint32_t> scales, float tensor_scale, const Format& out);

/// The value of one element code (before scaling), and the code of an element value.
double element_value(const BlockElement& e, std::uint32_t code);
std::uint32_t element_code(const BlockElement& e, double value);

}  // namespace roundoff::numerics
