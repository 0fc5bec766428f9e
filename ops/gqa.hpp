#pragma once
/// \file gqa.hpp
/// Grouped-query attention's K/V sharing: NKV key/value heads, each read by the query heads that a head map
/// sends to it (head_map[h] = the KV head of query head h, h < NH). As in AutoANE, K and V are tiled to NH
/// heads before the attention ops, which then run unchanged; the backward reduces their NH-head gradients
/// back to NKV heads.
///
/// Rounding contract: the tile is a copy (no rounding; the values keep whatever format they are in). The
/// reduction of output element (n, j, i) sums dfull[n, h, i] over the query heads h with head_map[h] = j in
/// increasing h, as one reduction under the context's Accumulation (rounded to compute), then adds it into
/// dkv (one addition in compute) and stores it. The caller picks the policy entry; the trainer uses
/// (residual-attn, bwd-data), the entry of the attention block's other gradient sums (AutoANE does both on
/// the CPU in fp32). Unit (Select) = one token row n.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

/// full (rows, NH·hs) ← kv (rows, NKV·hs): head h of each row is a copy of head head_map[h].
template <class V>
void kv_tile(std::span<V> full, std::span<const V> kv, std::span<const int> head_map, std::int64_t kv_heads,
             std::int64_t hs) {
  const auto NH = static_cast<std::int64_t>(head_map.size());
  const std::int64_t rows = static_cast<std::int64_t>(full.size()) / (NH * hs);
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t h = 0; h < NH; ++h)
      for (std::int64_t i = 0; i < hs; ++i)
        full[static_cast<std::size_t>((n * NH + h) * hs + i)] =
            kv[static_cast<std::size_t>((n * kv_heads + head_map[static_cast<std::size_t>(h)]) * hs + i)];
}

/// The query heads of KV head j as an arithmetic progression first[j] + m·stride, m < group, in increasing h
/// (the block map: stride 1; the cyclic map: stride NKV), when every KV head has one of the same length and stride.
struct HeadGroups {
  std::vector<std::int64_t> first;
  std::int64_t group = 0, stride = 0;
};
inline std::optional<HeadGroups> head_groups(std::span<const int> head_map, std::int64_t kv_heads) {
  HeadGroups g;
  std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(kv_heads));
  for (std::size_t h = 0; h < head_map.size(); ++h) {
    const int j = head_map[h];
    if (j < 0 || j >= kv_heads) return std::nullopt;
    members[static_cast<std::size_t>(j)].push_back(static_cast<std::int64_t>(h));
  }
  for (const auto& m : members) {
    const auto n = static_cast<std::int64_t>(m.size());
    const std::int64_t stride = n > 1 ? m[1] - m[0] : 1;
    if (n == 0 || (g.group != 0 && (n != g.group || stride != g.stride))) return std::nullopt;
    for (std::size_t t = 1; t < m.size(); ++t)
      if (m[t] - m[t - 1] != stride) return std::nullopt;
    g.group = n;
    g.stride = stride;
    g.first.push_back(m[0]);
  }
  return g;
}

namespace detail {
/// kv_reduce_backward_reference's token row n.
template <class A>
void kv_reduce_row(std::int64_t n, std::span<typename A::Value> dkv, std::span<const typename A::Value> dfull,
                   std::span<const int> head_map, std::int64_t kv_heads, std::int64_t hs, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto NH = static_cast<std::int64_t>(head_map.size());
  std::vector<V> terms;
  terms.reserve(static_cast<std::size_t>(NH));
  for (std::int64_t j = 0; j < kv_heads; ++j)
    for (std::int64_t i = 0; i < hs; ++i) {
      terms.clear();
      for (std::int64_t h = 0; h < NH; ++h)
        if (head_map[static_cast<std::size_t>(h)] == j) {
          const auto f = static_cast<std::size_t>((n * NH + h) * hs + i);
          terms.push_back(store_cast(ctx, Tensor::Dy, f, dfull[f]));
        }
      const auto e = static_cast<std::size_t>((n * kv_heads + j) * hs + i);
      Steps<A> dx(ctx, Tensor::Dx, e);
      const V s = dx.sum(terms.data(), 1, terms.size());
      const V old = dx.store(dkv[e]);
      dkv[e] = dx.store(dx.add(old, s));
    }
}
}  // namespace detail

