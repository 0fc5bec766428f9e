// round_to against the MPFR oracle: every value, midpoint and near-midpoint of every 16-, 8-, 6- and 4-bit format
// (and custom no-subnormal, saturating and no-specials variants) in every deterministic mode; every fp16 and
// bf16 value converted to the narrower and the wider formats.
#include <gtest/gtest.h>

#include "numerics/round.hpp"
#include "tests/support/exhaustive.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::Mismatches;

namespace {

struct Named {
  const char* name;
  Format format;
};

void PrintTo(const Named& n, std::ostream* os) { *os << n.name; }

/// Presets and custom variants whose rules differ: no subnormals, saturation, no specials.
const Named kTargets[] = {
    {"fp16", formats::fp16},
    {"bf16", formats::bf16},
    {"e4m3", formats::e4m3},
    {"e5m2", formats::e5m2},
    {"fp16_nosub", Format{11, -14, 15, false}},
    {"bf16_nosub", Format{8, -126, 127, false}},
    {"fp16_sat", Format{11, -14, 15, true, Specials::Ieee, true}},
    {"e4m3_sat", Format{4, -6, 8, true, Specials::NanOnly, true}},
    {"e5m2_nosub_sat", Format{3, -14, 15, false, Specials::Ieee, true}},
    {"e4m3_nosub", Format{4, -6, 8, false, Specials::NanOnly, false}},
    {"p4_nospecials", Format{4, -6, 8, true, Specials::None, false}},
    {"e3m2", formats::e3m2},
    {"e2m3", formats::e2m3},
    {"e2m1", formats::e2m1},
    {"e2m1_nosub", Format{2, 0, 2, false, Specials::None, false}},
};

/// Checks round_to(target, mode, x) == oracle for every x and every deterministic mode.
void check_conversions(const Format& target, const std::vector<double>& inputs) {
  const RoundingPlan plan(target);
  Mismatches bad;
  roundoff::test::parallel_for(static_cast<std::int64_t>(inputs.size()), [&](std::int64_t i) {
    const double x = inputs[static_cast<std::size_t>(i)];
    const auto want = roundoff::test::oracle_op(target, roundoff::test::Op::Convert, x);
    for (const Rounding m : kDeterministicRoundings) {
      const double got = round_to(plan, m, x);
      if (!roundoff::test::same_value(got, want.value(m)))
        bad.add(std::string(name_of(m)) + " x=" + hex_float(x) + " got " + hex_float(got) + " want " +
                hex_float(want.value(m)));
    }
  });
  EXPECT_EQ(bad.count(), 0u) << name_of(target) << ": " << bad.report();
}

}  // namespace

class RoundToFormat : public ::testing::TestWithParam<Named> {};

TEST_P(RoundToFormat, EveryValueMidpointAndNeighbourInEveryModeMatchesMpfr) {
  const Format f = GetParam().format;
  const auto inputs = roundoff::test::conversion_inputs(f);
  // Every encoded value with its neighbours and midpoints: 6 inputs per value (fp4 has only 15 values).
  ASSERT_GT(inputs.size(), 6u * std::min<std::size_t>(250, roundoff::test::encoded_values(f).size()));
  check_conversions(f, inputs);
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundToFormat, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Named>& p) { return std::string(p.param.name); });

TEST(RoundTo, EverySixteenBitValueToNarrowerAndWiderFormatsMatchesMpfr) {
  const Named sources[] = {{"fp16", formats::fp16}, {"bf16", formats::bf16}};
  for (const auto& src : sources) {
    const auto values = roundoff::test::encoded_values(src.format);
    for (const auto& dst : kTargets) {
      SCOPED_TRACE(std::string(src.name) + " -> " + dst.name);
      check_conversions(dst.format, values);
    }
    // Wider formats hold every value exactly, in every mode.
    for (const Format wide : {formats::fp32, formats::fp64, formats::tf32}) {
      const RoundingPlan plan(wide);
      for (double x : values)
        for (const Rounding m : kDeterministicRoundings)
          ASSERT_TRUE(roundoff::test::same_value(round_to(plan, m, x), x)) << src.name << " " << hex_float(x);
    }
  }
}

TEST(RoundTo, Fp32ValuesToFp16AroundEveryFp16MidpointMatchMpfr) {
  // fp32 inputs beside each fp16 midpoint: the doubles one fp32 ulp away, which binary32-range inputs hit.
  std::vector<double> in;
  const auto mids = roundoff::test::conversion_inputs(formats::fp16);
  for (double x : mids) {
    const float xf = static_cast<float>(x);
    if (static_cast<double>(xf) != x) continue;
    in.push_back(static_cast<double>(std::nextafter(xf, -1e30f)));
    in.push_back(static_cast<double>(std::nextafter(xf, 1e30f)));
  }
  ASSERT_GT(in.size(), 100000u);
  check_conversions(formats::fp16, in);
}
