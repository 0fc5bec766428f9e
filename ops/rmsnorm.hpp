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
#include <vector>

#include "numerics/binary32_values.hpp"
#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

// Each pass: the scalar reference (one Steps per tensor element, ops/steps.hpp) and the body, which takes its key
// functions from SlotSeqs in the reference's order; tests/ops/reference_test.cpp compares the two.

/// y (rows, cols), rstd (rows) saved for backward; x (rows, cols), w (cols). The reference, per row r (entry casts
/// in(x) [X], in(w) [W]): on Row at r: ss = Σ_j x_j² (dot), ms = ss / C, t = ms + eps, inv = rsqrt(t),
/// rstd = store(inv); then per element e = (r, j), on Y at e: y = store((x_j·inv)·w_j).
template <class A>
void rmsnorm_forward_reference(std::span<typename A::Value> y, std::span<typename A::Value> rstd,
                               std::span<const typename A::Value> x, std::span<const typename A::Value> w, RowShape s,
                               double eps, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto C = static_cast<std::size_t>(s.cols);
  std::vector<V> xs(x.size()), ws(w.size());
  for (std::size_t e = 0; e < x.size(); ++e) xs[e] = in_cast(ctx, Tensor::X, e, x[e]);
  for (std::size_t j = 0; j < C; ++j) ws[j] = in_cast(ctx, Tensor::W, j, w[j]);
  const V n = ctx.c(static_cast<double>(C)), ep = ctx.c(eps);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    const V* xr = xs.data() + r * C;
    Steps<A> row(ctx, Tensor::Row, r);
    const V ss = row.dot(xr, 1, xr, 1, C);
    const V ms = row.div(ss, n);
    const V inv = row.rsqrt(row.add(ms, ep));
    rstd[r] = row.store(inv);
    for (std::size_t j = 0; j < C; ++j) {
      Steps<A> ye(ctx, Tensor::Y, r * C + j);
      const V xn = ye.mul(xr[j], inv);
      y[r * C + j] = ye.store(ye.mul(xn, ws[j]));
    }
  }
}

namespace detail {
// The binary32 bodies of the normalisation's elementwise steps (Ctx::binary32_through): the reference's steps on one
// row in hardware binary32 (the entry casts and stores return their values; the row's reduction and its scalar
// steps stay as they are); false, nothing written, when a stored value would be NaN.

/// out[r] = the binary32 chain of row r (numerics::binary32_chain_rows; y null: the sum), widened; false, out
/// untouched, when some result is NaN (the caller's dot_rows then takes every row).
/// Blocks of 64 rows split over the threads (independent chains: the same bits on any thread count).
inline bool chain_rows32(const Ctx<Emulated>& ctx, std::span<const std::size_t> len, const float* x, std::int64_t x_row,
                         const float* y, std::int64_t y_row, std::span<double> out) {
  thread_local std::vector<float> r32;  // rows
  r32.resize(out.size());
  constexpr std::size_t kBlock = 64;
  const std::size_t R = out.size();
  float* const rows = r32.data();
  for_units(static_cast<std::int64_t>((R + kBlock - 1) / kBlock), {}, [&](std::int64_t b) {
    const std::size_t r0 = static_cast<std::size_t>(b) * kBlock, n = std::min(kBlock, R - r0);
    const auto off = static_cast<std::ptrdiff_t>(r0);
    numerics::binary32_chain_rows(len.subspan(r0, n), x + off * x_row, x_row, y ? y + off * y_row : nullptr, y_row,
                                  std::span<float>(rows + r0, n), ctx.exec().kernels);
  });
  if (numerics::any_nan(cspan(r32), ctx.exec().kernels)) return false;
  std::copy(r32.begin(), r32.end(), out.begin());
  return true;
}

/// rmsnorm_backward_weight on binary32 tensors under Ctx::binary32_chain: xhat = x·r row by row and the column dots
/// Σ_r dy·xhat as binary32 chains (numerics::binary32_chain_columns), then dw = store(dw + d) in binary32; false,
/// nothing written, when xhat, a dot or a new dw would hold a NaN (the binary64 form then runs the call).
inline bool rmsnorm_backward_weight32(std::span<float> dw, std::span<const float> dy, std::span<const float> x,
                                      std::span<const float> rstd, RowShape s, const Ctx<Emulated>& ctx) {
  const auto C = static_cast<std::size_t>(s.cols), R = static_cast<std::size_t>(s.rows);
  thread_local std::vector<float> xhat, d;  // R × C, C
  xhat.resize(R * C);
  d.resize(C);
  for (std::size_t r = 0; r < R; ++r)  // xhat = x·r (the reference's x·inv)
    arith_binary32(ctx, ArithOp::Mul, x.subspan(r * C, C), rstd.subspan(r, 1),
                   std::span<float>(xhat.data() + r * C, C));
  if (numerics::any_nan(cspan(xhat), ctx.exec().kernels)) return false;
  numerics::binary32_chain_columns(R, dy.data(), xhat.data(), C, d, ctx.exec().kernels);  // d_i = Σ_r dy·xhat
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(dw), cspan(d), d);              // dw + d
  return store_binary32(ctx, {{cspan(d), dw}});
}

