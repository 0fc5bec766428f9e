#pragma once
/// \file matmul.hpp
/// Linear projections y = x·Wᵀ (OpKind::Matmul for Q K V O W1 W3 W2, OpKind::Classifier for the logits).
///
/// Rounding contract (policy entry (kind, pass)): x, W (and dy) are rounded to storage on entry (Ctx::gemm_in: on
/// the kernels' fast path the casts happen while the operands are packed, with no cast copy); every
/// output element is one dot product in k order 0..K-1 under the Accumulation (numerics::gemm), rounded to
/// compute and then to storage. Backward functions add into their gradient: the current gradient value
/// enters the accumulator first (a beta = 1 GEMM), and the caller zeroes gradients.
/// Unit (Select) = one row of the output: a token row of y / dx, a row (output channel) of dW.
///
/// Block quantization (OpPrecision::quant active, emulated backend only): the operands are cast on entry, then
/// transformed and quantized along the pass's contraction axis (ops/matmul_quant.hpp), and the GEMM runs on those
/// values under the same Accumulation, in the same k order (scaled fp8 operands: the exact model of
/// ops/matmul_quant.hpp, quant_gemm); the Reference ignores the field. `fp8`: the per-tensor
/// fp8 scaling state of this call's operands (ops/fp8_scaling.hpp; the Runner passes it).
#include <span>
#include <type_traits>

#include "ops/backend.hpp"
#include "ops/matmul_quant.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// y (n, out) = x (n, in) · W (out, in)ᵀ.
template <class A>
void matmul_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                    std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                    [[maybe_unused]] const Fp8Slots* fp8 = nullptr) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::Forward, s, x, w, fp8);
      const std::span<const double> xs = q.a, ws = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, N, O, I, M{xs.data(), I}, M{ws.data(), I, true}, y.data(), O, false, key(Tensor::Y, 0, 2));
      for (std::int64_t r : sel)
        quant_gemm(ctx, q, 1, O, I, M{xs.data() + r * s.in, I}, M{ws.data(), I, true}, y.data() + r * s.out, O, false,
                   key(Tensor::Row, r, 0), static_cast<std::size_t>(r));
    }
  }
  if (!quantized && sel.empty()) {  // W (out, in) read as the (in × out) matrix Wᵀ
    ctx.gemm_in(N, O, I, x, false, Tensor::X, w, true, Tensor::W, y.data(), O, false, key(Tensor::Y, 0, 2));
  } else if (!quantized) {
    const std::span<const V> xs = entry_cast(ctx, x, Tensor::X, 0), ws = entry_cast(ctx, w, Tensor::W, 1);
    for (std::int64_t r : sel)
      ctx.gemm(1, O, I, M{xs.data() + r * s.in, I}, M{ws.data(), I, true}, y.data() + r * s.out, O, false,
               key(Tensor::Row, r, 0));
  }
  for_units(s.n, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.out), n = static_cast<std::size_t>(s.out);
    ctx.result_array(y.subspan(e0, n), [&](std::size_t j) { return key(Tensor::Y, e0 + j, 0); },
                     [&](std::size_t j) { return key(Tensor::Y, e0 + j, 1); });
  });
}

