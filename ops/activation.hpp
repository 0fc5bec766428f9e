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

/// y = x·σ(x), y and x (rows, cols).
template <class A>
void silu_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx,
                  Select sel = {}) {
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto xi = ctx.in(x[e], key(Tensor::X, e, 0));
      y[e] = ctx.store(ctx.mul(xi, ctx.sigmoid(xi, key(Tensor::Y, e, 0)), key(Tensor::Y, e, 1)), key(Tensor::Y, e, 2));
    }
  });
}

/// dx += dy·σ(x)·(1 + x·(1 − σ(x))). Pass BackwardData.
template <class A>
void silu_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  const auto one = ctx.c(1.0);
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto xi = ctx.in(x[e], key(Tensor::X, e, 0));
      const auto sg = ctx.sigmoid(xi, key(Tensor::Dx, e, 0));
      const auto t = ctx.add(one, ctx.mul(xi, ctx.sub(one, sg, key(Tensor::Dx, e, 1)), key(Tensor::Dx, e, 2)),
                             key(Tensor::Dx, e, 3));
      const auto d = ctx.mul(ctx.mul(ctx.in(dy[e], key(Tensor::Dy, e, 0)), sg, key(Tensor::Dx, e, 4)), t,
                             key(Tensor::Dx, e, 5));
      dx[e] = ctx.store(ctx.add(ctx.in(dx[e], key(Tensor::Dx, e, 6)), d, key(Tensor::Dx, e, 7)), key(Tensor::Dx, e, 8));
    }
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
