// Fast float array rounding (numerics/round_simd.hpp) against independent references and the scalar round_to.
//  - All 2^32 binary32 inputs, fp16 and bf16 nearest-even (the fast path by default, the others under
//    -L exhaustive and on a 10^7 sample by default): fp16 against the hardware
//    F16C conversion (correct for subnormals, overflow and NaN), bf16 against a plain integer reference
//    written here (not vcvtneps2bf16, which flushes subnormal inputs).
//  - Stratified samples (every binary32 exponent with fractions at, beside and between the format's
//    midpoints for every possible quantum size; thresholds of the format; NaN, inf, ±0) against round_to for
//    every handled (format, mode) and every supported path.
//  - Stochastic rounding bit-identical to round_to with the same draws: from the counter stream (many seeds,
//    streams, offsets, split arrays, one or two threads), and with explicit draws at frac64 - 1, frac64,
//    frac64 + 1 so that the boundary rule (draw == frac64 rounds up only when bits remain below) is exercised.
#include <gtest/gtest.h>

// GCC 12 reports -Wmaybe-uninitialized inside the intrinsic headers (see numerics/round_simd.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/round_simd.hpp"

using namespace roundoff::numerics;
using roundoff::numerics::simd::Path;

namespace {

constexpr std::uint32_t kQuietNaN = 0x7FC00000u;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

std::string hex32(std::uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

std::vector<Path> supported_paths() {
  std::vector<Path> paths;
  for (Path p : {Path::Portable, Path::F16c, Path::Avx512})
    if (simd::path_supported(p)) paths.push_back(p);
  return paths;
}

/// The formats the fast paths handle (IEEE specials, subnormals, not saturating, within binary32).
std::vector<Format> handled_formats() {
  return {formats::fp16, formats::bf16, formats::tf32, formats::e5m2, parse_format("p5:emin-6:emax7"),
          parse_format("p2:emin-1:emax1"), parse_format("p23:emin-126:emax127"), parse_format("p12:emin-20:emax40")};
}

/// Scalar reference: static_cast<float>(round_to(...)) per element (the contract of round_array).
std::vector<float> scalar_reference(const RoundingPlan& plan, Rounding mode, const std::vector<float>& in,
                                    StochasticBits bits = {}, std::uint64_t first_index = 0) {
  std::vector<float> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint64_t draw = mode == Rounding::Stochastic ? bits.draw(first_index + i) : 0;
    out[i] = static_cast<float>(round_to(plan, mode, static_cast<double>(in[i]), draw));
  }
  return out;
}

/// Index of the first bitwise difference, or -1.
long long first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return static_cast<long long>(i);
  return -1;
}

/// Inputs that exercise every rounding decision for any format within binary32: for both signs and all 256
/// biased exponents, fractions whose low s bits (s = 0..24, every possible quantum size in encoding units)
/// are 0, 1, half-1, half, half+1 or all ones below random or extreme high bits; random encodings; the
/// format's max_finite, overflow tie, min normal, min subnormal and half of it, each ± a few encoding units;
/// NaNs (quiet, signalling, negative, payloads), ±inf, ±0.
std::vector<float> stratified_inputs(const std::vector<Format>& fs, std::size_t random_count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> u;
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t s = 0; s <= 24; ++s) {
        const std::uint32_t low_mask = s >= 23 ? 0x7FFFFFu : (1u << s) - 1;
        const std::uint32_t half = s == 0 ? 0 : (s > 23 ? 0x400000u : 1u << (s - 1));
        for (std::uint32_t high : {0u, 0x7FFFFFu, static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng())}) {
          const std::uint32_t h = high & 0x7FFFFFu & ~low_mask;
          for (std::uint32_t low : {0u, 1u, half - 1, half, half + 1, low_mask})
            u.push_back(sign | (e << 23) | h | (low & low_mask));
        }
      }
    }
  }
  for (std::size_t i = 0; i < random_count; ++i) u.push_back(static_cast<std::uint32_t>(rng()));
  for (const Format& f : fs) {
    const double big = max_finite(f);
    const double quantum_top = ulp(f, big);
    for (double v : {big, big + quantum_top / 2, min_normal(f), min_positive(f), min_positive(f) / 2,
                     min_normal(f) - min_positive(f) / 2}) {
      const auto c = bits_of(static_cast<float>(v));
      for (int d = -3; d <= 3; ++d)
        for (std::uint32_t sign : {0u, 0x80000000u}) u.push_back(sign | static_cast<std::uint32_t>(static_cast<int>(c) + d));
    }
  }
  for (std::uint32_t v : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u, 0x7FC12345u,
                          0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x7F7FFFFFu,
                          0xFF7FFFFFu, 0x007FFFFFu, 0x00800000u})
    u.push_back(v);
  std::vector<float> x(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) x[i] = float_of(u[i]);
  return x;
}

