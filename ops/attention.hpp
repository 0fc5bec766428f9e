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
/// Speed: each head's operands are cast into per-thread scratch (q, k, v, dout as T × hs; att and dpreatt only
/// their causal part, zeros above the diagonal that no sum reads). When ctx.gemm_is_dot() (the accumulation does
/// not round stochastically) the dot products of a head run on ctx's GEMMs (numerics' SIMD kernels where they
/// apply): QKᵀ and dout·Vᵀ as one T×T×hs GEMM per band of query rows (only the causal outputs are used), the
/// causal sums as one numerics::gemm_ranged call per head with each output row's exact k-range — att·V and
/// dq = dps·K over [0, t+1), dk = dpsᵀ·Q and dv = attᵀ·dout over [t, T) — never zero-padded, since s + 0·x turns
/// −0 into +0 and 0·inf into NaN. Each C_ij then gets dot()'s conversion with dot()'s key (compute_array /
/// result_array), and the elementwise steps run as span forms (store_array, arith_array) with the per-element
/// keys, so the bits equal the per-element definition's (tests/ops/attention_gemm_test.cpp); otherwise each dot
/// runs alone.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "numerics/binary32_values.hpp"
#include "ops/backend.hpp"
#include "ops/shape.hpp"
#include "ops/span_arith.hpp"
#include "ops/steps.hpp"

namespace roundoff::ops {

namespace detail {
template <class V>
std::vector<V> cast_in(std::span<const V> x, const auto& ctx, Tensor t) {
  std::vector<V> r(x.size());
  ctx.in_array(x, r, t);
  return r;
}
/// cast_in of a tensor in binary32 storage: the cast values in binary64.
inline std::vector<double> cast_in(std::span<const float> x, const Ctx<Emulated>& ctx, Tensor t) {
  std::vector<double> r(x.size());
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
/// The scratch_buffer slots the attention ops hold (a head's operands and products).
enum class Slot : std::uint8_t { Raw, Y, Tmp, Head1, Head2, Head3 };
template <class V, Slot slot>
std::span<V> scratch(std::size_t n) {
  return scratch_buffer<V>(n, static_cast<std::size_t>(slot));
}
/// The causal k-ranges of a head's T rows: [0, t+1) (prefix: the sum over j ≤ t) or [t, T) (suffix: i ≥ t).
inline std::span<const numerics::KRange> causal_ranges(std::int64_t T, bool prefix) {
  thread_local std::vector<numerics::KRange> r[2];
  std::vector<numerics::KRange>& v = r[prefix ? 1 : 0];
  if (v.size() != static_cast<std::size_t>(T)) {
    v.resize(static_cast<std::size_t>(T));
    for (std::size_t t = 0; t < v.size(); ++t) v[t] = prefix ? numerics::KRange{0, t + 1} : numerics::KRange{t, v.size()};
  }
  return v;
}
/// Head (b, h) of a (B, T, NH·hs) tensor cast on entry by store (store_cast: the first slot of each element of
/// tensor t): dst[t·hs + d], T × hs. S: x's element type (A::Value, or float in binary32 storage) here and below.
template <class A, Slot slot, class S>
std::span<typename A::Value> cast_head(const Ctx<A>& ctx, std::span<const S> x, const AttnShape& s, std::int64_t b,
                                       std::int64_t h, Tensor t) {
  using V = typename A::Value;
  const auto hs = static_cast<std::size_t>(s.hs);
  const std::span<V> dst = scratch<V, slot>(static_cast<std::size_t>(s.T) * hs);
  [[maybe_unused]] const bool through = binary32_through<A, S>(ctx);
  for (std::int64_t r = 0; r < s.T; ++r) {
    const std::size_t e0 = at3(s, b, r, h, 0);
    const std::span<V> row(dst.data() + static_cast<std::size_t>(r) * hs, hs);
    if constexpr (kBinary32Body<A, S>)  // the store's cast is the widening for binary32 values but NaN
      if (through && numerics::widen_binary32_checked(x.subspan(e0, hs), row, ctx.exec().kernels)) continue;
    ctx.store_array(x.subspan(e0, hs), row, SlotSeq(t, e0).next());
  }
  return dst;
}
/// The causal part of head (b, h) of a (B, NH, T, T) tensor cast on entry by store: dst[r·T + j] = store(x[b,h,r,j])
/// for j ≤ r (store_cast: the first slot of each element of tensor t); 0 above the diagonal (never summed).
template <class A, Slot slot, class S>
std::span<typename A::Value> cast_causal(const Ctx<A>& ctx, std::span<const S> x, const AttnShape& s, std::int64_t b,
                                         std::int64_t h, Tensor t) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  const std::span<V> dst = scratch<V, slot>(T * T);
  for (std::size_t r = 0; r < T; ++r) {
    const std::size_t e0 = at4(s, b, h, static_cast<std::int64_t>(r), 0);
    ctx.store_array(x.subspan(e0, r + 1), std::span<V>(dst.data() + r * T, r + 1), SlotSeq(t, e0).next());
    std::fill(dst.begin() + static_cast<std::ptrdiff_t>(r * T + r + 1),
              dst.begin() + static_cast<std::ptrdiff_t>((r + 1) * T), V(0));
  }
  return dst;
}
/// out[j] = d[j]·scale for j < d.size() (d: compute values), out's tail zeroed, in hardware binary32
/// (Ctx::binary32_through): false, nothing written, when a product would be NaN.
inline bool scale_row32(const Ctx<Emulated>& ctx, std::span<float> out, std::span<const float> d, float scale) {
  thread_local std::vector<float> p;  // d.size()
  p.resize(d.size());
  arith_binary32(ctx, ArithOp::Mul, d, std::span<const float>(&scale, 1), p);
  if (!store_binary32(ctx, {{cspan(p), out.first(d.size())}})) return false;
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(d.size()), out.end(), 0.0f);
  return true;
}
inline bool scale_row32(const Ctx<Emulated>& ctx, std::span<float> out, std::span<const double> d, float scale) {
  thread_local std::vector<float> d32;  // d.size()
  d32.resize(d.size());
  numerics::narrow_to_binary32(d, d32, ctx.exec().kernels);  // exact
  return scale_row32(ctx, out, cspan(d32), scale);
}
/// row[j] = x[j]·scale widened (x: binary32 storage, its entry cast the identity), in hardware binary32
/// (Ctx::binary32_through): false, row untouched, when x or a product holds a NaN.
inline bool scale_widen_row32(const Ctx<Emulated>& ctx, std::span<double> row, std::span<const float> x, float scale) {
  thread_local std::vector<float> p;  // x.size()
  p.resize(x.size());
  if (numerics::any_nan(x, ctx.exec().kernels)) return false;
  arith_binary32(ctx, ArithOp::Mul, x, std::span<const float>(&scale, 1), p);
  if (numerics::any_nan(cspan(p), ctx.exec().kernels)) return false;
  numerics::widen_binary32(cspan(p), row, ctx.exec().kernels);
  return true;
}
/// add_into's steps in hardware binary32 (Ctx::binary32_through; r: compute values, so binary32 values): false,
/// nothing written, when a sum would be NaN (add_into's binary64 form then takes the row).
inline bool add_into_row32(const Ctx<Emulated>& ctx, std::span<float> g, std::span<const float> r) {
  thread_local std::vector<float> sum;  // g.size()
  sum.resize(g.size());
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(g), r, sum);
  return store_binary32(ctx, {{cspan(sum), g}});
}
inline bool add_into_row32(const Ctx<Emulated>& ctx, std::span<float> g, std::span<const double> r) {
  thread_local std::vector<float> r32;  // g.size()
  r32.resize(g.size());
  numerics::narrow_to_binary32(r, r32, ctx.exec().kernels);  // exact
  return add_into_row32(ctx, g, cspan(r32));
}
/// g[i] ← store(store(g[i]) + r[i]) (the add in compute), the next three slots of `seq` (over g's elements) in that
/// order (through: binary32_through<A, S>(ctx), the caller's, which takes add_into_row32 first)
/// order: a gradient accumulating reduction results r already in compute (the reduction took the slot before).
template <class A, class S>
void add_into(const Ctx<A>& ctx, std::span<S> g, std::span<const typename A::Value> r, SlotSeq& seq, bool through) {
  using V = typename A::Value;
  const auto k_in = seq.next(), k_add = seq.next(), k_store = seq.next();
  if constexpr (kBinary32Body<A, S>)
    if (through && add_into_row32(ctx, g, r)) return;
  const std::span<V> gi = scratch<V, Slot::Y>(g.size());
  const std::span<V> sum = scratch<V, Slot::Tmp>(g.size());
  ctx.store_array(std::span<const S>(g), std::span<V>(gi), k_in);  // the cast, by store (store_cast)
  arith_array(ctx, ArithOp::Add, std::span<const V>(gi), r, std::span<V>(sum), k_add);
  ctx.store_array(std::span<const V>(sum), g, k_store);
}
/// add_into of binary32 reduction results r (compute values, none NaN) on binary32 heads: add_into_row32, or, where
/// a sum is NaN, add_into's steps on r widened (exactly the binary64 path's r) with the slots of SlotSeq(t, e0)
/// after the reduction's.
inline void add_into32(const Ctx<Emulated>& ctx, std::span<float> g, std::span<const float> r, Tensor t,
                       std::size_t e0, bool through) {
  if (add_into_row32(ctx, g, r)) return;
  const std::span<double> rw = scratch<double, Slot::Raw>(r.size());  // not one of add_into's slots
  numerics::widen_binary32(r, rw, ctx.exec().kernels);
  SlotSeq seq(t, e0);
  (void)seq.next();  // the reduction's slot
  add_into(ctx, g, std::span<const double>(rw), seq, through);
}
// Binary32 heads (issue 45, typed storage): under heads32 the GEMM bodies read the binary32 tensors in place (a
// head's rows C or T apart), multiply on the kernels' binary32 forms (Ctx::gemm32, gemm_ranged32) into binary32
// products, convert them to compute (Ctx::compute_binary32) and run the elementwise steps as the binary32 bodies
// do. Every entry cast is then the identity on a non-NaN value (each value read is a value of storage), and the
// kernels' binary32 forms give the bits of their binary64 forms on the widened operands, so each product equals
// the binary64 head path's, which runs instead when a kernel declines or a product is NaN (a NaN read among them:
// its entry cast's NaN rule is the binary64 path's business): the whole head when nothing has been written yet
// (every product is made before the first write), a row where a sum into a gradient is NaN.

