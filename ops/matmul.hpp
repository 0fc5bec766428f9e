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
/// The reference of each pass (matmul_*_reference, ops/steps.hpp), with C (M × N) the pass's output (y, dx or dW,
/// row-major) and K its contraction length: the operands cast on entry by in() (in_cast: the first slot of each
/// element of X, W, Dy); the call's one GEMM keyed by the third slot of C's element 0 (after that element's two
/// below); per element e = i·N + j of C, on its tensor (Y, Dx, Dw) at e: c = row i of the first operand · column j
/// of the second over k = 0..K−1, the gradient's current value entering the accumulator first in the backward
/// passes, drawing the stream the GEMM gives C_ij (Ctx::gemm_element); then C[e] = store(to_compute(c)).
/// The references state the unquantized contract; a quantized entry's GEMM has its exact model in
/// ops/matmul_quant.hpp (tests/ops/gemm_quant_test.cpp) and the same keys.
///
/// Block quantization (OpPrecision::quant active, emulated backend only): the operands are cast on entry, then
/// transformed and quantized along the pass's contraction axis (ops/matmul_quant.hpp), and the GEMM runs on those
/// values under the same Accumulation, in the same k order (scaled fp8 operands: the exact model of
/// ops/matmul_quant.hpp, quant_gemm); the Reference ignores the field. `fp8`: the per-tensor
/// fp8 scaling state of this call's operands (ops/fp8_scaling.hpp; the Runner passes it).
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "ops/backend.hpp"
#include "ops/matmul_quant.hpp"
#include "ops/shape.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

namespace detail {
/// The per-element reference of one GEMM pass (the file comment): C (M × N, tensor tc) (+= when `add`) A·B with
/// A(i, k) = a[i·a_i + k·a_k] and B(k, j) = b[k·b_k + j·b_j], operands already cast on entry.
template <class A>
void gemm_pass_reference(std::span<typename A::Value> c, const typename A::Value* a, std::ptrdiff_t a_i,
                         std::ptrdiff_t a_k, const typename A::Value* b, std::ptrdiff_t b_k, std::ptrdiff_t b_j,
                         std::size_t M, std::size_t N, std::size_t K, bool add, Tensor tc, const Ctx<A>& ctx) {
  using V = typename A::Value;
  Steps<A> c0(ctx, tc, 0);
  c0.skip();  // element 0's conversion
  c0.skip();  // and its store
  const Key k_gemm = c0.next();
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      const std::size_t e = i * N + j;
      Steps<A> ce(ctx, tc, e);
      const auto ii = static_cast<std::ptrdiff_t>(i), jj = static_cast<std::ptrdiff_t>(j);
      const V acc = ctx.gemm_element(a + ii * a_i, a_k, b + jj * b_j, b_k, K, add, c[e], k_gemm, e);
      c[e] = ce.store(ce.to_compute(acc));
    }
}
/// x cast on entry by in() (in_cast), as tensor t.
template <class A>
std::vector<typename A::Value> cast_all(std::span<const typename A::Value> x, Tensor t, const Ctx<A>& ctx) {
  std::vector<typename A::Value> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = in_cast(ctx, t, i, x[i]);
  return r;
}
}  // namespace detail

/// y (n, out) = x (n, in) · W (out, in)ᵀ: y[i, j] = Σ_k x[i, k]·W[j, k]. The reference (the file comment).
template <class A>
void matmul_forward_reference(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                              std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx) {
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  const auto xs = detail::cast_all(x, Tensor::X, ctx), ws = detail::cast_all(w, Tensor::W, ctx);
  detail::gemm_pass_reference(y, xs.data(), s.in, 1, ws.data(), 1, s.in, N, O, I, false, Tensor::Y, ctx);
}

