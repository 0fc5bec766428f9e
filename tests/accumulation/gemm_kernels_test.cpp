// The SIMD GEMM kernels against the definition (a naive scalar loop of correctly rounded numerics::fma / add
// steps; numerics/arith.hpp is checked against MPFR in tests/numerics) and against numerics::gemm's generic
// path with the kernels switched off. Random ragged shapes, specials, overflow, subnormal sums,
// accumulate = true, 1 vs 2 threads, every ISA level the CPU has (AVX2, AVX-512, AVX512-FP16, each forced).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/arith.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "tests/accumulation/gemm_test_values.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;
using test::make_acc;
using test::random_values;
using test::Regime;

std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || bits_of(x) == bits_of(y); }

/// Output C_ij by the definition: the running sum starts at the exact 0 (the first term is round(t_0)) or at
/// C_ij; each step is one correctly rounded fma. Blocked: block sums start at the exact 0 and are added
/// sequentially into the fp32 outer sum, which starts at 0 (first block sum enters exactly) or at C_ij.
/// flush=step: each rounded step with 0 < |s| < 2^emin of the accumulator becomes the zero of its sign (counted in
/// `flushes`).
double reference(const Accumulation& a, const std::vector<double>& A, const std::vector<double>& B, std::size_t N,
                 std::size_t K, std::size_t i, std::size_t j, bool accumulate, double c0, std::int64_t& overflows,
                 std::int64_t* flushes = nullptr) {
  const RoundingPlan acc(a.format), outer(a.outer_format);
  const Rounding rn = Rounding::NearestEven;
  // numerics::gemm's overflow count (IEEE 754 §7.4): finite operands and a result whose rounding with an
  // unbounded exponent exceeds max_finite; with round-to-nearest and inf-capable formats: the result is ±inf.
  auto overflowed = [](double r) { return std::isinf(r); };
  auto dot_range = [&](std::size_t k0, std::size_t k1, bool has_init, double init) {
    bool started = has_init;
    double s = init;
    for (std::size_t kk = k0; kk < k1; ++kk) {
      const double x = A[i * K + kk], y = B[kk * N + j];
      const double r = started ? numerics::fma(acc, rn, x, y, s) : numerics::mul(acc, rn, x, y);
      if ((!started || std::isfinite(s)) && std::isfinite(x) && std::isfinite(y) && overflowed(r)) ++overflows;
      s = r;
      if (a.flush.step && r != 0 && std::fabs(r) < std::ldexp(1.0, a.format.emin)) {
        s = std::copysign(0.0, r);
        if (flushes) ++*flushes;
      }
      started = true;
    }
    return s;
  };
  if (a.order == Order::Sequential) return dot_range(0, K, accumulate, c0);
  const auto b = static_cast<std::size_t>(a.block);
  bool started = accumulate;
  double S = c0;
  for (std::size_t k0 = 0; k0 < K; k0 += b) {
    const double p = dot_range(k0, std::min(K, k0 + b), false, 0.0);
    const double r = started ? numerics::add(outer, rn, S, p) : numerics::round_to(outer, rn, p);
    if ((!started || std::isfinite(S)) && std::isfinite(p) && overflowed(r)) ++overflows;
    S = r;
    started = true;
  }
  return S;
}

/// Unfused with products rounded to fp32: the kernels' products are exact in fp32, so this is a kernel case.
Accumulation unfused_exact(const Format& f) {
  Accumulation a;
  a.format = f;
  a.fused = false;
  a.product_format = formats::fp32;
  return a;
}

struct Case {
  std::string accumulation;  ///< canonical name, for messages
  Accumulation acc;
  Format inputs;
};


/// Every ISA level the CPU has (each forced through KernelOptions::isa_limit), weakest first.
std::vector<k::Isa> isas_to_test() {
  std::vector<k::Isa> out;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512, k::Isa::Avx512Fp16})
    if (k::detected_isa() >= isa) out.push_back(isa);
  return out;
}

/// Whether a kernel exists for `a` at `isa` (AVX2: the fp32 accumulator only).
bool has_kernel(const Accumulation& a, k::Isa isa) { return k::kernel_name(a, KernelOptions{true, isa}) != nullptr; }

class GemmKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GemmKernels, BitIdenticalToDefinitionOnRandomShapes) {
  const Accumulation a = GetParam().acc;
  std::vector<k::Isa> isas;
  for (const k::Isa isa : isas_to_test())
    if (has_kernel(a, isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "no kernel for this accumulation on this CPU: the generic path runs";
  const Format in = GetParam().inputs;
  std::mt19937_64 rng(0x5eed0000u + std::hash<std::string>{}(GetParam().accumulation) +
                      static_cast<std::uint64_t>(in.precision));
  std::uniform_int_distribution<std::size_t> dim(1, 70), kdim(1, 150);
  const Regime regimes[] = {Regime::Normal, Regime::Specials, Regime::Overflow, Regime::Tiny};
  std::int64_t compared = 0, nonfinite = 0, subnormal = 0, overflow_events = 0, flushes = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const std::size_t M = dim(rng), N = dim(rng), K = kdim(rng);
    const Regime regime = regimes[trial % 4];
    const bool accumulate = trial % 3 == 1;
    const auto A = random_values(rng, in, M * K, regime);
    const auto B = random_values(rng, in, K * N, regime);
    std::vector<double> C0 = accumulate ? random_values(rng, a.format == formats::fp32 ? formats::fp16 : a.format,
                                                        M * N, regime == Regime::Specials ? Regime::Normal : regime)
                                        : std::vector<double>(M * N, 0.0);
    std::vector<double> want(M * N);
    std::int64_t want_overflows = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        want[i * N + j] = reference(a, A, B, N, K, i, j, accumulate, C0[i * N + j], want_overflows, &flushes);
    {  // numerics::gemm's generic path (kernels off) must agree with the definition too.
      std::vector<double> C = C0;
      AccumStats stats;
      {  // kernels off: the generic path
        gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, accumulate, {}, &stats, 1, ::roundoff::test::kernels_off());
      }
      EXPECT_EQ(stats.overflows, want_overflows) << "generic, trial " << trial;
      for (std::size_t idx = 0; idx < M * N; ++idx)
        ASSERT_TRUE(same(C[idx], want[idx])) << "generic path differs from the definition, trial " << trial;
    }
    for (const k::Isa isa : isas) {
      const KernelOptions opts{true, isa};
      for (const int threads : {1, 2}) {
        std::vector<double> C = C0;
        AccumStats stats;
        ASSERT_TRUE(k::gemm_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                 accumulate, &stats, threads, nullptr, nullptr, opts))
            << "kernel declined " << GetParam().accumulation << " trial " << trial;
        EXPECT_EQ(stats.overflows, want_overflows) << "trial " << trial;
        EXPECT_EQ(stats.terms, static_cast<std::int64_t>(M * N * K));
        for (std::size_t idx = 0; idx < M * N; ++idx) {
          ASSERT_TRUE(same(C[idx], want[idx]))
              << GetParam().accumulation << " isa " << k::name_of(isa) << " threads " << threads << " trial "
              << trial << " M N K " << M << ' ' << N << ' ' << K << " at (" << idx / N << ',' << idx % N
              << ") got " << C[idx] << " want " << want[idx] << " accumulate " << accumulate;
          ++compared;
        }
      }
    }
    for (const double w : want) {
      nonfinite += !std::isfinite(w);
      subnormal += std::isfinite(w) && w != 0 && std::fabs(w) < std::ldexp(1.0, a.format.emin);
    }
    overflow_events += want_overflows;
  }
  // The regimes must actually reach the cases they are for, or the test proves nothing about them.
  EXPECT_GT(compared, 10000);
  EXPECT_GT(nonfinite, 0);
  // fp16 products cannot overflow an fp32 or bf16 sum nor reach their subnormals.
  const bool wide_inputs = in == formats::bf16;
  if (a.format == formats::fp16 || wide_inputs) {
    EXPECT_GT(overflow_events, 0);
  }
  if (a.flush.step) {
    EXPECT_EQ(subnormal, 0) << "the step flush leaves no subnormal partial sum";
    // The Tiny regime must make the step flush fire (fp16 inputs: hundreds of times; bf16 inputs, whose products
    // mostly lie far below or far above fp16's subnormals: a dozen or more).
    EXPECT_GT(flushes, 0) << "the Tiny regime must make the step flush fire";
  } else if (a.format == formats::fp16 || (a.format == formats::bf16 && wide_inputs)) {
    EXPECT_GT(subnormal, 0);
  }
}

/// fp16 sequential with the step flush (`flush=step`, ane-fp16-ftz's accumulator): the fp16 kernels with the flush
/// after each step (kernels::Acc::Fp16Ftz).
Accumulation fp16_step_flush() {
  Accumulation a = make_acc(formats::fp16);
  a.flush.step = true;
  return a;
}

