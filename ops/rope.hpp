#pragma once
/// \file rope.hpp
/// Rotary position embedding (RoFormer), interleaved pairs (x_2i, x_2i+1), base b (10000).
///
/// Two separately configured steps:
///   rope_angles (OpKind::RopeAngles): θ_{p,i} = p·f_i with f_i = b^(-2i/hs). f_i is computed in binary64 and
///     rounded to compute (a constant), p is rounded to compute, θ = p·f_i, cos θ and sin θ are each one
///     rounding in compute, and the table is stored in storage. So "fp32 table stored in fp16" is
///     {storage fp16, compute fp32}, and "angles computed in bf16" is compute bf16. The Reference evaluates
///     f_i = b^(-2i/hs), θ, cos and sin in MPFR.
///   rope_forward (OpKind::RopeRotate): y_2i = x_2i·c − x_2i+1·s, y_2i+1 = x_2i·s + x_2i+1·c, each product and
///     the sum rounded to compute, the result to storage. x may alias y.
/// Unit (Select): a position p (angles), a token row (b, t) (rotation).
#include <span>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

/// cos, sin (T, hs/2) for positions 0..T-1.
template <class A>
void rope_angles(std::span<typename A::Value> cos_t, std::span<typename A::Value> sin_t, std::int64_t T,
                 std::int64_t hs, double base, const Ctx<A>& ctx, Select sel = {});

namespace detail {
/// One token row's pairs as spans (pair i of the row is element 2i of it): the table entries of each pair and the
/// pair's two values, and scratch for the products and results.
template <class V>
struct RopeRow {
  std::vector<V> c, s, v0, v1, p0, p1, r0, r1;
  void resize(std::size_t n) {
    for (std::vector<V>* v : {&c, &s, &v0, &v1, &p0, &p1, &r0, &r1}) v->resize(n);
  }
  /// p0, p1 = the table entries of token position t for each pair; r0, r1 = the pair values of src's row at o.
  /// S: the tensors' element type (V, or float in binary32 storage; each value widened exactly).
  template <class S>
  void gather(std::span<const S> src, std::span<const S> cos_t, std::span<const S> sin_t, std::int64_t t,
              std::int64_t H, std::size_t o) {
    const auto h = static_cast<std::size_t>(H), row = static_cast<std::size_t>(t * H);
    for (std::size_t i0 = 0; i0 < p0.size(); i0 += h)  // pair i reads table entry i mod H (one head's pairs)
      for (std::size_t j = 0; j < h && i0 + j < p0.size(); ++j) {
        p0[i0 + j] = cos_t[row + j];
        p1[i0 + j] = sin_t[row + j];
      }
    for (std::size_t i = 0; i < r0.size(); ++i) {
      r0[i] = src[o + 2 * i];
      r1[i] = src[o + 2 * i + 1];
    }
  }
};

// The binary32 bodies (Ctx::binary32_through) on a gathered row w (p0, p1: cos, sin; r0, r1: the pair values):
// the references' steps in hardware binary32, where the casts and stores return their values; false, nothing
// written, when a result would hold a NaN. The results are complete before they are stored (x may alias y).

/// y_2i = x_2i·c − x_2i+1·s, y_2i+1 = x_2i·s + x_2i+1·c into y (the row's C values).
inline bool rope_forward_row32(std::span<float> y, RopeRow<float>& w, const Ctx<Emulated>& ctx) {
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r0), cspan(w.p0), w.c);  // x0·c
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r1), cspan(w.p1), w.s);  // x1·s
  arith_binary32(ctx, ArithOp::Sub, cspan(w.c), cspan(w.s), w.v0);   // y0
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r0), cspan(w.p1), w.c);  // x0·s
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r1), cspan(w.p0), w.s);  // x1·c
  arith_binary32(ctx, ArithOp::Add, cspan(w.c), cspan(w.s), w.v1);   // y1
  if (numerics::any_nan(cspan(w.v0), ctx.exec().kernels) || numerics::any_nan(cspan(w.v1), ctx.exec().kernels))
    return false;
  for (std::size_t i = 0; i < w.v0.size(); ++i) {
    y[2 * i] = w.v0[i];
    y[2 * i + 1] = w.v1[i];
  }
  return true;
}

