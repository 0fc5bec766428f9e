// round_array on doubles: chunks of binary32 numbers take the float SIMD paths (and binary32 values under the
// fp32 format are returned unchanged); the result must equal round_to element by element, bit for bit, in every
// mode (stochastic draws keyed by first_index + i) for every format, whatever the mix of binary32 numbers,
// wider doubles, NaN, ±inf, ±0, subnormals and overflowing values, and across the 1024-element chunks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {
namespace {

std::vector<double> values(std::size_t n, int kind, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-40, 40);
  std::vector<double> v(n);
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) {
    double x = std::ldexp(1.0 + std::uniform_real_distribution<double>(0, 1)(rng), static_cast<int>(e(rng)));
    if (rng() & 1) x = -x;
    switch (kind) {
      case 0: x = static_cast<float>(x); break;                                      // binary32 numbers
      case 1: x = static_cast<float>(x * 0x1p-110); break;                           // binary32 subnormal range
      case 2: if (rng() % 4 == 0) x = static_cast<float>(x); break;                  // mostly wider doubles
      default: {                                                                     // specials among floats
        const double sp[] = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(), 65504.0, 65520.0,
                             0x1.fep127, 0x1.ffffffp127, 0x1p-149, -0x1p-24, 0x1p-25};
        x = rng() % 3 == 0 ? sp[rng() % 12] : static_cast<float>(x);
      }
    }
    v[i] = x;
  }
  // A chunk-sized run of binary32 numbers with one wider double in the middle of the second chunk.
  if (n > 1500) v[1500] = 1.0 + 0x1p-40;
  return v;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

TEST(RoundArrayDouble, EqualsRoundToForEveryFormatModeAndMix) {
  const Rounding modes[] = {Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero, Rounding::Up,
                            Rounding::Down,        Rounding::Odd,         Rounding::Stochastic};
  const char* formats[] = {"fp16", "bf16", "fp32", "tf32", "e5m2", "e4m3", "fp64", "p5:emin-6:emax7:nosub"};
  const StochasticBits bits{9, 4};
  for (const char* fname : formats) {
    const RoundingPlan plan(parse_format(fname));
    for (Rounding m : modes)
      for (int kind = 0; kind < 4; ++kind)
        for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{1024}, std::size_t{2600}}) {
          const std::vector<double> x = values(n, kind, n * 31 + static_cast<std::uint64_t>(kind));
          std::vector<double> y(n), inplace = x;
          round_array(plan, m, x, y, bits, 77);
          round_array(plan, m, inplace, inplace, bits, 77);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const double want = round_to(plan, m, x[i], m == Rounding::Stochastic ? bits.draw(77 + i) : 0);
            bad += !same(y[i], want) || !same(inplace[i], want);
          }
          EXPECT_EQ(bad, 0u) << fname << " mode " << static_cast<int>(m) << " kind " << kind << " n " << n;
        }
  }
}

}  // namespace
}  // namespace roundoff::numerics
