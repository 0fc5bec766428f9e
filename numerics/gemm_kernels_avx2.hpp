#pragma once
/// \file gemm_kernels_avx2.hpp
/// The AVX2 + FMA tier of the GEMM kernels (internal to gemm_kernels.cpp, which chooses it at run time on CPUs
/// without AVX-512): fp32, fp16 and bf16 accumulators, sequential and blocked, the ane-tile4 tile stage, and
/// the operand packing.
/// Same contract as the AVX-512 kernels (gemm_kernels.hpp), 8 lanes:
///   fp32 accumulator: with products exact in fp32 (or any binary32 inputs for the fused fp32 accumulator), one
///     step s ← s + a·b is one hardware FMA (FMA3 rounds a·b + s once, RNE).
///   fp16/bf16 accumulator: AVX2 has no per-instruction rounding, so the fp32 sum is rounded to odd from its
///     RNE value and exact error: p = a·b (exact), r = RN(s + p), e = (s + p) − r by TwoSum (exact: s, p, r
///     finite). e = 0: r is exact (and for an exact zero carries IEEE's sign, as the AVX-512 kernel's RU
///     does). e ≠ 0: the exact sum lies strictly between r and its neighbour on e's side; r odd is the
///     round-to-odd value, else that neighbour is (the encoding ± 1: + when e and r have the same sign;
///     r ≠ 0 because every nonzero sum of these values is a multiple of 2^-149, exact in binary32 when tiny).
///     r = ±inf from finite s and p (overflow) is kept: round-to-odd would give ±max32, and both round to ±inf
///     in fp16 and bf16. Non-finite operands: r, as IEEE.
///     Then one RNE rounding to fp16 (vcvtps2ph) or bf16 (integer round-half-even), as on AVX-512.
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::kernels {

/// Accumulator format of a kernel.
enum class Acc : std::uint8_t { Fp16, Bf16, Fp32 };

/// Terms per tile of the one tile stage the kernels handle (ane-tile4).
inline constexpr std::size_t kTile = 4;

/// The rare lanes of one tile step of the tile-stage kernels (gemm_kernels.cpp; `lanes` columns): lanes not set
/// in `exact` get their tile value by the scalar definition (fp16 bits in h) and count its overflow; exact lanes
/// (whose h is ±65504, ±inf or NaN) count an overflow when their exact sum su is finite with |su| >= 65536.
/// a: the row's n terms; b: column 0 of the first term, terms ldb apart.
void tile_fixup(std::uint16_t* h, std::uint32_t exact, const double* su, const double* a, const float* b,
                std::size_t ldb, std::size_t n, std::size_t lanes, std::int64_t& overflows);

}  // namespace roundoff::numerics::kernels

namespace roundoff::numerics::kernels::avx2 {

/// Classifies n contiguous doubles as the AVX-512 pack_run does, returning 0 (no kernel: not a binary32 value,
/// or, for inputs without `any_binary32`, more than 12 significant bits or a finite nonzero |x| outside
/// [2^-63, 2^63)) or 1 (handled); whether the values are fp16 values is not computed (only the AVX512-FP16
/// kernel needs it). Writes the binary32 values to f32 and as binary64 to f64 where not null, NaNs replaced by
/// the quiet NaN.
int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32, double* f64);

/// dst[i] = src[i] as binary64 (exact), i < n.
void widen(const float* src, double* dst, std::size_t n);

/// `rows` rows × 16 columns of the GEMM with accumulator `acc`: rows Ap[r·lda + k], B columns Bp[k·ldb + 0..15],
/// running sums in/out tile[r·ldt + c]. block == 0: sequential; else block sums (in `acc`) restart at −0 every
/// `block` terms and are added to the fp32 totals.
void tile_rows(Acc acc, std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
               std::size_t K, std::size_t block, float* tile, std::size_t ldt);

/// `rows` rows × 8 columns of the ane-tile4 GEMM (tiles of 4 exact products rounded toward zero to fp16, summed
/// in fp32): rows Ap[r·lda + k] (binary64), B columns Bp[k·ldb + 0..7], running sums in/out tile[r·ldt + c];
/// tile overflows are added to `overflows`. Without per-instruction rounding the exactness certificate is
/// TwoSum: the binary64 running sum of a tile's exact products with every step's error 0 is the exact sum S
/// (+0 added last, so an exact zero is +0); other lanes take tile_fixup. RZ to binary32 is truncation of S's
/// significand to 24 bits (S is normal in binary64, below 2^128 and a multiple of 2^-148, so values in binary32's
/// subnormal range are already binary32 values), then vcvtps2ph with RZ (RZ of RZ is RZ, see tile_ane in
/// gemm_kernels.cpp), then one binary32 add.
void tile_ane_rows(std::size_t rows, const double* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
                   std::size_t K, float* tile, std::size_t ldt, std::int64_t& overflows);

}  // namespace roundoff::numerics::kernels::avx2
