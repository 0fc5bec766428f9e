// The binary64 GEMM kernel (numerics/gemm_binary64.hpp) against numerics::gemm's generic path (fast paths off:
// the per-element definition, itself checked against MPFR in tests/accumulation), bit for bit — NaN bits
// included — for the binary64 policy's accumulation: every ISA tier this CPU has, all four transpositions,
// ragged shapes (not multiples of the 8/16-column panels nor of the 4/8-row tiles), accumulate into C (±0, inf,
// NaN, numbers), leading dimensions above the minimum, one and two threads, entry casts, overflow statistics,
// and operands of every regime: typical, cancelling (exact zero sums and their signs), wide (exponents over the
// whole binary64 range: subnormal and overflowing products), overflowing partial sums, subnormal partial sums,
// and specials (±0, ±inf, NaNs of both signs with payloads). gemm_ranged the same way. The default suite runs a
// sample; GemmBinary64Exhaustive.* (ctest label `exhaustive`) runs 50 times as many problems.
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
#include "numerics/gemm_binary64.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;

enum class Data { Typical, Cancel, Wide, Overflow, Tiny, Specials };
constexpr Data kAll[] = {Data::Typical, Data::Cancel, Data::Wide, Data::Overflow, Data::Tiny, Data::Specials};

bool bits_equal(double x, double y) { return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y); }

double special(std::mt19937_64& rng) {
  const double inf = std::numeric_limits<double>::infinity();
  const double s[] = {0.0, -0.0, inf, -inf, std::bit_cast<double>(std::uint64_t{0x7FF8000000000000}),
                      std::bit_cast<double>(std::uint64_t{0xFFF8000000000000}),
                      std::bit_cast<double>(std::uint64_t{0x7FF4000000000123}),
                      std::bit_cast<double>(std::uint64_t{0xFFFC0000000ABCDE})};
  return s[rng() % 8];
}

/// n doubles (any binary64 value) in the regime d.
std::vector<double> values(Data d, std::size_t n, std::mt19937_64& rng) {
  std::vector<double> v(n);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> ewide(-1074, 1023);
  for (std::size_t i = 0; i < n; ++i) {
    double x = u(rng);
    switch (d) {
      case Data::Typical: x = std::ldexp(x, static_cast<int>(rng() % 8) - 4); break;
      case Data::Cancel:  // few significant bits, so that sums cancel exactly (zeros of either sign)
        x = std::ldexp(std::round(x * 8), static_cast<int>(rng() % 3));
        if (rng() % 3 == 0) x = -0.0;
        break;
      case Data::Wide: x = std::ldexp(x, ewide(rng)); break;
      case Data::Overflow: x = std::ldexp(x, 509 + static_cast<int>(rng() % 6)); break;   // products near 2^1024
      case Data::Tiny: x = std::ldexp(x, -540 + static_cast<int>(rng() % 12)); break;   // products subnormal or 0
      case Data::Specials: x = rng() % 20 == 0 ? special(rng) : std::ldexp(x, static_cast<int>(rng() % 8) - 4); break;
    }
    v[i] = x;
  }
  return v;
}

Accumulation binary64_acc() { return parse_accumulation("fp64-seq"); }

std::vector<k::Isa> tiers() {
  std::vector<k::Isa> out;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512})
    if (k::detected_isa() >= isa) out.push_back(isa);
  return out;
}

/// Random problems through gemm (kernel) and the generic path; every output and the statistics compared.
void check_gemm(k::Isa isa, std::uint64_t seed, int problems) {
  const Accumulation a = binary64_acc();
  std::mt19937_64 rng(seed);
  const std::size_t Ms[] = {1, 2, 3, 5, 8, 9, 13, 17, 40}, Ns[] = {1, 3, 4, 8, 9, 16, 17, 33, 70},
                    Ks[] = {1, 2, 3, 7, 16, 37, 100};
  const KernelOptions fast{true, isa}, generic{false, isa};
  for (int t = 0; t < problems; ++t) {
    const Data d = kAll[rng() % 6];
    const std::size_t M = Ms[rng() % 9], N = Ns[rng() % 9], K = Ks[rng() % 7];
    const bool at = rng() % 2 == 1, bt = rng() % 2 == 1, accumulate = rng() % 2 == 1;
    const std::size_t lda = (at ? M : K) + rng() % 3, ldb = (bt ? K : N) + rng() % 3, ldc = N + rng() % 3;
    const auto A = values(d, (at ? K : M) * lda, rng), B = values(d, (bt ? N : K) * ldb, rng);
    auto C0 = values(rng() % 2 ? d : Data::Specials, M * ldc, rng);
    if (rng() % 4 == 0) std::fill(C0.begin(), C0.end(), rng() % 2 ? 0.0 : -0.0);
    const ConstMatrix Am{A.data(), lda, at}, Bm{B.data(), ldb, bt};
    const int threads = 1 + static_cast<int>(rng() % 2);
    std::vector<double> C = C0, want = C0;
    AccumStats got_stats, want_stats;
    gemm(a, M, N, K, Am, Bm, C.data(), ldc, accumulate, {}, &got_stats, threads, fast);
    gemm(a, M, N, K, Am, Bm, want.data(), ldc, accumulate, {}, &want_stats, 1, generic);
    std::vector<double> probe = C0;
    ASSERT_TRUE(k::gemm_fast(a, M, N, K, Am, Bm, probe.data(), ldc, accumulate, nullptr, threads, nullptr, nullptr,
                             fast));
    int bad = 0;
    for (std::size_t i = 0; i < M * ldc; ++i)
      if ((!bits_equal(C[i], want[i]) || !bits_equal(probe[i], want[i])) && bad++ < 3)
        ADD_FAILURE() << k::name_of(isa) << " problem " << t << " data " << static_cast<int>(d) << " M=" << M
                      << " N=" << N << " K=" << K << " at=" << at << " bt=" << bt << " acc=" << accumulate << " C["
                      << i << "]: " << C[i] << " vs " << want[i];
    EXPECT_EQ(got_stats.overflows, want_stats.overflows) << "problem " << t;
    EXPECT_EQ(got_stats.terms, want_stats.terms);
    if (bad > 0) return;
  }
}

