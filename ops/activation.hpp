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

/// h = a ⊙ u (a = silu(gate)), all (rows, cols).
template <class A>
void swiglu_forward(std::span<typename A::Value> h, std::span<const typename A::Value> a,
                    std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      h[e] = ctx.store(ctx.mul(ctx.in(a[e], key(Tensor::X, e, 0)), ctx.in(u[e], key(Tensor::X2, e, 0)), key(Tensor::Y, e, 0)),
                       key(Tensor::Y, e, 1));
    }
  });
}

/// da += dh ⊙ u, du += dh ⊙ a. Pass BackwardData.
template <class A>
void swiglu_backward_data(std::span<typename A::Value> da, std::span<typename A::Value> du,
                          std::span<const typename A::Value> dh, std::span<const typename A::Value> a,
                          std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto g = ctx.in(dh[e], key(Tensor::Dy, e, 0));
      da[e] = ctx.store(ctx.add(ctx.in(da[e], key(Tensor::Dx, e, 0)),
                                ctx.mul(g, ctx.in(u[e], key(Tensor::X2, e, 0)), key(Tensor::Dx, e, 1)), key(Tensor::Dx, e, 2)),
                        key(Tensor::Dx, e, 3));
      du[e] = ctx.store(ctx.add(ctx.in(du[e], key(Tensor::Dx2, e, 0)),
                                ctx.mul(g, ctx.in(a[e], key(Tensor::X, e, 0)), key(Tensor::Dx2, e, 1)), key(Tensor::Dx2, e, 2)),
                        key(Tensor::Dx2, e, 3));
    }
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
