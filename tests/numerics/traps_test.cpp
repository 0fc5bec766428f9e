// The traps of NUMERICS.md as named tests, each with the value it must give, plus the build-flag guard
// against FMA contraction.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "numerics/arith.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::same_value;

namespace {
const RoundingPlan kBf16(formats::bf16);
const RoundingPlan kFp16(formats::fp16);
const RoundingPlan kE4m3(formats::e4m3);
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST(Traps, DirectedAdditionIsNotBinary64ThenRound) {
  // Trap 2: RU_bf16(1 + 2^-100) = 1 + 2^-7; binary64 first would give 1.0.
  EXPECT_EQ(add(kBf16, Rounding::Up, 1.0, 0x1p-100), 1.0078125);
  EXPECT_EQ(round_to(kBf16, Rounding::Up, 1.0 + 0x1p-100), 1.0);  // the wrong path, for contrast
  EXPECT_EQ(add(kBf16, Rounding::Down, 1.0, -0x1p-100), 0x1.fep-1);
  EXPECT_EQ(add(kBf16, Rounding::TowardZero, -1.0, 0x1p-100), -0x1.fep-1);
  EXPECT_EQ(add(kBf16, Rounding::Odd, 1.0, 0x1p-100), 1.0078125);
  EXPECT_EQ(add(kBf16, Rounding::NearestEven, 1.0, 0x1p-100), 1.0);
  EXPECT_EQ(roundoff::test::oracle_op(formats::bf16, roundoff::test::Op::Add, 1.0, 0x1p-100).value(Rounding::Up),
            1.0078125);
}

TEST(Traps, Fp16FmaIsRoundedOnce) {
  // Trap 1: 1.75 · 439/256 + 2^-24 = 3.0009765625 + 2^-24, just above the fp16 midpoint 3.0009765625
  // between 3 and 3.001953125; fp32 FMA then fp16 lands on the midpoint and gives 3.0.
  const double a = 1.75, b = 439.0 / 256.0, c = 0x1p-24;
  EXPECT_EQ(fma(kFp16, Rounding::NearestEven, a, b, c), 3.001953125);
  const float via_fp32 = std::fma(static_cast<float>(a), static_cast<float>(b), static_cast<float>(c));
  EXPECT_EQ(round_to(kFp16, Rounding::NearestEven, static_cast<double>(via_fp32)), 3.0);  // the wrong path
  EXPECT_EQ(roundoff::test::oracle_op(formats::fp16, roundoff::test::Op::Fma, a, b, c).value(Rounding::NearestEven),
            3.001953125);
}

TEST(Traps, E4m3OverflowGivesNaNUnlessSaturating) {
  EXPECT_EQ(max_finite(formats::e4m3), 448.0);
  EXPECT_EQ(round_to(kE4m3, Rounding::NearestEven, 464.0), 448.0);  // tie at the top: even significand 1.110
  EXPECT_TRUE(std::isnan(round_to(kE4m3, Rounding::NearestEven, 465.0)));
  EXPECT_TRUE(std::isnan(round_to(kE4m3, Rounding::NearestAway, 464.0)));
  EXPECT_TRUE(std::isnan(round_to(kE4m3, Rounding::Up, 449.0)));
  EXPECT_EQ(round_to(kE4m3, Rounding::Down, 449.0), 448.0);
  EXPECT_EQ(round_to(kE4m3, Rounding::TowardZero, 1e6), 448.0);
  EXPECT_EQ(round_to(kE4m3, Rounding::Odd, 1e6), 448.0);
  EXPECT_TRUE(std::isnan(round_to(kE4m3, Rounding::NearestEven, kInf)));  // no infinity in e4m3fn
  EXPECT_TRUE(std::isnan(mul(kE4m3, Rounding::NearestEven, 256.0, 2.0)));
  EXPECT_TRUE(std::isnan(div(kE4m3, Rounding::NearestEven, 1.0, 0.0)));  // x/0 = inf, which e4m3 spells NaN
  const RoundingPlan sat(Format{4, -6, 8, true, Specials::NanOnly, true});
  EXPECT_EQ(round_to(sat, Rounding::NearestEven, 1e6), 448.0);
  EXPECT_EQ(round_to(sat, Rounding::NearestEven, -kInf), -448.0);
  EXPECT_EQ(mul(sat, Rounding::Up, 256.0, 2.0), 448.0);
  EXPECT_EQ(to_bits(formats::e4m3, 448.0), 0x7Eu);
  EXPECT_TRUE(std::isnan(from_bits(formats::e4m3, 0x7F)));
}

TEST(Traps, SignedZeros) {
  for (const RoundingPlan* p : {&kBf16, &kFp16, &kE4m3}) {
    for (const Rounding m : kDeterministicRoundings) {
      const double want = m == Rounding::Down ? -0.0 : 0.0;
      EXPECT_TRUE(same_value(sub(*p, m, 1.5, 1.5), want)) << name_of(m);
      EXPECT_TRUE(same_value(add(*p, m, -1.5, 1.5), want)) << name_of(m);
      EXPECT_TRUE(same_value(fma(*p, m, 2.0, 3.0, -6.0), want)) << name_of(m);
      // x + x keeps the sign of a zero in every mode (IEEE 754 §6.3).
      EXPECT_TRUE(same_value(add(*p, m, 0.0, 0.0), 0.0)) << name_of(m);
      EXPECT_TRUE(same_value(add(*p, m, -0.0, -0.0), -0.0)) << name_of(m);
      EXPECT_TRUE(same_value(sub(*p, m, 0.0, -0.0), 0.0)) << name_of(m);
      EXPECT_TRUE(same_value(add(*p, m, 0.0, -0.0), want)) << name_of(m);
      EXPECT_TRUE(same_value(mul(*p, m, -2.0, 0.0), -0.0)) << name_of(m);
      EXPECT_TRUE(same_value(round_to(*p, m, -0x1p-200), m == Rounding::Down || m == Rounding::Odd
                                                             ? -min_positive(p->format) : -0.0))
          << name_of(m);
      EXPECT_TRUE(same_value(sqrt(*p, m, -0.0), -0.0)) << name_of(m);
    }
  }
}

TEST(Traps, InfMinusInfIsNaN) {
  for (const Rounding m : kDeterministicRoundings) {
    EXPECT_TRUE(std::isnan(sub(kFp16, m, kInf, kInf)));
    EXPECT_TRUE(std::isnan(add(kBf16, m, kInf, -kInf)));
    EXPECT_TRUE(std::isnan(mul(kFp16, m, 0.0, kInf)));
    EXPECT_TRUE(std::isnan(fma(kFp16, m, 0.0, kInf, 1.0)));
    EXPECT_TRUE(std::isnan(fma(kFp16, m, 1.0, kInf, -kInf)));
    EXPECT_TRUE(std::isnan(div(kBf16, m, 0.0, 0.0)));
    EXPECT_TRUE(std::isnan(sqrt(kBf16, m, -1.0)));
    EXPECT_EQ(add(kFp16, m, kInf, 1.0), kInf);
  }
}

TEST(Traps, HardwareBf16ConversionFlushesButRoundToDoesNot) {
  // Trap 3 is about an instruction the library must not use on subnormal inputs: round_to keeps bf16 subnormals.
  EXPECT_EQ(round_to(kBf16, Rounding::NearestEven, 0x1p-130), 0x1p-130);
  EXPECT_EQ(round_to(kBf16, Rounding::NearestEven, 0x1.8p-133), 0x1p-132);  // tie between 1 and 2 quanta: even
}

namespace {
/// a·b + c as written: with -ffp-contract=off this is two roundings even where the target has FMA.
__attribute__((noinline, target("fma"))) double multiply_then_add(double a, double b, double c) { return a * b + c; }
/// Operands through a vector, so that the compiler cannot fold the expression at compile time.
std::vector<double> g_operands{1.0 + 0x1p-30, 1.0 - 0x1p-30, -1.0};
}  // namespace

TEST(BuildFlags, NoFmaContraction) {
  // a·b = 1 - 2^-60 exactly, which binary64 rounds to 1: unfused gives 0, fused gives -2^-60. The function is
  // compiled for an FMA-capable target, where GCC contracts a*b+c in C++ unless -ffp-contract=off.
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "CPU without FMA: contraction cannot occur";
  const double a = g_operands[0], b = g_operands[1], c = g_operands[2];
  EXPECT_EQ(std::fma(a, b, c), -0x1p-60);
  EXPECT_EQ(multiply_then_add(a, b, c), 0.0) << "a*b+c was contracted into an FMA: build without -ffp-contract=off?";
}
