#pragma once
/// \file activation.hpp
/// SiLU (OpKind::Silu) and the SwiGLU gate product (OpKind::SwiGlu): h = silu(g) ⊙ u.
///
/// Rounding contract: inputs rounded to storage on entry; σ(x) is one correctly rounded elementary
/// function in compute; every other step one rounding to compute; outputs stored. Backward adds into
/// gradients. Elementwise over n = rows·cols; unit (Select) = one row.
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

// Each op: the scalar reference (the per-element definition, one Steps per tensor element: the slots in the
// order of the steps) and the span body, which takes its key functions from SlotSeqs in the same order
// (ops/steps.hpp); tests/ops/reference_test.cpp compares the two bit for bit.

namespace detail {
// The binary32 bodies (Ctx::binary32_through): each reference's steps on one row in hardware binary32, where the
// entry casts and stores return their values; false, nothing written, when a stored row would hold a NaN.

inline bool silu_forward_row32(std::span<float> y, std::span<const float> x, const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> sg, p;  // n
  sg.resize(x.size());
  p.resize(x.size());
  ctx.elementary_binary32(numerics::Elementary::Sigmoid, x, sg);
  arith_binary32(ctx, ArithOp::Mul, x, cspan(sg), p);  // p = x·s
  return store_binary32(ctx, {{cspan(p), y}});
}

inline bool silu_backward_data_row32(std::span<float> dx, std::span<const float> dy, std::span<const float> x,
                                     const Ctx<Emulated>& ctx) {
  const std::size_t n = x.size();
  const float one = 1.0f;
  thread_local std::vector<float> sg, ones, a, b, t;  // n
  sg.resize(n);
  ones.assign(n, one);
  a.resize(n);
  b.resize(n);
  t.resize(n);
  ctx.elementary_binary32(numerics::Elementary::Sigmoid, x, sg);
  arith_binary32(ctx, ArithOp::Sub, cspan(ones), cspan(sg), a);           // a = 1 − s
  arith_binary32(ctx, ArithOp::Mul, x, cspan(a), b);                      // b = x·a
  arith_binary32(ctx, ArithOp::Add, cspan(b), std::span(&one, 1), t);     // t = 1 + b
  arith_binary32(ctx, ArithOp::Mul, dy, cspan(sg), a);                    // p = g·s
  arith_binary32(ctx, ArithOp::Mul, cspan(a), cspan(t), b);               // q = p·t
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(dx), cspan(b), t);  // sum = d + q
  return store_binary32(ctx, {{cspan(t), dx}});
}

inline bool swiglu_forward_row32(std::span<float> h, std::span<const float> a, std::span<const float> u,
                                 const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> p;  // n
  p.resize(a.size());
  arith_binary32(ctx, ArithOp::Mul, a, u, p);  // p = a·u
  return store_binary32(ctx, {{cspan(p), h}});
}

inline bool swiglu_backward_data_row32(std::span<float> da, std::span<float> du, std::span<const float> dh,
                                       std::span<const float> a, std::span<const float> u, const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> p, sa, su;  // n
  p.resize(a.size());
  sa.resize(a.size());
  su.resize(a.size());
  arith_binary32(ctx, ArithOp::Mul, dh, u, p);                                // p = g·u
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(da), cspan(p), sa);  // da + p
  arith_binary32(ctx, ArithOp::Mul, dh, a, p);                                // p = g·a
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(du), cspan(p), su);  // du + p
  return store_binary32(ctx, {{cspan(sa), da}, {cspan(su), du}});
}
}  // namespace detail

/// y = x·σ(x), y and x (rows, cols). The reference: per element e, x = store(x) [X] (the entry cast:
/// ops/steps.hpp, store_cast), s = σ(x), p = x·s, y = store(p)
/// (slots of Y in that order).
template <class A>
void silu_forward_reference(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s,
                            const Ctx<A>& ctx) {
  using V = typename A::Value;
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> ye(ctx, Tensor::Y, e);
    const V xe = store_cast(ctx, Tensor::X, e, x[e]);
    const V sg = ye.sigmoid(xe);
    y[e] = ye.store(ye.mul(xe, sg));
  }
}

