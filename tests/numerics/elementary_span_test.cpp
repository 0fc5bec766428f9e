// numerics::elementary_span (exp, sigmoid on spans) against the scalar numerics::elementary, bit for bit, and the
// derived error bound of its binary64 evaluation against MPFR. numerics::elementary is itself checked against
// the MPFR oracle on every 16-bit input (elementary_test.cpp), so agreement with it is correct rounding.
// Stochastic rounding is checked with random draws and with draws next to the scalar result's own threshold
// (the glibc value's fraction), where any slip in the span path's interval argument would show.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/elementary_span.hpp"
#include "numerics/mpfr_util.hpp"
#include "tests/support/exhaustive.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::Mismatches;
using roundoff::test::same_value;

namespace {

constexpr Elementary kSpanFunctions[] = {Elementary::Exp, Elementary::Sigmoid};

/// The draw at which stochastic rounding of glibc's value flips, nudged by `delta`: the scalar result's own
/// threshold (frac64 of the binary64 value between its two neighbours), approximated to ~2^-52 of the gap.
std::uint64_t threshold_draw(const RoundingPlan& plan, Elementary f, double x, std::int64_t delta) {
  const double y = f == Elementary::Exp ? std::exp(x) : 1.0 / (1.0 + std::exp(-x));
  const double d = round_to(plan, Rounding::Down, y), u = round_to(plan, Rounding::Up, y);
  if (!(u > d) || !std::isfinite(u)) return static_cast<std::uint64_t>(delta);
  const double frac = (y - d) / (u - d);
  return static_cast<std::uint64_t>(std::ldexp(frac, 64) >= 0x1p64 ? 0x1p63 : std::ldexp(frac, 64)) +
         static_cast<std::uint64_t>(delta);
}

/// Draws for the inputs: even elements random, odd ones at the threshold ± a little.
std::vector<std::uint64_t> draws_for(const RoundingPlan& plan, Elementary f, const std::vector<double>& xs) {
  std::vector<std::uint64_t> d(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    d[i] = i % 2 == 0 ? mix64(i + 12345) : threshold_draw(plan, f, xs[i], static_cast<std::int64_t>(i % 7) - 3);
  return d;
}

/// elementary_span on xs equals elementary per element, for f, every plan and every mode (stochastic included).
void check_span(const std::vector<double>& xs, const std::vector<Format>& outs, const std::string& what) {
  for (const Format& of : outs) {
    const RoundingPlan plan(of);
    for (const Elementary f : kSpanFunctions) {
      for (const Rounding m : kAllRoundings) {
        const auto draws = m == Rounding::Stochastic ? draws_for(plan, f, xs) : std::vector<std::uint64_t>{};
        std::vector<double> got(xs.size());
        elementary_span(plan, m, f, xs, got, draws);
        Mismatches bad;
        roundoff::test::parallel_for(static_cast<std::int64_t>(xs.size()), [&](std::int64_t k) {
          const auto i = static_cast<std::size_t>(k);
          const double want = elementary(plan, m, f, xs[i], draws.empty() ? 0 : draws[i]);
          if (!same_value(got[i], want))
            bad.add(std::string(name_of(f)) + " x=" + hex_float(xs[i]) + " got " + hex_float(got[i]) + " want " +
                    hex_float(want));
        });
        EXPECT_EQ(bad.count(), 0u) << what << " -> " << name_of(of) << " " << name_of(m) << ": " << bad.report();
      }
    }
  }
}

std::vector<double> with_nan(std::vector<double> v) {
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(-std::numeric_limits<double>::quiet_NaN());
  return v;
}

/// Inputs on the edges: zeros, infinities, NaN, the span path's domain limit and its neighbours, binary64
/// subnormals, arguments whose results overflow or underflow binary32/fp16/bf16 (and their subnormal ranges),
/// sigmoid's saturation near ±17 and ±37.
std::vector<double> edge_inputs() {
  std::vector<double> v{0.0, -0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                        0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1p-60, -0x1p-60, 0x1p-25, -0x1p-25, 1.0, -1.0, 0x1p1000,
                        -0x1p1000, 0x1.fffffep127, -0x1.fffffep127};
  for (double lim : {kSpanMaxArg, 709.0, 745.0, 88.72283935546875, 11.0898, 88.0, 87.3365, 103.97, 104.0, 9.70,
                     17.33, 16.64, 36.7, 37.0, 0.5, 0.3465735902799726, 0.6931471805599453}) {
    for (double s : {-1.0, 1.0}) {
      double x = s * lim;
      for (int k = 0; k < 6; ++k) x = std::nextafter(x, 0.0);
      for (int k = 0; k < 12; ++k) {
        v.push_back(x);
        v.push_back(static_cast<double>(static_cast<float>(x)));
        x = std::nextafter(x, s * 1e300);
      }
    }
  }
  return with_nan(v);
}

const std::vector<Format> kOutputs = {formats::fp16, formats::bf16, formats::fp32};

}  // namespace

TEST(ElementarySpan, EveryFp16InputEveryMode) {
  check_span(with_nan(roundoff::test::encoded_values(formats::fp16)), kOutputs, "fp16");
}

TEST(ElementarySpan, EveryBf16InputEveryMode) {
  check_span(with_nan(roundoff::test::encoded_values(formats::bf16)), kOutputs, "bf16");
}

TEST(ElementarySpan, EveryEightBitInputIntoSmallFormats) {
  const std::vector<Format> outs = {formats::e4m3, formats::e5m2, Format{11, -14, 15, false, Specials::Ieee, false},
                                    Format{11, -14, 15, true, Specials::Ieee, true}};
  for (const Format in : {formats::e4m3, formats::e5m2}) check_span(with_nan(roundoff::test::encoded_values(in)), outs, name_of(in));
}

TEST(ElementarySpan, Binary32SampleEveryMode) {
  // Random binary32 values: half uniform in the functions' interesting ranges (|x| < 110), half any encoding.
  std::mt19937_64 rng(20261124);
  std::uniform_real_distribution<double> near(-110.0, 110.0);
  std::vector<double> xs;
  for (int i = 0; i < 120000; ++i) {
    const float f = i % 2 ? static_cast<float>(near(rng)) : std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(f)) xs.push_back(f);
  }
  check_span(xs, {formats::fp32, formats::bf16}, "binary32 sample");
}

