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
/// - MlxRound (MLX's MX scale, `mx.quantize` modes "mxfp4"/"mxfp8" as its CPU reference computes it): as
///   OcpFloor with s = round(log2(q)), q = fp32(fp32(amax) / max_elem) (two nearest-even roundings; log2 rounded
///   exactly: with q = m·2^e, 1 <= m < 2, s = e + 1 when m² >= 2, else e — no ties, 2^(1/2) being irrational),
///   s = -127 when q is 0; s is clamped to [-127, 127] (MLX never gives the NaN scale for a large amax); an
///   amax that overflows fp32, a NaN or an inf gives the NaN scale. Elements saturate as under OcpFloor.
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
/// - AffineMlx (MLX's `mx.quantize`, mode "affine", as its CPU reference evaluates it; b bits, codes 0..n,
///   n = 2^b − 1): each x is first rounded to the dtype T of the scale format (fp16, bf16 or fp32; nearest-even;
///   a value that overflows T is refused), and every step below is a binary32 operation rounded to nearest-even:
///   w_min, w_max = the block's min and max; scale = max((w_max − w_min) / n, 1e-7f); when |w_min| > |w_max|
///   the edge is w_min, else the edge is w_max and scale = −scale; q0 = rint(edge / scale); when q0 ≠ 0,
///   scale = edge / q0 and bias = edge, else bias = 0. P_i = rint((x_i − bias) / scale) (the element rounding
///   for rint), clamped to [0, n]. The block stores scale and bias rounded to T (nearest-even; their IEEE bits,
///   sign included, in `scales` and `biases`); a scale that overflows T is refused. Decoded value:
///   P_i · scale_T + bias_T, exact, rounded once to the output (MLX's kernels evaluate it in T or fp32 and may
///   differ from that by the rounding of the product). Non-finite inputs are refused.
/// - MinMaxZeroPoint (the asymmetric grid of GPTQ's quantizer, `find_params` + `quantize` of IST-DASLab/gptq
///   and AutoGPTQ, round-to-nearest: the grid only, not GPTQ's Hessian error feedback; b bits, n = 2^b − 1):
///   x rounded to fp32 first (overflow refused); in binary32 steps: x_min = min(min x_i, 0), x_max =
///   max(max x_i, 0), both set to ∓1 when both are 0; scale = (x_max − x_min) / n; zero = rint(−x_min / scale);
///   P_i = clamp(rint(x_i / scale) + zero, 0, n). Stored: fp16(scale) (nearest-even; overflow refused) in
///   `scales`, the integer zero in `biases`. Decoded value: fp16(scale)·(P_i − zero), exact — the deployed
///   checkpoint's value: the codes were chosen with the fp32 scale, the kernels decode with the fp16 one.
/// Double quantization (nf4-dq, QLoRA's `bnb_4bit_use_double_quant`, bitsandbytes' `quantize_4bit(...,
/// compress_statistics=True)`): the element codes are nf4's (chosen with the fp32 absmax S_j of each 64-block);
/// the S_j are then stored in 8 bits: offset = fp32(mean of all S_j of the tensor) (the exact mean rounded once,
/// nearest-even; bitsandbytes takes torch's fp32 mean, whose summation order is the device's), c_j = fp32(S_j −
/// offset); in groups of scale_block consecutive c_j (the last group may be shorter): A = max |c_j| (fp32, stored
/// as its bits in `scale_scales`), r = fp32(1/A), t_j = fp32(c_j · r), and the stored 8-bit code (in `scales`) is
/// bitsandbytes' search of its signed dynamic map D (dynamic_map_8bit(), 256 ascending fp32 values, D[127] = 0,
/// D[255] = 1): p = 127, then for step 64, 32, ..., 1: p += step when t_j > D[p], else p −= step (p ends even,
/// 0..254); when t_j > D[p]: p + 1 if t_j > fp32(fp32(D[p+1] + D[p]) · 0.5), else p; otherwise p − 1 if p > 0 and
/// t_j < fp32(fp32(D[p−1] + D[p]) · 0.5), else p. (A NaN t_j — a group of zeros, A = 0 — gives 0.) Decoding:
/// S'_j = fp32(fp32(D[q_j] · A) + offset) (bitsandbytes' dequantize_blockwise plus the offset, fp32 steps), and
/// value = c_P · S'_j as nf4 decodes with S'_j. The scale_offset field holds the offset. The reciprocal is the
/// correctly rounded one (a CUDA build with fast math uses an approximate reciprocal; its codes can differ there).
/// Integer elements of MX (mxint8) are fixed point: code q in [-127, 127] (OCP's and microxcaling's symmetric
/// range; -128 unused) is the value q / 64, so emax_elem = 0 and max_elem = 127/64.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/int_format.hpp"
#include "numerics/kernel_options.hpp"
#include "numerics/rounding.hpp"
#include "numerics/scale_format.hpp"

