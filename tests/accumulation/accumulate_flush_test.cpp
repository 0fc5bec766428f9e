// The subnormal flush of an accumulator (numerics/accumulate.hpp `flush`: the M1 Neural Engine returns +0 for
// fp16 denormals summed inside a matmul, ane-guide part 1 ch. 3): the spec key and its errors, the guide's
// example and hand-derived signed zeros, the MPFR twin (which decides subnormality in MPFR) on fp16 pairs near
// the subnormal range (exhaustively under the `exhaustive` label, sampled by default) and on long random sums
// biased to the underflow range in every rounding mode, and every GEMM kernel tier, gemm_ranged and the
// row_reduce lanes bit for bit against the scalar path on GEMMs full of subnormal tile values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "numerics/row_reduce.hpp"
#include "tests/support/accum_mpfr_twin.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

std::string message_of(const std::string& text) {
  try {
    parse_accumulation(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(AccumulateFlush, SpecParsesPrintsAndRoundTrips) {
  const Accumulation ane = parse_accumulation("ane-tile4"), ftz = parse_accumulation("ane-tile4-ftz");
  EXPECT_TRUE(ftz.flush.tile);
  EXPECT_FALSE(ftz.flush.step);
  EXPECT_EQ(ane.flush, AccumFlush{});
  EXPECT_EQ(parse_accumulation("ane-tile4,flush=tile"), ftz);
  EXPECT_EQ(canonical(parse_accumulation("ane-tile4,flush=tile")), "ane-tile4-ftz");
  EXPECT_EQ(spec_text(ftz), "acc=fp32:nearest-even,order=seq,fused,tile=4:fp16:toward-zero,flush=tile");
  EXPECT_EQ(parse_accumulation("ane-tile4,flush=none"), ane);  // none is the default and never printed
  EXPECT_EQ(canonical(parse_accumulation("ane-tile4-ftz,flush=none")), "ane-tile4");
  EXPECT_EQ(spec_text(ane).find("flush"), std::string::npos);
  const Accumulation step16 = parse_accumulation("ane-tile4,flush=step:fp16");
  EXPECT_FALSE(step16.flush.tile);
  EXPECT_TRUE(step16.flush.step);
  ASSERT_TRUE(step16.flush.step_format.has_value());
  EXPECT_EQ(*step16.flush.step_format, formats::fp16);
  EXPECT_EQ(canonical(step16), "acc=fp32:nearest-even,order=seq,fused,tile=4:fp16:toward-zero,flush=step:fp16");
  EXPECT_EQ(canonical(parse_accumulation("fp16-seq,flush=step")), "acc=fp16:nearest-even,order=seq,fused,flush=step");
  for (const char* spec : {"ane-tile4-ftz", "ane-tile4,flush=step", "ane-tile4,flush=tile+step",
                           "ane-tile4,flush=tile+step:bf16", "fp16-reverse,flush=step:p11:emin-10:emax15",
                           "acc=fp32:stochastic,order=reverse,unfused,product=fp16,flush=step:fp16",
                           "ane-tile4-ftz,splitk=2:4", "acc=fp16,tile=3:bf16:up,flush=tile,splitk=2"}) {
    const Accumulation a = parse_accumulation(spec);
    EXPECT_EQ(parse_accumulation(canonical(a)), a) << spec << " -> " << canonical(a);
    EXPECT_EQ(parse_accumulation(spec_text(a)), a) << spec << " -> " << spec_text(a);
  }
  bool listed = false;
  for (const std::string& name : preset_accumulation_names()) listed = listed || name == "ane-tile4-ftz";
  EXPECT_TRUE(listed);
}

TEST(AccumulateFlush, BadSpecsGiveOneLineNamingTheTokenAndTheValidValues) {
  const std::pair<const char*, const char*> cases[] = {
      {"ane-tile4,flush=sideways", "'sideways'"},
      {"ane-tile4,flush=sideways", "tile+step:FORMAT"},  // the valid values
      {"ane-tile4,flush=tile:fp16", "'tile:fp16'"},      // a format belongs to the step flush
      {"ane-tile4,flush=", "''"},
      {"ane-tile4,flush=step:fp99", "fp99"},
      {"fp32-seq,flush=tile", "needs a tile stage"},
      {"fp16-pairwise,flush=step", "order=pairwise"},
      {"fp16-kahan,flush=step", "order=kahan"},
      {"fp16-splitk16-fp32,flush=step", "order=blocked"},
      {"tc-h100,flush=step", "multi-term adder"},
      {"fp16-promote128-fp32,flush=step", "promotion"},
      {"fp16-seq,splitk=2,flush=step", "splitk"},
      {"ane-tile4,flush=tile,flush=step", "repeats"},
  };
  for (const auto& [spec, want] : cases) {
    const std::string m = message_of(spec);
    EXPECT_NE(m.find(want), std::string::npos) << spec << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << spec;
  }
  Accumulation a = parse_accumulation("ane-tile4");
  a.flush.step_format = formats::fp16;  // a format without the step flush
  ASSERT_TRUE(validate(a).has_value());
  EXPECT_NE(validate(a)->find("step flush is off"), std::string::npos) << *validate(a);
  EXPECT_THROW(sum(a, std::vector<double>{1.0}), std::invalid_argument);
  a.flush.step = true;
  EXPECT_FALSE(validate(a).has_value());
}

TEST(AccumulateFlush, AneGuideDenormalPairInAMatmulGivesPositiveZero) {
  // ane-guide part 1 ch. 3: on the M1, a pair of fp16 denormals summed inside a matmul, whose exact total is a
  // representable denormal, reads back +0; the M5 (and ane-tile4, without the flush) keeps the denormal.
  const std::vector<double> pair = {3 * 0x1p-24, 5 * 0x1p-24}, ones = {1.0, 1.0};  // total 2^-21, an fp16 denormal
  const Accumulation ane = parse_accumulation("ane-tile4"), ftz = parse_accumulation("ane-tile4-ftz");
  EXPECT_TRUE(same(dot(ane, pair, ones), 0x1p-21));
  EXPECT_TRUE(same(dot(ftz, pair, ones), 0.0));  // +0
  EXPECT_TRUE(same(sum(ftz, pair), 0.0));
  // Negative denormals flush to −0 (the zero of the tile value's sign); an exactly cancelling tile is +0.
  EXPECT_TRUE(same(dot(ftz, std::vector<double>{-3 * 0x1p-24, -5 * 0x1p-24}, ones), -0.0));
  EXPECT_TRUE(same(dot(ftz, std::vector<double>{-3 * 0x1p-24, 3 * 0x1p-24}, ones), 0.0));
  // The smallest normal total is kept: 2^-14 = 2^-15 + 2^-15.
  EXPECT_TRUE(same(sum(ftz, std::vector<double>{0x1p-15, 0x1p-15}), 0x1p-14));
  // Per tile, not per sum: two tiles of tiny values flush separately although their total is normal.
  const std::vector<double> eight(8, 0x1p-17);  // tiles of 4·2^-17 = 2^-15 each
  EXPECT_TRUE(same(sum(ane, eight), 0x1p-14));
  EXPECT_TRUE(same(sum(ftz, eight), 0.0));
  // A −0 tile after a flushed +0 keeps +0 (−0 + +0 in the fp32 accumulator).
  EXPECT_TRUE(same(sum(ftz, std::vector<double>{0x1p-20, 0, 0, 0, -0x1p-20}), 0.0));
  // The same in a GEMM, on every path (kernel tiers and the generic one).
  std::vector<test::Isa> paths = test::isa_tiers(true);
  for (const test::Isa isa : paths) {
    const KernelOptions opts{isa != test::Isa::None, isa};
    double c_ane = 1.0, c_ftz = 1.0;
    gemm(ane, 1, 1, 2, ConstMatrix{pair.data(), 2}, ConstMatrix{ones.data(), 1}, &c_ane, 1, false, {}, nullptr, 1, opts);
    gemm(ftz, 1, 1, 2, ConstMatrix{pair.data(), 2}, ConstMatrix{ones.data(), 1}, &c_ftz, 1, false, {}, nullptr, 1, opts);
    EXPECT_TRUE(same(c_ane, 0x1p-21)) << k::name_of(isa) << ": " << c_ane;
    EXPECT_TRUE(same(c_ftz, 0.0)) << k::name_of(isa) << ": " << c_ftz;
  }
}

TEST(AccumulateFlush, StepFlushActsOnEveryRoundedPartialSumButNotOnC) {
  // tile=1 makes each term its own tile: the fp32 partial sums 2^-15, 2^-15 + 2^-15 flush below fp16's 2^-14.
  const Accumulation step16 = parse_accumulation("ane-tile4,tile=1,flush=step:fp16");
  const std::vector<double> x = {0x1p-15, 0x1p-15, 0x1p-14};
  EXPECT_TRUE(same(sum(parse_accumulation("ane-tile4,tile=1"), x), 0x1p-13));
  EXPECT_TRUE(same(sum(step16, x), 0x1p-14));  // 2^-15 → 0, 0 + 2^-15 → 0, 0 + 2^-14 kept
  EXPECT_TRUE(same(sum(step16, std::vector<double>{-0x1p-15}), -0.0));
  // Without a step format the accumulator's own emin: fp32 keeps 2^-15, flushes 2^-127.
  EXPECT_TRUE(same(sum(parse_accumulation("acc=fp32,flush=step"), x), 0x1p-13));
  EXPECT_TRUE(same(sum(parse_accumulation("acc=fp32,flush=step"), std::vector<double>{0x1p-127, 0x1p-127}), 0.0));
  EXPECT_TRUE(same(sum(parse_accumulation("fp32-seq"), std::vector<double>{0x1p-127, 0x1p-127}), 0x1p-126));
  // fp16 accumulator: round(2^-24·3) is a denormal and flushes; 2^-14 − 2^-24 stays below 2^-14 and flushes too.
  const Accumulation h = parse_accumulation("acc=fp16,flush=step");
  EXPECT_TRUE(same(sum(h, std::vector<double>{3 * 0x1p-24, 0x1p-14}), 0x1p-14));
  EXPECT_TRUE(same(sum(h, std::vector<double>{0x1p-14, -0x1p-24}), 0.0));
  EXPECT_TRUE(same(sum(h, std::vector<double>{-0x1p-14, 0x1p-24}), -0.0));
  // Reverse order flushes in processing order: 2^-14 first (kept), then 2^-14 + 3·2^-24 (kept).
  EXPECT_TRUE(same(sum(parse_accumulation("acc=fp16,order=reverse,flush=step"), std::vector<double>{3 * 0x1p-24, 0x1p-14}),
                   0x1p-14 + 3 * 0x1p-24));
  // gemm's C is the exact starting value, not a rounded partial: C = 2^-15 and one product 2^-15 give 2^-14
  // (flushing C first would give 0 + 2^-15 → 0); the sum after C is flushed: C = 2^-15 plus +0 gives +0.
  for (const test::Isa isa : test::isa_tiers(true)) {
    const KernelOptions opts{isa != test::Isa::None, isa};
    const double a1 = 0x1p-15, b1 = 1.0, a0 = 0.0;
    double c = 0x1p-15;
    gemm(step16, 1, 1, 1, ConstMatrix{&a1, 1}, ConstMatrix{&b1, 1}, &c, 1, true, {}, nullptr, 1, opts);
    EXPECT_TRUE(same(c, 0x1p-14)) << c;
    c = 0x1p-15;
    gemm(step16, 1, 1, 1, ConstMatrix{&a0, 1}, ConstMatrix{&b1, 1}, &c, 1, true, {}, nullptr, 1, opts);
    EXPECT_TRUE(same(c, 0.0)) << c;
  }
}

// ---- the MPFR twin ----

/// Every fp16 value (as a double) with |v| < 2^top, both signs and ±0: the subnormals and the normal binades up
/// to 2^top.
std::vector<double> fp16_below(int top) {
  std::vector<double> v;
  for (std::uint16_t bits = 0; bits < 0x7C00; ++bits) {
    const double x = static_cast<double>(std::bit_cast<_Float16>(bits));
    if (x >= std::ldexp(1.0, top)) break;
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

/// The accumulations the pair checks run: the tile flush, the step flush in fp16's own range and narrowed onto an
/// fp32 accumulator, both together, in accumulator mode `mode`.
std::vector<Accumulation> pair_accumulations(Rounding mode) {
  std::vector<Accumulation> out;
  for (const char* spec : {"ane-tile4-ftz", "ane-tile4,tile=1,flush=tile+step:fp16", "acc=fp16,flush=step",
                           "acc=fp16,unfused,product=fp16,flush=step:bf16", "acc=fp32,order=reverse,flush=step:fp16",
                           "ane-tile4,tile=2:fp16:nearest-even,flush=tile+step"}) {
    Accumulation a = parse_accumulation(spec);
    a.rounding = mode;
    out.push_back(a);
  }
  return out;
}

struct Tally {
  std::int64_t runs = 0, failures = 0, flushed = 0;
};

/// sum (and dot against ys when given) of xs under a against the twin, same stochastic bits. Counts the cases
/// where the flush changes the result (the same call with the flush off), so a test can require that its data
/// reach the flush.
void check_twin(const Accumulation& a, const std::vector<double>& xs, const std::vector<double>* ys,
                StochasticBits bits, Tally& t) {
  AccumStats ss, sd;
  const double s = sum(a, xs, bits, &ss), d = ys ? dot(a, xs, *ys, bits, &sd) : 0.0;
  const auto ts = test::twin_sum(a, xs, bits);
  const auto td = ys ? test::twin_dot(a, xs, *ys, bits) : test::TwinResult{};
  ++t.runs;
  const bool ok = same(s, ts.value) && same(d, td.value) && ss.overflows == ts.overflows && sd.overflows == td.overflows;
  if (!ok && ++t.failures <= 10) {
    std::string in;
    for (double x : xs) in += std::to_string(std::ldexp(x, 24)) + " ";
    ADD_FAILURE() << canonical(a) << " x·2^24 = " << in << ": sum " << s << " twin " << ts.value << "; dot " << d
                  << " twin " << td.value;
  }
  Accumulation off = a;
  off.flush = AccumFlush{};
  t.flushed += !same(sum(off, xs, bits), s) || (ys && !same(dot(off, xs, *ys, bits), d));
}

/// Pairs (x, y) of fp16 values below 2^top, every stride-th pair by a running index, under `accs`.
Tally fp16_pairs(int top, std::size_t stride, const std::vector<Accumulation>& accs, bool with_dot) {
  const std::vector<double> v = fp16_below(top), ys = {1.0, 0.5};
  Tally t;
  std::size_t index = 0;
  for (const Accumulation& a : accs)
    for (std::size_t i = 0; i < v.size(); ++i)
      for (std::size_t j = 0; j < v.size(); ++j) {
        if (index++ % stride != 0) continue;
        check_twin(a, {v[i], v[j]}, with_dot ? &ys : nullptr, StochasticBits{index, 7}, t);
      }
  return t;
}

TEST(AccumulateFlush, Fp16PairsNearTheSubnormalRangeMatchTheTwin) {
  // fp16 values below 2^-12 (subnormals and the two lowest normal binades, ±, ±0), a sample of the pairs in
  // every mode (every pair below 2^-13 under AccumulateFlushExhaustive).
  std::vector<Accumulation> accs;
  for (const Rounding mode : kAllRoundings)
    for (const Accumulation& a : pair_accumulations(mode)) accs.push_back(a);
  const Tally t = fp16_pairs(-12, 40009, accs, true);
  EXPECT_EQ(t.failures, 0) << "of " << t.runs;
  EXPECT_GT(t.runs, 30000);
  EXPECT_GT(t.flushed, t.runs / 10);  // the flush decides a good share of them
}

TEST(AccumulateFlushExhaustive, AllFp16PairsBelow2ToTheMinus13MatchTheTwin) {
  // Every pair of fp16 values below 2^-13 (subnormals, zeros and the lowest normal binade, ±), as sums, under
  // the six pair accumulations to nearest-even and the fp16 step flush in every other mode.
  std::vector<Accumulation> accs = pair_accumulations(Rounding::NearestEven);
  for (const Rounding mode : kAllRoundings) {
    if (mode == Rounding::NearestEven) continue;
    Accumulation a = parse_accumulation("acc=fp16,flush=step");
    a.rounding = mode;
    accs.push_back(a);
  }
  const Tally t = fp16_pairs(-13, 1, accs, false);
  EXPECT_EQ(t.failures, 0) << "of " << t.runs;
  EXPECT_EQ(t.runs, static_cast<std::int64_t>(accs.size()) * 4096 * 4096);
  EXPECT_GT(t.flushed, t.runs / 4);
}

/// n values of `in` biased to the underflow range of the threshold 2^emin: magnitudes 2^(emin−12)..2^(emin+3),
/// cancelling pairs, signed zeros and a few ordinary values.
std::vector<double> underflow_values(const Format& in, int emin, std::size_t n, std::mt19937_64& rng) {
  const RoundingPlan plan(in);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = unit(rng), sign = unit(rng) < 0.5 ? -1.0 : 1.0;
    double x;
    if (u < 0.05) x = sign * 0.0;
    else if (u < 0.25 && i > 0) x = -v[i - 1];
    else if (u < 0.3) x = sign * (1.0 + unit(rng));
    else x = sign * std::ldexp(1.0 + unit(rng), emin - 12 + static_cast<int>(unit(rng) * 16));
    v[i] = round_to(plan, Rounding::NearestEven, x);
  }
  return v;
}

TEST(AccumulateFlush, LongSumsBiasedToUnderflowMatchTheTwinInEveryMode) {
  std::mt19937_64 rng(0xf1005);
  const char* specs[] = {"ane-tile4-ftz", "ane-tile4,flush=step:fp16", "ane-tile4,flush=tile+step:fp16",
                         "ane-tile4,order=reverse,tile=3:fp16:nearest-even,flush=tile+step",
                         "acc=fp16,flush=step", "acc=bf16,order=reverse,flush=step", "acc=fp32,flush=step",
                         "acc=fp32,unfused,product=bf16,flush=step:bf16", "ane-tile4-ftz,splitk=3:4"};
  Tally t;
  for (const char* spec : specs) {
    for (const Rounding mode : kAllRoundings) {
      Accumulation a = parse_accumulation(spec);
      a.rounding = mode;
      for (const Format& in : {formats::fp16, formats::bf16}) {
        // The threshold the data straddles: the tile format's emin for the tile flush, else the step format's.
        const int emin = a.flush.step ? a.flush.step_format.value_or(a.format).emin : a.tile.format.emin;
        for (const std::size_t n : {1, 2, 5, 33, 130, 301}) {
          const auto x = underflow_values(in, emin, n, rng);
          std::vector<double> y(n);
          for (auto& v : y) v = rng() % 8 == 0 ? -1.0 : (rng() % 2 ? 1.0 : 0.5);
          check_twin(a, x, &y, StochasticBits{rng(), rng() % 100}, t);
        }
      }
    }
  }
  EXPECT_EQ(t.failures, 0) << "of " << t.runs;
  EXPECT_GT(t.flushed, t.runs / 4);
}

TEST(AccumulateFlush, GemmWithAccumulateMatchesTheTwin) {
  // C enters exactly and is not flushed; the sums after it are. Tiny C values straddle the thresholds.
  std::mt19937_64 rng(0xacc);
  const std::size_t M = 4, N = 5, K = 11;
  for (const char* spec : {"ane-tile4-ftz", "ane-tile4,flush=step:fp16", "acc=fp16,flush=step",
                           "acc=fp32:stochastic,flush=step:fp16", "ane-tile4,flush=tile+step"}) {
    const Accumulation a = parse_accumulation(spec);
    const auto A = underflow_values(formats::fp16, -14, M * K, rng);
    std::vector<double> B(K * N);
    for (auto& v : B) v = rng() % 2 ? 1.0 : -0.5;
    std::vector<double> C(M * N);
    for (auto& v : C) v = std::ldexp(static_cast<double>(static_cast<int>(rng() % 2001) - 1000), -24);
    const auto C0 = C;
    gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, true, {5, 1}, nullptr, 2);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const std::vector<double> row(A.begin() + static_cast<std::ptrdiff_t>(i * K),
                                      A.begin() + static_cast<std::ptrdiff_t>((i + 1) * K));
        std::vector<double> col(K);
        for (std::size_t kk = 0; kk < K; ++kk) col[kk] = B[kk * N + j];
        const auto t = test::twin_dot(a, row, col, StochasticBits{5, 1 + i * N + j}, true, C0[i * N + j]);
        EXPECT_TRUE(same(C[i * N + j], t.value)) << spec << " " << i << "," << j << ": " << C[i * N + j] << " vs "
                                                 << t.value;
      }
  }
}

// ---- kernels ----

/// fp16 values whose 4-term tile sums land around fp16's subnormal range (|S| ~ 2^-24..2^-12), with zeros,
/// cancellation and a few ordinary values (so tiles of every kind sit in one GEMM).
std::vector<double> subnormal_tile_values(std::mt19937_64& rng, std::size_t n) {
  const RoundingPlan plan(formats::fp16);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) {
    const unsigned r = static_cast<unsigned>(rng() % 16);
    const double y = gauss(rng);
    x = r == 0 ? 0.0 : r == 1 ? -0.0 : r == 2 ? y : std::ldexp(y, -6 - static_cast<int>(rng() % 6));
    x = round_to(plan, Rounding::NearestEven, x);
  }
  return v;
}

TEST(AccumulateFlush, EveryKernelTierEqualsTheScalarPathOnSubnormalTiles) {
  const auto tiers = test::isa_tiers();
  if (tiers.empty()) GTEST_SKIP() << "no AVX2 or AVX-512: the generic path runs";
  std::mt19937_64 rng(0x5ab);
  const Accumulation ftz = parse_accumulation("ane-tile4-ftz");
  std::int64_t compared = 0, subnormal_tiles = 0, differs_from_ane = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const std::size_t M = 1 + rng() % 19, N = 1 + rng() % 40, K = 1 + rng() % 37;
    const bool accumulate = trial % 3 == 2;
    const auto A = subnormal_tile_values(rng, M * K), B = subnormal_tile_values(rng, K * N);
    std::vector<double> C0(M * N, 0.0);
    if (accumulate)
      for (auto& c : C0) c = std::ldexp(static_cast<double>(static_cast<int>(rng() % 201) - 100), -20);
    for (std::size_t i = 0; i < M; ++i)  // subnormal tile values the kernels must flush
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t k0 = 0; k0 < K; k0 += 4) {
          double s = 0;
          for (std::size_t kk = k0; kk < std::min(K, k0 + 4); ++kk) s += A[i * K + kk] * B[kk * N + j];
          subnormal_tiles += s != 0 && std::fabs(s) < 0x1p-14;
        }
    std::vector<double> want = C0, plain = C0;
    AccumStats want_stats;
    gemm(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, want.data(), N, accumulate, {}, &want_stats,
         1, test::kernels_off());
    gemm(parse_accumulation("ane-tile4"), M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, plain.data(),
         N, accumulate, {}, nullptr, 1, test::kernels_off());
    for (std::size_t idx = 0; idx < M * N; ++idx) differs_from_ane += !same(want[idx], plain[idx]);
    for (const test::Isa isa : tiers) {
      const KernelOptions opts = test::kernels_at(isa);
      ASSERT_NE(k::kernel_name(ftz, opts), nullptr);
      EXPECT_NE(std::string(k::kernel_name(ftz, opts)).find("ftz"), std::string::npos);
      for (const int threads : {1, 2}) {
        std::vector<double> C = C0;
        AccumStats stats;
        ASSERT_TRUE(k::gemm_fast(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                 accumulate, &stats, threads, nullptr, nullptr, opts))
            << k::name_of(isa);
        EXPECT_EQ(stats.overflows, want_stats.overflows);
        for (std::size_t idx = 0; idx < M * N; ++idx) {
          ASSERT_TRUE(same(C[idx], want[idx])) << k::name_of(isa) << " trial " << trial << " at " << idx / N << ','
                                               << idx % N << ": " << C[idx] << " want " << want[idx];
          ++compared;
        }
      }
      // gemm_ranged's kernels: every row its own k-range, tiles counted from its lo.
      std::vector<KRange> ranges(M);
      for (std::size_t i = 0; i < M; ++i) {
        ranges[i].lo = rng() % K;
        ranges[i].hi = ranges[i].lo + 1 + rng() % (K - ranges[i].lo);
      }
      std::vector<double> Cr(M * N), Cg(M * N);
      gemm_ranged(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, ranges, Cg.data(), N, {},
                  test::kernels_off());
      ASSERT_TRUE(k::gemm_ranged_fast(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, ranges.data(),
                                      Cr.data(), N, opts));
      for (std::size_t idx = 0; idx < M * N; ++idx)
        ASSERT_TRUE(same(Cr[idx], Cg[idx])) << "ranged " << k::name_of(isa) << " at " << idx << ": " << Cr[idx]
                                            << " want " << Cg[idx];
    }
  }
  EXPECT_GT(compared, 5000);
  EXPECT_GT(subnormal_tiles, 2000);
  EXPECT_GT(differs_from_ane, 200);  // the flush changes many of these outputs
}

