// The tile-stage GEMM kernels (ane-tile4: tiles of 4 exact products rounded toward zero to fp16, fed to an
// fp32 accumulator) against three independent results: a naive tile-stage loop over ExactSum (the Kulisch
// oracle, tested against MPFR in exact_dot_test), the MPFR twin of the Accumulation, and numerics::gemm's
// generic path with the kernels switched off. Random ragged shapes (K not a multiple of 4, so the last tile is
// partial), the regimes normal / inf-NaN-±0 / overflowing tiles / subnormal tile sums / exponent-spread tiles
// that binary64 cannot sum exactly (the kernels' scalar fallback), accumulate on and off, 1 and 2 threads, every
// ISA level the CPU has (AVX2, AVX-512, AVX512-FP16; each forced).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/arith.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "tests/support/accum_mpfr_twin.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;

bool same(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

struct Naive {
  double value = 0;
  std::int64_t overflows = 0;
  std::int64_t spread_tiles = 0;  ///< finite tiles whose sequential binary64 sum is inexact
};

/// The tile stage by its definition (accumulate.hpp): each tile's exact sum (ExactSum) rounded once toward zero
/// to fp16, +0 when exactly zero, the IEEE sum of its non-finite terms when it has any; then the binary32 sum
/// s = round(T_0) or s = round(C + T_0), s = round(s + T_j). Overflow (IEEE 754 §7.4): a finite tile sum whose
/// toward-zero rounding with one more binade exceeds 65504; an accumulator step on finite operands giving inf.
Naive naive_tile_dot(const std::vector<double>& A, const std::vector<double>& B, std::size_t N, std::size_t K,
                     std::size_t i, std::size_t j, bool accumulate, double c0) {
  const RoundingPlan f32(formats::fp32), f16(formats::fp16);
  Format wider = formats::fp16;
  wider.emax += 1;
  const RoundingPlan f16_probe(wider);
  Naive out;
  double s = c0;
  bool have = accumulate;
  for (std::size_t k0 = 0; k0 < K; k0 += 4) {
    ExactSum exact;
    double seq = 0;
    bool seq_exact = true;
    for (std::size_t kk = k0; kk < std::min(K, k0 + 4); ++kk) {
      const double x = A[i * K + kk], y = B[kk * N + j];
      exact.add_product(x, y);
      const double p = x * y, t = seq + p;
      seq_exact = seq_exact && std::isfinite(p) && t - seq == p && t - p == seq;
      seq = t;
    }
    double t;
    if (!exact.is_finite()) {
      t = exact.is_nan() ? std::numeric_limits<double>::quiet_NaN()
                         : std::copysign(std::numeric_limits<double>::infinity(), exact.sign());
    } else if (exact.sign() == 0) {
      t = 0.0;
    } else {
      t = exact.round(f16, Rounding::TowardZero);
      if (std::fabs(exact.round(f16_probe, Rounding::TowardZero)) > 65504.0) ++out.overflows;
      if (!seq_exact) ++out.spread_tiles;
    }
    const double r = have ? add(f32, Rounding::NearestEven, s, t) : round_to(f32, Rounding::NearestEven, t);
    if (have && std::isinf(r) && std::isfinite(s) && std::isfinite(t)) ++out.overflows;
    s = r;
    have = true;
  }
  out.value = s;
  return out;
}

enum class Regime { Normal, Specials, Overflow, Tiny, Spread };

/// fp16 values (held in doubles) of a regime. Overflow: products near 2^16 and above, so tile sums overflow fp16.
/// Tiny: tile sums in fp16's subnormal range. Spread: big values (2^4..2^8) mixed with the smallest subnormals,
/// so a tile holds products 2^-48 apart from 2^16 that binary64 cannot sum exactly, with cancellation.
std::vector<double> tile_values(std::mt19937_64& rng, std::size_t n, Regime regime) {
  const RoundingPlan plan(formats::fp16);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) {
    double y = gauss(rng);
    const double u = unit(rng);
    switch (regime) {
      case Regime::Normal: break;
      case Regime::Specials:
        if (u < 0.01) y = std::numeric_limits<double>::infinity();
        else if (u < 0.02) y = -std::numeric_limits<double>::infinity();
        else if (u < 0.03) y = std::numeric_limits<double>::quiet_NaN();
        else if (u < 0.10) y = 0.0;
        else if (u < 0.15) y = -0.0;
        break;
      case Regime::Overflow: y *= 300.0; break;
      case Regime::Tiny: y = std::ldexp(y, -9); break;
      case Regime::Spread:
        y = u < 0.5 ? std::ldexp(std::round(8 * y), static_cast<int>(rng() % 5))
                    : std::ldexp(static_cast<double>(1 + rng() % 3), -24) * (y < 0 ? -1 : 1);
        break;
    }
    x = round_to(plan, Rounding::NearestEven, y);
  }
  return v;
}