/// silu_forward_reference row by row on the span forms (ops/span_arith.hpp, Ctx::sigmoid_array). T, the tensors'
/// element type: A::Value, or float for tensors in binary32 storage (Emulated only; Ctx::binary32_storage), whose
/// loads widen and stores narrow exactly, so that the values are those of the binary64 tensors (every *_io below).
template <class A, class T>
void silu_forward_io(std::span<T> y, std::span<const T> x, RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({x.subspan(e0, n)}) && detail::silu_forward_row32(y.subspan(e0, n), x.subspan(e0, n), ctx))
        return;
    SlotSeq X(Tensor::X, e0), Y(Tensor::Y, e0);
    const auto k_in = X.next();
    const auto k_sigmoid = Y.next(), k_mul = Y.next(), k_store = Y.next();
    thread_local std::vector<V> xs, sg, p;
    xs.resize(n);
    sg.resize(n);
    p.resize(n);
    ctx.store_array(x.subspan(e0, n), xs, k_in);  // the entry cast, by store (store_cast)
    ctx.sigmoid_array(cspan(xs), sg, k_sigmoid);
    arith_array(ctx, ArithOp::Mul, cspan(xs), cspan(sg), std::span<V>(p), k_mul);
    ctx.store_array(cspan(p), y.subspan(e0, n), k_store);
  });
}

template <class A>
void silu_forward(std::span<typename A::Value> y, std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx,
                  Select sel = {}) {
  silu_forward_io<A, typename A::Value>(y, x, s, ctx, sel);
}

/// dx += dy·σ(x)·(1 + x·(1 − σ(x))), all (rows, cols). Pass BackwardData. The reference: per element e,
/// x = store(x) [X]; then on Dx: s = σ(x), a = 1 − s, b = x·a, t = 1 + b; g = store(dy) [Dy]; p = g·s,
/// q = p·t, d = store(dx), sum = d + q, dx = store(sum). (Every cast of an input by store: store_cast.)
template <class A>
void silu_backward_data_reference(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                                  std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const V one = ctx.c(1.0);
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> de(ctx, Tensor::Dx, e);
    const V xe = store_cast(ctx, Tensor::X, e, x[e]);
    const V sg = de.sigmoid(xe);
    const V a = de.sub(one, sg);
    const V b = de.mul(xe, a);
    const V t = de.add(one, b);
    const V g = store_cast(ctx, Tensor::Dy, e, dy[e]);
    const V p = de.mul(g, sg);
    const V q = de.mul(p, t);
    const V d = de.store(dx[e]);
    dx[e] = de.store(de.add(d, q));
  }
}

/// silu_backward_data_reference row by row on the span forms.
template <class A, class T>
void silu_backward_data_io(std::span<T> dx, std::span<const T> dy, std::span<const T> x, RowShape s, const Ctx<A>& ctx,
                           Select sel) {
  using V = typename A::Value;
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({std::span<const T>(dx.subspan(e0, n)), dy.subspan(e0, n), x.subspan(e0, n)}) &&
          detail::silu_backward_data_row32(dx.subspan(e0, n), dy.subspan(e0, n), x.subspan(e0, n), ctx))
        return;
    SlotSeq X(Tensor::X, e0), Dy(Tensor::Dy, e0), Dx(Tensor::Dx, e0);
    const auto k_x = X.next(), k_dy = Dy.next();
    const auto k_sigmoid = Dx.next(), k_a = Dx.next(), k_b = Dx.next(), k_t = Dx.next(), k_p = Dx.next(),
               k_q = Dx.next(), k_in = Dx.next(), k_sum = Dx.next(), k_store = Dx.next();
    thread_local std::vector<V> xs, sg, one, a, b, t;
    xs.resize(n);
    sg.resize(n);
    a.resize(n);
    b.resize(n);
    t.resize(n);
    one.assign(n, ctx.c(1.0));
    ctx.store_array(x.subspan(e0, n), xs, k_x);
    ctx.sigmoid_array(cspan(xs), sg, k_sigmoid);
    arith_array(ctx, ArithOp::Sub, cspan(one), cspan(sg), std::span<V>(a), k_a);
    arith_array(ctx, ArithOp::Mul, cspan(xs), cspan(a), std::span<V>(b), k_b);
    arith_array(ctx, ArithOp::Add, cspan(one), cspan(b), std::span<V>(t), k_t);
    ctx.store_array(dy.subspan(e0, n), a, k_dy);
    arith_array(ctx, ArithOp::Mul, cspan(a), cspan(sg), std::span<V>(b), k_p);
    arith_array(ctx, ArithOp::Mul, cspan(b), cspan(t), std::span<V>(a), k_q);
    ctx.store_array(std::span<const T>(dx.subspan(e0, n)), b, k_in);
    arith_array(ctx, ArithOp::Add, cspan(b), cspan(a), std::span<V>(t), k_sum);
    ctx.store_array(cspan(t), dx.subspan(e0, n), k_store);
  });
}

