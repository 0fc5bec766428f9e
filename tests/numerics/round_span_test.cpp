// numerics::round_doubles_avx512 and round_doubles_avx2 (round_to's normal-binade fast path on 8 and 4 binary64
// lanes, and their hardware-conversion paths) against round_to per element, bit for bit, each tier on its own, in every deterministic mode, for formats of every shape, on inputs that hit each
// branch of the lane arithmetic: random values across and beyond the format's exponent range, exact ties and
// their neighbours, the binade edges (2^emin, max_finite and the overflow threshold), zeros, subnormals of
// both formats, ±inf and NaN; also with dst aliasing src and ragged lengths (masked and scalar tails).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "numerics/round.hpp"
#include "numerics/round_span.hpp"
#include "numerics/gemm_kernels.hpp"

namespace roundoff::numerics {
namespace {

bool same(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// One SIMD tier of the binary64 span rounding.
struct Tier {
  const char* name;
  bool (*round)(const RoundingPlan&, Rounding, std::span<const double>, std::span<double>);
  bool (*supported)();
};
const Tier kTiers[] = {{"avx512", round_doubles_avx512, round_doubles_avx512_supported},
                       {"avx2", round_doubles_avx2, round_doubles_avx2_supported}};

void PrintTo(const Tier& t, std::ostream* os) { *os << t.name; }

class RoundSpanTier : public ::testing::TestWithParam<Tier> {
 protected:
  void SetUp() override {
    if (!GetParam().supported()) GTEST_SKIP() << "this CPU lacks the " << GetParam().name << " tier";
  }
  bool round(const RoundingPlan& plan, Rounding mode, std::span<const double> src, std::span<double> dst) const {
    return GetParam().round(plan, mode, src, dst);
  }
};

std::vector<double> inputs(const Format& f, std::uint64_t seed) {
  const RoundingPlan plan(f);
  std::mt19937_64 rng(seed);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(), 0x1p-1074, -0x1p-1022,
                           plan.max_finite, -plan.max_finite, plan.min_normal, -plan.min_normal,
                           std::numeric_limits<double>::max()};
  const double ulp_max = std::ldexp(1.0, f.emax - f.precision + 1);
  for (double d : {0.5, 0.25, 0.75, 1.0, 2.0}) {  // around the overflow threshold max + ulp/2
    v.push_back(plan.max_finite + d * ulp_max);
    v.push_back(-(plan.max_finite + d * ulp_max));
  }
  std::uniform_int_distribution<int> ex(f.emin - f.precision - 4, std::min(f.emax + 3, 1023));
  while (v.size() < 4000) {
    const int e = ex(rng);
    // a format value, then an offset: a tie (half ulp), just above / below it, or random low bits
    const double m = std::ldexp(1.0 + static_cast<double>(rng() >> 11) * 0x1p-53, e);
    const double ulp = std::ldexp(1.0, std::max(e, f.emin) - f.precision + 1);
    const double base = round_to(plan, Rounding::TowardZero, m);
    double x = m;
    switch (rng() % 5) {
      case 0: x = base + ulp / 2; break;                                  // exact tie
      case 1: x = std::nextafter(base + ulp / 2, inf); break;             // just above a tie
      case 2: x = std::nextafter(base + ulp / 2, -inf); break;            // just below a tie
      case 3: x = base; break;                                            // representable
      default: break;                                                     // random bits
    }
    if (!std::isfinite(x)) x = m;
    v.push_back(rng() % 2 ? -x : x);
  }
  return v;
}

TEST_P(RoundSpanTier, EqualsRoundToInEveryDeterministicMode) {
  const Format custom_nosub{7, -10, 9, false};
  const Format custom_sat{5, -6, 7, true, Specials::Ieee, true};
  const Format none{4, -3, 4, true, Specials::None, true};
  const Format formats[] = {formats::fp64, formats::fp32, formats::tf32, formats::bf16, formats::fp16,
                            formats::e4m3, formats::e5m2, custom_nosub,  custom_sat,    none};
  const Rounding modes[] = {Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero,
                            Rounding::Up,          Rounding::Down,        Rounding::Odd};
  std::uint64_t seed = 1;
  for (const Format& f : formats) {
    const RoundingPlan plan(f);
    const std::vector<double> x = inputs(f, seed++);
    for (Rounding mode : modes) {
      for (std::size_t n : {x.size(), std::size_t{13}, std::size_t{7}, std::size_t{3}}) {  // ragged: tails
        std::vector<double> got(n), alias(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
        ASSERT_TRUE(round(plan, mode, std::span<const double>(x.data(), n), got));
        ASSERT_TRUE(round(plan, mode, alias, alias));
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double want = round_to(plan, mode, x[i]);
          if (std::isnan(want)) {
            bad += !std::isnan(got[i]) || !std::isnan(alias[i]);
          } else if (!same(got[i], want) || !same(alias[i], want)) {
            if (bad++ == 0)
              ADD_FAILURE() << name_of(f) << " " << name_of(mode) << " x=" << x[i] << ": " << got[i] << " vs "
                            << want;
          }
        }
        EXPECT_EQ(bad, 0u) << name_of(f) << " " << name_of(mode);
      }
    }
  }
}

/// The IEEE binary32 format under nearest-even takes the hardware conversions binary64 → binary32 → binary64
/// (NaN lanes through round_to): equal to round_to on every binary32 binade (subnormal ones included) at a
/// format value, its exact ties to both neighbours and one binary64 ulp either side of each tie, on the
/// subnormal boundary (half the smallest subnormal: a tie to +0), the normal boundary, the overflow threshold
/// (max + half an ulp: a tie to inf) and its neighbours, binary64 subnormals, ±0, ±inf, and NaNs of both signs
/// with payloads (quiet and signalling), in place and out of place.
TEST_P(RoundSpanTier, Binary32NearestEvenConversionEqualsRoundTo) {
  const RoundingPlan plan(formats::fp32);
  std::vector<double> v;
  const auto both = [&](double x) {
    v.push_back(x);
    v.push_back(-x);
  };
  for (int e = -149; e <= 127; ++e) {
    const double ulp = std::ldexp(1.0, std::max(e - 23, -149));
    for (const double m : {1.0, 1.0 + 0x1p-23, 1.5, 2.0 - 0x1p-23, 1.0 + 0x3p-23}) {
      const double f = std::ldexp(m, e);
      if (f > plan.max_finite) continue;
      for (const double off : {0.0, 0.5, -0.5, 0.25, 0.75})
        both(f + off * ulp);
      both(std::nextafter(f + 0.5 * ulp, 0.0));
      both(std::nextafter(f + 0.5 * ulp, INFINITY));
      both(std::nextafter(f - 0.5 * ulp, 0.0));
    }
  }
  const double tiny = 0x1p-149, thr = plan.max_finite + 0x1p103;  // 0x1p103: half an ulp at the top binade
  for (const double x : {0.0, tiny / 2, std::nextafter(tiny / 2, 1.0), std::nextafter(tiny / 2, 0.0), 1.5 * tiny,
                         plan.min_normal, std::nextafter(plan.min_normal, 0.0), plan.min_normal - tiny / 2, thr,
                         std::nextafter(thr, 0.0), std::nextafter(thr, INFINITY), 0x1p128, 0x1p-1074, 0x1p-1023,
                         std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()})
    both(x);
  for (const std::uint64_t payload : {std::uint64_t{1}, std::uint64_t{0x8000000000000}, std::uint64_t{0xFFFFFFFFFFFFF},
                                      std::uint64_t{0x123456789ABCD}})
    for (const std::uint64_t sign : {std::uint64_t{0}, std::uint64_t{1} << 63})
      v.push_back(std::bit_cast<double>(sign | 0x7FF0000000000000ull | payload));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) v.push_back(std::bit_cast<double>(rng()));
  std::vector<double> out(v.size()), in_place = v;
  ASSERT_TRUE(round(plan, Rounding::NearestEven, v, out));
  ASSERT_TRUE(round(plan, Rounding::NearestEven, in_place, in_place));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double want = round_to(plan, Rounding::NearestEven, v[i]);
    ASSERT_TRUE(same(out[i], want)) << std::hexfloat << v[i] << " -> " << out[i] << ", round_to " << want;
    ASSERT_TRUE(same(in_place[i], want)) << std::hexfloat << v[i] << " in place -> " << in_place[i];
  }
}

