// numerics/elementary_dd (the binary64 path of exp, log, sigmoid, rsqrt) against MPFR:
//   - every table constant within u²·|c| of its value (the premise of every error bound);
//   - each double-double operation within its stated bound on random inputs;
//   - each function's enclosure within its stated bound, on samples from every binade of its domain;
//   - numerics::elementary (libm check, double-double path, MPFR fallback) equal to elementary_mpfr in binary64
//     for every mode, stochastic and round-to-odd included, on the same samples, on special values, on exact
//     cases and on stochastic draws placed next to the exact fraction; the fallback rate on typical inputs.
// A wrong constant or a bound claimed too small fails the enclosure test; a wrong rounding decision fails the
// comparison with elementary_mpfr. The *Exhaustive* test repeats the comparison on many more samples.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/elementary_dd.hpp"
#include "numerics/elementary_dd_tables.hpp"
#include "numerics/mpfr_util.hpp"
#include "tests/support/exhaustive.hpp"

using namespace roundoff::numerics;
using roundoff::test::Mismatches;

namespace {

constexpr double kU2 = 0x1p-106;  // u² with u = 2^-53
constexpr Elementary kDdFunctions[] = {Elementary::Exp, Elementary::Log, Elementary::Sigmoid, Elementary::Rsqrt};
const RoundingPlan kBinary64{formats::fp64};

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// f(x) to `prec` bits, round to nearest (x finite, inside the function's fast domain).
void mpfr_value(mpfr_ptr y, Elementary f, double x) {
  Mpfr xm(53);
  mpfr_set_d(xm, x, MPFR_RNDN);
  switch (f) {
    case Elementary::Exp: mpfr_exp(y, xm, MPFR_RNDN); break;
    case Elementary::Log: mpfr_log(y, xm, MPFR_RNDN); break;
    case Elementary::Sigmoid:
      mpfr_neg(y, xm, MPFR_RNDN);
      mpfr_exp(y, y, MPFR_RNDN);
      mpfr_add_ui(y, y, 1, MPFR_RNDN);
      mpfr_ui_div(y, 1, y, MPFR_RNDN);
      break;
    case Elementary::Rsqrt: mpfr_rec_sqrt(y, xm, MPFR_RNDN); break;
    case Elementary::Tanh:
    case Elementary::Sin:
    case Elementary::Cos:
    case Elementary::Erf: mpfr_set_nan(y); break;
  }
}

/// |(hi + lo)·2^scale - exact| / |exact| as a double, exact computed at 400 bits.
double relative_error(const DD& v, int scale, mpfr_srcptr exact) {
  Mpfr got(400), diff(400);
  mpfr_set_d(got, v.hi, MPFR_RNDN);
  mpfr_add_d(got, got, v.lo, MPFR_RNDN);
  mpfr_mul_2si(got, got, scale, MPFR_RNDN);
  mpfr_sub(diff, got, exact, MPFR_RNDN);
  mpfr_div(diff, diff, exact, MPFR_RNDN);
  return std::fabs(mpfr_get_d(diff, MPFR_RNDU));
}

/// Samples of each function's domain: `per_binade` random significands in every binade (both signs where the
/// domain has them), plus the edges (near overflow and underflow of the result, around 0, subnormal inputs).
std::vector<double> stratified_inputs(Elementary f, int per_binade, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> sig(1.0, 2.0);
  const bool both_signs = f == Elementary::Exp || f == Elementary::Sigmoid;
  const int top = both_signs ? 9 : 1023;  // |x| < 1024 for exp and sigmoid
  std::vector<double> xs;
  for (int e = -1074; e <= top; ++e) {
    for (int i = 0; i < per_binade; ++i) {
      double x = std::ldexp(sig(rng), e);
      if (e < -1022) x = std::ldexp(std::floor(std::ldexp(x, 1074)), -1074);  // subnormal: on the grid
      if (x == 0) x = 0x1p-1074;
      xs.push_back(x);
      if (both_signs) xs.push_back(-x);
    }
  }
  if (f == Elementary::Exp || f == Elementary::Sigmoid) {
    for (double edge : {709.782712893384, 709.7827128933840, 709.78, 709.79, 710.0, 1023.999, -708.39641853226,
                        -744.4400719213812, -745.1332191019411, -745.1332191019412, -746.0, -1023.999, 37.0, 40.0,
                        73.0, 750.0, -37.0, -750.0}) {
      for (int d = -4; d <= 4; ++d) {
        double x = edge;
        for (int s = 0; s < std::abs(d); ++s) x = std::nextafter(x, d > 0 ? 2000.0 : -2000.0);
        xs.push_back(x);
      }
    }
  }
  if (f == Elementary::Log) {
    for (int d = 1; d <= 64; ++d) {
      xs.push_back(1.0 + d * 0x1p-52);
      xs.push_back(1.0 - d * 0x1p-53);
      xs.push_back(1.5 - d * 0x1p-52);
      xs.push_back(0.75 + d * 0x1p-53);
    }
    xs.push_back(std::numeric_limits<double>::max());
  }
  if (f == Elementary::Rsqrt) {
    for (int e = -1074; e <= 1023; e += 1) xs.push_back(std::ldexp(1.0, e));  // 4^k: exact results
    xs.push_back(std::numeric_limits<double>::max());
  }
  return xs;
}

/// The largest relative error of each enclosure on the samples, in units of u².
double worst_enclosure_error(Elementary f, const std::vector<double>& xs, Mismatches& bad) {
  double worst = 0;
  for (const double x : xs) {
    const auto e = evaluate_dd(f, x);
    if (!e) continue;
    Mpfr exact(400);
    mpfr_value(exact, f, x);
    const double err = relative_error(e->v, e->scale, exact);
    worst = std::max(worst, err / kU2);
    if (!(err <= std::ldexp(1.0, -e->error_bits)))
      bad.add(std::string(name_of(f)) + " x=" + hex_float(x) + " error " + std::to_string(err / kU2) +
              " u² above the bound 2^-" + std::to_string(e->error_bits));
  }
  return worst;
}

/// elementary (fast path) against elementary_mpfr in every mode for binary64; stochastic with a random draw and
/// with draws at the exact fraction's threshold. Returns the number of elementary_dd fallbacks.
std::uint64_t compare_with_mpfr(Elementary f, const std::vector<double>& xs, Mismatches& bad, std::uint64_t seed) {
  std::uint64_t fallbacks = 0;
  std::mt19937_64 rng(seed);
  for (const double x : xs) {
    for (const Rounding m : kAllRoundings) {
      std::vector<std::uint64_t> draws{0};
      if (m == Rounding::Stochastic) {
        draws = {rng(), 0, ~std::uint64_t{0}};
        // The threshold draw: the exact fraction's top 64 bits (from a 200-bit value), ± 1.
        const auto e = evaluate_dd(f, x);
        if (e) {
          Mpfr exact(200);
          mpfr_value(exact, f, x);
          const double d = round_to(kBinary64, Rounding::Down, mpfr_get_d(exact, MPFR_RNDD));
          const double u = round_to(kBinary64, Rounding::Up, mpfr_get_d(exact, MPFR_RNDU));
          if (u > d && std::isfinite(u) && d > 0x1p-1000) {
            Mpfr frac(200);
            mpfr_sub_d(frac, exact, d, MPFR_RNDN);
            mpfr_div_d(frac, frac, u - d, MPFR_RNDN);
            mpfr_mul_2si(frac, frac, 64, MPFR_RNDN);
            const auto t = static_cast<std::uint64_t>(mpfr_get_ui(frac, MPFR_RNDZ));
            draws.insert(draws.end(), {t - 1, t, t + 1});
          }
        }
      }
      for (const std::uint64_t draw : draws) {
        const double got = elementary(kBinary64, m, f, x, draw);
        const double want = elementary_mpfr(kBinary64, m, f, x, draw);
        if (!elementary_dd(kBinary64, m, f, x, draw)) ++fallbacks;
        if (!same_bits(got, want))
          bad.add(std::string(name_of(f)) + " " + std::string(name_of(m)) + " x=" + hex_float(x) + " draw=" +
                  std::to_string(draw) + " got " + hex_float(got) + " want " + hex_float(want));
      }
    }
  }
  return fallbacks;
}

/// |computed - exact|/|exact| of one double-double operation, in units of u².
double op_error(const DD& got, mpfr_srcptr exact) { return relative_error(got, 0, exact) / kU2; }

DD random_dd(std::mt19937_64& rng, int emin, int emax) {
  std::uniform_real_distribution<double> sig(1.0, 2.0);
  std::uniform_int_distribution<int> ex(emin, emax);
  const double hi = std::ldexp(sig(rng), ex(rng)) * (rng() & 1 ? -1 : 1);
  double lo = std::ldexp(sig(rng), std::ilogb(hi) - 53 - static_cast<int>(rng() % 8)) * (rng() & 1 ? -1 : 1);
  double h, l;
  two_sum(hi, lo, h, l);
  return {h, l};
}

void set_dd(mpfr_ptr y, const DD& x) {
  mpfr_set_d(y, x.hi, MPFR_RNDN);
  mpfr_add_d(y, y, x.lo, MPFR_RNDN);  // exact at 400 bits for these exponent ranges
}

}  // namespace