std::vector<k::Isa> isas_with_tile_kernel() {
  std::vector<k::Isa> out;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512, k::Isa::Avx512Fp16})
    if (k::detected_isa() >= isa) out.push_back(isa);
  return out;
}

/// A hand-made tile row: A's values a, B's column b, the expected result and overflow count.
struct HandTile {
  std::vector<double> a, b;
  double want;
  std::int64_t overflows = 0;
};

class GemmTileKernel : public ::testing::Test {
 protected:
  const Accumulation ane = parse_accumulation("ane-tile4");
};

TEST_F(GemmTileKernel, BitIdenticalToDefinitionOnRandomShapes) {
  const auto isas = isas_with_tile_kernel();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU: the generic path runs";
  std::mt19937_64 rng(0x711e4);
  std::uniform_int_distribution<std::size_t> dim(1, 45), kdim(1, 70);
  const Regime regimes[] = {Regime::Normal, Regime::Specials, Regime::Overflow, Regime::Tiny, Regime::Spread};
  std::int64_t compared = 0, nonfinite = 0, overflow_events = 0, spread_tiles = 0, subnormal_tiles = 0, ragged = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t M = dim(rng), N = dim(rng), K = kdim(rng);
    const Regime regime = regimes[trial % 5];
    const bool accumulate = trial % 3 == 1;
    ragged += K % 4 != 0;
    const auto A = tile_values(rng, M * K, regime), B = tile_values(rng, K * N, regime);
    std::vector<double> C0(M * N, 0.0);
    if (accumulate) C0 = tile_values(rng, M * N, Regime::Normal);
    std::vector<double> want(M * N);
    std::int64_t want_overflows = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const Naive r = naive_tile_dot(A, B, N, K, i, j, accumulate, C0[i * N + j]);
        want[i * N + j] = r.value;
        want_overflows += r.overflows;
        spread_tiles += r.spread_tiles;
        nonfinite += !std::isfinite(r.value);
      }
    for (std::size_t i = 0; i < M; ++i)  // subnormal tile values (the Tiny regime must reach them)
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t k0 = 0; k0 < K; k0 += 4) {
          double t = 0;
          for (std::size_t kk = k0; kk < std::min(K, k0 + 4); ++kk) t += A[i * K + kk] * B[kk * N + j];
          subnormal_tiles += std::isfinite(t) && t != 0 && std::fabs(t) < 0x1p-14;
        }
    {  // numerics::gemm's generic path must agree with the naive loop.
      std::vector<double> C = C0;
      AccumStats stats;
      {  // kernels off: the generic path
        gemm(ane, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, accumulate, {}, &stats, 1, ::roundoff::test::kernels_off());
      }
      EXPECT_EQ(stats.overflows, want_overflows) << "generic, trial " << trial;
      for (std::size_t idx = 0; idx < M * N; ++idx)
        ASSERT_TRUE(same(C[idx], want[idx])) << "generic path differs from the naive loop, trial " << trial;
    }
    for (const k::Isa isa : isas) {
      const KernelOptions opts{true, isa};
      for (const int threads : {1, 2}) {
        std::vector<double> C = C0;
        AccumStats stats;
        ASSERT_TRUE(k::gemm_fast(ane, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                 accumulate, &stats, threads, nullptr, nullptr, opts))
            << "kernel declined, trial " << trial;
        EXPECT_EQ(stats.overflows, want_overflows) << "trial " << trial << " isa " << k::name_of(isa);
        EXPECT_EQ(stats.terms, static_cast<std::int64_t>(M * N * K));
        for (std::size_t idx = 0; idx < M * N; ++idx) {
          ASSERT_TRUE(same(C[idx], want[idx]))
              << "isa " << k::name_of(isa) << " threads " << threads << " trial " << trial << " M N K " << M << ' '
              << N << ' ' << K << " at (" << idx / N << ',' << idx % N << ") got " << C[idx] << " want "
              << want[idx] << " accumulate " << accumulate;
          ++compared;
        }
      }
    }
    overflow_events += want_overflows;
  }
  // The regimes must reach the cases they are for, or the test proves nothing about them.
  EXPECT_GT(compared, 10000);
  EXPECT_GT(nonfinite, 0);
  EXPECT_GT(overflow_events, 0);
  EXPECT_GT(spread_tiles, 100);  // tiles the kernel must hand to its scalar fallback
  EXPECT_GT(subnormal_tiles, 100);
  EXPECT_GT(ragged, 0);
}