/// y = (x·r)·w on one row.
inline bool rmsnorm_scale_row32(std::span<float> y, std::span<const float> x, std::span<const float> w, float r,
                                const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> xr, yw;  // C
  xr.resize(x.size());
  yw.resize(x.size());
  arith_binary32(ctx, ArithOp::Mul, x, std::span(&r, 1), xr);  // x·r (r the left operand: the product commutes)
  arith_binary32(ctx, ArithOp::Mul, cspan(xr), w, yw);          // (x·r)·w
  return store_binary32(ctx, {{cspan(yw), y}});
}

/// dx = store(dx + (r·g − a·x)) on one row.
inline bool rmsnorm_backward_row32(std::span<float> dx, std::span<const float> g, std::span<const float> x, float r,
                                   float a, const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> rg, ax;  // C
  rg.resize(x.size());
  ax.resize(x.size());
  arith_binary32(ctx, ArithOp::Mul, g, std::span(&r, 1), rg);               // r·g
  arith_binary32(ctx, ArithOp::Mul, x, std::span(&a, 1), ax);                // a·x
  arith_binary32(ctx, ArithOp::Sub, cspan(rg), cspan(ax), rg);               // d = r·g − a·x
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(dx), cspan(rg), ax);  // dx + d
  return store_binary32(ctx, {{cspan(ax), dx}});
}
}  // namespace detail

/// rmsnorm_forward_reference with the row reductions as one ctx.dot_rows (without a Select) and the elementwise
/// steps on row spans. T, the tensors' element type: A::Value, or float for tensors in binary32 storage (Emulated
/// only; the float overloads below check Ctx::binary32_storage first): loads widen and stores narrow exactly, so
/// the values are the binary64 tensors' (ops/activation.hpp, silu_forward_io).
template <class A, class T>
void rmsnorm_forward_io(std::span<T> y, std::span<T> rstd, std::span<const T> x, std::span<const T> w, RowShape s,
                        double eps, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  const auto cn = static_cast<std::size_t>(C);
  [[maybe_unused]] const bool through = binary32_through<A, T>(ctx, {x, w});
  // The entry casts in scratch_buffer slots 0 and 1 (no allocation, zeroing and page faults per call). Under
  // binary32_through x is cast only where the binary64 form reads it, a row at a time (a cast there returns each
  // non-NaN value as it is and a NaN by the NaN rule, whatever the key: the whole cast's values, row by row).
  const std::span<V> xs = scratch_buffer<V>(x.size(), 0), ws = scratch_buffer<V>(w.size(), 1);
  bool x_cast = !through;  // xs holds every row's cast
  if (x_cast) ctx.in_array(x, xs, Tensor::X);
  ctx.in_array(w, ws, Tensor::W);
  const auto cast_row = [&](std::size_t o) {
    if (!x_cast) ctx.in_array(x.subspan(o, cn), xs.subspan(o, cn), Tensor::X);
  };
  const V n = ctx.c(static_cast<double>(C)), e = ctx.c(eps);
  SlotSeq Row(Tensor::Row);
  const auto k_ss = Row.next(), k_ms = Row.next(), k_t = Row.next(), k_inv = Row.next(), k_rstd = Row.next();
  const bool batched = sel.empty();
  std::vector<V> sums(batched ? static_cast<std::size_t>(s.rows) : 0);
  if (batched) {
    const std::vector<std::size_t> len(sums.size(), cn);
    bool summed = false;
    if constexpr (kBinary32Body<A, T>)  // the sums of squares as binary32 chains on x itself, when none is NaN
      summed = binary32_chain<A, T>(ctx) && detail::chain_rows32(ctx, len, x.data(), C, x.data(), C, sums);
    if (!summed) {
      if (!x_cast) ctx.in_array(x, xs, Tensor::X);
      x_cast = true;
      ctx.dot_rows(numerics::BasicRowBatch<V>{len, xs.data(), C, 1, xs.data(), C, 1}, std::span<V>(sums), k_ss);
    }
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    const V* xr = xs.data() + r * C;
    const auto ri = static_cast<std::size_t>(r), o = static_cast<std::size_t>(r * C);
    if (!batched) cast_row(o);
    const V ss = batched ? sums[ri] : ctx.dot(xr, 1, xr, 1, cn, k_ss(ri));
    const V inv = ctx.rsqrt(ctx.add(ctx.div(ss, n, k_ms(ri)), e, k_t(ri)), k_inv(ri));
    rstd[ri] = static_cast<T>(ctx.store(inv, k_rstd(ri)));  // exact: a value of storage
    // y_i = store((x_i·r)·w_i) on the row's span
    if constexpr (kBinary32Body<A, T>)
      if (through && detail::rmsnorm_scale_row32(y.subspan(o, cn), x.subspan(o, cn), w, static_cast<float>(inv), ctx))
        return;
    if (batched) cast_row(o);
    SlotSeq Y(Tensor::Y, o);
    const auto k_xn = Y.next(), k_mul = Y.next(), k_store = Y.next();
    thread_local std::vector<V> xr_inv, yw;
    xr_inv.resize(cn);
    yw.resize(cn);
    arith_const(ctx, ArithOp::Mul, std::span<const V>(xr, cn), inv, std::span<V>(xr_inv), k_xn);
    arith_array(ctx, ArithOp::Mul, cspan(xr_inv), cspan(ws), std::span<V>(yw), k_mul);
    ctx.store_array(cspan(yw), y.subspan(o, cn), k_store);
  });
}