/// matmul_forward_reference as one GEMM (cast while packing on the kernels' fast path), converted and stored on row
/// spans (result_array). T, the activations' element type (x, y; and dy, dx below): A::Value, or float in binary32
/// storage (Emulated only; the float overloads check Ctx::binary32_storage): the kernels read the floats in place
/// and write the binary32 output as their C (Ctx::gemm_in_binary32, then Ctx::results_binary32), the same bits as the
/// binary64 form; where no kernel takes the product, the tensors are widened into binary64 scratch (slots
/// kWidenA/B/C; ops/backend.hpp) and the outputs narrowed back exactly. TW, the weights' element type: A::Value, or
/// float (a model whose working weights are binary32: the kernels pack them in place, and the pack cache keeps
/// their panels as it keeps a binary64 weight's; elsewhere widened into kWidenB). The weight gradients stay binary64.
template <class A, class T, class TW = typename A::Value>
void matmul_forward_io(std::span<T> y_out, std::span<const T> x_in, std::span<const TW> w_in, MatmulShape s,
                       const Ctx<A>& ctx, Select sel, [[maybe_unused]] const Fp8Slots* fp8) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  if constexpr (std::is_same_v<T, float>) {  // the kernels read x and write y in binary32 (same bits)
    numerics::kernels::StoreScan scan;
    if (sel.empty() && !ctx.precision().quant.active() &&
        ctx.gemm_in_binary32(N, O, I, x_in, false, Tensor::X, w_in, true, Tensor::W, y_out.data(), O, false, &scan)) {
      if (!ctx.results_binary32_kept(scan))
        for_units(s.n, sel, [&](std::int64_t r) { ctx.results_binary32(y_out.subspan(r * s.out, O)); });
      return;
    }
  }
  const std::span<const V> w = widened<V>(w_in, kWidenB);
  const std::span<const V> x = widened<V>(x_in, kWidenA);
  const std::span<V> y = widened_out<V>(y_out, kWidenC, !sel.empty());  // rows not selected keep their values
  SlotSeq Y(Tensor::Y), Row(Tensor::Row);
  const auto k_compute = Y.next(), k_store = Y.next(), k_gemm = Y.next();  // k_gemm(0) keys the GEMM
  const auto k_row_gemm = Row.next();                                      // a selected row's GEMM
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::Forward, s, x, w, fp8);
      const std::span<const double> xs = q.a, ws = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, N, O, I, M{xs.data(), I}, M{ws.data(), I, true}, y.data(), O, false, k_gemm(0));
      for (std::int64_t r : sel)
        quant_gemm(ctx, q, 1, O, I, M{xs.data() + r * s.in, I}, M{ws.data(), I, true}, y.data() + r * s.out, O, false,
                   k_row_gemm(static_cast<std::size_t>(r)), static_cast<std::size_t>(r));
    }
  }
  if (!quantized && sel.empty()) {  // W (out, in) read as the (in × out) matrix Wᵀ
    ctx.gemm_in(N, O, I, x, false, Tensor::X, w, true, Tensor::W, y.data(), O, false, k_gemm(0));
  } else if (!quantized) {
    const std::span<const V> xs = entry_cast(ctx, x, Tensor::X, 0), ws = entry_cast(ctx, w, Tensor::W, 1);
    for (std::int64_t r : sel)
      ctx.gemm(1, O, I, M{xs.data() + r * s.in, I}, M{ws.data(), I, true}, y.data() + r * s.out, O, false,
               k_row_gemm(static_cast<std::size_t>(r)));
  }
  for_units(s.n, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.out), n = static_cast<std::size_t>(s.out);
    ctx.result_array(y.subspan(e0, n), [&](std::size_t j) { return k_compute(e0 + j); },
                     [&](std::size_t j) { return k_store(e0 + j); });
  });
  narrow_into<V>(std::span<const V>(y), y_out);
}

template <class A>
void matmul_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                    std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                    const Fp8Slots* fp8 = nullptr) {
  matmul_forward_io<A, typename A::Value>(y, x, w, s, ctx, sel, fp8);
}

/// dx (n, in) += dy (n, out) · W (out, in): dx[i, j] += Σ_k dy[i, k]·W[k, j]. Policy pass BackwardData. The
/// reference (the file comment).
template <class A>
void matmul_backward_data_reference(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                                    std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx) {
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  const auto dys = detail::cast_all(dy, Tensor::Dy, ctx), ws = detail::cast_all(w, Tensor::W, ctx);
  detail::gemm_pass_reference(dx, dys.data(), s.out, 1, ws.data(), s.in, 1, N, I, O, true, Tensor::Dx, ctx);
}

