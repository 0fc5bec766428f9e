#pragma once
/// \file exhaustive.hpp
/// Helpers for exhaustive and sampled checks: the values of small formats, conversion inputs around every
/// value and midpoint, an OpenMP loop over independent cases, and a thread-safe mismatch log.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/mpfr_util.hpp"

namespace roundoff::test {

/// Every encoding's value of a format with a bit layout, NaN encodings skipped, in encoding order (both zeros
/// and, where the format has them, both infinities included). For formats without subnormals the encoding's
/// subnormal field still yields the base layout's subnormal values, which are useful inputs.
inline std::vector<double> encoded_values(const numerics::Format& f) {
  const auto enc = numerics::encoding_of(f);
  std::vector<double> v;
  if (!enc) return v;
  const std::uint64_t n = std::uint64_t{1} << enc->total_bits();
  for (std::uint64_t b = 0; b < n; ++b) {
    const double x = numerics::from_bits(f, b);
    if (!std::isnan(x)) v.push_back(x);
  }
  return v;
}

/// Exact doubles that exercise every rounding decision of a conversion to f: each encoded value, each midpoint
/// between neighbours and the doubles just below and above it, the values just beside each value, points past
/// max_finite and below the smallest subnormal, ±inf and NaN.
inline std::vector<double> conversion_inputs(const numerics::Format& f) {
  std::vector<double> vals = encoded_values(f);
  std::vector<double> finite;
  for (double x : vals)
    if (std::isfinite(x)) finite.push_back(x);
  std::sort(finite.begin(), finite.end());
  finite.erase(std::unique(finite.begin(), finite.end()), finite.end());  // -0 == +0: one zero
  const double big = numerics::max_finite(f);
  const double top_ulp = numerics::ulp(f, big);
  const double tiny = numerics::pow2(f.emin - f.precision + 1);
  for (double s : {-1.0, 1.0}) {
    for (double k : {0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0})
      finite.push_back(s * (big + k * top_ulp));
    finite.push_back(s * 2 * big);
    finite.push_back(s * 0x1p1000);
    for (double k : {0.25, 0.5, 0.75}) finite.push_back(s * k * tiny);
    finite.push_back(s * 0x1p-1074);
  }
  std::sort(finite.begin(), finite.end());
  std::vector<double> in;
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < finite.size(); ++i) {
    const double x = finite[i];
    in.push_back(x);
    in.push_back(std::nextafter(x, -inf));
    in.push_back(std::nextafter(x, inf));
    if (i + 1 < finite.size()) {
      const double mid = x + (finite[i + 1] - x) / 2;  // exact: format values have <= 53 - 1 bits
      in.push_back(mid);
      in.push_back(std::nextafter(mid, -inf));
      in.push_back(std::nextafter(mid, inf));
    }
  }
  in.push_back(-0.0);
  in.push_back(inf);
  in.push_back(-inf);
  in.push_back(std::numeric_limits<double>::quiet_NaN());
  return in;
}

/// Runs body(i) for i in [0, n) over OpenMP threads (cases must be independent).
template <class Body>
void parallel_for(std::int64_t n, Body&& body) {
#pragma omp parallel for schedule(dynamic, 256)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

/// Collects mismatches from many threads; keeps the first `keep` descriptions.
class Mismatches {
 public:
  explicit Mismatches(std::size_t keep = 20) : keep_(keep) {}
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (first_.size() < keep_) first_.push_back(what);
  }
  std::uint64_t count() const { return count_; }
  std::string report() const {
    std::ostringstream os;
    os << count_ << " mismatches";
    for (const auto& s : first_) os << "\n  " << s;
    return os.str();
  }

 private:
  std::size_t keep_;
  std::mutex mu_;
  std::uint64_t count_ = 0;
  std::vector<std::string> first_;
};

/// A value as a hex-float, with its encoding in f when it has one ("0x1.8p+0 [0x3e00]").
inline std::string describe(const numerics::Format& f, double x) {
  std::string s = numerics::hex_float(x);
  if (!numerics::encoding_of(f) || !numerics::is_representable(numerics::RoundingPlan(f), x)) return s;
  std::ostringstream os;
  os << std::hex << numerics::to_bits(f, x);
  return s + " [0x" + os.str() + "]";
}

}  // namespace roundoff::test