template <class A>
void rmsnorm_forward(std::span<typename A::Value> y, std::span<typename A::Value> rstd,
                     std::span<const typename A::Value> x, std::span<const typename A::Value> w, RowShape s,
                     double eps, const Ctx<A>& ctx, Select sel = {}) {
  rmsnorm_forward_io<A, typename A::Value>(y, rstd, x, w, s, eps, ctx, sel);
}

/// dx (rows, cols) += ∂L/∂x given dy (rows, cols), x, w (cols), rstd (rows). Policy pass BackwardData.
///   g_i = w_i·dy_i,  s = Σ_j g_j·x_j (Accumulation),  a = (r·r·r)·s / C,  dx_i += r·g_i − a·x_i.
/// The reference, per row r (entry casts in(x) [X], in(w) [W], in(dy) [Dy]): inv = in(rstd) [Row at r]; per
/// element e, g = w·dy [Dx at e]; on Row at r: sg = Σ g·x (dot), a = ((inv·inv)·inv)·sg / C; per element e, on
/// Dx at e (continuing): d = inv·g − a·x (three steps), dx = store(store(dx) + d) (the accumulated
/// dx cast by store, as the body's store_array: ops/steps.hpp, store_cast).
template <class A>
void rmsnorm_backward_data_reference(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                                     std::span<const typename A::Value> x, std::span<const typename A::Value> w,
                                     std::span<const typename A::Value> rstd, RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto C = static_cast<std::size_t>(s.cols);
  std::vector<V> xs(x.size()), ws(w.size()), g(dy.size());
  for (std::size_t e = 0; e < x.size(); ++e) xs[e] = in_cast(ctx, Tensor::X, e, x[e]);
  for (std::size_t j = 0; j < C; ++j) ws[j] = in_cast(ctx, Tensor::W, j, w[j]);
  const V n = ctx.c(static_cast<double>(C));
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    Steps<A> row(ctx, Tensor::Row, r);
    std::vector<Steps<A>> d;
    d.reserve(C);
    const V inv = row.in(rstd[r]);
    for (std::size_t j = 0; j < C; ++j) {
      const std::size_t e = r * C + j;
      d.emplace_back(ctx, Tensor::Dx, e);
      g[e] = d[j].mul(ws[j], in_cast(ctx, Tensor::Dy, e, dy[e]));
    }
    const V sg = row.dot(g.data() + r * C, 1, xs.data() + r * C, 1, C);
    const V inv3 = row.mul(row.mul(inv, inv), inv);
    const V a = row.div(row.mul(inv3, sg), n);
    for (std::size_t j = 0; j < C; ++j) {
      const std::size_t e = r * C + j;
      const V rg = d[j].mul(inv, g[e]);
      const V ax = d[j].mul(a, xs[e]);
      const V de = d[j].sub(rg, ax);
      const V old = d[j].store(dx[e]);  // the accumulated dx cast by store (store_array)
      dx[e] = d[j].store(d[j].add(old, de));
    }
  }
}

