#pragma once
/// \file rmsnorm.hpp
/// RMSNorm: y = x · r · w with r = 1/√(mean(x²) + eps), row-wise over (rows, cols).
///
/// Rounding contract (OpKind::RmsNorm): x, w rounded to storage on entry; Σx² is one dot(x, x) under the
/// Accumulation (so an fp16 accumulator overflows when Σx² > 65504), rounded to compute; then, each rounded
/// to compute: ms = Σx² / C, t = ms + eps, r = rsqrt(t) (one rounding), y = (x·r)·w; y and r → storage.
/// Unit (Select) = one row (forward, backward-data) or one column of dw (backward-weight).
/// Speed: without a Select, the row reductions (Σx², the backward's Σ g·x) and dw's column reductions run as one
/// ctx.dot_rows over all units (independent reductions in SIMD lanes, each with its own order, rounding and key;
/// bit for bit the per-unit dots, tests/ops/row_reduce_ops_test.cpp); the elementwise steps run on row spans
/// (store_array, arith_array / arith_const: the per-element roundings and keys).
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"

namespace roundoff::ops {

/// y (rows, cols), rstd (rows) saved for backward; x (rows, cols), w (cols).
template <class A>
void rmsnorm_forward(std::span<typename A::Value> y, std::span<typename A::Value> rstd,
                     std::span<const typename A::Value> x, std::span<const typename A::Value> w, RowShape s,
                     double eps, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  std::vector<V> xs(x.size()), ws(w.size());
  ctx.in_array(x, xs, Tensor::X);
  ctx.in_array(w, ws, Tensor::W);
  const V n = ctx.c(static_cast<double>(C)), e = ctx.c(eps);
  const bool batched = sel.empty();
  std::vector<V> sums(batched ? static_cast<std::size_t>(s.rows) : 0);
  if (batched) {
    const std::vector<std::size_t> len(sums.size(), static_cast<std::size_t>(C));
    ctx.dot_rows(numerics::BasicRowBatch<V>{len, xs.data(), C, 1, xs.data(), C, 1}, std::span<V>(sums),
                 [](std::size_t r) { return key(Tensor::Row, r, 0); });
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    const V* xr = xs.data() + r * C;
    const V ss = batched ? sums[static_cast<std::size_t>(r)]
                         : ctx.dot(xr, 1, xr, 1, static_cast<std::size_t>(C), key(Tensor::Row, r, 0));
    const V inv = ctx.rsqrt(ctx.add(ctx.div(ss, n, key(Tensor::Row, r, 1)), e, key(Tensor::Row, r, 2)),
                            key(Tensor::Row, r, 3));
    rstd[static_cast<std::size_t>(r)] = ctx.store(inv, key(Tensor::Row, r, 4));
    // y_i = store((x_i·r)·w_i), keys (Y, el, 0–2), on the row's span
    const auto o = static_cast<std::size_t>(r * C), cn = static_cast<std::size_t>(C);
    const auto kf = [o](unsigned slot) { return [o, slot](std::size_t i) { return key(Tensor::Y, o + i, slot); }; };
    thread_local std::vector<V> xr_inv, yw;
    xr_inv.resize(cn);
    yw.resize(cn);
    arith_const(ctx, ArithOp::Mul, std::span<const V>(xr, cn), inv, std::span<V>(xr_inv), kf(0));
    arith_array(ctx, ArithOp::Mul, cspan(xr_inv), cspan(ws), std::span<V>(yw), kf(1));
    ctx.store_array(cspan(yw), y.subspan(o, cn), kf(2));
  });
}