/// dx_2i += dy_2i·c + dy_2i+1·s, dx_2i+1 += dy_2i+1·c − dy_2i·s on dx (the row's C values).
inline bool rope_backward_data_row32(std::span<float> dx, RopeRow<float>& w, const Ctx<Emulated>& ctx) {
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r0), cspan(w.p0), w.c);  // g0·c
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r1), cspan(w.p1), w.s);  // g1·s
  arith_binary32(ctx, ArithOp::Add, cspan(w.c), cspan(w.s), w.v0);   // h0
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r1), cspan(w.p0), w.c);  // g1·c
  arith_binary32(ctx, ArithOp::Mul, cspan(w.r0), cspan(w.p1), w.s);  // g0·s
  arith_binary32(ctx, ArithOp::Sub, cspan(w.c), cspan(w.s), w.v1);   // h1
  for (std::size_t i = 0; i < w.v0.size(); ++i) {
    w.c[i] = dx[2 * i];
    w.s[i] = dx[2 * i + 1];
  }
  arith_binary32(ctx, ArithOp::Add, cspan(w.c), cspan(w.v0), w.v0);  // dx_2i + h0
  arith_binary32(ctx, ArithOp::Add, cspan(w.s), cspan(w.v1), w.v1);  // dx_2i+1 + h1
  if (numerics::any_nan(cspan(w.v0), ctx.exec().kernels) || numerics::any_nan(cspan(w.v1), ctx.exec().kernels))
    return false;
  for (std::size_t i = 0; i < w.v0.size(); ++i) {
    dx[2 * i] = w.v0[i];
    dx[2 * i + 1] = w.v1[i];
  }
  return true;
}

/// A binary32 body (rope_forward_row32, rope_backward_data_row32) on the token row of src at offset o (P pairs,
/// position t), the results into out's row there: the gather of the table entries and pair values, then the body.
template <class Body>
bool rope_row32(std::span<float> out, std::span<const float> src, std::span<const float> cos_t,
                std::span<const float> sin_t, std::int64_t t, std::int64_t H, std::size_t o, std::size_t P,
                const Ctx<Emulated>& ctx, Body body) {
  thread_local RopeRow<float> w32;
  w32.resize(P);
  w32.gather(src, cos_t, sin_t, t, H, o);
  return body(out.subspan(o, 2 * P), w32, ctx);
}
}  // namespace detail

/// y (B, T, NH·hs) = rotate(x (B, T, NH·hs)) with the table cos, sin (T, hs/2). Token t has position t. The
/// reference: per pair (e, e + 1) = (x_2i, x_2i+1) of token t's row, j = t·hs/2 + i mod hs/2 its table entry
/// (ops/steps.hpp; the table is cast per use, on Y at e; every cast by store, as store_cast):
///   c = store(cos_j), s = store(sin_j) [Y at e]; x0 = store(x_e) [X at e], x1 = store(x_e+1) [X at e + 1];
///   on Y at e:     y0 = store(x0·c − x1·s)   (x0·c, x1·s, the difference, the store)
///   on Y at e + 1: y1 = store(x0·s + x1·c).
template <class A>
void rope_forward_reference(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                            std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t,
                            AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  for (std::int64_t row = 0; row < s.B * s.T; ++row)
    for (std::int64_t i = 0; i < C / 2; ++i) {
      const auto e = static_cast<std::size_t>(row * C + 2 * i);
      const auto j = static_cast<std::size_t>((row % s.T) * H + i % H);
      Steps<A> y0(ctx, Tensor::Y, e), y1(ctx, Tensor::Y, e + 1);
      const V c = y0.store(cos_t[j]);
      const V sn = y0.store(sin_t[j]);
      const V x0 = store_cast(ctx, Tensor::X, e, x[e]);
      const V x1 = store_cast(ctx, Tensor::X, e + 1, x[e + 1]);
      const V a = y0.mul(x0, c);
      const V b = y0.mul(x1, sn);
      const V r0 = y0.sub(a, b);
      const V a1 = y1.mul(x0, sn);
      const V b1 = y1.mul(x1, c);
      const V r1 = y1.add(a1, b1);
      y[e] = y0.store(r0);
      y[e + 1] = y1.store(r1);
    }
}

