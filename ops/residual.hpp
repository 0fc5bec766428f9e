#pragma once
/// \file residual.hpp
/// Residual add with a branch scale α: out = x + α·f (OpKind::ResidualAttn or ResidualFfn — same code,
/// the caller passes the context of the site's policy entry).
///
/// Rounding contract: x, f rounded to storage on entry; α·f (skipped when α = 1) and the sum each one
/// rounding to compute; out stored. This is where swamping happens: when |x| ≫ |α·f| the add keeps only the
/// part of α·f above x's last place. out may alias x. Backward: dx += dout, df += α·dout (adds into both).
/// Unit (Select) = one row.
#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"

namespace roundoff::ops {

/// out, x, f (rows, cols). Row by row on the span forms (ops/span_arith.hpp), the same roundings with the
/// same keys as the per-element definition.
template <class A>
void residual_forward(std::span<typename A::Value> out, std::span<const typename A::Value> x,
                      std::span<const typename A::Value> f, double alpha, RowShape s, const Ctx<A>& ctx,
                      Select sel = {}) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> fs, xs, t;
    fs.resize(n);
    xs.resize(n);
    t.resize(n);
    ctx.store_array(f.subspan(e0, n), fs, k(Tensor::X2, 0));
    if (alpha != 1.0) {
      std::fill(t.begin(), t.end(), a);
      arith_array(ctx, ArithOp::Mul, cspan(t), cspan(fs), std::span<V>(xs), k(Tensor::Y, 0));
      std::swap(fs, xs);
    }
    ctx.store_array(x.subspan(e0, n), xs, k(Tensor::X, 0));
    arith_array(ctx, ArithOp::Add, cspan(xs), cspan(fs), std::span<V>(t), k(Tensor::Y, 1));
    ctx.store_array(cspan(t), out.subspan(e0, n), k(Tensor::Y, 2));
  });
}

/// dx += dout, df += α·dout. Pass BackwardData. Row by row on the span forms, as residual_forward.
template <class A>
void residual_backward_data(std::span<typename A::Value> dx, std::span<typename A::Value> df,
                            std::span<const typename A::Value> dout, double alpha, RowShape s, const Ctx<A>& ctx,
                            Select sel = {}) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    const auto k = [e0](Tensor tensor, unsigned slot) { return [e0, tensor, slot](std::size_t i) { return key(tensor, e0 + i, slot); }; };
    thread_local std::vector<V> g, d, t, gf;
    g.resize(n);
    d.resize(n);
    t.resize(n);
    gf.resize(n);
    ctx.store_array(dout.subspan(e0, n), g, k(Tensor::Dy, 0));
    ctx.store_array(std::span<const V>(dx.subspan(e0, n)), d, k(Tensor::Dx, 0));
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(g), std::span<V>(t), k(Tensor::Dx, 1));
    ctx.store_array(cspan(t), dx.subspan(e0, n), k(Tensor::Dx, 2));
    if (alpha != 1.0) {
      std::fill(t.begin(), t.end(), a);
      arith_array(ctx, ArithOp::Mul, cspan(t), cspan(g), std::span<V>(gf), k(Tensor::Dx2, 0));
    } else {
      gf = g;
    }
    ctx.store_array(std::span<const V>(df.subspan(e0, n)), d, k(Tensor::Dx2, 1));
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(gf), std::span<V>(t), k(Tensor::Dx2, 2));
    ctx.store_array(cspan(t), df.subspan(e0, n), k(Tensor::Dx2, 3));
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
