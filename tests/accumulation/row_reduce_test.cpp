// numerics::reduce_rows (independent reductions in SIMD lanes) against numerics::dot / numerics::sum per
// reduction, bit for bit, for every accumulation it has a lane kernel for (fp16/bf16/tf32/fp32 sequential,
// fp64 sequential, the ane-tile4 tile stage), at every ISA tier this CPU has, as dots and as sums, with rows
// read along memory (x_step 1) and down columns (x_row 1), on ragged batches (not a multiple of the lane
// count, lengths 0..long, mixed in one block) of typical, cancelling, wide-exponent (subnormal results),
// overflowing and special (±0, ±inf, NaN) data; and that accumulations without a kernel are declined.
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
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "numerics/row_reduce.hpp"

namespace roundoff::numerics {
namespace {

bool same(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// Midpoint: binary64 terms built so that the running sum s + t lands exactly on a midpoint of the accumulator
/// format in binary64 with a nonzero TwoSum error (t = ±ulp(s)/2 ± a tiny offset), and on exact midpoints.
enum class Data { Typical, Cancel, Wide, Overflow, Specials, Midpoint };
const char* name_of(Data d) {
  switch (d) {
    case Data::Typical: return "typical";
    case Data::Cancel: return "cancel";
    case Data::Wide: return "wide";
    case Data::Overflow: return "overflow";
    case Data::Specials: return "specials";
    case Data::Midpoint: return "midpoint";
  }
  return "?";
}

/// n values of the input format `in` (fp64: any double) in the regime d.
std::vector<double> values(const Format& in, Data d, std::size_t n, std::mt19937_64& rng) {
  const RoundingPlan plan(in);
  std::vector<double> v(n);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int wide_lo = in.emin - in.precision, wide_hi = in.emax;
  std::uniform_int_distribution<int> ewide(std::max(wide_lo, -1070), std::min(wide_hi, 1020));
  std::uniform_int_distribution<int> ebig(in.emax / 2 - 2, in.emax / 2 + 1);
  for (std::size_t i = 0; i < n; ++i) {
    double x = u(rng);
    switch (d) {
      case Data::Typical: x = std::ldexp(x, static_cast<int>(rng() % 8) - 4); break;
      case Data::Cancel: x = (i % 2 == 1 && rng() % 4 != 0) ? -v[i - 1] : std::ldexp(x, static_cast<int>(rng() % 20) - 6); break;
      case Data::Wide: x = std::ldexp(x, ewide(rng)); break;
      case Data::Overflow: x = std::ldexp(x, ebig(rng)); break;
      case Data::Specials: {
        const double inf = std::numeric_limits<double>::infinity();
        const double s[] = {0.0, -0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
        x = rng() % 40 == 0 ? s[rng() % 6] : (rng() % 3 == 0 ? -0.0 : std::ldexp(x, static_cast<int>(rng() % 8) - 4));
        break;
      }
      case Data::Midpoint: break;  // built in check()
    }
    v[i] = std::isfinite(x) ? round_to(plan, Rounding::NearestEven, x) : x;
  }
  return v;
}

struct Case {
  std::string acc;
  Format input;
};

/// Every reduction of a batch of R rows (lengths ragged, some 0, some long) against dot/sum.
void check(const KernelOptions& opts, const Accumulation& a, const Format& in, Data d, bool is_dot, bool columns,
           std::uint64_t seed,
           const std::string& what) {
  std::mt19937_64 rng(seed);
  const std::size_t R = 37 + seed % 29;  // never a multiple of 16 or 32
  std::vector<std::size_t> len(R);
  std::size_t longest = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const std::size_t kind = rng() % 10;
    len[r] = kind == 0 ? 0 : kind == 1 ? 1 + rng() % 3 : kind == 2 ? 600 + rng() % 300 : rng() % 90;
    longest = std::max(longest, len[r]);
  }
  // x, y as R × longest (rows) or longest × R (columns: reduction r is column r)
  std::vector<double> x = values(in, d, R * longest, rng), y = values(in, d, R * longest, rng);
  if (d == Data::Midpoint) {  // term k of reduction r: x·1 with x = a_r, then ±ulp_acc(a_r)/2·(1 ± 2^-m)
    std::uniform_real_distribution<double> u(1.0, 2.0);
    for (std::size_t r = 0; r < R; ++r) {
      const double a_r = round_to(a.format, Rounding::NearestEven, std::ldexp(u(rng), static_cast<int>(rng() % 6)));
      const double half = std::ldexp(1.0, std::ilogb(a_r) - a.format.precision);
      for (std::size_t k = 0; k < longest; ++k) {
        const std::size_t at = columns ? k * R + r : r * longest + k;
        const double off = rng() % 4 == 0 ? 0.0 : std::ldexp(1.0, -static_cast<int>(30 + rng() % 20));
        x[at] = k == 0 ? a_r : (rng() % 2 ? 1.0 : -1.0) * half * (1.0 + (rng() % 2 ? off : -off));
        y[at] = 1.0;
      }
    }
  }
  RowBatch rb{len, x.data(), columns ? 1 : static_cast<std::ptrdiff_t>(longest),
              columns ? static_cast<std::ptrdiff_t>(R) : 1};
  if (is_dot) {
    rb.y = y.data();
    rb.y_row = rb.x_row;
    rb.y_step = rb.x_step;
  }
  std::vector<double> out(R, 12345.0);
  std::size_t recomputed = 0;
  ASSERT_TRUE(reduce_rows(a, rb, out, &recomputed, opts)) << what;
  // typical data of narrow inputs stays in the lanes (a kernel that flags everything fails here)
  if (d == Data::Typical && in.precision <= 11) {
    EXPECT_EQ(recomputed, 0u) << what;
  }
  int wrong = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const auto ri = static_cast<std::ptrdiff_t>(r);
    double want;
    if (is_dot) {
      want = dot(a, x.data() + ri * rb.x_row, rb.x_step, y.data() + ri * rb.y_row, rb.y_step, len[r]);
    } else {
      std::vector<double> t(len[r]);
      for (std::size_t k = 0; k < len[r]; ++k) t[k] = x[static_cast<std::size_t>(ri * rb.x_row + static_cast<std::ptrdiff_t>(k) * rb.x_step)];
      want = sum(a, t);
    }
    if (!same(out[r], want) && wrong++ < 3)
      ADD_FAILURE() << what << " row " << r << " (length " << len[r] << "): lanes " << out[r] << " ("
                    << std::bit_cast<std::uint64_t>(out[r]) << "), definition " << want << " ("
                    << std::bit_cast<std::uint64_t>(want) << ")";
  }
  EXPECT_EQ(wrong, 0) << what;
}

class RowReduce : public ::testing::Test {};

TEST_F(RowReduce, EqualsDotAndSumPerReductionAtEveryTier) {
  const std::vector<Case> cases = {
      {"fp16-seq", formats::fp16}, {"bf16-seq", formats::bf16},   {"fp32-seq", formats::fp32},
      {"fp32-seq", formats::fp16}, {"acc=tf32,order=seq", formats::bf16}, {"fp64-seq", formats::fp64},
      {"fp64-seq", formats::fp32}, {"ane-tile4", formats::fp16},  {"ane-tile4", formats::fp32},
      {"acc=bf16,tile=3:bf16:toward-zero", formats::bf16},
      {"fp16-seq,flush=step", formats::fp16}, {"fp16-seq,flush=step", formats::fp32},
      {"bf16-seq,flush=step", formats::bf16}, {"fp32-seq,flush=step:fp16", formats::fp16},
  };
  int tiers = 0;
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (kernels::detected_isa() < isa) continue;
    ++tiers;
    const KernelOptions opts{true, isa};
    std::uint64_t seed = 1;
    for (const Case& c : cases) {
      const Accumulation a = parse_accumulation(c.acc);
      ASSERT_NE(row_kernel_name(a, opts), nullptr) << c.acc;
      for (Data d : {Data::Typical, Data::Cancel, Data::Wide, Data::Overflow, Data::Specials})
        for (bool is_dot : {true, false})
          for (bool columns : {false, true})
            check(opts, a, c.input, d, is_dot, columns, seed++,
                  c.acc + " on " + name_of(c.input) + " inputs, " + name_of(d) + (is_dot ? ", dot" : ", sum") +
                      (columns ? ", columns" : ", rows") + ", " + kernels::name_of(isa));
    }
  }
  if (tiers == 0) GTEST_SKIP() << "no AVX2 on this CPU";
}

TEST_F(RowReduce, RoundsBinary64MidpointsByTheTwoSumError) {
  int tiers = 0;
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (kernels::detected_isa() < isa) continue;
    ++tiers;
    const KernelOptions opts{true, isa};
    std::uint64_t seed = 1000;
    for (const char* spec : {"fp16-seq", "bf16-seq", "fp32-seq"})
      for (bool is_dot : {true, false})
        for (bool columns : {false, true})
          check(opts, parse_accumulation(spec), formats::fp64, Data::Midpoint, is_dot, columns, seed++,
                std::string(spec) + " midpoints" + (is_dot ? ", dot" : ", sum") + (columns ? ", columns" : ", rows") +
                    ", " + kernels::name_of(isa));
  }
  if (tiers == 0) GTEST_SKIP() << "no AVX2 on this CPU";
}