/// rmsnorm_backward_data_reference with the row reductions as one ctx.dot_rows (without a Select) and the
/// elementwise steps on row spans.
template <class A, class T>
void rmsnorm_backward_data_io(std::span<T> dx, std::span<const T> dy, std::span<const T> x, std::span<const T> w,
                              std::span<const T> rstd, RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  const auto cn = static_cast<std::size_t>(C);
  [[maybe_unused]] const bool through = binary32_through<A, T>(ctx, {std::span<const T>(dx), dy, x, w, rstd});
  // The entry casts and g in scratch_buffer slots 0–3 (every element read is written first: the casts whole or row
  // by row, g on each row the loops below read). Under binary32_through x and dy are cast only where the binary64
  // form reads them, a row at a time (the whole cast's values: rmsnorm_forward_io).
  const std::span<V> xs = scratch_buffer<V>(x.size(), 0), ws = scratch_buffer<V>(w.size(), 1),
                     dys = scratch_buffer<V>(dy.size(), 2), g = scratch_buffer<V>(dy.size(), 3);
  bool cast = !through;  // xs and dys hold every row's cast
  if (cast) {
    ctx.in_array(x, xs, Tensor::X);
    ctx.in_array(dy, dys, Tensor::Dy);
  }
  ctx.in_array(w, ws, Tensor::W);
  const auto cast_row = [&](std::size_t o) {
    if (cast) return;
    ctx.in_array(x.subspan(o, cn), xs.subspan(o, cn), Tensor::X);
    ctx.in_array(dy.subspan(o, cn), dys.subspan(o, cn), Tensor::Dy);
  };
  const V n = ctx.c(static_cast<double>(C));
  SlotSeq Row(Tensor::Row);
  const auto k_rstd = Row.next(), k_sg = Row.next(), k_inv2 = Row.next(), k_inv3 = Row.next(), k_mul = Row.next(),
             k_a = Row.next();
  // the slots of Dx at each element: g = w·dy first, the update after the row's reduction
  const auto dx_slots = [C](std::int64_t r) { return SlotSeq(Tensor::Dx, static_cast<std::size_t>(r * C)); };
  const auto products = [&](std::int64_t r) {
    const auto o = static_cast<std::size_t>(r * C);
    SlotSeq Dx = dx_slots(r);
    arith_array(ctx, ArithOp::Mul, cspan(ws), std::span<const V>(dys.data() + o, cn), std::span<V>(g.data() + o, cn),
                Dx.next());
  };
  const bool batched = sel.empty();
  // g = w·dy in binary32 (rows × C), when the chains computed it: the binary32 row bodies read it, and a row that
  // takes the binary64 form widens its own row into g (exact: values of compute).
  [[maybe_unused]] const float* g32 = nullptr;
  std::vector<V> sums(batched ? static_cast<std::size_t>(s.rows) : 0);
  if (batched) {
    const std::vector<std::size_t> len(sums.size(), cn);
    bool summed = false;
    if constexpr (kBinary32Body<A, T>)  // g = w·dy in binary32 and its row dots with x as binary32 chains
      if (binary32_chain<A, T>(ctx)) {
        thread_local std::vector<float> g32s;  // rows × C
        g32s.resize(dy.size());
        float* const gp = g32s.data();
        for_units(s.rows, {}, [&](std::int64_t r) {
          const auto o = static_cast<std::size_t>(r * C);
          arith_binary32(ctx, ArithOp::Mul, w, dy.subspan(o, cn), std::span<float>(gp + o, cn));
        });
        summed = !numerics::any_nan(cspan(g32s), ctx.exec().kernels) &&
                 detail::chain_rows32(ctx, len, gp, C, x.data(), C, sums);
        if (summed) g32 = gp;
      }
    if (!summed) {
      if (!cast) {
        ctx.in_array(x, xs, Tensor::X);
        ctx.in_array(dy, dys, Tensor::Dy);
      }
      cast = true;
      for_units(s.rows, sel, products);
      ctx.dot_rows(numerics::BasicRowBatch<V>{len, g.data(), C, 1, xs.data(), C, 1}, std::span<V>(sums), k_sg);
    }
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    const std::size_t o = static_cast<std::size_t>(r * C), ri = static_cast<std::size_t>(r);
    const V inv = ctx.in(rstd[ri], k_rstd(ri));
    if (!batched) {
      cast_row(o);
      products(r);
    }
    const V sg = batched ? sums[ri] : ctx.dot(g.data() + o, 1, xs.data() + o, 1, cn, k_sg(ri));
    const V a = ctx.div(ctx.mul(ctx.mul(ctx.mul(inv, inv, k_inv2(ri)), inv, k_inv3(ri)), sg, k_mul(ri)), n, k_a(ri));
    // dx_i ← store(in(dx_i) + (r·g_i − a·x_i)) on the row's span (r and a as left operands)
    if constexpr (kBinary32Body<A, T>)
      if (through) {
        thread_local std::vector<float> narrowed;  // C: g's row in binary32 when g32 is not
        std::span<const float> gr;
        if (g32 != nullptr) {
          gr = std::span<const float>(g32 + o, cn);
        } else {
          narrowed.resize(cn);
          numerics::narrow_to_binary32(std::span<const V>(g.data() + o, cn), narrowed, ctx.exec().kernels);  // exact
          gr = cspan(narrowed);
        }
        if (detail::rmsnorm_backward_row32(dx.subspan(o, cn), gr, x.subspan(o, cn), static_cast<float>(inv),
                                           static_cast<float>(a), ctx))
          return;
        if (g32 != nullptr) numerics::widen_binary32(gr, std::span<V>(g.data() + o, cn), ctx.exec().kernels);
      }
    if (batched) cast_row(o);
    SlotSeq Dx = dx_slots(r);
    Dx.skip();  // g = w·dy (products)
    const auto k_rg = Dx.next(), k_ax = Dx.next(), k_d = Dx.next(), k_in = Dx.next(), k_sum = Dx.next(),
               k_store = Dx.next();
    thread_local std::vector<V> invs, as, rg, ax, d, di, sum;
    invs.assign(cn, inv);
    as.assign(cn, a);
    for (std::vector<V>* v : {&rg, &ax, &d, &di, &sum}) v->resize(cn);
    const std::span<T> out = dx.subspan(o, cn);
    arith_array(ctx, ArithOp::Mul, cspan(invs), std::span<const V>(g.data() + o, cn), std::span<V>(rg), k_rg);
    arith_array(ctx, ArithOp::Mul, cspan(as), std::span<const V>(xs.data() + o, cn), std::span<V>(ax), k_ax);
    arith_array(ctx, ArithOp::Sub, cspan(rg), cspan(ax), std::span<V>(d), k_d);
    ctx.store_array(std::span<const T>(out), std::span<V>(di), k_in);  // the cast, by store (store_cast)
    arith_array(ctx, ArithOp::Add, cspan(di), cspan(d), std::span<V>(sum), k_sum);
    ctx.store_array(cspan(sum), out, k_store);
  });
}

