#pragma once
/// \file span_arith.hpp
/// Span forms of Ctx's elementwise + − × ÷: out[i] = ctx.add/sub/mul/div(a[i], b[i], kf(i)) for every i, bit for
/// bit.
///
/// Fast path (Emulated, fast_paths() on, op rounding nearest-even, compute format F with p ≤ 25 inside the
/// binary32 range with IEEE specials, subnormals and no saturation): out[i] is the binary64 operation rounded
/// to F by numerics::round_array (= round_to per element), for the elements whose operands are values of F
/// and whose rounded result is finite; every other element takes the per-element call. Argument: for a, b in
/// F the product is exact in binary64 (2p ≤ 50 bits, exponents within binary64's normal range), and so is a
/// sum or difference whose result lies below 2^(emin_F + 1) (both operands are multiples of F's smallest
/// quantum there); any other sum or difference is rounded twice, to binary64 then to F, which is innocuous
/// for p ≤ 25 since 53 ≥ 2p + 2 (Figueroa, "When is double rounding innocuous?", 1995). A quotient a/b of values
/// of F lies in [2^-277, 2^277], inside binary64's normal range, and is rounded twice, which is innocuous here
/// too, subnormal results of F included: if a/b = m + δ with m a midpoint of F's grid at that magnitude (a
/// binary64 number) and δ ≠ 0, then δ·b = a − m·b is a nonzero multiple of 2^min(ea, eq − 1 + eb) (a = A·2^ea,
/// b = B·2^eb with |A|, |B| < 2^p, F's quantum there 2^eq), so |δ| > 2^(e_m − 2p) where 2^e_m ≤ |m|, larger
/// than half a binary64 ulp of m (2^(e_m − 53)) for p ≤ 26; the binary64 rounding, monotone, then neither
/// reaches nor crosses m, and both roundings to F agree (docs/numerics.md, "Division on spans"). So the value is
/// the correctly rounded a op b, which is what numerics::add/sub/mul/div and Ctx's native binary32 path return
/// for finite results (signed zeros as IEEE 754: +0 for x − x, the sign of a product or quotient the xor of the
/// signs). Division by zero and 0/0 give non-finite binary64 results and take the per-element call.
/// tests/ops/span_ops_test.cpp compares both paths per element, and the ops that use them against the oracle.
/// Under ftz all every result is then flushed in compute (Ctx::flush_computed), as add/sub/mul/div flush theirs.
/// Under stochastic rounding or directed modes the per-element calls run. out must not alias a or b.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <span>
#include <type_traits>
#include <vector>

#include "numerics/binary32_arith.hpp"
#include "ops/backend.hpp"

