#pragma once
/// \file online_attention.hpp
/// Causal softmax·V in the online (FlashAttention-style) order: the alternative to the materialised
/// softmax_forward + attn_values_forward pair of ops/attention.hpp, selected by Policy::attention_order()
/// (`attention=online`). Same inputs (the scores preatt computed by attn_scores_forward) and the same output y;
/// instead of the weights att it saves the log-sum-exp of each query row, from which the backward pass
/// recomputes att (softmax_from_lse) and then runs the existing attn_values_backward_data and
/// softmax_backward_data unchanged.
///
/// Layouts (AttnShape): preatt (B, NH, T, T), only s ≤ t read; v and y (B, T, NH·hs); lse (B, NH, T).
///
/// Math, one query row (b, h, t) of n = t + 1 scores x_0..x_t and value rows v_0..v_t (hs values each):
///   m ← x_0, ℓ ← 0, o ← 0;  for s = 0..t:
///     if x_s > m:  α = exp(m − x_s), ℓ ← ℓ·α, o ← o·α, m ← x_s        (rescale when the max grows)
///     p = exp(x_s − m),  ℓ ← ℓ + p,  o ← o + p·v_s
///   y = o / ℓ,   lse = m + log ℓ
/// In exact arithmetic m = max_s x_s, ℓ = Σ_s exp(x_s − m), o = Σ_s exp(x_s − m)·v_s, so y = softmax(x)·V and
/// att_s = exp(x_s − lse): the materialised result.
///
/// Rounding contract (Emulated; the Reference backend runs the same steps exactly). Two policy entries (fwd):
///   Softmax (sm)      x_s rounded to sm.storage on entry; max exact (comparisons); each subtraction, exp and
///                     the log and add of lse one rounding to sm.compute; lse stored in sm.storage (the saved
///                     tensor, as att is in the materialised order).
///   AttnValues (av)   v rounded to av.storage on entry; p rounded to av.storage before its product with v_s
///                     (FlashAttention casts P to the input type of the P·V product); y = o/ℓ one rounding
///                     to av.compute, stored in av.storage.
///   Running sums      ℓ is the online form of the softmax denominator Z and is kept in the Softmax entry's
///                     accumulator format; o is the online form of the att·V dot and is kept in the
///                     AttnValues entry's accumulator format — so a unit that accumulates in fp16
///                     (ane-fp16) keeps its running sums in fp16, one with an fp32 accumulator (amp-*,
///                     ane-fp16-acc32) in fp32. Every update is one rounding to that format in the
///                     Accumulation's rounding mode: ℓ·α, ℓ + p, o·α each once; o + p·v once when the
///                     Accumulation is fused (the exact product enters the accumulator), twice when unfused
///                     (product rounded to its product_format first). A running sum with rescaling is
///                     sequential by construction, so the Accumulation's order, block/outer format,
///                     promotion and multi-term adder settings do not apply; its format, rounding, fused
///                     flag and product format do. ℓ and o start at 0; the first step adds p = 1 and 1·v_0
///                     (one rounding each, exact when v_0 is a value of the accumulator format).
/// Unit (Select): a head (b, h), like attn_values_forward. One evaluation order per unit (s ascending), so
/// the result does not depend on the thread count.
///
/// Stochastic-rounding keys (distinct per rounding), score element e = ((b·NH + h)·T + t)·T + s: sm: the cast
/// (Preatt, e, 0), p's subtraction and exp (Att, e, 0–1), α's (Att, e, 2–3), lse (Lse, row, 0–2); the ℓ context:
/// ℓ·α (Att, e, 0), ℓ + p (Att, e, 1); av: the cast of p (Att, e, 0), v's entry cast (V, ·, 0), y = o/ℓ and its
/// store (Out, (b, t, h, d), 0–1); the o context: o·α (RunningSum, e·hs + d, 0), the adds into o of the run of
/// steps starting at score element e (Att, e, 0). The ℓ and o contexts draw from their own streams
/// sub_stream(sm.bits(), key(RunningSum, 0, 0)) and sub_stream(av.bits(), key(RunningSum, 0, 0)).
#include <algorithm>
#include <span>
#include <vector>

#include "ops/attention.hpp"
#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

namespace detail {
/// The precision of a running sum kept in the accumulator of `p`: every elementwise step one rounding to
/// p.accumulate.format in p.accumulate.rounding; the adds of products are a sequential accumulation in the
/// same format and rounding with p's fused flag and product format.
inline OpPrecision running_sum_precision(const OpPrecision& p) {
  numerics::Accumulation a;
  a.format = p.accumulate.format;
  a.rounding = p.accumulate.rounding;
  a.fused = p.accumulate.fused;
  a.product_format = p.accumulate.product_format;
  a.order = numerics::Order::Sequential;
  return OpPrecision{a.format, a.format, a.rounding, a};
}
}  // namespace detail

