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
  void gather(std::span<const V> src, std::span<const V> cos_t, std::span<const V> sin_t, std::int64_t t,
              std::int64_t H, std::size_t o) {
    for (std::size_t i = 0; i < p0.size(); ++i) {
      const auto ti = static_cast<std::size_t>(t * H) + i % static_cast<std::size_t>(H);
      p0[i] = cos_t[ti];
      p1[i] = sin_t[ti];
      r0[i] = src[o + 2 * i];
      r1[i] = src[o + 2 * i + 1];
    }
  }
};
}  // namespace detail

/// y (B, T, NH·hs) = rotate(x (B, T, NH·hs)) with the table cos, sin (T, hs/2). Token t has position t.
/// Each step runs over a whole token row at once: the casts as store_array (the same rounding as in(), keyed per
/// element), the products and sums as arith_array (ops/span_arith.hpp: one binary64 operation then one rounding
/// to compute, which is the correctly rounded result for p ≤ 25 under nearest-even; every other mode and
/// format takes the per-element calls), so the bits and keys are those of the per-element definition.
template <class A>
void rope_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                  std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t, AttnShape s,
                  const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  const auto P = static_cast<std::size_t>(C / 2);  // pairs per row
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    thread_local detail::RopeRow<V> w;
    w.resize(P);
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * C);
    const auto e = [o](std::size_t i) { return o + 2 * i; };  // pair i's first element
    w.gather(x, cos_t, sin_t, t, H, o);
    // the table is cast per use: (Y, e, 0–1) for the pair at e
    ctx.store_array(cspan(w.p0), w.c, [&](std::size_t i) { return key(Tensor::Y, e(i), 0); });
    ctx.store_array(cspan(w.p1), w.s, [&](std::size_t i) { return key(Tensor::Y, e(i), 1); });
    ctx.store_array(cspan(w.r0), w.v0, [&](std::size_t i) { return key(Tensor::X, e(i), 0); });
    ctx.store_array(cspan(w.r1), w.v1, [&](std::size_t i) { return key(Tensor::X, e(i) + 1, 0); });
    // y_2i = x_2i·c − x_2i+1·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.c), std::span<V>(w.p0), [&](std::size_t i) { return key(Tensor::Y, e(i), 2); });
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.s), std::span<V>(w.p1), [&](std::size_t i) { return key(Tensor::Y, e(i), 3); });
    arith_array(ctx, ArithOp::Sub, cspan(w.p0), cspan(w.p1), std::span<V>(w.r0), [&](std::size_t i) { return key(Tensor::Y, e(i), 4); });
    // y_2i+1 = x_2i·s + x_2i+1·c
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.s), std::span<V>(w.p0), [&](std::size_t i) { return key(Tensor::Y, e(i) + 1, 0); });
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.c), std::span<V>(w.p1), [&](std::size_t i) { return key(Tensor::Y, e(i) + 1, 1); });
    arith_array(ctx, ArithOp::Add, cspan(w.p0), cspan(w.p1), std::span<V>(w.r1), [&](std::size_t i) { return key(Tensor::Y, e(i) + 1, 2); });
    ctx.store_array(cspan(w.r0), w.r0, [&](std::size_t i) { return key(Tensor::Y, e(i), 5); });
    ctx.store_array(cspan(w.r1), w.r1, [&](std::size_t i) { return key(Tensor::Y, e(i) + 1, 3); });
    for (std::size_t i = 0; i < P; ++i) {
      y[e(i)] = w.r0[i];
      y[e(i) + 1] = w.r1[i];
    }
  });
}

/// dx += Rᵀ·dy: dx_2i += dy_2i·c + dy_2i+1·s, dx_2i+1 += dy_2i+1·c − dy_2i·s. Pass BackwardData. Row spans as in
/// rope_forward.
template <class A>
void rope_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t,
                        AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::int64_t C = s.C(), H = s.hs / 2;
  const auto P = static_cast<std::size_t>(C / 2);
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    thread_local detail::RopeRow<V> w;
    thread_local std::vector<V> g0, g1;
    w.resize(P);
    g0.resize(P);
    g1.resize(P);
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * C);
    const auto e = [o](std::size_t i) { return o + 2 * i; };
    w.gather(dy, cos_t, sin_t, t, H, o);
    // the table is cast per use: (Dx, e, 0–1) for the pair at e
    ctx.store_array(cspan(w.p0), w.c, [&](std::size_t i) { return key(Tensor::Dx, e(i), 0); });
    ctx.store_array(cspan(w.p1), w.s, [&](std::size_t i) { return key(Tensor::Dx, e(i), 1); });
    ctx.store_array(cspan(w.r0), w.v0, [&](std::size_t i) { return key(Tensor::Dy, e(i), 0); });
    ctx.store_array(cspan(w.r1), w.v1, [&](std::size_t i) { return key(Tensor::Dy, e(i) + 1, 0); });
    // g0 = dy_2i·c + dy_2i+1·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.c), std::span<V>(w.p0), [&](std::size_t i) { return key(Tensor::Dx, e(i), 2); });
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.s), std::span<V>(w.p1), [&](std::size_t i) { return key(Tensor::Dx, e(i), 3); });
    arith_array(ctx, ArithOp::Add, cspan(w.p0), cspan(w.p1), std::span<V>(g0), [&](std::size_t i) { return key(Tensor::Dx, e(i), 4); });
    // g1 = dy_2i+1·c − dy_2i·s
    arith_array(ctx, ArithOp::Mul, cspan(w.v1), cspan(w.c), std::span<V>(w.p0), [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 0); });
    arith_array(ctx, ArithOp::Mul, cspan(w.v0), cspan(w.s), std::span<V>(w.p1), [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 1); });
    arith_array(ctx, ArithOp::Sub, cspan(w.p0), cspan(w.p1), std::span<V>(g1), [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 2); });
    // dx += g, the accumulated value cast on entry: (Dx, e, 5) / (Dx, e+1, 3), the add (6) / (4), the store (7) / (5)
    for (std::size_t i = 0; i < P; ++i) {
      w.p0[i] = dx[e(i)];
      w.p1[i] = dx[e(i) + 1];
    }
    ctx.store_array(cspan(w.p0), w.v0, [&](std::size_t i) { return key(Tensor::Dx, e(i), 5); });
    ctx.store_array(cspan(w.p1), w.v1, [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 3); });
    arith_array(ctx, ArithOp::Add, cspan(w.v0), cspan(g0), std::span<V>(w.r0), [&](std::size_t i) { return key(Tensor::Dx, e(i), 6); });
    arith_array(ctx, ArithOp::Add, cspan(w.v1), cspan(g1), std::span<V>(w.r1), [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 4); });
    ctx.store_array(cspan(w.r0), w.r0, [&](std::size_t i) { return key(Tensor::Dx, e(i), 7); });
    ctx.store_array(cspan(w.r1), w.r1, [&](std::size_t i) { return key(Tensor::Dx, e(i) + 1, 5); });
    for (std::size_t i = 0; i < P; ++i) {
      dx[e(i)] = w.r0[i];
      dx[e(i) + 1] = w.r1[i];
    }
  });
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

}  // namespace roundoff::ops