/// Whether the attention GEMM bodies may run on binary32 heads: the GEMMs equal the dots (Ctx::gemm_is_dot) and
/// binary32_through<A, S>(ctx, read) (binary16_through with every tensor read holding fp16 values included). A NaN
/// read needs no scan: a NaN operand that a sum reads makes a NaN product, which sends its head to the binary64 path,
/// and a NaN in a gradient read makes a NaN sum, which sends its row there.
template <class A, class S>
bool heads32(const Ctx<A>& ctx, std::initializer_list<std::span<const S>> read) {
  if constexpr (kBinary32Body<A, S>) return ctx.gemm_is_dot() && binary32_through<A, S>(ctx, read);
  return false;
}
/// Head (b, h) of a (B, T, NH·hs) binary32 tensor in place: T × hs, rows C apart.
inline numerics::ConstMatrix32 head_at(std::span<const float> x, const AttnShape& s, std::int64_t b, std::int64_t h) {
  return {x.data() + at3(s, b, 0, h, 0), static_cast<std::size_t>(s.C())};
}
/// Head (b, h) of a (B, NH, T, T) binary32 tensor in place: T × T, rows T apart (transposed: read as its transpose).
inline numerics::ConstMatrix32 square_at(std::span<const float> x, const AttnShape& s, std::int64_t b, std::int64_t h,
                                         bool transposed = false) {
  return {x.data() + at4(s, b, h, 0, 0), static_cast<std::size_t>(s.T), transposed};
}
/// causal_dots' products on binary32 heads x, y (T × hs): raw[t·T + j] = x[t,:]·y[j,:] converted to compute for
/// j ≤ t (the band GEMMs on Ctx::gemm32). False when a GEMM declines or a causal product is NaN.
inline bool causal_dots32(const Ctx<Emulated>& ctx, const AttnShape& s, numerics::ConstMatrix32 x,
                          numerics::ConstMatrix32 y, std::span<float> raw) {
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  for (std::size_t t0 = 0; t0 < T; t0 += static_cast<std::size_t>(kBand)) {
    const std::size_t t1 = std::min(T, t0 + static_cast<std::size_t>(kBand));
    // raw[t, j] = x[t,:]·y[j,:] for t in [t0, t1), j < t1 (the band's causal columns)
    if (!ctx.gemm32(t1 - t0, t1, hs, {x.data + t0 * x.ld, x.ld}, {y.data, y.ld, true}, raw.data() + t0 * T, T))
      return false;
    for (std::size_t t = t0; t < t1; ++t) {
      const std::span<float> row(raw.data() + t * T, t + 1);
      if (numerics::any_nan(cspan(row), ctx.exec().kernels)) return false;
      ctx.compute_binary32(row);
    }
  }
  return true;
}
/// out (T × hs) = a·b over the causal k-ranges (prefix: [0, t+1) for row t; suffix: [t, T)) on
/// Ctx::gemm_ranged32, converted to compute. False when the GEMM declines or a product is NaN.
inline bool causal_ranged32(const Ctx<Emulated>& ctx, const AttnShape& s, numerics::ConstMatrix32 a,
                            numerics::ConstMatrix32 b, bool prefix, std::span<float> out) {
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  if (!ctx.gemm_ranged32(T, hs, T, a, b, causal_ranges(s.T, prefix), out.data(), hs)) return false;
  if (numerics::any_nan(std::span<const float>(out.first(T * hs)), ctx.exec().kernels)) return false;
  ctx.compute_binary32(out.first(T * hs));
  return true;
}

/// The causal dot products of head (b, h): for every query row t, g[j] = x[t,:]·y[j,:] for j ≤ t in compute
/// (dot()'s conversion, keyed by the first slot of SlotSeq O(out, e0), e0 = at4(s, b, h, t, 0)), in
/// raw[t·T, t·T + t + 1), then row(t, e0, g, O) with O at its next slot. x and y are T × hs heads. When the GEMMs equal the dots (Ctx::gemm_is_dot), one GEMM per band
/// of kBand query rows over the band's causal columns, the outputs converted with compute_array; otherwise
/// one ctx.dot per output.
template <class A, class RowFn>
void causal_dots(const Ctx<A>& ctx, const AttnShape& s, std::int64_t b, std::int64_t h,
                 std::span<const typename A::Value> x, std::span<const typename A::Value> y,
                 std::span<typename A::Value> raw, Tensor out, RowFn&& row) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  for (std::int64_t t0 = 0; t0 < s.T; t0 += kBand) {
    const std::int64_t t1 = std::min(s.T, t0 + kBand);
    // raw[t, j] = x[t,:]·y[j,:] for t in [t0, t1), j < t1 (the band's causal columns)
    if (batched)
      ctx.gemm(static_cast<std::size_t>(t1 - t0), static_cast<std::size_t>(t1), hs,
               M{x.data() + static_cast<std::size_t>(t0) * hs, hs}, M{y.data(), hs, true},
               raw.data() + static_cast<std::size_t>(t0) * T, T, false, kBatchedGemm);
    for (std::int64_t t = t0; t < t1; ++t) {
      const auto tu = static_cast<std::size_t>(t);
      const std::size_t e0 = at4(s, b, h, t, 0), n = tu + 1;
      const std::span<V> g(raw.data() + tu * T, n);
      SlotSeq O(out, e0);
      const auto k_dot = O.next();
      if (batched) {
        ctx.compute_array(g, k_dot);
      } else {
        for (std::size_t j = 0; j < n; ++j) g[j] = ctx.dot(x.data() + tu * hs, 1, y.data() + j * hs, 1, hs, k_dot(j));
      }
      row(tu, e0, g, O);
    }
  }
}
/// The scalar references' gradient accumulation: grad[e] ← store(store(grad[e]) + dot(st)), the dot taking the first
/// slots of element e's Steps and the cast, add and store the next three (add_into's order, per element).
template <class A, class Dot>
void accumulate_ref(const Ctx<A>& ctx, std::span<typename A::Value> grad, Tensor t, std::size_t e, Dot&& dot) {
  using V = typename A::Value;
  Steps<A> st(ctx, t, e);
  const V r = dot(st);
  const V old = st.store(grad[e]);
  grad[e] = st.store(st.add(old, r));
}

