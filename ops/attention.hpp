#pragma once
/// \file attention.hpp
/// Causal self-attention, materialised: scores (OpKind::AttnScores), softmax (OpKind::Softmax) and
/// weights·V (OpKind::AttnValues), each its own op so each gets its own precision and error record.
/// Layouts (AttnShape): q, k, v, out, dq, dk, dv (B, T, NH·hs); preatt, att and their gradients (B, NH, T, T),
/// only the causal part s ≤ t is used (the rest is written as 0).
///
/// Rounding contract: inputs rounded to storage on entry; every dot product is one reduction under the
/// Accumulation in index order, rounded to compute; every elementwise step one rounding to compute; results
/// stored. Backward functions add into gradients (g ← store(g + Δ), the add in compute).
/// Units (Select): a head (b, h) for scores and values; a query row (b, h, t) for softmax (all rows of a head
/// together when no Select is given).
///
/// Speed: when ctx.gemm_is_dot() (the accumulation does not round stochastically) the dot products of a head
/// run as GEMMs on ctx.gemm (numerics' SIMD kernels where they apply): QKᵀ and dout·Vᵀ as one T×T×hs GEMM
/// per band of query rows (only the causal outputs are used), the causal sums (att·V, dq, dk, dv) as one
/// 1×hs GEMM per row with exactly that row's k-range [lo, hi) — never zero-padded, since s + 0·x turns −0
/// into +0 and 0·inf into NaN. Each C_ij then gets dot()'s conversion with dot()'s key (ctx.dot_result), so
/// the bits equal the per-element dots' (tests/ops/attention_gemm_test.cpp); otherwise each dot runs alone.
#include <algorithm>
#include <cmath>
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"

namespace roundoff::ops {

namespace detail {
template <class V>
std::vector<V> cast_in(std::span<const V> x, const auto& ctx, Tensor t) {
  std::vector<V> r(x.size());
  ctx.in_array(x, r, t);
  return r;
}
/// Key of the batched GEMMs: they run only when the accumulation does not round stochastically
/// (Ctx::gemm_is_dot), so their stream is never drawn from; each C_ij's conversion takes its dot's key.
inline constexpr Key kBatchedGemm{};
inline std::size_t at4(const AttnShape& s, std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t u) {
  return static_cast<std::size_t>(((b * s.NH + h) * s.T + t) * s.T + u);
}
inline std::size_t at3(const AttnShape& s, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
  return static_cast<std::size_t>((b * s.T + t) * s.C() + h * s.hs + d);
}
/// Query rows per GEMM of the T×T products (columns up to the band's last causal one).
inline constexpr std::int64_t kBand = 32;
/// Per-thread scratch for a head's raw GEMM outputs.
template <class V>
std::vector<V>& scratch(std::size_t n) {
  thread_local std::vector<V> buf;
  buf.resize(n);
  return buf;
}
}  // namespace detail

/// preatt[b,h,t,s] = (q[b,t,h,:]·k[b,s,h,:])·(1/√hs) for s ≤ t, else 0.
template <class A>
void attn_scores_forward(std::span<typename A::Value> preatt, std::span<const typename A::Value> q,
                         std::span<const typename A::Value> k, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::vector<V> qs = detail::cast_in(q, ctx, Tensor::Q), ks = detail::cast_in(k, ctx, Tensor::K);
  using M = typename MatrixOf<A>::type;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    std::vector<V>& raw = detail::scratch<V>(batched ? T * T : 0);
    for (std::int64_t t0 = 0; t0 < s.T; t0 += detail::kBand) {
      const std::int64_t t1 = std::min(s.T, t0 + detail::kBand);
      // raw[t, j] = q[t,:]·k[j,:] for t in [t0, t1), j < t1 (the band's causal columns)
      if (batched)
        ctx.gemm(static_cast<std::size_t>(t1 - t0), static_cast<std::size_t>(t1), hs,
                 M{qs.data() + detail::at3(s, b, t0, h, 0), C}, M{ks.data() + detail::at3(s, b, 0, h, 0), C, true},
                 raw.data() + static_cast<std::size_t>(t0) * T, T, false, detail::kBatchedGemm);
      for (std::int64_t t = t0; t < t1; ++t)
        for (std::int64_t j = 0; j < s.T; ++j) {
          const std::size_t e = detail::at4(s, b, h, t, j);
          if (j > t) {
            preatt[e] = V(0);
            continue;
          }
          const Key kd = key(Tensor::Preatt, e, 0);
          const V d = batched ? ctx.dot_result(raw[static_cast<std::size_t>(t * s.T + j)], kd)
                              : ctx.dot(qs.data() + detail::at3(s, b, t, h, 0), 1,
                                        ks.data() + detail::at3(s, b, j, h, 0), 1, hs, kd);
          preatt[e] = ctx.store(ctx.mul(d, scale, key(Tensor::Preatt, e, 1)), key(Tensor::Preatt, e, 2));
        }
    }
  });
}