TEST(AccumulateFlush, TilesOfTheScalarFallbackFlushToo) {
  // Tiles that neither the binary32 bracket nor the binary64 sums can certify (1024 + 2^-48 is inexact in
  // binary64), so the kernels' scalar fallback computes them, with a subnormal value: 1024 + 2^-48 − 1024 +
  // 2^-20·c, c = 2^(j mod 3) in column j, rounds toward zero to 2^-20·c (an fp16 subnormal) and flushes to +0;
  // row 1 is its negative (−0). A 16-column row so that every lane of a vector sees it.
  if (test::isa_tiers().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double e = 0x1p-24, m = 0x1p-10;
  const std::vector<double> A = {32, e, -32, m,  //
                                 -32, -e, 32, -m};
  const std::size_t M = 2, N = 16, K = 4;
  std::vector<double> B(K * N);
  for (std::size_t j = 0; j < N; ++j) {
    B[0 * N + j] = 32;
    B[1 * N + j] = e;
    B[2 * N + j] = 32;
    B[3 * N + j] = std::ldexp(m, static_cast<int>(j % 3));
  }
  const Accumulation ane = parse_accumulation("ane-tile4"), ftz = parse_accumulation("ane-tile4-ftz");
  for (const test::Isa isa : test::isa_tiers()) {
    const KernelOptions opts = test::kernels_at(isa);
    std::vector<double> C(M * N, 1.0), P(M * N, 1.0);
    ASSERT_TRUE(k::gemm_fast(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, false,
                             nullptr, 1, nullptr, nullptr, opts));
    ASSERT_TRUE(k::gemm_fast(ane, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, P.data(), N, false,
                             nullptr, 1, nullptr, nullptr, opts));
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const double tiny = std::ldexp(0x1p-20, static_cast<int>(j % 3));
        EXPECT_TRUE(same(P[i * N + j], i == 0 ? tiny : -tiny)) << k::name_of(isa) << " ane-tile4 " << i << ',' << j
                                                               << ": " << P[i * N + j];
        EXPECT_TRUE(same(C[i * N + j], i == 0 ? 0.0 : -0.0)) << k::name_of(isa) << " ftz " << i << ',' << j << ": "
                                                             << C[i * N + j];
      }
  }
}