INSTANTIATE_TEST_SUITE_P(
    Accumulations, GemmKernels,
    ::testing::Values(Case{"fp16-seq", make_acc(formats::fp16), formats::fp16},
                      Case{"bf16-seq", make_acc(formats::bf16), formats::bf16},
                      Case{"bf16-seq", make_acc(formats::bf16), formats::fp16},
                      Case{"fp16-seq", make_acc(formats::fp16), formats::bf16},
                      Case{"fp32-seq", make_acc(formats::fp32), formats::fp16},
                      Case{"fp32-seq", make_acc(formats::fp32), formats::bf16},
                      Case{"fp16-splitk32-fp32", make_acc(formats::fp16, Order::Blocked, 32), formats::fp16},
                      Case{"bf16-blocked16-fp32", make_acc(formats::bf16, Order::Blocked, 16), formats::bf16},
                      Case{"fp16-blocked7-fp32", make_acc(formats::fp16, Order::Blocked, 7), formats::fp16},
                      Case{"fp32-blocked5-fp32", make_acc(formats::fp32, Order::Blocked, 5), formats::bf16},
                      Case{"fp16-unfused-fp32products", unfused_exact(formats::fp16), formats::fp16},
                      Case{"bf16-unfused-fp32products", unfused_exact(formats::bf16), formats::bf16},
                      Case{"fp16-seq,flush=step", fp16_step_flush(), formats::fp16},
                      Case{"fp16-seq,flush=step", fp16_step_flush(), formats::bf16}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      std::string name = param_info.param.accumulation + "_in_" + (param_info.param.inputs == formats::fp16 ? "fp16" : "bf16");
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

/// accumulate = true into a C of +0 everywhere (the kernels then skip reading C, see gemm_kernels.cpp Start) and
/// into a C of +0 but one −0 or one 1.0 (read as usual), for every kernel accumulation and tier, 1 and 2
/// threads, against numerics::gemm's generic path: row 0 of A is −0 and column 0 of B non-negative, so output (0, 0)
/// is a sum of −0 products, −0 from −0 and +0 from +0 (a kernel that starts from −0 and keeps the sign fails).
TEST(GemmKernelsZeroC, AccumulateIntoPositiveZerosEqualsTheGenericPath) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(0x2e40);
  std::int64_t plus_zero_sums = 0, compared = 0;
  for (const char* name : {"fp16-seq", "bf16-seq", "fp32-seq", "fp16-splitk32-fp32", "ane-tile4", "fp16-seq,flush=step"}) {
    const Accumulation a = parse_accumulation(name);
    const Format in = a.format == formats::bf16 ? formats::bf16 : formats::fp16;
    for (int trial = 0; trial < 6; ++trial) {
      std::uniform_int_distribution<std::size_t> dim(1, 40), kdim(1, 90);
      const std::size_t M = dim(rng), N = dim(rng), K = kdim(rng);
      auto A = random_values(rng, in, M * K, trial % 2 ? Regime::Tiny : Regime::Normal);
      auto B = random_values(rng, in, K * N, Regime::Normal);
      for (std::size_t kk = 0; kk < K; ++kk) {
        A[kk] = -0.0;
        B[kk * N] = std::fabs(B[kk * N]);  // +0 included: −0·(+0) = −0
      }
      std::vector<double> C0(M * N, 0.0);
      if (trial % 3 == 1) C0[(M * N) / 2] = -0.0;
      if (trial % 3 == 2) C0[M * N - 1] = 1.0;
      std::vector<double> want = C0;
      {  // kernels off: the generic path
        gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, want.data(), N, true, {}, nullptr, 1, ::roundoff::test::kernels_off());
      }
      plus_zero_sums += std::bit_cast<std::uint64_t>(want[0]) == 0;
      for (const k::Isa isa : isas_to_test()) {
        if (!has_kernel(a, isa)) continue;
        const KernelOptions opts{true, isa};
        for (const int threads : {1, 2}) {
          std::vector<double> C = C0;
          ASSERT_TRUE(k::gemm_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                   true, nullptr, threads, nullptr, nullptr, opts))
              << name << " declined, trial " << trial;
          for (std::size_t idx = 0; idx < M * N; ++idx, ++compared)
            ASSERT_TRUE(same(C[idx], want[idx]))
                << name << " isa " << k::name_of(isa) << " threads " << threads << " trial " << trial << " at ("
                << idx / N << ',' << idx % N << ") got " << C[idx] << " want " << want[idx];
        }
      }
    }
  }
  EXPECT_GT(plus_zero_sums, 0);  // the sign case was reached
  EXPECT_GT(compared, 1000);
}

