// The one CSV writer: RFC 4180 quoting and one number format (issue 11: four hand-rolled writers had
// different precisions and replaced commas in text by ';').
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "numerics/csv.hpp"
#include "studies/train/run_log.hpp"

namespace roundoff::numerics {
namespace {

TEST(Csv, QuotesOnlyFieldsThatNeedIt) {
  EXPECT_EQ(csv_field("fp16"), "fp16");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("cr\r"), "\"cr\r\"");
  EXPECT_EQ(csv_field(""), "");
}

TEST(Csv, NumbersAreShortestRoundTrip) {
  EXPECT_EQ(shortest_decimal(0.001), "0.001");
  EXPECT_EQ(shortest_decimal(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(shortest_decimal(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(shortest_decimal(-0.0), "-0");
  EXPECT_EQ(shortest_decimal(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(shortest_decimal(-INFINITY), "-inf");
  for (const double x : {0x1p-1074, 65504.0, 1e300, 3.0517578125e-05, 0.95})
    EXPECT_EQ(std::strtod(shortest_decimal(x).c_str(), nullptr), x) << x;
}

TEST(Csv, RowJoinsTypedFields) {
  EXPECT_EQ((CsvRow() << "matmul" << std::int64_t{-1} << 0.25 << "in=64,out=64" << std::size_t{7}).str(),
            "matmul,-1,0.25,\"in=64,out=64\",7");
}

TEST(Csv, RunLogKeepsACommaInsideOneField) {
  studies::train::RunLog log;
  log.event(3, "skip", "non-finite gradients at loss scale 256 (first in matmul.bwd-data(dh1)[layer 0], then more)");
  const std::string csv = log.events_csv();
  EXPECT_EQ(csv, "step,kind,detail\n3,skip,\"non-finite gradients at loss scale 256 (first in "
                 "matmul.bwd-data(dh1)[layer 0], then more)\"\n");
}

}  // namespace
}  // namespace roundoff::numerics
