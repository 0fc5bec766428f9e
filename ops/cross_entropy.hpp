#pragma once
/// \file cross_entropy.hpp
/// Log-softmax + cross-entropy over the vocabulary (OpKind::CrossEntropy); the logits come from the
/// classifier GEMM (matmul_forward under OpKind::Classifier).
///
/// Rounding contract per row: m = max_j l_j (exact); e_j = exp(l_j − m) (two roundings to compute);
/// Z = Σ e_j (Accumulation) rounded to compute; loss = (m + log Z) − l_target (three roundings to compute,
/// kept in compute, not stored); probs_j = e_j / Z stored (saved for backward). The mean over tokens is
/// formed in binary64 (mean_loss), whatever the policy (STUDY_PROTOCOL §2 item 10).
/// Backward: dlogits_j += (probs_j − [j = target])·grad_scale, grad_scale = loss_scale / N typically.
/// Unit (Select) = one token row.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"

namespace roundoff::ops {

/// losses (N), probs (N, V); logits (N, V), targets (N).  s = {N, V}.
/// Without a Select, rows go in blocks of kRowBlock and each block's denominators are one ctx.dot_rows (rows in
/// SIMD lanes, each its own sum).
template <class A>
void cross_entropy_forward(std::span<typename A::Value> losses, std::span<typename A::Value> probs,
                           std::span<const typename A::Value> logits, std::span<const std::int32_t> targets,
                           RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const auto n = static_cast<std::size_t>(s.cols);
  // exponentials of row r into ex (n values); returns (m, l_target)
  const auto exps = [&](std::int64_t r, V* ex) {
    const auto o = static_cast<std::size_t>(r * s.cols);
    ctx.store_array(logits.subspan(o, n), std::span<V>(ex, n),
                    [&](std::size_t j) { return key(Tensor::X, o + j, 0); });  // in()
    V m = ex[0];
    for (std::size_t j = 1; j < n; ++j)
      if (ex[j] > m) m = ex[j];
    const V target = ex[static_cast<std::size_t>(targets[static_cast<std::size_t>(r)])];
    exp_shifted(ctx, std::span<const V>(ex, n), m, std::span<V>(ex, n),
                [&](std::size_t j) { return key(Tensor::Y, o + j, 0); },
                [&](std::size_t j) { return key(Tensor::Y, o + j, 1); });
    return std::pair<V, V>{m, target};
  };
  const auto finish = [&](std::int64_t r, const V* ex, const V& z, const std::pair<V, V>& mt) {
    const auto o = static_cast<std::size_t>(r * s.cols);
    thread_local std::vector<V> q;
    q.resize(n);
    arith_const(ctx, ArithOp::Div, std::span<const V>(ex, n), z, std::span<V>(q),
                [&](std::size_t j) { return key(Tensor::Y, o + j, 2); });
    ctx.store_array(cspan(q), probs.subspan(o, n), [&](std::size_t j) { return key(Tensor::Y, o + j, 3); });
    const V lse = ctx.add(mt.first, ctx.log(z, key(Tensor::Row, r, 1)), key(Tensor::Row, r, 2));
    losses[static_cast<std::size_t>(r)] = ctx.sub(lse, mt.second, key(Tensor::Row, r, 3));
  };
  if (sel.empty()) {
    constexpr std::int64_t kRowBlock = 32;
    for_units((s.rows + kRowBlock - 1) / kRowBlock, sel, [&](std::int64_t blk) {
      thread_local std::vector<V> ex, z;
      thread_local std::vector<std::pair<V, V>> mt;
      const std::int64_t r0 = blk * kRowBlock, nr = std::min(kRowBlock, s.rows - r0);
      const auto rows = static_cast<std::size_t>(nr);
      ex.resize(rows * n);
      z.resize(rows);
      mt.resize(rows);
      for (std::size_t i = 0; i < rows; ++i) mt[i] = exps(r0 + static_cast<std::int64_t>(i), ex.data() + i * n);
      const std::vector<std::size_t> len(rows, n);
      ctx.dot_rows(numerics::BasicRowBatch<V>{len, ex.data(), s.cols, 1}, std::span<V>(z.data(), rows),
                   [&](std::size_t i) { return key(Tensor::Row, r0 + static_cast<std::int64_t>(i), 0); });
      for (std::size_t i = 0; i < rows; ++i) finish(r0 + static_cast<std::int64_t>(i), ex.data() + i * n, z[i], mt[i]);
    });
    return;
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    thread_local std::vector<V> ex;
    ex.resize(n);
    const auto mt = exps(r, ex.data());
    finish(r, ex.data(), ctx.sum(ex.data(), 1, n, key(Tensor::Row, r, 0)), mt);
  });
}

/// The mean of the per-token losses, summed sequentially in binary64 (Emulated) or MPFR (Reference).
template <class V>
V mean_loss(std::span<const V> losses) {
  V s = 0;
  for (const V& l : losses) s += l;
  return s / V(static_cast<double>(losses.size()));
}

/// dlogits (N, V) += (probs − onehot(targets))·grad_scale. Pass BackwardData.
template <class A>
void cross_entropy_backward_data(std::span<typename A::Value> dlogits, std::span<const typename A::Value> probs,
                                 std::span<const std::int32_t> targets, double grad_scale, RowShape s,
                                 const Ctx<A>& ctx, Select sel = {}) {
  using V = typename A::Value;
  const auto gs = ctx.c(grad_scale), one = ctx.c(1.0);
  const auto n = static_cast<std::size_t>(s.cols);
  // per row, on spans: p = in(probs) (keys (Y, e, 0)), p_target −= 1 (Dx, e, 0), dlogits ← store(in(dlogits) + p·gs)
  // (Dx, e, 1–4)
  for_units(s.rows, sel, [&](std::int64_t r) {
    thread_local std::vector<V> p, pg, di, sum;
    p.resize(n);
    pg.resize(n);
    di.resize(n);
    sum.resize(n);
    const auto o = static_cast<std::size_t>(r * s.cols);
    const auto kf = [o](unsigned slot) { return [o, slot](std::size_t j) { return key(Tensor::Dx, o + j, slot); }; };
    const auto tgt = static_cast<std::size_t>(targets[static_cast<std::size_t>(r)]);
    const std::span<V> out = dlogits.subspan(o, n);
    ctx.store_array(probs.subspan(o, n), std::span<V>(p), [&](std::size_t j) { return key(Tensor::Y, o + j, 0); });
    p[tgt] = ctx.sub(p[tgt], one, key(Tensor::Dx, o + tgt, 0));
    arith_const(ctx, ArithOp::Mul, cspan(p), gs, std::span<V>(pg), kf(2));
    ctx.store_array(std::span<const V>(out), std::span<V>(di), kf(1));  // in()
    arith_array(ctx, ArithOp::Add, cspan(di), cspan(pg), std::span<V>(sum), kf(3));
    ctx.store_array(cspan(sum), out, kf(4));
  });
}

#define ROUNDOFF_CROSS_ENTROPY_DECL(EXTERN, A)                                                                      \
  EXTERN template void cross_entropy_forward<A>(std::span<A::Value>, std::span<A::Value>, std::span<const A::Value>, \
                                                std::span<const std::int32_t>, RowShape, const Ctx<A>&, Select);     \
  EXTERN template void cross_entropy_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,               \
                                                      std::span<const std::int32_t>, double, RowShape,              \
                                                      const Ctx<A>&, Select);
ROUNDOFF_CROSS_ENTROPY_DECL(extern, Emulated)
ROUNDOFF_CROSS_ENTROPY_DECL(extern, Reference)

}  // namespace roundoff::ops
