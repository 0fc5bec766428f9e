#pragma once
/// \file gemm_kernels_avx2.hpp
/// The AVX2 + FMA tier of the GEMM kernels (internal to gemm_kernels.cpp, which chooses it at run time on CPUs
/// without AVX-512): fp32, fp16 and bf16 accumulators, sequential and blocked, and the operand packing.
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

}  // namespace roundoff::numerics::kernels

namespace roundoff::numerics::kernels::avx2 {

/// Classifies n contiguous doubles as the AVX-512 pack_run does, returning 0 (no kernel: not a binary32 value,
/// or, for inputs without `any_binary32`, more than 12 significant bits or a finite nonzero |x| outside
/// [2^-63, 2^63)) or 1 (handled); whether the values are fp16 values is not computed (only the AVX512-FP16
/// kernel needs it). Writes the binary32 values to f32 when not null, NaNs replaced by the quiet NaN.
int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32);

/// `rows` rows × 16 columns of the GEMM with accumulator `acc`: rows Ap[r·lda + k], B columns Bp[k·ldb + 0..15],
/// running sums in/out tile[r·ldt + c]. block == 0: sequential; else block sums (in `acc`) restart at −0 every
/// `block` terms and are added to the fp32 totals.
void tile_rows(Acc acc, std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
               std::size_t K, std::size_t block, float* tile, std::size_t ldt);

}  // namespace roundoff::numerics::kernels::avx2