// The softmax's binary32 bodies (Ctx::binary32_through): the reference's elementwise steps on one row in hardware
// binary32, where the entry casts and stores return their values; false, nothing written, when a row would hold a
// NaN (the caller's binary64 form then takes the row). The row reductions stay on binary64 rows (dot_rows).

/// ex = exp(x − m) of one softmax row (m: its first maximum, as the reference takes it).
inline bool softmax_exps_row32(std::span<const float> x, std::span<float> ex, const Ctx<Emulated>& ctx) {
  if (numerics::any_nan(x, ctx.exec().kernels)) return false;
  float m = x[0];
  for (std::size_t j = 1; j < x.size(); ++j)
    if (x[j] > m) m = x[j];
  arith_binary32(ctx, ArithOp::Sub, x, std::span<const float>(&m, 1), ex);  // d = x − m
  ctx.elementary_binary32(numerics::Elementary::Exp, cspan(ex), ex);        // x' = exp(d)
  return !numerics::any_nan(cspan(ex), ctx.exec().kernels);
}

/// att = ex / z on one row (z: the row's sum, a compute value), the causal row's tail zeroed.
inline bool softmax_normalise_row32(std::span<float> att, std::span<const float> ex, double z,
                                    const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> q;  // n
  q.resize(ex.size());
  const float zf = static_cast<float>(z);  // exact: a compute (binary32) value
  arith_binary32(ctx, ArithOp::Div, ex, std::span<const float>(&zf, 1), q);  // q = x' / Z
  if (!store_binary32(ctx, {{cspan(q), att.first(ex.size())}})) return false;
  std::fill(att.begin() + static_cast<std::ptrdiff_t>(ex.size()), att.end(), 0.0f);
  return true;
}

/// dpreatt ← dpreatt + a·(g − d) on one row (d: the row's dot, a compute value).
inline bool softmax_backward_row32(std::span<float> dp, std::span<const float> a, std::span<const float> g, double d,
                                   const Ctx<Emulated>& ctx) {
  thread_local std::vector<float> u, v;  // n
  u.resize(a.size());
  v.resize(a.size());
  const float df = static_cast<float>(d);  // exact: a compute (binary32) value
  arith_binary32(ctx, ArithOp::Sub, g, std::span<const float>(&df, 1), u);  // u = g − d
  arith_binary32(ctx, ArithOp::Mul, a, cspan(u), v);                        // v = a·u
  arith_binary32(ctx, ArithOp::Add, std::span<const float>(dp), cspan(v), u);  // sum = p + v
  return store_binary32(ctx, {{cspan(u), dp}});
}
}  // namespace detail

/// preatt[b,h,t,s] = (q[b,t,h,:]·k[b,s,h,:])·(1/√hs) for s ≤ t, else 0. The reference, per score element
/// e = (b, h, t, j) of preatt (B, NH, T, T), j ≤ t (ops/steps.hpp): q = store(q) [Q], k = store(k) [K] (the entry
/// casts, by store: store_cast); on Preatt at e: d = q[b,t,h,:]·k[b,j,h,:] (dot), p = d·(1/√hs), preatt = store(p);
/// preatt = 0 above the diagonal.
template <class A>
void attn_scores_forward_reference(std::span<typename A::Value> preatt, std::span<const typename A::Value> q,
                                   std::span<const typename A::Value> k, AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  using detail::at3, detail::at4;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const auto hs = static_cast<std::size_t>(s.hs);
  std::vector<V> qc(q.size()), kc(k.size());  // q, k (B, T, NH·hs) cast on entry
  for (std::size_t i = 0; i < q.size(); ++i) {
    qc[i] = store_cast(ctx, Tensor::Q, i, q[i]);
    kc[i] = store_cast(ctx, Tensor::K, i, k[i]);
  }
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t t = 0; t < s.T; ++t)
        for (std::int64_t j = 0; j < s.T; ++j) {
          const std::size_t e = at4(s, b, h, t, j);
          if (j > t) {
            preatt[e] = V(0);
            continue;
          }
          Steps<A> p(ctx, Tensor::Preatt, e);
          const V d = p.dot(&qc[at3(s, b, t, h, 0)], 1, &kc[at3(s, b, j, h, 0)], 1, hs);
          preatt[e] = p.store(p.mul(d, scale));
        }
}

namespace detail {
/// attn_scores_forward_io's head (b, h) on binary32 heads (heads32): false when a product declines or is NaN (the
/// binary64 path then writes the head again).
inline bool scores_forward_head32(const Ctx<Emulated>& ctx, std::span<float> preatt, std::span<const float> q,
                                  std::span<const float> k, const AttnShape& s, std::int64_t b, std::int64_t h,
                                  float scale) {
  const auto T = static_cast<std::size_t>(s.T);
  const std::span<float> raw = scratch<float, Slot::Raw>(T * T);  // T × T: the causal products
  if (!causal_dots32(ctx, s, head_at(q, s, b, h), head_at(k, s, b, h), raw)) return false;
  for (std::size_t t = 0; t < T; ++t)
    if (!scale_row32(ctx, preatt.subspan(at4(s, b, h, static_cast<std::int64_t>(t), 0), T),
                     std::span<const float>(raw.data() + t * T, t + 1), scale))
      return false;
  return true;
}
}  // namespace detail

/// attn_scores_forward_reference head by head: the dots of a head as GEMMs (detail::causal_dots), the scale and
/// the store on row spans; on binary32 heads where detail::heads32 allows.
template <class A, class S>
void attn_scores_forward_io(std::span<S> preatt, std::span<const S> q, std::span<const S> k, AttnShape s,
                            const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  using detail::Slot;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const auto T = static_cast<std::size_t>(s.T);
  [[maybe_unused]] const bool through = binary32_through<A, S>(ctx);
  [[maybe_unused]] const bool h32 = detail::heads32<A, S>(ctx, {q, k});
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    if constexpr (kBinary32Body<A, S>)
      if (h32 && detail::scores_forward_head32(ctx, preatt, q, k, s, b, h, static_cast<float>(scale))) return;
    const std::span<V> qh = detail::cast_head<A, Slot::Head1>(ctx, q, s, b, h, Tensor::Q);
    const std::span<V> kh = detail::cast_head<A, Slot::Head2>(ctx, k, s, b, h, Tensor::K);
    const std::span<V> raw = detail::scratch<V, Slot::Raw>(T * T);
    const std::span<V> prod = detail::scratch<V, Slot::Tmp>(T);
    detail::causal_dots(ctx, s, b, h, std::span<const V>(qh), std::span<const V>(kh), raw, Tensor::Preatt,
                        [&](std::size_t t, std::size_t e0, std::span<V> d, SlotSeq& P) {
                          const std::size_t n = t + 1;
                          const auto k_mul = P.next(), k_store = P.next();
                          if constexpr (kBinary32Body<A, S>)
                            if (through && detail::scale_row32(ctx, preatt.subspan(e0, T), std::span<const V>(d),
                                                               static_cast<float>(scale)))
                              return;
                          arith_const(ctx, ArithOp::Mul, std::span<const V>(d), scale, std::span<V>(prod.data(), n),
                                      k_mul);
                          ctx.store_array(std::span<const V>(prod.data(), n), preatt.subspan(e0, n), k_store);
                          std::fill(preatt.begin() + static_cast<std::ptrdiff_t>(e0 + n),
                                    preatt.begin() + static_cast<std::ptrdiff_t>(e0 + T), S(0));
                        });
  });
}

