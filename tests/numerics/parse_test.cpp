// parse_and_round: literals are read exactly and rounded once (checked against the oracle), hex-floats and
// special names are accepted, and anything else is rejected with std::invalid_argument.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "numerics/mpfr_util.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::same_value;

TEST(Parse, DecimalIsExactThenRoundedOnce) {
  const char* literals[] = {"0.1",   "-0.1",   "1e-5", "65519.99999999999999999999", "65520", "3.0009765625000001",
                            "1e-8",  "2.98e-8", "1e40", "3.3895313892515355e38",      "1e-45", "0.000000059604644775390625"};
  for (const Format f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2, formats::fp32, formats::tf32}) {
    const RoundingPlan plan(f);
    for (const char* text : literals) {
      const auto want = roundoff::test::oracle_parse(f, text);
      for (const Rounding m : kDeterministicRoundings)
        EXPECT_TRUE(same_value(parse_and_round(plan, m, text), want.value(m)))
            << name_of(f) << " " << name_of(m) << " " << text << " got " << hex_float(parse_and_round(plan, m, text))
            << " want " << hex_float(want.value(m));
    }
  }
}

TEST(Parse, OneTenthIsNotTheNearestDouble) {
  // The double 0.1 is 0x1.999999999999ap-4, above one tenth: rounding one tenth down in binary64 gives the
  // double below it, which rounding the double 0.1 could never give.
  const RoundingPlan fp64(formats::fp64);
  EXPECT_EQ(parse_and_round(fp64, Rounding::NearestEven, "0.1"), 0.1);
  EXPECT_EQ(parse_and_round(fp64, Rounding::Up, "0.1"), 0.1);
  EXPECT_EQ(parse_and_round(fp64, Rounding::Down, "0.1"), std::nextafter(0.1, 0.0));
  EXPECT_EQ(parse_and_round(fp64, Rounding::TowardZero, "0.1"), std::nextafter(0.1, 0.0));
  const RoundingPlan fp16(formats::fp16);
  EXPECT_EQ(parse_and_round(fp16, Rounding::NearestEven, "0.1"), 0x1.998p-4);
  EXPECT_EQ(parse_and_round(fp16, Rounding::Up, "0.1"), 0x1.99cp-4);
}

TEST(Parse, HexFloatsAndSpecialNames) {
  const RoundingPlan bf16(formats::bf16);
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestEven, "0x1.02p+0"), 0x1.02p+0);
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestEven, "0x1.01p+0"), 1.0);       // tie, even
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestAway, "0x1.01p+0"), 0x1.02p+0);  // tie, away
  EXPECT_EQ(parse_and_round(bf16, Rounding::Up, "0x1.0000000000000000000000001p+0"), 0x1.02p+0);
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestEven, "-0x1p-133"), -0x1p-133);
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestEven, "inf"), INFINITY);
  EXPECT_EQ(parse_and_round(bf16, Rounding::NearestEven, "-inf"), -INFINITY);
  EXPECT_TRUE(std::isnan(parse_and_round(bf16, Rounding::NearestEven, "nan")));
  EXPECT_TRUE(same_value(parse_and_round(bf16, Rounding::NearestEven, "-0"), -0.0));
  EXPECT_TRUE(std::isnan(parse_and_round(RoundingPlan(formats::e4m3), Rounding::NearestEven, "inf")));
  EXPECT_EQ(hex_float(0x1.02p+0), "0x1.02p+0");
  EXPECT_EQ(hex_float(-INFINITY), "-inf");
}

/// Issue 43 item 6: a nonzero literal below MPFR's exponent range rounds like any tiny value of its sign (it
/// was refused, while one above the range rounded as an overflow).
TEST(Parse, LiteralsBeyondMpfrsExponentRangeRoundLikeTinyAndHugeValues) {
  const RoundingPlan fp16(formats::fp16);
  EXPECT_TRUE(same_value(parse_and_round(fp16, Rounding::NearestEven, "0x1p-4294967296"), 0.0));
  EXPECT_TRUE(same_value(parse_and_round(fp16, Rounding::NearestEven, "-0x1p-4294967296"), -0.0));
  EXPECT_EQ(parse_and_round(fp16, Rounding::Up, "0x1p-4294967296"), 0x1p-24);
  EXPECT_EQ(parse_and_round(fp16, Rounding::Down, "-0x1p-4294967296"), -0x1p-24);
  EXPECT_EQ(parse_and_round(fp16, Rounding::NearestEven, "0x1p18446744073709551616"), INFINITY);
  EXPECT_EQ(parse_and_round(fp16, Rounding::TowardZero, "0x1p18446744073709551616"), 65504.0);
}

TEST(Parse, GarbageIsRejected) {
  const RoundingPlan fp16(formats::fp16);
  for (const char* bad : {"", " ", "abc", "1.5x", "0x", "1e", "--1", "1,5", "0.1 ", " 0.1", "1..2", "nanx", "infinity1"}) {
    EXPECT_THROW(parse_and_round(fp16, Rounding::NearestEven, bad), std::invalid_argument) << "'" << bad << "'";
  }
}
