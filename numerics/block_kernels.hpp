#pragma once
/// \file block_kernels.hpp
/// Fast paths of numerics::quantize and dequantize (numerics/block_format.hpp), bit-identical to the generic
/// per-element code, which stays the definition and the scalar fallback (KernelOptions::isa_limit = None).
///
/// quantize_blocks covers the MX rules (OcpFloor, NvidiaCeil, MlxRound) with floating-point elements that have
/// subnormals and saturate (mxfp8-e4m3/e5m2, mxfp6-e3m2/e2m3, mxfp4) or the mxint8 fixed point, and Nvfp4 (1×16
/// blocks and 16×16 tiles), in every deterministic element rounding (stochastic is refused by quantize itself);
/// double and float input. It returns nullopt for anything else (other rules, a shape the generic path refuses,
/// NVFP4 input with a non-finite value or one that overflows fp32), and the generic path runs (and refuses).
/// The SIMD kernels (numerics/block_lanes.inc, AVX-512 in 8 and AVX2 in 4 binary64 lanes, 16 and 8 binary32
/// lanes for NVFP4's elements) take W blocks at a time: their maxima come out of a transposing butterfly into
/// one vector, whose lanes compute the W scales; then each block's elements. Per block:
///   amax      max |x| over the block (NaN/inf flagged by the exponent field: the NaN scale, codes 0);
///   scale     from amax's bits: OcpFloor ⌊log2 amax⌋ = its exponent field − 1023 (a subnormal or zero amax gives
///             −127 after the clamp); NvidiaCeil ⌈log2(amax/max)⌉ = exponent difference + (amax's significand >
///             max's); MlxRound the generic fp32 steps with frexp replaced by the bits of the (normal) double q;
///   elements  y = x·2^-s exact (a power of two, no overflow: |y| < 2^(emax+2)); under up, down and odd a product
///             that underflows to 0 is replaced by ±2^-1074, below every element quantum, as the generic path's
///             exact scaling sees it (the other modes give ±0 either way); with e = max(⌊log2|y|⌋, emin) from the
///             exponent field and Q = 2^(e − m), n = |y/Q rounded to an integer in the mode| (vroundscale/vround;
///             nearest-away and odd from truncation/floor and an exact remainder test) is the IEEE rounding with
///             unbounded exponent counted in quanta, and the code's magnitude is (e − emin)·2^m + n (a normal
///             binade's hidden bit and mantissa, n = 2^(m+1) being the next binade's first code; the subnormal
///             code itself when e = emin), saturated by min(code, code of max_elem) since codes grow with
///             magnitude — round_to's contract for saturating formats and Specials::None; the sign bit from y
///             (so −0 keeps it, as the generic path does);
///   mxint8    y = x·2^(6−s) rounded in the mode, clamped to [−127, 127], two's complement;
///   NVFP4     the tensor pass gives max |fp32(x)| (S_enc as the generic path); per block the fp32 amax,
///             S_dec = ue4m3(amax·(S_enc/6)) by its quantum (nearest-even, ≥ 448 saturates), enc in fp32 as the
///             generic path, then fp32(fp32(x)·enc) in binary32 lanes and the element rounding above.
/// tests/numerics/block_kernels_test.cpp compares every tier with the generic path bit for bit.
///
/// dequantize_blocks covers every rule but the affine ones (AffineMlx, MinMaxZeroPoint): element values and 8-bit
/// scale values from 256-entry tables, p·X exact in binary64, rounded once to the output as the generic path does.
#include <optional>
#include <span>
#include <vector>

#include "numerics/block_format.hpp"
#include "numerics/kernel_options.hpp"

namespace roundoff::numerics::kernels {

std::optional<BlockCodes> quantize_blocks(const BlockFormat& b, std::span<const double> x, std::size_t axis_len, Isa isa);
std::optional<BlockCodes> quantize_blocks(const BlockFormat& b, std::span<const float> x, std::size_t axis_len, Isa isa);
/// The same into caller storage (codes: x.size(), scales: one per block); false, nothing written, when not covered.
bool quantize_blocks_into(const BlockFormat& b, std::span<const double> x, std::size_t axis_len, Isa isa,
                          std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, float& tensor_scale);
bool quantize_blocks_into(const BlockFormat& b, std::span<const float> x, std::size_t axis_len, Isa isa,
                          std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, float& tensor_scale);
/// "block-avx512" or "block-avx2" when quantize_blocks covers b on isa, else nullptr.
const char* block_kernel_name(const BlockFormat& b, Isa isa);

std::optional<std::vector<double>> dequantize_blocks(const BlockFormat& b, std::span<const std::uint8_t> codes,
                                                     std::span<const std::uint32_t> scales, float tensor_scale,
                                                     const Format& out, std::size_t axis_len);
/// The same into v (codes.size() values); false (v untouched) when not covered.
bool dequantize_blocks_into(const BlockFormat& b, std::span<const std::uint8_t> codes,
                            std::span<const std::uint32_t> scales, float tensor_scale, const Format& out,
                            std::size_t axis_len, std::span<double> v);

}  // namespace roundoff::numerics::kernels