TEST_F(GemmTileKernel, MatchesTheMpfrTwinWithAccumulate) {
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(0x7771);
  const std::size_t M = 5, N = 19, K = 23;
  for (const Regime regime : {Regime::Normal, Regime::Overflow, Regime::Tiny, Regime::Spread}) {
    const auto A = tile_values(rng, M * K, regime), B = tile_values(rng, K * N, regime);
    std::vector<double> C(M * N);
    for (auto& v : C) v = std::ldexp(static_cast<double>(static_cast<std::int64_t>(rng() % 200001) - 100000), -7);
    const auto C0 = C;
    ASSERT_TRUE(k::gemm_fast(ane, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, true,
                             nullptr, 2));
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        std::vector<double> row(A.begin() + static_cast<std::ptrdiff_t>(i * K),
                                A.begin() + static_cast<std::ptrdiff_t>((i + 1) * K));
        std::vector<double> col(K);
        for (std::size_t kk = 0; kk < K; ++kk) col[kk] = B[kk * N + j];
        const auto t = test::twin_dot(ane, row, col, {}, true, C0[i * N + j]);
        ASSERT_TRUE(same(C[i * N + j], t.value)) << i << ',' << j << ": " << C[i * N + j] << " vs " << t.value;
      }
  }
}

TEST_F(GemmTileKernel, AdversarialTilesTakeTheFallback) {
  // Tiles whose binary64 running sum is inexact and where rounding that sum would give the wrong fp16 value,
  // sign or overflow count. Products: 32·32 = 1024, 256·256 = 65536, 2^-24·2^-24 = 2^-48.
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double e = 0x1p-24;
  const std::vector<HandTile> tiles = {
      // 1024 − 2^-48: RZ gives 1023.5, the binary64 sums bracket 1024.
      {{32, -e, e, -e}, {32, e, e, e}, 1023.5, 0},
      // 1024 + 2^-48 − 1024 − 2^-47 = −2^-48 (−0), then a ragged one-term tile 2^-47 (+0): −0 + +0 = +0.
      {{32, e, -32, -e, 2 * e}, {32, e, 32, 2 * e, e}, 0.0, 0},
      // 1024 + 2^-48 − 1024 − 2^-47 = −2^-48: a negative tiny sum, RZ gives −0.
      {{32, e, -32, -e}, {32, e, 32, 2 * e}, -0.0, 0},
      // 65536 − 2^-48: 65504, no overflow; 65536 + 2^-48 − 2^-48 + 2^-48: overflow (counted), 65504.
      {{256, -e, 0, 0}, {256, e, 0, 0}, 65504.0, 0},
      {{256, e, -e, e}, {256, e, e, e}, 65504.0, 1},
  };
  for (const k::Isa isa : isas_with_tile_kernel()) {
    const KernelOptions opts{true, isa};
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      const HandTile& tile = tiles[t];
      const std::size_t K = tile.a.size();
      double C = 1.0;
      AccumStats stats;
      ASSERT_TRUE(k::gemm_fast(ane, 1, 1, K, ConstMatrix{tile.a.data(), K}, ConstMatrix{tile.b.data(), 1}, &C, 1,
                               false, &stats, 1, nullptr, nullptr, opts));
      const Naive r = naive_tile_dot(tile.a, tile.b, 1, K, 0, 0, false, 0.0);
      EXPECT_TRUE(same(C, tile.want)) << "tile " << t << " got " << C << " want " << tile.want;
      EXPECT_TRUE(same(r.value, tile.want)) << "naive loop, tile " << t << ": " << r.value;
      EXPECT_GT(r.spread_tiles, 0) << "tile " << t << " is not a fallback case";
      EXPECT_EQ(stats.overflows, tile.overflows) << "tile " << t;
    }
  }
}

