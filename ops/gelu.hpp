#pragma once
/// \file gelu.hpp
/// GELU (OpKind::Gelu): y = x·Φ(x), Φ the standard normal CDF, in one of two forms:
///   erf form   y = 0.5·x·(1 + erf(x/√2))                                    (GeluForm::Erf, exact GELU)
///   tanh form  y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))               (GeluForm::Tanh, the GPT-2 form)
/// and its derivative dy/dx = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π) (erf form), or
/// 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²), t = tanh(√(2/π)·(x + 0.044715·x³)) (tanh form).
///
/// Rounding contract: inputs rounded to storage on entry; erf, tanh and exp are each one correctly rounded
/// elementary function in compute (numerics::elementary; exp the policy's exp, which is the ANE table where the
/// policy has one); every other step (+ − ×) one rounding to compute, in the order written below; the constants
/// 1/√2, √(2/π), 0.044715, 1/√(2π) are their binary64 values rounded to compute once (Ctx::c), so the Reference
/// (MPFR, no format rounding) evaluates the same formula with the same binary64 constants; outputs stored.
/// Backward adds into dx. Elementwise over n = rows·cols; unit (Select) = one row. Scalar per-element loops (no
/// span fast path): the body is its own reference.
#include <cstdint>
#include <span>
#include <string_view>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// Which GELU: the exact erf form or the tanh approximation.
enum class GeluForm : std::uint8_t { Erf, Tanh };
std::string_view name_of(GeluForm f);

/// The constants of both forms as binary64 values (the op's definition; see the rounding contract).
inline constexpr double kGeluInvSqrt2 = 0.70710678118654752440;      // 1/√2
inline constexpr double kGeluInvSqrt2Pi = 0.39894228040143267794;    // 1/√(2π)
inline constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;   // √(2/π)
inline constexpr double kGeluCubic = 0.044715;                        // tanh form's cubic coefficient

/// y (rows, cols) = gelu(x (rows, cols)). Per element e, keys in brackets:
///   erf:  x = in(x) [X,e,0]; t = x·c(1/√2) [Y,e,0]; f = erf(t) [Y,e,1]; g = 1 + f [Y,e,2]; h = x·g [Y,e,3];
///         p = 0.5·h [Y,e,4]; y = store(p) [Y,e,5].
///   tanh: x = in(x) [X,e,0]; x2 = x·x [Y,e,0]; x3 = x2·x [Y,e,1]; a = c(0.044715)·x3 [Y,e,2]; s = x + a [Y,e,3];
///         u = c(√(2/π))·s [Y,e,4]; t = tanh(u) [Y,e,5]; g = 1 + t [Y,e,6]; h = x·g [Y,e,7]; p = 0.5·h [Y,e,8];
///         y = store(p) [Y,e,9].
template <class A>
void gelu_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s, GeluForm form,
                  const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto k = [e](unsigned slot) { return key(Tensor::Y, e, slot); };
      const V xi = ctx.in(x[e], key(Tensor::X, e, 0));
      const V one = ctx.c(1.0), half = ctx.c(0.5);
      switch (form) {
        case GeluForm::Erf: {
          const V t = ctx.mul(xi, ctx.c(kGeluInvSqrt2), k(0));
          const V g = ctx.add(one, ctx.erf(t, k(1)), k(2));
          y[e] = ctx.store(ctx.mul(half, ctx.mul(xi, g, k(3)), k(4)), k(5));
          break;
        }
        case GeluForm::Tanh: {
          const V x2 = ctx.mul(xi, xi, k(0));
          const V x3 = ctx.mul(x2, xi, k(1));
          const V sum = ctx.add(xi, ctx.mul(ctx.c(kGeluCubic), x3, k(2)), k(3));
          const V t = ctx.tanh(ctx.mul(ctx.c(kGeluSqrt2OverPi), sum, k(4)), k(5));
          const V g = ctx.add(one, t, k(6));
          y[e] = ctx.store(ctx.mul(half, ctx.mul(xi, g, k(7)), k(8)), k(9));
          break;
        }
      }
    }
  });
}

