// The ANE policy fields at the op level: approx (lookup-table exp/sigmoid in the Emulated backend, the exact
// function in the Reference backend, so the shadow measures the table's error), saturate (reduction results
// at or beyond the limit become ±inf) and nan (NaN read or written becomes +inf).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "numerics/lut.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/residual.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;
constexpr double kInf = std::numeric_limits<double>::infinity();

OpPrecision with_lut(OpPrecision p) {
  p.approx = Approx{ApproxKind::AneLut, 0, 0, 0};
  return p;
}

TEST(AneFields, SiluUsesTheTableAndTheShadowSeesItsError) {
  const OpPrecision exact = uniform(fmts::fp16), lut = with_lut(exact);
  const RowShape s{8, 64};
  const auto x = randn(s.size(), 3.0, fmts::fp16, 21);
  std::vector<double> ye(x.size()), yl(x.size());
  silu_forward<Emulated>(ye, cs(x), s, Ctx<Emulated>(exact));
  silu_forward<Emulated>(yl, cs(x), s, Ctx<Emulated>(lut));
  std::vector<Ref> re(x.size()), rl(x.size());
  silu_forward<Reference>(re, lift(x), s, Ctx<Reference>(exact));
  silu_forward<Reference>(rl, lift(x), s, Ctx<Reference>(lut));
  const numerics::Lut& table =
      numerics::lut_for(numerics::LutFunction::Sigmoid, numerics::default_lut(numerics::LutFunction::Sigmoid));
  const double u = numerics::unit_roundoff(fmts::fp16);
  double worst_exact = 0, worst_lut = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    // Emulated: y = fp16(x · table(x)); the Reference ignores approx (the exact x·σ(x)).
    EXPECT_EQ(yl[i], numerics::round_to(fmts::fp16, numerics::Rounding::NearestEven, x[i] * table(x[i]))) << x[i];
    EXPECT_EQ(rl[i], re[i]);
    const double ex = static_cast<double>(re[i]);
    const double bound = std::fabs(ex) * ((1 + u) * (1 + u) - 1) + 0x1p-25;
    worst_exact = std::max(worst_exact, std::fabs(ye[i] - ex) / bound);
    worst_lut = std::max(worst_lut, std::fabs(yl[i] - ex) / bound);
  }
  EXPECT_LE(worst_exact, 1.0);  // correctly rounded sigmoid: within the rounding bound
  EXPECT_GT(worst_lut, 2.0);    // the table's error shows against the same exact reference
}

TEST(AneFields, SoftmaxExpUsesTheTable) {
  OpPrecision p = with_lut(uniform(fmts::fp16));
  const AttnShape s{1, 1, 8, 4};
  const auto pre = randn(static_cast<std::size_t>(s.att_size()), 2.0, fmts::fp16, 5);
  std::vector<double> a_exact(pre.size()), a_lut(pre.size());
  softmax_forward<Emulated>(a_exact, cs(pre), s, Ctx<Emulated>(uniform(fmts::fp16)));
  softmax_forward<Emulated>(a_lut, cs(pre), s, Ctx<Emulated>(p));
  EXPECT_NE(a_exact, a_lut);
  // Row 0 has one entry: exp(0) from the table over [−16, 0] is its last knot's segment value, and att = e/e = 1.
  EXPECT_EQ(a_lut[0], 1.0);
}

TEST(AneFields, SaturationTurnsReductionResultsAtTheLimitIntoInfinity) {
  OpPrecision p = uniform(fmts::fp16);
  p.saturate = 32768;
  const MatmulShape s{1, 2, 4};
  const std::vector<double> x{1.0, 1.0};
  // W rows (out, in): 32752 + 0 passes; 16384 + 16384 = 32768 is inf; −20000 − 20000 is −inf; 100 + 1 stays.
  const std::vector<double> w{32752, 0, 16384, 16384, -20000, -20000, 100, 1};
  std::vector<double> y(4);
  matmul_forward<Emulated>(y, cs(x), cs(w), s, Ctx<Emulated>(p));
  EXPECT_EQ(y, (std::vector<double>{32752, kInf, -kInf, 101}));
  p.saturate = 0;
  matmul_forward<Emulated>(y, cs(x), cs(w), s, Ctx<Emulated>(p));
  EXPECT_EQ(y, (std::vector<double>{32752, 32768, -40000, 101}));
  // The Reference backend ignores saturation (the exact value).
  p.saturate = 32768;
  std::vector<Ref> yr(4);
  matmul_forward<Reference>(yr, lift(x), lift(w), s, Ctx<Reference>(p));
  EXPECT_EQ(static_cast<double>(yr[1]), 32768.0);
}

TEST(AneFields, AneNanRuleTurnsNanIntoPlusInfinity) {
  OpPrecision p = uniform(fmts::fp16);
  const RowShape s{1, 3};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x{nan, 1.0, kInf}, f{1.0, nan, -kInf};
  std::vector<double> out(3);
  residual_forward<Emulated>(out, cs(x), cs(f), 1.0, s, Ctx<Emulated>(p));
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2]));
  p.nan = NanRule::AneInf;
  residual_forward<Emulated>(out, cs(x), cs(f), 1.0, s, Ctx<Emulated>(p));
  // NaN inputs read as +inf; inf + (−inf) = NaN is written as +inf: the op never emits NaN.
  EXPECT_EQ(out, (std::vector<double>{kInf, kInf, kInf}));
  // The array input path (matmul reads through in_array) applies the rule too.
  std::vector<double> y(1);
  matmul_forward<Emulated>(y, cs(std::vector<double>{nan}), cs(std::vector<double>{2.0}), MatmulShape{1, 1, 1},
                           Ctx<Emulated>(p));
  EXPECT_EQ(y[0], kInf);
}

}  // namespace
}  // namespace roundoff::ops
