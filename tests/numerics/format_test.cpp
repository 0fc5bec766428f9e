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
  for (const Format f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2, formats::e3m2, formats::e2m3,
                         formats::e2m1}) {
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

TEST(Format, OcpSixAndFourBitElementFormats) {
  // OCP MX v1.0, section 5.3: E3M2 (bias 3), E2M3 (bias 1), E2M1 (bias 1); no inf/NaN; subnormals.
  EXPECT_EQ(max_finite(formats::e2m1), 6.0);
  EXPECT_EQ(max_finite(formats::e2m3), 7.5);
  EXPECT_EQ(max_finite(formats::e3m2), 28.0);
  EXPECT_EQ(min_positive(formats::e2m1), 0.5);
  EXPECT_EQ(min_positive(formats::e2m3), 0.125);
  EXPECT_EQ(min_positive(formats::e3m2), 0.0625);
  EXPECT_EQ(min_normal(formats::e3m2), 0.25);
  struct Layout { Format f; int total, exponent, fraction, bias; };
  for (const Layout l : {Layout{formats::e3m2, 6, 3, 2, 3}, Layout{formats::e2m3, 6, 2, 3, 1},
                         Layout{formats::e2m1, 4, 2, 1, 1}}) {
    const auto enc = encoding_of(l.f);
    ASSERT_TRUE(enc.has_value()) << name_of(l.f);
    EXPECT_EQ(enc->total_bits(), l.total) << name_of(l.f);
    EXPECT_EQ(enc->exponent_bits, l.exponent) << name_of(l.f);
    EXPECT_EQ(enc->fraction_bits, l.fraction) << name_of(l.f);
    EXPECT_EQ(enc->bias, l.bias) << name_of(l.f);
    // Written-out OCP decoding: S.E.M with E = 0 subnormal (M·2^(1-bias-m)), else (1 + M/2^m)·2^(E-bias); every
    // encoding is finite.
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << l.total); ++b) {
      const std::uint64_t m = b & ((std::uint64_t{1} << l.fraction) - 1);
      const std::uint64_t e = (b >> l.fraction) & ((std::uint64_t{1} << l.exponent) - 1);
      const bool neg = (b >> (l.total - 1)) & 1;
      const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - l.bias - l.fraction)
                                : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -l.fraction),
                                             static_cast<int>(e) - l.bias);
      const double want = neg ? -mag : mag;
      const double got = from_bits(l.f, b);
      EXPECT_EQ(got, want) << name_of(l.f) << " bits " << b;
      EXPECT_EQ(std::signbit(got), neg) << name_of(l.f) << " bits " << b;
    }
  }
  // FP4 E2M1's eight magnitudes, in encoding order.
  const double fp4[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (std::uint64_t b = 0; b < 8; ++b) {
    EXPECT_EQ(from_bits(formats::e2m1, b), fp4[b]);
    EXPECT_EQ(from_bits(formats::e2m1, b | 8), -fp4[b]);
  }
  // No NaN to encode; overflow saturates in every mode (round-to-nearest included).
  EXPECT_THROW(to_bits(formats::e2m1, std::nan("")), std::invalid_argument);
  for (const Rounding m : kDeterministicRoundings) {
    EXPECT_EQ(round_to(formats::e2m1, m, 1e6), 6.0);
    EXPECT_EQ(round_to(formats::e2m1, m, -1e6), -6.0);
    EXPECT_EQ(round_to(formats::e3m2, m, 1e300), 28.0);
  }
  EXPECT_EQ(parse_format("e2m1"), formats::e2m1);
  EXPECT_EQ(name_of(Format{4, 0, 2, true, Specials::None, false}), "e2m3");
  EXPECT_EQ(name_of(parse_format("p3:emin-2:emax4:nospecials")), "e3m2");
}

// fits_binary32 (typed storage): true exactly when every value of the format is a binary32 value. Every encoding of
// the small formats (and fp16, bf16) checked by narrowing to float and widening back; the edges of the predicate
// (p = 24 / 25, the smallest quantum 2^-149 / 2^-150, emax 127 / 128) against values that do or do not survive.
TEST(Format, FitsBinary32ExactlyWhenEveryValueIsABinary32Value) {
  for (const Format f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2, formats::e3m2, formats::e2m3,
                         formats::e2m1}) {
    EXPECT_TRUE(fits_binary32(f)) << name_of(f);
    const auto enc = encoding_of(f);
    ASSERT_TRUE(enc.has_value()) << name_of(f);
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << enc->total_bits()); ++b) {
      const double v = from_bits(f, b);
      if (std::isnan(v)) continue;
      EXPECT_EQ(static_cast<double>(static_cast<float>(v)), v) << name_of(f) << " bits " << b;
    }
  }
  EXPECT_TRUE(fits_binary32(formats::fp32));
  EXPECT_TRUE(fits_binary32(formats::tf32));
  EXPECT_FALSE(fits_binary32(formats::fp64));
  // p = 25: 1 + 2^-24 is a value of the format and not of binary32.
  const Format p25{25, -126, 127};
  EXPECT_FALSE(fits_binary32(p25));
  EXPECT_NE(static_cast<double>(static_cast<float>(1 + 0x1p-24)), 1 + 0x1p-24);
  // Smallest quantum 2^(emin - p + 1): -149 fits (binary32's smallest subnormal), -150 does not.
  const Format q149{11, -139, 15}, q150{11, -140, 15};
  EXPECT_TRUE(fits_binary32(q149));
  EXPECT_FALSE(fits_binary32(q150));
  EXPECT_EQ(static_cast<double>(static_cast<float>(min_positive(q149))), min_positive(q149));
  EXPECT_NE(static_cast<double>(static_cast<float>(min_positive(q150))), min_positive(q150));
  // Without subnormals the quantum of the lowest binade still counts: (1 + 2^-10)·2^emin.
  const Format nosub{11, -140, 15, false};
  EXPECT_FALSE(fits_binary32(nosub));
  EXPECT_NE(static_cast<double>(static_cast<float>((1 + 0x1p-10) * 0x1p-140)), (1 + 0x1p-10) * 0x1p-140);
  // emax 128: 2^128 is finite there and overflows binary32.
  const Format e128{8, -126, 128};
  EXPECT_FALSE(fits_binary32(e128));
  EXPECT_TRUE(std::isinf(static_cast<float>(0x1p128)));
}