TEST_F(GemmTileKernel, Binary32BracketsThatStraddleAnFp16ValueTakeTheBinary64Path) {
  // Tiles binary64 sums exactly but binary32 cannot: 64·32 = 2048 and ±2^-10·2^-10 = ±2^-20. Rounded down and
  // up in binary32 (ulp 2^-13 below 2048, 2^-12 above) the sums bracket an fp16 value, so the binary32 attempt
  // must decline; taking either end would give the neighbour of the right fp16 value for one sign. The AVX2
  // kernel's bracket (a round-to-nearest sum ± an error bound) must decline them too.
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double e = 0x1p-10;
  const std::vector<HandTile> tiles = {
      {{64, -e, 0, 0}, {32, e, 0, 0}, 2047.0},    // 2048 − 2^-20: RZ16 2047 (fp16 ulp 1 below 2048)
      {{-64, e, 0, 0}, {32, e, 0, 0}, -2047.0},   // −2048 + 2^-20
      {{64, e, 0, 0}, {32, e, 0, 0}, 2048.0},     // 2048 + 2^-20: both ends round toward zero to 2048
      {{64, -e, e, -e}, {32, e, e, e}, 2047.0},   // 2048 − 2^-20 + 2^-20 − 2^-20, a full tile of 4
      // Binary32 errs before a cancellation (the AVX2 kernel's bracket from round-to-nearest sums must bound
      // every step's error, not only the last one's): 2^13 − 3·2^-14 rounds to 2^13 (spacing 2^-11 below it),
      // − 2^13 cancels it, + (1 + 2^-10 + 2^-13) is exact. S = 1 + 2^-10 − 2^-14: RZ16 gives 1, while the
      // round-to-nearest sum rounds toward zero to 1 + 2^-10.
      {{0x1p7, -3 * 0x1p-7, -0x1p7, 59 * 0x1p-6}, {0x1p6, 0x1p-7, 0x1p6, 139 * 0x1p-7}, 1.0},
      {{-0x1p7, 3 * 0x1p-7, 0x1p7, -59 * 0x1p-6}, {0x1p6, 0x1p-7, 0x1p6, 139 * 0x1p-7}, -1.0},
      // The same for the sign of a tiny sum: 1 + 2^-30 rounds to 1, − 1 cancels it, − 2^-40 is exact. S =
      // 2^-30 − 2^-40 > 0 rounds toward zero to +0; the round-to-nearest sum −2^-40 would give −0.
      {{1, 0x1p-15, -1, -0x1p-20}, {1, 0x1p-15, 1, 0x1p-20}, 0.0},
  };
  for (const k::Isa isa : isas_with_tile_kernel()) {
    const KernelOptions opts{true, isa};
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      const HandTile& tile = tiles[t];
      const std::size_t K = tile.a.size();
      // 16 columns so that the 16-lane kernels (not only their ragged edge) see the tile; column j scales B by
      // 2^(j mod 3) (exact; the sums scale too).
      const std::size_t N = 16;
      std::vector<double> B(K * N);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t j = 0; j < N; ++j) B[k * N + j] = std::ldexp(tile.b[k], static_cast<int>(j % 3));
      std::vector<double> C(N, 0.0);
      ASSERT_TRUE(k::gemm_fast(ane, 1, N, K, ConstMatrix{tile.a.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                               false, nullptr, 1, nullptr, nullptr, opts));
      for (std::size_t j = 0; j < N; ++j) {
        const double want = naive_tile_dot(tile.a, B, N, K, 0, j, false, 0.0).value;
        EXPECT_TRUE(same(C[j], want)) << k::name_of(isa) << " tile " << t << " column " << j << " got " << C[j]
                                      << " want " << want;
      }
      EXPECT_TRUE(same(C[0], tile.want)) << k::name_of(isa) << " tile " << t << " got " << C[0];
    }
  }
}

