// sqrt and the elementary functions (exp, log, sigmoid, tanh, rsqrt, sin, cos, erf) of every 16- and 8-bit encoding,
// result in the same format, in every deterministic mode, against the MPFR oracle. This is the proof of the
// contract stated in numerics/arith.hpp: correctly rounded in every mode, the libm fast path being accepted
// only when it provably rounds like the exact value.
// The oracle evaluates all six modes from one bracket, so every mode costs little more than one: the whole file
// is in the default suite (about 15 s of CPU).
#include <gtest/gtest.h>

#include <vector>

#include "numerics/arith.hpp"
#include "tests/support/exhaustive.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::Mismatches;

namespace {

struct Named {
  const char* name;
  Format format;
};

/// A unary path: sqrt or one elementary function.
struct Unary {
  const char* name;
  bool is_sqrt;
  Elementary fn;
};

std::vector<Unary> all_unary() {
  std::vector<Unary> u{{"sqrt", true, Elementary::Exp}};
  for (const Elementary fn : kAllElementary) u.push_back({name_of(fn), false, fn});
  return u;
}

void check_unary(const Format& f, const std::vector<Rounding>& modes) {
  const RoundingPlan plan(f);
  const auto inputs = roundoff::test::encoded_values(f);
  std::vector<double> xs = inputs;
  xs.push_back(std::numeric_limits<double>::quiet_NaN());
  for (const Unary& u : all_unary()) {
    Mismatches bad;
    roundoff::test::parallel_for(static_cast<std::int64_t>(xs.size()), [&](std::int64_t i) {
      const double x = xs[static_cast<std::size_t>(i)];
      const auto want = u.is_sqrt ? roundoff::test::oracle_op(f, roundoff::test::Op::Sqrt, x)
                                  : roundoff::test::oracle_elementary(f, u.fn, x);
      for (const Rounding m : modes) {
        const double got = u.is_sqrt ? sqrt(plan, m, x) : elementary(plan, m, u.fn, x);
        if (!roundoff::test::same_value(got, want.value(m)))
          bad.add(std::string(u.name) + " " + std::string(name_of(m)) + " x=" + hex_float(x) + " got " +
                  hex_float(got) + " want " + hex_float(want.value(m)));
      }
    });
    EXPECT_EQ(bad.count(), 0u) << name_of(f) << " " << u.name << ": " << bad.report();
  }
}

const std::vector<Rounding> kAllModes(kDeterministicRoundings.begin(), kDeterministicRoundings.end());

}  // namespace

TEST(Elementary, EveryFp16InputEveryMode) { check_unary(formats::fp16, kAllModes); }
TEST(Elementary, EveryBf16InputEveryMode) { check_unary(formats::bf16, kAllModes); }

TEST(Elementary, EveryEightBitInputEveryMode) {
  for (const Format f : {formats::e4m3, formats::e5m2}) check_unary(f, kAllModes);
}

TEST(Elementary, CustomVariantsEveryInputEveryMode) {
  const Format variants[] = {
      Format{11, -14, 15, false, Specials::Ieee, false},  // fp16 without subnormals
      Format{11, -14, 15, true, Specials::Ieee, true},    // fp16 saturating
      Format{4, -6, 8, true, Specials::NanOnly, true},    // e4m3 saturating
      Format{3, -14, 15, false, Specials::Ieee, false},   // e5m2 without subnormals
      Format{3, -14, 15, true, Specials::Ieee, true},     // e5m2 saturating
      Format{4, -6, 8, false, Specials::None, false},     // no specials, no subnormals
  };
  for (const Format f : variants) check_unary(f, kAllModes);
}

TEST(Elementary, SigmoidOfHugeNegativeInputUnderflows) {
  // Regression: the MPFR fallback looped forever (e^-x overflowed MPFR's exponent range) for x < -1000 or so.
  const RoundingPlan bf16(formats::bf16);
  EXPECT_TRUE(roundoff::test::same_value(sigmoid(bf16, Rounding::NearestEven, -0x1.fep127), 0.0));
  EXPECT_EQ(sigmoid(bf16, Rounding::Up, -0x1.fep127), 0x1p-133);
  EXPECT_EQ(elementary_mpfr(bf16, Rounding::Up, Elementary::Sigmoid, -2000.0), 0x1p-133);
  EXPECT_EQ(elementary_mpfr(bf16, Rounding::Down, Elementary::Sigmoid, -2000.0), 0.0);
}