// ---------- independent references for the exhaustive sweep ----------

/// fp16 nearest-even by the F16C instruction (one element at a time via the 128-bit form).
__attribute__((target("f16c"))) float fp16_hardware(float x) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}
__attribute__((target("avx,f16c"))) void fp16_hardware8(const float* in, float* out) {
  const __m256 x = _mm256_loadu_ps(in);
  _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}

/// bf16 nearest-even on the encoding: keep the top 16 bits, add one unit there when the discarded 16 bits
/// exceed half, or equal half with an odd kept part. A carry into the exponent is the correct next binade
/// (or inf above max_finite); float subnormals are bf16 subnormals, so they need no special case.
std::uint32_t bf16_reference(std::uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kQuietNaN;
  const std::uint32_t kept = u >> 16, dropped = u & 0xFFFFu;
  const bool up = dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u));
  return (kept + (up ? 1u : 0u)) << 16;
}

/// Sweeps all 2^32 encodings through `path` and the reference, in blocks of 2^16; returns the mismatches.
template <class Reference>
std::uint64_t sweep_all(Path path, const Format& f, Reference reference, std::string& first) {
  const RoundingPlan plan(f);
  constexpr std::size_t kBlock = 1 << 16;
  std::vector<float> in(kBlock), out(kBlock), ref(kBlock);
  std::uint64_t bad = 0;
  for (std::uint64_t base = 0; base < (std::uint64_t{1} << 32); base += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) in[j] = float_of(static_cast<std::uint32_t>(base + j));
    EXPECT_TRUE(simd::round_float_with(path, plan, Rounding::NearestEven, in, out, {}, 0));
    reference(in.data(), ref.data(), kBlock);
    for (std::size_t j = 0; j < kBlock; ++j) {
      const std::uint32_t r = bits_of(ref[j]);
      const std::uint32_t want = (r & 0x7FFFFFFFu) > 0x7F800000u ? kQuietNaN : r;  // canonical NaN
      if (bits_of(out[j]) != want) {
        if (bad++ == 0)
          first = hex32(static_cast<std::uint32_t>(base + j)) + " -> " + hex32(bits_of(out[j])) + ", want " + hex32(want);
      }
    }
  }
  return bad;
}

void fp16_reference_block(const float* in, float* out, std::size_t n) {
  std::size_t i = 0;
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))
    for (; i + 8 <= n; i += 8) fp16_hardware8(in + i, out + i);
  for (; i < n; ++i) out[i] = fp16_hardware(in[i]);
}
void bf16_reference_block(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_of(bf16_reference(bits_of(in[i])));
}

}  // namespace

/// Checks one path on all 2^32 inputs for fp16 and bf16 nearest-even and prints the time.
void check_all_binary32(Path path) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string first;
  const std::uint64_t bad16 = sweep_all(path, formats::fp16, fp16_reference_block, first);
  EXPECT_EQ(bad16, 0u) << simd::path_name(path) << " fp16: first " << first;
  const std::uint64_t bad_bf = sweep_all(path, formats::bf16, bf16_reference_block, first);
  EXPECT_EQ(bad_bf, 0u) << simd::path_name(path) << " bf16: first " << first;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  all 2^32 fp16 + bf16 through %s: %.1f s\n", simd::path_name(path), s);
}

// The path round_array takes on this CPU: all 2^32 inputs in the default suite (about 8 s of CPU with
// AVX-512; the portable path takes about 30 s, so the other paths get the full sweep under -L exhaustive
// and a 10^7 sample here).
TEST(RoundSimd, AllBinary32InputsFp16AndBf16NearestEvenFastPath) {
  ASSERT_TRUE(__builtin_cpu_supports("f16c")) << "the fp16 reference needs F16C";
  check_all_binary32(simd::fast_path());
}

