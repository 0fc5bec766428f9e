// Format presets, derived constants, encodings and parsing.
#include <gtest/gtest.h>

#include <cmath>

#include "numerics/format.hpp"
#include "numerics/round.hpp"

using namespace roundoff::numerics;

TEST(Format, DerivedConstantsOfPresets) {
  EXPECT_EQ(max_finite(formats::fp16), 65504.0);
  EXPECT_EQ(max_finite(formats::e4m3), 448.0);
  EXPECT_EQ(max_finite(formats::e5m2), 57344.0);
  EXPECT_EQ(max_finite(formats::bf16), 0x1.fep127);
  EXPECT_EQ(max_finite(formats::fp32), 0x1.fffffep127);
  EXPECT_EQ(min_positive(formats::fp16), 0x1p-24);
  EXPECT_EQ(min_positive(formats::bf16), 0x1p-133);
  EXPECT_EQ(unit_roundoff(formats::fp16), 0x1p-11);
  EXPECT_EQ(ulp(formats::fp16, 1.0), 0x1p-10);
  EXPECT_EQ(ulp(formats::fp16, 0x1p-20), 0x1p-24);
}

TEST(Format, EveryEncodingRoundTripsForSmallFormats) {
  for (const Format f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2}) {
    const auto enc = encoding_of(f);
    ASSERT_TRUE(enc.has_value()) << name_of(f);
    const RoundingPlan plan(f);
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << enc->total_bits()); ++b) {
      const double v = from_bits(f, b);
      if (std::isnan(v)) continue;
      EXPECT_EQ(to_bits(f, v), b) << name_of(f) << " bits " << b;
      EXPECT_EQ(round_to(plan, Rounding::NearestEven, v), v) << name_of(f) << " bits " << b;
    }
  }
}

TEST(Format, ParsesPresetsAndCustomAndRejectsBadSpecs) {
  for (const auto& n : preset_format_names()) EXPECT_EQ(name_of(parse_format(n)), n);
  const Format c = parse_format("p5:emin-6:emax7:nosub:sat");
  EXPECT_EQ(c.precision, 5);
  EXPECT_FALSE(c.subnormals);
  EXPECT_TRUE(c.saturate);
  EXPECT_EQ(parse_format(name_of(c)), c);
  EXPECT_THROW(parse_format("fp17"), std::invalid_argument);
  EXPECT_THROW(parse_format("p1:emin-6:emax7"), std::invalid_argument);
  EXPECT_THROW(parse_format("p60:emin-6:emax7"), std::invalid_argument);
  EXPECT_THROW(parse_format("p8:emin5:emax3"), std::invalid_argument);
  EXPECT_THROW(parse_format("p8:emin-6"), std::invalid_argument);
}

TEST(Format, PlanConstantsEqualTheDerivedConstants) {
  for (const auto& n : preset_format_names()) {
    const Format f = parse_format(n);
    const RoundingPlan plan(f);
    EXPECT_EQ(plan.max_finite, max_finite(f)) << n;
    EXPECT_EQ(plan.min_normal, min_normal(f)) << n;
  }
  const Format nanonly = parse_format("p5:emin-6:emax7:nanonly");
  EXPECT_EQ(RoundingPlan(nanonly).max_finite, max_finite(nanonly));
}