template <class A>
void attn_scores_forward(std::span<typename A::Value> preatt, std::span<const typename A::Value> q,
                         std::span<const typename A::Value> k, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  attn_scores_forward_io<A, typename A::Value>(preatt, q, k, s, ctx, sel);
}

/// dq += (dpreatt/√hs)·k, dk += (dpreatt/√hs)ᵀ·q (causal part). Pass BackwardData. The reference (ops/steps.hpp):
/// q = store(q) [Q], k = store(k) [K]; per score element e = (b, h, t, j), j ≤ t, on Dpreatt at e: g = store(dpreatt)
/// (the entry cast, by store), ds = g·(1/√hs); per element e = (b, t, h, d) of dq (B, T, NH·hs), on Dq at e:
/// r = Σ_{j ≤ t} ds[b,h,t,j]·k[b,j,h,d] (dot, j ascending), old = store(dq), dq = store(old + r); per element
/// e = (b, j, h, d) of dk, on Dk at e: r = Σ_{t ≥ j} ds[b,h,t,j]·q[b,t,h,d] (dot, t ascending), then as dq.
template <class A>
void attn_scores_backward_data_reference(std::span<typename A::Value> dq, std::span<typename A::Value> dk,
                                         std::span<const typename A::Value> dpreatt,
                                         std::span<const typename A::Value> q, std::span<const typename A::Value> k,
                                         AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  using detail::at3, detail::at4;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const auto C = static_cast<std::ptrdiff_t>(s.C()), T = static_cast<std::ptrdiff_t>(s.T);
  std::vector<V> qc(q.size()), kc(k.size());  // q, k (B, T, NH·hs) cast on entry
  for (std::size_t i = 0; i < q.size(); ++i) {
    qc[i] = store_cast(ctx, Tensor::Q, i, q[i]);
    kc[i] = store_cast(ctx, Tensor::K, i, k[i]);
  }
  std::vector<V> ds(dpreatt.size(), V(0));  // (B, NH, T, T): dpreatt/√hs on the causal part
  for (std::int64_t r = 0; r < s.heads() * s.T; ++r)
    for (std::int64_t j = 0; j <= r % s.T; ++j) {
      const auto e = static_cast<std::size_t>(r * s.T + j);
      Steps<A> p(ctx, Tensor::Dpreatt, e);
      const V g = p.store(dpreatt[e]);
      ds[e] = p.mul(g, scale);
    }
  const auto accumulate = [&](std::span<V> grad, Tensor t, std::size_t e, auto&& dot) {
    detail::accumulate_ref(ctx, grad, t, e, dot);
  };
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t t = 0; t < s.T; ++t)
      for (std::int64_t h = 0; h < s.NH; ++h)
        for (std::int64_t d = 0; d < s.hs; ++d) {
          const std::size_t e = at3(s, b, t, h, d);
          const auto n = static_cast<std::size_t>(t + 1), m = static_cast<std::size_t>(s.T - t);
          accumulate(dq, Tensor::Dq, e, [&](Steps<A>& st) {
            return st.dot(&ds[at4(s, b, h, t, 0)], 1, &kc[at3(s, b, 0, h, d)], C, n);
          });
          accumulate(dk, Tensor::Dk, e, [&](Steps<A>& st) {
            return st.dot(&ds[at4(s, b, h, t, t)], T, &qc[at3(s, b, t, h, d)], C, m);
          });
        }
}

namespace detail {
/// attn_scores_backward_data_io's head (b, h) on binary32 heads (heads32): false, nothing written, when a product
/// declines or is NaN.
inline bool scores_backward_head32(const Ctx<Emulated>& ctx, std::span<float> dq, std::span<float> dk,
                                   std::span<const float> dpreatt, std::span<const float> q, std::span<const float> k,
                                   const AttnShape& s, std::int64_t b, std::int64_t h, float scale, bool through) {
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  // dps[t,j] = dpreatt[t,j]·scale for j ≤ t, 0 above (read by the packing, never summed)
  const std::span<float> dps = scratch<float, Slot::Head3>(T * T);
  for (std::size_t t = 0; t < T; ++t) {
    const std::span<float> row(dps.data() + t * T, t + 1);
    arith_binary32(ctx, ArithOp::Mul, dpreatt.subspan(at4(s, b, h, static_cast<std::int64_t>(t), 0), t + 1),
                   std::span<const float>(&scale, 1), row);
    if (numerics::any_nan(cspan(row), ctx.exec().kernels)) return false;
    std::fill(dps.begin() + static_cast<std::ptrdiff_t>(t * T + t + 1),
              dps.begin() + static_cast<std::ptrdiff_t>((t + 1) * T), 0.0f);
  }
  // raw[t·hs + d] = Σ_{j ≤ t} dps[t,j]·k[j,d];  raw[(T + t)·hs + d] = Σ_{i ≥ t} dps[i,t]·q[i,d]
  const std::span<float> raw = scratch<float, Slot::Raw>(2 * T * hs);
  if (!causal_ranged32(ctx, s, {dps.data(), T}, head_at(k, s, b, h), true, raw.first(T * hs)) ||
      !causal_ranged32(ctx, s, {dps.data(), T, true}, head_at(q, s, b, h), false, raw.subspan(T * hs, T * hs)))
    return false;
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t e0 = at3(s, b, static_cast<std::int64_t>(t), h, 0);
    add_into32(ctx, dq.subspan(e0, hs), std::span<const float>(raw.data() + t * hs, hs), Tensor::Dq, e0, through);
    add_into32(ctx, dk.subspan(e0, hs), std::span<const float>(raw.data() + (T + t) * hs, hs), Tensor::Dk, e0,
               through);
  }
  return true;
}
}  // namespace detail

