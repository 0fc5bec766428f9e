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
#include "ops/steps.hpp"

namespace roundoff::ops {

// Each op: the scalar reference (one Steps per tensor element, ops/steps.hpp) and the span body, which takes its
// key functions from SlotSeqs in the reference's order; tests/ops/reference_test.cpp compares the two.

/// out = x + α·f, all (rows, cols). The reference: per element e, f = store(f) [X2] (the entry casts by store:
/// ops/steps.hpp, store_cast); on Y: b = α·f (the slot taken only when α ≠ 1, skipped otherwise); x = store(x) [X]; on Y: sum = x + b, out = store(sum).
template <class A>
void residual_forward_reference(std::span<typename A::Value> out, std::span<const typename A::Value> x,
                                std::span<const typename A::Value> f, double alpha, RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> y(ctx, Tensor::Y, e);
    V b = store_cast(ctx, Tensor::X2, e, f[e]);
    if (alpha != 1.0) b = y.mul(a, b);
    else y.skip();
    const V xe = store_cast(ctx, Tensor::X, e, x[e]);
    out[e] = y.store(y.add(xe, b));
  }
}

namespace detail {
// The binary32 bodies (Ctx::binary32_through): each reference's steps on one row in hardware binary32 (a: α in
// compute); false, nothing written, when a stored row would hold a NaN. Every result row is complete before
// any is stored, so out may alias x and dout may alias dx or df.

inline bool residual_forward_row32(std::span<float> out, std::span<const float> x, std::span<const float> f,
                                   bool scaled, float a, const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> b, t;  // n
  b.resize(x.size());
  t.resize(x.size());
  std::span<const float> fs = f;
  if (scaled) {
    arith_binary32(ctx, ArithOp::Mul, f, std::span(&a, 1), b);  // b = α·f
    fs = cspan(b);
  }
  arith_binary32(ctx, ArithOp::Add, x, fs, t);  // sum = x + b
  return store_binary32(ctx, {{cspan(t), out}});
}

inline bool residual_backward_data_row32(std::span<float> dx, std::span<float> df, std::span<const float> dout,
                                         bool scaled, float a, const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> gf, tx, tf;  // n
  gf.resize(dout.size());
  tx.resize(dout.size());
  tf.resize(dout.size());
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(dx), dout, tx);  // dx + g
  std::span<const float> g = dout;
  if (scaled) {
    arith_binary32(ctx, ArithOp::Mul, dout, std::span(&a, 1), gf);  // gf = α·g
    g = cspan(gf);
  }
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(df), g, tf);  // df + gf
  return store_binary32(ctx, {{cspan(tx), dx}, {cspan(tf), df}});
}
}  // namespace detail

/// residual_forward_reference row by row on the span forms (ops/span_arith.hpp). out may alias x.
template <class A, class T>
void residual_forward_io(std::span<T> out, std::span<const T> x, std::span<const T> f, double alpha, RowShape s,
                         const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({std::span<const T>(out.subspan(e0, n)), x.subspan(e0, n), f.subspan(e0, n)}) &&
          detail::residual_forward_row32(out.subspan(e0, n), x.subspan(e0, n), f.subspan(e0, n),
                                                    alpha != 1.0, static_cast<float>(a), ctx))
        return;
    SlotSeq X(Tensor::X, e0), X2(Tensor::X2, e0), Y(Tensor::Y, e0);
    const auto k_x = X.next(), k_f = X2.next();
    const auto k_scale = Y.next(), k_add = Y.next(), k_store = Y.next();
    thread_local std::vector<V> fs, xs, t;
    fs.resize(n);
    xs.resize(n);
    t.resize(n);
    ctx.store_array(f.subspan(e0, n), fs, k_f);
    if (alpha != 1.0) {
      std::fill(t.begin(), t.end(), a);
      arith_array(ctx, ArithOp::Mul, cspan(t), cspan(fs), std::span<V>(xs), k_scale);
      std::swap(fs, xs);
    }
    ctx.store_array(x.subspan(e0, n), xs, k_x);
    arith_array(ctx, ArithOp::Add, cspan(xs), cspan(fs), std::span<V>(t), k_add);
    ctx.store_array(cspan(t), out.subspan(e0, n), k_store);
  });
}

template <class A>
void residual_forward(std::span<typename A::Value> out, std::span<const typename A::Value> x,
                      std::span<const typename A::Value> f, double alpha, RowShape s, const Ctx<A>& ctx,
                      Select sel = {}) {
  residual_forward_io<A, typename A::Value>(out, x, f, alpha, s, ctx, sel);
}

