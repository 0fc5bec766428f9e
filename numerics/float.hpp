#pragma once
/// \file float.hpp
/// Float<F, R>: a typed scalar for tests and small experiments. Its value is a double that is always a value of
/// the format F (or NaN/±inf where F has them); every operation is one correctly rounded operation in F with
/// the deterministic mode R (numerics/arith.hpp): a + b is round_R(a + b exact), never binary64-then-round.
///
///   using Bf16 = Float<formats::bf16>;
///   Bf16 x = 0.1;                  // rounds 0.1 (the double) to bf16, nearest-even
///   Bf16 y = x * x + Bf16(1);      // two roundings: the product, then the sum (no FMA unless written: fma())
///
/// Conversions: from double, float and integers (exact below 2^53 in magnitude) by one rounding; to double
/// explicitly (exact). Comparisons are IEEE comparisons of the values (NaN unordered, -0 == +0).
/// std::numeric_limits is specialised below; Eigen's NumTraits in numerics/eigen_support.hpp.
#include <cmath>
#include <compare>
#include <concepts>
#include <cstdint>
#include <limits>

#include "numerics/arith.hpp"

namespace roundoff::numerics {

template <Format F, Rounding R = Rounding::NearestEven>
class Float {
  static_assert(R != Rounding::Stochastic,
                "Float has no random stream: use round_to/arith with Rounding::Stochastic and StochasticBits");

 public:
  static constexpr Format format = F;
  static constexpr Rounding rounding = R;

  /// +0.
  constexpr Float() = default;
  /// round_R(x) in F.
  Float(double x) : v_(round_to(plan(), R, x)) {}
  Float(float x) : Float(static_cast<double>(x)) {}
  template <std::integral I>
  Float(I x) : Float(static_cast<double>(x)) {}

  /// The value of an encoding of F (F must have a bit layout).
  static Float from_bits(std::uint64_t bits) { return exact(numerics::from_bits(F, bits)); }
  /// A double that is already a value of F, without rounding (constexpr; the caller guarantees it).
  static constexpr Float exact(double v) {
    Float r;
    r.v_ = v;
    return r;
  }
  std::uint64_t to_bits() const { return numerics::to_bits(F, v_); }
  constexpr double value() const { return v_; }
  explicit constexpr operator double() const { return v_; }

  /// The least value of F above this one: IEEE nextUp, with F's overflow rule in mode Up past max_finite
  /// (+inf, NaN for NaN-only formats, max_finite when saturating). nextUp(-min) = -0; nextUp(±0) = min_positive.
  Float next_up() const {
    if (v_ != v_) return *this;
    return exact(round_to(plan(), Rounding::Up, std::nextafter(v_, std::numeric_limits<double>::infinity())));
  }
  /// The greatest value of F below this one (mirror of next_up).
  Float next_down() const { return -((-*this).next_up()); }

  /// The format's precomputed rounding plan (one per F).
  static const RoundingPlan& plan() {
    static const RoundingPlan p(F);
    return p;
  }

  friend Float operator+(Float a, Float b) { return exact(add(plan(), R, a.v_, b.v_)); }
  friend Float operator-(Float a, Float b) { return exact(sub(plan(), R, a.v_, b.v_)); }
  friend Float operator*(Float a, Float b) { return exact(mul(plan(), R, a.v_, b.v_)); }
  friend Float operator/(Float a, Float b) { return exact(div(plan(), R, a.v_, b.v_)); }
  /// Negation is exact (every format is sign-symmetric).
  friend constexpr Float operator-(Float a) { return exact(-a.v_); }
  friend constexpr Float operator+(Float a) { return a; }
  Float& operator+=(Float b) { return *this = *this + b; }
  Float& operator-=(Float b) { return *this = *this - b; }
  Float& operator*=(Float b) { return *this = *this * b; }
  Float& operator/=(Float b) { return *this = *this / b; }

  friend constexpr bool operator==(Float a, Float b) { return a.v_ == b.v_; }
  friend constexpr std::partial_ordering operator<=>(Float a, Float b) { return a.v_ <=> b.v_; }