/// The IEEE binary16 format under nearest-even takes the hardware conversions binary64 → binary32 rounded to odd
/// → binary16 → binary64 (NaN lanes through round_to): equal to round_to on every binary16 value, on every tie
/// between neighbours (subnormal and normal binades, the subnormal boundary, the overflow threshold) and, for
/// each tie, one binary64 ulp, one binary32 ulp and offsets far below binary32's precision (2^-30 and 2^-45 of
/// the tie) either side — the inputs that rounding to nearest in binary32 first would send to the wrong
/// neighbour (double rounding) —, on every 251st binary32 encoding, on random binary64 values across and beyond
/// binary16's range and below binary32's, ±0, ±inf, binary64 extremes and NaNs with payloads, in place and out
/// of place.
TEST_P(RoundSpanTier, Binary16NearestEvenConversionEqualsRoundTo) {
  const RoundingPlan plan(formats::fp16);
  std::vector<double> v;
  const auto both = [&](double x) {
    v.push_back(x);
    v.push_back(-x);
  };
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {  // every finite non-negative binary16 value and the tie above it
    const int e = h >= 0x400u ? static_cast<int>(h >> 10) - 15 : -14;
    const double m = static_cast<double>(h >= 0x400u ? (h & 0x3FFu) | 0x400u : h);
    const double f = std::ldexp(m, e - 10), ulp = std::ldexp(1.0, e - 10);
    const double tie = f + 0.5 * ulp;
    both(f);
    for (const double x : {tie, tie * (1 + 0x1p-30), tie * (1 - 0x1p-30), tie * (1 + 0x1p-45), tie * (1 - 0x1p-45),
                           std::nextafter(tie, 0.0), std::nextafter(tie, INFINITY),
                           static_cast<double>(std::nextafter(static_cast<float>(tie), 0.0f)),
                           static_cast<double>(std::nextafter(static_cast<float>(tie), INFINITY))})
      both(x);
  }
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 251)
    v.push_back(static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b))));
  const double inf = std::numeric_limits<double>::infinity();
  for (const double x : {0.0, 0x1p-25, 0x1p-150, 0x1p-149, 0x1.8p-149, 0x1p-1074, 0x1p-1022, 65504.0, 65520.0,
                         std::nextafter(65520.0, 0.0), std::nextafter(65520.0, inf), 0x1p128, 0x1.fffffep127,
                         std::nextafter(0x1.fffffep127, inf), std::numeric_limits<double>::max(), inf})
    both(x);
  for (const std::uint64_t payload : {std::uint64_t{1}, std::uint64_t{0x8000000000000}, std::uint64_t{0xFFFFFFFFFFFFF}})
    for (const std::uint64_t sign : {std::uint64_t{0}, std::uint64_t{1} << 63})
      v.push_back(std::bit_cast<double>(sign | 0x7FF0000000000000ull | payload));
  std::mt19937_64 rng(16);
  for (int i = 0; i < 400000; ++i) {  // random significands, exponents from below binary32's range to past binary16's
    const int e = static_cast<int>(rng() % 200) - 170;
    v.push_back(std::ldexp(std::bit_cast<double>((rng() & 0x800FFFFFFFFFFFFFull) | 0x3FF0000000000000ull), e));
  }
  std::vector<double> out(v.size()), in_place = v;
  ASSERT_TRUE(round(plan, Rounding::NearestEven, v, out));
  ASSERT_TRUE(round(plan, Rounding::NearestEven, in_place, in_place));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double want = round_to(plan, Rounding::NearestEven, v[i]);
    if (!same(out[i], want) || !same(in_place[i], want)) {
      if (++bad <= 5)
        ADD_FAILURE() << std::hexfloat << v[i] << " -> " << out[i] << " (in place " << in_place[i] << "), round_to "
                      << want;
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << v.size();
}

