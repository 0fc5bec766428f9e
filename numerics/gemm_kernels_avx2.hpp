#pragma once
/// \file gemm_kernels_avx2.hpp
/// The AVX2 + FMA tier of the GEMM kernels (internal to gemm_kernels.cpp, which chooses it at run time on CPUs
/// without AVX-512): the fp32-accumulator kernel, sequential and blocked, and the operand packing it needs.
/// Same contract as the AVX-512 kernels (gemm_kernels.hpp): with products exact in fp32 (or any binary32 inputs
/// for the fused fp32 accumulator), one step s ← s + a·b is one hardware FMA (FMA3 rounds a·b + s once, RNE).
#include <cstddef>

namespace roundoff::numerics::kernels::avx2 {

/// Classifies n contiguous doubles as the AVX-512 pack_run does, returning 0 (no kernel: not a binary32 value,
/// or, for inputs without `any_binary32`, more than 12 significant bits or a finite nonzero |x| outside
/// [2^-63, 2^63)) or 1 (handled); whether the values are fp16 values is not computed (only the AVX512-FP16
/// kernel needs it). Writes the binary32 values to f32 when not null, NaNs replaced by the quiet NaN.
int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32);

/// `rows` rows × 16 columns of the fp32-accumulator GEMM: rows Ap[r·lda + k], B columns Bp[k·ldb + 0..15],
/// running sums in/out tile[r·ldt + c]. block == 0: sequential; else block sums restart at −0 every `block`
/// terms and are added to the fp32 totals.
void tile_f32_rows(std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
                   std::size_t K, std::size_t block, float* tile, std::size_t ldt);

}  // namespace roundoff::numerics::kernels::avx2
