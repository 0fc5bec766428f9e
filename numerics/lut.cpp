#include "numerics/lut.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "numerics/arith.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

std::string_view name_of(LutFunction f) {
  switch (f) {
    case LutFunction::Sigmoid: return "sigmoid";
    case LutFunction::Tanh: return "tanh";
    case LutFunction::Swish: return "swish";
    case LutFunction::Exp: return "exp";
  }
  return "?";
}

std::optional<std::string> validate(const LutSpec& s) {
  if (s.knots < 2 || s.knots > 4097) return "knot count " + std::to_string(s.knots) + " is not in 2..4097";
  if (!std::isfinite(s.lo) || !std::isfinite(s.hi) || !(s.lo < s.hi))
    return std::string("the table range needs finite LO < HI");
  return std::nullopt;
}

LutSpec default_lut(LutFunction f) {
  switch (f) {
    case LutFunction::Sigmoid: return {33, -11.46, 11.46};
    case LutFunction::Tanh: return {49, -4.0, 4.0};
    case LutFunction::Swish: return {33, -3.2206, 3.2206};
    case LutFunction::Exp: return {33, -16.0, 0.0};
  }
  return {};
}

namespace {

double sigmoid_exact(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

/// f in binary64 (libm), for fitting the segments.
double eval(LutFunction f, double x) {
  switch (f) {
    case LutFunction::Sigmoid: return sigmoid_exact(x);
    case LutFunction::Tanh: return std::tanh(x);
    case LutFunction::Swish: return x * sigmoid_exact(x);
    case LutFunction::Exp: return std::exp(x);
  }
  return 0;
}

const RoundingPlan& fp16_plan() {
  static const RoundingPlan plan(formats::fp16);
  return plan;
}
double f16(double x) { return round_to(fp16_plan(), Rounding::NearestEven, x); }

}  // namespace

Lut::Lut(LutFunction f, const LutSpec& spec) : f_(f), spec_(spec) {
  if (auto why = validate(spec)) throw std::invalid_argument("lookup table: " + *why);
  const int segments = spec.knots - 1;
  h_ = (spec.hi - spec.lo) / segments;
  slope_.resize(static_cast<std::size_t>(segments));
  intercept_.resize(static_cast<std::size_t>(segments));
  for (int j = 0; j < segments; ++j) {
    const double a = spec.lo + j * h_, b = spec.lo + (j + 1) * h_;
    const double fa = eval(f, a), s = (eval(f, b) - fa) / h_, c0 = fa - s * a;
    double dmax = -std::numeric_limits<double>::infinity(), dmin = std::numeric_limits<double>::infinity();
    for (int t = 0; t <= 64; ++t) {
      const double x = a + t * (h_ / 64);
      const double d = eval(f, x) - (s * x + c0);
      dmax = std::max(dmax, d);
      dmin = std::min(dmin, d);
    }
    slope_[static_cast<std::size_t>(j)] = f16(s);
    intercept_[static_cast<std::size_t>(j)] = f16(c0 + (dmax + dmin) / 2);
  }
}

double Lut::operator()(double x_in) const {
  if (std::isnan(x_in)) return x_in;
  const double x = f16(x_in);
  if (x < spec_.lo) {
    switch (f_) {
      case LutFunction::Sigmoid:
      case LutFunction::Swish:
      case LutFunction::Exp: return 0.0;
      case LutFunction::Tanh: return -1.0;
    }
  }
  if (x > spec_.hi) {
    switch (f_) {
      case LutFunction::Sigmoid:
      case LutFunction::Tanh: return 1.0;
      case LutFunction::Swish: return x;
      case LutFunction::Exp: return numerics::exp(fp16_plan(), Rounding::NearestEven, x);
    }
  }
  const auto last = static_cast<std::ptrdiff_t>(slope_.size()) - 1;
  const auto j = static_cast<std::size_t>(
      std::clamp(static_cast<std::ptrdiff_t>(std::floor((x - spec_.lo) / h_)), std::ptrdiff_t{0}, last));
  return f16(f16(slope_[j] * x) + intercept_[j]);
}

const Lut& lut_for(LutFunction f, const LutSpec& spec) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, double, double>, std::unique_ptr<Lut>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{static_cast<int>(f), spec.knots, spec.lo, spec.hi}];
  if (!slot) slot = std::make_unique<Lut>(f, spec);
  return *slot;
}

}  // namespace roundoff::numerics
