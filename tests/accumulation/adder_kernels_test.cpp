// The multi-term adder's SIMD kernels (numerics/adder_kernels.hpp) against the generic path (kernels off), bit for
// bit and overflow count for overflow count: every tc-* preset and variants of each adder field, on randomized and
// adversarial operands (cancellations, subnormal products, overflow, signed zeros, inf/NaN, ragged K, N and M,
// C as the starting value, promotion, transposed operands), each ISA tier, one and two threads, and gemm_ranged.
// The generic path itself is proven against MPFR by accumulate_twin_test, so this closes the chain.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/adder_kernels.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;

bool same(double x, double y) { return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y); }

/// The input format each spec is meant for (its operands are drawn from it).
Format input_format(const Accumulation& a) {
  if (a.adder.anchor == AdderAnchor::LeadingBit) return formats::fp16;
  switch (a.adder.input_emin) {
    case -14: return a.adder.group == 32 ? formats::e5m2 : formats::fp16;
    case -6: return formats::e4m3;
    default: return a.adder.group == 8 ? formats::tf32 : formats::bf16;
  }
}

enum class Class { Random, Cancel, Subnormal, Overflow, Zeros, Specials, FewSpecials, WideRange };
const char* name_of(Class c) {
  switch (c) {
    case Class::Random: return "random";
    case Class::Cancel: return "cancel";
    case Class::Subnormal: return "subnormal";
    case Class::Overflow: return "overflow";
    case Class::Zeros: return "zeros";
    case Class::Specials: return "specials";
    case Class::FewSpecials: return "few-specials";
    case Class::WideRange: return "wide-range";
  }
  return "?";
}

/// A value of f: a random significand at 2^e, rounded to f.
double value_at(std::mt19937_64& rng, const RoundingPlan& plan, int e) {
  std::uniform_real_distribution<double> sig(1.0, 2.0);
  const double s = (rng() & 1) ? -1.0 : 1.0;
  const double v = round_to(plan, Rounding::NearestEven, s * std::ldexp(sig(rng), e));
  return std::isfinite(v) ? v : s * plan.max_finite;  // the top binade may round to inf (NaN for e4m3)
}

std::vector<double> operand(std::mt19937_64& rng, const Format& f, std::size_t n, Class c) {
  const RoundingPlan plan(f);
  std::uniform_int_distribution<int> small(-3, 3), wide(f.emin - f.precision + 1, f.emax);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v(n);
  for (double& x : v) {
    switch (c) {
      case Class::Random:
      case Class::Cancel: x = value_at(rng, plan, small(rng)); break;
      case Class::FewSpecials:  // half near the top of the range, so that outputs overflow beside the specials
        x = value_at(rng, plan, (rng() & 1) ? f.emax - static_cast<int>(rng() % 3) : small(rng));
        break;
      case Class::Subnormal:  // products and sums in and around the subnormal ranges
        x = value_at(rng, plan, u(rng) < 0.5 ? f.emin - static_cast<int>(rng() % static_cast<unsigned>(f.precision))
                                             : f.emin + static_cast<int>(rng() % 4));
        break;
      case Class::Overflow: x = value_at(rng, plan, f.emax - static_cast<int>(rng() % 3)); break;
      case Class::Zeros: x = u(rng) < 0.6 ? (rng() & 1 ? -0.0 : 0.0) : value_at(rng, plan, small(rng)); break;
      case Class::Specials: {
        const double r = u(rng);
        x = r < 0.02   ? HUGE_VAL
            : r < 0.04 ? -HUGE_VAL
            : r < 0.05 ? std::numeric_limits<double>::quiet_NaN()
                       : value_at(rng, plan, small(rng));
        break;
      }
      case Class::WideRange: x = u(rng) < 0.1 ? 0.0 : value_at(rng, plan, wide(rng)); break;
    }
  }
  return v;
}

struct Case {
  std::size_t M, N, K;
  bool at = false, bt = false;  // transposed storage
};

struct Outcome {
  std::vector<double> C;
  AccumStats stats;
  bool fast = false;
};

