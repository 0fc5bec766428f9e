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

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// cos, sin (T, hs/2) for positions 0..T-1.
template <class A>
void rope_angles(std::span<typename A::Value> cos_t, std::span<typename A::Value> sin_t, std::int64_t T,
                 std::int64_t hs, double base, const Ctx<A>& ctx, Select sel = {});

/// y (B, T, NH·hs) = rotate(x (B, T, NH·hs)) with the table cos, sin (T, hs/2). Token t has position t.
template <class A>
void rope_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x,
                  std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t, AttnShape s,
                  const Ctx<A>& ctx, Select sel = {}) {
  const std::int64_t C = s.C(), H = s.hs / 2;
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t i = 0; i < H; ++i) {
        const auto e = static_cast<std::size_t>(row * C + h * s.hs + 2 * i);
        const auto ti = static_cast<std::size_t>(t * H + i);
        // the table is cast per use: (Y, e, 0–1) for the pair at e
        const auto c = ctx.in(cos_t[ti], key(Tensor::Y, e, 0)), sn = ctx.in(sin_t[ti], key(Tensor::Y, e, 1));
        const auto x0 = ctx.in(x[e], key(Tensor::X, e, 0)), x1 = ctx.in(x[e + 1], key(Tensor::X, e + 1, 0));
        const auto y0 = ctx.sub(ctx.mul(x0, c, key(Tensor::Y, e, 2)), ctx.mul(x1, sn, key(Tensor::Y, e, 3)),
                                key(Tensor::Y, e, 4));
        const auto y1 = ctx.add(ctx.mul(x0, sn, key(Tensor::Y, e + 1, 0)), ctx.mul(x1, c, key(Tensor::Y, e + 1, 1)),
                                key(Tensor::Y, e + 1, 2));
        y[e] = ctx.store(y0, key(Tensor::Y, e, 5));
        y[e + 1] = ctx.store(y1, key(Tensor::Y, e + 1, 3));
      }
  });
}

/// dx += Rᵀ·dy: dx_2i += dy_2i·c + dy_2i+1·s, dx_2i+1 += dy_2i+1·c − dy_2i·s. Pass BackwardData.
template <class A>
void rope_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> cos_t, std::span<const typename A::Value> sin_t,
                        AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  const std::int64_t C = s.C(), H = s.hs / 2;
  for_units(s.B * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t i = 0; i < H; ++i) {
        const auto e = static_cast<std::size_t>(row * C + h * s.hs + 2 * i);
        const auto ti = static_cast<std::size_t>(t * H + i);
        // the table is cast per use: (Dx, e, 0–1) for the pair at e
        const auto c = ctx.in(cos_t[ti], key(Tensor::Dx, e, 0)), sn = ctx.in(sin_t[ti], key(Tensor::Dx, e, 1));
        const auto d0 = ctx.in(dy[e], key(Tensor::Dy, e, 0)), d1 = ctx.in(dy[e + 1], key(Tensor::Dy, e + 1, 0));
        const auto g0 = ctx.add(ctx.mul(d0, c, key(Tensor::Dx, e, 2)), ctx.mul(d1, sn, key(Tensor::Dx, e, 3)),
                                key(Tensor::Dx, e, 4));
        const auto g1 = ctx.sub(ctx.mul(d1, c, key(Tensor::Dx, e + 1, 0)), ctx.mul(d0, sn, key(Tensor::Dx, e + 1, 1)),
                                key(Tensor::Dx, e + 1, 2));
        dx[e] = ctx.store(ctx.add(ctx.in(dx[e], key(Tensor::Dx, e, 5)), g0, key(Tensor::Dx, e, 6)), key(Tensor::Dx, e, 7));
        dx[e + 1] = ctx.store(ctx.add(ctx.in(dx[e + 1], key(Tensor::Dx, e + 1, 3)), g1, key(Tensor::Dx, e + 1, 4)),
                              key(Tensor::Dx, e + 1, 5));
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
