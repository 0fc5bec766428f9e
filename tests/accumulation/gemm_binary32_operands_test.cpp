// kernels::gemm_fast on binary32 operands (ConstMatrix32) and into a binary32 C against gemm_fast on the same
// operands widened to binary64 (itself held to the definition by gemm_kernels_test): the same return value and the
// same bits of every output, for every kernel of gemm_kernels.cpp, every ISA tier the CPU has, the four layouts,
// accumulate on and off, one and two threads, with and without entry casts, runs longer than the widening chunk,
// and values the kernels must decline. The multi-term adder and the binary64 chain decline binary32 operands.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/binary32_arith.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "numerics/round_span.hpp"
#include "tests/accumulation/gemm_test_values.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;
using test::random_values;
using test::Regime;
using test::same;

std::vector<float> narrowed(const std::vector<double>& x) {
  std::vector<float> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = static_cast<float>(x[i]);  // exact: binary32 values
  return r;
}
std::vector<double> widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<k::Isa> tiers() {
  std::vector<k::Isa> out;
  for (const k::Isa isa : {k::Isa::Avx2, k::Isa::Avx512, k::Isa::Avx512Fp16})
    if (k::detected_isa() >= isa) out.push_back(isa);
  return out;
}


/// Operand values of `in`, with NaN encodings the widening must keep as the binary64 operand has them (a signaling
/// NaN with a payload, a negative quiet NaN) when `specials`, and NaNs whose payload fills the fraction (the packs
/// must store them as the quiet NaN: the bf16 kernels' bit rounding would carry them into ±0).
std::vector<float> operand(std::mt19937_64& rng, const Format& in, std::size_t n, bool specials) {
  std::vector<float> v = narrowed(random_values(rng, in, n, specials ? Regime::Specials : Regime::Normal));
  if (specials && n > 7) {
    v[n / 3] = std::bit_cast<float>(0x7FA00123u);
    v[n / 2] = std::bit_cast<float>(0xFFC00001u);
    v[n / 5] = std::bit_cast<float>(0x7FFFFFFFu);
    v[n - 2] = std::bit_cast<float>(0xFFFFFFFFu);
  }
  return v;
}