template <class A>
void rmsnorm_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                           std::span<const typename A::Value> x, std::span<const typename A::Value> w,
                           std::span<const typename A::Value> rstd, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  rmsnorm_backward_data_io<A, typename A::Value>(dx, dy, x, w, rstd, s, ctx, sel);
}

/// dw (cols) += Σ_rows dy ⊙ (x·r): xhat = x·rstd (compute), then one dot over rows per column. Pass
/// BackwardWeight. The reference: per row r, inv = in(rstd) [Row at r]; per element e, on X at e: xhat = store(x)·inv (x cast by store,
/// as the body's store_array);
/// (entry cast in(dy) [Dy]); per column i: d = Σ_r dy·xhat (dot) [Column at i]; on Dw at i: dw = store(in(dw) + d).
template <class A>
void rmsnorm_backward_weight_reference(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                                       std::span<const typename A::Value> x, std::span<const typename A::Value> rstd,
                                       RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto C = static_cast<std::size_t>(s.cols), R = static_cast<std::size_t>(s.rows);
  std::vector<V> xhat(x.size()), dys(dy.size());
  for (std::size_t r = 0; r < R; ++r) {
    const V inv = Steps<A>(ctx, Tensor::Row, r).in(rstd[r]);
    for (std::size_t j = 0; j < C; ++j) {
      Steps<A> xe(ctx, Tensor::X, r * C + j);
      xhat[r * C + j] = xe.mul(xe.store(x[r * C + j]), inv);  // x cast by store (store_array)
    }
  }
  for (std::size_t e = 0; e < dy.size(); ++e) dys[e] = in_cast(ctx, Tensor::Dy, e, dy[e]);
  for (std::size_t i = 0; i < C; ++i) {
    const auto Ci = static_cast<std::ptrdiff_t>(C);
    const V d = Steps<A>(ctx, Tensor::Column, i).dot(dys.data() + i, Ci, xhat.data() + i, Ci, R);
    Steps<A> g(ctx, Tensor::Dw, i);
    const V old = g.in(dw[i]);
    dw[i] = g.store(g.add(old, d));
  }
}