/// dx (rows, cols) += dy (rows, cols) · gelu'(x (rows, cols)). Pass BackwardData. Per element e:
///   erf:  x = in(x) [X,e,0]; t = x·c(1/√2) [Dx,e,0]; f = erf(t) [Dx,e,1]; g = 1 + f [Dx,e,2];
///         Φ = 0.5·g [Dx,e,3]; x2 = x·x [Dx,e,4]; m = −0.5·x2 [Dx,e,5]; q = exp(m) [Dx,e,6];
///         φ = c(1/√(2π))·q [Dx,e,7]; xφ = x·φ [Dx,e,8]; d = Φ + xφ [Dx,e,9];
///   tanh: x = in(x) [X,e,0]; x2 = x·x [Dx,e,0]; x3 = x2·x [Dx,e,1]; a = c(0.044715)·x3 [Dx,e,2];
///         s = x + a [Dx,e,3]; u = c(√(2/π))·s [Dx,e,4]; t = tanh(u) [Dx,e,5]; g = 1 + t [Dx,e,6];
///         l = 0.5·g [Dx,e,7]; t2 = t·t [Dx,e,8]; w = 1 − t2 [Dx,e,9]; b = c(3·0.044715)·x2 [Dx,e,10];
///         v = 1 + b [Dx,e,11]; kv = c(√(2/π)/2)·v [Dx,e,12]; wk = w·kv [Dx,e,13]; xw = x·wk [Dx,e,14];
///         d = l + xw [Dx,e,15];
///   then (slots after the form's last, n0 = 10 for erf and 16 for tanh): in(dy) [Dy,e,0]; p = dy·d [Dx,e,n0];
///   in(dx) [Dx,e,n0+1]; sum = dx + p [Dx,e,n0+2]; dx = store(sum) [Dx,e,n0+3].
template <class A>
void gelu_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> x, RowShape s, GeluForm form, const Ctx<A>& ctx,
                        Select sel = {}) {
  using V = typename A::Value;
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      const auto k = [e](unsigned slot) { return key(Tensor::Dx, e, slot); };
      const V xi = ctx.in(x[e], key(Tensor::X, e, 0));
      const V one = ctx.c(1.0), half = ctx.c(0.5);
      V d = ctx.c(0.0);
      unsigned n0 = 0;
      switch (form) {
        case GeluForm::Erf: {
          const V t = ctx.mul(xi, ctx.c(kGeluInvSqrt2), k(0));
          const V g = ctx.add(one, ctx.erf(t, k(1)), k(2));
          const V cdf = ctx.mul(half, g, k(3));
          const V m = ctx.mul(ctx.c(-0.5), ctx.mul(xi, xi, k(4)), k(5));
          const V pdf = ctx.mul(ctx.c(kGeluInvSqrt2Pi), ctx.exp(m, k(6)), k(7));
          d = ctx.add(cdf, ctx.mul(xi, pdf, k(8)), k(9));
          n0 = 10;
          break;
        }
        case GeluForm::Tanh: {
          const V x2 = ctx.mul(xi, xi, k(0));
          const V x3 = ctx.mul(x2, xi, k(1));
          const V sum = ctx.add(xi, ctx.mul(ctx.c(kGeluCubic), x3, k(2)), k(3));
          const V t = ctx.tanh(ctx.mul(ctx.c(kGeluSqrt2OverPi), sum, k(4)), k(5));
          const V l = ctx.mul(half, ctx.add(one, t, k(6)), k(7));
          const V w = ctx.sub(one, ctx.mul(t, t, k(8)), k(9));
          const V v = ctx.add(one, ctx.mul(ctx.c(3.0 * kGeluCubic), x2, k(10)), k(11));
          const V kv = ctx.mul(ctx.c(0.5 * kGeluSqrt2OverPi), v, k(12));
          d = ctx.add(l, ctx.mul(xi, ctx.mul(w, kv, k(13)), k(14)), k(15));
          n0 = 16;
          break;
        }
      }
      const V p = ctx.mul(ctx.in(dy[e], key(Tensor::Dy, e, 0)), d, k(n0));
      dx[e] = ctx.store(ctx.add(ctx.in(dx[e], k(n0 + 1)), p, k(n0 + 2)), k(n0 + 3));
    }
  });
}

#define ROUNDOFF_GELU_DECL(EXTERN, A)                                                                          \
  EXTERN template void gelu_forward<A>(std::span<A::Value>, std::span<const A::Value>, RowShape, GeluForm,    \
                                       const Ctx<A>&, Select);                                                 \
  EXTERN template void gelu_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                   \
                                             std::span<const A::Value>, RowShape, GeluForm, const Ctx<A>&, Select);
ROUNDOFF_GELU_DECL(extern, Emulated)
ROUNDOFF_GELU_DECL(extern, Reference)

}  // namespace roundoff::ops
