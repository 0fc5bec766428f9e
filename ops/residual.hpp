#pragma once
/// \file residual.hpp
/// Residual add with a branch scale α: out = x + α·f (OpKind::ResidualAttn or ResidualFfn — same code,
/// the caller passes the context of the site's policy entry).
///
/// Rounding contract: x, f rounded to storage on entry; α·f (skipped when α = 1) and the sum each one
/// rounding to compute; out stored. This is where swamping happens: when |x| ≫ |α·f| the add keeps only the
/// part of α·f above x's last place. out may alias x. Backward: dx += dout, df += α·dout (adds into both).
/// Unit (Select) = one row.
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// out, x, f (rows, cols).
template <class A>
void residual_forward(std::span<typename A::Value> out, std::span<const typename A::Value> x,
                      std::span<const typename A::Value> f, double alpha, RowShape s, const Ctx<A>& ctx,
                      Select sel = {}) {
  const auto a = ctx.c(alpha);
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      auto fi = ctx.in(f[e], key(Tensor::X2, e, 0));
      if (alpha != 1.0) fi = ctx.mul(a, fi, key(Tensor::Y, e, 0));
      out[e] = ctx.store(ctx.add(ctx.in(x[e], key(Tensor::X, e, 0)), fi, key(Tensor::Y, e, 1)), key(Tensor::Y, e, 2));
    }
  });
}

/// dx += dout, df += α·dout. Pass BackwardData.
template <class A>
void residual_backward_data(std::span<typename A::Value> dx, std::span<typename A::Value> df,
                            std::span<const typename A::Value> dout, double alpha, RowShape s, const Ctx<A>& ctx,
                            Select sel = {}) {
  const auto a = ctx.c(alpha);
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto g = ctx.in(dout[e], key(Tensor::Dy, e, 0));
      dx[e] = ctx.store(ctx.add(ctx.in(dx[e], key(Tensor::Dx, e, 0)), g, key(Tensor::Dx, e, 1)), key(Tensor::Dx, e, 2));
      const auto gf = alpha != 1.0 ? ctx.mul(a, g, key(Tensor::Dx2, e, 0)) : g;
      df[e] = ctx.store(ctx.add(ctx.in(df[e], key(Tensor::Dx2, e, 1)), gf, key(Tensor::Dx2, e, 2)), key(Tensor::Dx2, e, 3));
    }
  });
}

#define ROUNDOFF_RESIDUAL_DECL(EXTERN, A)                                                                       \
  EXTERN template void residual_forward<A>(std::span<A::Value>, std::span<const A::Value>,                       \
                                           std::span<const A::Value>, double, RowShape, const Ctx<A>&, Select);   \
  EXTERN template void residual_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                      \
                                                 std::span<const A::Value>, double, RowShape, const Ctx<A>&,      \
                                                 Select);
ROUNDOFF_RESIDUAL_DECL(extern, Emulated)
ROUNDOFF_RESIDUAL_DECL(extern, Reference)

}  // namespace roundoff::ops