/// dq += (dpreatt/√hs)·k, dk += (dpreatt/√hs)ᵀ·q (causal part). Pass BackwardData.
template <class A>
void attn_scores_backward_data(std::span<typename A::Value> dq, std::span<typename A::Value> dk,
                               std::span<const typename A::Value> dpreatt, std::span<const typename A::Value> q,
                               std::span<const typename A::Value> k, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const std::vector<V> qs = detail::cast_in(q, ctx, Tensor::Q), ks = detail::cast_in(k, ctx, Tensor::K);
  using M = typename MatrixOf<A>::type;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  std::vector<V> dps(static_cast<std::size_t>(s.att_size()));
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    for (std::int64_t t = 0; t < s.T; ++t)
      for (std::int64_t j = 0; j < s.T; ++j) {
        const std::size_t e = detail::at4(s, b, h, t, j);
        dps[e] = j > t ? V(0)
                       : ctx.mul(ctx.in(dpreatt[e], key(Tensor::Dpreatt, e, 0)), scale, key(Tensor::Dpreatt, e, 1));
      }
    const V* d0 = dps.data() + detail::at4(s, b, h, 0, 0);
    std::vector<V>& raw = detail::scratch<V>(batched ? 2 * hs : 0);
    for (std::int64_t t = 0; t < s.T; ++t) {
      const auto tu = static_cast<std::size_t>(t);
      if (batched) {
        // raw[d] = Σ_{j ≤ t} dps[t,j]·k[j,d];  raw[hs + d] = Σ_{i ≥ t} dps[i,t]·q[i,d]
        ctx.gemm(1, hs, tu + 1, M{d0 + tu * T, T}, M{ks.data() + detail::at3(s, b, 0, h, 0), C}, raw.data(), hs,
                 false, detail::kBatchedGemm);
        ctx.gemm(1, hs, T - tu, M{d0 + tu * T + tu, T, true}, M{qs.data() + detail::at3(s, b, t, h, 0), C},
                 raw.data() + hs, hs, false, detail::kBatchedGemm);
      }
      for (std::int64_t d = 0; d < s.hs; ++d) {
        const std::size_t e = detail::at3(s, b, t, h, d);
        // dq[t,d] = Σ_{j ≤ t} dps[t,j]·k[j,d]
        const V g = batched ? ctx.dot_result(raw[static_cast<std::size_t>(d)], key(Tensor::Dq, e, 0))
                            : ctx.dot(d0 + t * s.T, 1, ks.data() + detail::at3(s, b, 0, h, d), s.C(), tu + 1,
                                      key(Tensor::Dq, e, 0));
        dq[e] = ctx.store(ctx.add(ctx.in(dq[e], key(Tensor::Dq, e, 1)), g, key(Tensor::Dq, e, 2)), key(Tensor::Dq, e, 3));
        // dk[t,d] = Σ_{i ≥ t} dps[i,t]·q[i,d]
        const V gk = batched ? ctx.dot_result(raw[hs + static_cast<std::size_t>(d)], key(Tensor::Dk, e, 0))
                             : ctx.dot(d0 + t * s.T + t, s.T, qs.data() + detail::at3(s, b, t, h, d), s.C(), T - tu,
                                       key(Tensor::Dk, e, 0));
        dk[e] = ctx.store(ctx.add(ctx.in(dk[e], key(Tensor::Dk, e, 1)), gk, key(Tensor::Dk, e, 2)), key(Tensor::Dk, e, 3));
      }
    }
  });
}

