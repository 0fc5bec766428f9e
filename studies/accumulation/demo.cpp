#include "studies/accumulation/demo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/round.hpp"

namespace roundoff::studies {

using namespace numerics;

void print_accumulation_demo(std::ostream& os) {
  constexpr std::size_t n = 1024;
  constexpr int draws = 20;
  const RoundingPlan fp16(formats::fp16);
  const StochasticBits rng{2026, 1};
  std::uint64_t k = 0;
  auto normal = [&] {  // Box–Muller on the counter-based stream
    const double u1 = (static_cast<double>(rng.draw(k++) >> 11) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(rng.draw(k++) >> 11) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  };
  const char* names[] = {"fp16-seq", "fp16-pairwise", "fp16-splitk32-fp32", "fp32-seq", "fp16-sr"};
  std::vector<std::vector<double>> errs(std::size(names));
  for (int t = 0; t < draws; ++t) {
    std::vector<double> x(n), y(n);
    for (auto& v : x) v = round_to(fp16, Rounding::NearestEven, normal());
    for (auto& v : y) v = round_to(fp16, Rounding::NearestEven, normal());
    const ExactSum exact = exact_dot(formats::fp16, x.data(), 1, y.data(), 1, n);
    for (std::size_t a = 0; a < std::size(names); ++a) {
      const double r = dot(parse_accumulation(names[a]), x, y, StochasticBits{7, static_cast<std::uint64_t>(t)});
      errs[a].push_back(error_ulps(formats::fp16, exact, r));
    }
  }
  char line[160];
  os << "Accumulation: dot products of length " << n << ", x, y ~ N(0,1) rounded to fp16, " << draws
     << " draws;\nerror of the result at the exact value, in fp16 ulps:\n";
  std::snprintf(line, sizeof line, "  %-20s %10s %10s\n", "accumulation", "median", "max");
  os << line;
  for (std::size_t a = 0; a < std::size(names); ++a) {
    auto v = errs[a];
    std::sort(v.begin(), v.end());
    std::snprintf(line, sizeof line, "  %-20s %10.3f %10.3f\n", names[a], 0.5 * (v[draws / 2 - 1] + v[draws / 2]),
                  v.back());
    os << line;
  }
  const std::vector<double> ones(4096, 1.0);
  os << "Sequential sum of 4096 ones: fp16 " << sum(parse_accumulation("fp16-seq"), ones) << ", bf16 "
     << sum(parse_accumulation("bf16-seq"), ones) << ", fp32 " << sum(parse_accumulation("fp32-seq"), ones)
     << ", fp16 pairwise " << sum(parse_accumulation("fp16-pairwise"), ones) << " (exact 4096).\n";
}

}  // namespace roundoff::studies