TEST(GemmKernelsTrap, Fp16FusedMacIsNotFp32FmaThenRound) {
  // NUMERICS.md trap 1: 1.75·(439/256) + 2^-24 is 3.001953125 in fp16; fp32 FMA then rounding gives 3.0.
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX-512";
  const Accumulation a = make_acc(formats::fp16);
  const double A[] = {std::ldexp(1.0, -12), 1.75};
  const double B[] = {std::ldexp(1.0, -12), 439.0 / 256.0};
  int checked = 0;
  for (const k::Isa isa : isas_to_test()) {
    if (!has_kernel(a, isa)) continue;
    const KernelOptions opts{true, isa};
    double C = 0;
    ASSERT_TRUE(k::gemm_fast(a, 1, 1, 2, ConstMatrix{A, 2}, ConstMatrix{B, 1}, &C, 1, false, nullptr, 1, nullptr, nullptr, opts));
    EXPECT_EQ(C, 3.001953125) << k::name_of(isa);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no fp16 kernel on this CPU: nothing was compared";  // visible, not a pass
}

TEST(GemmKernelsStats, OverflowCountsFollowIeee) {
  // Row 0: 65504 + 8 and then + 1 round to 65504 = max fp16 (below half an ulp even with an unbounded exponent):
  // no overflow. Row 1 overflows to inf (one event), then meets −inf (NaN): no event for the NaN step.
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX-512";
  const double A[] = {65504.0, 8.0, 1.0, 65504.0, 65504.0, -std::numeric_limits<double>::infinity()};
  const double B[] = {1.0, 1.0, 1.0};
  int checked = 0;
  for (const k::Isa isa : isas_to_test()) {
    if (!has_kernel(make_acc(formats::fp16), isa)) continue;
    const KernelOptions opts{true, isa};
    double C[2] = {};
    AccumStats stats;
    ASSERT_TRUE(k::gemm_fast(make_acc(formats::fp16), 2, 1, 3, ConstMatrix{A, 3}, ConstMatrix{B, 1}, C, 1, false,
                             &stats, 1, nullptr, nullptr, opts));
    EXPECT_EQ(C[0], 65504.0);
    EXPECT_TRUE(std::isnan(C[1]));
    EXPECT_EQ(stats.overflows, 1) << k::name_of(isa);
    EXPECT_EQ(stats.terms, 6);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no fp16 kernel on this CPU: nothing was compared";
}

TEST(GemmKernelsSpecials, NanWithFullPayloadStaysNan) {
  // A NaN whose payload fills the fraction must not be carried into ±0 or inf by the bf16 bit rounding.
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  const double nan_full = std::bit_cast<double>(std::uint64_t{0x7FFFFFFFFFFFFFFFull});
  const double nan_neg = std::bit_cast<double>(std::uint64_t{0xFFFFFFFFFFFFFFFFull});
  const double A[] = {nan_full, 1.0, 2.0, nan_neg};
  const double B[] = {1.0, 1.0};
  int checked = 0;
  for (const Format f : {formats::bf16, formats::fp16, formats::fp32}) {
    for (const k::Isa isa : isas_to_test()) {
      if (!has_kernel(make_acc(f), isa)) continue;
      const KernelOptions opts{true, isa};
      for (const bool accumulate : {false, true}) {
        double C[2] = {accumulate ? nan_full : 0.0, 1.0};
        ASSERT_TRUE(k::gemm_fast(make_acc(f), 2, 1, 2, ConstMatrix{A, 2}, ConstMatrix{B, 1}, C, 1, accumulate,
                                 nullptr, 1, nullptr, nullptr, opts));
        EXPECT_TRUE(std::isnan(C[0])) << C[0] << ' ' << k::name_of(isa);
        EXPECT_TRUE(std::isnan(C[1])) << C[1] << ' ' << k::name_of(isa);
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no bf16, fp16 or fp32 kernel on this CPU: nothing was compared";
}

TEST(GemmKernelsDecline, WhenNoBitIdenticalKernelExists) {
  if (k::detected_isa() < k::Isa::Avx512) GTEST_SKIP() << "no AVX-512";
  const double ok[] = {1.0, 2.0, 3.0, 4.0};
  double C[4] = {};
  auto run = [&](const Accumulation& acc, const double* A, bool accumulate = false, KernelOptions opts = {}) {
    return k::gemm_fast(acc, 2, 2, 2, ConstMatrix{A, 2}, ConstMatrix{ok, 2}, C, 2, accumulate,
                        nullptr, 1, nullptr, nullptr, opts);
  };
  const Accumulation fp16_seq = make_acc(formats::fp16), bf16_seq = make_acc(formats::bf16);
  EXPECT_TRUE(run(fp16_seq, ok));
  EXPECT_FALSE(run(make_acc(formats::fp16, Order::Pairwise), ok));
  EXPECT_FALSE(run(make_acc(formats::fp16, Order::Kahan), ok));
  Accumulation sr = fp16_seq;
  sr.rounding = Rounding::Stochastic;
  EXPECT_FALSE(run(sr, ok));
  Accumulation unfused = fp16_seq;
  unfused.fused = false;
  unfused.product_format = formats::fp16;  // products rounded to fp16 first: not this kernel
  EXPECT_FALSE(run(unfused, ok));
  EXPECT_FALSE(run(make_acc(formats::tf32), ok));
  const double wide[] = {1.0 + std::ldexp(1.0, -20), 2.0, 3.0, 4.0};  // 21 significant bits: product not exact
  EXPECT_FALSE(run(fp16_seq, wide));
  const double huge[] = {std::ldexp(1.0, 70), 2.0, 3.0, 4.0};  // product may leave the fp32 range
  EXPECT_FALSE(run(bf16_seq, huge));
  const double tiny[] = {std::ldexp(1.0, -70), 2.0, 3.0, 4.0};
  EXPECT_FALSE(run(bf16_seq, tiny));
  C[0] = 0.1;  // not a binary32 value: cannot be the initial accumulator
  EXPECT_FALSE(run(make_acc(formats::fp32), ok, true));
  EXPECT_FALSE(run(fp16_seq, ok, false, ::roundoff::test::kernels_off()));  // kernels off: the generic path
}

TEST(GemmKernelsFp32, AnyBinary32InputsWithFusedFp32Accumulation) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  // Full 24-bit inputs (products not exact in fp32), subnormal and overflowing sums: the hardware fp32 FMA
  // rounds a·b + s once, so the kernel must equal the definition (numerics::fma steps) bit for bit.
  std::mt19937_64 rng(77);
  std::normal_distribution<double> gauss(0.0, 1.0);
  const RoundingPlan f32(formats::fp32);
  for (const int scale : {0, -70, 60}) {
    for (const Accumulation& acc : {make_acc(formats::fp32), make_acc(formats::fp32, Order::Blocked, 16)}) {
      const std::size_t M = 9, N = 37, K = 53;
      std::vector<double> A(M * K), B(K * N), C(M * N), C0(M * N);
      for (auto& x : A) x = round_to(f32, Rounding::NearestEven, std::ldexp(gauss(rng), scale));
      for (auto& x : B) x = round_to(f32, Rounding::NearestEven, std::ldexp(gauss(rng), scale));
      for (auto& x : C0) x = round_to(f32, Rounding::NearestEven, gauss(rng));
      for (const k::Isa isa : isas_to_test()) {
        const KernelOptions opts{true, isa};
        for (const bool accumulate : {false, true}) {
          C = C0;
          ASSERT_TRUE(k::gemm_fast(acc, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                   accumulate, nullptr, 1, nullptr, nullptr, opts));
          for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) {
              std::int64_t ov = 0;
              const double want = reference(acc, A, B, N, K, i, j, accumulate, C0[i * N + j], ov);
              ASSERT_TRUE(same(C[i * N + j], want)) << k::name_of(isa) << " scale " << scale << " i " << i << " j "
                                                    << j << " got " << C[i * N + j] << " want " << want;
            }
        }
      }
    }
  }
  Accumulation unfused = make_acc(formats::fp32);
  unfused.fused = false;  // products rounded to fp32 first: a 24-bit input must send it to the generic path
  const double wide[] = {1.0 + std::ldexp(1.0, -20), 2.0, 3.0, 4.0}, ok[] = {1.0, 2.0, 3.0, 4.0};
  double C[4] = {};
  EXPECT_FALSE(k::gemm_fast(unfused, 2, 2, 2, ConstMatrix{wide, 2}, ConstMatrix{ok, 2}, C, 2, false, nullptr, 1));
}

TEST(GemmKernelsLayout, TransposedOperandsAndLeadingDimensions) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(7);
  const std::size_t M = 37, N = 70, K = 45, lda = 50, ldb = 47, ldc = 75;
  const Accumulation a = make_acc(formats::fp16);
  auto At = random_values(rng, formats::fp16, K * lda, Regime::Normal);  // A stored transposed: A(i,k) = At[k·lda+i]
  auto Bt = random_values(rng, formats::fp16, N * ldb, Regime::Normal);  // B(k,j) = Bt[j·ldb+k]
  std::vector<double> A(M * K), B(K * N);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t kk = 0; kk < K; ++kk) A[i * K + kk] = At[kk * lda + i];
  for (std::size_t kk = 0; kk < K; ++kk)
    for (std::size_t j = 0; j < N; ++j) B[kk * N + j] = Bt[j * ldb + kk];
  for (const k::Isa isa : isas_to_test()) {
    const KernelOptions opts{true, isa};
    std::vector<double> C(M * ldc, 123.0);
    ASSERT_TRUE(k::gemm_fast(a, M, N, K, ConstMatrix{At.data(), lda, true}, ConstMatrix{Bt.data(), ldb, true},
                             C.data(), ldc, false, nullptr, 2, nullptr, nullptr, opts));
    std::int64_t ov = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < ldc; ++j) {
        if (j >= N) {
          EXPECT_EQ(C[i * ldc + j], 123.0) << "wrote outside the N columns";
          continue;
        }
        ASSERT_TRUE(same(C[i * ldc + j], reference(a, A, B, N, K, i, j, false, 0.0, ov)))
            << k::name_of(isa) << ' ' << i << ',' << j;
      }
  }
}