/// matmul_backward_data_reference as one beta = 1 GEMM, converted and stored on row spans (T as matmul_forward_io).
template <class A, class T, class TW = typename A::Value>
void matmul_backward_data_io(std::span<T> dx_out, std::span<const T> dy_in, std::span<const TW> w_in,
                             MatmulShape s, const Ctx<A>& ctx, Select sel, [[maybe_unused]] const Fp8Slots* fp8) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  if constexpr (std::is_same_v<T, float>) {  // the kernels read dy and add into dx in binary32 (same bits)
    numerics::kernels::StoreScan scan;
    if (sel.empty() && !ctx.precision().quant.active() &&
        ctx.gemm_in_binary32(N, I, O, dy_in, false, Tensor::Dy, w_in, false, Tensor::W, dx_out.data(), I, true,
                             &scan)) {
      if (!ctx.results_binary32_kept(scan))
        for_units(s.n, sel, [&](std::int64_t r) { ctx.results_binary32(dx_out.subspan(r * s.in, I)); });
      return;
    }
  }
  const std::span<const V> w = widened<V>(w_in, kWidenB);
  const std::span<const V> dy = widened<V>(dy_in, kWidenA);
  const std::span<V> dx = widened_out<V>(dx_out, kWidenC, true);
  SlotSeq Dx(Tensor::Dx), Row(Tensor::Row);
  const auto k_compute = Dx.next(), k_store = Dx.next(), k_gemm = Dx.next();  // k_gemm(0) keys the GEMM
  const auto k_row_gemm = Row.next();                                         // a selected row's GEMM
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::BackwardData, s, dy, w, fp8);
      const std::span<const double> dys = q.a, ws = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, N, I, O, M{dys.data(), O}, M{ws.data(), I}, dx.data(), I, true, k_gemm(0));
      for (std::int64_t r : sel)
        quant_gemm(ctx, q, 1, I, O, M{dys.data() + r * s.out, O}, M{ws.data(), I}, dx.data() + r * s.in, I, true,
                   k_row_gemm(static_cast<std::size_t>(r)), static_cast<std::size_t>(r));
    }
  }
  if (!quantized && sel.empty()) {
    ctx.gemm_in(N, I, O, dy, false, Tensor::Dy, w, false, Tensor::W, dx.data(), I, true, k_gemm(0));
  } else if (!quantized) {
    const std::span<const V> dys = entry_cast(ctx, dy, Tensor::Dy, 0), ws = entry_cast(ctx, w, Tensor::W, 1);
    for (std::int64_t r : sel)
      ctx.gemm(1, I, O, M{dys.data() + r * s.out, O}, M{ws.data(), I}, dx.data() + r * s.in, I, true,
               k_row_gemm(static_cast<std::size_t>(r)));
  }
  for_units(s.n, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.in), n = static_cast<std::size_t>(s.in);
    ctx.result_array(dx.subspan(e0, n), [&](std::size_t j) { return k_compute(e0 + j); },
                     [&](std::size_t j) { return k_store(e0 + j); });
  });
  narrow_into<V>(std::span<const V>(dx), dx_out);
}

template <class A>
void matmul_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                          std::span<const typename A::Value> w, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                          const Fp8Slots* fp8 = nullptr) {
  matmul_backward_data_io<A, typename A::Value>(dx, dy, w, s, ctx, sel, fp8);
}

/// dW (out, in) += dyᵀ (out, n) · x (n, in): dW[o, i] += Σ_k dy[k, o]·x[k, i], a reduction over the n tokens.
/// Policy pass BackwardWeight. The reference (the file comment).
template <class A>
void matmul_backward_weight_reference(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                                      std::span<const typename A::Value> x, MatmulShape s, const Ctx<A>& ctx) {
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  const auto dys = detail::cast_all(dy, Tensor::Dy, ctx), xs = detail::cast_all(x, Tensor::X, ctx);
  detail::gemm_pass_reference(dw, dys.data(), 1, s.out, xs.data(), s.in, 1, O, I, N, true, Tensor::Dw, ctx);
}

