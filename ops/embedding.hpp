#pragma once
/// \file embedding.hpp
/// Token-embedding gather (OpKind::Embedding): out[n, :] = wte[tokens[n], :].
///
/// Rounding contract: forward stores the gathered row in storage (the only rounding: weights held in a wider
/// format are cast). Backward-weight adds each dout row into its token's row of dwte, tokens in order
/// n = 0..N-1, each add rounded to compute and the result stored (a sequential scatter-add).
/// Unit (Select): a token row (forward), a channel column of dwte (backward).
#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "numerics/binary32_values.hpp"
#include "numerics/round_span.hpp"
#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

// Scalar bodies on Steps (ops/steps.hpp): each body is its own reference; the backward has a binary32 body for
// the entries that compute and store in binary32 (Ctx::binary32_through).

/// out (N, C) ← wte (vocab, C) rows picked by tokens (N).  s = {N, C}. Per element e = (n, c) of out, on Y at e:
/// out = store(wte[token_n, c]).
template <class A, class T>
void embedding_forward_io(std::span<T> out, std::span<const std::int32_t> tokens, std::span<const T> wte, RowShape s,
                          const Ctx<A>& ctx, Select sel) {
  for_units(s.rows, sel, [&](std::int64_t n) {
    const std::int64_t t = tokens[static_cast<std::size_t>(n)];
    for (std::int64_t c = 0; c < s.cols; ++c) {
      const auto e = static_cast<std::size_t>(n * s.cols + c);
      out[e] = static_cast<T>(Steps<A>(ctx, Tensor::Y, e).store(wte[static_cast<std::size_t>(t * s.cols + c)]));
    }
  });
}

template <class A>
void embedding_forward(std::span<typename A::Value> out, std::span<const std::int32_t> tokens,
                       std::span<const typename A::Value> wte, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  embedding_forward_io<A, typename A::Value>(out, tokens, wte, s, ctx, sel);
}

/// dwte (vocab, C) += scatter of dout (N, C) by tokens (N). Policy pass BackwardWeight. Per element d = (n, c) of
/// dout in order of n (a token seen twice adds twice), keyed by d (not by the row of dwte it adds into): g = in(dout)
/// [Dy at d]; on Dw at d: dwte[token_n, c] = store(in(dwte[token_n, c]) + g).
namespace detail {
/// embedding_backward_weight's binary32 body (Ctx::binary32_through; every unit; dwte and dout finite, and binary32
/// values when T is double): each add in binary32, the entry casts and the store returning their values. For T
/// double, the binary64 sum of two binary32 values rounded once to binary32 is their binary32 sum (53 ≥ 2·24 + 2).
/// Finite operands give no NaN (a sum that overflows stays ±inf under the finite adds that follow), so every
/// result is the reference's. The columns are split over the threads in blocks; each element's adds stay in
/// token order on one thread.
template <class T>
void embedding_backward_weight32(std::span<T> dwte, std::span<const T> dout, std::span<const std::int32_t> tokens,
                                 RowShape s, const Ctx<Emulated>& ctx) {
  constexpr std::int64_t kCols = 64;
  const std::int64_t blocks = (s.cols + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t c0 = b * kCols;
    const auto w = static_cast<std::size_t>(std::min(kCols, s.cols - c0));
    for (std::int64_t n = 0; n < s.rows; ++n) {
      const auto row = dwte.subspan(static_cast<std::size_t>(tokens[static_cast<std::size_t>(n)] * s.cols + c0), w);
      const auto g = dout.subspan(static_cast<std::size_t>(n * s.cols + c0), w);
      if constexpr (std::is_same_v<T, float>) {
        arith_binary32(ctx, ArithOp::Add, std::span<const float>(row), g, row);
      } else {
        for (std::size_t c = 0; c < w; ++c) row[c] = static_cast<double>(static_cast<float>(row[c] + g[c]));
      }
    }
  }
}

/// Whether embedding_backward_weight32 gives the reference's values for these tensors. Only the rows of dwte that
/// the tokens add into are read or written (every other row keeps its value on either path), so only they are
/// scanned: a whole E11 table is 17 million values, its touched rows N·C (the scans of the table took 28 ms of
/// every micro-step).
template <class T>
bool embedding_backward_weight32_applies(std::span<const T> dwte, std::span<const T> dout,
                                         std::span<const std::int32_t> tokens, std::int64_t cols,
                                         const Ctx<Emulated>& ctx) {
  const auto& k = ctx.exec().kernels;
  if (!ctx.binary32_through() || !numerics::all_finite(dout, k)) return false;
  if constexpr (std::is_same_v<T, double>)
    if (!numerics::all_binary32(dout, k)) return false;
  for (const std::int32_t t : tokens) {
    const auto row = dwte.subspan(static_cast<std::size_t>(t * cols), static_cast<std::size_t>(cols));
    if (!numerics::all_finite(row, k)) return false;
    if constexpr (std::is_same_v<T, double>)
      if (!numerics::all_binary32(row, k)) return false;
  }
  return true;
}
}  // namespace detail

template <class A, class T>
void embedding_backward_weight_io(std::span<T> dwte, std::span<const T> dout, std::span<const std::int32_t> tokens,
                                  RowShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  if constexpr (std::is_same_v<A, Emulated>)
    if (sel.empty() && detail::embedding_backward_weight32_applies(std::span<const T>(dwte), dout, tokens, s.cols, ctx))
      return detail::embedding_backward_weight32(dwte, dout, tokens, s, ctx);
  for_units(s.cols, sel, [&](std::int64_t c) {
    for (std::int64_t n = 0; n < s.rows; ++n) {
      const auto e = static_cast<std::size_t>(tokens[static_cast<std::size_t>(n)] * s.cols + c);
      const auto d = static_cast<std::size_t>(n * s.cols + c);
      Steps<A> dw(ctx, Tensor::Dw, d);
      const V old = dw.in(dwte[e]);
      const V g = in_cast(ctx, Tensor::Dy, d, dout[d]);
      dwte[e] = static_cast<T>(dw.store(dw.add(old, g)));
    }
  });
}

template <class A>
void embedding_backward_weight(std::span<typename A::Value> dwte, std::span<const typename A::Value> dout,
                               std::span<const std::int32_t> tokens, RowShape s, const Ctx<A>& ctx, Select sel = {}) {
  embedding_backward_weight_io<A, typename A::Value>(dwte, dout, tokens, s, ctx, sel);
}

#define ROUNDOFF_EMBEDDING_DECL(EXTERN, A)                                                                  \
  EXTERN template void embedding_forward<A>(std::span<A::Value>, std::span<const std::int32_t>,             \
                                            std::span<const A::Value>, RowShape, const Ctx<A>&, Select);     \
  EXTERN template void embedding_backward_weight<A>(std::span<A::Value>, std::span<const A::Value>,         \
                                                    std::span<const std::int32_t>, RowShape, const Ctx<A>&,  \
                                                    Select);
ROUNDOFF_EMBEDDING_DECL(extern, Emulated)
ROUNDOFF_EMBEDDING_DECL(extern, Reference)

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void embedding_forward(std::span<float> out, std::span<const std::int32_t> tokens, std::span<const float> wte,
                       RowShape s, const Ctx<Emulated>& ctx, Select sel = {});
void embedding_backward_weight(std::span<float> dwte, std::span<const float> dout, std::span<const std::int32_t> tokens,
                               RowShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