/// att[b,h,t,:t+1] = softmax(preatt[b,h,t,:t+1]) with max subtraction: m = max_j x_j (exact),
/// e_j = exp(x_j − m) (subtraction and exp each one rounding), Z = Σ e_j (Accumulation), att_j = e_j / Z.
/// Without a Select, a head's T denominators are one ctx.dot_rows (rows in SIMD lanes, each its own sum).
template <class A>
void softmax_forward(std::span<typename A::Value> att, std::span<const typename A::Value> preatt, AttnShape s,
                     const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  // exponentials of row `row` into ex (t + 1 values)
  const auto exps = [&](std::int64_t row, V* ex) {
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(t + 1);
    ctx.store_array(preatt.subspan(o, n), std::span<V>(ex, n),
                    [&](std::size_t j) { return key(Tensor::Preatt, o + j, 0); });  // in()
    V m = ex[0];
    for (std::size_t j = 1; j < n; ++j)
      if (ex[j] > m) m = ex[j];
    exp_shifted(ctx, std::span<const V>(ex, n), m, std::span<V>(ex, n),
                [&](std::size_t j) { return key(Tensor::Att, o + j, 0); },
                [&](std::size_t j) { return key(Tensor::Att, o + j, 1); });
  };
  const auto normalise = [&](std::int64_t row, const V* ex, const V& z) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    thread_local std::vector<V> q;
    q.resize(n);
    for (std::size_t j = 0; j < n; ++j) q[j] = ctx.div(ex[j], z, key(Tensor::Att, o + j, 2));
    ctx.store_array(cspan(q), att.subspan(o, n), [&](std::size_t j) { return key(Tensor::Att, o + j, 3); });
    for (std::size_t j = n; j < T; ++j) att[o + j] = V(0);
  };
  if (sel.empty()) {
    for_units(s.heads(), sel, [&](std::int64_t u) {
      thread_local std::vector<V> ex, z;
      thread_local std::vector<std::size_t> len;
      ex.resize(T * T);
      z.resize(T);
      len.resize(T);
      for (std::size_t t = 0; t < T; ++t) {
        exps(u * s.T + static_cast<std::int64_t>(t), ex.data() + t * T);
        len[t] = t + 1;
      }
      const std::int64_t row0 = u * s.T;
      ctx.dot_rows(numerics::BasicRowBatch<V>{len, ex.data(), s.T, 1}, std::span<V>(z),
                   [&](std::size_t t) { return key(Tensor::Row, row0 + static_cast<std::int64_t>(t), 0); });
      for (std::size_t t = 0; t < T; ++t) normalise(row0 + static_cast<std::int64_t>(t), ex.data() + t * T, z[t]);
    });
    return;
  }
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    thread_local std::vector<V> ex;
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    ex.resize(n);
    exps(row, ex.data());
    normalise(row, ex.data(), ctx.sum(ex.data(), 1, n, key(Tensor::Row, row, 0)));
  });
}