/// flush=step in the lanes: 2^-20 + 2^-20 in fp16 is 2^-19 (a subnormal) without the flush; with it the first
/// partial sum 2^-20 is already flushed to +0 and so is the total; −2^-20 gives −0. A normal partial sum stays.
TEST_F(RowReduce, TheStepFlushZeroesSubnormalPartialSumsInTheLanes) {
  int tiers = 0;
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (kernels::detected_isa() < isa) continue;
    ++tiers;
    const KernelOptions opts{true, isa};
    const Accumulation plain = parse_accumulation("fp16-seq"), flush = parse_accumulation("fp16-seq,flush=step");
    ASSERT_NE(row_kernel_name(flush, opts), nullptr);
    const double t = std::ldexp(1.0, -20);
    const std::vector<double> x = {t, t, -t, -t, std::ldexp(1.0, -14), t};
    const std::vector<std::size_t> len = {2, 2, 2};
    std::vector<double> out(3, 7.0);
    ASSERT_TRUE(reduce_rows(plain, RowBatch{len, x.data(), 2, 1}, out, nullptr, opts));
    EXPECT_EQ(out[0], 2 * t);
    ASSERT_TRUE(reduce_rows(flush, RowBatch{len, x.data(), 2, 1}, out, nullptr, opts));
    EXPECT_TRUE(same(out[0], 0.0)) << out[0];
    EXPECT_TRUE(same(out[1], -0.0)) << out[1];
    EXPECT_EQ(out[2], std::ldexp(1.0, -14) + t);  // 2^-14 is normal: kept, and the sum is normal
    for (std::size_t r = 0; r < 3; ++r)
      EXPECT_TRUE(same(out[r], sum(flush, std::span<const double>(x.data() + 2 * r, 2)))) << r;
  }
  if (tiers == 0) GTEST_SKIP() << "no AVX2 on this CPU";
}