TEST(GemmKernelsLayout, TransposedOperandsOnEveryKernelAndTier) {
  // Transposed operands are packed along their stored rows (runs of up to 64 rows of A, one column of B) and
  // scattered; checked for every kernel (fp16 native / round-to-odd, bf16, fp32 any-binary32, the ane-tile4 stage)
  // on every ISA tier and 1 or 2 threads against the generic path on the same operands: M across several 64-row
  // runs with a ragged one, N across panels with a ragged one, accumulate, and specials (NaN payloads, ±inf, ±0).
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  const Accumulation accs[] = {make_acc(formats::fp16), make_acc(formats::bf16), make_acc(formats::fp32),
                               parse_accumulation("ane-tile4")};
  struct Dims {
    std::size_t M, N, K;
  };
  const Dims dims[] = {{37, 70, 45}, {150, 131, 9}};
  std::mt19937_64 rng(11);
  std::int64_t compared = 0;
  for (const Accumulation& a : accs)
    for (const Dims& d : dims)
      for (const Regime regime : {Regime::Normal, Regime::Specials})
        for (int layout = 0; layout < 4; ++layout)
          for (const bool accumulate : {false, true}) {
            const bool at = (layout & 1) != 0, bt = (layout & 2) != 0;
            const Format in = a.format == formats::bf16 ? formats::bf16 : formats::fp16;
            const std::size_t lda = (at ? d.M : d.K) + 3, ldb = (bt ? d.K : d.N) + 5, ldc = d.N + 2;
            const auto A = random_values(rng, in, (at ? d.K : d.M) * lda, regime);
            const auto B = random_values(rng, in, (bt ? d.N : d.K) * ldb, regime);
            const auto C0 = random_values(rng, formats::fp16, d.M * ldc, Regime::Normal);
            const ConstMatrix Am{A.data(), lda, at}, Bm{B.data(), ldb, bt};
            std::vector<double> want = C0;
            {  // kernels off: the generic path
              gemm(a, d.M, d.N, d.K, Am, Bm, want.data(), ldc, accumulate, {}, nullptr, 1, ::roundoff::test::kernels_off());
            }
            for (const k::Isa isa : isas_to_test()) {
              const KernelOptions opts{true, isa};
              for (const int threads : {1, 2}) {
                std::vector<double> C = C0;
                ASSERT_TRUE(k::gemm_fast(a, d.M, d.N, d.K, Am, Bm, C.data(), ldc, accumulate, nullptr, threads, nullptr, nullptr, opts))
                    << k::kernel_name(a, opts);
                for (std::size_t idx = 0; idx < C.size(); ++idx) {
                  ASSERT_TRUE(same(C[idx], want[idx]))
                      << k::kernel_name(a, opts) << " threads " << threads << " layout " << layout << " M N K " << d.M
                      << ' ' << d.N << ' ' << d.K << " accumulate " << accumulate << " at (" << idx / ldc << ','
                      << idx % ldc << ") got " << C[idx] << " want " << want[idx];
                  ++compared;
                }
              }
            }
          }
  EXPECT_GT(compared, 100000);
}