TEST(GemmBinary32Operands, SameBitsAsTheWidenedOperands) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512: gemm_fast declines every call";
  Accumulation unfused = test::make_acc(formats::fp32);
  unfused.fused = false;
  unfused.product_format = formats::fp32;
  const Accumulation accs[] = {test::make_acc(formats::fp16),
                               test::make_acc(formats::bf16),
                               test::make_acc(formats::fp32),
                               test::make_acc(formats::fp32, Order::Blocked, 32),
                               test::make_acc(formats::fp16, Order::Blocked, 16),
                               unfused,
                               parse_accumulation("ane-tile4"),
                               parse_accumulation("ane-tile4-ftz"),
                               parse_accumulation("acc=fp16,flush=step")};
  const RoundingPlan to_fp16(formats::fp16), to_fp32(formats::fp32), to_bf16(formats::bf16);
  // The fp16 cast with flush: binary32 values below fp16's smallest normal (2^-14) occur among the fp32 operands,
  // where bf16's (2^-126) does not.
  const k::OperandCast casts[] = {{&to_fp16, Rounding::NearestEven, false, false},
                                  {&to_fp32, Rounding::NearestEven, false, false},
                                  {&to_bf16, Rounding::TowardZero, true, true},
                                  {&to_fp16, Rounding::Up, false, true}};
  struct Dims {
    std::size_t M, N, K;
  };
  const Dims dims[] = {{37, 70, 300}, {131, 9, 45}};  // K > the 256-value widening chunk; M over two 64-row runs
  std::mt19937_64 rng(45);
  std::int64_t compared = 0, declined = 0;
  std::int64_t scanned[2][2] = {};  // [nan_free][fp16_values] of the binary32 C's StoreScan
  for (const Accumulation& a : accs)
    for (const Dims& d : dims)
      for (const Format& in : {formats::fp16, formats::fp32})
        for (const bool specials : {false, true})
          for (int layout = 0; layout < 4; ++layout)
            for (int cast = -1; cast < 4; ++cast) {
              const bool at = (layout & 1) != 0, bt = (layout & 2) != 0, accumulate = (layout + cast) % 2 != 0;
              const std::size_t lda = (at ? d.M : d.K) + 3, ldb = (bt ? d.K : d.N) + 5, ldc = d.N + 2;
              const std::vector<float> A = operand(rng, in, (at ? d.K : d.M) * lda, specials);
              const std::vector<float> B = operand(rng, in, (bt ? d.N : d.K) * ldb, specials);
              const std::vector<float> C0 = narrowed(random_values(rng, formats::fp16, d.M * ldc, Regime::Normal));
              const std::vector<double> Aw = widened(A), Bw = widened(B);
              const k::OperandCast* c = cast < 0 ? nullptr : &casts[cast];
              // The generic path too (kernels off), on the operands cast by cast_values (the cast's definition):
              // the packing of runs longer than a tile (K = 300) in every layout, and the packings that cast while
              // they pack (a transposed operand's runs cast a block at a time), are held to the definition, not only
              // to the binary64 kernel path.
              std::vector<double> generic = widened(C0);
              {
                std::vector<double> Ac = Aw, Bc = Bw;
                if (c != nullptr) {
                  k::cast_values(*c, Aw, Ac);
                  k::cast_values(*c, Bw, Bc);
                }
                gemm(a, d.M, d.N, d.K, ConstMatrix{Ac.data(), lda, at}, ConstMatrix{Bc.data(), ldb, bt},
                     generic.data(), ldc, accumulate, {}, nullptr, 1, KernelOptions{false, k::Isa::None});
              }
              for (const k::Isa isa : tiers()) {
                const KernelOptions opts{true, isa};
                for (const int threads : {1, 2}) {
                  std::vector<double> want = widened(C0), c64 = widened(C0), c64b = widened(C0);
                  std::vector<float> c32 = C0, c32b = C0;
                  const ConstMatrix Am{Aw.data(), lda, at}, Bm{Bw.data(), ldb, bt};
                  const ConstMatrix32 A32{A.data(), lda, at}, B32{B.data(), ldb, bt};
                  const bool ok = k::gemm_fast(a, d.M, d.N, d.K, Am, Bm, want.data(), ldc, accumulate, nullptr,
                                               threads, c, c, opts);
                  const bool r1 = k::gemm_fast(a, d.M, d.N, d.K, A32, Bm, c64.data(), ldc, accumulate, nullptr,
                                               threads, c, c, opts);
                  const bool r2 = k::gemm_fast(a, d.M, d.N, d.K, A32, B32, c64b.data(), ldc, accumulate, nullptr,
                                               threads, c, c, opts);
                  k::StoreScan scan;
                  const bool r3 = k::gemm_fast(a, d.M, d.N, d.K, A32, Bm, c32.data(), ldc, accumulate, nullptr,
                                               threads, c, c, opts, nullptr, &scan);
                  const bool r4 = k::gemm_fast(a, d.M, d.N, d.K, A32, B32, c32b.data(), ldc, accumulate, nullptr,
                                               threads, c, c, opts);
                  const std::string where = std::string(k::kernel_name(a, opts) ? k::kernel_name(a, opts) : "none") +
                                            " in " + name_of(in) + " layout " + std::to_string(layout) + " cast " +
                                            std::to_string(cast) + " threads " + std::to_string(threads);
                  ASSERT_EQ(r1, ok) << where;
                  ASSERT_EQ(r2, ok) << where;
                  ASSERT_EQ(r3, ok) << where;
                  ASSERT_EQ(r4, ok) << where;
                  if (!ok) {
                    ++declined;  // C untouched by every form
                    for (std::size_t i = 0; i < C0.size(); ++i)
                      ASSERT_TRUE(same(c64[i], C0[i]) && same(c32[i], C0[i])) << where;
                    continue;
                  }
                  // The scan of the stored results: numerics' scans of C's rows (the M×N outputs, not ldc's gap).
                  bool nan_free = true, fp16_values = true;
                  for (std::size_t i = 0; i < d.M; ++i) {
                    const std::span<const float> row(c32.data() + i * ldc, d.N);
                    nan_free = nan_free && !any_nan(row);
                    fp16_values = fp16_values && binary16_values(row, false);
                  }
                  ASSERT_EQ(scan.nan_free, nan_free) << where;
                  ASSERT_EQ(scan.fp16_values, fp16_values) << where;
                  ++scanned[nan_free][fp16_values];
                  for (std::size_t i = 0; i < want.size(); ++i) {
                    ASSERT_TRUE(same(c64[i], want[i]) && same(c64b[i], want[i])) << where << " at " << i;
                    ASSERT_TRUE(same(want[i], generic[i])) << where << " generic at " << i;
                    // A binary32 C holds the same value, NaN encodings included (the widening is exact).
                    ASSERT_EQ(std::bit_cast<std::uint64_t>(static_cast<double>(c32[i])),
                              std::bit_cast<std::uint64_t>(want[i])) << where << " at " << i;
                    ASSERT_EQ(std::bit_cast<std::uint32_t>(c32b[i]), std::bit_cast<std::uint32_t>(c32[i])) << where;
                    ++compared;
                  }
                }
              }
            }
  EXPECT_GT(compared, 1000000);
  // Each answer of the scan that can occur did (fp16 values imply no NaN).
  EXPECT_GT(scanned[1][1], 10);
  EXPECT_GT(scanned[1][0], 10);
  EXPECT_GT(scanned[0][0], 10);
  EXPECT_GT(declined, 10);  // fp32 values (> 12 significant bits) under the fp16/bf16 accumulators
}

