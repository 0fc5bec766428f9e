#pragma once
/// \file quant_shadow.hpp
/// The shadow's second reference of a GEMM whose operands are quantized (issue 44; telemetry `shadow_acc_*`,
/// docs/trainer.md): the exact product of the operands the emulated GEMM actually consumed, so that the output's
/// error against it is the GEMM's accumulation error plus its output rounding, and nothing of the quantization.
///
/// The MPFR shadow's own reference (ops/runner.hpp) is the product of the *unquantized* operands (the Reference
/// backend ignores OpPrecision::quant), so for an fp8 or block-scaled GEMM its local error is dominated by the
/// element quantization (a few percent) and hides accumulation errors of 10⁻⁴–10⁻³ (DeepSeek-V3's promotion).
///
/// The operands consumed: ops/matmul_quant.hpp's quantized_operands, recomputed after the emulated call from the
/// same inputs under the call's own context (the same entry casts and stochastic draws) and fp8 scales, read only
/// (no amax recorded, no cast counted: the recomputation changes no state and no bit). Decoded:
///   exact fp8 model (codes, matmul_quant.hpp)  A'(i,k) = code · s_A, s_A the operand's scale_inv per tensor or its
///                                              block scale s(i, k / kb) (DeepSeek); exact in binary64 (a code has
///                                              at most 4 significant bits, a scale is binary32);
///   decoded model (block formats, nopromote,   the fp32 values the GEMM read (after the RHT when the entry applies
///   the RHT)                                   it, and the quantization's decode).
/// Reference of output element (i, j) of a pass with output C (M × N) and contraction length K:
///   r_ij = C_ij(before the call: the gradient a backward pass adds into; 0 in the forward) + Σ_k A'(i,k)·B'(k,j),
/// summed exactly (numerics::ExactSum: no rounding at all) and rounded once to Ref (133 bits; a relative 2^-133,
/// far below the output rounding of any storage format the trainer uses). So for a GEMM that sums exactly and
/// stores binary64 the error is 0, and otherwise it is exactly the accumulation's and the output's rounding
/// (tests/ops/quant_shadow_test.cpp).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ops/backend.hpp"
#include "ops/fp8_scaling.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// The exact references of the output rows `units` (each a row of the pass's output: a token of y or dx, an
/// output channel of dW) of a linear projection's pass `pass` (ops/matmul.hpp) on the operands a, b as the op
/// function receives them (Forward: x, W; BackwardData: dy, W; BackwardWeight: dy, x), under the call's context
/// `ctx` and fp8 slots `fp8` (see the file comment). `before`: the output's values before the call (every element;
/// read in the backward passes). Returns the references of the units' elements in unit order (row u's elements
/// in column order, units as given); nullopt when the entry quantizes nothing (OpPrecision::quant inactive).
std::optional<std::vector<Ref>> quantized_gemm_reference(const Ctx<Emulated>& ctx, Pass pass, MatmulShape s,
                                                         std::span<const double> a, std::span<const double> b,
                                                         const Fp8Slots* fp8, std::span<const std::int64_t> units,
                                                         std::span<const Ref> before);

}  // namespace roundoff::ops