  // Math functions found by ADL (Eigen's contract), each one rounding in F with R.
  friend Float sqrt(Float x) { return exact(numerics::sqrt(plan(), R, x.v_)); }
  friend Float exp(Float x) { return exact(numerics::exp(plan(), R, x.v_)); }
  friend Float log(Float x) { return exact(numerics::log(plan(), R, x.v_)); }
  friend Float sigmoid(Float x) { return exact(numerics::sigmoid(plan(), R, x.v_)); }
  friend Float tanh(Float x) { return exact(numerics::tanh(plan(), R, x.v_)); }
  friend Float rsqrt(Float x) { return exact(numerics::rsqrt(plan(), R, x.v_)); }
  friend Float sin(Float x) { return exact(numerics::sin(plan(), R, x.v_)); }
  friend Float cos(Float x) { return exact(numerics::cos(plan(), R, x.v_)); }
  /// a·b + c with one rounding.
  friend Float fma(Float a, Float b, Float c) { return exact(numerics::fma(plan(), R, a.v_, b.v_, c.v_)); }
  friend Float abs(Float x) { return exact(std::fabs(x.v_)); }
  friend bool isnan(Float x) { return x.v_ != x.v_; }
  friend bool isinf(Float x) { return x.v_ == std::numeric_limits<double>::infinity() || x.v_ == -std::numeric_limits<double>::infinity(); }
  friend bool isfinite(Float x) { return !isnan(x) && !isinf(x); }

 private:
  double v_ = 0.0;
};

using Fp16 = Float<formats::fp16>;
using Bf16 = Float<formats::bf16>;
using E4m3 = Float<formats::e4m3>;
using E5m2 = Float<formats::e5m2>;

}  // namespace roundoff::numerics

/// numeric_limits from the format: digits = p, min() = 2^emin, denorm_min() = smallest subnormal (2^emin when
/// subnormals are off), epsilon() = 2^(1-p), round_error() = 1/2 for nearest modes and 1 otherwise,
/// min_exponent = emin + 1 and max_exponent = emax + 1 (C's convention: 2^(e-1) is normal).
template <roundoff::numerics::Format F, roundoff::numerics::Rounding R>
class std::numeric_limits<roundoff::numerics::Float<F, R>> {
  using T = roundoff::numerics::Float<F, R>;
  using Specials = roundoff::numerics::Specials;
  using Rounding = roundoff::numerics::Rounding;
  static constexpr double pow2(int k) { return roundoff::numerics::pow2(k); }
  /// floor(x · log10(2)) for 0 <= x <= 1100 (30103/100000 is log10(2) to 6e-7, exact enough below 1100).
  static constexpr int floor_log10_2(int x) { return x * 30103 / 100000; }
  static constexpr int max_exp10() {
    int n = 0;
    for (double t = 1.0; t <= roundoff::numerics::max_finite(F) / 10; t *= 10.0) ++n;  // counts 10^(n+1) <= max
    return n;
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = F.specials == Specials::Ieee;
  static constexpr bool has_quiet_NaN = F.specials != Specials::None;
  static constexpr bool has_signaling_NaN = false;
  static constexpr std::float_denorm_style has_denorm = F.subnormals ? std::denorm_present : std::denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style =
      R == Rounding::NearestEven || R == Rounding::NearestAway ? std::round_to_nearest
      : R == Rounding::TowardZero                               ? std::round_toward_zero
      : R == Rounding::Up                                       ? std::round_toward_infinity
      : R == Rounding::Down                                     ? std::round_toward_neg_infinity
                                                                : std::round_indeterminate;
  static constexpr bool is_iec559 =
      F.specials == Specials::Ieee && F.subnormals && !F.saturate && R == Rounding::NearestEven;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F.precision;
  static constexpr int digits10 = floor_log10_2(F.precision - 1);
  static constexpr int max_digits10 = 2 + floor_log10_2(F.precision);
  static constexpr int radix = 2;
  static constexpr int min_exponent = F.emin + 1;
  static constexpr int min_exponent10 = -floor_log10_2(-F.emin);
  static constexpr int max_exponent = F.emax + 1;
  static constexpr int max_exponent10 = max_exp10();
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() noexcept { return T::exact(pow2(F.emin)); }
  static constexpr T lowest() noexcept { return T::exact(-roundoff::numerics::max_finite(F)); }
  static constexpr T max() noexcept { return T::exact(roundoff::numerics::max_finite(F)); }
  static constexpr T epsilon() noexcept { return T::exact(pow2(1 - F.precision)); }
  static constexpr T round_error() noexcept {
    return T::exact(R == Rounding::NearestEven || R == Rounding::NearestAway ? 0.5 : 1.0);
  }
  static constexpr T infinity() noexcept {
    return T::exact(has_infinity ? std::numeric_limits<double>::infinity() : 0.0);
  }
  static constexpr T quiet_NaN() noexcept {
    return T::exact(has_quiet_NaN ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  }
  static constexpr T signaling_NaN() noexcept { return T::exact(0.0); }
  static constexpr T denorm_min() noexcept { return T::exact(roundoff::numerics::min_positive(F)); }
};
