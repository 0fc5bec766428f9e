#pragma once
/// \file block_gemm.hpp
/// GEMM over block-scaled operands (OCP MX v1.0 §6.3's dot product, generalised to every block format):
/// per-block dot products summed exactly, then the block terms added under an Accumulation.
///
/// Semantics. A (M×K) and B (K×N) are quantized along K: A's rows and B's columns (B is given transposed, as
/// an N×K matrix quantized along its last axis) in blocks of k = block_size of their format; both formats must
/// have the same k. For block t (the k-range [t·k, (t+1)·k)) and output (i, j):
///   T_t = Σ_{κ ∈ t} v_A(i, κ)·v_B(j, κ), where v is the element's decoded value *without* the tensor scale
///   (P·X for MX, P·S_dec for NVFP4, P·S for the group-wise integers, c_P·S for NF4; for MLX affine
///   P·scale + bias rounded once to binary64), summed exactly (numerics::ExactSum) and rounded once to binary64
///   — exact for every format except nf4 and the MLX affine ones, whose products carry up to 48 significant bits;
///   C_ij = sum(outer, T_0, .., T_{K/k − 1}) in block order under the Accumulation `outer` (fused or not
///   makes no difference: the terms are already values); the result is in result_format(outer);
///   with NVFP4 operands C_ij is then divided by S_enc,A·S_enc,B (the product exact in binary64), the exact
///   quotient rounded once to result_format(outer), nearest-even (an epilogue; hardware may apply its alpha
///   differently).
/// A NaN block scale (MX) makes its terms NaN, which the outer sum propagates. Stochastic outer rounding draws
/// from stream bits.stream + i·N + j, index = the step, as gemm does. Outputs are independent of the thread
/// count.
#include <cstddef>
#include <cstdint>
#include <span>

#include "numerics/accumulate.hpp"
#include "numerics/block_format.hpp"

namespace roundoff::numerics {

/// A quantized matrix, rows × cols in C order, quantized along its rows' last axis (cols a multiple of the
/// block size), as quantize() returns it.
struct BlockMatrix {
  const BlockFormat& format;
  std::size_t rows = 0, cols = 0;
  std::span<const std::uint8_t> codes;    ///< rows·cols element codes
  std::span<const std::uint32_t> scales;  ///< rows·cols/k block scale codes
  float tensor_scale = 1.0f;              ///< NVFP4's S_enc
  std::span<const std::uint32_t> biases = {};  ///< MLX affine: one per block
};

/// C(M×N) = A·B with A = `a` (M×K) and B = transpose of `bt` (bt is N×K); C row-major with leading dimension
/// ldc. Throws std::invalid_argument (one line) on mismatched shapes, block sizes or storage sizes.
void block_gemm(const Accumulation& outer, const BlockMatrix& a, const BlockMatrix& bt, double* C, std::size_t ldc,
                StochasticBits bits = {}, int threads = 0);

}  // namespace roundoff::numerics