/// dx (rows, cols) += ∂L/∂x given dy (rows, cols), x, w (cols), rstd (rows). Policy pass BackwardData.
///   g_i = w_i·dy_i,  s = Σ_j g_j·x_j (Accumulation),  a = (r·r·r)·s / C,  dx_i += r·g_i − a·x_i.
template <class A>
void rmsnorm_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                           std::span<const typename A::Value> x, std::span<const typename A::Value> w,
                           std::span<const typename A::Value> rstd, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  std::vector<V> xs(x.size()), ws(w.size()), dys(dy.size()), g(dy.size());
  ctx.in_array(x, xs, Tensor::X);
  ctx.in_array(w, ws, Tensor::W);
  ctx.in_array(dy, dys, Tensor::Dy);
  const V n = ctx.c(static_cast<double>(C));
  // g_i = w_i·dy_i, keys (Dx, e, 0), on the row's span
  const auto products = [&](std::int64_t r) {
    const auto o = static_cast<std::size_t>(r * C), cn = static_cast<std::size_t>(C);
    arith_array(ctx, ArithOp::Mul, cspan(ws), std::span<const V>(dys.data() + o, cn), std::span<V>(g.data() + o, cn),
                [o](std::size_t i) { return key(Tensor::Dx, o + i, 0); });
  };
  const bool batched = sel.empty();
  std::vector<V> sums(batched ? static_cast<std::size_t>(s.rows) : 0);
  if (batched) {
    for_units(s.rows, sel, products);
    const std::vector<std::size_t> len(sums.size(), static_cast<std::size_t>(C));
    ctx.dot_rows(numerics::BasicRowBatch<V>{len, g.data(), C, 1, xs.data(), C, 1}, std::span<V>(sums),
                 [](std::size_t r) { return key(Tensor::Row, r, 1); });
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    const std::size_t o = static_cast<std::size_t>(r * C);
    const V inv = ctx.in(rstd[static_cast<std::size_t>(r)], key(Tensor::Row, r, 0));
    if (!batched) products(r);
    const V sg = batched ? sums[static_cast<std::size_t>(r)]
                         : ctx.dot(g.data() + o, 1, xs.data() + o, 1, static_cast<std::size_t>(C), key(Tensor::Row, r, 1));
    const V a = ctx.div(ctx.mul(ctx.mul(ctx.mul(inv, inv, key(Tensor::Row, r, 2)), inv, key(Tensor::Row, r, 3)), sg,
                                key(Tensor::Row, r, 4)),
                        n, key(Tensor::Row, r, 5));
    // dx_i ← store(in(dx_i) + (r·g_i − a·x_i)), keys (Dx, e, 1–6), on the row's span (r and a as left operands)
    const auto cn = static_cast<std::size_t>(C);
    const auto kf = [o](unsigned slot) { return [o, slot](std::size_t i) { return key(Tensor::Dx, o + i, slot); }; };
    thread_local std::vector<V> invs, as, rg, ax, d, di, sum;
    invs.assign(cn, inv);
    as.assign(cn, a);
    for (std::vector<V>* v : {&rg, &ax, &d, &di, &sum}) v->resize(cn);
    const std::span<V> out = dx.subspan(o, cn);
    arith_array(ctx, ArithOp::Mul, cspan(invs), std::span<const V>(g.data() + o, cn), std::span<V>(rg), kf(1));
    arith_array(ctx, ArithOp::Mul, cspan(as), std::span<const V>(xs.data() + o, cn), std::span<V>(ax), kf(2));
    arith_array(ctx, ArithOp::Sub, cspan(rg), cspan(ax), std::span<V>(d), kf(3));
    ctx.store_array(std::span<const V>(out), std::span<V>(di), kf(4));  // in()
    arith_array(ctx, ArithOp::Add, cspan(di), cspan(d), std::span<V>(sum), kf(5));
    ctx.store_array(cspan(sum), out, kf(6));
  });
}

/// dw (cols) += Σ_rows dy ⊙ (x·r): xhat = x·rstd (compute), then one dot over rows per column. Pass
/// BackwardWeight.
template <class A>
void rmsnorm_backward_weight(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                             std::span<const typename A::Value> x, std::span<const typename A::Value> rstd,
                             RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  std::vector<V> xhat(x.size()), dys(dy.size());
  ctx.in_array(dy, dys, Tensor::Dy);
  for_units(s.rows, {}, [&](std::int64_t r) {
    const V inv = ctx.in(rstd[static_cast<std::size_t>(r)], key(Tensor::Row, r, 0));
    // xhat_i = in(x_i)·r, keys (X, e, 0–1), on the row's span
    const auto o = static_cast<std::size_t>(r * C), cn = static_cast<std::size_t>(C);
    thread_local std::vector<V> xi;
    xi.resize(cn);
    ctx.store_array(x.subspan(o, cn), std::span<V>(xi), [o](std::size_t i) { return key(Tensor::X, o + i, 0); });  // in()
    arith_const(ctx, ArithOp::Mul, cspan(xi), inv, std::span<V>(xhat.data() + o, cn),
                [o](std::size_t i) { return key(Tensor::X, o + i, 1); });
  });
  const bool batched = sel.empty();
  std::vector<V> sums(batched ? static_cast<std::size_t>(C) : 0);
  if (batched) {
    const std::vector<std::size_t> len(sums.size(), static_cast<std::size_t>(s.rows));
    ctx.dot_rows(numerics::BasicRowBatch<V>{len, dys.data(), 1, C, xhat.data(), 1, C}, std::span<V>(sums),
                 [](std::size_t i) { return key(Tensor::Column, i, 0); });
  }
  for_units(C, sel, [&](std::int64_t i) {
    const V d = batched ? sums[static_cast<std::size_t>(i)]
                        : ctx.dot(dys.data() + i, C, xhat.data() + i, C, static_cast<std::size_t>(s.rows),
                                  key(Tensor::Column, i, 0));
    V& g = dw[static_cast<std::size_t>(i)];
    g = ctx.store(ctx.add(ctx.in(g, key(Tensor::Dw, i, 0)), d, key(Tensor::Dw, i, 1)), key(Tensor::Dw, i, 2));
  });
}

#define ROUNDOFF_RMSNORM_DECL(EXTERN, A)                                                                        \
  EXTERN template void rmsnorm_forward<A>(std::span<A::Value>, std::span<A::Value>, std::span<const A::Value>,  \
                                          std::span<const A::Value>, RowShape, double, const Ctx<A>&, Select);   \
  EXTERN template void rmsnorm_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                 \
                                                std::span<const A::Value>, std::span<const A::Value>,            \
                                                std::span<const A::Value>, RowShape, const Ctx<A>&, Select);     \
  EXTERN template void rmsnorm_backward_weight<A>(std::span<A::Value>, std::span<const A::Value>,               \
                                                  std::span<const A::Value>, std::span<const A::Value>,          \
                                                  RowShape, const Ctx<A>&, Select);
ROUNDOFF_RMSNORM_DECL(extern, Emulated)
ROUNDOFF_RMSNORM_DECL(extern, Reference)

}  // namespace roundoff::ops