/// Entry casts (gemm_in's path): the kernel with casts against the generic path on the materialised casts.
void check_casts(k::Isa isa, std::uint64_t seed, int problems) {
  const Accumulation a = binary64_acc();
  std::mt19937_64 rng(seed);
  const RoundingPlan plans[] = {RoundingPlan(formats::fp64), RoundingPlan(formats::fp32), RoundingPlan(formats::bf16),
                                RoundingPlan(formats::fp16)};
  const Rounding modes[] = {Rounding::NearestEven, Rounding::TowardZero, Rounding::Up};
  for (int t = 0; t < problems; ++t) {
    const Data d = kAll[rng() % 6];
    const std::size_t M = 1 + rng() % 19, N = 1 + rng() % 40, K = 1 + rng() % 50;
    const bool at = rng() % 2 == 1, bt = rng() % 2 == 1, accumulate = rng() % 2 == 1;
    const std::size_t lda = at ? M : K, ldb = bt ? K : N;
    const auto A = values(d, M * K, rng), B = values(d, K * N, rng), C0 = values(d, M * N, rng);
    const k::OperandCast ca{&plans[rng() % 4], modes[rng() % 3], rng() % 2 == 1, rng() % 2 == 1};
    const k::OperandCast cb{&plans[rng() % 4], modes[rng() % 3], rng() % 2 == 1, rng() % 2 == 1};
    std::vector<double> Ac(A.size()), Bc(B.size());
    k::cast_values(ca, A, Ac);
    k::cast_values(cb, B, Bc);
    std::vector<double> C = C0, want = C0;
    ASSERT_TRUE(k::gemm_fast(a, M, N, K, {A.data(), lda, at}, {B.data(), ldb, bt}, C.data(), N, accumulate, nullptr,
                             1, &ca, &cb, KernelOptions{true, isa}));
    gemm(a, M, N, K, {Ac.data(), lda, at}, {Bc.data(), ldb, bt}, want.data(), N, accumulate, {}, nullptr, 1,
         KernelOptions{false, isa});
    int bad = 0;
    for (std::size_t i = 0; i < M * N; ++i)
      if (!bits_equal(C[i], want[i]) && bad++ < 3)
        ADD_FAILURE() << k::name_of(isa) << " cast problem " << t << " C[" << i << "]: " << C[i] << " vs "
                      << want[i];
    if (bad > 0) return;
  }
}