/// attn_scores_backward_data_reference head by head: the causal sums as GEMMs with per-row k-ranges, the
/// elementwise steps on row spans; on binary32 heads where detail::heads32 allows.
template <class A, class S>
void attn_scores_backward_data_io(std::span<S> dq, std::span<S> dk, std::span<const S> dpreatt, std::span<const S> q,
                                  std::span<const S> k, AttnShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  using detail::Slot;
  const V scale = ctx.c(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  [[maybe_unused]] const bool through = binary32_through<A, S>(ctx);
  [[maybe_unused]] const bool h32 =
      detail::heads32<A, S>(ctx, {std::span<const S>(dq), std::span<const S>(dk), dpreatt, q, k});
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    if constexpr (kBinary32Body<A, S>)
      if (h32 && detail::scores_backward_head32(ctx, dq, dk, dpreatt, q, k, s, b, h, static_cast<float>(scale),
                                                through))
        return;
    const std::span<V> qh = detail::cast_head<A, Slot::Head1>(ctx, q, s, b, h, Tensor::Q);
    const std::span<V> kh = detail::cast_head<A, Slot::Head2>(ctx, k, s, b, h, Tensor::K);
    // dps[t,j] = store(dpreatt[t,j])·scale for j ≤ t, 0 above (never summed)
    const std::span<V> dps = detail::scratch<V, Slot::Head3>(T * T);
    const std::span<V> prod = detail::scratch<V, Slot::Tmp>(T);
    for (std::size_t t = 0; t < T; ++t) {
      const std::span<V> row(dps.data() + t * T, t + 1);
      const std::size_t e0 = detail::at4(s, b, h, static_cast<std::int64_t>(t), 0);
      SlotSeq P(Tensor::Dpreatt, e0);
      const auto k_in = P.next(), k_mul = P.next();
      if constexpr (kBinary32Body<A, S>)
        if (through && detail::scale_widen_row32(ctx, row, dpreatt.subspan(e0, t + 1), static_cast<float>(scale))) {
          std::fill(dps.begin() + static_cast<std::ptrdiff_t>(t * T + t + 1),
                    dps.begin() + static_cast<std::ptrdiff_t>((t + 1) * T), V(0));
          continue;
        }
      ctx.store_array(dpreatt.subspan(e0, t + 1), row, k_in);
      arith_const(ctx, ArithOp::Mul, std::span<const V>(row), scale, std::span<V>(prod.data(), t + 1), k_mul);
      std::copy_n(prod.begin(), t + 1, row.begin());
      std::fill(dps.begin() + static_cast<std::ptrdiff_t>(t * T + t + 1),
                dps.begin() + static_cast<std::ptrdiff_t>((t + 1) * T), V(0));
    }
    const std::span<V> raw = detail::scratch<V, Slot::Raw>(2 * T * hs);
    if (batched) {
      // raw[t·hs + d] = Σ_{j ≤ t} dps[t,j]·k[j,d];  raw[(T + t)·hs + d] = Σ_{i ≥ t} dps[i,t]·q[i,d]
      ctx.gemm_ranged(T, hs, T, M{dps.data(), T}, M{kh.data(), hs}, detail::causal_ranges(s.T, true), raw.data(),
                      hs, detail::kBatchedGemm);
      ctx.gemm_ranged(T, hs, T, M{dps.data(), T, true}, M{qh.data(), hs}, detail::causal_ranges(s.T, false),
                      raw.data() + T * hs, hs, detail::kBatchedGemm);
    }
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t e0 = detail::at3(s, b, static_cast<std::int64_t>(t), h, 0);
      const std::span<V> gq(raw.data() + t * hs, hs), gk(raw.data() + (T + t) * hs, hs);
      SlotSeq Dq(Tensor::Dq, e0), Dk(Tensor::Dk, e0);
      const auto k_dq = Dq.next(), k_dk = Dk.next();
      if (batched) {
        ctx.compute_array(gq, k_dq);
        ctx.compute_array(gk, k_dk);
      } else {
        for (std::size_t d = 0; d < hs; ++d) {
          gq[d] = ctx.dot(dps.data() + t * T, 1, kh.data() + d, s.hs, t + 1, k_dq(d));
          gk[d] = ctx.dot(dps.data() + t * T + t, s.T, qh.data() + t * hs + d, s.hs, T - t, k_dk(d));
        }
      }
      detail::add_into(ctx, dq.subspan(e0, hs), std::span<const V>(gq), Dq, through);
      detail::add_into(ctx, dk.subspan(e0, hs), std::span<const V>(gk), Dk, through);
    }
  });
}

template <class A>
void attn_scores_backward_data(std::span<typename A::Value> dq, std::span<typename A::Value> dk,
                               std::span<const typename A::Value> dpreatt, std::span<const typename A::Value> q,
                               std::span<const typename A::Value> k, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  attn_scores_backward_data_io<A, typename A::Value>(dq, dk, dpreatt, q, k, s, ctx, sel);
}

/// att[b,h,t,:t+1] = softmax(preatt[b,h,t,:t+1]) with max subtraction: m = max_j x_j (exact),
/// e_j = exp(x_j − m) (subtraction and exp each one rounding), Z = Σ e_j (Accumulation), att_j = e_j / Z.
/// The reference, per query row r = (b, h, t) of the (B·NH·T, T) layout, elements e = r·T + j, j ≤ t (ops/steps.hpp):
/// x = store(preatt) [Preatt] (the entry cast by store, store_cast); m = max_j x_j (exact, the first of equal
/// maxima); on Att at e: d = x − m, x' = exp(d); on Row at r: Z = Σ_j x'_j (sum); on Att at e (continuing):
/// q = x' / Z, att = store(q); att = 0 above the diagonal.
template <class A>
void softmax_forward_reference(std::span<typename A::Value> att, std::span<const typename A::Value> preatt,
                               AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  std::vector<V> x(T);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.heads() * s.T); ++r) {
    const std::size_t o = r * T, n = r % T + 1;
    for (std::size_t j = 0; j < n; ++j) x[j] = store_cast(ctx, Tensor::Preatt, o + j, preatt[o + j]);
    V m = x[0];
    for (std::size_t j = 1; j < n; ++j)
      if (x[j] > m) m = x[j];
    std::vector<Steps<A>> a;
    a.reserve(n);
    for (std::size_t j = 0; j < n; ++j) {
      a.emplace_back(ctx, Tensor::Att, o + j);
      x[j] = a[j].exp(a[j].sub(x[j], m));
    }
    const V z = Steps<A>(ctx, Tensor::Row, r).sum(x.data(), 1, n);
    for (std::size_t j = 0; j < n; ++j) att[o + j] = a[j].store(a[j].div(x[j], z));
    for (std::size_t j = n; j < T; ++j) att[o + j] = V(0);
  }
}

/// softmax_forward_reference on row spans. Without a Select, a head's T denominators are one ctx.dot_rows (rows in
/// SIMD lanes, each its own sum). S, the tensors' element type: A::Value, or float in binary32 storage (Emulated
/// only; ops/activation.hpp, silu_forward_io).
template <class A, class S>
void softmax_forward_io(std::span<S> att, std::span<const S> preatt, AttnShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  SlotSeq Row(Tensor::Row);
  const auto k_z = Row.next();
  // the slots of Preatt and Att at the elements of row `row`
  struct RowKeys {
    SlotSeq::KeyFn in, sub, exp, div, store;
  };
  const auto row_keys = [&](std::int64_t row) {
    const auto o = static_cast<std::size_t>(row * s.T);
    SlotSeq P(Tensor::Preatt, o), Att(Tensor::Att, o);
    const auto in = P.next();
    const auto sub = Att.next(), exp = Att.next(), div = Att.next(), store = Att.next();
    return RowKeys{in, sub, exp, div, store};
  };
  // exponentials of row `row` into ex (t + 1 values)
  const auto exps = [&](std::int64_t row, V* ex) {
    const std::int64_t t = row % s.T;
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(t + 1);
    const RowKeys k = row_keys(row);
    ctx.store_array(preatt.subspan(o, n), std::span<V>(ex, n), k.in);  // the entry cast, by store (store_cast)
    V m = ex[0];
    for (std::size_t j = 1; j < n; ++j)
      if (ex[j] > m) m = ex[j];
    exp_shifted(ctx, std::span<const V>(ex, n), m, std::span<V>(ex, n), k.sub, k.exp);
  };
  const auto normalise = [&](std::int64_t row, const V* ex, const V& z) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    const RowKeys k = row_keys(row);
    thread_local std::vector<V> q;
    q.resize(n);
    arith_const(ctx, ArithOp::Div, std::span<const V>(ex, n), z, std::span<V>(q), k.div);
    ctx.store_array(cspan(q), att.subspan(o, n), k.store);
    for (std::size_t j = n; j < T; ++j) att[o + j] = S(0);
  };
  [[maybe_unused]] const bool through = binary32_through<A, S>(ctx, {preatt});
  [[maybe_unused]] const bool chain = through && binary32_chain<A, S>(ctx);
  if (sel.empty()) {
    for_units(s.heads(), sel, [&](std::int64_t u) {
      thread_local std::vector<V> ex, z;
      thread_local std::vector<std::size_t> len;
      thread_local std::vector<float> ex32;     // T × T: a row's binary32 exponentials (binary32 bodies)
      thread_local std::vector<std::uint8_t> in32;  // T: whether row t took the binary32 body
      ex.resize(T * T);
      z.resize(T);
      len.resize(T);
      in32.assign(T, 0);
      const std::int64_t row0 = u * s.T;
      bool all32 = through;  // every row's exponentials in ex32
      for (std::size_t t = 0; t < T; ++t) {
        len[t] = t + 1;
        if constexpr (kBinary32Body<A, S>)
          if (through) {
            ex32.resize(T * T);
            const std::size_t o = static_cast<std::size_t>(row0) * T + t * T;
            if (detail::softmax_exps_row32(preatt.subspan(o, t + 1), std::span<float>(ex32.data() + t * T, t + 1),
                                           ctx)) {
              in32[t] = 1;
              continue;
            }
          }
        all32 = false;
        exps(row0 + static_cast<std::int64_t>(t), ex.data() + t * T);
      }
      bool summed = false;
      if constexpr (kBinary32Body<A, S>)
        if (all32 && chain) {  // the denominators as binary32 chains (exponentials finite: so are their sums)
          thread_local std::vector<float> z32;  // T
          z32.resize(T);
          numerics::binary32_chain_rows(len, ex32.data(), s.T, nullptr, 0, z32, ctx.exec().kernels);
          std::copy(z32.begin(), z32.end(), z.begin());
          summed = true;
        }
      if (!summed) {
        for (std::size_t t = 0; t < T; ++t)  // the binary32 rows widened for dot_rows
          if (in32[t] != 0)
            std::copy_n(ex32.begin() + static_cast<std::ptrdiff_t>(t * T), t + 1,
                        ex.begin() + static_cast<std::ptrdiff_t>(t * T));
        ctx.dot_rows(numerics::BasicRowBatch<V>{len, ex.data(), s.T, 1}, std::span<V>(z),
                     [&](std::size_t t) { return k_z(static_cast<std::size_t>(row0) + t); });
      }
      for (std::size_t t = 0; t < T; ++t) {
        if constexpr (kBinary32Body<A, S>)
          if (in32[t] != 0 &&
              detail::softmax_normalise_row32(att.subspan((static_cast<std::size_t>(row0) + t) * T, T),
                                              std::span<const float>(ex32.data() + t * T, t + 1), z[t], ctx))
            continue;
        normalise(row0 + static_cast<std::int64_t>(t), ex.data() + t * T, z[t]);
      }
    });
    return;
  }
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    thread_local std::vector<V> ex;
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    ex.resize(n);
    exps(row, ex.data());
    normalise(row, ex.data(), ctx.sum(ex.data(), 1, n, k_z(static_cast<std::size_t>(row))));
  });
}