TEST_P(RoundSpanTier, DeclinesStochasticAndMismatchedSizes) {
  const RoundingPlan plan(formats::fp16);
  std::vector<double> a(4, 1.0), b(3);
  EXPECT_FALSE(round(plan, Rounding::Stochastic, a, a));
  EXPECT_FALSE(round(plan, Rounding::NearestEven, a, b));
}

INSTANTIATE_TEST_SUITE_P(EveryTier, RoundSpanTier, ::testing::ValuesIn(kTiers),
                         [](const ::testing::TestParamInfo<Tier>& i) { return std::string(i.param.name); });

TEST(RoundSpan, AllFiniteFindsEveryNonFiniteLaneOnEveryTier) {
  // One ±inf or NaN (quiet, signalling, negative) at every position of ragged lengths: the 8- and 4-lane blocks,
  // the tails, the two-vector steps, the 256-value early-exit blocks; the largest finite values and zeros are finite.
  const double specials[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::signaling_NaN()};
  for (const kernels::Isa isa : {kernels::Isa::Avx512Fp16, kernels::Isa::Avx2, kernels::Isa::None}) {
    const KernelOptions opts{true, isa};
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{13},
                                std::size_t{16}, std::size_t{17}, std::size_t{256}, std::size_t{263},
                                std::size_t{600}}) {
      std::vector<double> x(n, std::numeric_limits<double>::max());
      for (std::size_t i = 0; i < n; i += 3) x[i] = i % 2 ? -0.0 : 0x1p-1074;
      EXPECT_TRUE(all_finite(x, opts)) << "n " << n << " isa " << kernels::name_of(isa);
      for (std::size_t at = 0; at < n; ++at)
        for (const double s : specials) {
          const double keep = x[at];
          x[at] = s;
          ASSERT_FALSE(all_finite(x, opts)) << "n " << n << " at " << at << " isa " << kernels::name_of(isa);
          x[at] = keep;
        }
    }
  }
}