TEST(RoundSimdExhaustive, AllBinary32InputsFp16AndBf16NearestEvenOtherPaths) {
  ASSERT_TRUE(__builtin_cpu_supports("f16c")) << "the fp16 reference needs F16C";
  for (Path path : supported_paths())
    if (path != simd::fast_path()) check_all_binary32(path);
}

TEST(RoundSimd, SampledBinary32InputsFp16AndBf16NearestEvenOtherPaths) {
  // Every 429th encoding (10^7 of them, odd stride: all exponents, mixed low bits) plus the stratified set.
  std::vector<float> x = stratified_inputs({formats::fp16, formats::bf16}, 0, 7);
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 429) x.push_back(float_of(static_cast<std::uint32_t>(u)));
  std::vector<float> ref16(x.size()), refbf(x.size()), got(x.size());
  fp16_reference_block(x.data(), ref16.data(), x.size());
  bf16_reference_block(x.data(), refbf.data(), x.size());
  for (float& r : ref16)
    if (std::isnan(r)) r = float_of(kQuietNaN);
  for (Path path : supported_paths()) {
    ASSERT_TRUE(simd::round_float_with(path, RoundingPlan(formats::fp16), Rounding::NearestEven, x, got, {}, 0));
    EXPECT_EQ(first_difference(got, ref16), -1) << simd::path_name(path) << " fp16";
    ASSERT_TRUE(simd::round_float_with(path, RoundingPlan(formats::bf16), Rounding::NearestEven, x, got, {}, 0));
    EXPECT_EQ(first_difference(got, refbf), -1) << simd::path_name(path) << " bf16";
  }
}

TEST(RoundSimd, ReferencesAgreeWithRoundToOnSamples) {
  // The two exhaustive references are themselves checked against round_to (and so against MPFR's tests).
  const std::vector<float> x = stratified_inputs({formats::fp16, formats::bf16}, 100000, 1);
  const RoundingPlan p16(formats::fp16), pbf(formats::bf16);
  for (float v : x) {
    const std::uint32_t want16 = bits_of(static_cast<float>(round_to(p16, Rounding::NearestEven, v)));
    const std::uint32_t wantbf = bits_of(static_cast<float>(round_to(pbf, Rounding::NearestEven, v)));
    const std::uint32_t hw = bits_of(fp16_hardware(v));
    ASSERT_EQ(std::isnan(v) ? kQuietNaN : hw, want16) << hex32(bits_of(v));
    ASSERT_EQ(bf16_reference(bits_of(v)), wantbf) << hex32(bits_of(v));
  }
}

TEST(RoundSimd, EveryHandledFormatAndModeMatchesRoundToOnStratifiedSamples) {
  const std::vector<Format> fs = handled_formats();
  const std::vector<float> x = stratified_inputs(fs, 200000, 2);
  for (const Format& f : fs) {
    const RoundingPlan plan(f);
    for (Rounding mode : kAllRoundings) {
      const StochasticBits bits{42, 7};
      const std::uint64_t first_index = 1000;
      const std::vector<float> want = scalar_reference(plan, mode, x, bits, first_index);
      for (Path path : supported_paths()) {
        std::vector<float> got(x.size());
        ASSERT_TRUE(simd::round_float_with(path, plan, mode, x, got, bits, first_index))
            << simd::path_name(path) << " " << name_of(f) << " " << name_of(mode);
        long long i = first_difference(got, want);
        EXPECT_EQ(i, -1) << simd::path_name(path) << " " << name_of(f) << " " << name_of(mode) << ": input "
                         << hex32(bits_of(x[static_cast<std::size_t>(i < 0 ? 0 : i)])) << " gives "
                         << hex32(bits_of(got[static_cast<std::size_t>(i < 0 ? 0 : i)])) << ", round_to "
                         << hex32(bits_of(want[static_cast<std::size_t>(i < 0 ? 0 : i)]));
        // Again in calls of 7 elements: the tails (scalar or masked) of every path see every sample.
        const std::span<const float> in(x);
        for (std::size_t k = 0; k < x.size(); k += 7) {
          const std::size_t len = std::min<std::size_t>(7, x.size() - k);
          ASSERT_TRUE(simd::round_float_with(path, plan, mode, in.subspan(k, len),
                                             std::span<float>(got).subspan(k, len), bits, first_index + k));
        }
        i = first_difference(got, want);
        EXPECT_EQ(i, -1) << simd::path_name(path) << " " << name_of(f) << " " << name_of(mode) << ": input "
                         << hex32(bits_of(x[static_cast<std::size_t>(i < 0 ? 0 : i)])) << " gives "
                         << hex32(bits_of(got[static_cast<std::size_t>(i < 0 ? 0 : i)])) << ", round_to "
                         << hex32(bits_of(want[static_cast<std::size_t>(i < 0 ? 0 : i)]));
      }
    }
  }
}

