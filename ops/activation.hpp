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
      const std::uint64_t k = e * kSlots;
      const auto xi = ctx.in(x[e], k);
      y[e] = ctx.store(ctx.mul(xi, ctx.sigmoid(xi, k + 1), k + 2), k + 3);
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
      const std::uint64_t k = e * kSlots;
      const auto xi = ctx.in(x[e], k);
      const auto sg = ctx.sigmoid(xi, k + 1);
      const auto t = ctx.add(one, ctx.mul(xi, ctx.sub(one, sg, k + 2), k + 3), k + 4);
      const auto d = ctx.mul(ctx.mul(ctx.in(dy[e], k + 5), sg, k + 6), t, k + 7);
      dx[e] = ctx.store(ctx.add(ctx.in(dx[e], k + 8), d, k + 9), k + 10);
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
      const std::uint64_t k = e * kSlots;
      h[e] = ctx.store(ctx.mul(ctx.in(a[e], k), ctx.in(u[e], k + 1), k + 2), k + 3);
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
      const std::uint64_t k = e * kSlots;
      const auto g = ctx.in(dh[e], k);
      da[e] = ctx.store(ctx.add(ctx.in(da[e], k + 1), ctx.mul(g, ctx.in(u[e], k + 2), k + 3), k + 4), k + 5);
      du[e] = ctx.store(ctx.add(ctx.in(du[e], k + 6), ctx.mul(g, ctx.in(a[e], k + 7), k + 8), k + 9), k + 10);
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