/// dpreatt += att ⊙ (datt − Σ_j att_j·datt_j) on the causal part. Pass BackwardData.
/// Without a Select, a head's T row dots are one ctx.dot_rows.
template <class A>
void softmax_backward_data(std::span<typename A::Value> dpreatt, std::span<const typename A::Value> datt,
                           std::span<const typename A::Value> att, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  // row `row`'s inputs cast into a, g (t + 1 values each)
  const auto cast = [&](std::int64_t row, V* a, V* g) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    ctx.store_array(att.subspan(o, n), std::span<V>(a, n), [&](std::size_t j) { return key(Tensor::Att, o + j, 0); });
    ctx.store_array(datt.subspan(o, n), std::span<V>(g, n), [&](std::size_t j) { return key(Tensor::Datt, o + j, 0); });
  };
  // dpreatt_j ← store(in(dpreatt_j) + a_j·(g_j − d)), keys (Dpreatt, e, 0–4), on row spans
  const auto update = [&](std::int64_t row, const V* a, const V* g, const V& d) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    const auto kf = [o](unsigned slot) { return [o, slot](std::size_t j) { return key(Tensor::Dpreatt, o + j, slot); }; };
    thread_local std::vector<V> ds, v, gi, sum;
    ds.resize(n);
    v.resize(n);
    gi.resize(n);
    sum.resize(n);
    const std::span<V> out = dpreatt.subspan(o, n);
    arith_const(ctx, ArithOp::Sub, std::span<const V>(g, n), d, std::span<V>(ds), kf(0));
    arith_array(ctx, ArithOp::Mul, std::span<const V>(a, n), cspan(ds), std::span<V>(v), kf(1));
    ctx.store_array(std::span<const V>(out), std::span<V>(gi), kf(2));  // in()
    arith_array(ctx, ArithOp::Add, cspan(gi), cspan(v), std::span<V>(sum), kf(3));
    ctx.store_array(cspan(sum), out, kf(4));
  };
  if (sel.empty()) {
    for_units(s.heads(), sel, [&](std::int64_t u) {
      thread_local std::vector<V> a, g, d;
      thread_local std::vector<std::size_t> len;
      a.resize(T * T);
      g.resize(T * T);
      d.resize(T);
      len.resize(T);
      const std::int64_t row0 = u * s.T;
      for (std::size_t t = 0; t < T; ++t) {
        cast(row0 + static_cast<std::int64_t>(t), a.data() + t * T, g.data() + t * T);
        len[t] = t + 1;
      }
      ctx.dot_rows(numerics::BasicRowBatch<V>{len, a.data(), s.T, 1, g.data(), s.T, 1}, std::span<V>(d),
                   [&](std::size_t t) { return key(Tensor::Row, row0 + static_cast<std::int64_t>(t), 0); });
      for (std::size_t t = 0; t < T; ++t)
        update(row0 + static_cast<std::int64_t>(t), a.data() + t * T, g.data() + t * T, d[t]);
    });
    return;
  }
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    thread_local std::vector<V> a, g;
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    a.resize(n);
    g.resize(n);
    cast(row, a.data(), g.data());
    update(row, a.data(), g.data(), ctx.dot(a.data(), 1, g.data(), 1, n, key(Tensor::Row, row, 0)));
  });
}

/// out[b,t,h,:] = Σ_{j ≤ t} att[b,h,t,j]·v[b,j,h,:] (one dot per output element, j ascending).
template <class A>
void attn_values_forward(std::span<typename A::Value> out, std::span<const typename A::Value> att,
                         std::span<const typename A::Value> v, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const std::vector<V> as = detail::cast_in(att, ctx, Tensor::Att), vs = detail::cast_in(v, ctx, Tensor::V);
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    std::vector<V>& raw = detail::scratch<V>(batched ? hs : 0);
    for (std::int64_t t = 0; t < s.T; ++t) {
      const auto tu = static_cast<std::size_t>(t);
      // raw[d] = Σ_{j ≤ t} att[t,j]·v[j,d]
      if (batched)
        ctx.gemm(1, hs, tu + 1, M{as.data() + detail::at4(s, b, h, t, 0), T},
                 M{vs.data() + detail::at3(s, b, 0, h, 0), C}, raw.data(), hs, false, detail::kBatchedGemm);
      for (std::int64_t d = 0; d < s.hs; ++d) {
        const std::size_t e = detail::at3(s, b, t, h, d);
        const V r = batched ? ctx.dot_result(raw[static_cast<std::size_t>(d)], key(Tensor::Out, e, 0))
                            : ctx.dot(as.data() + detail::at4(s, b, h, t, 0), 1,
                                      vs.data() + detail::at3(s, b, 0, h, d), s.C(), tu + 1, key(Tensor::Out, e, 0));
        out[e] = ctx.store(r, key(Tensor::Out, e, 1));
      }
    }
  });
}