TEST(GemmKernelsAvx2, TierTakesEveryKernelAccumulation) {
  // The AVX2 tier (CPUs without AVX-512) must take the fp32, fp16 and bf16 accumulations, sequential and
  // blocked, and the ane-tile4 stage, and decline the rest; forced here through KernelOptions::isa_limit (the random-shape
  // tests run every accumulation on it).
  if (k::detected_isa() < k::Isa::Avx2) GTEST_SKIP() << "no AVX2 + FMA + F16C";
  const KernelOptions opts{true, k::Isa::Avx2};
  EXPECT_STREQ(k::kernel_name(make_acc(formats::fp32), opts), "fp32-avx2");
  EXPECT_STREQ(k::kernel_name(make_acc(formats::fp32, Order::Blocked, 16), opts), "fp32-avx2-blocked");
  EXPECT_STREQ(k::kernel_name(make_acc(formats::fp16), opts), "fp16-rto-avx2");
  EXPECT_STREQ(k::kernel_name(make_acc(formats::bf16, Order::Blocked, 16), opts), "bf16-rto-avx2-blocked");
  EXPECT_STREQ(k::kernel_name(parse_accumulation("ane-tile4"), opts), "ane-tile4-avx2");
  EXPECT_EQ(k::kernel_name(make_acc(formats::fp16, Order::Pairwise), opts), nullptr);
  const double ok[] = {1.0, 2.0, 3.0, 4.0};
  double C[4] = {};
  EXPECT_TRUE(k::gemm_fast(make_acc(formats::fp32), 2, 2, 2, ConstMatrix{ok, 2}, ConstMatrix{ok, 2}, C, 2, false,
                           nullptr, 1, nullptr, nullptr, opts));
  EXPECT_EQ(C[0], 7.0);
  EXPECT_EQ(C[3], 22.0);
  EXPECT_FALSE(k::gemm_fast(make_acc(formats::fp16, Order::Pairwise), 2, 2, 2, ConstMatrix{ok, 2},
                            ConstMatrix{ok, 2}, C, 2, false, nullptr, 1, nullptr, nullptr, opts));
  C[0] = 0.1;  // not a binary32 value: cannot be the initial accumulator
  EXPECT_FALSE(k::gemm_fast(make_acc(formats::fp32), 2, 2, 2, ConstMatrix{ok, 2}, ConstMatrix{ok, 2}, C, 2, true,
                            nullptr, 1, nullptr, nullptr, opts));
  // Values that must send the product to the generic path, in the 8-wide part of a row and in its scalar tail
  // (rows of 9): outside [2^-63, 2^63) (products may leave fp32's normal range), 13 significant bits (products
  // not exact; unfused, so the hardware FMA does not absorb it), not a binary32 value.
  Accumulation unfused = make_acc(formats::fp32);
  unfused.fused = false;
  const std::vector<double> ones(18, 1.0);
  for (const double bad : {std::ldexp(1.0, -70), std::ldexp(1.0, 64), 1.0 + std::ldexp(1.0, -12), 0.1}) {
    for (const std::size_t at : {std::size_t{3}, std::size_t{8}}) {
      std::vector<double> A(18, 1.0), Cv(4, 0.0);
      A[at] = bad;
      EXPECT_FALSE(k::gemm_fast(unfused, 2, 2, 9, ConstMatrix{A.data(), 9}, ConstMatrix{ones.data(), 2}, Cv.data(),
                                2, false, nullptr, 1, nullptr, nullptr, opts))
          << bad << " at " << at;
      A[at] = 2.0;
      EXPECT_TRUE(k::gemm_fast(unfused, 2, 2, 9, ConstMatrix{A.data(), 9}, ConstMatrix{ones.data(), 2}, Cv.data(), 2,
                               false, nullptr, 1, nullptr, nullptr, opts));
      EXPECT_EQ(Cv[0], 10.0);
    }
  }
}

}  // namespace
}  // namespace roundoff::numerics

