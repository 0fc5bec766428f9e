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
/// Backward adds into dx. Elementwise over n = rows·cols; unit (Select) = one row. Scalar per-element loops on
/// Steps (ops/steps.hpp; no span fast path): the body is its own reference.
#include <cstdint>
#include <span>
#include <string_view>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

/// Which GELU: the exact erf form or the tanh approximation.
enum class GeluForm : std::uint8_t { Erf, Tanh };
std::string_view name_of(GeluForm f);

/// The constants of both forms as binary64 values (the op's definition; see the rounding contract).
inline constexpr double kGeluInvSqrt2 = 0.70710678118654752440;      // 1/√2
inline constexpr double kGeluInvSqrt2Pi = 0.39894228040143267794;    // 1/√(2π)
inline constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;   // √(2/π)
inline constexpr double kGeluCubic = 0.044715;                        // tanh form's cubic coefficient

/// y (rows, cols) = gelu(x (rows, cols)). Per element e (ops/steps.hpp: x's entry cast slot 0 of X, then the
/// steps below on Y in order):
///   erf:  x = in(x); t = x·c(1/√2); f = erf(t); g = 1 + f; h = x·g; p = 0.5·h; y = store(p).
///   tanh: x = in(x); x2 = x·x; x3 = x2·x; a = c(0.044715)·x3; s = x + a; u = c(√(2/π))·s; t = tanh(u);
///         g = 1 + t; h = x·g; p = 0.5·h; y = store(p).
template <class A, class T>
void gelu_forward_io(std::span<T> y, std::span<const T> x, RowShape s, GeluForm form, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const V one = ctx.c(1.0), half = ctx.c(0.5);
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      Steps<A> ye(ctx, Tensor::Y, e);
      const V xe = in_cast(ctx, Tensor::X, e, x[e]);
      switch (form) {
        case GeluForm::Erf: {
          const V t = ye.mul(xe, ctx.c(kGeluInvSqrt2));
          const V g = ye.add(one, ye.erf(t));
          const V h = ye.mul(xe, g);
          y[e] = static_cast<T>(ye.store(ye.mul(half, h)));
          break;
        }
        case GeluForm::Tanh: {
          const V x2 = ye.mul(xe, xe);
          const V x3 = ye.mul(x2, xe);
          const V a = ye.mul(ctx.c(kGeluCubic), x3);
          const V sum = ye.add(xe, a);
          const V t = ye.tanh(ye.mul(ctx.c(kGeluSqrt2OverPi), sum));
          const V g = ye.add(one, t);
          const V h = ye.mul(xe, g);
          y[e] = static_cast<T>(ye.store(ye.mul(half, h)));
          break;
        }
      }
    }
  });
}

template <class A>
void gelu_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s, GeluForm form,
                  const Ctx<A>& ctx, Select sel = {}) {
  gelu_forward_io<A, typename A::Value>(y, x, s, form, ctx, sel);
}

/// dx (rows, cols) += dy (rows, cols) · gelu'(x (rows, cols)). Pass BackwardData. Per element e (x's entry cast
/// slot 0 of X, dy's slot 0 of Dy, the steps below on Dx in order):
///   erf:  x = in(x); t = x·c(1/√2); f = erf(t); g = 1 + f; Φ = 0.5·g; x2 = x·x; m = −0.5·x2; q = exp(m);
///         φ = c(1/√(2π))·q; xφ = x·φ; d = Φ + xφ;
///   tanh: x = in(x); x2 = x·x; x3 = x2·x; a = c(0.044715)·x3; s = x + a; u = c(√(2/π))·s; t = tanh(u);
///         g = 1 + t; l = 0.5·g; t2 = t·t; w = 1 − t2; b = c(3·0.044715)·x2; v = 1 + b; kv = c(√(2/π)/2)·v;
///         wk = w·kv; xw = x·wk; d = l + xw;
///   then: g = in(dy) [Dy]; p = g·d; in(dx); sum = dx + p; dx = store(sum).
template <class A, class T>
void gelu_backward_data_io(std::span<T> dx, std::span<const T> dy, std::span<const T> x, RowShape s, GeluForm form,
                           const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const V one = ctx.c(1.0), half = ctx.c(0.5);
  for_units(s.rows, sel, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < s.cols; ++i) {
      const auto e = static_cast<std::size_t>(r * s.cols + i);
      Steps<A> de(ctx, Tensor::Dx, e);
      const V xe = in_cast(ctx, Tensor::X, e, x[e]);
      V d = ctx.c(0.0);
      switch (form) {
        case GeluForm::Erf: {
          const V t = de.mul(xe, ctx.c(kGeluInvSqrt2));
          const V g = de.add(one, de.erf(t));
          const V cdf = de.mul(half, g);
          const V m = de.mul(ctx.c(-0.5), de.mul(xe, xe));
          const V pdf = de.mul(ctx.c(kGeluInvSqrt2Pi), de.exp(m));
          d = de.add(cdf, de.mul(xe, pdf));
          break;
        }
        case GeluForm::Tanh: {
          const V x2 = de.mul(xe, xe);
          const V x3 = de.mul(x2, xe);
          const V a = de.mul(ctx.c(kGeluCubic), x3);
          const V sum = de.add(xe, a);
          const V t = de.tanh(de.mul(ctx.c(kGeluSqrt2OverPi), sum));
          const V l = de.mul(half, de.add(one, t));
          const V w = de.sub(one, de.mul(t, t));
          const V v = de.add(one, de.mul(ctx.c(3.0 * kGeluCubic), x2));
          const V kv = de.mul(ctx.c(0.5 * kGeluSqrt2OverPi), v);
          d = de.add(l, de.mul(xe, de.mul(w, kv)));
          break;
        }
      }
      const V p = de.mul(in_cast(ctx, Tensor::Dy, e, dy[e]), d);
      const V old = de.in(dx[e]);
      dx[e] = static_cast<T>(de.store(de.add(old, p)));
    }
  });
}

template <class A>
void gelu_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> x, RowShape s, GeluForm form, const Ctx<A>& ctx,
                        Select sel = {}) {
  gelu_backward_data_io<A, typename A::Value>(dx, dy, x, s, form, ctx, sel);
}

#define ROUNDOFF_GELU_DECL(EXTERN, A)                                                                          \
  EXTERN template void gelu_forward<A>(std::span<A::Value>, std::span<const A::Value>, RowShape, GeluForm,    \
                                       const Ctx<A>&, Select);                                                 \
  EXTERN template void gelu_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                   \
                                             std::span<const A::Value>, RowShape, GeluForm, const Ctx<A>&, Select);
ROUNDOFF_GELU_DECL(extern, Emulated)
ROUNDOFF_GELU_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void gelu_forward(std::span<float> y, std::span<const float> x, RowShape s, GeluForm form, const Ctx<Emulated>& ctx,
                  Select sel = {});
void gelu_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x, RowShape s,
                        GeluForm form, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