TEST_F(RowReduce, DeclinesAccumulationsWithoutALaneKernel) {
  const std::vector<double> x(8, 1.0);
  const std::vector<std::size_t> len = {8};
  std::vector<double> out(1, 7.0);
  for (const char* spec : {"fp16-pairwise", "fp16-kahan", "fp16-reverse", "fp16-splitk32-fp32", "fp16-sr",
                           "fp16-promote128-fp32", "tc-v100", "fp16-unfused-seq", "acc=fp16:toward-zero,order=seq",
                           "acc=e4m3,order=seq", "ane-tile4,tile=4:fp16:nearest-even", "ane-tile4,flush=step",
                           "fp64-seq,flush=step"}) {
    const Accumulation a = parse_accumulation(spec);
    EXPECT_EQ(row_kernel_name(a), nullptr) << spec;
    EXPECT_FALSE(reduce_rows(a, RowBatch{len, x.data(), 8, 1, x.data(), 8, 1}, out)) << spec;
    EXPECT_EQ(out[0], 7.0) << spec;
  }
  const KernelOptions none{true, kernels::Isa::None};
  EXPECT_EQ(row_kernel_name(parse_accumulation("fp32-seq"), none), nullptr);
  EXPECT_FALSE(reduce_rows(parse_accumulation("fp32-seq"), RowBatch{len, x.data(), 8, 1}, out, nullptr, none));
}

}  // namespace
}  // namespace roundoff::numerics
