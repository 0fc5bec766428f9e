#pragma once
/// \file activation.hpp
/// SiLU (OpKind::Silu) and the SwiGLU gate product (OpKind::SwiGlu): h = silu(g) ⊙ u.
///
/// Rounding contract: inputs rounded to storage on entry; σ(x) is one correctly rounded elementary
/// function in compute; every other step one rounding to compute; outputs stored. Backward adds into
/// gradients. Elementwise over n = rows·cols; unit (Select) = one row.
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"

namespace roundoff::ops {

/// y = x·σ(x), y and x (rows, cols). Row by row on the span forms (ops/span_arith.hpp, Ctx::sigmoid_array): per
/// element in(x) [X, e, 0], s = σ(x) [Y, e, 0], x·s [Y, e, 1], store [Y, e, 2], the roundings and keys of the
/// per-element definition.
template <class A>
void silu_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx,
                  Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> xs, sg, p;
    xs.resize(n);
    sg.resize(n);
    p.resize(n);
    ctx.store_array(x.subspan(e0, n), xs, k(Tensor::X, 0));
    ctx.sigmoid_array(cspan(xs), sg, k(Tensor::Y, 0));
    arith_array(ctx, ArithOp::Mul, cspan(xs), cspan(sg), std::span<V>(p), k(Tensor::Y, 1));
    ctx.store_array(cspan(p), y.subspan(e0, n), k(Tensor::Y, 2));
  });
}

/// dx += dy·σ(x)·(1 + x·(1 − σ(x))). Pass BackwardData. Row by row on the span forms, per element: in(x)
/// [X, e, 0], s = σ(x) [Dx, e, 0], 1 − s [Dx, e, 1], x·(1 − s) [Dx, e, 2], t = 1 + x·(1 − s) [Dx, e, 3],
/// in(dy) [Dy, e, 0], dy·s [Dx, e, 4], (dy·s)·t [Dx, e, 5], in(dx) [Dx, e, 6], the sum [Dx, e, 7], store [Dx, e, 8].
template <class A>
void silu_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> xs, sg, one, a, b, t;
    xs.resize(n);
    sg.resize(n);
    a.resize(n);
    b.resize(n);
    t.resize(n);
    one.assign(n, ctx.c(1.0));
    ctx.store_array(x.subspan(e0, n), xs, k(Tensor::X, 0));
    ctx.sigmoid_array(cspan(xs), sg, k(Tensor::Dx, 0));
    arith_array(ctx, ArithOp::Sub, cspan(one), cspan(sg), std::span<V>(a), k(Tensor::Dx, 1));
    arith_array(ctx, ArithOp::Mul, cspan(xs), cspan(a), std::span<V>(b), k(Tensor::Dx, 2));
    arith_array(ctx, ArithOp::Add, cspan(one), cspan(b), std::span<V>(t), k(Tensor::Dx, 3));
    ctx.store_array(dy.subspan(e0, n), a, k(Tensor::Dy, 0));
    arith_array(ctx, ArithOp::Mul, cspan(a), cspan(sg), std::span<V>(b), k(Tensor::Dx, 4));
    arith_array(ctx, ArithOp::Mul, cspan(b), cspan(t), std::span<V>(a), k(Tensor::Dx, 5));
    ctx.store_array(std::span<const V>(dx.subspan(e0, n)), b, k(Tensor::Dx, 6));
    arith_array(ctx, ArithOp::Add, cspan(b), cspan(a), std::span<V>(t), k(Tensor::Dx, 7));
    ctx.store_array(cspan(t), dx.subspan(e0, n), k(Tensor::Dx, 8));
  });
}

/// h = a ⊙ u (a = silu(gate)), all (rows, cols). Row by row on the span forms (ops/span_arith.hpp), the
/// same roundings with the same keys as the per-element definition (the entry casts in(·) through store_array:
/// in and store are the same rounding).
template <class A>
void swiglu_forward(std::span<typename A::Value> h, std::span<const typename A::Value> a,
                    std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> as, us, p;
    as.resize(n);
    us.resize(n);
    p.resize(n);
    ctx.store_array(a.subspan(e0, n), as, k(Tensor::X, 0));
    ctx.store_array(u.subspan(e0, n), us, k(Tensor::X2, 0));
    arith_array(ctx, ArithOp::Mul, cspan(as), cspan(us), std::span<V>(p), k(Tensor::Y, 0));
    ctx.store_array(cspan(p), h.subspan(e0, n), k(Tensor::Y, 1));
  });
}

/// da += dh ⊙ u, du += dh ⊙ a. Pass BackwardData. Row by row on the span forms, as swiglu_forward.
template <class A>
void swiglu_backward_data(std::span<typename A::Value> da, std::span<typename A::Value> du,
                          std::span<const typename A::Value> dh, std::span<const typename A::Value> a,
                          std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> g, x, d, p;
    g.resize(n);
    x.resize(n);
    d.resize(n);
    p.resize(n);
    ctx.store_array(dh.subspan(e0, n), g, k(Tensor::Dy, 0));
    // da = store(in(da) + g·in(u))
    ctx.store_array(u.subspan(e0, n), x, k(Tensor::X2, 0));
    ctx.store_array(std::span<const V>(da.subspan(e0, n)), d, k(Tensor::Dx, 0));
    arith_array(ctx, ArithOp::Mul, cspan(g), cspan(x), std::span<V>(p), k(Tensor::Dx, 1));
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(p), std::span<V>(x), k(Tensor::Dx, 2));
    ctx.store_array(cspan(x), da.subspan(e0, n), k(Tensor::Dx, 3));
    // du = store(in(du) + g·in(a))
    ctx.store_array(a.subspan(e0, n), x, k(Tensor::X, 0));
    ctx.store_array(std::span<const V>(du.subspan(e0, n)), d, k(Tensor::Dx2, 0));
    arith_array(ctx, ArithOp::Mul, cspan(g), cspan(x), std::span<V>(p), k(Tensor::Dx2, 1));
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(p), std::span<V>(x), k(Tensor::Dx2, 2));
    ctx.store_array(cspan(x), du.subspan(e0, n), k(Tensor::Dx2, 3));
  });
}

#define ROUNDOFF_ACTIVATION_DECL(EXTERN, A)                                                                        \
  EXTERN template void silu_forward<A>(std::span<A::Value>, std::span<const A::Value>, RowShape, const Ctx<A>&,     \
                                       Select);                                                                     \
  EXTERN template void silu_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                       \
                                             std::span<const A::Value>, RowShape, const Ctx<A>&, Select);           \
  EXTERN template void swiglu_forward<A>(std::span<A::Value>, std::span<const A::Value>, std::span<const A::Value>, \
                                         RowShape, const Ctx<A>&, Select);                                          \
  EXTERN template void swiglu_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                           \
                                               std::span<const A::Value>, std::span<const A::Value>,                \
                                               std::span<const A::Value>, RowShape, const Ctx<A>&, Select);
ROUNDOFF_ACTIVATION_DECL(extern, Emulated)
ROUNDOFF_ACTIVATION_DECL(extern, Reference)

}  // namespace roundoff::ops
