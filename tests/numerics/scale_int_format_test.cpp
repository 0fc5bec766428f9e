// Scale formats (E8M0, UE4M3, FP16) and integer element types (int8, uint8, int4, uint4): every code, and
// rounding in every deterministic mode against MPFR (a 1-bit significand for E8M0, mpfr_rint for integers)
// and against the written-out definitions of numerics/scale_format.hpp and numerics/int_format.hpp.
#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <limits>
#include <vector>

#include "numerics/int_format.hpp"
#include "numerics/round.hpp"
#include "numerics/scale_format.hpp"

using namespace roundoff::numerics;

namespace {

mpfr_rnd_t mpfr_mode(Rounding m) {
  switch (m) {
    case Rounding::NearestEven: return MPFR_RNDN;
    case Rounding::TowardZero: return MPFR_RNDZ;
    case Rounding::Up: return MPFR_RNDU;
    case Rounding::Down: return MPFR_RNDD;
    case Rounding::NearestAway:
    case Rounding::Odd:
    case Rounding::Stochastic: break;
  }
  return MPFR_RNDA;
}

/// E8M0 by MPFR: x > 0 rounded to a 1-bit significand (the double range holds every candidate), nearest-away
/// = RNDN except on a tie (the midpoint 1.5·2^e, where it is RNDA), odd = RNDZ (the only bit is 1), then
/// clamped to [2^-127, 2^127].
double e8m0_by_mpfr(Rounding m, double x) {
  mpfr_t r;
  mpfr_init2(r, 1);
  double v = 0;
  if (m == Rounding::Odd) {
    mpfr_set_d(r, x, MPFR_RNDZ);
  } else if (m == Rounding::NearestAway) {
    int e = 0;
    const double f = std::frexp(x, &e);
    mpfr_set_d(r, x, f == 0.75 ? MPFR_RNDA : MPFR_RNDN);
  } else {
    mpfr_set_d(r, x, mpfr_mode(m));
  }
  v = mpfr_get_d(r, MPFR_RNDN);
  mpfr_clear(r);
  return std::fmin(std::fmax(v, e8m0_min), e8m0_max);
}

/// Inputs around every power of two 2^-140 .. 2^140: the power, its neighbours, the midpoint 1.5·2^e and its
/// neighbours, and a few interior points.
std::vector<double> e8m0_inputs() {
  std::vector<double> in;
  const double inf = std::numeric_limits<double>::infinity();
  for (int e = -140; e <= 140; ++e) {
    const double p = std::ldexp(1.0, e);
    for (double x : {p, 1.5 * p, 1.25 * p, 1.75 * p, 1.9999 * p})
      for (double y : {x, std::nextafter(x, 0.0), std::nextafter(x, inf)}) in.push_back(y);
  }
  return in;
}

}  // namespace

TEST(ScaleFormat, E8M0EveryCodeAndEncoding) {
  for (std::uint32_t c = 0; c < 255; ++c) {
    const double v = scale_value(ScaleFormat::E8M0, c);
    EXPECT_EQ(v, std::ldexp(1.0, static_cast<int>(c) - 127));
    EXPECT_EQ(scale_code(ScaleFormat::E8M0, v), c);
    EXPECT_TRUE(is_scale_value(ScaleFormat::E8M0, v));
    for (const Rounding m : kDeterministicRoundings) EXPECT_EQ(round_scale(ScaleFormat::E8M0, m, v), v);
  }
  EXPECT_TRUE(std::isnan(scale_value(ScaleFormat::E8M0, 0xFF)));
  EXPECT_EQ(scale_code(ScaleFormat::E8M0, std::nan("")), 0xFFu);
  EXPECT_THROW(scale_value(ScaleFormat::E8M0, 0x100), std::invalid_argument);
  EXPECT_THROW(scale_code(ScaleFormat::E8M0, 0.0), std::invalid_argument);  // no zero
  EXPECT_THROW(scale_code(ScaleFormat::E8M0, 3.0), std::invalid_argument);
}