/// The StoreScan is and-ed over every thread's rows: fp16 operands whose only NaN (under an fp16 accumulator) or
/// only non-fp16 product (1 + 2^-20 under an fp32 one) lies in the first or in the last row of A, so that with two
/// threads one thread alone stores the results that decide the scan.
TEST(GemmBinary32Operands, StoreScanCoversEveryThreadsRows) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512: gemm_fast declines every call";
  const std::size_t M = 131, N = 70, K = 45;
  std::mt19937_64 rng(8);
  const std::vector<float> A0 = narrowed(random_values(rng, formats::fp16, M * K, Regime::Normal));
  const std::vector<float> B = narrowed(random_values(rng, formats::fp16, K * N, Regime::Normal));
  for (const bool nan : {true, false})
    for (const std::size_t row : {std::size_t{0}, M - 1})
      for (const k::Isa isa : tiers())
        for (const int threads : {1, 2}) {
          std::vector<float> A = A0;
          for (std::size_t kk = 0; kk < K; ++kk) A[row * K + kk] = 0.0f;
          A[row * K + 3] = nan ? std::numeric_limits<float>::quiet_NaN() : 1.0f + 0x1p-20f;
          std::vector<float> Bs = B;
          if (!nan)  // the non-fp16 product must reach a sum as it is: B's row 3 is one 1 and zeros
            for (std::size_t j = 0; j < N; ++j) Bs[3 * N + j] = j == 5 ? 1.0f : 0.0f;
          const Accumulation a = test::make_acc(nan ? formats::fp16 : formats::fp32);
          std::vector<float> C(M * N);
          k::StoreScan scan;
          const std::string where = std::string(nan ? "NaN" : "non-fp16") + " in row " + std::to_string(row) +
                                    " isa " + std::to_string(static_cast<int>(isa)) + " threads " +
                                    std::to_string(threads);
          ASSERT_TRUE(k::gemm_fast(a, M, N, K, ConstMatrix32{A.data(), K, false}, ConstMatrix32{Bs.data(), N, false},
                                   C.data(), N, false, nullptr, threads, nullptr, nullptr, KernelOptions{true, isa},
                                   nullptr, &scan))
              << where;
          EXPECT_EQ(scan.nan_free, !nan) << where;
          EXPECT_FALSE(scan.fp16_values) << where;
          EXPECT_EQ(any_nan(std::span<const float>(C)), nan) << where;
        }
}

TEST(GemmBinary32Operands, AdderAndBinary64ChainDecline) {
  const std::vector<float> x(16, 1.0f);
  std::vector<double> C(16, 0.0);
  for (const char* name : {"fp64-seq", "tc-h100"}) {
    const Accumulation a = parse_accumulation(name);
    EXPECT_FALSE(k::gemm_fast(a, 4, 4, 4, ConstMatrix32{x.data(), 4}, ConstMatrix32{x.data(), 4}, C.data(), 4, false,
                              nullptr, 1))
        << name;
    EXPECT_EQ(C[0], 0.0) << name;
  }
}

}  // namespace
}  // namespace roundoff::numerics