TEST(ElementaryDd, TableConstantsWithinUSquared) {
  Mpfr c(300), err(300);
  auto check = [&](const DD& v, const char* what, int index) {
    set_dd(err, v);
    mpfr_sub(err, err, c, MPFR_RNDN);
    mpfr_div(err, err, c, MPFR_RNDN);
    EXPECT_LE(std::fabs(mpfr_get_d(err, MPFR_RNDU)), kU2) << what << "[" << index << "]";
    EXPECT_EQ(v.hi, mpfr_get_d(c, MPFR_RNDN)) << what << "[" << index << "] hi is not RN(c)";
  };
  mpfr_const_log2(c, MPFR_RNDN);
  check(dd_tables::kLn2, "ln2", 0);
  for (int j = 0; j < 64; ++j) {
    mpfr_set_si(c, j, MPFR_RNDN);
    mpfr_div_ui(c, c, 64, MPFR_RNDN);
    mpfr_exp2(c, c, MPFR_RNDN);
    check(dd_tables::kExp2Table[j], "2^(j/64)", j);
  }
  for (int n = 0; n < 12; ++n) {
    mpfr_fac_ui(c, static_cast<unsigned long>(n), MPFR_RNDN);
    mpfr_ui_div(c, 1, c, MPFR_RNDN);
    check(dd_tables::kExpTaylor[n], "1/n!", n);
  }
  for (int n = 0; n < 14; ++n) {
    mpfr_set_si(c, n % 2 ? -1 : 1, MPFR_RNDN);
    mpfr_div_ui(c, c, static_cast<unsigned long>(n + 1), MPFR_RNDN);
    check(dd_tables::kLog1pTaylor[n], "(-1)^n/(n+1)", n);
  }
  for (int j = 96; j <= 192; ++j) {
    const auto i = static_cast<std::size_t>(j - 96);
    EXPECT_EQ(dd_tables::kLogInv[i], 128.0 / j) << "kLogInv for j = " << j;
    mpfr_set_d(c, dd_tables::kLogInv[i], MPFR_RNDN);
    mpfr_log(c, c, MPFR_RNDN);
    mpfr_neg(c, c, MPFR_RNDN);
    if (j == 128) {
      EXPECT_EQ(dd_tables::kLogTable[i].hi, 0.0);
      EXPECT_EQ(dd_tables::kLogTable[i].lo, 0.0);
    } else {
      check(dd_tables::kLogTable[i], "-log(inv_j)", j);
    }
  }
  // ln2/64 in three parts: the first two 36-bit, the rest below 2^-142.
  for (int i = 0; i < 2; ++i) {
    std::uint64_t m;
    int e;
    split_double(dd_tables::kLn2By64[i], m, e);
    EXPECT_EQ(m % (std::uint64_t{1} << 17), 0u) << "kLn2By64[" << i << "] has more than 36 bits";
  }
  mpfr_const_log2(c, MPFR_RNDN);
  mpfr_div_ui(c, c, 64, MPFR_RNDN);
  for (int i = 0; i < 3; ++i) mpfr_sub_d(c, c, dd_tables::kLn2By64[i], MPFR_RNDN);
  EXPECT_LT(std::fabs(mpfr_get_d(c, MPFR_RNDU)), 0x1p-142);
}

