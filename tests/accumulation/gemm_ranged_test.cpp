// numerics::gemm_ranged (a k-range per output row: the causal products of attention) against its definition,
// numerics::dot of each row's range (itself checked against MPFR in tests/accumulation), bit for bit: every
// kernel accumulation (fp32 with binary32 inputs, fp16/bf16 sequential, blocked split-K, the ane-tile4 stage)
// at every ISA level the CPU has, and accumulations without a kernel (pairwise, Kahan, stochastic) on the
// generic path; prefix ranges [0, i+1), suffix ranges [i, K), runs of equal lo with ragged ends (the kernel's
// shared-prefix split) and random ranges; ragged N and K (not multiples of the 16/32/64-column panels nor of
// the tile or block), transposed operands, and normal, special (±0, ±inf, NaN), overflow and subnormal inputs. The
// binary32 form of gemm_ranged_fast (ConstMatrix32 operands, binary32 C) against its binary64 form.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "tests/accumulation/gemm_test_values.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;
using test::random_values;
using test::same;
using test::Regime;


enum class Ranges { Prefix, Suffix, EqualLo, EqualHi, Random };

std::vector<KRange> make_ranges(std::mt19937_64& rng, Ranges kind, std::size_t M, std::size_t K) {
  std::vector<KRange> r(M);
  std::uniform_int_distribution<std::size_t> any(0, K - 1);
  for (std::size_t i = 0; i < M; ++i) {
    switch (kind) {
      case Ranges::Prefix: r[i] = {0, std::min(K, i + 1)}; break;
      case Ranges::Suffix: r[i] = {std::min(i, K - 1), K}; break;
      case Ranges::EqualLo: {  // runs of 1..11 rows with one lo and ragged ends
        const std::size_t lo = (i / 11) % K;
        r[i] = {lo, lo + 1 + (any(rng) % (K - lo))};
        break;
      }
      case Ranges::EqualHi: {  // runs of 9 rows with one hi and ascending lo (steps 0..3, so some equal)
        const std::size_t hi = K - (i / 9) % std::min<std::size_t>(K, 3);
        const std::size_t prev = i % 9 == 0 ? any(rng) % hi : r[i - 1].lo;
        r[i] = {std::min(hi - 1, prev + any(rng) % 4), hi};
        break;
      }
      case Ranges::Random: {
        const std::size_t a = any(rng), b = any(rng);
        r[i] = {std::min(a, b), std::max(a, b) + 1};
        break;
      }
    }
  }
  return r;
}

struct Case {
  std::string accumulation;
  Format inputs;
  bool kernel;  ///< a kernel exists for it (on a CPU with AVX2 or AVX-512)
};

/// Runs gemm_ranged on random problems and compares every output with numerics::dot of its range; returns the
/// number of calls the kernel took (gemm_ranged_fast returned true on a copy of the problem).
int check(const Case& c, std::uint64_t seed, const KernelOptions& opts) {
  const Accumulation a = parse_accumulation(c.accumulation);
  std::mt19937_64 rng(seed);
  int kernel_calls = 0;
  const std::size_t Ms[] = {1, 7, 9, 37}, Ns[] = {1, 5, 16, 33, 70}, Ks[] = {1, 3, 6, 37, 75};
  for (Regime regime : {Regime::Normal, Regime::Specials, Regime::Overflow, Regime::Tiny})
    for (Ranges kind : {Ranges::Prefix, Ranges::Suffix, Ranges::EqualLo, Ranges::EqualHi, Ranges::Random})
      for (int trial = 0; trial < 3; ++trial) {
        const std::size_t M = Ms[rng() % 4], N = Ns[rng() % 5], K = Ks[rng() % 5];
        const bool at = rng() % 2 == 1, bt = rng() % 2 == 1;
        const std::size_t lda = (at ? M : K) + rng() % 3, ldb = (bt ? K : N) + rng() % 3;
        const auto A = random_values(rng, c.inputs, (at ? K : M) * lda, regime);
        const auto B = random_values(rng, c.inputs, (bt ? N : K) * ldb, regime);
        const auto rows = make_ranges(rng, kind, M, K);
        const ConstMatrix Am{A.data(), lda, at}, Bm{B.data(), ldb, bt};
        const StochasticBits bits{seed, 40};
        const std::size_t ldc = N + 1;
        std::vector<double> C(M * ldc, 5.0);
        gemm_ranged(a, M, N, K, Am, Bm, rows, C.data(), ldc, bits, opts);
        std::vector<double> probe(M * ldc, 5.0);
        bool probed = false;
        if (a.rounding != Rounding::Stochastic) {
          probed = k::gemm_ranged_fast(a, M, N, K, Am, Bm, rows.data(), probe.data(), ldc, opts);
          kernel_calls += probed;
          // The binary32 form (operands and C in floats; every input format here fits binary32): the kernel's
          // outputs bit for bit, NaN encodings included, or false with C untouched — always for the multi-term
          // adder and the binary64 chain, which take only binary64 operands.
          const std::vector<float> A32(A.begin(), A.end()), B32(B.begin(), B.end());
          std::vector<float> C32(M * ldc, 5.0f);
          const bool took32 = k::gemm_ranged_fast(a, M, N, K, ConstMatrix32{A32.data(), lda, at},
                                                  ConstMatrix32{B32.data(), ldb, bt}, rows.data(), C32.data(), ldc,
                                                  opts);
          const bool binary64_only = a.adder.group != 0 || a.format == formats::fp64;
          EXPECT_EQ(took32, probed && !binary64_only) << c.accumulation << " binary32 form";
          for (std::size_t i = 0; i < C32.size(); ++i) {
            const double want = took32 ? probe[i] : 5.0;
            if (std::bit_cast<std::uint64_t>(static_cast<double>(C32[i])) != std::bit_cast<std::uint64_t>(want)) {
              ADD_FAILURE() << c.accumulation << " binary32 form M=" << M << " N=" << N << " K=" << K << " at " << i
                            << ": " << C32[i] << " vs " << want;
              break;
            }
          }
        }
        int bad = 0;
        for (std::size_t i = 0; i < M; ++i)
          for (std::size_t j = 0; j < N; ++j) {
            const std::size_t lo = rows[i].lo, n = rows[i].hi - lo;
            const double* x = at ? A.data() + lo * lda + i : A.data() + i * lda + lo;
            const double* y = bt ? B.data() + j * ldb + lo : B.data() + lo * ldb + j;
            const double want = dot(a, x, at ? static_cast<std::ptrdiff_t>(lda) : 1, y,
                                    bt ? 1 : static_cast<std::ptrdiff_t>(ldb), n, {bits.seed, bits.stream + i * N + j});
            if (!same(C[i * ldc + j], want) && bad++ < 3)
              ADD_FAILURE() << c.accumulation << " M=" << M << " N=" << N << " K=" << K << " regime "
                            << static_cast<int>(regime) << " ranges " << static_cast<int>(kind) << " C(" << i << ","
                            << j << ") over [" << lo << ", " << rows[i].hi << "): " << C[i * ldc + j] << " vs "
                            << want;
          }
        if (bad > 0) return kernel_calls;
      }
  return kernel_calls;
}