TEST(ElementarySpan, EdgeClassesEveryMode) { check_span(edge_inputs(), kOutputs, "edges"); }

TEST(ElementarySpan, RaggedLengthsAndAliasing) {
  const RoundingPlan plan(formats::fp32);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(-30.0, 30.0);
  for (std::size_t n : {0u, 1u, 3u, 7u, 9u, 255u, 257u, 1000u}) {
    std::vector<double> x(n);
    for (double& v : x) v = static_cast<float>(dist(rng));
    for (const Elementary f : kSpanFunctions) {
      std::vector<double> y = x;
      elementary_span(plan, Rounding::NearestEven, f, y, y);  // in place
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_value(y[i], elementary(plan, Rounding::NearestEven, f, x[i]))) << n << " " << i;
    }
  }
}

TEST(ElementarySpan, BadArgumentsAreRejected) {
  const RoundingPlan plan(formats::fp32);
  std::vector<double> x(4, 1.0), y(3);
  EXPECT_THROW(elementary_span(plan, Rounding::NearestEven, Elementary::Exp, x, y), std::invalid_argument);
  std::vector<double> z(4);
  EXPECT_THROW(elementary_span(plan, Rounding::Stochastic, Elementary::Exp, x, z), std::invalid_argument);
  EXPECT_THROW(elementary_core_error(Elementary::Log), std::invalid_argument);
}

TEST(ElementarySpan, OtherFunctionsAndWideFormatsFallBack) {
  // Not vectorised, still equal per element.
  EXPECT_FALSE(elementary_span_vectorised(Elementary::Log, RoundingPlan(formats::fp32)));
  EXPECT_FALSE(elementary_span_vectorised(Elementary::Exp, RoundingPlan(formats::fp64)));
  EXPECT_TRUE(elementary_span_vectorised(Elementary::Sigmoid, RoundingPlan(formats::fp32)));
  const RoundingPlan fp64(formats::fp64);
  std::vector<double> x{0.5, 1.5, -2.25, 3.0}, y(4);
  elementary_span(fp64, Rounding::Up, Elementary::Exp, x, y);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], elementary(fp64, Rounding::Up, Elementary::Exp, x[i]));
}

/// Inputs for the bound: random binary64 values over the whole domain and near 0, and the range reduction's
/// worst spots (x near (k + 1/2)·ln2, where |r| is largest).
std::vector<double> bound_inputs() {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> wide(-kSpanMaxArg, kSpanMaxArg), unit(-1.0, 1.0);
  std::vector<double> xs;
  for (int i = 0; i < 20000; ++i) xs.push_back(wide(rng));
  for (int i = 0; i < 5000; ++i) xs.push_back(unit(rng));
  for (int k = -990; k <= 990; k += 7)
    for (double d : {-0x1p-30, 0.0, 0x1p-30}) xs.push_back((k + 0.5) * 0.6931471805599453 + d);
  xs.push_back(kSpanMaxArg);
  xs.push_back(-kSpanMaxArg);
  return xs;
}