/// rope_forward_reference on whole token rows: the casts as store_array (store_cast, keyed per
/// element), the products and sums as arith_array (ops/span_arith.hpp: one binary64 operation then one rounding
/// to compute, which is the correctly rounded result for p ≤ 25 under nearest-even; every other mode and format
/// takes the per-element calls). x may alias y. T, the tensors' element type (the table's too): A::Value, or float
/// in binary32 storage (Emulated only; ops/activation.hpp, silu_forward_io).
template <class A, class T>
void rope_forward_io(std::span<T> y, std::span<const T> x, std::span<const T> cos_t, std::span<const T> sin_t,
                     AttnShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  const auto P = static_cast<std::size_t>(C / 2);  // pairs per row
  [[maybe_unused]] const UnitThrough<A, T> through(ctx, {cos_t, sin_t});
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * C);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({x.subspan(o, static_cast<std::size_t>(C))}) &&
          detail::rope_row32(y, x, cos_t, sin_t, t, H, o, P, ctx, detail::rope_forward_row32))
        return;
    thread_local detail::RopeRow<V> w;
    w.resize(P);
    // pair i's elements e = o + 2i and e + 1
    SlotSeq X0(Tensor::X, o, 2), X1(Tensor::X, o + 1, 2), Y0(Tensor::Y, o, 2), Y1(Tensor::Y, o + 1, 2);
    const auto k_cos = Y0.next(), k_sin = Y0.next(), k_x0 = X0.next(), k_x1 = X1.next();
    const auto k_y0_a = Y0.next(), k_y0_b = Y0.next(), k_y0_sub = Y0.next();
    const auto k_y1_a = Y1.next(), k_y1_b = Y1.next(), k_y1_add = Y1.next();
    const auto k_y0_store = Y0.next(), k_y1_store = Y1.next();
    w.gather(x, cos_t, sin_t, t, H, o);
    ctx.store_array(cspan(w.p0), w.c, k_cos);
    ctx.store_array(cspan(w.p1), w.s, k_sin);
    ctx.store_array(cspan(w.r0), w.v0, k_x0);
    ctx.store_array(cspan(w.r1), w.v1, k_x1);
    // y_2i = x_2i·c − x_2i+1·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.c), std::span<V>(w.p0), k_y0_a);
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.s), std::span<V>(w.p1), k_y0_b);
    arith_array(ctx, ArithOp::Sub, cspan(w.p0), cspan(w.p1), std::span<V>(w.r0), k_y0_sub);
    // y_2i+1 = x_2i·s + x_2i+1·c
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.s), std::span<V>(w.p0), k_y1_a);
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.c), std::span<V>(w.p1), k_y1_b);
    arith_array(ctx, ArithOp::Add, cspan(w.p0), cspan(w.p1), std::span<V>(w.r1), k_y1_add);
    ctx.store_array(cspan(w.r0), w.r0, k_y0_store);
    ctx.store_array(cspan(w.r1), w.r1, k_y1_store);
    for (std::size_t i = 0; i < P; ++i) {
      y[o + 2 * i] = static_cast<T>(w.r0[i]);  // exact: values of storage (T float: binary32_storage)
      y[o + 2 * i + 1] = static_cast<T>(w.r1[i]);
    }
  });
}

template <class A>
void rope_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                  std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t, AttnShape s,
                  const Ctx<A>& ctx, Select sel = {}) {
  rope_forward_io<A, typename A::Value>(y, x, cos_t, sin_t, s, ctx, sel);
}

/// dx += Rᵀ·dy: dx_2i += dy_2i·c + dy_2i+1·s, dx_2i+1 += dy_2i+1·c − dy_2i·s. Pass BackwardData. The reference,
/// per pair (e, e + 1) as rope_forward_reference (casts by store): c = store(cos_j), s = store(sin_j) [Dx at e];
/// g0 = store(dy_e) [Dy at e], g1 = store(dy_e+1) [Dy at e + 1]; on Dx at e: h0 = g0·c + g1·s; on Dx at e + 1:
/// h1 = g1·c − g0·s; then on Dx at e: dx_e = store(store(dx_e) + h0), on Dx at e + 1: dx_e+1 = store(store(dx_e+1) + h1).
template <class A>
void rope_backward_data_reference(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                                  std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t,
                                  AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  for (std::int64_t row = 0; row < s.B * s.T; ++row)
    for (std::int64_t i = 0; i < C / 2; ++i) {
      const auto e = static_cast<std::size_t>(row * C + 2 * i);
      const auto j = static_cast<std::size_t>((row % s.T) * H + i % H);
      Steps<A> d0(ctx, Tensor::Dx, e), d1(ctx, Tensor::Dx, e + 1);
      const V c = d0.store(cos_t[j]);
      const V sn = d0.store(sin_t[j]);
      const V g0 = store_cast(ctx, Tensor::Dy, e, dy[e]);
      const V g1 = store_cast(ctx, Tensor::Dy, e + 1, dy[e + 1]);
      const V a = d0.mul(g0, c);
      const V b = d0.mul(g1, sn);
      const V h0 = d0.add(a, b);
      const V a1 = d1.mul(g1, c);
      const V b1 = d1.mul(g0, sn);
      const V h1 = d1.sub(a1, b1);
      const V o0 = d0.store(dx[e]);
      const V o1 = d1.store(dx[e + 1]);
      const V s0 = d0.add(o0, h0);
      const V s1 = d1.add(o1, h1);
      dx[e] = d0.store(s0);
      dx[e + 1] = d1.store(s1);
    }
}

