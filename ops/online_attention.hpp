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
/// Stochastic-rounding slots (ops/steps.hpp: each context counts its own, per tensor element, in this order), score
/// element e = ((b·NH + h)·T + t)·T + s: sm: the cast [Preatt at e], then on Att at e p's subtraction and exp, α's
/// subtraction and exp (taken up front in that order: α is computed first when the max grows), and on Lse at the
/// row: log ℓ, m + log ℓ, the store; the ℓ context, on Att at e: ℓ·α, ℓ + p; av: the cast of p [Att at e], v's entry
/// cast [V], and on Out at (b, t, h, d): y = o/ℓ, its store; the o context: o·α [RunningSum at e·hs + d], the adds
/// into o of the run of steps starting at score element e [Att at e: one GEMM keyed by that slot]. The ℓ and o
/// contexts draw from their own streams, keyed by the first slot of RunningSum's element 0 in the sm and av streams.
/// The function is one scalar body, its own reference (the GEMM of a run is part of the definition: under a
/// stochastic accumulation its draws are the GEMM's).
#include <algorithm>
#include <span>
#include <vector>

#include "ops/attention.hpp"
#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/steps.hpp"

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
/// separate updates, done in one call per run of steps in which the max does not grow. S, the tensors' element
/// type: A::Value, or float in binary32 storage of both contexts (Emulated only; ops/activation.hpp).
template <class A, class S>
void online_attention_forward_io(std::span<S> y, std::span<S> lse, std::span<const S> preatt, std::span<const S> v,
                                 AttnShape s, const Ctx<A>& sm, const Ctx<A>& av, Select sel) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const std::vector<V> vs = detail::cast_in(v, av, Tensor::V);
  const Key k_running = SlotSeq(Tensor::RunningSum).next()(0);  // the streams of the ℓ and o contexts
  const Ctx<A> acc_l(detail::running_sum_precision(sm.precision()), sub_stream(sm.bits(), k_running));
  const Ctx<A> acc_o(detail::running_sum_precision(av.precision()), sub_stream(av.bits(), k_running));
  const V zero = acc_o.c(0.0);
  const auto hs = static_cast<std::size_t>(s.hs);
  const auto ldv = static_cast<std::size_t>(s.C());
  for_units(s.heads(), sel, [&](std::int64_t u) {
    thread_local std::vector<V> o, pv;
    o.resize(hs);
    const std::int64_t b = u / s.NH, h = u % s.NH;
    for (std::int64_t t = 0; t < s.T; ++t) {
      const std::size_t e0 = detail::at4(s, b, h, t, 0);
      V m = in_cast(sm, Tensor::Preatt, e0, preatt[e0]);
      V l = zero;
      std::fill(o.begin(), o.end(), zero);
      pv.clear();
      std::int64_t run = 0;  // first key of the current run (steps since the last rescale)
      // o ← o + Σ_{s in run} p_s·v_s, sequentially from o's current value.
      auto flush = [&]() {
        if (pv.empty()) return;
        Steps<A> first(acc_o, Tensor::Att, e0 + static_cast<std::size_t>(run));  // the run's first score element
        acc_o.gemm(1, hs, pv.size(), M{pv.data(), pv.size()}, M{vs.data() + detail::at3(s, b, run, h, 0), ldv},
                   o.data(), hs, true, first.next());
        pv.clear();
      };
      for (std::int64_t j = 0; j <= t; ++j) {
        const std::size_t e = e0 + static_cast<std::size_t>(j);
        Steps<A> att(sm, Tensor::Att, e), lsum(acc_l, Tensor::Att, e);
        const Key k_p_sub = att.next(), k_p_exp = att.next(), k_a_sub = att.next(), k_a_exp = att.next();
        const Key k_l_mul = lsum.next(), k_l_add = lsum.next();
        const V x = j == 0 ? m : in_cast(sm, Tensor::Preatt, e, preatt[e]);
        if (x > m) {
          flush();
          const V alpha = sm.exp(sm.sub(m, x, k_a_sub), k_a_exp);
          l = acc_l.mul(l, alpha, k_l_mul);
          for (std::size_t d = 0; d < hs; ++d) o[d] = Steps<A>(acc_o, Tensor::RunningSum, e * hs + d).mul(o[d], alpha);
          m = x;
          run = j;
        }
        const V p = sm.exp(sm.sub(x, m, k_p_sub), k_p_exp);
        l = acc_l.add(l, p, k_l_add);
        pv.push_back(in_cast(av, Tensor::Att, e, p));
      }
      flush();
      for (std::size_t d = 0; d < hs; ++d) {
        const std::size_t ey = detail::at3(s, b, t, h, static_cast<std::int64_t>(d));
        Steps<A> out(av, Tensor::Out, ey);
        y[ey] = static_cast<S>(out.store(out.div(o[d], l)));  // exact: a value of storage
      }
      const auto row = static_cast<std::size_t>(u * s.T + t);
      Steps<A> ls(sm, Tensor::Lse, row);
      lse[row] = static_cast<S>(ls.store(ls.add(m, ls.log(l))));
    }
  });
}