/// dkv (rows, NKV·hs) += Σ over the query heads of each KV head of dfull (rows, NH·hs). Policy pass
/// BackwardData of the caller's entry. The reference (ops/steps.hpp): g = store(dfull) [Dy] (the entry cast, by
/// store: store_cast); per element e = (n, j, i) of dkv, on Dx at e: s = Σ_{h : head_map[h] = j} g[n, h, i] (sum,
/// h ascending), old = store(dkv), dkv = store(old + s).
template <class A>
void kv_reduce_backward_reference(std::span<typename A::Value> dkv, std::span<const typename A::Value> dfull,
                                  std::span<const int> head_map, std::int64_t kv_heads, std::int64_t hs,
                                  const Ctx<A>& ctx) {
  const auto NH = static_cast<std::int64_t>(head_map.size());
  const std::int64_t rows = static_cast<std::int64_t>(dfull.size()) / (NH * hs);
  for (std::int64_t n = 0; n < rows; ++n) detail::kv_reduce_row(n, dkv, dfull, head_map, kv_heads, hs, ctx);
}

/// kv_reduce_backward_reference, unit by unit. When every KV head's query heads form arithmetic progressions of one
/// length and stride (head_groups: the block and the cyclic maps), row by row on the span forms: dfull's row cast
/// with store_array, the sums as ctx.dot_rows (each output its own sum, bit for bit the per-reduction ctx.sum),
/// then store(dkv) + s and the store as store_array / arith_array; otherwise (or with the fast paths off) the
/// reference's rows.
template <class A>
void kv_reduce_backward(std::span<typename A::Value> dkv, std::span<const typename A::Value> dfull,
                        std::span<const int> head_map, std::int64_t kv_heads, std::int64_t hs, const Ctx<A>& ctx,
                        Select sel = {}) {
  using V = typename A::Value;
  const auto NH = static_cast<std::int64_t>(head_map.size());
  const std::int64_t rows = static_cast<std::int64_t>(dfull.size()) / (NH * hs);
  if (const std::optional<HeadGroups> groups = ctx.fast_paths() ? head_groups(head_map, kv_heads) : std::nullopt) {
    const auto full = static_cast<std::size_t>(NH * hs), kv = static_cast<std::size_t>(kv_heads * hs);
    for_units(rows, sel, [&](std::int64_t n) {
      thread_local std::vector<V> x, sums, in, sum;
      thread_local std::vector<std::size_t> len;
      x.resize(full);
      sums.resize(kv);
      in.resize(kv);
      sum.resize(kv);
      len.assign(static_cast<std::size_t>(hs), static_cast<std::size_t>(groups->group));
      const auto o = static_cast<std::size_t>(n) * full, e0 = static_cast<std::size_t>(n) * kv;
      SlotSeq Dx(Tensor::Dx, e0);
      const auto k_sum = Dx.next(), k_in = Dx.next(), k_add = Dx.next(), k_store = Dx.next();
      ctx.store_array(dfull.subspan(o, full), std::span<V>(x), SlotSeq(Tensor::Dy, o).next());
      for (std::int64_t j = 0; j < kv_heads; ++j) {
        const auto ej = static_cast<std::size_t>(j * hs);
        ctx.dot_rows(numerics::BasicRowBatch<V>{len, x.data() + groups->first[static_cast<std::size_t>(j)] * hs, 1,
                                               groups->stride * hs},
                     std::span<V>(sums.data() + ej, static_cast<std::size_t>(hs)),
                     [&](std::size_t i) { return k_sum(ej + i); });
      }
      const std::span<V> out = dkv.subspan(e0, kv);
      ctx.store_array(std::span<const V>(out), std::span<V>(in), k_in);  // the cast, by store (store_cast)
      arith_array(ctx, ArithOp::Add, cspan(in), cspan(sums), std::span<V>(sum), k_add);
      ctx.store_array(cspan(sum), out, k_store);
    });
    return;
  }
  for_units(rows, sel, [&](std::int64_t n) { detail::kv_reduce_row(n, dkv, dfull, head_map, kv_heads, hs, ctx); });
}

}  // namespace roundoff::ops