/// matmul_backward_weight_reference as one beta = 1 GEMM, converted and stored on row spans (T as
/// matmul_forward_io: dy and x; TD: dW's element type, binary64 or, for binary32 weight gradients, float).
template <class A, class T, class TD = typename A::Value>
void matmul_backward_weight_io(std::span<TD> dw_out, std::span<const T> dy_in, std::span<const T> x_in,
                               MatmulShape s, const Ctx<A>& ctx, Select sel, [[maybe_unused]] const Fp8Slots* fp8) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  if constexpr (std::is_same_v<T, float> && std::is_same_v<TD, float>) {  // dyᵀ·x added into dW in binary32
    numerics::kernels::StoreScan scan;
    if (sel.empty() && !ctx.precision().quant.active() &&
        ctx.gemm_in_binary32(O, I, N, dy_in, true, Tensor::Dy, x_in, false, Tensor::X, dw_out.data(), I, true,
                             &scan)) {
      if (!ctx.results_binary32_kept(scan))
        for_units(s.out, sel, [&](std::int64_t o) { ctx.results_binary32(dw_out.subspan(o * s.in, I)); });
      return;
    }
  }
  const std::span<V> dw = widened_out<V>(dw_out, kWidenC, true);
  SlotSeq Dw(Tensor::Dw), Row(Tensor::Row);
  const auto k_compute = Dw.next(), k_store = Dw.next(), k_gemm = Dw.next();  // k_gemm(0) keys the GEMM
  const auto k_row_gemm = Row.next();                                         // a selected row's GEMM
  bool quantized = false;
  if constexpr (std::is_same_v<A, Emulated>) {
    if (ctx.precision().quant.active()) {
      const std::span<const V> dy = widened<V>(dy_in, kWidenA), x = widened<V>(x_in, kWidenB);
      quantized = true;
      const QuantOperands q = quantized_operands(ctx, Pass::BackwardWeight, s, dy, x, fp8);
      const std::span<const double> dys = q.a, xs = q.b;
      if (sel.empty())
        quant_gemm(ctx, q, O, I, N, M{dys.data(), O, true}, M{xs.data(), I}, dw.data(), I, true, k_gemm(0));
      for (std::int64_t o : sel)
        quant_gemm(ctx, q, 1, I, N, M{dys.data() + o, O, true}, M{xs.data(), I}, dw.data() + o * s.in, I, true,
                   k_row_gemm(static_cast<std::size_t>(o)), static_cast<std::size_t>(o));
    }
  }
  if (!quantized && sel.empty()) {  // dy (n, out) read as the (out × n) matrix dyᵀ (binary32 read in place)
    ctx.gemm_in(O, I, N, dy_in, true, Tensor::Dy, x_in, false, Tensor::X, dw.data(), I, true, k_gemm(0));
  } else if (!quantized) {
    const std::span<const V> dy = widened<V>(dy_in, kWidenA), x = widened<V>(x_in, kWidenB);
    const std::span<const V> dys = entry_cast(ctx, dy, Tensor::Dy, 0), xs = entry_cast(ctx, x, Tensor::X, 1);
    for (std::int64_t o : sel)
      ctx.gemm(1, I, N, M{dys.data() + o, O, true}, M{xs.data(), I}, dw.data() + o * s.in, I, true,
               k_row_gemm(static_cast<std::size_t>(o)));
  }
  for_units(s.out, sel, [&](std::int64_t o) {
    const auto e0 = static_cast<std::size_t>(o * s.in), n = static_cast<std::size_t>(s.in);
    ctx.result_array(dw.subspan(e0, n), [&](std::size_t j) { return k_compute(e0 + j); },
                     [&](std::size_t j) { return k_store(e0 + j); });
  });
  narrow_into<V>(std::span<const V>(dw), dw_out);
}

template <class A>
void matmul_backward_weight(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                            std::span<const typename A::Value> x, MatmulShape s, const Ctx<A>& ctx, Select sel = {},
                            const Fp8Slots* fp8 = nullptr) {
  matmul_backward_weight_io<A, typename A::Value>(dw, dy, x, s, ctx, sel, fp8);
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

// The GEMM passes on activations in binary32 storage (issue 45, typed storage), and on binary32 weights (a model
// whose working weights are binary32) at either activation width; dW binary64 or binary32.
void matmul_forward(std::span<float> y, std::span<const float> x, std::span<const double> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_forward(std::span<float> y, std::span<const float> x, std::span<const float> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_forward(std::span<double> y, std::span<const double> x, std::span<const float> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const double> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_backward_data(std::span<double> dx, std::span<const double> dy, std::span<const float> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_backward_weight(std::span<double> dw, std::span<const float> dy, std::span<const float> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
// Binary32 weight gradients (dW in binary32 storage: the gradient role's format fits binary32), activations of either
// width: the binary32 activations' GEMM adds into dW in binary32 (Ctx::gemm_in_binary32, results_binary32).
void matmul_backward_weight(std::span<float> dw, std::span<const float> dy, std::span<const float> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);
void matmul_backward_weight(std::span<float> dw, std::span<const double> dy, std::span<const double> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel = {}, const Fp8Slots* fp8 = nullptr);

}  // namespace roundoff::ops