template <class A>
void online_attention_forward(std::span<typename A::Value> y, std::span<typename A::Value> lse,
                              std::span<const typename A::Value> preatt, std::span<const typename A::Value> v,
                              AttnShape s, const Ctx<A>& sm, const Ctx<A>& av, Select sel = {}) {
  online_attention_forward_io<A, typename A::Value>(y, lse, preatt, v, s, sm, av, sel);
}

/// att[b,h,t,s] = exp(preatt[b,h,t,s] − lse[b,h,t]) for s ≤ t, else 0: the attention weights recomputed from
/// the saved log-sum-exp (FlashAttention's backward), for attn_values_backward_data and softmax_backward_data.
/// Rounding contract: preatt and lse rounded to storage on entry; the subtraction and the exp one rounding to
/// compute each; att stored. The Runner runs it under the Softmax backward-data entry (it is part of the
/// backward pass). Unit (Select): a query row (b, h, t), like softmax_forward. Overwrites att. Slots (one scalar
/// body, its own reference): the casts [Lse at the row, Preatt at e]; on Att at e: the subtraction, exp, store.
template <class A, class S>
void softmax_from_lse_io(std::span<S> att, std::span<const S> preatt, std::span<const S> lse, AttnShape s,
                         const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    const std::int64_t t = row % s.T;
    const auto r = static_cast<std::size_t>(row);
    const auto o = static_cast<std::size_t>(row * s.T);
    const V L = in_cast(ctx, Tensor::Lse, r, lse[r]);
    for (std::size_t j = 0; j < static_cast<std::size_t>(s.T); ++j) {
      const std::size_t e = o + j;
      if (j > static_cast<std::size_t>(t)) {
        att[e] = S(0);
        continue;
      }
      const V x = in_cast(ctx, Tensor::Preatt, e, preatt[e]);
      Steps<A> a(ctx, Tensor::Att, e);
      att[e] = static_cast<S>(a.store(a.exp(a.sub(x, L))));
    }
  });
}

template <class A>
void softmax_from_lse(std::span<typename A::Value> att, std::span<const typename A::Value> preatt,
                      std::span<const typename A::Value> lse, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  softmax_from_lse_io<A, typename A::Value>(att, preatt, lse, s, ctx, sel);
}

#define ROUNDOFF_ONLINE_ATTENTION_DECL(EXTERN, A)                                                                  \
  EXTERN template void online_attention_forward<A>(std::span<A::Value>, std::span<A::Value>,                        \
                                                   std::span<const A::Value>, std::span<const A::Value>, AttnShape, \
                                                   const Ctx<A>&, const Ctx<A>&, Select);                           \
  EXTERN template void softmax_from_lse<A>(std::span<A::Value>, std::span<const A::Value>,                          \
                                           std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);
ROUNDOFF_ONLINE_ATTENTION_DECL(extern, Emulated)
ROUNDOFF_ONLINE_ATTENTION_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void online_attention_forward(std::span<float> y, std::span<float> lse, std::span<const float> preatt,
                              std::span<const float> v, AttnShape s, const Ctx<Emulated>& sm, const Ctx<Emulated>& av,
                              Select sel = {});
void softmax_from_lse(std::span<float> att, std::span<const float> preatt, std::span<const float> lse, AttnShape s,
                      const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