/// rmsnorm_backward_weight_reference with the column reductions as one ctx.dot_rows (without a Select) and the
/// xhat products on row spans.
template <class A, class T>
void rmsnorm_backward_weight_io(std::span<T> dw, std::span<const T> dy, std::span<const T> x, std::span<const T> rstd,
                                RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t C = s.cols;
  if constexpr (kBinary32Body<A, T>)
    if (sel.empty() && binary32_chain<A, T>(ctx) && detail::rmsnorm_backward_weight32(dw, dy, x, rstd, s, ctx)) return;
  // xhat (every row written below) and the cast of dy in scratch_buffer slots 0 and 1.
  const std::span<V> xhat = scratch_buffer<V>(x.size(), 0), dys = scratch_buffer<V>(dy.size(), 1);
  ctx.in_array(dy, dys, Tensor::Dy);
  SlotSeq Row(Tensor::Row), Column(Tensor::Column), Dw(Tensor::Dw);
  const auto k_rstd = Row.next(), k_col = Column.next();
  const auto k_dw_in = Dw.next(), k_dw_add = Dw.next(), k_dw_store = Dw.next();
  for_units(s.rows, {}, [&](std::int64_t r) {
    const V inv = ctx.in(rstd[static_cast<std::size_t>(r)], k_rstd(static_cast<std::size_t>(r)));
    // xhat_i = in(x_i)·r on the row's span
    const auto o = static_cast<std::size_t>(r * C), cn = static_cast<std::size_t>(C);
    SlotSeq X(Tensor::X, o);
    const auto k_x = X.next(), k_xhat = X.next();
    thread_local std::vector<V> xi;
    xi.resize(cn);
    ctx.store_array(x.subspan(o, cn), std::span<V>(xi), k_x);  // the cast, by store (store_cast)
    arith_const(ctx, ArithOp::Mul, cspan(xi), inv, std::span<V>(xhat.data() + o, cn), k_xhat);
  });
  const bool batched = sel.empty();
  std::vector<V> sums(batched ? static_cast<std::size_t>(C) : 0);
  if (batched) {
    const std::vector<std::size_t> len(sums.size(), static_cast<std::size_t>(s.rows));
    ctx.dot_rows(numerics::BasicRowBatch<V>{len, dys.data(), 1, C, xhat.data(), 1, C}, std::span<V>(sums), k_col);
  }
  for_units(C, sel, [&](std::int64_t i) {
    const auto ii = static_cast<std::size_t>(i);
    const V d = batched ? sums[ii]
                        : ctx.dot(dys.data() + i, C, xhat.data() + i, C, static_cast<std::size_t>(s.rows), k_col(ii));
    T& g = dw[ii];
    g = static_cast<T>(ctx.store(ctx.add(ctx.in(g, k_dw_in(ii)), d, k_dw_add(ii)), k_dw_store(ii)));
  });
}

template <class A>
void rmsnorm_backward_weight(std::span<typename A::Value> dw, std::span<const typename A::Value> dy,
                             std::span<const typename A::Value> x, std::span<const typename A::Value> rstd,
                             RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  rmsnorm_backward_weight_io<A, typename A::Value>(dw, dy, x, rstd, s, ctx, sel);
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

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void rmsnorm_forward(std::span<float> y, std::span<float> rstd, std::span<const float> x, std::span<const float> w,
                     RowShape s, double eps, const Ctx<Emulated>& ctx, Select sel = {});
void rmsnorm_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x,
                           std::span<const float> w, std::span<const float> rstd, RowShape s, const Ctx<Emulated>& ctx,
                           Select sel = {});
void rmsnorm_backward_weight(std::span<float> dw, std::span<const float> dy, std::span<const float> x,
                             std::span<const float> rstd, RowShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
