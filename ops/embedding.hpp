#pragma once
/// \file embedding.hpp
/// Token-embedding gather (OpKind::Embedding): out[n, :] = wte[tokens[n], :].
///
/// Rounding contract: forward stores the gathered row in storage (the only rounding: weights held in a wider
/// format are cast). Backward-weight adds each dout row into its token's row of dwte, tokens in order
/// n = 0..N-1, each add rounded to compute and the result stored (a sequential scatter-add).
/// Unit (Select): a token row (forward), a channel column of dwte (backward).
#include <cstdint>
#include <span>

#include "ops/backend.hpp"
#include "ops/shape.hpp"

namespace roundoff::ops {

/// out (N, C) ← wte (vocab, C) rows picked by tokens (N).  s = {N, C}.
template <class A>
void embedding_forward(std::span<typename A::Value> out, std::span<const std::int32_t> tokens,
                       std::span<const typename A::Value> wte, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  for_units(s.rows, sel, [&](std::int64_t n) {
    const std::int64_t t = tokens[static_cast<std::size_t>(n)];
    for (std::int64_t c = 0; c < s.cols; ++c) {
      const auto e = static_cast<std::size_t>(n * s.cols + c);
      out[e] = ctx.store(wte[static_cast<std::size_t>(t * s.cols + c)], key(Tensor::Y, e, 0));
    }
  });
}

/// dwte (vocab, C) += scatter of dout (N, C) by tokens (N). Policy pass BackwardWeight.
template <class A>
void embedding_backward_weight(std::span<typename A::Value> dwte, std::span<const typename A::Value> dout,
                               std::span<const std::int32_t> tokens, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  for_units(s.cols, sel, [&](std::int64_t c) {
    for (std::int64_t n = 0; n < s.rows; ++n) {
      const auto e = static_cast<std::size_t>(tokens[static_cast<std::size_t>(n)] * s.cols + c);
      const auto d = static_cast<std::size_t>(n * s.cols + c);  // keys: the add of dout element d
      dwte[e] = ctx.store(ctx.add(ctx.in(dwte[e], key(Tensor::Dw, d, 0)), ctx.in(dout[d], key(Tensor::Dy, d, 0)),
                                  key(Tensor::Dw, d, 1)),
                          key(Tensor::Dw, d, 2));
    }
  });
}

#define ROUNDOFF_EMBEDDING_DECL(EXTERN, A)                                                                  \
  EXTERN template void embedding_forward<A>(std::span<A::Value>, std::span<const std::int32_t>,             \
                                            std::span<const A::Value>, RowShape, const Ctx<A>&, Select);     \
  EXTERN template void embedding_backward_weight<A>(std::span<A::Value>, std::span<const A::Value>,         \
                                                    std::span<const std::int32_t>, RowShape, const Ctx<A>&,  \
                                                    Select);
ROUNDOFF_EMBEDDING_DECL(extern, Emulated)
ROUNDOFF_EMBEDDING_DECL(extern, Reference)

}  // namespace roundoff::ops
