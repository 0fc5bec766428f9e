// numerics::all_binary32 on every instruction-set tier against its definition per value.
#include <gtest/gtest.h>

#include <xmmintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numerics/binary32_values.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

/// The definition: the round trip through binary32 gives the value back, and the value is no NaN.
bool definition(const std::vector<double>& x) {
  for (const double v : x)
    if (std::isnan(v) || static_cast<double>(static_cast<float>(v)) != v) return false;
  return true;
}

/// Every tier this CPU has, and None (the portable loop).
std::vector<KernelOptions> tiers() {
  std::vector<KernelOptions> out;
  for (const kernels::Isa isa : ::roundoff::test::isa_tiers(true)) out.push_back(::roundoff::test::kernels_at(isa));
  return out;
}

TEST(Binary32Values, EqualsTheDefinitionOnEveryTier) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> e(-149, 127);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const double inf = std::numeric_limits<double>::infinity();
  // binary32 values: random ones over the whole range (subnormals included), ±0, ±inf, the extremes
  const std::vector<double> yes = {0.0, -0.0, inf, -inf, 0x1p-149, -0x1p-149, 0x1.fffffcp-127, 0x1p-126,
                                   0x1.fffffep127, -0x1.fffffep127, 1.0, 0x1.000002p0};
  // not binary32 values: one binary64 ulp off, a half-way case, below the least subnormal, beyond the largest
  // (finite in binary64), a binary64 subnormal, NaNs (quiet, signalling, with a payload)
  const std::vector<double> no = {0x1.0000000000001p0, 0x1.000001p0, 0x1p-150, 0x1.fffffe8p127, 0x1p128,
                                  std::numeric_limits<double>::denorm_min(),
                                  std::numeric_limits<double>::quiet_NaN(),
                                  std::bit_cast<double>(std::uint64_t{0x7ff0000000000001}),
                                  std::bit_cast<double>(std::uint64_t{0xfff8000012345000})};
  for (const KernelOptions& k : tiers())
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{7},
                                std::size_t{8}, std::size_t{9}, std::size_t{17}, std::size_t{255},
                                std::size_t{256}, std::size_t{257}, std::size_t{1031}}) {
      std::vector<double> x(n);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = i % 5 == 0 ? yes[i % yes.size()]
                          : static_cast<double>(static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng))));
      const int tier = static_cast<int>(k.isa_limit);
      ASSERT_TRUE(definition(x));
      EXPECT_TRUE(all_binary32(x, k)) << "tier " << tier << " n " << n;
      // one value that is not binary32, at the first, a middle and the last position: false, as the definition
      for (const double bad : no)
        for (const std::size_t at : {std::size_t{0}, n / 2, n == 0 ? std::size_t{0} : n - 1}) {
          if (n == 0) continue;
          std::vector<double> y = x;
          y[at] = bad;
          ASSERT_FALSE(definition(y));
          EXPECT_FALSE(all_binary32(y, k)) << "tier " << tier << " n " << n << " at " << at << std::hexfloat
                                           << " value " << bad;
        }
    }
}

TEST(Binary32Values, FalseUnderANonDefaultControlRegister) {
  // Under DAZ a binary64 subnormal reads as 0 in both the conversion and the comparison, so the lane test would
  // call it binary32: the function declines (false) whenever the MXCSR is not the default.
  const std::vector<double> x = {1.0, 0.5, 0x1p-149};
  const unsigned saved = _mm_getcsr();
  for (const unsigned bits : {0x0040u /* DAZ */, 0x8000u /* FTZ */}) {
    _mm_setcsr(saved | bits);
    bool any = false;
    for (const KernelOptions& k : tiers()) any = any || all_binary32(x, k);
    _mm_setcsr(saved);
    EXPECT_FALSE(any) << "MXCSR bits " << bits;
  }
  for (const KernelOptions& k : tiers()) EXPECT_TRUE(all_binary32(x, k));
}

}  // namespace
}  // namespace roundoff::numerics
