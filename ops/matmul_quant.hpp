#pragma once
/// \file matmul_quant.hpp
/// The operands of one pass of a linear projection (ops/matmul.hpp) after the entry's block quantization
/// (OpPrecision::quant, ops/gemm_quant.hpp): each operand cast on entry, then — when the RHT is on — transformed
/// along the pass's contraction axis, then quantized along it in its role's format (stochastically where the role
/// says so, keyed by the element's index in its tensor). Emulated backend only: the Reference ignores the field.
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// The two operands of pass `pass` in the layouts the op holds them: Forward (x (n, in), W (out, in)), BackwardData
/// (dy (n, out), W (out, in)), BackwardWeight (dy (n, out), x (n, in)). Their values live in scratch_buffer slots 2
/// and 3 of the calling thread until the next call. Throws std::invalid_argument (one line naming the pass, the
/// operand, its shape and contraction axis) when a block size or the RHT does not fit the axis.
struct QuantOperands {
  std::span<const double> a, b;
};
/// `fp8`: the per-tensor fp8 state of the call's operands (ops/fp8_scaling.hpp; nullptr: none, which delayed
/// scaling refuses).
QuantOperands quantized_operands(const Ctx<Emulated>& ctx, Pass pass, MatmulShape s, std::span<const double> a,
                                 std::span<const double> b, const Fp8Slots* fp8 = nullptr);

}  // namespace roundoff::ops
