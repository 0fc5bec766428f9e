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
#include "ops/steps.hpp"

namespace roundoff::ops {

// Each pass: the scalar reference (one Steps per tensor element, ops/steps.hpp) and the body, which takes its key
// functions from SlotSeqs in the reference's order; tests/ops/reference_test.cpp compares the two.

/// losses (N), probs (N, V); logits (N, V), targets (N).  s = {N, V}. The reference, per row r: l = store(logits)
/// [X] (the entry cast by store: ops/steps.hpp, store_cast); m = max_j l_j (exact, the first of equal maxima; NaN never compares greater); per element e, on Y at e:
/// d = l − m, x = exp(d); on Row at r: Z = Σ_j x_j (sum); per element, on Y at e (continuing): q = x / Z,
/// probs = store(q); on Row at r (continuing): lz = log Z, lse = m + lz, loss = lse − l_target (kept in compute).
template <class A>
void cross_entropy_forward_reference(std::span<typename A::Value> losses, std::span<typename A::Value> probs,
                                     std::span<const typename A::Value> logits, std::span<const std::int32_t> targets,
                                     RowShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto n = static_cast<std::size_t>(s.cols);
  std::vector<V> l(n), x(n);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    const std::size_t o = r * n;
    for (std::size_t j = 0; j < n; ++j) l[j] = store_cast(ctx, Tensor::X, o + j, logits[o + j]);
    V m = l[0];
    for (std::size_t j = 1; j < n; ++j)
      if (l[j] > m) m = l[j];
    std::vector<Steps<A>> y;
    y.reserve(n);
    for (std::size_t j = 0; j < n; ++j) {
      y.emplace_back(ctx, Tensor::Y, o + j);
      x[j] = y[j].exp(y[j].sub(l[j], m));
    }
    Steps<A> row(ctx, Tensor::Row, r);
    const V z = row.sum(x.data(), 1, n);
    for (std::size_t j = 0; j < n; ++j) probs[o + j] = y[j].store(y[j].div(x[j], z));
    const V lse = row.add(m, row.log(z));
    losses[r] = row.sub(lse, l[static_cast<std::size_t>(targets[r])]);
  }
}

/// cross_entropy_forward_reference on row spans. Without a Select, rows go in blocks of kRowBlock and each block's
/// denominators are one ctx.dot_rows (rows in SIMD lanes, each its own sum). T, probs' and logits' element type:
/// A::Value, or float in binary32 storage (Emulated only; ops/activation.hpp, silu_forward_io); the losses are
/// compute values and stay binary64.
template <class A, class T>
void cross_entropy_forward_io(std::span<typename A::Value> losses, std::span<T> probs, std::span<const T> logits,
                              std::span<const std::int32_t> targets, RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const auto n = static_cast<std::size_t>(s.cols);
  SlotSeq Row(Tensor::Row);
  const auto k_z = Row.next(), k_log = Row.next(), k_lse = Row.next(), k_loss = Row.next();
  // the slots of X and Y at the elements of row r
  struct RowKeys {
    SlotSeq::KeyFn in, sub, exp, div, store;
  };
  const auto row_keys = [n](std::int64_t r) {
    const auto o = static_cast<std::size_t>(r) * n;
    SlotSeq X(Tensor::X, o), Y(Tensor::Y, o);
    const auto in = X.next();
    const auto sub = Y.next(), exp = Y.next(), div = Y.next(), store = Y.next();
    return RowKeys{in, sub, exp, div, store};
  };
  // exponentials of row r into ex (n values); returns (m, l_target)
  const auto exps = [&](std::int64_t r, V* ex) {
    const auto o = static_cast<std::size_t>(r * s.cols);
    const RowKeys k = row_keys(r);
    ctx.store_array(logits.subspan(o, n), std::span<V>(ex, n), k.in);  // the cast, by store (store_cast)
    V m = ex[0];
    for (std::size_t j = 1; j < n; ++j)
      if (ex[j] > m) m = ex[j];
    const V target = ex[static_cast<std::size_t>(targets[static_cast<std::size_t>(r)])];
    exp_shifted(ctx, std::span<const V>(ex, n), m, std::span<V>(ex, n), k.sub, k.exp);
    return std::pair<V, V>{m, target};
  };
  const auto finish = [&](std::int64_t r, const V* ex, const V& z, const std::pair<V, V>& mt) {
    const auto o = static_cast<std::size_t>(r * s.cols), ri = static_cast<std::size_t>(r);
    const RowKeys k = row_keys(r);
    thread_local std::vector<V> q;
    q.resize(n);
    arith_const(ctx, ArithOp::Div, std::span<const V>(ex, n), z, std::span<V>(q), k.div);
    ctx.store_array(cspan(q), probs.subspan(o, n), k.store);
    const V lse = ctx.add(mt.first, ctx.log(z, k_log(ri)), k_lse(ri));
    losses[ri] = ctx.sub(lse, mt.second, k_loss(ri));
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
                   [&](std::size_t i) { return k_z(static_cast<std::size_t>(r0) + i); });
      for (std::size_t i = 0; i < rows; ++i) finish(r0 + static_cast<std::int64_t>(i), ex.data() + i * n, z[i], mt[i]);
    });
    return;
  }
  for_units(s.rows, sel, [&](std::int64_t r) {
    thread_local std::vector<V> ex;
    ex.resize(n);
    const auto mt = exps(r, ex.data());
    finish(r, ex.data(), ctx.sum(ex.data(), 1, n, k_z(static_cast<std::size_t>(r))), mt);
  });
}