/// rope_backward_data_reference on whole token rows, as rope_forward.
template <class A, class T>
void rope_backward_data_io(std::span<T> dx, std::span<const T> dy, std::span<const T> cos_t,
                           std::span<const T> sin_t, AttnShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  const auto P = static_cast<std::size_t>(C / 2);
  [[maybe_unused]] const UnitThrough<A, T> through(ctx, {cos_t, sin_t});
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * C);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({std::span<const T>(dx.subspan(o, static_cast<std::size_t>(C))),
                        dy.subspan(o, static_cast<std::size_t>(C))}) &&
          detail::rope_row32(dx, dy, cos_t, sin_t, t, H, o, P, ctx, detail::rope_backward_data_row32))
        return;
    thread_local detail::RopeRow<V> w;
    thread_local std::vector<V> g0, g1;
    w.resize(P);
    g0.resize(P);
    g1.resize(P);
    SlotSeq Dy0(Tensor::Dy, o, 2), Dy1(Tensor::Dy, o + 1, 2), D0(Tensor::Dx, o, 2), D1(Tensor::Dx, o + 1, 2);
    const auto k_cos = D0.next(), k_sin = D0.next(), k_g0 = Dy0.next(), k_g1 = Dy1.next();
    const auto k_d0_a = D0.next(), k_d0_b = D0.next(), k_d0_add = D0.next();
    const auto k_d1_a = D1.next(), k_d1_b = D1.next(), k_d1_sub = D1.next();
    const auto k_d0_in = D0.next(), k_d1_in = D1.next(), k_d0_sum = D0.next(), k_d1_sum = D1.next();
    const auto k_d0_store = D0.next(), k_d1_store = D1.next();
    w.gather(dy, cos_t, sin_t, t, H, o);
    ctx.store_array(cspan(w.p0), w.c, k_cos);
    ctx.store_array(cspan(w.p1), w.s, k_sin);
    ctx.store_array(cspan(w.r0), w.v0, k_g0);
    ctx.store_array(cspan(w.r1), w.v1, k_g1);
    // g0 = dy_2i·c + dy_2i+1·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.c), std::span<V>(w.p0), k_d0_a);
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.s), std::span<V>(w.p1), k_d0_b);
    arith_array(ctx, ArithOp::Add, cspan(w.p0), cspan(w.p1), std::span<V>(g0), k_d0_add);
    // g1 = dy_2i+1·c − dy_2i·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.c), std::span<V>(w.p0), k_d1_a);
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.s), std::span<V>(w.p1), k_d1_b);
    arith_array(ctx, ArithOp::Sub, cspan(w.p0), cspan(w.p1), std::span<V>(g1), k_d1_sub);
    // dx += g, the accumulated value cast on entry
    for (std::size_t i = 0; i < P; ++i) {
      w.p0[i] = dx[o + 2 * i];
      w.p1[i] = dx[o + 2 * i + 1];
    }
    ctx.store_array(cspan(w.p0), w.v0, k_d0_in);
    ctx.store_array(cspan(w.p1), w.v1, k_d1_in);
    arith_array(ctx, ArithOp::Add, cspan(w.v0), cspan(g0), std::span<V>(w.r0), k_d0_sum);
    arith_array(ctx, ArithOp::Add, cspan(w.v1), cspan(g1), std::span<V>(w.r1), k_d1_sum);
    ctx.store_array(cspan(w.r0), w.r0, k_d0_store);
    ctx.store_array(cspan(w.r1), w.r1, k_d1_store);
    for (std::size_t i = 0; i < P; ++i) {
      dx[o + 2 * i] = static_cast<T>(w.r0[i]);
      dx[o + 2 * i + 1] = static_cast<T>(w.r1[i]);
    }
  });
}

template <class A>
void rope_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t,
                        AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  rope_backward_data_io<A, typename A::Value>(dx, dy, cos_t, sin_t, s, ctx, sel);
}

#define ROUNDOFF_ROPE_DECL(EXTERN, A)                                                                          \
  EXTERN template void rope_angles<A>(std::span<A::Value>, std::span<A::Value>, std::int64_t, std::int64_t,    \
                                      double, const Ctx<A>&, Select);                                           \
  EXTERN template void rope_forward<A>(std::span<A::Value>, std::span<const A::Value>,                         \
                                       std::span<const A::Value>, std::span<const A::Value>, AttnShape,        \
                                       const Ctx<A>&, Select);                                                  \
  EXTERN template void rope_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                   \
                                             std::span<const A::Value>, std::span<const A::Value>, AttnShape,  \
                                             const Ctx<A>&, Select);
ROUNDOFF_ROPE_DECL(extern, Emulated)
ROUNDOFF_ROPE_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void rope_forward(std::span<float> y, std::span<const float> x, std::span<const float> cos_t,
                  std::span<const float> sin_t, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});
void rope_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> cos_t,
                        std::span<const float> sin_t, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