TEST(ElementarySpan, CoreErrorWithinDerivedBound) {
  // |y - f(x)| <= ε_f·f(x), f(x) by MPFR at 200 bits. Shrinking ε_f (or dropping a polynomial term) fails here:
  // the largest observed error is within a factor 2 of the bound.
  const auto xs = bound_inputs();
  for (const Elementary f : kSpanFunctions) {
    std::vector<double> y(xs.size());
    elementary_core(f, xs, y, kernels::Isa::Avx512Fp16);
    const double eps = elementary_core_error(f);
    double worst = 0;
    Mismatches bad;
    Mpfr e(200), x(53), t(200);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      mpfr_set_d(x, xs[i], MPFR_RNDN);
      if (f == Elementary::Exp) {
        mpfr_exp(e, x, MPFR_RNDN);
      } else {
        mpfr_neg(t, x, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add_ui(t, t, 1, MPFR_RNDN);
        mpfr_ui_div(e, 1, t, MPFR_RNDN);
      }
      mpfr_sub_d(t, e, y[i], MPFR_RNDN);
      mpfr_div(t, t, e, MPFR_RNDN);
      const double rel = std::fabs(mpfr_get_d(t, MPFR_RNDU));
      worst = std::max(worst, rel);
      if (!(rel <= eps)) bad.add("x=" + hex_float(xs[i]) + " rel error " + std::to_string(rel));
    }
    RecordProperty(std::string("worst_") + name_of(f), hex_float(worst));
    EXPECT_EQ(bad.count(), 0u) << name_of(f) << " bound " << eps << ": " << bad.report();
    EXPECT_GT(worst, eps / 4) << name_of(f) << ": the bound is far from the observed error";
  }
}

TEST(ElementarySpan, TiersAgreeBitForBit) {
  auto xs = bound_inputs();
  const auto edges = edge_inputs();
  xs.insert(xs.end(), edges.begin(), edges.end());
  for (const Elementary f : kSpanFunctions) {
    std::vector<double> scalar(xs.size()), avx2(xs.size()), avx512(xs.size());
    elementary_core(f, xs, scalar, kernels::Isa::None);
    elementary_core(f, xs, avx2, kernels::Isa::Avx2);
    elementary_core(f, xs, avx512, kernels::Isa::Avx512);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ASSERT_TRUE(same_value(scalar[i], avx2[i])) << name_of(f) << " x=" << hex_float(xs[i]);
      ASSERT_TRUE(same_value(scalar[i], avx512[i])) << name_of(f) << " x=" << hex_float(xs[i]);
    }
  }
}

TEST(ElementarySpan, SpanEqualsScalarOnEveryTier) {
  const RoundingPlan plan(formats::fp16);
  const auto xs = with_nan(roundoff::test::encoded_values(formats::fp16));
  for (const kernels::Isa isa : {kernels::Isa::None, kernels::Isa::Avx2}) {
    const KernelOptions opts{true, isa};
    for (const Elementary f : kSpanFunctions) {
      std::vector<double> got(xs.size());
      elementary_span(plan, Rounding::Odd, f, xs, got, {}, opts);
      for (std::size_t i = 0; i < xs.size(); ++i)
        ASSERT_TRUE(same_value(got[i], elementary(plan, Rounding::Odd, f, xs[i]))) << name_of(isa) << " " << xs[i];
    }
  }
}

TEST(ElementarySpanExhaustive, EveryBinary32InputEveryDeterministicMode) {
  // Every binary32 encoding (NaNs skipped), results in binary32, in blocks of 2^16.
  const RoundingPlan plan(formats::fp32);
  Mismatches bad;
  roundoff::test::parallel_for(std::int64_t{1} << 16, [&](std::int64_t hi) {
    std::vector<double> xs;
    xs.reserve(1 << 16);
    for (std::uint32_t lo = 0; lo < (1u << 16); ++lo) {
      const float v = std::bit_cast<float>(static_cast<std::uint32_t>(hi) << 16 | lo);
      if (!std::isnan(v)) xs.push_back(v);
    }
    std::vector<double> got(xs.size());
    for (const Elementary f : kSpanFunctions)
      for (const Rounding m : kDeterministicRoundings) {
        elementary_span(plan, m, f, xs, got);
        for (std::size_t i = 0; i < xs.size(); ++i) {
          const double want = elementary(plan, m, f, xs[i]);
          if (!same_value(got[i], want))
            bad.add(std::string(name_of(f)) + " " + std::string(name_of(m)) + " x=" + hex_float(xs[i]) + " got " +
                    hex_float(got[i]) + " want " + hex_float(want));
        }
      }
  });
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}