TEST_F(GemmTileKernel, ZeroTilesOfOneFullTileOn16Columns) {
  // One full tile (K = 4) per output, 16 columns (c = 2^-24·2^(j mod 3) in column j), no accumulate, so each
  // result is the tile value itself. B's column: (c, −c, 2^-24, −0). Row 0: every product −0 (S = 0: +0, though
  // both binary32 sums are −0). Row 1: c − c (S = 0 by cancellation: +0; the sum rounded down is −0). Row 2:
  // −2^-24·c − 2^-48 (a tiny negative S: −0). Row 3: the positive one (+0).
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double e = 0x1p-24;
  const std::vector<double> A = {-0.0, 0.0, -0.0, 1.0,  //
                                 1.0,  1.0, 0.0,  0.0,  //
                                 -e,   0.0, -e,   0.0,  //
                                 e,    0.0, e,    0.0};
  const std::size_t M = 4, N = 16, K = 4;
  std::vector<double> B(K * N);
  for (std::size_t j = 0; j < N; ++j) {
    const double c = std::ldexp(e, static_cast<int>(j % 3));
    B[0 * N + j] = c;
    B[1 * N + j] = -c;
    B[2 * N + j] = e;
    B[3 * N + j] = -0.0;
  }
  for (const k::Isa isa : isas_with_tile_kernel()) {
    const KernelOptions opts{true, isa};
    std::vector<double> C(M * N, 1.0);
    ASSERT_TRUE(k::gemm_fast(ane, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, false,
                             nullptr, 1, nullptr, nullptr, opts));
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const double want = naive_tile_dot(A, B, N, K, i, j, false, 0.0).value;
        EXPECT_TRUE(same(C[i * N + j], want))
            << k::name_of(isa) << " row " << i << " column " << j << " got " << C[i * N + j] << " want " << want;
        EXPECT_TRUE(same(want, i == 2 ? -0.0 : 0.0)) << "row " << i << " column " << j << ": " << want;
      }
  }
}