template <class A>
void softmax_forward(std::span<typename A::Value> att, std::span<const typename A::Value> preatt, AttnShape s,
                     const Ctx<A>& ctx, Select sel = {}) {
  softmax_forward_io<A, typename A::Value>(att, preatt, s, ctx, sel);
}

/// dpreatt += att ⊙ (datt − Σ_j att_j·datt_j) on the causal part. Pass BackwardData. The reference, per query row
/// r, elements e = r·T + j, j ≤ t: a = store(att) [Att], g = store(datt) [Datt] (entry casts by store);
/// d = Σ_j a_j·g_j (dot) [Row at r]; on Dpreatt at e: u = g − d, v = a·u, p = store(dpreatt), dpreatt = store(p + v).
template <class A>
void softmax_backward_data_reference(std::span<typename A::Value> dpreatt, std::span<const typename A::Value> datt,
                                     std::span<const typename A::Value> att, AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  std::vector<V> a(T), g(T);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.heads() * s.T); ++r) {
    const std::size_t o = r * T, n = r % T + 1;
    for (std::size_t j = 0; j < n; ++j) {
      a[j] = store_cast(ctx, Tensor::Att, o + j, att[o + j]);
      g[j] = store_cast(ctx, Tensor::Datt, o + j, datt[o + j]);
    }
    const V d = Steps<A>(ctx, Tensor::Row, r).dot(a.data(), 1, g.data(), 1, n);
    for (std::size_t j = 0; j < n; ++j) {
      Steps<A> p(ctx, Tensor::Dpreatt, o + j);
      const V u = p.sub(g[j], d);
      const V v = p.mul(a[j], u);
      const V old = p.store(dpreatt[o + j]);
      dpreatt[o + j] = p.store(p.add(old, v));
    }
  }
}

/// softmax_backward_data_reference on row spans. Without a Select, a head's T row dots are one ctx.dot_rows.
template <class A, class S>
void softmax_backward_data_io(std::span<S> dpreatt, std::span<const S> datt, std::span<const S> att, AttnShape s,
                              const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  const auto T = static_cast<std::size_t>(s.T);
  SlotSeq Row(Tensor::Row);
  const auto k_d = Row.next();
  [[maybe_unused]] const bool through =
      binary32_through<A, S>(ctx, {std::span<const S>(dpreatt), datt, att});
  [[maybe_unused]] const bool chain = through && binary32_chain<A, S>(ctx);
  // row `row`'s inputs cast into a, g (t + 1 values each); under `through` the casts return the non-NaN values
  // (values of storage), so rows without NaN are widened
  const auto cast = [&](std::int64_t row, V* a, V* g) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    if constexpr (kBinary32Body<A, S>)
      if (through && numerics::widen_binary32_checked(att.subspan(o, n), std::span<V>(a, n), ctx.exec().kernels) &&
          numerics::widen_binary32_checked(datt.subspan(o, n), std::span<V>(g, n), ctx.exec().kernels))
        return;
    ctx.store_array(att.subspan(o, n), std::span<V>(a, n), SlotSeq(Tensor::Att, o).next());
    ctx.store_array(datt.subspan(o, n), std::span<V>(g, n), SlotSeq(Tensor::Datt, o).next());
  };
  // dpreatt_j ← store(store(dpreatt_j) + a_j·(g_j − d)) on row spans
  const auto update = [&](std::int64_t row, const V* a, const V* g, const V& d) {
    const auto o = static_cast<std::size_t>(row * s.T);
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    SlotSeq P(Tensor::Dpreatt, o);
    const auto k_u = P.next(), k_v = P.next(), k_in = P.next(), k_add = P.next(), k_store = P.next();
    thread_local std::vector<V> ds, v, gi, sum;
    ds.resize(n);
    v.resize(n);
    gi.resize(n);
    sum.resize(n);
    const std::span<S> out = dpreatt.subspan(o, n);
    arith_const(ctx, ArithOp::Sub, std::span<const V>(g, n), d, std::span<V>(ds), k_u);
    arith_array(ctx, ArithOp::Mul, std::span<const V>(a, n), cspan(ds), std::span<V>(v), k_v);
    ctx.store_array(std::span<const S>(out), std::span<V>(gi), k_in);  // the cast, by store (store_cast)
    arith_array(ctx, ArithOp::Add, cspan(gi), cspan(v), std::span<V>(sum), k_add);
    ctx.store_array(cspan(sum), out, k_store);
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
      for (std::size_t t = 0; t < T; ++t) len[t] = t + 1;
      // The row dots as binary32 chains on the tensors themselves when none is NaN (the inputs cast row by row only
      // where a row falls back); else every row cast and one dot_rows.
      bool cast_all = true;
      if constexpr (kBinary32Body<A, S>)
        if (chain) {
          thread_local std::vector<float> d32;  // T
          d32.resize(T);
          const std::size_t o = static_cast<std::size_t>(row0) * T;
          numerics::binary32_chain_rows(len, att.data() + o, s.T, datt.data() + o, s.T, d32, ctx.exec().kernels);
          if (!numerics::any_nan(cspan(d32), ctx.exec().kernels)) {
            std::copy(d32.begin(), d32.end(), d.begin());
            cast_all = false;
          }
        }
      if (cast_all) {
        for (std::size_t t = 0; t < T; ++t)
          cast(row0 + static_cast<std::int64_t>(t), a.data() + t * T, g.data() + t * T);
        ctx.dot_rows(numerics::BasicRowBatch<V>{len, a.data(), s.T, 1, g.data(), s.T, 1}, std::span<V>(d),
                     [&](std::size_t t) { return k_d(static_cast<std::size_t>(row0) + t); });
      }
      for (std::size_t t = 0; t < T; ++t) {
        if constexpr (kBinary32Body<A, S>)
          if (through) {
            const std::size_t o = (static_cast<std::size_t>(row0) + t) * T, n = t + 1;
            if (detail::softmax_backward_row32(dpreatt.subspan(o, n), att.subspan(o, n), datt.subspan(o, n), d[t],
                                               ctx))
              continue;
          }
        if (!cast_all) cast(row0 + static_cast<std::int64_t>(t), a.data() + t * T, g.data() + t * T);
        update(row0 + static_cast<std::int64_t>(t), a.data() + t * T, g.data() + t * T, d[t]);
      }
    });
    return;
  }
  for_units(s.heads() * s.T, sel, [&](std::int64_t row) {
    thread_local std::vector<V> a, g;
    const auto n = static_cast<std::size_t>(row % s.T + 1);
    a.resize(n);
    g.resize(n);
    cast(row, a.data(), g.data());
    update(row, a.data(), g.data(), ctx.dot(a.data(), 1, g.data(), 1, n, k_d(static_cast<std::size_t>(row))));
  });
}

