// numerics::all_binary32, widen_binary32 and narrow_to_binary32 on every instruction-set tier against their
// definitions per value.
#include <gtest/gtest.h>

#include <xmmintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
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

/// Floats of every class: random bit patterns (NaNs with payloads, signalling ones among them, subnormals, infinities),
/// then the edges written out.
std::vector<float> float_patterns(std::size_t n) {
  std::mt19937_64 rng(11);
  std::vector<float> v(n);
  for (float& f : v) f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  const std::uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x7F7FFFFFu,
                                 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x3F800000u};
  for (std::size_t i = 0; i < std::size(edges) && i < n; ++i) v[i] = std::bit_cast<float>(edges[i]);
  return v;
}

TEST(Binary32Values, WideningIsTheCastOnEveryTier) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{33},
                              std::size_t{4099}}) {
    const std::vector<float> x = float_patterns(n);
    for (const KernelOptions& k : tiers()) {
      std::vector<double> got(n + 1, 7.0);
      widen_binary32(x, got, k);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(static_cast<double>(x[i])))
            << "tier " << static_cast<int>(k.isa_limit) << " n " << n << " i " << i << " bits " << std::hex
            << std::bit_cast<std::uint32_t>(x[i]);
      EXPECT_EQ(got[n], 7.0) << "wrote past the end";
    }
  }
}

TEST(Binary32Values, CheckedWideningIsTheCastAndFindsEveryNan) {
  // The same bits as the cast, and false exactly when some value is NaN: one NaN (quiet, signalling, negative) at
  // every position of lengths covering the 16- and 8-lane blocks and their tails, on every tier.
  const std::uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFFBFFFFFu};
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{33},
                              std::size_t{70}}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = i % 5 == 0 ? std::bit_cast<float>(0x00000001u) : 0.5f * float(i) - 9.f;
    for (const KernelOptions& k : tiers()) {
      std::vector<double> got(n + 1, 7.0);
      EXPECT_TRUE(widen_binary32_checked(x, got, k)) << "tier " << static_cast<int>(k.isa_limit) << " n " << n;
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(static_cast<double>(x[i])));
      EXPECT_EQ(got[n], 7.0) << "wrote past the end";
      for (std::size_t at = 0; at < n; ++at)
        for (const std::uint32_t b : nans) {
          const float keep = x[at];
          x[at] = std::bit_cast<float>(b);
          ASSERT_FALSE(widen_binary32_checked(x, got, k)) << "tier " << static_cast<int>(k.isa_limit) << " at " << at;
          ASSERT_EQ(std::bit_cast<std::uint64_t>(got[at]), std::bit_cast<std::uint64_t>(static_cast<double>(x[at])));
          x[at] = keep;
        }
    }
  }
}

TEST(Binary32Values, NarrowingIsTheCastOnEveryTierAndUnderEveryControlRegister) {
  // binary32 values (the stores' case: exact) and doubles between them (rounded as the control register says, as
  // the cast is), subnormal doubles (DAZ reads them as 0) and values beyond binary32's range.
  std::mt19937_64 rng(12);
  std::vector<double> x;
  for (const float f : float_patterns(2000)) x.push_back(static_cast<double>(f));
  for (int i = 0; i < 2000; ++i) x.push_back(std::bit_cast<double>(rng()));
  for (const double v : {0x1.0000001p0, -0x1.0000003p-130, 0x1p-1074, 0x1p200, -0x1.fffffffp127, 0x1.ffffffp-127})
    x.push_back(v);
  std::vector<float> portable(x.size());
  narrow_to_binary32(x, portable, ::roundoff::test::kernels_at(kernels::Isa::None));
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(portable[i]), std::bit_cast<std::uint32_t>(static_cast<float>(x[i]))) << i;
  const unsigned saved = _mm_getcsr();
  for (const unsigned bits : {0x0000u, 0x0040u /* DAZ */, 0x8000u /* FTZ */, 0x6000u /* toward zero */,
                              0x2000u /* down */}) {
    for (const KernelOptions& k : tiers()) {
      std::vector<float> got(x.size() + 1, 7.0f), want(x.size());
      // The cast under the changed register, in the portable tier's loop (a call, which the compiler cannot move
      // across the register writes as it may move inline arithmetic); that loop is checked against inline casts
      // under the default register below.
      _mm_setcsr(saved | bits);
      narrow_to_binary32(x, got, k);
      narrow_to_binary32(x, want, ::roundoff::test::kernels_at(kernels::Isa::None));
      _mm_setcsr(saved);
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
            << "MXCSR bits " << bits << " tier " << static_cast<int>(k.isa_limit) << " i " << i << std::hexfloat
            << " value " << x[i];
      EXPECT_EQ(got[x.size()], 7.0f) << "wrote past the end";
    }
  }
}

}  // namespace
}  // namespace roundoff::numerics