/// gemm_ranged (kernel) against the generic path: prefix, suffix, equal-lo runs and random ranges.
void check_ranged(k::Isa isa, std::uint64_t seed, int problems) {
  const Accumulation a = binary64_acc();
  std::mt19937_64 rng(seed);
  for (int t = 0; t < problems; ++t) {
    const Data d = kAll[rng() % 6];
    const std::size_t M = 1 + rng() % 40, N = 1 + rng() % 40, K = 1 + rng() % 70;
    const bool at = rng() % 2 == 1, bt = rng() % 2 == 1;
    const std::size_t lda = (at ? M : K) + rng() % 2, ldb = (bt ? K : N) + rng() % 2, ldc = N + rng() % 2;
    const auto A = values(d, (at ? K : M) * lda, rng), B = values(d, (bt ? N : K) * ldb, rng);
    std::vector<KRange> rows(M);
    const int kind = static_cast<int>(rng() % 4);
    for (std::size_t i = 0; i < M; ++i) {
      const std::size_t x = rng() % K, y = rng() % K;
      switch (kind) {
        case 0: rows[i] = {0, std::min(K, i + 1)}; break;            // causal forward
        case 1: rows[i] = {std::min(i, K - 1), K}; break;            // causal backward
        case 2: rows[i] = {(i / 5) % K, (i / 5) % K + 1 + x % (K - (i / 5) % K)}; break;  // runs of equal lo
        default: rows[i] = {std::min(x, y), std::max(x, y) + 1}; break;
      }
    }
    const ConstMatrix Am{A.data(), lda, at}, Bm{B.data(), ldb, bt};
    std::vector<double> C(M * ldc, 7.0), want(M * ldc, 7.0), probe(M * ldc, 7.0);
    gemm_ranged(a, M, N, K, Am, Bm, rows, C.data(), ldc, {}, KernelOptions{true, isa});
    gemm_ranged(a, M, N, K, Am, Bm, rows, want.data(), ldc, {}, KernelOptions{false, isa});
    ASSERT_TRUE(k::gemm_ranged_fast(a, M, N, K, Am, Bm, rows.data(), probe.data(), ldc, KernelOptions{true, isa}));
    int bad = 0;
    for (std::size_t i = 0; i < M * ldc; ++i)
      if ((!bits_equal(C[i], want[i]) || !bits_equal(probe[i], want[i])) && bad++ < 3)
        ADD_FAILURE() << k::name_of(isa) << " ranged problem " << t << " kind " << kind << " C[" << i
                      << "]: " << C[i] << " vs " << want[i];
    if (bad > 0) return;
  }
}

TEST(GemmBinary64, KernelDomain) {
  EXPECT_TRUE(k::binary64_chain(binary64_acc()));
  for (const char* other : {"fp32-seq", "acc=fp64,order=pairwise", "acc=fp64,order=kahan", "acc=fp64,order=reverse", "fp64-seq,flush=step", "fp16-seq"})
    EXPECT_FALSE(k::binary64_chain(parse_accumulation(other))) << other;
  Accumulation directed = binary64_acc();
  directed.rounding = Rounding::Up;
  EXPECT_FALSE(k::binary64_chain(directed));
  Accumulation unfused = binary64_acc();
  unfused.fused = false;
  unfused.product_format = formats::fp64;
  EXPECT_FALSE(k::binary64_chain(unfused));  // the product rounded first, then added: not one FMA
  EXPECT_EQ(k::kernel_name(binary64_acc(), KernelOptions{true, k::Isa::None}), nullptr);
  if (k::detected_isa() >= k::Isa::Avx2) {
    EXPECT_STREQ(k::kernel_name(binary64_acc(), KernelOptions{true, k::Isa::Avx2}), "fp64-avx2");
  }
  if (k::detected_isa() >= k::Isa::Avx512) {
    EXPECT_STREQ(k::kernel_name(binary64_acc(), KernelOptions{true, k::Isa::Avx512}), "fp64-avx512");
  }
}

TEST(GemmBinary64, EqualsTheGenericPath) {
  std::uint64_t seed = 1;
  for (const k::Isa isa : tiers()) check_gemm(isa, seed++, 120);
}

TEST(GemmBinary64, EntryCastsEqualTheMaterialisedCasts) {
  std::uint64_t seed = 100;
  for (const k::Isa isa : tiers()) check_casts(isa, seed++, 200);
}

TEST(GemmBinary64, RangedEqualsTheGenericPath) {
  std::uint64_t seed = 200;
  for (const k::Isa isa : tiers()) check_ranged(isa, seed++, 300);
}

/// Hard cases for the first step: fma(a, b, −0) must be mul64(a, b) where the product is an exact zero of
/// either sign, underflows to a zero, rounds into or out of the subnormal range, or overflows.
TEST(GemmBinary64, FirstStepFromNegativeZeroIsTheProduct) {
  const double tiny = std::numeric_limits<double>::denorm_min(), big = std::numeric_limits<double>::max();
  const double xs[] = {0.0, -0.0, tiny, -tiny, 0x1p-537, -0x1.8p-538, 0x1.fffffffffffffp-512, big, 0x1p512, 1.0, -3.0};
  const Accumulation a = binary64_acc();
  for (const k::Isa isa : tiers())
    for (const double x : xs)
      for (const double y : xs) {
        double got = 1.0, want = 1.0;
        const double A[] = {x}, B[] = {y};
        gemm(a, 1, 1, 1, {A, 1}, {B, 1}, &got, 1, false, {}, nullptr, 1, KernelOptions{true, isa});
        gemm(a, 1, 1, 1, {A, 1}, {B, 1}, &want, 1, false, {}, nullptr, 1, KernelOptions{false, isa});
        EXPECT_TRUE(bits_equal(got, want)) << x << " * " << y << ": " << got << " vs " << want;
      }
}

TEST(GemmBinary64Exhaustive, ManyProblems) {
  std::uint64_t seed = 1000;
  for (const k::Isa isa : tiers()) {
    check_gemm(isa, seed++, 20000);
    check_casts(isa, seed++, 10000);
    check_ranged(isa, seed++, 15000);
  }
}

}  // namespace
}  // namespace roundoff::numerics