/// A as M×K (or K×M stored), B as K×N (or N×K stored), C initial; runs gemm under `a` with kernels on or off.
Outcome product(const Accumulation& a, const Case& cs, const std::vector<double>& A, const std::vector<double>& B,
                const std::vector<double>& C0, bool accumulate, bool kernels_on, int threads, k::Isa isa) {
  const KernelOptions opts = kernels_on ? test::kernels_at(isa) : test::kernels_off();
  Outcome o;
  o.C = C0;
  const ConstMatrix Am{A.data(), cs.at ? cs.M : cs.K, cs.at}, Bm{B.data(), cs.bt ? cs.K : cs.N, cs.bt};
  if (kernels_on) {
    AccumStats st;
    o.fast = k::gemm_fast(a, cs.M, cs.N, cs.K, Am, Bm, o.C.data(), cs.N, accumulate, &st, threads, nullptr, nullptr,
                          opts);
    if (o.fast) {
      o.stats = st;
      return o;
    }
  }
  gemm(a, cs.M, cs.N, cs.K, Am, Bm, o.C.data(), cs.N, accumulate, {}, &o.stats, threads, opts);
  return o;
}

/// Compares kernel and generic on one case; returns whether the kernel took it.
bool compare(const Accumulation& a, const Case& cs, Class cls, bool accumulate, std::mt19937_64& rng,
             k::Isa isa) {
  const std::string label = k::name_of(isa);
  const Format in = input_format(a);
  std::vector<double> A = operand(rng, in, cs.M * cs.K, cls), B = operand(rng, in, cs.K * cs.N, cls);
  if (cls == Class::Cancel) {
    // Columns that cancel: b_(k+1)j = −b_kj with a_(k+1) = a_k (A row-major, B row-major as generated), across
    // group boundaries too, and some sums that cancel all but a few low bits.
    for (std::size_t i = 0; i < cs.M; ++i)
      for (std::size_t kk = 0; kk + 1 < cs.K; kk += 2) A[i * cs.K + kk + 1] = A[i * cs.K + kk];
    for (std::size_t kk = 0; kk + 1 < cs.K; kk += 2)
      for (std::size_t j = 0; j < cs.N; ++j)
        B[(kk + 1) * cs.N + j] = (j % 3 == 0) ? -B[kk * cs.N + j]
                                              : -round_to(RoundingPlan(in), Rounding::NearestEven,
                                                          B[kk * cs.N + j] * (1 + std::ldexp(1.0, -3)));
  }
  if (cls == Class::FewSpecials) {
    // One inf in A, one inf or NaN in B (and a non-finite C_ij below): the kernel runs, the outputs that read
    // them go to the generic path, and the overflow counts of the others must still be the generic ones.
    A[rng() % A.size()] = (rng() & 1) ? HUGE_VAL : -HUGE_VAL;
    B[rng() % B.size()] = (rng() & 1) ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
  }
  std::vector<double> C0(cs.M * cs.N, 0.0);
  if (accumulate) {
    const Format cf = a.promote_every > 0 ? formats::fp32 : a.format;
    const RoundingPlan cp(cf);
    std::uniform_real_distribution<double> u(0, 1);
    for (double& c : C0) {
      const double r = u(rng);
      if (cls == Class::Overflow) c = value_at(rng, cp, cf.emax);
      else if (r < 0.1) c = (rng() & 1) ? -0.0 : 0.0;
      else if (r < 0.2 && a.promote_every == 0) c = std::ldexp(static_cast<double>(rng() >> 11), -60);  // not in cf
      else if (r < 0.3) c = value_at(rng, cp, cf.emin - 2);
      else c = value_at(rng, cp, static_cast<int>(rng() % 8) - 4);
      if (cls == Class::Specials && r > 0.98) c = std::numeric_limits<double>::quiet_NaN();
    }
    if (cls == Class::FewSpecials) C0[rng() % C0.size()] = -HUGE_VAL;
  }
  const int threads = cs.M > 8 ? 2 : 1;
  const Outcome fast = product(a, cs, A, B, C0, accumulate, true, threads, isa);
  const Outcome slow = product(a, cs, A, B, C0, accumulate, false, threads, isa);
  for (std::size_t i = 0; i < fast.C.size(); ++i)
    if (!same(fast.C[i], slow.C[i])) {
      ADD_FAILURE() << label << " " << canonical(a) << " class " << name_of(cls) << " M=" << cs.M << " N=" << cs.N
                    << " K=" << cs.K << (accumulate ? " +C" : "") << ": element " << i << " kernel " << fast.C[i]
                    << " generic " << slow.C[i] << (fast.fast ? "" : " (kernel declined)");
      return fast.fast;
    }
  EXPECT_EQ(fast.stats.overflows, slow.stats.overflows) << label << " " << canonical(a) << " " << name_of(cls);
  EXPECT_EQ(fast.stats.terms, slow.stats.terms);
  if (fast.fast) {  // the same bits with one thread (determinism)
    const Outcome one = product(a, cs, A, B, C0, accumulate, true, 1, isa);
    for (std::size_t i = 0; i < one.C.size(); ++i) EXPECT_TRUE(same(one.C[i], fast.C[i])) << label << " threads";
  }
  return fast.fast;
}