template <class A>
void silu_backward_data(std::span<typename A::Value> dx, std::span<const typename A::Value> dy,
                        std::span<const typename A::Value> x, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  silu_backward_data_io<A, typename A::Value>(dx, dy, x, s, ctx, sel);
}

/// h = a ⊙ u (a = silu(gate)), all (rows, cols). The reference: per element e, a = store(a) [X], u = store(u) [X2],
/// p = a·u, h = store(p) (slots of Y).
template <class A>
void swiglu_forward_reference(std::span<typename A::Value> h, std::span<const typename A::Value> a,
                              std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> he(ctx, Tensor::Y, e);
    const V ae = store_cast(ctx, Tensor::X, e, a[e]);
    const V ue = store_cast(ctx, Tensor::X2, e, u[e]);
    h[e] = he.store(he.mul(ae, ue));
  }
}

/// swiglu_forward_reference row by row on the span forms (the entry casts through store_array, as store_cast).
template <class A, class T>
void swiglu_forward_io(std::span<T> h, std::span<const T> a, std::span<const T> u, RowShape s, const Ctx<A>& ctx,
                       Select sel) {
  using V = typename A::Value;
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({a.subspan(e0, n), u.subspan(e0, n)}) &&
          detail::swiglu_forward_row32(h.subspan(e0, n), a.subspan(e0, n), u.subspan(e0, n), ctx))
        return;
    SlotSeq X(Tensor::X, e0), X2(Tensor::X2, e0), Y(Tensor::Y, e0);
    const auto k_a = X.next(), k_u = X2.next();
    const auto k_mul = Y.next(), k_store = Y.next();
    thread_local std::vector<V> as, us, p;
    as.resize(n);
    us.resize(n);
    p.resize(n);
    ctx.store_array(a.subspan(e0, n), as, k_a);
    ctx.store_array(u.subspan(e0, n), us, k_u);
    arith_array(ctx, ArithOp::Mul, cspan(as), cspan(us), std::span<V>(p), k_mul);
    ctx.store_array(cspan(p), h.subspan(e0, n), k_store);
  });
}

template <class A>
void swiglu_forward(std::span<typename A::Value> h, std::span<const typename A::Value> a,
                    std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  swiglu_forward_io<A, typename A::Value>(h, a, u, s, ctx, sel);
}

/// da += dh ⊙ u, du += dh ⊙ a, all (rows, cols). Pass BackwardData. The reference: per element e,
/// g = store(dh) [Dy]; u = store(u) [X2]; on Dx: d = store(da), p = g·u, da = store(d + p); a = store(a) [X];
/// on Dx2: d = store(du), p = g·a, du = store(d + p). (The casts by store: store_cast.)
template <class A>
void swiglu_backward_data_reference(std::span<typename A::Value> da, std::span<typename A::Value> du,
                                    std::span<const typename A::Value> dh, std::span<const typename A::Value> a,
                                    std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  for (std::size_t e = 0; e < static_cast<std::size_t>(s.size()); ++e) {
    Steps<A> dae(ctx, Tensor::Dx, e), due(ctx, Tensor::Dx2, e);
    const V g = store_cast(ctx, Tensor::Dy, e, dh[e]);
    const V ue = store_cast(ctx, Tensor::X2, e, u[e]);
    const V d = dae.store(da[e]);
    da[e] = dae.store(dae.add(d, dae.mul(g, ue)));
    const V ae = store_cast(ctx, Tensor::X, e, a[e]);
    const V d2 = due.store(du[e]);
    du[e] = due.store(due.add(d2, due.mul(g, ae)));
  }
}