/// datt[t,j] += dout[t,:]·v[j,:] (j ≤ t), dv[j,:] += Σ_{t ≥ j} att[t,j]·dout[t,:]. Pass BackwardData.
template <class A>
void attn_values_backward_data(std::span<typename A::Value> datt, std::span<typename A::Value> dv,
                               std::span<const typename A::Value> dout, std::span<const typename A::Value> att,
                               std::span<const typename A::Value> v, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const std::vector<V> as = detail::cast_in(att, ctx, Tensor::Att), vs = detail::cast_in(v, ctx, Tensor::V),
                       ds = detail::cast_in(dout, ctx, Tensor::Dout);
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    std::vector<V>& raw = detail::scratch<V>(batched ? T * T : 0);
    for (std::int64_t t0 = 0; t0 < s.T; t0 += detail::kBand) {
      const std::int64_t t1 = std::min(s.T, t0 + detail::kBand);
      // raw[t, j] = dout[t,:]·v[j,:] for t in [t0, t1), j < t1
      if (batched)
        ctx.gemm(static_cast<std::size_t>(t1 - t0), static_cast<std::size_t>(t1), hs,
                 M{ds.data() + detail::at3(s, b, t0, h, 0), C}, M{vs.data() + detail::at3(s, b, 0, h, 0), C, true},
                 raw.data() + static_cast<std::size_t>(t0) * T, T, false, detail::kBatchedGemm);
      for (std::int64_t t = t0; t < t1; ++t)
        for (std::int64_t j = 0; j <= t; ++j) {
          const std::size_t e = detail::at4(s, b, h, t, j);
          const V g = batched ? ctx.dot_result(raw[static_cast<std::size_t>(t * s.T + j)], key(Tensor::Datt, e, 0))
                              : ctx.dot(ds.data() + detail::at3(s, b, t, h, 0), 1,
                                        vs.data() + detail::at3(s, b, j, h, 0), 1, hs, key(Tensor::Datt, e, 0));
          datt[e] = ctx.store(ctx.add(ctx.in(datt[e], key(Tensor::Datt, e, 1)), g, key(Tensor::Datt, e, 2)),
                              key(Tensor::Datt, e, 3));
        }
    }
    for (std::int64_t j = 0; j < s.T; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      // raw[d] = Σ_{t ≥ j} att[t,j]·dout[t,d]
      if (batched)
        ctx.gemm(1, hs, T - ju, M{as.data() + detail::at4(s, b, h, j, j), T, true},
                 M{ds.data() + detail::at3(s, b, j, h, 0), C}, raw.data(), hs, false, detail::kBatchedGemm);
      for (std::int64_t d = 0; d < s.hs; ++d) {
        const std::size_t e = detail::at3(s, b, j, h, d);
        const V g = batched ? ctx.dot_result(raw[static_cast<std::size_t>(d)], key(Tensor::Dv, e, 0))
                            : ctx.dot(as.data() + detail::at4(s, b, h, j, j), s.T,
                                      ds.data() + detail::at3(s, b, j, h, d), s.C(), T - ju, key(Tensor::Dv, e, 0));
        dv[e] = ctx.store(ctx.add(ctx.in(dv[e], key(Tensor::Dv, e, 1)), g, key(Tensor::Dv, e, 2)), key(Tensor::Dv, e, 3));
      }
    }
  });
}

#define ROUNDOFF_ATTENTION_DECL(EXTERN, A)                                                                         \
  EXTERN template void attn_scores_forward<A>(std::span<A::Value>, std::span<const A::Value>,                      \
                                              std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);         \
  EXTERN template void attn_scores_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                      \
                                                    std::span<const A::Value>, std::span<const A::Value>,           \
                                                    std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);   \
  EXTERN template void softmax_forward<A>(std::span<A::Value>, std::span<const A::Value>, AttnShape, const Ctx<A>&, \
                                          Select);                                                                  \
  EXTERN template void softmax_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,                    \
                                                std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);       \
  EXTERN template void attn_values_forward<A>(std::span<A::Value>, std::span<const A::Value>,                      \
                                              std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);         \
  EXTERN template void attn_values_backward_data<A>(std::span<A::Value>, std::span<A::Value>,                      \
                                                    std::span<const A::Value>, std::span<const A::Value>,           \
                                                    std::span<const A::Value>, AttnShape, const Ctx<A>&, Select);
ROUNDOFF_ATTENTION_DECL(extern, Emulated)
ROUNDOFF_ATTENTION_DECL(extern, Reference)

}  // namespace roundoff::ops
