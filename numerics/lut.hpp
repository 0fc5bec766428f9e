#pragma once
/// \file lut.hpp
/// Piecewise-linear lookup tables evaluated in fp16: the Apple Neural Engine's model of its transcendental
/// functions as the reverse-engineered ane-guide describes it (docs/numerics.md, "ANE lookup tables").
///
/// A table for f with K knots on [lo, hi]: knots x_j = lo + j·h, h = (hi − lo)/(K − 1) (binary64). Segment j
/// (x_j ≤ x < x_j+1) holds the line with the chord's slope s_j = (f(x_j+1) − f(x_j))/h whose intercept is
/// shifted to equalise the largest deviations above and below f on the segment (sampled at 65 equally spaced
/// points, f in binary64 libm): the best linear fit when f is convex or concave there. Slope S_j and intercept
/// C_j are stored in fp16 (nearest-even). Evaluation of an input x, first rounded to fp16:
///   lo ≤ x ≤ hi   y = fp16(fp16(S_j·x) + C_j)            (two fp16 roundings, nearest-even)
///   x < lo        the left asymptote: sigmoid 0, tanh −1, swish 0, exp 0
///   x > hi        the right asymptote: sigmoid 1, tanh 1, swish x; exp has none: exp(x) correctly rounded
///   NaN           NaN
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace roundoff::numerics {

/// The functions a table can stand for.
enum class LutFunction : std::uint8_t { Sigmoid, Tanh, Swish, Exp };
inline constexpr std::array<LutFunction, 4> kAllLutFunctions{LutFunction::Sigmoid, LutFunction::Tanh,
                                                             LutFunction::Swish, LutFunction::Exp};
/// "sigmoid", "tanh", "swish", "exp".
std::string_view name_of(LutFunction f);

/// Knot count and domain of a table.
struct LutSpec {
  int knots = 33;
  double lo = -8;
  double hi = 8;
  friend bool operator==(const LutSpec&, const LutSpec&) = default;
};

/// Empty when the spec is usable (knots in 2..4097, finite lo < hi), else the reason.
std::optional<std::string> validate(const LutSpec& s);

/// The default table of f, calibrated so that its worst absolute error over every finite fp16 input equals the
/// guide's published figure to the digits published (sigmoid 0.0034: 33 knots; tanh 0.0017: 49 knots; swish
/// value −0.001259 at 0: 33 knots); exp has no published figure (33 knots on [−16, 0]). See docs/numerics.md.
LutSpec default_lut(LutFunction f);

/// A built table.
class Lut {
 public:
  Lut(LutFunction f, const LutSpec& spec);
  /// The table's value at x (see the file comment), a binary64 holding an fp16 value (or inf/NaN).
  double operator()(double x) const;
  LutFunction function() const { return f_; }
  const LutSpec& spec() const { return spec_; }

 private:
  LutFunction f_;
  LutSpec spec_;
  double h_;
  std::vector<double> slope_, intercept_;
};

/// The table for (f, spec), built once per process and shared (thread-safe).
const Lut& lut_for(LutFunction f, const LutSpec& spec);

}  // namespace roundoff::numerics