std::vector<Accumulation> specs() {
  std::vector<Accumulation> v;
  for (const char* s :
       {"tc-h100", "tc-h100-bf16", "tc-h100-tf32", "tc-h100-f16acc", "tc-h100-fp8", "tc-h100-fp8-e5m2",
        "tc-h100-fp8,promote=32:fp32", "tc-h100-fp8-e5m2,promote=128:fp32", "tc-h100-fp8,promote=40:fp32",
        "tc-v100", "tc-a100", "tc-h100,align=nearest-even", "tc-h100,normalize=nearest-even",
        "tc-h100,edges=ieee", "tc-h100,group=4", "tc-h100,group=32,carry=8", "tc-h100,extra=0,carry=2",
        "tc-h100-bf16,edges=ieee,normalize=nearest-even", "tc-v100,align=nearest-even,carry=3",
        "tc-h100,acc=bf16:toward-zero", "tc-h100-f16acc,edges=inf-pos-zero", "tc-h100,promote=64:fp32,acc=fp32:nearest-even"})
    v.push_back(parse_accumulation(s));
  return v;
}

std::vector<k::Isa> tiers() {
  std::vector<k::Isa> t;
  for (k::Isa isa : {k::Isa::Avx512, k::Isa::Avx2})
    if (k::detected_isa() >= isa) t.push_back(isa);
  return t;
}

TEST(AdderKernels, CoverThePresetsTheyShould) {
  if (tiers().empty()) GTEST_SKIP() << "no AVX2";
  for (const char* s : {"tc-h100", "tc-h100-bf16", "tc-h100-tf32", "tc-h100-f16acc", "tc-h100-fp8",
                        "tc-h100-fp8-e5m2", "tc-h100-fp8,promote=128:fp32", "tc-v100", "tc-a100"})
    EXPECT_NE(k::kernel_name(parse_accumulation(s)), nullptr) << s;
  // Declined: what the kernels do not implement.
  for (const char* s : {"tc-h100,order=reverse", "tc-h100,unfused,product=fp32", "tc-h100,normalize=up",
                        "tc-h100,align=nearest-even,normalize=nearest-even,carry=0", "tc-h100,product=fp16",
                        "tc-h100-fp8,promote=32:bf16", "tc-h100,promote=32:fp32"})
    EXPECT_EQ(k::kernel_name(parse_accumulation(s)), nullptr) << s;
}

