// One quantile definition across the project (issue 11): the nearest-rank quantile, used by the per-op
// error statistics (ops/probe.cpp) and the accumulation study alike.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/quantile.hpp"
#include "ops/probe.hpp"

namespace roundoff::numerics {
namespace {

TEST(Quantile, NearestRank) {
  const std::vector<double> four{4, 1, 3, 2};
  EXPECT_EQ(quantile(four, 0.5), 2.0);
  EXPECT_EQ(quantile(four, 0.25), 1.0);
  EXPECT_EQ(quantile(four, 0.26), 2.0);
  EXPECT_EQ(quantile(four, 1.0), 4.0);
  std::vector<double> twenty;
  for (int i = 1; i <= 20; ++i) twenty.push_back(i);
  EXPECT_EQ(quantile(twenty, 0.95), 19.0);
  EXPECT_EQ(quantile({7.0}, 0.5), 7.0);
  EXPECT_TRUE(std::isnan(quantile({}, 0.5)));
}

TEST(Quantile, ProbeStatisticsUseTheSameDefinition) {
  // Errors of exactly 1, 2, 3, 4 ulps of fp32 at reference value 1 (ulp 2^-23); 20 values for the p95.
  std::vector<double> y, r;
  for (int k = 1; k <= 4; ++k) y.push_back(1 + k * 0x1p-23), r.push_back(1);
  const ops::ErrorStats s = ops::compare(y, r, formats::fp32);
  EXPECT_EQ(s.median_ulp, 2.0);  // v[⌈0.5·4⌉] = v[2]; the probe once took v[4/2 + 1] = 3
  EXPECT_EQ(s.p95_ulp, 4.0);
  y.clear(), r.clear();
  for (int k = 1; k <= 20; ++k) y.push_back(1 + k * 0x1p-23), r.push_back(1);
  const ops::ErrorStats t = ops::compare(y, r, formats::fp32);
  EXPECT_EQ(t.median_ulp, 10.0);
  EXPECT_EQ(t.p95_ulp, 19.0);
}

}  // namespace
}  // namespace roundoff::numerics
