#pragma once
/// \file values.hpp
/// A tensor's elements in binary64 or binary32 storage (typed storage, issue 45): the argument type of the
/// ops::Runner methods whose op has a body on binary32 tensors, so that one Runner call serves a model whose
/// activations are `double` (a storage format beyond binary32) or `float` (every format that fits binary32).
///
///   std::vector<float> x(n), y(n);
///   run.silu_forward(site, y, x, {rows, cols});   // Values / CValues from the vectors, binary32
///
/// Values views mutable elements (an op's output), CValues read-only ones (an input). Both convert implicitly from
/// a contiguous range of double or float (std::vector, std::span) and hold the width as a run-time tag; the
/// Runner picks the op's binary32 or binary64 body from the tags of a call's tensors (ops/runner.hpp).
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace roundoff::ops {

namespace detail {
template <class R, class T>
concept RangeOf = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                  std::same_as<std::remove_const_t<std::ranges::range_value_t<R>>, T>;
[[noreturn]] inline void throw_width(bool binary32) {
  throw std::logic_error(binary32 ? "ops::Values: binary64 elements requested from a binary32 tensor"
                                  : "ops::Values: binary32 elements requested from a binary64 tensor");
}
}  // namespace detail

namespace detail {
/// What Values (Const false) and CValues (Const true) share: a span of binary64 or of binary32 elements, the width a
/// run-time tag.
template <bool Const>
class ValuesBase {
 public:
  template <class T>
  using Elem = std::conditional_t<Const, const T, T>;

  bool binary32() const { return binary32_; }
  std::size_t size() const { return binary32_ ? f_.size() : d_.size(); }
  bool empty() const { return size() == 0; }
  const void* data() const { return binary32_ ? static_cast<const void*>(f_.data()) : d_.data(); }
  /// The elements as T (double or float); std::logic_error when the tensor has the other width.
  template <class T>
  std::span<Elem<T>> as() const {
    if constexpr (std::is_same_v<T, float>) {
      if (!binary32_) throw_width(false);
      return f_;
    } else {
      static_assert(std::is_same_v<T, double>);
      if (binary32_) throw_width(true);
      return d_;
    }
  }
  std::span<Elem<double>> f64() const { return as<double>(); }
  std::span<Elem<float>> f32() const { return as<float>(); }
  /// Element i widened (exact).
  double operator[](std::size_t i) const { return binary32_ ? static_cast<double>(f_[i]) : d_[i]; }
  /// f(span) on the elements at their own width.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return binary32_ ? f(f_) : f(d_);
  }
  /// A binary64 copy (exact).
  std::vector<double> widened() const {
    return binary32_ ? std::vector<double>(f_.begin(), f_.end()) : std::vector<double>(d_.begin(), d_.end());
  }

 protected:
  ValuesBase() = default;
  explicit ValuesBase(std::span<Elem<double>> d) : d_(d) {}
  explicit ValuesBase(std::span<Elem<float>> f) : f_(f), binary32_(true) {}

 private:
  std::span<Elem<double>> d_;
  std::span<Elem<float>> f_;
  bool binary32_ = false;
};
}  // namespace detail

/// Mutable elements, binary64 or binary32.
class Values : public detail::ValuesBase<false> {
 public:
  Values() = default;
  Values(std::span<double> d) : ValuesBase(d) {}  // NOLINT(google-explicit-constructor): a view, like std::span
  Values(std::span<float> f) : ValuesBase(f) {}  // NOLINT(google-explicit-constructor)
  Values(std::vector<double>& d) : ValuesBase(std::span<double>(d)) {}  // NOLINT(google-explicit-constructor)
  Values(std::vector<float>& f) : ValuesBase(std::span<float>(f)) {}  // NOLINT(google-explicit-constructor)
};

/// Read-only elements, binary64 or binary32.
class CValues : public detail::ValuesBase<true> {
 public:
  CValues() = default;
  CValues(Values v)  // NOLINT(google-explicit-constructor)
      : CValues(v.binary32() ? CValues(std::span<const float>(v.f32())) : CValues(std::span<const double>(v.f64()))) {}
  template <detail::RangeOf<double> R>
  CValues(const R& r) : ValuesBase(std::span<const double>(r)) {}  // NOLINT(google-explicit-constructor)
  template <detail::RangeOf<float> R>
  CValues(const R& r) : ValuesBase(std::span<const float>(r)) {}  // NOLINT(google-explicit-constructor)
  /// The n elements from `offset`, at this tensor's width.
  CValues subspan(std::size_t offset, std::size_t n) const {
    return visit([&](auto s) { return CValues(s.subspan(offset, n)); });
  }
};

/// An owning tensor of either width (a model's activations): sized with its width, read and written through
/// Values / CValues (the Runner's argument types; implicit, like a std::vector's conversion to std::span).
///
///   ops::Buffer h;
///   h.resize(N * C, /*binary32=*/true);
///   run.rmsnorm_forward(site, h, rstd, x, w, rows, eps);
class Buffer {
 public:
  /// n elements of the given width, +0 when new (a width change drops the other width's elements).
  void resize(std::size_t n, bool binary32) {
    if (binary32 != binary32_) {
      std::vector<double>().swap(d_);
      std::vector<float>().swap(f_);
      binary32_ = binary32;
    }
    if (binary32_) f_.resize(n);
    else d_.resize(n);
  }
  /// Frees the elements (size 0, the width kept).
  void release() {
    std::vector<double>().swap(d_);
    std::vector<float>().swap(f_);
  }
  bool binary32() const { return binary32_; }
  std::size_t size() const { return binary32_ ? f_.size() : d_.size(); }
  bool empty() const { return size() == 0; }
  Values values() { return binary32_ ? Values(f_) : Values(d_); }
  CValues cvalues() const { return binary32_ ? CValues(f_) : CValues(d_); }
  operator Values() { return values(); }  // NOLINT(google-explicit-constructor)
  operator CValues() const { return cvalues(); }  // NOLINT(google-explicit-constructor)
  /// Every element +0 (large tensors in chunks over the threads, outside a parallel region: ops/values.cpp).
  void zero();

 private:
  std::vector<double> d_;
  std::vector<float> f_;
  bool binary32_ = false;
};

}  // namespace roundoff::ops