/// dx (n, in) += dy (n, out) · W (out, in).  Policy pass BackwardData.
template <class A>
void matmul_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                          std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                    [[maybe_unused]] const Fp8Slots* fp8 = nullptr) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::BackwardData, s, dy, w, fp8);
      const std::span<const double> dys = q.a, ws = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, N, I, O, M{dys.data(), O}, M{ws.data(), I}, dx.data(), I, true, key(Tensor::Dx, 0, 2));
      for (std::int64_t r : sel)
        quant_gemm(ctx, q, 1, I, O, M{dys.data() + r * s.out, O}, M{ws.data(), I}, dx.data() + r * s.in, I, true,
                   key(Tensor::Row, r, 0), static_cast<std::size_t>(r));
    }
  }
  if (!quantized && sel.empty()) {
    ctx.gemm_in(N, I, O, dy, false, Tensor::Dy, w, false, Tensor::W, dx.data(), I, true, key(Tensor::Dx, 0, 2));
  } else if (!quantized) {
    const std::span<const V> dys = entry_cast(ctx, dy, Tensor::Dy, 0), ws = entry_cast(ctx, w, Tensor::W, 1);
    for (std::int64_t r : sel)
      ctx.gemm(1, I, O, M{dys.data() + r * s.out, O}, M{ws.data(), I}, dx.data() + r * s.in, I, true,
               key(Tensor::Row, r, 0));
  }
  for_units(s.n, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.in), n = static_cast<std::size_t>(s.in);
    ctx.result_array(dx.subspan(e0, n), [&](std::size_t j) { return key(Tensor::Dx, e0 + j, 0); },
                     [&](std::size_t j) { return key(Tensor::Dx, e0 + j, 1); });
  });
}

/// dW (out, in) += dyᵀ (out, n) · x (n, in): a reduction over the n tokens. Policy pass BackwardWeight.
template <class A>
void matmul_backward_weight(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                            std::span<const typename A::Value> x, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                    [[maybe_unused]] const Fp8Slots* fp8 = nullptr) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::BackwardWeight, s, dy, x, fp8);
      const std::span<const double> dys = q.a, xs = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, O, I, N, M{dys.data(), O, true}, M{xs.data(), I}, dw.data(), I, true, key(Tensor::Dw, 0, 2));
      for (std::int64_t o : sel)
        quant_gemm(ctx, q, 1, I, N, M{dys.data() + o, O, true}, M{xs.data(), I}, dw.data() + o * s.in, I, true,
                   key(Tensor::Row, o, 0), static_cast<std::size_t>(o));
    }
  }
  if (!quantized && sel.empty()) {  // dy (n, out) read as the (out × n) matrix dyᵀ
    ctx.gemm_in(O, I, N, dy, true, Tensor::Dy, x, false, Tensor::X, dw.data(), I, true, key(Tensor::Dw, 0, 2));
  } else if (!quantized) {
    const std::span<const V> dys = entry_cast(ctx, dy, Tensor::Dy, 0), xs = entry_cast(ctx, x, Tensor::X, 1);
    for (std::int64_t o : sel)
      ctx.gemm(1, I, N, M{dys.data() + o, O, true}, M{xs.data(), I}, dw.data() + o * s.in, I, true,
               key(Tensor::Row, o, 0));
  }
  for_units(s.out, sel, [&](std::int64_t o) {
    const auto e0 = static_cast<std::size_t>(o * s.in), n = static_cast<std::size_t>(s.in);
    ctx.result_array(dw.subspan(e0, n), [&](std::size_t j) { return key(Tensor::Dw, e0 + j, 0); },
                     [&](std::size_t j) { return key(Tensor::Dw, e0 + j, 1); });
  });
}

#define ROUNDOFF_MATMUL_DECL(EXTERN, A)                                                                      \
  EXTERN template void matmul_forward<A>(std::span<A::Value>, std::span<const A::Value>,                     \
                                         std::span<const A::Value>, MatmulShape, const Ctx<A>&, Select, \
                                         const Fp8Slots*);      \
  EXTERN template void matmul_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,               \
                                               std::span<const A::Value>, MatmulShape, const Ctx<A>&, Select, \
                                         const Fp8Slots*); \
  EXTERN template void matmul_backward_weight<A>(std::span<A::Value>, std::span<const A::Value>,             \
                                                 std::span<const A::Value>, MatmulShape, const Ctx<A>&, Select, \
                                         const Fp8Slots*);
ROUNDOFF_MATMUL_DECL(extern, Emulated)
ROUNDOFF_MATMUL_DECL(extern, Reference)

}  // namespace roundoff::ops