template <class A>
void softmax_backward_data(std::span<typename A::Value> dpreatt, std::span<const typename A::Value> datt,
                           std::span<const typename A::Value> att, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  softmax_backward_data_io<A, typename A::Value>(dpreatt, datt, att, s, ctx, sel);
}

/// out[b,t,h,:] = Σ_{j ≤ t} att[b,h,t,j]·v[b,j,h,:] (one dot per output element, j ascending). The reference
/// (ops/steps.hpp): a = store(att) [Att] on the causal part, v = store(v) [V] (the entry casts, by store); per
/// element e = (b, t, h, d) of out (B, T, NH·hs), on Out at e: r = Σ_{j ≤ t} a[b,h,t,j]·v[b,j,h,d] (dot),
/// out = store(r).
template <class A>
void attn_values_forward_reference(std::span<typename A::Value> out, std::span<const typename A::Value> att,
                                   std::span<const typename A::Value> v, AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  using detail::at3, detail::at4;
  const auto C = static_cast<std::ptrdiff_t>(s.C());
  std::vector<V> ac(att.size(), V(0)), vc(v.size());  // att (B, NH, T, T) causal part, v (B, T, NH·hs), cast on entry
  for (std::int64_t r = 0; r < s.heads() * s.T; ++r)
    for (std::int64_t j = 0; j <= r % s.T; ++j) {
      const auto e = static_cast<std::size_t>(r * s.T + j);
      ac[e] = store_cast(ctx, Tensor::Att, e, att[e]);
    }
  for (std::size_t i = 0; i < v.size(); ++i) vc[i] = store_cast(ctx, Tensor::V, i, v[i]);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t t = 0; t < s.T; ++t)
      for (std::int64_t h = 0; h < s.NH; ++h)
        for (std::int64_t d = 0; d < s.hs; ++d) {
          const std::size_t e = at3(s, b, t, h, d);
          Steps<A> o(ctx, Tensor::Out, e);
          const V r = o.dot(&ac[at4(s, b, h, t, 0)], 1, &vc[at3(s, b, 0, h, d)], C, static_cast<std::size_t>(t + 1));
          out[e] = o.store(r);
        }
}

namespace detail {
/// attn_values_forward_io's head (b, h) on binary32 heads (heads32): false, nothing written, when the product
/// declines or is NaN.
inline bool values_forward_head32(const Ctx<Emulated>& ctx, std::span<float> out, std::span<const float> att,
                                  std::span<const float> v, const AttnShape& s, std::int64_t b, std::int64_t h) {
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  const std::span<float> raw = scratch<float, Slot::Raw>(T * hs);  // T × hs: att[t, 0..t]·v[0..t, :]
  // the products in compute are the outputs: the stores return them (storage is compute's format under either
  // through, and no product is NaN)
  if (!causal_ranged32(ctx, s, square_at(att, s, b, h), head_at(v, s, b, h), true, raw)) return false;
  for (std::size_t t = 0; t < T; ++t)
    std::copy_n(raw.begin() + static_cast<std::ptrdiff_t>(t * hs), hs,
                out.begin() + static_cast<std::ptrdiff_t>(at3(s, b, static_cast<std::int64_t>(t), h, 0)));
  return true;
}
}  // namespace detail

/// attn_values_forward_reference head by head: a head's dots as one GEMM with per-row k-ranges, converted and
/// stored on row spans (result_array); on binary32 heads where detail::heads32 allows.
template <class A, class S>
void attn_values_forward_io(std::span<S> out, std::span<const S> att, std::span<const S> v, AttnShape s,
                            const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  using detail::Slot;
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  [[maybe_unused]] const bool h32 = detail::heads32<A, S>(ctx, {att, v});
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    if constexpr (kBinary32Body<A, S>)
      if (h32 && detail::values_forward_head32(ctx, out, att, v, s, b, h)) return;
    const std::span<V> ah = detail::cast_causal<A, Slot::Head1>(ctx, att, s, b, h, Tensor::Att);
    const std::span<V> vh = detail::cast_head<A, Slot::Head2>(ctx, v, s, b, h, Tensor::V);
    // out[b,t,h,:] (the head's rows, C apart) = att[t, 0..t]·v[0..t, :], computed in place when out is binary64,
    // else in a binary64 head (rows hs apart) and then narrowed (exactly: values of storage)
    constexpr bool direct = std::is_same_v<S, V>;
    V* o = nullptr;
    std::size_t ld = C;
    if constexpr (direct) {
      o = out.data() + detail::at3(s, b, 0, h, 0);
    } else {
      o = detail::scratch<V, Slot::Raw>(T * hs).data();
      ld = hs;
    }
    if (batched)
      ctx.gemm_ranged(T, hs, T, M{ah.data(), T}, M{vh.data(), hs}, detail::causal_ranges(s.T, true), o, ld,
                      detail::kBatchedGemm);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t e0 = detail::at3(s, b, static_cast<std::int64_t>(t), h, 0);
      const std::span<V> row(o + t * ld, hs);
      SlotSeq O(Tensor::Out, e0);
      const auto k_dot = O.next(), k_store = O.next();
      if (batched) {
        ctx.result_array(row, k_dot, k_store);
      } else {
        for (std::size_t d = 0; d < hs; ++d)
          row[d] = ctx.store(ctx.dot(ah.data() + t * T, 1, vh.data() + d, s.hs, t + 1, k_dot(d)), k_store(d));
      }
      if constexpr (!direct) narrow_into<V, S>(row, out.subspan(e0, hs));  // exact: values of storage
    }
  });
}

template <class A>
void attn_values_forward(std::span<typename A::Value> out, std::span<const typename A::Value> att,
                         std::span<const typename A::Value> v, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  attn_values_forward_io<A, typename A::Value>(out, att, v, s, ctx, sel);
}