TEST(ElementaryDd, OperationsWithinTheirBounds) {
  std::mt19937_64 rng(7);
  Mpfr x(400), y(400), r(400);
  double worst[4] = {0, 0, 0, 0};
  for (int i = 0; i < 200000; ++i) {
    const DD a = random_dd(rng, -20, 20), b = random_dd(rng, -20, 20);
    set_dd(x, a);
    set_dd(y, b);
    mpfr_add(r, x, y, MPFR_RNDN);
    if (!mpfr_zero_p(r)) worst[0] = std::max(worst[0], op_error(dd_add(a, b), r));
    mpfr_mul(r, x, y, MPFR_RNDN);
    worst[1] = std::max(worst[1], op_error(dd_mul(a, b), r));
    mpfr_mul_d(r, x, b.hi, MPFR_RNDN);
    worst[2] = std::max(worst[2], op_error(dd_mul(a, b.hi), r));
    mpfr_div(r, x, y, MPFR_RNDN);
    worst[3] = std::max(worst[3], op_error(dd_div(a, b), r));
    // Cancellation for add: b close to -a.
    const DD c{-a.hi, a.lo * 0.75};
    set_dd(y, c);
    mpfr_add(r, x, y, MPFR_RNDN);
    if (!mpfr_zero_p(r)) worst[0] = std::max(worst[0], op_error(dd_add(a, c), r));
  }
  std::printf("double-double worst errors (u²): add %.3f mul %.3f mul_d %.3f div %.3f\n", worst[0], worst[1],
              worst[2], worst[3]);
  EXPECT_LE(worst[0], 4.0);
  EXPECT_LE(worst[1], 5.0);
  EXPECT_LE(worst[2], 2.0);
  EXPECT_LE(worst[3], 12.0);
}