TEST(AdderKernels, MatchTheGenericPathOnEveryClass) {
  std::mt19937_64 rng(20261129);
  const Case shapes[] = {{5, 19, 37}, {4, 16, 64}, {1, 3, 1}, {9, 33, 100, true, false}, {3, 17, 33, false, true},
                         {6, 8, 129}};
  for (k::Isa isa : tiers()) {
    const std::string label = k::name_of(isa);
    for (const Accumulation& a : specs()) {
      int taken = 0;
      for (Class cls : {Class::Random, Class::Cancel, Class::Subnormal, Class::Overflow, Class::Zeros,
                        Class::Specials, Class::FewSpecials, Class::WideRange})
        for (const Case& cs : shapes)
          for (bool acc : {false, true}) {
            // Operands as generated are row-major M×K and K×N; transposed cases read them as stored K×M / N×K.
            taken += compare(a, cs, cls, acc, rng, isa);
          }
      // 96 cases per spec; the kernel must run on nearly all but those whose operands are mostly inf/NaN.
      if (k::kernel_name(a, test::kernels_at(isa)) != nullptr) {
        EXPECT_GE(taken, 70) << label << " " << canonical(a);
      } else {
        EXPECT_EQ(taken, 0) << label << " " << canonical(a);
      }
    }
  }
}

TEST(AdderKernels, NonFiniteOperandsGoToTheGenericPathOutputByOutput) {
  if (tiers().empty()) GTEST_SKIP() << "no AVX2";
  const Accumulation a = parse_accumulation("tc-h100");
  const std::size_t M = 6, N = 5, K = 40;
  for (double bad : {HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN(), 0x1.0000001p0}) {
    std::vector<double> A(M * K, 1.0), B(K * N, 0.5), C0(M * N, 0.25);
    B[7 * N + 2] = bad;  // column 2
    A[3 * K + 30] = bad;  // row 3
    C0[1 * N + 4] = std::isfinite(bad) ? 0.25 : bad;
    for (bool acc : {false, true}) {
      std::vector<double> fast = C0, slow = C0;
      AccumStats fs, ss;
      const bool took = k::gemm_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, fast.data(), N,
                                     acc, &fs, 1);
      // inf and NaN: only the outputs that read them are recomputed; a 29-bit operand: the call declines.
      EXPECT_EQ(took, !std::isfinite(bad)) << bad;
      if (!took) continue;
      gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, slow.data(), N, acc, {}, &ss, 1,
           test::kernels_off());
      for (std::size_t e = 0; e < M * N; ++e) EXPECT_TRUE(same(fast[e], slow[e])) << bad << " element " << e;
      EXPECT_EQ(fs.overflows, ss.overflows);
    }
  }
  // Most outputs reading a NaN: the generic path for the whole product.
  std::vector<double> A(M * K, std::numeric_limits<double>::quiet_NaN()), B(K * N, 0.5), C(M * N, 0.0);
  EXPECT_FALSE(k::gemm_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, false,
                            nullptr, 1));
}

TEST(AdderKernels, RangedMatchesTheGenericPath) {
  std::mt19937_64 rng(7);
  for (k::Isa isa : tiers()) {
    for (const char* s : {"tc-h100", "tc-h100-fp8,promote=32:fp32", "tc-v100", "tc-h100-f16acc"}) {
      const Accumulation a = parse_accumulation(s);
      const Format in = input_format(a);
      for (Class cls : {Class::Random, Class::Cancel, Class::Subnormal, Class::Zeros}) {
        const std::size_t M = 11, N = 21, K = 75;
        const std::vector<double> A = operand(rng, in, M * K, cls), B = operand(rng, in, K * N, cls);
        std::vector<KRange> rows(M);
        for (std::size_t i = 0; i < M; ++i) {
          const std::size_t lo = i < 4 ? 3 : rng() % 40;  // a run of equal ranges, then random ones
          rows[i] = {lo, i < 4 ? 70 : lo + 1 + rng() % (K - lo)};
        }
        std::vector<double> fast(M * N, 1.0), slow(M * N, 2.0);
        ASSERT_TRUE(k::gemm_ranged_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, rows.data(),
                                        fast.data(), N, test::kernels_at(isa)))
            << s;
        gemm_ranged(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, rows, slow.data(), N, {},
                    test::kernels_off());
        for (std::size_t i = 0; i < M * N; ++i)
          ASSERT_TRUE(same(fast[i], slow[i])) << k::name_of(isa) << " " << s << " " << name_of(cls) << " element "
                                              << i << ": " << fast[i] << " vs " << slow[i];
      }
    }
  }
}

}  // namespace
}  // namespace roundoff::numerics
