// The shadow's error statistics on hand-made outputs whose errors are known: signed_rel is the error's component
// along the exact output (Σ(y−r)·r / Σr²), so a uniform shrink by a factor s gives s − 1, an error orthogonal to
// the reference gives 0 while norm_rel does not, and |signed_rel| ≤ norm_rel always (Cauchy–Schwarz).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/probe.hpp"

namespace roundoff::ops {
namespace {

std::vector<Ref> refs(const std::vector<double>& r) { return {r.begin(), r.end()}; }

TEST(ProbeStats, SignedRelOfAUniformShrinkIsTheShrink) {
  const std::vector<double> r = {1.0, -2.0, 4.0, 0.5, -8.0};
  std::vector<double> y;
  for (double v : r) y.push_back(0.75 * v);  // exact in binary64
  const ErrorStats s = compare(y, refs(r), numerics::formats::fp32);
  EXPECT_EQ(s.signed_rel, -0.25);
  EXPECT_EQ(s.norm_rel, 0.25);
  const ErrorStats g = compare(std::vector<double>(r.begin(), r.end()), y, numerics::formats::fp32);  // r against y
  EXPECT_NEAR(g.signed_rel, 1.0 / 3.0, 1e-15);  // inflated by 4/3 relative to y
}

TEST(ProbeStats, AnErrorOrthogonalToTheReferenceHasNoSignedPart) {
  const std::vector<double> r = {1.0, 1.0, -1.0, -1.0};
  const std::vector<double> y = {1.5, 0.5, -0.5, -1.5};  // y − r = (½, −½, ½, −½) ⟂ r
  const ErrorStats s = compare(y, refs(r), numerics::formats::fp32);
  EXPECT_EQ(s.signed_rel, 0.0);
  EXPECT_EQ(s.norm_rel, 0.5);
}

TEST(ProbeStats, FlushedSmallValuesShrinkAndTheSignedPartIsBoundedByTheNorm) {
  std::vector<double> r, y;
  for (int i = 0; i < 64; ++i) {
    const double v = std::ldexp(1.0 + i / 64.0, (i % 7) - 3) * (i % 2 ? -1 : 1);
    r.push_back(v);
    y.push_back(std::fabs(v) < 0.25 ? 0.0 : v);  // values below 1/4 flushed to zero
  }
  const ErrorStats s = compare(y, refs(r), numerics::formats::fp32);
  EXPECT_LT(s.signed_rel, 0.0);
  EXPECT_GT(s.norm_rel, 0.0);
  EXPECT_LE(std::fabs(s.signed_rel), s.norm_rel);
  EXPECT_GT(s.underflow, 0);
  // flushing is pure shrinkage: (y − r)·r = −Σ_flushed r², so signed_rel = −(norm_rel)²
  EXPECT_NEAR(s.signed_rel, -s.norm_rel * s.norm_rel, 1e-15);
}

TEST(ProbeStats, AZeroReferenceGivesZeroSignedRel) {
  const std::vector<double> r = {0.0, 0.0}, y = {0.0, 1.0};
  const ErrorStats s = compare(y, refs(r), numerics::formats::fp32);
  EXPECT_EQ(s.signed_rel, 0.0);
  EXPECT_TRUE(std::isinf(s.norm_rel));
}

}  // namespace
}  // namespace roundoff::ops