namespace roundoff::numerics {

enum class ScaleRule : std::uint8_t {
  OcpFloor, NvidiaCeil, MlxRound, Nvfp4, AbsmaxInt, AbsmaxCodebook, AffineMlx, MinMaxZeroPoint
};
inline constexpr ScaleRule kAllScaleRules[] = {ScaleRule::OcpFloor,       ScaleRule::NvidiaCeil, ScaleRule::MlxRound,
                                               ScaleRule::Nvfp4,          ScaleRule::AbsmaxInt,  ScaleRule::AbsmaxCodebook,
                                               ScaleRule::AffineMlx,      ScaleRule::MinMaxZeroPoint};
/// "ocp-floor", "nv-ceil", "mlx-round", "nvfp4", "absmax", "absmax-codebook", "affine-mlx", "minmax-zp".
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
  int bits = 0;                 ///< code bits when narrower than the integer type (affine: 2..8); 0 = the type's
  friend bool operator==(const BlockElement&, const BlockElement&) = default;
};

struct BlockFormat {
  std::string name;  ///< canonical name ("mxfp4", "mxfp4:nv-ceil", ...)
  BlockElement element;
  ScaleFormat scale = ScaleFormat::E8M0;
  int block_size = 32;
  ScaleRule rule = ScaleRule::OcpFloor;
  Rounding element_rounding = Rounding::NearestEven;
  /// 2-D blocks: block_rows × block_size tiles of a matrix (NVIDIA's 16×16 NVFP4 weight blocks, so that W and Wᵀ
  /// share one quantization); 1 = 1×k blocks along the last axis. A tile is quantized exactly as a 1-D block of
  /// block_rows·block_size values would be; the scales are stored per tile, tiles in row-major order.
  int block_rows = 1;
  /// Double quantization of the fp32 block scales (AbsmaxCodebook only; nf4-dq: 256, QLoRA's): 0 = none. See
  /// "Double quantization" above.
  int scale_block = 0;
};

/// Entries of a codebook element.
inline constexpr int kCodebookSize = 16;
/// NF4's 16 values, ascending (QLoRA, Dettmers et al. 2023; the fp32 table `nf4_dequantization_lut` of
/// bitsandbytes' csrc/kernels.cu).
const float* nf4_codebook();

/// mxfp8-e4m3 mxfp8-e5m2 mxfp6-e3m2 mxfp6-e2m3 mxfp4 mxint8 nvfp4 int4-g32 int4-g64 int4-g128 nf4 mlx-int4-g32
/// nf4-dq (nf4 with double-quantized scales) mlx-int4-g64 mlx-int4-g128 mlx-int8-g64 (every mlx-intB-gG[-bf16|-fp32] parses: B in 2, 3, 4, 5, 6, 8; G in 32,
/// 64, 128; scales and biases in fp16 unless the suffix says otherwise) gptq-int4-g32 gptq-int4-g64 gptq-int4-g128
/// (every gptq-intB-gG parses: B in 2, 3, 4, 8; G in 32, 64, 128) nvfp4-16x16 (2-D tiles).
const std::vector<std::string>& block_format_names();
/// A name, optionally with a rule for the MX formats: "mxfp4:nv-ceil", "mxfp4:mlx-round" (or ":ocp-floor", the
/// default).
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
  std::vector<std::uint32_t> biases;  ///< per block: AffineMlx's bias (IEEE bits), MinMaxZeroPoint's zero point
  float tensor_scale = 1.0f;
  std::vector<std::uint32_t> scale_scales;  ///< double quantization: per group of scales, the fp32 bits of A
  float scale_offset = 0.0f;                ///< double quantization: the offset subtracted from the scales
};

