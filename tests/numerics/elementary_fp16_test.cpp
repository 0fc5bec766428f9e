// numerics::elementary_fp16_values: every table entry (every function, every fp16 input) against MPFR's correctly
// rounded fp16 result, every instruction-set tier against the portable loop (tails, in place), and the refusals
// (a value that is not an fp16 value, NaN) leaving dst as it was.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numerics/elementary_fp16.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

/// Every fp16 value (the non-NaN encodings), as binary32.
std::vector<float> every_fp16_value() {
  std::vector<float> out;
  for (std::uint64_t b = 0; b < (1u << 16); ++b)
    if (const double x = from_bits(formats::fp16, b); !std::isnan(x)) out.push_back(static_cast<float>(x));
  return out;
}

/// The same result: equal bits, or both NaN.
bool same(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

TEST(ElementaryFp16, EveryEntryIsMpfrsCorrectlyRoundedResult) {
  const std::vector<float> x = every_fp16_value();
  ASSERT_EQ(x.size(), 65536u - 2 * 1023u);
  const RoundingPlan half(formats::fp16);
  for (const Elementary f : kAllElementary) {
    std::vector<float> y(x.size());
    ASSERT_TRUE(elementary_fp16_values(f, x, y, ::roundoff::test::kernels_at(kernels::Isa::None))) << name_of(f);
    int bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = elementary_mpfr(half, Rounding::NearestEven, f, x[i]);
      if (!same(y[i], static_cast<float>(want)) && ++bad <= 5)
        ADD_FAILURE() << name_of(f) << "(" << x[i] << ") = " << y[i] << ", MPFR " << want;
    }
    EXPECT_EQ(bad, 0) << name_of(f);
  }
}

TEST(ElementaryFp16, EveryTierReadsTheSameEntries) {
  const std::vector<float> all = every_fp16_value();
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, all.size() - 1);
  for (const Elementary f : {Elementary::Exp, Elementary::Sigmoid, Elementary::Tanh})
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                                std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{511},
                                std::size_t{512}}) {
      std::vector<float> x(n);
      for (float& v : x) v = all[pick(rng)];
      std::vector<float> want(n);
      ASSERT_TRUE(elementary_fp16_values(f, x, want, ::roundoff::test::kernels_at(kernels::Isa::None)));
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same(want[i], static_cast<float>(elementary(RoundingPlan(formats::fp16), Rounding::NearestEven,
                                                                f, x[i]))));
      for (const kernels::Isa isa : ::roundoff::test::isa_tiers(true)) {
        std::vector<float> y(n, -1.0f), z = x;
        ASSERT_TRUE(elementary_fp16_values(f, x, y, ::roundoff::test::kernels_at(isa)));
        ASSERT_TRUE(elementary_fp16_values(f, z, z, ::roundoff::test::kernels_at(isa)));  // in place
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_TRUE(same(y[i], want[i])) << name_of(f) << " tier " << static_cast<int>(isa) << " n " << n;
          EXPECT_TRUE(same(z[i], want[i])) << name_of(f) << " in place, tier " << static_cast<int>(isa);
        }
      }
    }
}

TEST(ElementaryFp16, RefusesWhatIsNotAnFp16ValueAndWritesNothing) {
  const float inf = std::numeric_limits<float>::infinity();
  // fp16 values at the edges: accepted
  const std::vector<float> edges = {0.0f, -0.0f, inf, -inf, 0x1p-24f, -0x1p-24f, 65504.0f, -65504.0f, 0x1.ff8p-15f};
  // not fp16 values: a binary32 ulp off 1, half the least subnormal, beyond the largest finite, NaNs
  const std::vector<float> no = {0x1.000002p0f, 0x1p-25f, 65520.0f, 0x1.ffcp-15f,
                                 std::numeric_limits<float>::quiet_NaN(),
                                 std::bit_cast<float>(std::uint32_t{0x7f800001})};
  for (const kernels::Isa isa : ::roundoff::test::isa_tiers(true)) {
    std::vector<float> y(edges.size());
    EXPECT_TRUE(elementary_fp16_values(Elementary::Exp, edges, y, ::roundoff::test::kernels_at(isa)));
    for (const float bad : no)
      for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{40}})
        for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
          std::vector<float> x(n, 1.5f), out(n, 7.0f);
          x[at] = bad;
          EXPECT_FALSE(elementary_fp16_values(Elementary::Sigmoid, x, out, ::roundoff::test::kernels_at(isa)))
              << bad << " at " << at << " of " << n << ", tier " << static_cast<int>(isa);
          for (const float v : out) EXPECT_EQ(v, 7.0f);
        }
  }
}

}  // namespace
}  // namespace roundoff::numerics