TEST(ScaleFormat, E8M0RoundingInEveryModeMatchesMpfrAndTheDefinition) {
  int checked = 0;
  for (double x : e8m0_inputs()) {
    for (const Rounding m : kDeterministicRoundings) {
      const double got = round_scale(ScaleFormat::E8M0, m, x);
      ASSERT_EQ(got, e8m0_by_mpfr(m, x)) << name_of(m) << " x=" << x;
      // Written out: lo = 2^floor(log2 x), hi = 2 lo.
      const double lo = std::ldexp(1.0, std::ilogb(x)), hi = 2 * lo;
      double want = lo;
      if (x != lo) {
        const bool nearest = m == Rounding::NearestEven || m == Rounding::NearestAway;
        want = m == Rounding::Up || (nearest && x >= 1.5 * lo) ? hi : lo;
      }
      want = std::fmin(std::fmax(want, e8m0_min), e8m0_max);
      ASSERT_EQ(got, want) << name_of(m) << " x=" << x;
      ++checked;
    }
  }
  EXPECT_GT(checked, 6 * 4000);
  for (const Rounding m : kDeterministicRoundings) {
    EXPECT_EQ(round_scale(ScaleFormat::E8M0, m, 0.0), e8m0_min);
    EXPECT_EQ(round_scale(ScaleFormat::E8M0, m, 1e300), e8m0_max);
    EXPECT_TRUE(std::isnan(round_scale(ScaleFormat::E8M0, m, std::numeric_limits<double>::infinity())));
    EXPECT_TRUE(std::isnan(round_scale(ScaleFormat::E8M0, m, std::nan(""))));
  }
  EXPECT_THROW(round_scale(ScaleFormat::E8M0, Rounding::NearestEven, -1.0), std::invalid_argument);
  EXPECT_THROW(round_scale(ScaleFormat::E8M0, Rounding::Stochastic, 1.0), std::invalid_argument);
}

TEST(ScaleFormat, Ue4m3AndFp16AreTheNonNegativeSaturatingE4m3AndFp16) {
  int values = 0;
  for (std::uint32_t c = 0; c < 0x80; ++c) {
    const double v = scale_value(ScaleFormat::UE4M3, c);
    if (c == 0x7F) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    EXPECT_EQ(v, from_bits(formats::e4m3, c));
    EXPECT_EQ(scale_code(ScaleFormat::UE4M3, v), c);
    ++values;
  }
  EXPECT_EQ(values, 127);
  EXPECT_THROW(scale_value(ScaleFormat::UE4M3, 0x80), std::invalid_argument);  // sign bit
  // Rounding is E4M3's with saturation (MPFR-checked in round_to_test as e4m3_sat), restricted to x >= 0.
  const RoundingPlan sat(Format{4, -6, 8, true, Specials::NanOnly, true});
  for (double x : {0.0, 0.001, 0.3, 1.0625, 17.0, 448.0, 464.0, 480.0, 1e9})
    for (const Rounding m : kDeterministicRoundings)
      EXPECT_EQ(round_scale(ScaleFormat::UE4M3, m, x), round_to(sat, m, x)) << x;
  EXPECT_EQ(round_scale(ScaleFormat::UE4M3, Rounding::NearestEven, std::numeric_limits<double>::infinity()), 448.0);
  EXPECT_EQ(scale_code(ScaleFormat::UE4M3, 448.0), 0x7Eu);
  EXPECT_EQ(round_scale(ScaleFormat::FP16, Rounding::Up, 1e6), 65504.0);
  EXPECT_EQ(scale_code(ScaleFormat::FP16, 1.0), 0x3C00u);
  EXPECT_EQ(parse_scale_format("e8m0"), ScaleFormat::E8M0);
  EXPECT_THROW(parse_scale_format("e8m1"), std::invalid_argument);
}