TEST(AccumulateFlush, BinaryThirtyTwoBracketsAroundTheSubnormalRangeDecline) {
  // Tiles whose binary32 bracket [lo, hi] has one end in fp16's subnormal range and the other not on the same
  // fp16 value, so only the binary64 path may give the value (products 256, ±2^-20, −256, t: the sum 256 + 2^-20
  // loses its tail in binary32, rounded down and up to 256 and 256 + 2^-15).
  //   row 0: t = −2^-19: hi = 2^-15 − 2^-19 > 0 (subnormal), lo < 0; S = 2^-20 − 2^-19 = −2^-20 flushes to −0 (taking
  //          hi's fp16 value and flushing it would give +0);
  //   row 1: t = −63·2^-20 after −2^-20: hi = −63·2^-20 (subnormal), lo normal; S = −2^-14 is normal and kept.
  if (test::isa_tiers().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double m = 0x1p-10;
  const std::vector<double> A = {16, m, -16, -2 * m,  //
                                 16, -m, -16, -63 * m};
  const std::vector<double> b = {16, m, 16, m};
  const std::size_t M = 2, N = 16, K = 4;
  std::vector<double> B(K * N);
  for (std::size_t kk = 0; kk < K; ++kk)
    for (std::size_t j = 0; j < N; ++j) B[kk * N + j] = b[kk];
  const Accumulation ftz = parse_accumulation("ane-tile4-ftz");
  for (const test::Isa isa : test::isa_tiers()) {
    std::vector<double> C(M * N, 1.0);
    ASSERT_TRUE(k::gemm_fast(ftz, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, false,
                             nullptr, 1, nullptr, nullptr, test::kernels_at(isa)));
    for (std::size_t j = 0; j < N; ++j) {
      EXPECT_TRUE(same(C[j], -0.0)) << k::name_of(isa) << " row 0 column " << j << ": " << C[j];
      EXPECT_TRUE(same(C[N + j], -0x1p-14)) << k::name_of(isa) << " row 1 column " << j << ": " << C[N + j];
    }
  }
  EXPECT_TRUE(same(dot(ftz, std::vector<double>(A.begin(), A.begin() + 4), b), -0.0));
  EXPECT_TRUE(same(dot(ftz, std::vector<double>(A.begin() + 4, A.end()), b), -0x1p-14));
}

/// The step flush has kernels for fp16 sequential GEMMs (fp16-ftz-rto-*: the flush threshold is fp16's own 2^-14)
/// and for the row reductions without a tile stage (any threshold); every other combination runs the definition.
TEST(AccumulateFlush, StepFlushKernelsWhereTheyExistAndTheTileFlushKeepsOne) {
  for (const test::Isa isa : test::isa_tiers()) {
    const KernelOptions opts = test::kernels_at(isa);
    const double x[] = {0x1p-15, 0x1p-15, 1.0, 1.0};
    const KRange r[2] = {{0, 2}, {0, 1}};
    for (const char* spec : {"ane-tile4,flush=step", "ane-tile4,flush=step:fp16", "ane-tile4,flush=tile+step",
                             "fp32-seq,flush=step", "bf16-seq,flush=step:fp16", "fp64-seq,flush=step",
                             "fp16-seq,flush=step:fp32", "fp16-unfused-seq,flush=step"}) {
      const Accumulation a = parse_accumulation(spec);
      EXPECT_EQ(k::kernel_name(a, opts), nullptr) << spec;
      double C[4] = {};
      EXPECT_FALSE(k::gemm_fast(a, 2, 2, 2, ConstMatrix{x, 2}, ConstMatrix{x, 2}, C, 2, false, nullptr, 1, nullptr,
                                nullptr, opts))
          << spec;
      EXPECT_FALSE(k::gemm_ranged_fast(a, 2, 2, 2, ConstMatrix{x, 2}, ConstMatrix{x, 2}, r, C, 2, opts)) << spec;
    }
    for (const char* spec : {"ane-tile4,flush=step", "ane-tile4,flush=tile+step", "fp64-seq,flush=step"})
      EXPECT_EQ(row_kernel_name(parse_accumulation(spec), opts), nullptr) << spec;
    for (const char* spec : {"fp32-seq,flush=step", "bf16-seq,flush=step:fp16", "fp16-seq,flush=step"})
      EXPECT_NE(row_kernel_name(parse_accumulation(spec), opts), nullptr) << spec;
    for (const char* spec : {"fp16-seq,flush=step", "fp16-seq,flush=step:fp16"}) {
      const Accumulation a = parse_accumulation(spec);
      EXPECT_STREQ(k::kernel_name(a, opts), isa == test::Isa::Avx2 ? "fp16-ftz-rto-avx2" : "fp16-ftz-rto-avx512");
      // (0,0): RN16(2^-30) = +0, then +0 + 2^-15 = 2^-15, an fp16 subnormal: flushed to +0 (without the flush
      // 2^-15); (1,1): 2^-15 (flushed) + 1 = 1.
      double C[4] = {}, want[4] = {};
      ASSERT_TRUE(k::gemm_fast(a, 2, 2, 2, ConstMatrix{x, 2}, ConstMatrix{x, 2}, C, 2, false, nullptr, 1, nullptr,
                               nullptr, opts))
          << spec;
      gemm(a, 2, 2, 2, ConstMatrix{x, 2}, ConstMatrix{x, 2}, want, 2, false, {}, nullptr, 1, test::kernels_off());
      for (int i = 0; i < 4; ++i) EXPECT_EQ(std::bit_cast<std::uint64_t>(C[i]), std::bit_cast<std::uint64_t>(want[i])) << spec << ' ' << i;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(C[0]), std::bit_cast<std::uint64_t>(0.0)) << spec;
      EXPECT_EQ(C[3], 1.0) << spec;
    }
    EXPECT_STREQ(k::kernel_name(parse_accumulation("ane-tile4-ftz"), opts),
                 isa == test::Isa::Avx2 ? "ane-tile4-ftz-avx2" : "ane-tile4-ftz-avx512");
    EXPECT_NE(row_kernel_name(parse_accumulation("ane-tile4-ftz"), opts), nullptr);
  }
}