TEST(RoundSpan, AllFiniteOfBinary32FindsEveryNonFiniteLaneOnEveryTier) {
  // The binary32 form: the 16- and 8-lane blocks, the tails and the 512-value early-exit blocks.
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN()};
  for (const kernels::Isa isa : {kernels::Isa::Avx512Fp16, kernels::Isa::Avx2, kernels::Isa::None}) {
    const KernelOptions opts{true, isa};
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{17},
                                std::size_t{32}, std::size_t{33}, std::size_t{512}, std::size_t{519},
                                std::size_t{1100}}) {
      std::vector<float> x(n, std::numeric_limits<float>::max());
      for (std::size_t i = 0; i < n; i += 3) x[i] = i % 2 ? -0.0f : 0x1p-149f;
      EXPECT_TRUE(all_finite(std::span<const float>(x), opts)) << "n " << n << " isa " << kernels::name_of(isa);
      for (std::size_t at = 0; at < n; ++at)
        for (const float s : specials) {
          const float keep = x[at];
          x[at] = s;
          ASSERT_FALSE(all_finite(std::span<const float>(x), opts))
              << "n " << n << " at " << at << " isa " << kernels::name_of(isa);
          x[at] = keep;
        }
    }
  }
}

TEST(RoundSpan, Binary16ValuesFindsEveryOtherValueOnEveryTier) {
  // binary16_values against its definition (round_to to fp16 returns the value): every fp16 encoding passes; a
  // binary32 value that is not an fp16 value (one bit beyond binary16's 11, the midpoints and the overflow edge,
  // below its subnormals, binary32 subnormals, the largest binary32) fails at every position of ragged lengths
  // (the 16- and 8-lane blocks, the masked and scalar tails, the 512-value early-exit blocks); NaNs pass exactly
  // when nan_ok.
  const RoundingPlan half(formats::fp16);
  const auto is_half = [&](float v) {
    return same(round_to(half, Rounding::NearestEven, v), static_cast<double>(v));
  };
  std::vector<float> every;  // the 65536 encodings, NaNs as they widen
  for (std::uint32_t h = 0; h < 0x10000; ++h) every.push_back(static_cast<float>(from_bits(formats::fp16, h)));
  const std::uint32_t others[] = {0x477FE001u, 0x477FF000u, 0x47800000u, 0x3F800001u, 0x3F801000u, 0xBF801000u,
                                  0x33000000u, 0x33400000u, 0x33800001u, 0x38800001u, 0xB3C00000u, 0x00000001u,
                                  0x80000001u, 0x7F7FFFFFu, 0x387FD000u};
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), std::bit_cast<float>(0x7FC00001u)};
  for (const std::uint32_t o : others) ASSERT_FALSE(is_half(std::bit_cast<float>(o))) << std::hex << o;
  for (const kernels::Isa isa : {kernels::Isa::Avx512Fp16, kernels::Isa::Avx2, kernels::Isa::None}) {
    const KernelOptions opts{true, isa};
    const std::string on = std::string(" isa ") + kernels::name_of(isa);
    EXPECT_TRUE(binary16_values(std::span<const float>(every), true, opts)) << on;
    EXPECT_FALSE(binary16_values(std::span<const float>(every), false, opts)) << on;  // its NaN encodings
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{15},
                                std::size_t{16}, std::size_t{17}, std::size_t{33}, std::size_t{512}, std::size_t{513},
                                std::size_t{1100}}) {
      std::vector<float> x(n);  // fp16 values, NaN encodings skipped (each 0x7C01.. is replaced by inf)
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = static_cast<std::uint32_t>((i * 40503u + 7u) & 0xFFFFu);
        x[i] = (h & 0x7C00u) == 0x7C00u ? std::bit_cast<float>(0x7F800000u | (h & 0x8000u) << 16)
                                         : static_cast<float>(from_bits(formats::fp16, h));
      }
      for (const bool nan_ok : {false, true})
        EXPECT_TRUE(binary16_values(std::span<const float>(x), nan_ok, opts)) << "n " << n << on;
      for (std::size_t at = 0; at < n; ++at) {
        const float keep = x[at];
        for (const std::uint32_t o : others) {
          x[at] = std::bit_cast<float>(o);
          for (const bool nan_ok : {false, true})
            ASSERT_FALSE(binary16_values(std::span<const float>(x), nan_ok, opts))
                << "n " << n << " at " << at << " value " << std::hex << o << on;
        }
        for (const float q : nans) {
          x[at] = q;
          ASSERT_TRUE(binary16_values(std::span<const float>(x), true, opts)) << "n " << n << " at " << at << on;
          ASSERT_FALSE(binary16_values(std::span<const float>(x), false, opts)) << "n " << n << " at " << at << on;
        }
        x[at] = keep;
      }
    }
  }
}

}  // namespace
}  // namespace roundoff::numerics