namespace roundoff::ops {

/// A vector as a read-only span.
template <class V>
std::span<const V> cspan(const std::vector<V>& v) {
  return {v.data(), v.size()};
}
/// A span as a read-only span.
template <class V>
std::span<const V> cspan(std::span<V> v) {
  return {v.data(), v.size()};
}

enum class ArithOp : std::uint8_t { Add, Sub, Mul, Div };

/// The fast core: false (nothing written) when ctx's precision does not admit the path; otherwise out[i] for
/// every element but those listed in `slow` (ascending), which the caller must recompute per element. b holds
/// out.size() values, or one value used for every element. One fused SIMD pass with AVX-512F
/// (numerics::op_round_avx512) or AVX2 (op_round_avx2), else the roundings by numerics::round_array pass by pass.
bool arith_span(const Ctx<Emulated>& ctx, ArithOp op, std::span<const double> a, std::span<const double> b,
                std::span<double> out, std::vector<std::size_t>& slow);

namespace detail {
/// out[i] = op(a[i], y_i) through ctx with keys kf(i), y_i = b[i], or b[0] for every i when b has one value
/// and out more.
template <class A, class KeyFn>
void arith(const Ctx<A>& ctx, ArithOp op, std::span<const typename A::Value> a, std::span<const typename A::Value> b,
           std::span<typename A::Value> out, KeyFn&& kf) {
  const bool bcast = b.size() == 1 && out.size() != 1;
  const auto one = [&](std::size_t i) {
    const auto& y = b[bcast ? 0 : i];
    switch (op) {
      case ArithOp::Add: out[i] = ctx.add(a[i], y, kf(i)); return;
      case ArithOp::Sub: out[i] = ctx.sub(a[i], y, kf(i)); return;
      case ArithOp::Mul: out[i] = ctx.mul(a[i], y, kf(i)); return;
      case ArithOp::Div: out[i] = ctx.div(a[i], y, kf(i)); return;
    }
  };
  if constexpr (std::is_same_v<A, Emulated>) {
    thread_local std::vector<std::size_t> slow;
    if (arith_span(ctx, op, a, b, out, slow)) {
      for (const std::size_t i : slow) one(i);
      return;
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) one(i);
}
}  // namespace detail

/// out[i] = op(a[i], b[i]) through ctx with keys kf(i).
template <class A, class KeyFn>
void arith_array(const Ctx<A>& ctx, ArithOp op, std::span<const typename A::Value> a,
                 std::span<const typename A::Value> b, std::span<typename A::Value> out, KeyFn&& kf) {
  detail::arith(ctx, op, a, b, out, kf);
}

/// out = a op b in hardware binary32 (numerics::binary32_arith; b may hold one value for every element), for the
/// ops' bodies under ctx.binary32_through(): there each finite or infinite out[i] is ctx.add/sub/mul/div's value
/// (any key), while a NaN may differ in its bits, so the callers scan what they store (Ctx::binary32_through).
/// out may alias a or b.
inline void arith_binary32(const Ctx<Emulated>& ctx, ArithOp op, std::span<const float> a, std::span<const float> b,
                           std::span<float> out) {
  const auto nop = [&] {
    switch (op) {
      case ArithOp::Add: return numerics::Binary32Op::Add;
      case ArithOp::Sub: return numerics::Binary32Op::Sub;
      case ArithOp::Mul: return numerics::Binary32Op::Mul;
      case ArithOp::Div: return numerics::Binary32Op::Div;
    }
    return numerics::Binary32Op::Add;
  }();
  if (ctx.binary16_through())  // the fp16 step (Ctx::binary16_through) in the same pass
    numerics::binary32_arith_fp16(nop, a, b, out, ctx.exec().kernels);
  else
    numerics::binary32_arith(nop, a, b, out, ctx.exec().kernels);
}

/// Whether an op body on tensors of element type T under backend A has a binary32 form (Ctx::binary32_through):
/// the emulated backend on binary32 tensors.
template <class A, class T>
inline constexpr bool kBinary32Body = std::is_same_v<A, Emulated> && std::is_same_v<T, float>;

/// ctx.binary32_through() where the body has a binary32 form, else false.
template <class A, class T>
bool binary32_through(const Ctx<A>& ctx) {
  if constexpr (kBinary32Body<A, T>) return ctx.binary32_through();
  return false;
}

/// binary32_through<A, T>(ctx), or, for a call whose tensors read are `read` (in-out tensors included), its binary16
/// twin (Ctx::binary16_through) when every non-NaN value of them is a value of storage: the binary32 bodies skip the
/// entry casts, which are then the identity (under binary32 storage every float is one; under fp16 storage a tensor
/// an fp32 op wrote need not be).
template <class A, class T>
bool binary32_through(const Ctx<A>& ctx, std::initializer_list<std::span<const T>> read) {
  if constexpr (kBinary32Body<A, T>) {
    if (ctx.binary32_through()) return true;
    if (!ctx.binary16_through()) return false;
    for (const std::span<const T> x : read)
      if (!ctx.storage_values32(x)) return false;
    return true;
  }
  return false;
}

/// binary32_through<A, T>(ctx, read) unit by unit, for the elementwise bodies (a unit reads one row of each tensor,
/// and tensors every unit reads, `shared`, whole): made once per call, it checks `shared` (under the binary16 twin),
/// then rows() checks one unit's rows as the unit runs, instead of every tensor before the first unit. The bits are
/// the same: a unit's binary32 body gives the per-element path's values exactly when the values it reads are values
/// of storage, so which units take it changes no value. Under binary32_through rows() is true without a scan.
template <class A, class T>
class UnitThrough {
 public:
  explicit UnitThrough(const Ctx<A>& ctx, std::initializer_list<std::span<const T>> shared = {}) : ctx_(ctx) {
    if constexpr (kBinary32Body<A, T>) {
      all_ = ctx.binary32_through();
      on_ = all_ || (ctx.binary16_through() && std::all_of(shared.begin(), shared.end(), [&](std::span<const T> x) {
                       return ctx.storage_values32(x);
                     }));
    }
  }
  /// Whether the unit whose tensors read are `rows` (in-out rows included) may take the binary32 body.
  bool rows(std::initializer_list<std::span<const T>> rows) const {
    if (!on_ || all_) return on_;
    if constexpr (kBinary32Body<A, T>)
      for (const std::span<const T> x : rows)
        if (!ctx_.storage_values32(x)) return false;
    return true;
  }

 private:
  const Ctx<A>& ctx_;
  bool on_ = false;   ///< binary32_through, or its binary16 twin with `shared` holding storage values
  bool all_ = false;  ///< binary32_through: every float is a value of storage
};

/// ctx.binary32_chain() where the body has a binary32 form, else false.
template <class A, class T>
bool binary32_chain(const Ctx<A>& ctx) {
  if constexpr (kBinary32Body<A, T>) return ctx.binary32_chain();
  return false;
}

/// Stores the rows a binary32 body computed (Ctx::binary32_through): dst[k] = src[k] for every pair, unless some
/// src holds a NaN; then nothing is written and the result is false (the caller's binary64 path takes the row).
inline bool store_binary32(const Ctx<Emulated>& ctx, std::initializer_list<std::pair<std::span<const float>,
                                                                                     std::span<float>>> rows) {
  for (const auto& [src, dst] : rows)
    if (numerics::any_nan(src, ctx.exec().kernels)) return false;
  for (const auto& [src, dst] : rows) std::copy(src.begin(), src.end(), dst.begin());
  return true;
}

/// out[i] = op(x[i], y) through ctx with keys kf(i): arith_array with a constant right operand.
template <class A, class KeyFn>
void arith_const(const Ctx<A>& ctx, ArithOp op, std::span<const typename A::Value> x, const typename A::Value& y,
                 std::span<typename A::Value> out, KeyFn&& kf) {
  detail::arith(ctx, op, x, std::span<const typename A::Value>(&y, 1), out, kf);
}

/// out[j] = ctx.exp(ctx.sub(x[j], m, ks(j)), ke(j)) for every j, bit for bit: the shifted exponentials of a softmax
/// row (the subtraction through arith_array, the exp through ctx.exp_array). out may alias x.
template <class A, class KS, class KE>
void exp_shifted(const Ctx<A>& ctx, std::span<const typename A::Value> x, const typename A::Value& m,
                 std::span<typename A::Value> out, KS&& ks, KE&& ke) {
  using V = typename A::Value;
  thread_local std::vector<V> d;
  d.resize(x.size());
  arith_const(ctx, ArithOp::Sub, x, m, std::span<V>(d), ks);
  ctx.exp_array(cspan(d), out, ke);
}

}  // namespace roundoff::ops