TEST_F(GemmTileKernel, SignedZeroTilesAndSaturation) {
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double e = 0x1p-24, max32 = std::numeric_limits<float>::max();
  // Row 0: every product −0 (tiles of 4 and 2): both tiles are +0 (exactly zero sums), so is the result.
  // Row 1: tiles of −2^-48 and −2^-48 + 0 round toward zero to −0: −0 + −0 = −0.
  // Row 2: the tile 2·65504 overflows fp16 (one event) to 65504 under RZ; from C = max32 the fp32 sum stays
  //        max32 (65504 is far below half its ulp, 2^103): the accumulator cannot overflow on fp16 tiles.
  const double A[] = {-0.0, 0.0, -0.0, 1.0, -0.0, 1.0,  //
                      -e,   0.0, 0.0,  0.0, -e,  0.0,  //
                      0.0,  -65504.0, 65504.0, 0.0, 0.0, 0.0};
  const double B[] = {e, -1.0, 1.0, -0.0, e, -0.0};
  for (const k::Isa isa : isas_with_tile_kernel()) {
    const KernelOptions opts{true, isa};
    for (const bool accumulate : {false, true}) {
      double C[3] = {-0.0, -0.0, max32};
      AccumStats stats;
      ASSERT_TRUE(k::gemm_fast(ane, 3, 1, 6, ConstMatrix{A, 6}, ConstMatrix{B, 1}, C, 1, accumulate, &stats, 1, nullptr, nullptr, opts));
      EXPECT_TRUE(same(C[0], 0.0)) << C[0];
      EXPECT_TRUE(same(C[1], -0.0)) << C[1];
      EXPECT_EQ(C[2], accumulate ? max32 : 65504.0);
      EXPECT_EQ(stats.overflows, 1) << "accumulate " << accumulate;
      for (std::size_t i = 0; i < 3; ++i) {
        const std::vector<double> a(A + 6 * i, A + 6 * i + 6), b(B, B + 6);
        EXPECT_TRUE(same(naive_tile_dot(a, b, 1, 6, 0, 0, accumulate, accumulate ? (i == 2 ? max32 : -0.0) : 0.0)
                             .value,
                         C[i]))
            << "row " << i;
      }
    }
  }
}

// The bracket's common case reads RZ16 off the binary32 bits (2^-14 <= |x| < 65504: clear the 13 low bits) and
// leaves every other lane to the fp16 conversions. Tile sums at the edges of that range, every column alike (so
// that a whole vector of lanes is on the same side of an edge): just below 2^-14 (a subnormal h, which bit
// clearing would get wrong), 2^-14 itself and just above, just below 65504, in [65504, 65536) (h = 65504, no
// overflow event) and 65536 (an overflow event); each with both signs, under ane-tile4 and ane-tile4-ftz, on
// every tier against the generic path (and ane-tile4 against the naive definition).
TEST_F(GemmTileKernel, TileSumsAtTheEdgesOfTheNormalFp16Range) {
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double m = 0x1p-14, q = 0x1p-15;
  struct Edge {
    std::vector<double> a, b;  // a tile of 4 terms (fp16 values)
    double want;               // its tile value RZ16(S) under ane-tile4
    std::int64_t overflows;
  };
  const Edge edges[] = {
      {{m, -q, 0.0, 0.0}, {1.0, q, 0.0, 0.0}, m - 0x1p-24, 0},            // S = 2^-14 − 2^-30: subnormal h
      {{m, -q, -q, 0.0}, {1.0, 0x1p-12, q, 0.0}, m - 0x1p-24, 0},         // S = 2^-14 − 2^-27 − 2^-30
      {{m, -0x1p-19, 0.0, 0.0}, {1.0, 0x1p-19, 0.0, 0.0}, m - 0x1p-24, 0},  // S = 2^-14 − 2^-38: 0x387FFFFF
      // S = 2^-14 − 13·2^-38: the AVX2 bracket's upper end S + 4u·3S rounds to 0x387FFFFF (the lower end has
      // the same high bits)
      {{m, -13 * 0x1p-19, 0.0, 0.0}, {1.0, 0x1p-19, 0.0, 0.0}, m - 0x1p-24, 0},
      {{m, 0.0, 0.0, 0.0}, {1.0, 0.0, 0.0, 0.0}, m, 0},                   // S = 2^-14
      {{m, q, 0.0, 0.0}, {1.0, q, 0.0, 0.0}, m, 0},                       // S = 2^-14 + 2^-30
      {{65504.0, -0.5, 0.0, 0.0}, {1.0, 1.0, 0.0, 0.0}, 65472.0, 0},      // S = 65503.5
      {{65504.0, 1.0, 0.0, 0.0}, {1.0, 8.0, 0.0, 0.0}, 65504.0, 0},       // S = 65512
      {{65504.0, 16.0, 0.0, 0.0}, {1.0, 1.0, 0.0, 0.0}, 65504.0, 0},      // S = 65520
      {{65504.0, 32.0, 0.0, 0.0}, {1.0, 1.0, 0.0, 0.0}, 65504.0, 1},      // S = 65536: overflows fp16
  };
  const std::size_t N = 48, K = 4;
  const Accumulation ftz = parse_accumulation("ane-tile4-ftz");
  std::size_t e_index = 0;
  for (const Edge& e : edges) {
    SCOPED_TRACE("edge " + std::to_string(e_index++));
    std::vector<double> A(2 * K), B(K * N);  // row 1 is row 0 negated
    for (std::size_t k = 0; k < K; ++k) {
      A[k] = e.a[k];
      A[K + k] = -e.a[k];
      for (std::size_t j = 0; j < N; ++j) B[k * N + j] = e.b[k];
    }
    const Naive naive = naive_tile_dot(A, B, N, K, 0, 0, false, 0.0);
    ASSERT_TRUE(same(naive.value, e.want)) << naive.value;  // the case is the one described
    ASSERT_EQ(naive.overflows, e.overflows);
    for (const Accumulation& acc : {ane, ftz}) {
      std::vector<double> want(2 * N);
      AccumStats want_stats;
      gemm(acc, 2, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, want.data(), N, false, {}, &want_stats,
           1, ::roundoff::test::kernels_off());
      if (acc == ane) {
        EXPECT_TRUE(same(want[0], e.want) && same(want[N], -e.want)) << want[0] << ' ' << want[N];
      }
      EXPECT_EQ(want_stats.overflows, 2 * N * e.overflows);
      for (const k::Isa isa : isas_with_tile_kernel()) {
        std::vector<double> C(2 * N, 1.0);
        AccumStats stats;
        ASSERT_TRUE(k::gemm_fast(acc, 2, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                 false, &stats, 1, nullptr, nullptr, KernelOptions{true, isa}));
        EXPECT_EQ(stats.overflows, want_stats.overflows) << k::name_of(isa);
        for (std::size_t idx = 0; idx < 2 * N; ++idx)
          ASSERT_TRUE(same(C[idx], want[idx])) << k::name_of(isa) << " flush " << (acc == ftz) << " at " << idx
                                               << " got " << C[idx] << " want " << want[idx];
      }
    }
  }
}