/// dx += dout, df += α·dout, all (rows, cols). Pass BackwardData. The reference: per element e, g = store(dout)
/// [Dy]; on Dx: d = store(dx), dx = store(d + g); on Dx2: gf = α·g (skipped when α = 1), d = store(df),
/// df = store(d + gf).
template <class A>
void residual_backward_data_reference(std::span<typename A::Value> dx, std::span<typename A::Value> df,
                                      std::span<const typename A::Value> dout, double alpha, RowShape s,
                                      const Ctx<A>& ctx) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> dxe(ctx, Tensor::Dx, e), dfe(ctx, Tensor::Dx2, e);
    const V g = store_cast(ctx, Tensor::Dy, e, dout[e]);
    const V d = dxe.store(dx[e]);
    dx[e] = dxe.store(dxe.add(d, g));
    V gf = g;
    if (alpha != 1.0) gf = dfe.mul(a, g);
    else dfe.skip();
    const V d2 = dfe.store(df[e]);
    df[e] = dfe.store(dfe.add(d2, gf));
  }
}

/// residual_backward_data_reference row by row on the span forms, as residual_forward.
template <class A, class T>
void residual_backward_data_io(std::span<T> dx, std::span<T> df, std::span<const T> dout, double alpha, RowShape s,
                               const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const V a = ctx.c(alpha);
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({std::span<const T>(dx.subspan(e0, n)), std::span<const T>(df.subspan(e0, n)),
                        dout.subspan(e0, n)}) &&
          detail::residual_backward_data_row32(dx.subspan(e0, n), df.subspan(e0, n), dout.subspan(e0, n),
                                                          alpha != 1.0, static_cast<float>(a), ctx))
        return;
    SlotSeq Dy(Tensor::Dy, e0), Dx(Tensor::Dx, e0), Dx2(Tensor::Dx2, e0);
    const auto k_g = Dy.next();
    const auto k_dx_in = Dx.next(), k_dx_add = Dx.next(), k_dx_store = Dx.next();
    const auto k_df_scale = Dx2.next(), k_df_in = Dx2.next(), k_df_add = Dx2.next(), k_df_store = Dx2.next();
    thread_local std::vector<V> g, d, t, gf;
    g.resize(n);
    d.resize(n);
    t.resize(n);
    gf.resize(n);
    ctx.store_array(dout.subspan(e0, n), g, k_g);
    ctx.store_array(std::span<const T>(dx.subspan(e0, n)), d, k_dx_in);
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(g), std::span<V>(t), k_dx_add);
    ctx.store_array(cspan(t), dx.subspan(e0, n), k_dx_store);
    if (alpha != 1.0) {
      std::fill(t.begin(), t.end(), a);
      arith_array(ctx, ArithOp::Mul, cspan(t), cspan(g), std::span<V>(gf), k_df_scale);
    } else {
      gf = g;
    }
    ctx.store_array(std::span<const T>(df.subspan(e0, n)), d, k_df_in);
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(gf), std::span<V>(t), k_df_add);
    ctx.store_array(cspan(t), df.subspan(e0, n), k_df_store);
  });
}

template <class A>
void residual_backward_data(std::span<typename A::Value> dx, std::span<typename A::Value> df,
                            std::span<const typename A::Value> dout, double alpha, RowShape s, const Ctx<A>& ctx,
                            Select sel = {}) {
  residual_backward_data_io<A, typename A::Value>(dx, df, dout, alpha, s, ctx, sel);
}

#define ROUNDOFF_RESIDUAL_DECL(EXTERN, A)                                                                       \
  EXTERN template void residual_forward<A>(std::span<A::Value>, std::span<const A::Value>,                       \
                                           std::span<const A::Value>, double, RowShape, const Ctx<A>&, Select);   \
  EXTERN template void residual_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                      \
                                                 std::span<const A::Value>, double, RowShape, const Ctx<A>&,      \
                                                 Select);
ROUNDOFF_RESIDUAL_DECL(extern, Emulated)
ROUNDOFF_RESIDUAL_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void residual_forward(std::span<float> out, std::span<const float> x, std::span<const float> f, double alpha,
                      RowShape s, const Ctx<Emulated>& ctx, Select sel = {});
void residual_backward_data(std::span<float> dx, std::span<float> df, std::span<const float> dout, double alpha,
                            RowShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
