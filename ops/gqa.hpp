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
#include <span>
#include <vector>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

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

/// dkv (rows, NKV·hs) += Σ over the query heads of each KV head of dfull (rows, NH·hs). Policy pass
/// BackwardData of the caller's entry.
template <class A>
void kv_reduce_backward(std::span<typename A::Value> dkv, std::span<const typename A::Value> dfull,
                        std::span<const int> head_map, std::int64_t kv_heads, std::int64_t hs, const Ctx<A>& ctx,
                        Select sel = {}) {
  using V = typename A::Value;
  const auto NH = static_cast<std::int64_t>(head_map.size());
  const std::int64_t rows = static_cast<std::int64_t>(dfull.size()) / (NH * hs);
  for_units(rows, sel, [&](std::int64_t n) {
    std::vector<V> terms;
    terms.reserve(static_cast<std::size_t>(NH));
    for (std::int64_t j = 0; j < kv_heads; ++j)
      for (std::int64_t i = 0; i < hs; ++i) {
        terms.clear();
        for (std::int64_t h = 0; h < NH; ++h)
          if (head_map[static_cast<std::size_t>(h)] == j)
            terms.push_back(ctx.in(dfull[static_cast<std::size_t>((n * NH + h) * hs + i)],
                                   key(Tensor::Dy, (n * NH + h) * hs + i, 0)));
        const auto e = static_cast<std::size_t>((n * kv_heads + j) * hs + i);
        const V s = ctx.sum(terms.data(), 1, terms.size(), key(Tensor::Dx, e, 0));
        dkv[e] = ctx.store(ctx.add(ctx.in(dkv[e], key(Tensor::Dx, e, 1)), s, key(Tensor::Dx, e, 2)), key(Tensor::Dx, e, 3));
      }
  });
}

}  // namespace roundoff::ops