TEST(ElementaryDd, EnclosuresWithinTheirBoundsEveryBinade) {
  for (const Elementary f : kDdFunctions) {
    Mismatches bad;
    const double worst = worst_enclosure_error(f, stratified_inputs(f, 4, 11), bad);
    std::printf("%s: worst enclosure error %.3f u²\n", name_of(f), worst);
    EXPECT_EQ(bad.count(), 0u) << bad.report();
  }
}

TEST(ElementaryDd, Binary64EveryModeMatchesMpfrEveryBinade) {
  for (const Elementary f : kDdFunctions) {
    Mismatches bad;
    const auto xs = stratified_inputs(f, 1, 23);
    const std::uint64_t fallbacks = compare_with_mpfr(f, xs, bad, 29);
    std::printf("%s: %zu inputs, %llu fallbacks to MPFR over every mode and draw\n", name_of(f), xs.size(),
                static_cast<unsigned long long>(fallbacks));
    EXPECT_EQ(bad.count(), 0u) << bad.report();
  }
}

TEST(ElementaryDd, SpecialValuesMatchMpfr) {
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 4.0,
                             0.25, 0x1p-1074, -0x1p-1074, 0x1p-1022, std::numeric_limits<double>::max(),
                             -std::numeric_limits<double>::max(), 1024.0, -1024.0, 1e300, -1e300, 0.5};
  Mismatches bad;
  for (const Elementary f : kDdFunctions) {
    for (const double x : specials) {
      for (const Rounding m : kAllRoundings) {
        for (const std::uint64_t draw : {std::uint64_t{0}, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
          const double got = elementary(kBinary64, m, f, x, draw);
          const double want = elementary_mpfr(kBinary64, m, f, x, draw);
          if (!same_bits(got, want))
            bad.add(std::string(name_of(f)) + " " + std::string(name_of(m)) + " x=" + hex_float(x) + " got " +
                    hex_float(got) + " want " + hex_float(want));
        }
      }
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

TEST(ElementaryDd, FallbackRateOnTypicalInputsIsSmall) {
  // Training-like ranges; binary64, every mode. The interval holds a rounding boundary with probability about
  // 2^-46 per call, so any fallback beyond a handful means the bound or the check is far too loose.
  std::mt19937_64 rng(5);
  struct Range {
    Elementary f;
    double lo, hi;
  };
  const Range ranges[] = {{Elementary::Exp, -40, 10}, {Elementary::Log, 1e-6, 1e4},
                          {Elementary::Sigmoid, -30, 30}, {Elementary::Rsqrt, 1e-8, 1e8}};
  for (const Range& r : ranges) {
    std::uniform_real_distribution<double> dist(r.lo, r.hi);
    std::uint64_t calls = 0, fallbacks = 0;
    for (int i = 0; i < 20000; ++i) {
      const double x = dist(rng);
      for (const Rounding m : kAllRoundings) {
        ++calls;
        if (!elementary_dd(kBinary64, m, r.f, x, rng())) ++fallbacks;
      }
    }
    std::printf("%s: %llu of %llu calls fall back to MPFR\n", name_of(r.f),
                static_cast<unsigned long long>(fallbacks), static_cast<unsigned long long>(calls));
    EXPECT_LE(fallbacks, 2u) << name_of(r.f);
  }
}

TEST(ElementaryDd, NarrowFormatsEveryModeMatchMpfr) {
  // The rounding of the enclosure in formats where glibc's check usually decides: elementary_dd alone against
  // elementary_mpfr on random binary32 and bfloat16 targets (boundaries are dense relative to the samples).
  std::mt19937_64 rng(3);
  Mismatches bad;
  for (const Format& fmt : {formats::fp32, formats::bf16, formats::fp16}) {
    const RoundingPlan plan(fmt);
    for (const Elementary f : kDdFunctions) {
      const auto xs = stratified_inputs(f, 1, rng());
      for (std::size_t i = 0; i < xs.size(); i += 3) {
        for (const Rounding m : kAllRoundings) {
          const std::uint64_t draw = rng();
          const auto got = elementary_dd(plan, m, f, xs[i], draw);
          if (!got) continue;
          const double want = elementary_mpfr(plan, m, f, xs[i], draw);
          if (!same_bits(*got, want))
            bad.add(name_of(fmt) + " " + std::string(name_of(f)) + " " + std::string(name_of(m)) + " x=" +
                    hex_float(xs[i]) + " got " + hex_float(*got) + " want " + hex_float(want));
        }
      }
    }
  }
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

TEST(ElementaryDdExhaustive, Binary64EveryModeMatchesMpfrManySamples) {
  for (const Elementary f : kDdFunctions) {
    const auto xs = stratified_inputs(f, 40, 101);
    Mismatches bad;
    std::vector<std::uint64_t> fallbacks(xs.size() / 1000 + 1, 0);
    roundoff::test::parallel_for(static_cast<std::int64_t>(fallbacks.size()), [&](std::int64_t c) {
      const auto b = static_cast<std::size_t>(c) * 1000;
      const std::vector<double> chunk(xs.begin() + static_cast<std::ptrdiff_t>(b),
                                      xs.begin() + static_cast<std::ptrdiff_t>(std::min(xs.size(), b + 1000)));
      fallbacks[static_cast<std::size_t>(c)] = compare_with_mpfr(f, chunk, bad, 1000 + static_cast<std::uint64_t>(c));
      Mismatches enc;
      worst_enclosure_error(f, chunk, enc);
      if (enc.count()) bad.add(enc.report());
    });
    std::uint64_t total = 0;
    for (const auto n : fallbacks) total += n;
    std::printf("%s: %zu inputs, %llu fallbacks\n", name_of(f), xs.size(), static_cast<unsigned long long>(total));
    EXPECT_EQ(bad.count(), 0u) << bad.report();
  }
}
