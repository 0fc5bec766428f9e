// Ctx<Emulated>'s native fast path (compute format exactly IEEE binary32 or binary64, nearest-even) must return
// the same bits as the numerics:: correctly rounded operations it stands in for, on every class of operand:
// normals, subnormals, zeros of both signs, infinities, NaN, operands outside binary32 (which must fall back),
// and results that overflow or underflow.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "numerics/arith.hpp"
#include "numerics/rounding.hpp"
#include "ops/backend.hpp"

namespace roundoff::ops {
namespace {

using numerics::Rounding;

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

/// Operands: random binary32 encodings (all classes), plus binary64 values that are not binary32 values.
std::vector<double> operands32(std::size_t n) {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0x1p-149, -0x1p-149, 0x1p-126, 0x1.fffffep127, -0x1.fffffep127,
                           std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), 1.0 + 0x1p-30, 0x1p-140 * 3.0, 1e300, 1e-300};
  std::uint64_t s = 0x243F6A8885A308D3ull;
  while (v.size() < n) {
    s = numerics::mix64(s + 1);
    const auto bits = static_cast<std::uint32_t>(s);
    // Bias exponents toward the ends (subnormal, overflow) a quarter of the time each.
    std::uint32_t b = bits;
    if ((s >> 40) % 4 == 0) b = (b & 0x807FFFFFu) | (static_cast<std::uint32_t>((s >> 50) % 8) << 23);
    if ((s >> 40) % 4 == 1) b = (b & 0x807FFFFFu) | ((0xF7u + static_cast<std::uint32_t>((s >> 50) % 8)) << 23);
    v.push_back(static_cast<double>(std::bit_cast<float>(b)));
  }
  return v;
}

std::vector<double> operands64(std::size_t n) {
  std::vector<double> v = {0.0, -0.0, 0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp1023, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), 1.0};
  std::uint64_t s = 0x13198A2E03707344ull;
  while (v.size() < n) {
    s = numerics::mix64(s + 1);
    std::uint64_t b = s;
    if ((s >> 7) % 4 == 0) b = (b & 0x800FFFFFFFFFFFFFull) | (((s >> 13) % 16) << 52);
    if ((s >> 7) % 4 == 1) b = (b & 0x800FFFFFFFFFFFFFull) | ((0x7EFull + (s >> 13) % 16) << 52);
    v.push_back(std::bit_cast<double>(b));
  }
  return v;
}

/// v flushed in f (ftz all), decided by an exponent check.
double flush_in(double v, const numerics::Format& f) {
  return v != 0 && std::isfinite(v) && std::ilogb(v) < f.emin ? std::copysign(0.0, v) : v;
}

/// Under ftz all (flush) the expected values are numerics::'s results flushed in f; returns how many results
/// the flush changed.
std::int64_t check_all(const numerics::Format& f, const std::vector<double>& x, bool flush = false) {
  OpPrecision p;
  p.storage = f;
  p.compute = f;
  p.rounding = Rounding::NearestEven;
  if (flush) p.ftz = Ftz::All;
  const Ctx<Emulated> ctx(p);
  const numerics::RoundingPlan plan(f);
  std::int64_t flushed = 0;
  const auto want = [&](double r) {
    if (!flush) return r;
    const double v = flush_in(r, f);
    flushed += !same(v, r);
    return v;
  };
  // Pairs whose exact result differs from the result on operands first rounded to binary32: a binary64 value
  // that is a binary32 midpoint plus a tiny term (the sum rounds up; rounding a first would tie to even).
  std::vector<std::pair<double, double>> pairs = {{1.0 + 0x1p-24, 0x1p-40}, {0x1p-40, 1.0 + 0x1p-24},
                                                  {(1.0 + 0x1p-24) * 3.0, 1.0 + 0x1p-50}, {1.0 + 0x1p-24, 1.0 + 0x1p-52}};
  for (std::size_t i = 0; i + 1 < x.size(); ++i) pairs.emplace_back(x[i], x[(i * 7919 + 13) % x.size()]);
  std::int64_t checked = 0;
  for (const auto& [a, b] : pairs) {
    EXPECT_TRUE(same(ctx.add(a, b, {}), want(numerics::add(plan, Rounding::NearestEven, a, b, 0)))) << a << " + " << b;
    EXPECT_TRUE(same(ctx.sub(a, b, {}), want(numerics::sub(plan, Rounding::NearestEven, a, b, 0)))) << a << " - " << b;
    EXPECT_TRUE(same(ctx.mul(a, b, {}), want(numerics::mul(plan, Rounding::NearestEven, a, b, 0)))) << a << " * " << b;
    EXPECT_TRUE(same(ctx.div(a, b, {}), want(numerics::div(plan, Rounding::NearestEven, a, b, 0)))) << a << " / " << b;
    EXPECT_TRUE(same(ctx.sqrt(a, {}), want(numerics::sqrt(plan, Rounding::NearestEven, a, 0)))) << "sqrt " << a;
    if (::testing::Test::HasFailure()) return flushed;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<std::int64_t>(pairs.size()));
  return flushed;
}

TEST(NativePath, Binary32NearestEvenEqualsNumerics) { check_all(numerics::formats::fp32, operands32(1'000'000)); }
TEST(NativePath, Binary64NearestEvenEqualsNumerics) { check_all(numerics::formats::fp64, operands64(1'000'000)); }
// ftz all: the native path's result flushed in compute, as numerics::'s (the flush fires on subnormal results).
TEST(NativePath, Binary32FtzAllEqualsNumericsThenFlush) {
  EXPECT_GT(check_all(numerics::formats::fp32, operands32(200'000), true), 1000);
}
TEST(NativePath, Binary64FtzAllEqualsNumericsThenFlush) {
  EXPECT_GT(check_all(numerics::formats::fp64, operands64(200'000), true), 1000);
}

}  // namespace
}  // namespace roundoff::ops