TEST_F(GemmTileKernel, DeclinesOtherTileStages) {
  if (isas_with_tile_kernel().empty()) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double ok[] = {1.0, 2.0, 3.0, 4.0};
  double C[4] = {};
  auto run = [&](const char* spec, const KernelOptions& opts) {
    return k::gemm_fast(parse_accumulation(spec), 2, 2, 2, ConstMatrix{ok, 2}, ConstMatrix{ok, 2}, C, 2, false,
                        nullptr, 1, nullptr, nullptr, opts);
  };
  const double wide[] = {1.0 + 0x1p-20, 2.0, 3.0, 4.0};  // 21 significant bits: products not exact
  for (const k::Isa isa : isas_with_tile_kernel()) {
    SCOPED_TRACE(static_cast<int>(isa));
    const KernelOptions opts{true, isa};
    EXPECT_TRUE(run("ane-tile4", opts));
    EXPECT_STREQ(k::kernel_name(ane, opts), isa == k::Isa::Avx2 ? "ane-tile4-avx2" : "ane-tile4-avx512");
    EXPECT_FALSE(run("ane-tile4,tile=8", opts));
    EXPECT_FALSE(run("ane-tile4,tile=4:fp16:nearest-even", opts));
    EXPECT_FALSE(run("ane-tile4,tile=4:bf16", opts));
    EXPECT_FALSE(run("ane-tile4,order=reverse", opts));
    EXPECT_FALSE(run("acc=fp16,tile=4", opts));
    EXPECT_FALSE(run("ane-tile4,unfused,product=fp16", opts));
    EXPECT_FALSE(k::gemm_fast(ane, 2, 2, 2, ConstMatrix{wide, 2}, ConstMatrix{ok, 2}, C, 2, false, nullptr, 1, nullptr, nullptr, opts));
  }
}

}  // namespace
}  // namespace roundoff::numerics