TEST(IntFormat, EveryCodeOfEveryType) {
  struct T { IntFormat t; int lo, hi, bits; };
  for (const T t : {T{IntFormat::Int8, -128, 127, 8}, T{IntFormat::Uint8, 0, 255, 8}, T{IntFormat::Int4, -8, 7, 4},
                    T{IntFormat::Uint4, 0, 15, 4}}) {
    EXPECT_EQ(int_min(t.t), t.lo);
    EXPECT_EQ(int_max(t.t), t.hi);
    EXPECT_EQ(int_bits(t.t), t.bits);
    for (std::uint32_t c = 0; c < (1u << t.bits); ++c) {
      const int v = int_value(t.t, c);
      // Two's complement written out: the top bit weighs -2^(bits-1) in signed types.
      const bool sign = t.lo < 0 && (c >> (t.bits - 1));
      EXPECT_EQ(v, static_cast<int>(c) - (sign ? (1 << t.bits) : 0));
      EXPECT_EQ(int_code(t.t, v), c);
    }
    EXPECT_THROW(int_code(t.t, t.hi + 1), std::invalid_argument);
    EXPECT_THROW(int_value(t.t, 1u << t.bits), std::invalid_argument);
  }
  EXPECT_EQ(int_code(IntFormat::Int4, -1), 0xFu);
  EXPECT_EQ(int_code(IntFormat::Int8, -128), 0x80u);
  EXPECT_EQ(parse_int_format("uint4"), IntFormat::Uint4);
  EXPECT_THROW(parse_int_format("int3"), std::invalid_argument);
}

TEST(IntFormat, RoundingInEveryModeMatchesMpfrRintThenSaturation) {
  std::vector<double> in;
  const double inf = std::numeric_limits<double>::infinity();
  for (int k = -300; k <= 300; ++k)
    for (double d : {0.0, 0.25, 0.5, 0.75})
      for (double x : {k + d, std::nextafter(k + d, -inf), std::nextafter(k + d, inf)}) in.push_back(x);
  for (double x : {1e-300, -1e-300, 1e300, -1e300, inf, -inf, -0.0}) in.push_back(x);
  mpfr_t r;
  mpfr_init2(r, 64);
  int checked = 0;
  for (const IntFormat t : {IntFormat::Int8, IntFormat::Uint8, IntFormat::Int4, IntFormat::Uint4}) {
    for (double x : in) {
      for (const Rounding m : kDeterministicRoundings) {
        mpfr_set_d(r, x, MPFR_RNDN);  // exact at 64 bits for |x| < 2^10 and for the extremes' magnitudes
        double want = 0;
        if (std::isinf(x)) {
          want = x;
        } else if (m == Rounding::NearestAway) {
          mpfr_round(r, r);
          want = mpfr_get_d(r, MPFR_RNDN);
        } else if (m == Rounding::Odd) {
          mpfr_t z;
          mpfr_init2(z, 64);
          const int inexact = mpfr_rint(z, r, MPFR_RNDZ);
          want = mpfr_get_d(z, MPFR_RNDN);
          if (inexact && std::fmod(want, 2.0) == 0) want += x > 0 ? 1 : -1;
          mpfr_clear(z);
        } else {
          mpfr_rint(r, r, mpfr_mode(m));
          want = mpfr_get_d(r, MPFR_RNDN);
        }
        want = std::fmin(std::fmax(want, int_min(t)), int_max(t));
        ASSERT_EQ(round_int(t, m, x), static_cast<int>(want)) << name_of(t) << " " << name_of(m) << " x=" << x;
        ++checked;
      }
    }
  }
  mpfr_clear(r);
  EXPECT_GT(checked, 4 * 6 * 7000);
  EXPECT_THROW(round_int(IntFormat::Int4, Rounding::NearestEven, std::nan("")), std::invalid_argument);
  EXPECT_THROW(round_int(IntFormat::Int4, Rounding::Stochastic, 1.5), std::invalid_argument);
  EXPECT_EQ(round_int(IntFormat::Int4, Rounding::NearestEven, 2.5), 2);
  EXPECT_EQ(round_int(IntFormat::Int4, Rounding::NearestEven, -7.5), -8);
  EXPECT_EQ(round_int(IntFormat::Int4, Rounding::NearestEven, 7.5), 7);
  EXPECT_EQ(round_int(IntFormat::Uint4, Rounding::Down, -0.25), 0);
}