/// swiglu_backward_data_reference row by row on the span forms, as swiglu_forward.
template <class A, class T>
void swiglu_backward_data_io(std::span<T> da, std::span<T> du, std::span<const T> dh, std::span<const T> a,
                             std::span<const T> u, RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  [[maybe_unused]] const UnitThrough<A, T> through(ctx);
  for_units(s.rows, sel, [&](std::int64_t r) {
    const auto e0 = static_cast<std::size_t>(r * s.cols), n = static_cast<std::size_t>(s.cols);
    if constexpr (kBinary32Body<A, T>)
      if (through.rows({std::span<const T>(da.subspan(e0, n)), std::span<const T>(du.subspan(e0, n)),
                        dh.subspan(e0, n), a.subspan(e0, n), u.subspan(e0, n)}) &&
          detail::swiglu_backward_data_row32(da.subspan(e0, n), du.subspan(e0, n), dh.subspan(e0, n),
                                                        a.subspan(e0, n), u.subspan(e0, n), ctx))
        return;
    SlotSeq Dy(Tensor::Dy, e0), X(Tensor::X, e0), X2(Tensor::X2, e0), Dx(Tensor::Dx, e0), Dx2(Tensor::Dx2, e0);
    const auto k_g = Dy.next(), k_a = X.next(), k_u = X2.next();
    const auto k_da_in = Dx.next(), k_da_mul = Dx.next(), k_da_add = Dx.next(), k_da_store = Dx.next();
    const auto k_du_in = Dx2.next(), k_du_mul = Dx2.next(), k_du_add = Dx2.next(), k_du_store = Dx2.next();
    thread_local std::vector<V> g, x, d, p;
    g.resize(n);
    x.resize(n);
    d.resize(n);
    p.resize(n);
    ctx.store_array(dh.subspan(e0, n), g, k_g);
    // da = store(in(da) + g·in(u))
    ctx.store_array(u.subspan(e0, n), x, k_u);
    ctx.store_array(std::span<const T>(da.subspan(e0, n)), d, k_da_in);
    arith_array(ctx, ArithOp::Mul, cspan(g), cspan(x), std::span<V>(p), k_da_mul);
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(p), std::span<V>(x), k_da_add);
    ctx.store_array(cspan(x), da.subspan(e0, n), k_da_store);
    // du = store(in(du) + g·in(a))
    ctx.store_array(a.subspan(e0, n), x, k_a);
    ctx.store_array(std::span<const T>(du.subspan(e0, n)), d, k_du_in);
    arith_array(ctx, ArithOp::Mul, cspan(g), cspan(x), std::span<V>(p), k_du_mul);
    arith_array(ctx, ArithOp::Add, cspan(d), cspan(p), std::span<V>(x), k_du_add);
    ctx.store_array(cspan(x), du.subspan(e0, n), k_du_store);
  });
}

template <class A>
void swiglu_backward_data(std::span<typename A::Value> da, std::span<typename A::Value> du,
                          std::span<const typename A::Value> dh, std::span<const typename A::Value> a,
                          std::span<const typename A::Value> u, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  swiglu_backward_data_io<A, typename A::Value>(da, du, dh, a, u, s, ctx, sel);
}

#define ROUNDOFF_ACTIVATION_DECL(EXTERN, A)                                                                        \
  EXTERN template void silu_forward<A>(std::span<A::Value>, std::span<const A::Value>, RowShape, const Ctx<A>&,     \
                                       Select);                                                                     \
  EXTERN template void silu_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                       \
                                             std::span<const A::Value>, RowShape, const Ctx<A>&, Select);           \
  EXTERN template void swiglu_forward<A>(std::span<A::Value>, std::span<const A::Value>, std::span<const A::Value>, \
                                         RowShape, const Ctx<A>&, Select);                                          \
  EXTERN template void swiglu_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                           \
                                               std::span<const A::Value>, std::span<const A::Value>,                \
                                               std::span<const A::Value>, RowShape, const Ctx<A>&, Select);
ROUNDOFF_ACTIVATION_DECL(extern, Emulated)
ROUNDOFF_ACTIVATION_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage): the same values as the binary64 forms,
// each stored value narrowed exactly (the entry's storage format must fit binary32: Ctx::binary32_storage).
void silu_forward(std::span<float> y, std::span<const float> x, RowShape s, const Ctx<Emulated>& ctx, Select sel = {});
void silu_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x, RowShape s,
                        const Ctx<Emulated>& ctx, Select sel = {});
void swiglu_forward(std::span<float> h, std::span<const float> a, std::span<const float> u, RowShape s,
                    const Ctx<Emulated>& ctx, Select sel = {});
void swiglu_backward_data(std::span<float> da, std::span<float> du, std::span<const float> dh, std::span<const float> a,
                          std::span<const float> u, RowShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