/// datt[t,j] += dout[t,:]·v[j,:] (j ≤ t), dv[j,:] += Σ_{t ≥ j} att[t,j]·dout[t,:]. Pass BackwardData. The
/// reference (ops/steps.hpp): a = store(att) [Att] on the causal part, v = store(v) [V], g = store(dout) [Dout]
/// (the entry casts, by store); per score element e = (b, h, t, j), j ≤ t, on Datt at e: r = g[b,t,h,:]·v[b,j,h,:]
/// (dot), old = store(datt), datt = store(old + r) (datt above the diagonal untouched); per element
/// e = (b, j, h, d) of dv (B, T, NH·hs), on Dv at e: r = Σ_{t ≥ j} a[b,h,t,j]·g[b,t,h,d] (dot, t ascending),
/// old = store(dv), dv = store(old + r).
template <class A>
void attn_values_backward_data_reference(std::span<typename A::Value> datt, std::span<typename A::Value> dv,
                                         std::span<const typename A::Value> dout,
                                         std::span<const typename A::Value> att, std::span<const typename A::Value> v,
                                         AttnShape s, const Ctx<A>& ctx) {
  using V = typename A::Value;
  using detail::at3, detail::at4;
  const auto C = static_cast<std::ptrdiff_t>(s.C()), T = static_cast<std::ptrdiff_t>(s.T);
  const auto hs = static_cast<std::size_t>(s.hs);
  // att (B, NH, T, T) causal part, v and dout (B, T, NH·hs), cast on entry
  std::vector<V> ac(att.size(), V(0)), vc(v.size()), gc(dout.size());
  for (std::int64_t r = 0; r < s.heads() * s.T; ++r)
    for (std::int64_t j = 0; j <= r % s.T; ++j) {
      const auto e = static_cast<std::size_t>(r * s.T + j);
      ac[e] = store_cast(ctx, Tensor::Att, e, att[e]);
    }
  for (std::size_t i = 0; i < v.size(); ++i) {
    vc[i] = store_cast(ctx, Tensor::V, i, v[i]);
    gc[i] = store_cast(ctx, Tensor::Dout, i, dout[i]);
  }
  const auto accumulate = [&](std::span<V> grad, Tensor t, std::size_t e, auto&& dot) {
    detail::accumulate_ref(ctx, grad, t, e, dot);
  };
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t t = 0; t < s.T; ++t)
        for (std::int64_t j = 0; j <= t; ++j)
          accumulate(datt, Tensor::Datt, at4(s, b, h, t, j), [&](Steps<A>& st) {
            return st.dot(&gc[at3(s, b, t, h, 0)], 1, &vc[at3(s, b, j, h, 0)], 1, hs);
          });
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t j = 0; j < s.T; ++j)
      for (std::int64_t h = 0; h < s.NH; ++h)
        for (std::int64_t d = 0; d < s.hs; ++d)
          accumulate(dv, Tensor::Dv, at3(s, b, j, h, d), [&](Steps<A>& st) {
            return st.dot(&ac[at4(s, b, h, j, j)], T, &gc[at3(s, b, j, h, d)], C, static_cast<std::size_t>(s.T - j));
          });
}

namespace detail {
/// attn_values_backward_data_io's head (b, h) on binary32 heads (heads32): false, nothing written, when a product
/// declines or is NaN.
inline bool values_backward_head32(const Ctx<Emulated>& ctx, std::span<float> datt, std::span<float> dv,
                                   std::span<const float> dout, std::span<const float> att, std::span<const float> v,
                                   const AttnShape& s, std::int64_t b, std::int64_t h, bool through) {
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  const std::span<float> raw = scratch<float, Slot::Raw>(T * T);  // raw[t·T + j] = dout[t,:]·v[j,:], j ≤ t
  const std::span<float> rdv = scratch<float, Slot::Head1>(T * hs);  // rdv[j·hs + d] = Σ_{t ≥ j} att[t,j]·dout[t,d]
  if (!causal_dots32(ctx, s, head_at(dout, s, b, h), head_at(v, s, b, h), raw) ||
      !causal_ranged32(ctx, s, square_at(att, s, b, h, true), head_at(dout, s, b, h), false, rdv))
    return false;
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t e0 = at4(s, b, h, static_cast<std::int64_t>(t), 0);
    add_into32(ctx, datt.subspan(e0, t + 1), std::span<const float>(raw.data() + t * T, t + 1), Tensor::Datt, e0,
               through);
  }
  for (std::size_t j = 0; j < T; ++j) {
    const std::size_t e0 = at3(s, b, static_cast<std::int64_t>(j), h, 0);
    add_into32(ctx, dv.subspan(e0, hs), std::span<const float>(rdv.data() + j * hs, hs), Tensor::Dv, e0, through);
  }
  return true;
}
}  // namespace detail

/// attn_values_backward_data_reference head by head: the datt dots as GEMMs (detail::causal_dots), dv's causal
/// sums as one GEMM with per-row k-ranges, the adds into the gradients on row spans; on binary32 heads where
/// detail::heads32 allows.
template <class A, class S>
void attn_values_backward_data_io(std::span<S> datt, std::span<S> dv, std::span<const S> dout, std::span<const S> att,
                                  std::span<const S> v, AttnShape s, const Ctx<A>& ctx, Select sel) {
  using V = typename A::Value;
  using M = typename MatrixOf<A>::type;
  using detail::Slot;
  const bool batched = ctx.gemm_is_dot();
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs);
  [[maybe_unused]] const bool through = binary32_through<A, S>(ctx);
  [[maybe_unused]] const bool h32 =
      detail::heads32<A, S>(ctx, {std::span<const S>(datt), std::span<const S>(dv), dout, att, v});
  for_units(s.heads(), sel, [&](std::int64_t u) {
    const std::int64_t b = u / s.NH, h = u % s.NH;
    if constexpr (kBinary32Body<A, S>)
      if (h32 && detail::values_backward_head32(ctx, datt, dv, dout, att, v, s, b, h, through)) return;
    const std::span<V> ah = detail::cast_causal<A, Slot::Head1>(ctx, att, s, b, h, Tensor::Att);
    const std::span<V> vh = detail::cast_head<A, Slot::Head2>(ctx, v, s, b, h, Tensor::V);
    const std::span<V> dh = detail::cast_head<A, Slot::Head3>(ctx, dout, s, b, h, Tensor::Dout);
    const std::span<V> raw = detail::scratch<V, Slot::Raw>(std::max(T, hs) * T);
    // datt[t, j] += dout[t,:]·v[j,:] for j ≤ t
    detail::causal_dots(ctx, s, b, h, std::span<const V>(dh), std::span<const V>(vh), raw, Tensor::Datt,
                        [&](std::size_t t, std::size_t e0, std::span<V> g, SlotSeq& Da) {
                          detail::add_into(ctx, datt.subspan(e0, t + 1), std::span<const V>(g), Da, through);
                        });
    // raw[j·hs + d] = Σ_{t ≥ j} att[t,j]·dout[t,d]
    if (batched)
      ctx.gemm_ranged(T, hs, T, M{ah.data(), T, true}, M{dh.data(), hs}, detail::causal_ranges(s.T, false),
                      raw.data(), hs, detail::kBatchedGemm);
    for (std::size_t j = 0; j < T; ++j) {
      const std::size_t e0 = detail::at3(s, b, static_cast<std::int64_t>(j), h, 0);
      const std::span<V> g(raw.data() + j * hs, hs);
      SlotSeq Dv(Tensor::Dv, e0);
      const auto k_dot = Dv.next();
      if (batched) {
        ctx.compute_array(g, k_dot);
      } else {
        for (std::size_t d = 0; d < hs; ++d)
          g[d] = ctx.dot(ah.data() + j * T + j, s.T, dh.data() + j * hs + d, s.hs, T - j, k_dot(d));
      }
      detail::add_into(ctx, dv.subspan(e0, hs), std::span<const V>(g), Dv, through);
    }
  });
}

template <class A>
void attn_values_backward_data(std::span<typename A::Value> datt, std::span<typename A::Value> dv,
                               std::span<const typename A::Value> dout, std::span<const typename A::Value> att,
                               std::span<const typename A::Value> v, AttnShape s, const Ctx<A>& ctx, Select sel = {}) {
  attn_values_backward_data_io<A, typename A::Value>(datt, dv, dout, att, v, s, ctx, sel);
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

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void attn_scores_forward(std::span<float> preatt, std::span<const float> q, std::span<const float> k, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});
void attn_scores_backward_data(std::span<float> dq, std::span<float> dk, std::span<const float> dpreatt, std::span<const float> q, std::span<const float> k, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});
void attn_values_forward(std::span<float> out, std::span<const float> att, std::span<const float> v, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});
void attn_values_backward_data(std::span<float> datt, std::span<float> dv, std::span<const float> dout, std::span<const float> att, std::span<const float> v, AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});

// The span bodies on tensors in binary32 storage (issue 45, typed storage; ops/activation.hpp).
void softmax_forward(std::span<float> att, std::span<const float> preatt, AttnShape s, const Ctx<Emulated>& ctx,
                     Select sel = {});
void softmax_backward_data(std::span<float> dpreatt, std::span<const float> datt, std::span<const float> att,
                           AttnShape s, const Ctx<Emulated>& ctx, Select sel = {});

}  // namespace roundoff::ops