TEST(RoundSimd, PortableIsBitIdenticalToEverySimdPathForAllModesAndLengths) {
  std::mt19937_64 rng(3);
  const std::vector<float> pool = stratified_inputs({formats::fp16, formats::bf16}, 50000, 3);
  for (const Format& f : handled_formats()) {
    const RoundingPlan plan(f);
    for (Rounding mode : kAllRoundings) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{15}, std::size_t{16},
                            std::size_t{17}, std::size_t{31}, std::size_t{33}, std::size_t{1000}, std::size_t{4099}}) {
        std::vector<float> in(n), a(n), b(n);
        for (float& v : in) v = pool[rng() % pool.size()];
        const StochasticBits bits{rng(), rng()};
        const std::uint64_t first_index = rng();
        ASSERT_TRUE(simd::round_float_portable(plan, mode, in, a, bits, first_index));
        for (Path path : supported_paths()) {
          ASSERT_TRUE(simd::round_float_with(path, plan, mode, in, b, bits, first_index));
          EXPECT_EQ(first_difference(a, b), -1) << simd::path_name(path) << " " << name_of(f) << " " << name_of(mode)
                                                << " n=" << n;
        }
      }
    }
  }
}

TEST(RoundSimd, StochasticMatchesRoundToForManySeedsStreamsAndOffsets) {
  const std::vector<float> x = stratified_inputs({formats::fp16, formats::bf16}, 20000, 4);
  for (const Format& f : {formats::fp16, formats::bf16, formats::e5m2}) {
    const RoundingPlan plan(f);
    for (const StochasticBits bits : {StochasticBits{0, 0}, StochasticBits{1, 2}, StochasticBits{~0ull, 12345}}) {
      for (std::uint64_t first_index : {std::uint64_t{0}, std::uint64_t{1} << 40, ~std::uint64_t{0} - 100}) {
        const std::vector<float> want = scalar_reference(plan, Rounding::Stochastic, x, bits, first_index);
        for (Path path : supported_paths()) {
          std::vector<float> got(x.size());
          ASSERT_TRUE(simd::round_float_with(path, plan, Rounding::Stochastic, x, got, bits, first_index));
          EXPECT_EQ(first_difference(got, want), -1) << simd::path_name(path) << " " << name_of(f);
        }
      }
    }
  }
}

TEST(RoundSimd, StochasticBoundaryDrawsMatchRoundTo) {
  // For each input, draws at frac64 - 1, frac64, frac64 + 1 and the extremes, where frac64 = floor(2^64 ·
  // (|x| - |RZ(x)|) / gap) is computed here from round_to's toward-zero and away neighbours in doubles.
  const std::vector<Format> fs = handled_formats();
  const std::vector<float> pool = stratified_inputs(fs, 20000, 5);
  std::mt19937_64 rng(5);
  for (const Format& f : fs) {
    const RoundingPlan plan(f);
    std::vector<float> in;
    std::vector<std::uint64_t> draws;
    for (float v : pool) {
      const double x = v;
      const double tz = round_to(plan, Rounding::TowardZero, x);
      const double away = std::signbit(x) ? round_to(plan, Rounding::Down, x) : round_to(plan, Rounding::Up, x);
      std::uint64_t frac64 = rng();
      if (std::isfinite(x) && std::fabs(x) <= max_finite(f) && away != tz) {
        const double scaled = std::ldexp(std::fabs(x - tz) / std::fabs(away - tz), 64);  // exact: powers of 2
        frac64 = static_cast<std::uint64_t>(scaled);
      }
      for (std::uint64_t d : {frac64 - 1, frac64, frac64 + 1, std::uint64_t{0}, ~std::uint64_t{0}, rng()}) {
        in.push_back(v);
        draws.push_back(d);
      }
    }
    std::vector<float> want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      want[i] = static_cast<float>(round_to(plan, Rounding::Stochastic, static_cast<double>(in[i]), draws[i]));
    for (Path path : supported_paths()) {
      std::vector<float> got(in.size());
      ASSERT_TRUE(simd::round_float_stochastic_with_draws(path, plan, in, got, draws));
      const long long i = first_difference(got, want);
      EXPECT_EQ(i, -1) << simd::path_name(path) << " " << name_of(f) << " input "
                       << hex32(bits_of(in[static_cast<std::size_t>(i < 0 ? 0 : i)])) << " draw "
                       << draws[static_cast<std::size_t>(i < 0 ? 0 : i)];
    }
  }
}

