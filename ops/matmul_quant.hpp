#pragma once
/// \file matmul_quant.hpp
/// The operands of one pass of a linear projection (ops/matmul.hpp) after the entry's block quantization
/// (OpPrecision::quant, ops/gemm_quant.hpp): each operand cast on entry, then — when the RHT is on — transformed
/// along the pass's contraction axis, then quantized along it in its role's format (stochastically where the role
/// says so, keyed by the element's index in its tensor). Emulated backend only: the Reference ignores the field.
///
/// Scaled fp8 operands (ops/fp8_scaling.hpp) take one of two GEMM models:
///   exact   both operands of the pass scaled fp8, and either both per tensor (Transformer Engine), or both in blocks
///           whose length along the contraction axis is the accumulation's promotion interval, promoted into fp32
///           (DeepSeek-V3: 128, tc-h100-fp8,promote=128:fp32). The GEMM multiplies the fp8 codes (exact products,
///           the tensor-core model's inputs are true fp8 values) and applies the scales as the hardware does:
///           per tensor, P = the whole GEMM of the codes under the entry's Accumulation, then D = fp32(P · fp32(ia·ib))
///           (ia, ib the scale_inv of the operands: the epilogue of cuBLAS's scaled GEMM); per block, for every block
///           b of the contraction axis P_b = the GEMM of that block's codes under the Accumulation without promotion
///           (one promotion interval), and T = fmaf(P_b, fp32(sa·sb), T) from T = 0 in block order (DeepGEMM's
///           promotion: final_accum += scale_a·scale_b·accum, contracted to an FMA). A beta = 1 GEMM then adds the old
///           value once in fp32: C = fp32(C + D). The epilogue's exact operation order in cuBLAS is not measured.
///   decoded otherwise (e.g. deepseek-fp8-nopromote, where no promotion exists to apply block scales at): the
///           operands are the decoded fp32 values and the GEMM is the entry's ordinary one (as for every block format).
///           With the entry's fp8-rescale = ELEM (GemmQuant::rescale; deepseek-fp8-nopromote-rescaled), rescaled_gemm:
///           the decoded operands are first scaled by powers of two into ELEM's range, row by row of A and column by
///           column of B, and the result scaled back (see rescaled_gemm).
#include <span>
#include <vector>

#include "numerics/accumulate.hpp"
#include "ops/backend.hpp"
#include "ops/fp8_scaling.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// The scales that decode an operand's fp8 codes in the exact model: per tensor `inv`; per block s(outer, b), outer
/// the operand's index outside the contraction axis (the GEMM's row of A, column of B), b the block along it.
struct OperandScales {
  bool per_tensor = false;
  float inv = 1.0f;
  std::size_t nb = 0;     ///< blocks along the contraction axis
  std::vector<float> s;   ///< outer × nb
  float at(std::size_t outer, std::size_t b) const { return s[outer * nb + b]; }
};

/// The two operands of pass `pass` in the layouts the op holds them: Forward (x (n, in), W (out, in)), BackwardData
/// (dy (n, out), W (out, in)), BackwardWeight (dy (n, out), x (n, in)). Their values live in scratch_buffer slots 2
/// and 3 of the calling thread until the next call. Throws std::invalid_argument (one line naming the pass, the
/// operand, its shape and contraction axis) when a block size or the RHT does not fit the axis. `exact`: the
/// operands are fp8 codes with the scales sa (of a) and sb (of b) (the exact model above); else decoded values.
struct QuantOperands {
  std::span<const double> a, b;
  bool exact = false;
  OperandScales sa, sb;
  std::size_t kb = 0;  ///< exact per-block model: the block length along the contraction axis
  Fp8Elem rescale = Fp8Elem::Off;  ///< decoded model: the entry's fp8-rescale (Off: the operands as decoded)
};
/// `fp8`: the per-tensor fp8 state of the call's operands (ops/fp8_scaling.hpp; nullptr: none, which delayed
/// scaling refuses).
QuantOperands quantized_operands(const Ctx<Emulated>& ctx, Pass pass, MatmulShape s, std::span<const double> a,
                                 std::span<const double> b, const Fp8Slots* fp8 = nullptr);

/// C (M × N, ldc) = A (M×K) · B (K×N) [+ C when accumulate] on quantized operands: ctx.gemm for decoded values, the
/// exact fp8 model for codes (see the file comment). `a_outer0`: A's first row's outer index (a one-row call of a
/// Select). The result is in the accumulation's result format, as ctx.gemm's.
void quant_gemm(const Ctx<Emulated>& ctx, const QuantOperands& q, std::size_t M, std::size_t N, std::size_t K,
                numerics::ConstMatrix A, numerics::ConstMatrix B, double* C, std::size_t ldc, bool accumulate, Key r,
                std::size_t a_outer0 = 0);

/// The decoded model with fp8-rescale = e (e not Off): C (M × N, ldc) = A (M×K) · B (K×N) [+ C when accumulate] as
///   a_i = rescale_exponent(max over k of |A_ik| finite, e)   for every row i of A (0 when the row has no finite
///                                                             nonzero element: all zeros, NaN or ±inf)
///   b_j = rescale_exponent(max over k of |B_kj| finite, e)   for every column j of B
///   A'_ik = A_ik · 2^a_i,  B'_kj = B_kj · 2^b_j,  C'_ij = C_ij · 2^(a_i + b_j)   (binary64, exact)
///   C'  ← ctx.gemm(A', B' [+ C'])   (the entry's Accumulation, e.g. tc-h100-fp8; keyed by r)
///   C_ij = C'_ij · 2^−(a_i + b_j)   (binary64, exact)
/// Each C_ij is one dot product of row i of A and column j of B, so scaling them by 2^a_i and 2^b_j scales its every
/// product by 2^(a_i + b_j); with C'_ij so scaled too, the tensor-core model's result is exactly 2^(a_i + b_j) times
/// what it would give unscaled wherever neither evaluation meets the model's absolute limits (a nonzero factor below
/// its input emin, whose exponent it clamps, or a sum outside the accumulator's range). The choice brings each row's
/// and column's largest magnitude into [fp8_max/2, fp8_max], as a real fp8 GEMM's codes are; multiplying every
/// element of A (or B) by 2^j, in range, gives bit-identical A' (B') and the result times 2^j exactly (the
/// property tests/ops/fp8_scaling_test.cpp checks). NaN and ±inf elements are scaled like the rest (they stay NaN,
/// ±inf) and propagate as in the unscaled model. Non-finite C_ij likewise.
void rescaled_gemm(const Ctx<Emulated>& ctx, Fp8Elem e, std::size_t M, std::size_t N, std::size_t K,
                   numerics::ConstMatrix A, numerics::ConstMatrix B, double* C, std::size_t ldc, bool accumulate,
                   Key r);

}  // namespace roundoff::ops