TEST(GemmRanged, EveryRowIsTheDotOfItsRange) {
  const Case cases[] = {
      {"fp32-seq", formats::fp32, true},          {"fp16-seq", formats::fp16, true},
      {"bf16-seq", formats::bf16, true},          {"fp16-splitk16-fp32", formats::fp16, true},
      {"acc=bf16:nearest-even,order=blocked:4,outer=fp32", formats::bf16, true},
      {"acc=fp32,order=blocked:5,outer=fp32", formats::fp32, true},
      {"ane-tile4", formats::fp16, true},         {"fp16-unfused-seq", formats::fp16, false},
      {"fp16-pairwise", formats::fp16, false},    {"bf16-kahan", formats::bf16, false},
      {"fp16-sr", formats::fp16, false},          {"fp64-seq", formats::fp32, true},
      // Split-K of kernel accumulations: the chunks restart at each row's lo, so no kernel may take them.
      {"fp16-seq,splitk=3:2", formats::fp16, false}, {"fp32-seq,splitk=2", formats::fp32, false},
      {"tc-h100,splitk=3:4", formats::fp16, false},
  };
  std::vector<k::Isa> isas;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512, k::Isa::Avx512Fp16})
    if (k::detected_isa() >= isa) isas.push_back(isa);
  if (isas.empty()) isas.push_back(k::Isa::None);
  std::uint64_t seed = 1;
  for (const Case& c : cases)
    for (const k::Isa isa : isas) {
      const int kernel_calls = check(c, seed++, KernelOptions{true, isa});
      // A kernel accumulation takes the kernel whenever the inputs allow (always for the normal and special
      // regimes; bf16 overflow/tiny values lie outside the exact-product range); the others never do.
      if (c.kernel && isa != k::Isa::None)
        EXPECT_GE(kernel_calls, 24) << c.accumulation << " at " << k::name_of(isa);
      else
        EXPECT_EQ(kernel_calls, 0) << c.accumulation;
    }
}

TEST(GemmRanged, RejectsEmptyOrOutOfBoundsRanges) {
  const std::vector<double> A(12, 1.0), B(12, 1.0);
  std::vector<double> C(9);
  const Accumulation a = parse_accumulation("fp32-seq");
  const std::vector<KRange> empty{{0, 1}, {2, 2}, {0, 4}}, past{{0, 1}, {1, 5}, {0, 4}}, good{{0, 1}, {1, 4}, {3, 4}};
  EXPECT_THROW(gemm_ranged(a, 3, 3, 4, {A.data(), 4}, {B.data(), 3}, empty, C.data(), 3), std::invalid_argument);
  EXPECT_THROW(gemm_ranged(a, 3, 3, 4, {A.data(), 4}, {B.data(), 3}, past, C.data(), 3), std::invalid_argument);
  EXPECT_THROW(gemm_ranged(a, 3, 3, 4, {A.data(), 4}, {B.data(), 3}, std::span(good).first(2), C.data(), 3),
               std::invalid_argument);
  gemm_ranged(a, 3, 3, 4, {A.data(), 4}, {B.data(), 3}, good, C.data(), 3);
  EXPECT_EQ(C[0], 1.0);
  EXPECT_EQ(C[3], 3.0);
  EXPECT_EQ(C[6], 1.0);
}

}  // namespace
}  // namespace roundoff::numerics
