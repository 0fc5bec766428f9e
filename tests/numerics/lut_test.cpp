// The ANE lookup-table model (numerics/lut.hpp): the default tables reproduce the ane-guide's published
// figures (every finite fp16 input scanned against the correctly rounded binary64 function), the table's
// edges and asymptotes, and bad specs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "numerics/arith.hpp"
#include "numerics/lut.hpp"
#include "numerics/round.hpp"
#include "tests/support/exhaustive.hpp"

namespace roundoff::numerics {
namespace {

/// f(x) correctly rounded in binary64 (relative error below 2^-53: far below the 2–4 digits compared).
double exact(LutFunction f, double x) {
  static const RoundingPlan d(formats::fp64);
  switch (f) {
    case LutFunction::Sigmoid: return sigmoid(d, Rounding::NearestEven, x);
    case LutFunction::Tanh: return numerics::tanh(d, Rounding::NearestEven, x);
    case LutFunction::Swish: return x * sigmoid(d, Rounding::NearestEven, x);
    case LutFunction::Exp: return numerics::exp(d, Rounding::NearestEven, x);
  }
  return 0;
}

/// The largest |table(x) − f(x)| over every finite fp16 x.
double worst_error(const Lut& t) {
  double worst = 0;
  for (const double x : test::encoded_values(formats::fp16)) {
    if (!std::isfinite(x)) continue;
    worst = std::max(worst, std::fabs(t(x) - exact(t.function(), x)));
  }
  return worst;
}

TEST(AneLut, DefaultTablesReproduceTheGuidesPublishedFigures) {
  // ane-guide part 1 ch. 3: worst absolute errors sigmoid 0.0034, tanh 0.0017; swish returns −0.001259 at 0.
  const Lut sig(LutFunction::Sigmoid, default_lut(LutFunction::Sigmoid));
  const Lut tnh(LutFunction::Tanh, default_lut(LutFunction::Tanh));
  const Lut swish(LutFunction::Swish, default_lut(LutFunction::Swish));
  EXPECT_EQ(sig.spec().knots, 33);
  EXPECT_EQ(swish.spec().knots, 33);
  const double es = worst_error(sig), et = worst_error(tnh);
  EXPECT_GE(es, 0.00335);
  EXPECT_LT(es, 0.00345);
  EXPECT_GE(et, 0.00165);
  EXPECT_LT(et, 0.00175);
  EXPECT_LT(std::fabs(swish(0.0) - (-0.001259)), 0.0000005) << swish(0.0);
  // More knots on the same range: a smaller worst error (the figure is the table's, not fp16's).
  EXPECT_LT(worst_error(Lut(LutFunction::Sigmoid, LutSpec{129, -11.46, 11.46})), 0.001);
}

TEST(AneLut, EdgesAsymptotesAndFp16Values) {
  const Lut sig(LutFunction::Sigmoid, LutSpec{33, -8, 8});
  const Lut tnh(LutFunction::Tanh, LutSpec{33, -4, 4});
  const Lut swish(LutFunction::Swish, LutSpec{33, -8, 8});
  const Lut ex(LutFunction::Exp, LutSpec{33, -16, 0});
  EXPECT_EQ(sig(-9.0), 0.0);
  EXPECT_EQ(sig(9.0), 1.0);
  EXPECT_EQ(tnh(-5.0), -1.0);
  EXPECT_EQ(tnh(5.0), 1.0);
  EXPECT_EQ(swish(-9.0), 0.0);
  EXPECT_EQ(swish(100.0), 100.0);
  EXPECT_EQ(ex(-20.0), 0.0);
  EXPECT_EQ(ex(1.0), round_to(formats::fp16, Rounding::NearestEven, std::exp(1.0)));  // above the table: exact
  EXPECT_EQ(ex(12.0), std::numeric_limits<double>::infinity());                        // exp overflows fp16 > 11.09
  EXPECT_TRUE(std::isnan(sig(std::nan(""))));
  // Every value is an fp16 value; inputs are read as fp16 (0.1 and its fp16 rounding give the same value).
  const RoundingPlan h(formats::fp16);
  for (double x = -7.9; x < 7.9; x += 0.37) EXPECT_EQ(sig(x), round_to(h, Rounding::NearestEven, sig(x))) << x;
  EXPECT_EQ(sig(0.1), sig(round_to(h, Rounding::NearestEven, 0.1)));
  // Within the domain the table is close to f (worst error of this coarser table below 0.004).
  EXPECT_LT(worst_error(sig), 0.004);
}

TEST(AneLut, BadSpecsAreRefused) {
  EXPECT_THROW(Lut(LutFunction::Exp, LutSpec{1, -1, 0}), std::invalid_argument);
  EXPECT_THROW(Lut(LutFunction::Exp, LutSpec{33, 0, 0}), std::invalid_argument);
  EXPECT_THROW(Lut(LutFunction::Exp, LutSpec{33, -std::numeric_limits<double>::infinity(), 0}), std::invalid_argument);
  EXPECT_NE(validate(LutSpec{5000, -1, 1})->find("2..4097"), std::string::npos);
  EXPECT_FALSE(validate(default_lut(LutFunction::Exp)).has_value());
}

}  // namespace
}  // namespace roundoff::numerics
