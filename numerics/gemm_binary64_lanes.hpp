#pragma once
/// \file gemm_binary64_lanes.hpp
/// Internal to numerics/gemm_binary64.cpp: the micro-kernel of one ISA tier (gemm_binary64_lanes.inc compiled
/// once per tier). What it computes and why that is numerics::gemm's value: numerics/gemm_binary64.hpp.
#include <cstddef>

namespace roundoff::numerics::f64_lanes {

/// S[r·kNr + c] ← fma(A[r·lda + k], B[k·kNr + c], S[r·kNr + c]) for k = 0, 1, …, K − 1 in that order, every r < rows
/// and c < kNr: each S entry a chain of correctly rounded binary64 fused multiply-adds (IEEE 754
/// fusedMultiplyAdd under roundTiesToEven). B is a packed panel of kNr columns, S a running-sum tile (in/out).
namespace avx512 {
inline constexpr std::size_t kNr = 16;  ///< two vectors of 8 lanes
void rows(std::size_t rows, const double* A, std::size_t lda, const double* B, std::size_t K, double* S);
}  // namespace avx512
namespace avx2 {
inline constexpr std::size_t kNr = 8;  ///< two vectors of 4 lanes
void rows(std::size_t rows, const double* A, std::size_t lda, const double* B, std::size_t K, double* S);
}  // namespace avx2

}  // namespace roundoff::numerics::f64_lanes