TEST(AccumulateFlush, RowReduceLanesFlushTilesAsDotDoes) {
  std::mt19937_64 rng(0x20e);
  const std::size_t R = 45;
  std::vector<std::size_t> len(R);
  for (auto& l : len) l = rng() % 40;
  const std::size_t ld = 40;
  const auto x = subnormal_tile_values(rng, R * ld), y = subnormal_tile_values(rng, R * ld);
  std::int64_t checked = 0, differs = 0;
  for (const char* spec : {"ane-tile4-ftz", "ane-tile4,tile=3,flush=tile", "acc=fp16,tile=2:bf16,flush=tile"}) {
    const Accumulation a = parse_accumulation(spec);
    Accumulation off = a;
    off.flush = AccumFlush{};
    for (const test::Isa isa : test::isa_tiers()) {
      const KernelOptions opts = test::kernels_at(isa);
      ASSERT_NE(row_kernel_name(a, opts), nullptr) << spec;
      for (const bool is_dot : {false, true}) {
        RowBatch rb{len, x.data(), static_cast<std::ptrdiff_t>(ld), 1};
        if (is_dot) {
          rb.y = y.data();
          rb.y_row = static_cast<std::ptrdiff_t>(ld);
          rb.y_step = 1;
        }
        std::vector<double> out(R);
        ASSERT_TRUE(reduce_rows(a, rb, out, nullptr, opts));
        for (std::size_t r = 0; r < R; ++r) {
          const double want = is_dot ? dot(a, x.data() + r * ld, 1, y.data() + r * ld, 1, len[r])
                                     : sum(a, std::span<const double>(x.data() + r * ld, len[r]));
          const double plain = is_dot ? dot(off, x.data() + r * ld, 1, y.data() + r * ld, 1, len[r])
                                      : sum(off, std::span<const double>(x.data() + r * ld, len[r]));
          EXPECT_TRUE(same(out[r], want)) << spec << ' ' << k::name_of(isa) << " row " << r << ": " << out[r]
                                          << " want " << want;
          ++checked;
          differs += !same(want, plain);
        }
      }
    }
  }
  if (checked > 0) {
    EXPECT_GT(differs, 20);
  }
}

}  // namespace
}  // namespace roundoff::numerics