template <class A>
void cross_entropy_forward(std::span<typename A::Value> losses, std::span<typename A::Value> probs,
                           std::span<const typename A::Value> logits, std::span<const std::int32_t> targets,
                           RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  cross_entropy_forward_io<A, typename A::Value>(losses, probs, logits, targets, s, ctx, sel);
}

/// The mean of the per-token losses, summed sequentially in binary64 (Emulated) or MPFR (Reference).
template <class V>
V mean_loss(std::span<const V> losses) {
  V s = 0;
  for (const V& l : losses) s += l;
  return s / V(static_cast<double>(losses.size()));
}

/// dlogits (N, V) += (probs − onehot(targets))·grad_scale. Pass BackwardData. The reference, per element e = (r, j):
/// p = store(probs) [Y at e]; on Dx at e: p − 1 on the target (the slot skipped elsewhere), d = store(dlogits),
/// pg = p·grad_scale, dlogits = store(d + pg).
template <class A>
void cross_entropy_backward_data_reference(std::span<typename A::Value> dlogits,
                                           std::span<const typename A::Value> probs,
                                           std::span<const std::int32_t> targets, double grad_scale, RowShape s,
                                           const Ctx<A>& ctx) {
  using V = typename A::Value;
  const V gs = ctx.c(grad_scale), one = ctx.c(1.0);
  const auto n = static_cast<std::size_t>(s.cols);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r)
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t e = r * n + j;
      Steps<A> d(ctx, Tensor::Dx, e);
      V p = store_cast(ctx, Tensor::Y, e, probs[e]);
      if (j == static_cast<std::size_t>(targets[r])) p = d.sub(p, one);
      else d.skip();
      const V old = d.store(dlogits[e]);
      const V pg = d.mul(p, gs);
      dlogits[e] = d.store(d.add(old, pg));
    }
}

/// cross_entropy_backward_data_reference on row spans.
template <class A, class T>
void cross_entropy_backward_data_io(std::span<T> dlogits, std::span<const T> probs,
                                    std::span<const std::int32_t> targets,
                                    double grad_scale, RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const auto gs = ctx.c(grad_scale), one = ctx.c(1.0);
  const auto n = static_cast<std::size_t>(s.cols);
  for_units(s.rows, sel, [&](std::int64_t r) {
    thread_local std::vector<V> p, pg, di, sum;
    p.resize(n);
    pg.resize(n);
    di.resize(n);
    sum.resize(n);
    const auto o = static_cast<std::size_t>(r * s.cols);
    SlotSeq Y(Tensor::Y, o), Dx(Tensor::Dx, o);
    const auto k_p = Y.next();
    const auto k_target = Dx.next(), k_in = Dx.next(), k_mul = Dx.next(), k_add = Dx.next(), k_store = Dx.next();
    const auto tgt = static_cast<std::size_t>(targets[static_cast<std::size_t>(r)]);
    const std::span<T> out = dlogits.subspan(o, n);
    ctx.store_array(probs.subspan(o, n), std::span<V>(p), k_p);
    p[tgt] = ctx.sub(p[tgt], one, k_target(tgt));
    arith_const(ctx, ArithOp::Mul, cspan(p), gs, std::span<V>(pg), k_mul);
    ctx.store_array(std::span<const T>(out), std::span<V>(di), k_in);  // the cast, by store (store_cast)
    arith_array(ctx, ArithOp::Add, cspan(di), cspan(pg), std::span<V>(sum), k_add);
    ctx.store_array(cspan(sum), out, k_store);
  });
}

template <class A>
void cross_entropy_backward_data(std::span<typename A::Value> dlogits, std::span<const typename A::Value> probs,
                                 std::span<const std::int32_t> targets, double grad_scale, RowShape s,
                                 const Ctx<A>& ctx, Select sel = {}) {
  cross_entropy_backward_data_io<A, typename A::Value>(dlogits, probs, targets, grad_scale, s, ctx, sel);
}

#define ROUNDOFF_CROSS_ENTROPY_DECL(EXTERN, A)                                                                      \
  EXTERN template void cross_entropy_forward<A>(std::span<A::Value>, std::span<A::Value>, std::span<const A::Value>, \
                                                std::span<const std::int32_t>, RowShape, const Ctx<A>&, Select);     \
  EXTERN template void cross_entropy_backward_data<A>(std::span<A::Value>, std::span<const A::Value>,               \
                                                      std::span<const std::int32_t>, double, RowShape,              \
                                                      const Ctx<A>&, Select);
ROUNDOFF_CROSS_ENTROPY_DECL(extern, Emulated)
ROUNDOFF_CROSS_ENTROPY_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void cross_entropy_forward(std::span<double> losses, std::span<float> probs, std::span<const float> logits,
                           std::span<const std::int32_t> targets, RowShape s, const Ctx<Emulated>& ctx,
                           Select sel = {});
void cross_entropy_backward_data(std::span<float> dlogits, std::span<const float> probs,
                                 std::span<const std::int32_t> targets, double grad_scale, RowShape s,
                                 const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