namespace roundoff::numerics {
namespace {

// Long sums: above 2 × 512 terms the kernels take each panel in passes of ≈ 512 terms over row blocks of 64 rows,
// the running sums kept in binary32 between passes (gemm_kernels.cpp, split_terms). Every kernel accumulation on
// every tier the CPU has, K just above the split (with a last pass of a few terms) and a K that is no multiple of
// the tile stage's 4 terms nor of the blocks, M across a row block's edge, binary64 and binary32 C, accumulate on
// and off, 1 and 2 threads: bit for bit numerics::gemm's generic path (which the test above holds to the
// definition). A split that restarted a block or a tile at a pass boundary, lost a pass's running sums, or dropped
// the last rows of a row block fails it.
TEST(GemmKernelsLongK, PassesOverLongSumsEqualTheGenericPath) {
  struct LongCase {
    std::string name;
    Accumulation acc;
    Format inputs;
  };
  Accumulation step_flush = make_acc(formats::fp16);
  step_flush.flush.step = true;
  const LongCase cases[] = {{"fp32-seq", make_acc(formats::fp32), formats::fp16},
                            {"fp16-seq", make_acc(formats::fp16), formats::fp16},
                            {"bf16-seq", make_acc(formats::bf16), formats::bf16},
                            {"fp16-seq,flush=step", step_flush, formats::fp16},
                            {"fp16-blocked7-fp32", make_acc(formats::fp16, Order::Blocked, 7), formats::fp16},
                            {"fp32-blocked100-fp32", make_acc(formats::fp32, Order::Blocked, 100), formats::bf16},
                            {"ane-tile4", parse_accumulation("ane-tile4"), formats::fp16},
                            {"ane-tile4-ftz", parse_accumulation("ane-tile4-ftz"), formats::fp16}};
  std::mt19937_64 rng(0x10ca5e);
  std::int64_t compared = 0;
  for (const LongCase& c : cases) {
    std::vector<k::Isa> isas;
    for (const k::Isa isa : isas_to_test())
      if (has_kernel(c.acc, isa)) isas.push_back(isa);
    if (isas.empty()) continue;  // counted below: the fp32 kernel exists on every SIMD tier
    for (const std::size_t K : {std::size_t{1027}, std::size_t{1538}}) {
      const std::size_t M = 67, N = 37;
      const bool accumulate = K == 1538;
      const Regime regime = K == 1027 ? Regime::Normal : Regime::Tiny;
      const auto A = random_values(rng, c.inputs, M * K, regime);
      const auto B = random_values(rng, c.inputs, K * N, regime);
      std::vector<double> C0 = accumulate ? random_values(rng, formats::fp16, M * N, Regime::Normal)
                                          : std::vector<double>(M * N, 0.0);
      std::vector<double> want = C0;
      gemm(c.acc, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, want.data(), N, accumulate, {},
           nullptr, 1, ::roundoff::test::kernels_off());
      const std::vector<float> A32(A.begin(), A.end()), B32(B.begin(), B.end());
      for (const k::Isa isa : isas) {
        const KernelOptions opts{true, isa};
        for (const int threads : {1, 2}) {
          const std::string what = c.name + " isa " + std::string(k::name_of(isa)) + " threads " +
                                   std::to_string(threads) + " K " + std::to_string(K);
          std::vector<double> C = C0;
          ASSERT_TRUE(k::gemm_fast(c.acc, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N,
                                   accumulate, nullptr, threads, nullptr, nullptr, opts))
              << what;
          std::vector<float> C32(C0.begin(), C0.end());
          ASSERT_TRUE(k::gemm_fast(c.acc, M, N, K, ConstMatrix32{A32.data(), K}, ConstMatrix32{B32.data(), N},
                                   C32.data(), N, accumulate, nullptr, threads, nullptr, nullptr, opts))
              << what << " (binary32)";
          for (std::size_t idx = 0; idx < M * N; ++idx) {
            ASSERT_TRUE(same(C[idx], want[idx])) << what << " at (" << idx / N << ',' << idx % N << ") got "
                                                 << C[idx] << " want " << want[idx];
            ASSERT_TRUE(same(static_cast<double>(C32[idx]), want[idx])) << what << " (binary32 C) at " << idx;
            ++compared;
          }
        }
      }
    }
  }
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512: no kernel splits a sum";
  EXPECT_GT(compared, 10000);
}

}  // namespace
}  // namespace roundoff::numerics