/// Quantizes x, a C-order tensor whose last axis has `axis_len` elements (x.size() a multiple of it), in
/// blocks of b.block_size along that axis (2-D formats: x is a matrix of x.size()/axis_len rows, in tiles).
/// Throws std::invalid_argument when the block size does not divide axis_len (or block_rows the rows), or
/// (NVFP4, integers) for a non-finite input. `opts` chooses the path only: the MX and NVFP4 formats run SIMD
/// kernels (numerics/block_kernels.hpp) bit-identical to the generic code, which isa_limit = None selects.
BlockCodes quantize(const BlockFormat& b, std::span<const double> x, std::size_t axis_len,
                    const KernelOptions& opts = {});
/// The same for float input (each value exact in double: the same codes as quantize of the widened values).
BlockCodes quantize(const BlockFormat& b, std::span<const float> x, std::size_t axis_len,
                    const KernelOptions& opts = {});
/// quantize into caller storage, for formats without biases (every one but the mlx-int* and gptq-int* grids):
/// codes of x.size(), scales of one per block (their order as in BlockCodes); returns the tensor scale. The same
/// codes as quantize; the kernels' speed without allocating the result (fresh pages cost more than the kernel).
/// Throws std::invalid_argument for a format with biases or spans of the wrong size, as quantize does otherwise.
float quantize_into(const BlockFormat& b, std::span<const double> x, std::size_t axis_len,
                    std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, const KernelOptions& opts = {});
float quantize_into(const BlockFormat& b, std::span<const float> x, std::size_t axis_len,
                    std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, const KernelOptions& opts = {});
/// The values of the codes, each the exact decoded value rounded once to `out` (fp32 or fp64, nearest-even).
/// `biases` (one per block) is required for AffineMlx and MinMaxZeroPoint and must be empty otherwise;
/// `axis_len` (the matrix's columns) is required for 2-D formats and ignored otherwise. `opts` chooses the path
/// only (table lookups for the non-affine rules; the generic code with isa_limit = None).
std::vector<double> dequantize(const BlockFormat& b, std::span<const std::uint8_t> codes,
                               std::span<const std::uint32_t> scales, float tensor_scale, const Format& out,
                               std::span<const std::uint32_t> biases = {}, std::size_t axis_len = 0,
                               const KernelOptions& opts = {});

/// dequantize into caller storage (v: codes.size() values), the same values; the table path's speed without
/// allocating the result.
void dequantize_into(const BlockFormat& b, std::span<const std::uint8_t> codes, std::span<const std::uint32_t> scales,
                     float tensor_scale, const Format& out, std::span<double> v,
                     std::span<const std::uint32_t> biases = {}, std::size_t axis_len = 0,
                     const KernelOptions& opts = {});
/// dequantize of a whole BlockCodes (every format; the only form for double-quantized scales, nf4-dq).
std::vector<double> dequantize(const BlockFormat& b, const BlockCodes& q, const Format& out, std::size_t axis_len = 0,
                               const KernelOptions& opts = {});
/// The fp32 block scales S'_j that double-quantized scale codes decode to (see "Double quantization").
std::vector<float> double_quantized_scales(const BlockFormat& b, std::span<const std::uint32_t> scales,
                                           std::span<const std::uint32_t> scale_scales, float scale_offset);
/// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(signed=True)), 256 ascending fp32 values.
const float* dynamic_map_8bit();

/// The value of one element code (before scaling), and the code of an element value.
double element_value(const BlockElement& e, std::uint32_t code);
std::uint32_t element_code(const BlockElement& e, double value);

}  // namespace roundoff::numerics