TEST(RoundSimd, StochasticArraysSplitAcrossCallsAndThreadsGiveTheSameBits) {
  std::mt19937_64 rng(6);
  std::vector<float> x(100003);
  for (float& v : x) v = std::ldexp(static_cast<float>(rng() >> 40) / 0x1p24f - 0.5f, static_cast<int>(rng() % 40) - 30);
  for (const Format& f : {formats::fp16, formats::bf16}) {
    const RoundingPlan plan(f);
    const StochasticBits bits{99, 3};
    const std::uint64_t first_index = 500;
    std::vector<float> whole(x.size());
    round_array(plan, Rounding::Stochastic, x, whole, bits, first_index);
    EXPECT_EQ(first_difference(whole, scalar_reference(plan, Rounding::Stochastic, x, bits, first_index)), -1);
    // Two threads, each rounding its half with first_index offset by the half's start.
    std::vector<float> split(x.size());
    const std::size_t cut = 40001;  // not a multiple of any vector width
    const std::span<const float> in(x);
    const std::span<float> out(split);
    std::thread t1([&] { round_array(plan, Rounding::Stochastic, in.first(cut), out.first(cut), bits, first_index); });
    std::thread t2([&] {
      round_array(plan, Rounding::Stochastic, in.subspan(cut), out.subspan(cut), bits, first_index + cut);
    });
    t1.join();
    t2.join();
    EXPECT_EQ(first_difference(whole, split), -1) << name_of(f);
    // In place (dst aliases src).
    std::vector<float> inplace = x;
    round_array(plan, Rounding::Stochastic, inplace, inplace, bits, first_index);
    EXPECT_EQ(first_difference(whole, inplace), -1) << name_of(f);
  }
}

TEST(RoundSimd, UnhandledFormatsAndBadSizesReturnFalse) {
  const std::vector<float> in(8, 1.5f);
  std::vector<float> out(8, 0.0f), shorter(7);
  for (const Format& f : {formats::e4m3, formats::fp32, formats::fp64, parse_format("p11:emin-14:emax15:nosub"),
                          parse_format("p11:emin-14:emax15:sat"), parse_format("p8:emin-126:emax127:nospecials")}) {
    for (Path path : supported_paths()) {
      for (Rounding mode : kAllRoundings) {
        EXPECT_FALSE(simd::round_float_with(path, RoundingPlan(f), mode, in, out, {}, 0))
            << name_of(f) << " " << simd::path_name(path);
      }
    }
  }
  EXPECT_EQ(out[0], 0.0f);  // untouched
  for (Path path : supported_paths()) {
    EXPECT_FALSE(simd::round_float_with(path, RoundingPlan(formats::fp16), Rounding::NearestEven, in, shorter, {}, 0));
  }
  // round_array still rounds them correctly through the scalar path.
  const RoundingPlan e4m3(formats::e4m3);
  std::vector<float> big{1000.0f, 17.0f, -0.0f};
  round_array(e4m3, Rounding::NearestEven, big, big);
  EXPECT_TRUE(std::isnan(big[0]));
  EXPECT_EQ(big[1], 16.0f);
  EXPECT_EQ(bits_of(big[2]), 0x80000000u);
}

TEST(RoundSimd, FastPathIsTheBestSupported) {
  const Path p = simd::fast_path();
  EXPECT_TRUE(simd::path_supported(p));
  EXPECT_STREQ(simd::fast_path_name(), simd::path_name(p));
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_EQ(p, Path::Avx512);
  }
}