/// y (B, T, NH·hs) = softmax(preatt)·V and lse (B, NH, T) in the online order; contract in the file comment.
/// `sm` is the Softmax forward context, `av` the AttnValues forward context. Overwrites y and lse.
/// The adds o ← o + p_s·v_s between two rescales are one GEMM (1 × hs) += (1 × K)·(K × hs) with o as its exact
/// starting value: under the sequential running-sum accumulation that is the same sequence of roundings as K
/// separate updates, done in one call per run of steps in which the max does not grow.
template <class A>
void online_attention_forward(std::span<typename A::Value> y, std::span<typename A::Value> lse,
                              std::span<const typename A::Value> preatt, std::span<const typename A::Value> v,
                              AttnShape s, const Ctx<A>& sm, const Ctx<A>& av, Select sel = {}) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const std::vector<V> vs = detail::cast_in(v, av, Tensor::V);
  const Ctx<A> acc_l(detail::running_sum_precision(sm.precision()), sub_stream(sm.bits(), key(Tensor::RunningSum, 0, 0)));
  const Ctx<A> acc_o(detail::running_sum_precision(av.precision()), sub_stream(av.bits(), key(Tensor::RunningSum, 0, 0)));
  const V zero = acc_o.c(0.0);
  const auto hs = static_cast<std::size_t>(s.hs);
  const auto ldv = static_cast<std::size_t>(s.C());
  for_units(s.heads(), sel, [&](std::int64_t u) {
    thread_local std::vector<V> o, pv;
    o.resize(hs);
    const std::int64_t b = u / s.NH, h = u % s.NH;
    for (std::int64_t t = 0; t < s.T; ++t) {
      const std::size_t e0 = detail::at4(s, b, h, t, 0);
      V m = sm.in(preatt[e0], key(Tensor::Preatt, e0, 0));
      V l = zero;
      std::fill(o.begin(), o.end(), zero);
      pv.clear();
      std::int64_t run = 0;  // first key of the current run (steps since the last rescale)
      // o ← o + Σ_{s in run} p_s·v_s, sequentially from o's current value.
      auto flush = [&]() {
        if (pv.empty()) return;
        acc_o.gemm(1, hs, pv.size(), M{pv.data(), pv.size()}, M{vs.data() + detail::at3(s, b, run, h, 0), ldv},
                   o.data(), hs, true, key(Tensor::Att, e0 + static_cast<std::size_t>(run), 0));
        pv.clear();
      };
      for (std::int64_t j = 0; j <= t; ++j) {
        const std::size_t e = e0 + static_cast<std::size_t>(j);
        const V x = j == 0 ? m : sm.in(preatt[e], key(Tensor::Preatt, e, 0));
        if (x > m) {
          flush();
          const V alpha = sm.exp(sm.sub(m, x, key(Tensor::Att, e, 2)), key(Tensor::Att, e, 3));
          l = acc_l.mul(l, alpha, key(Tensor::Att, e, 0));
          for (std::size_t d = 0; d < hs; ++d) o[d] = acc_o.mul(o[d], alpha, key(Tensor::RunningSum, e * hs + d, 0));
          m = x;
          run = j;
        }
        const V p = sm.exp(sm.sub(x, m, key(Tensor::Att, e, 0)), key(Tensor::Att, e, 1));
        l = acc_l.add(l, p, key(Tensor::Att, e, 1));
        pv.push_back(av.in(p, key(Tensor::Att, e, 0)));
      }
      flush();
      for (std::size_t d = 0; d < hs; ++d) {
        const std::size_t ey = detail::at3(s, b, t, h, static_cast<std::int64_t>(d));
        y[ey] = av.store(av.div(o[d], l, key(Tensor::Out, ey, 0)), key(Tensor::Out, ey, 1));
      }
      const auto row = static_cast<std::size_t>(u * s.T + t);
      lse[row] = sm.store(sm.add(m, sm.log(l, key(Tensor::Lse, row, 0)), key(Tensor::Lse, row, 1)),
                          key(Tensor::Lse, row, 2));
    }
  });
}

/// att[b,h,t,s] = exp(preatt[b,h,t,s] − lse[b,h,t]) for s ≤ t, else 0: the attention weights recomputed from
/// the saved log-sum-exp (FlashAttention's backward), for attn_values_backward_data and softmax_backward_data.
/// Rounding contract: preatt and lse rounded to storage on entry; the subtraction and the exp one rounding to
/// compute each; att stored. The Runner runs it under the Softmax backward-data entry (it is part of the
/// backward pass). Unit (Select): a query row (b, h, t), like softmax_forward. Overwrites att.
template <class A>
void softmax_from_lse(std::span<typename A::Value> att, std::span<const typename A::Value> preatt,
                      std::span<const typename A::Value> lse, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    const auto r = static_cast<std::size_t>(row);
    const auto o = static_cast<std::size_t>(row * s.T);
    const V L = ctx.in(lse[r], key(Tensor::Lse, r, 0));
    for (std::size_t j = 0; j < static_cast<std::size_t>(s.T); ++j) {
      const std::size_t e = o + j;
      att[e] = j <= static_cast<std::size_t>(t)
                   ? ctx.store(ctx.exp(ctx.sub(ctx.in(preatt[e], key(Tensor::Preatt, e, 0)), L, key(Tensor::Att, e, 0)),
                                       key(Tensor::Att, e, 1)),
                               key(Tensor::Att, e, 2))
                   : V(0);
    }
  });
}

#define ROUNDOFF_ONLINE_ATTENTION_DECL(EXTERN, A)                                                                  \
  EXTERN template void online_attention_forward<A>(std::span<A::Value>, std::span<A::Value>,                        \
                                                   std::span<const A::Value>, std::span<const A::Value>, AttnShape, \
                                                   const Ctx<A>&, const Ctx<A>&, Select);                           \
  EXTERN template void softmax_from_lse<A>(std::span<A::Value>, std::span<const A::Value>,                          \
                                           std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);
ROUNDOFF_ONLINE_ATTENTION_DECL(extern, Emulated)
ROUNDOFF_ONLINE_ATTENTION_DECL(extern, Reference)

}  // namespace roundoff::ops
