#pragma once
/// \file steps.hpp
/// Stochastic-rounding slots by construction (issue 45 step 3). Every rounding of an op call takes a Key =
/// key(tensor, element, slot) (ops/backend.hpp); the slot says which of that element's roundings it is. Instead
/// of writing slot numbers by hand, an op takes them in order from one of two sequences, one per tensor:
///
///   Steps<A>  the roundings of one element of one tensor, for an op's scalar reference: each method
///             (in, store, add, mul, sigmoid, dot, ...) is the Ctx<A> method of the same name with the key
///             (tensor, element, next slot). A reference then reads like the math:
///               Steps<A> dx(ctx, Tensor::Dx, e);
///               const V s = dx.sigmoid(xs);           // slot 0
///               const V a = dx.sub(one, s);           // slot 1
///   SlotSeq   the same slots for a span body: next() yields the key function i ↦ key(tensor, e0 + i·stride,
///             slot) of the next slot, for store_array / arith_array / dot_rows over a run of elements:
///               SlotSeq dx(Tensor::Dx, e0);
///               const auto k_sigmoid = dx.next(), k_sub = dx.next();
///
/// Both count the same way, so a span body that takes its key functions in the order its reference takes its
/// steps gets the reference's keys, and tests/ops/reference_test.cpp checks the two bit for bit under stochastic
/// rounding (where a key in the wrong place changes the draw). Order matters: write one step per statement (or
/// nest one call in another, the inner one is taken first), never two step calls as arguments of one call
/// (C++ leaves their order unspecified). A step an element does not take (AdamW's unscale when grad_scale is 1,
/// cross-entropy's −1 off the target) is skip()ped, so that the later slots stay those of every element.
/// Slot 0 of an input tensor is its entry cast (Ctx::in_array uses it): in_cast() below, or store_cast() where a
/// span body casts its inputs with store_array.
#include <cstddef>
#include <cstdint>

#include "ops/backend.hpp"

namespace roundoff::ops {

/// The roundings of element `element` of tensor `t`, slots taken in order from `first`.
template <class A>
class Steps {
 public:
  using V = typename A::Value;
  Steps(const Ctx<A>& ctx, Tensor t, std::size_t element, unsigned first = 0)
      : ctx_(ctx), t_(t), e_(element), slot_(first) {}

  /// The key of the next slot (for a Ctx call the methods below do not cover).
  Key next() { return key(t_, e_, slot_++); }
  /// Leaves the next slot unused (a step this element does not take).
  void skip() { ++slot_; }
  /// The slots taken (or skipped) so far, counting from slot 0.
  unsigned taken() const { return slot_; }

  V in(const V& x) { return ctx_.in(x, next()); }
  V store(const V& x) { return ctx_.store(x, next()); }
  V store_to(const numerics::RoundingPlan& p, const V& x) { return ctx_.store_to(p, x, next()); }
  V to_compute(const V& x) { return ctx_.to_compute(x, next()); }
  V add(const V& a, const V& b) { return ctx_.add(a, b, next()); }
  V sub(const V& a, const V& b) { return ctx_.sub(a, b, next()); }
  V mul(const V& a, const V& b) { return ctx_.mul(a, b, next()); }
  V div(const V& a, const V& b) { return ctx_.div(a, b, next()); }
  V sqrt(const V& a) { return ctx_.sqrt(a, next()); }
  V rsqrt(const V& a) { return ctx_.rsqrt(a, next()); }
  V exp(const V& a) { return ctx_.exp(a, next()); }
  V log(const V& a) { return ctx_.log(a, next()); }
  V sigmoid(const V& a) { return ctx_.sigmoid(a, next()); }
  V sin(const V& a) { return ctx_.sin(a, next()); }
  V cos(const V& a) { return ctx_.cos(a, next()); }
  V tanh(const V& a) { return ctx_.tanh(a, next()); }
  V erf(const V& a) { return ctx_.erf(a, next()); }
  /// Σ x[i·inc], i < n, under the accumulation, rounded to compute (Ctx::sum; the slot keys the reduction).
  V sum(const V* x, std::ptrdiff_t inc, std::size_t n) { return ctx_.sum(x, inc, n, next()); }
  /// Σ x[i·incx]·y[i·incy] under the accumulation, rounded to compute (Ctx::dot).
  V dot(const V* x, std::ptrdiff_t incx, const V* y, std::ptrdiff_t incy, std::size_t n) {
    return ctx_.dot(x, incx, y, incy, n, next());
  }

 private:
  const Ctx<A>& ctx_;
  Tensor t_;
  std::size_t e_;
  unsigned slot_;
};

/// The entry cast of input element x: Ctx::in with slot 0 of (t, element), the key Ctx::in_array uses.
template <class A>
typename A::Value in_cast(const Ctx<A>& ctx, Tensor t, std::size_t element, const typename A::Value& x) {
  return Steps<A>(ctx, t, element).in(x);
}

/// An input element cast on entry the way the span bodies cast their row inputs (store_array): Ctx::store with
/// slot 0 of (t, element). It rounds to storage as in() does, but flushes under ftz out/all rather than under daz
/// (the two differ when ftz and daz differ, e.g. all.ftz=out with daz off: a subnormal input is flushed here, kept
/// by in()). The references of the ops whose bodies cast that way use it, so that they state the bits the bodies
/// give (tests/ops/reference_test.cpp, pure-fp16,all.ftz=out).
template <class A>
typename A::Value store_cast(const Ctx<A>& ctx, Tensor t, std::size_t element, const typename A::Value& x) {
  return Steps<A>(ctx, t, element).store(x);
}

/// The slots of tensor t for the elements e0 + i·stride of a span body, taken in order from `first`: next() is
/// the key function of the next slot (the slot Steps would give the same step of each of those elements).
class SlotSeq {
 public:
  explicit constexpr SlotSeq(Tensor t, std::size_t e0 = 0, std::size_t stride = 1, unsigned first = 0)
      : t_(t), e0_(e0), stride_(stride), slot_(first) {}

  /// The key function i ↦ key(t, e0 + i·stride, slot) of the next slot.
  struct KeyFn {
    Tensor t;
    std::size_t e0, stride;
    unsigned slot;
    Key operator()(std::size_t i) const { return key(t, e0 + i * stride, slot); }
  };
  constexpr KeyFn next() { return {t_, e0_, stride_, slot_++}; }
  /// Leaves the next slot unused.
  constexpr void skip() { ++slot_; }
  constexpr unsigned taken() const { return slot_; }

 private:
  Tensor t_;
  std::size_t e0_, stride_;
  unsigned slot_;
};

}  // namespace roundoff::ops
