// numerics::binary32_arith and any_nan on every instruction-set tier against their definitions: each result of the
// hardware binary32 operation equals numerics::add/sub/mul/div's correctly rounded binary32 result (nearest-even;
// those are MPFR-checked in tests/numerics) bit for bit, signed zeros, subnormals and overflow included, and is a
// NaN exactly where the definition gives one (a NaN's bits are the hardware's, which the ops do not store).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/arith.hpp"
#include "numerics/binary32_arith.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/rounding.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::numerics {
namespace {

std::vector<KernelOptions> tiers() {
  std::vector<KernelOptions> out;
  for (const kernels::Isa isa : ::roundoff::test::isa_tiers(true)) out.push_back(::roundoff::test::kernels_at(isa));
  return out;
}

/// n binary32 operands: random over the whole range (subnormals included), with specials, extremes and values
/// whose sums cancel or whose products overflow and underflow.
std::vector<float> operands(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> e(-149, 127), small(-20, 20);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f, -0.0f, inf, -inf, 0x1p-149f, -0x1p-149f, 0x1.fffffcp-127f,
                                      0x1p-126f, 0x1.fffffep127f, -0x1.fffffep127f, 1.0f, -1.0f, 0x1.000002p0f};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % 7);
    const double s = i % 2 ? -1.0 : 1.0;
    v[i] = k == 0   ? special[(i / 7) % special.size()]
           : k < 4 ? static_cast<float>(s * std::ldexp(m(rng), small(rng)))  // comparable magnitudes: cancellation
                   : static_cast<float>(s * std::ldexp(m(rng), e(rng)));
  }
  return v;
}

double definition(Binary32Op op, float a, float b) {
  const RoundingPlan fp32(formats::fp32);
  const auto x = static_cast<double>(a), y = static_cast<double>(b);
  switch (op) {
    case Binary32Op::Add: return add(fp32, Rounding::NearestEven, x, y);
    case Binary32Op::Sub: return sub(fp32, Rounding::NearestEven, x, y);
    case Binary32Op::Mul: return mul(fp32, Rounding::NearestEven, x, y);
    case Binary32Op::Div: return div(fp32, Rounding::NearestEven, x, y);
  }
  return 0.0;
}

TEST(Binary32Arith, EqualsTheCorrectlyRoundedOperationOnEveryTier) {
  int compared = 0;
  for (const KernelOptions& k : tiers())
    for (const Binary32Op op : {Binary32Op::Add, Binary32Op::Sub, Binary32Op::Mul, Binary32Op::Div})
      for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{17}, std::size_t{1001}})
        for (const bool bcast : {false, true}) {
          const std::vector<float> a = operands(n, 11 + n), b = operands(bcast ? 1 : n, 23 + n);
          std::vector<float> out(n, 7.0f);
          binary32_arith(op, a, b, out, k);
          std::vector<float> in_place = a;  // out aliasing a
          binary32_arith(op, in_place, b, in_place, k);
          for (std::size_t i = 0; i < n; ++i) {
            const double want = definition(op, a[i], b[bcast ? 0 : i]);
            const std::string what = "tier " + std::to_string(static_cast<int>(k.isa_limit)) + " op " +
                                     std::to_string(static_cast<int>(op)) + " n " + std::to_string(n) + " i " +
                                     std::to_string(i);
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(out[i])) << what;
              continue;
            }
            ++compared;
            EXPECT_EQ(std::bit_cast<std::uint64_t>(static_cast<double>(out[i])), std::bit_cast<std::uint64_t>(want))
                << what << std::hexfloat << ": " << a[i] << ", " << b[bcast ? 0 : i] << " -> " << out[i]
                << " against " << want;
            EXPECT_EQ(std::bit_cast<std::uint32_t>(in_place[i]), std::bit_cast<std::uint32_t>(out[i])) << what;
          }
        }
  EXPECT_GT(compared, 10000);
}

/// n fp16 values as binary32: random over fp16's range (subnormals, the largest finite values, products that
/// overflow or underflow), with ±0, ±inf and NaN.
std::vector<float> fp16_operands(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::bit_cast<_Float16>(static_cast<std::uint16_t>(bits(rng))));
  return v;
}

TEST(Binary32Arith, Fp16StepEqualsTheOperationThenRoundArrayOnEveryTier) {
  // binary32_arith_fp16 against its definition, binary32_arith followed by round_array(fp16, nearest-even), bit for
  // bit (NaN encodings included); on fp16 operands also against numerics' correctly rounded fp16 operation.
  const RoundingPlan fp16(formats::fp16);
  int checked = 0, rounded = 0;  // rounded: results also compared with the fp16 operation
  for (const KernelOptions& k : tiers())
    for (const Binary32Op op : {Binary32Op::Add, Binary32Op::Sub, Binary32Op::Mul, Binary32Op::Div})
      for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{17}, std::size_t{1001}})
        for (const bool bcast : {false, true})
          for (const bool halves : {false, true}) {
            const std::vector<float> a = halves ? fp16_operands(n, 3 + n) : operands(n, 31 + n);
            const std::vector<float> b = halves ? fp16_operands(bcast ? 1 : n, 5 + n) : operands(bcast ? 1 : n, 37 + n);
            std::vector<float> want(n), got(n, 7.0f);
            binary32_arith(op, a, b, want, k);
            round_array(fp16, Rounding::NearestEven, std::span<const float>(want), std::span<float>(want));
            binary32_arith_fp16(op, a, b, got, k);
            std::vector<float> in_place = a;  // out aliasing a
            binary32_arith_fp16(op, in_place, b, in_place, k);
            for (std::size_t i = 0; i < n; ++i) {
              const std::string what = "tier " + std::to_string(static_cast<int>(k.isa_limit)) + " op " +
                                       std::to_string(static_cast<int>(op)) + " n " + std::to_string(n) + " i " +
                                       std::to_string(i);
              ++checked;
              EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
                  << what << std::hexfloat << ": " << a[i] << ", " << b[bcast ? 0 : i];
              EXPECT_EQ(std::bit_cast<std::uint32_t>(in_place[i]), std::bit_cast<std::uint32_t>(got[i])) << what;
              if (!halves || std::isnan(got[i])) continue;
              const auto x = static_cast<double>(a[i]), y = static_cast<double>(b[bcast ? 0 : i]);
              const double r = op == Binary32Op::Add   ? add(fp16, Rounding::NearestEven, x, y)
                               : op == Binary32Op::Sub ? sub(fp16, Rounding::NearestEven, x, y)
                               : op == Binary32Op::Mul ? mul(fp16, Rounding::NearestEven, x, y)
                                                       : div(fp16, Rounding::NearestEven, x, y);
              ++rounded;
              EXPECT_EQ(std::bit_cast<std::uint64_t>(static_cast<double>(got[i])), std::bit_cast<std::uint64_t>(r))
                  << what << std::hexfloat << ": " << a[i] << ", " << b[bcast ? 0 : i];
            }
          }
  EXPECT_GT(checked, 50000);
  EXPECT_GT(rounded, 10000);
}

TEST(Binary32Arith, AnyNanOnEveryTier) {
  for (const KernelOptions& k : tiers())
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{15}, std::size_t{16},
                                std::size_t{17}, std::size_t{300}}) {
      std::vector<float> x = operands(n, 5);
      EXPECT_FALSE(any_nan(x, k)) << n;  // ±inf and every finite value are no NaN
      for (const std::uint32_t bits : {0x7fc00000u, 0xffc00001u, 0x7f800001u})
        for (std::size_t at : {std::size_t{0}, n / 2, n > 0 ? n - 1 : 0}) {
          if (n == 0) continue;
          std::vector<float> y = x;
          y[at] = std::bit_cast<float>(bits);
          EXPECT_TRUE(any_nan(y, k)) << n << " at " << at;
        }
    }
}

TEST(Binary32Arith, AllPositiveZeroOnEveryTier) {
  // Lengths around the vectors (8, 16 lanes) and the 256-value blocks the vector tiers test before reading on;
  // one nonzero encoding (−0, the smallest subnormal, a NaN, 1) anywhere makes the answer false.
  std::int64_t checked = 0;
  for (const KernelOptions& k : tiers())
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{17},
                                std::size_t{255}, std::size_t{256}, std::size_t{257}, std::size_t{1000}}) {
      const std::vector<float> zeros(n, 0.0f);
      EXPECT_TRUE(all_positive_zero(zeros, k)) << n;
      for (const std::uint32_t bits : {0x80000000u, 0x00000001u, 0x7fc00000u, 0x3f800000u})
        for (const std::size_t at : {std::size_t{0}, n / 2, std::size_t{255}, std::size_t{256}, n - 1}) {
          if (at >= n) continue;
          std::vector<float> y = zeros;
          y[at] = std::bit_cast<float>(bits);
          EXPECT_FALSE(all_positive_zero(y, k)) << n << " at " << at << " bits " << bits;
          ++checked;
        }
    }
  EXPECT_GT(checked, 100);
}

/// The plain binary32 accumulation: fp32 accumulator to nearest even, exact products, sequential.
Accumulation chain32() {
  Accumulation a;
  a.format = formats::fp32;
  a.rounding = Rounding::NearestEven;
  a.fused = true;
  a.order = Order::Sequential;
  return a;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

TEST(Binary32Arith, ChainRowsEqualTheAccumulationsDotAndSumOnEveryTier) {
  const Accumulation a = chain32();
  ASSERT_TRUE(binary32_chain(a));
  for (const KernelOptions& k : tiers())
    for (const std::size_t rows : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{19}})
      for (const std::size_t width : {std::size_t{1}, std::size_t{9}, std::size_t{64}, std::size_t{300}}) {
        // rows of different lengths (0, the full width, and in between: the eight-row groups' common prefix
        // and tails), operands over the whole range (cancellation, overflow, subnormal products, specials)
        const std::vector<float> x = operands(rows * width, 11 + rows), y = operands(rows * width, 29 + width);
        std::vector<std::size_t> len(rows);
        for (std::size_t r = 0; r < rows; ++r)
          len[r] = r % 5 == 4 ? 0 : r % 3 == 0 ? width : (width * (r + 1)) / (rows + 1);
        std::vector<float> dots(rows), sums(rows);
        binary32_chain_rows(len, x.data(), static_cast<std::ptrdiff_t>(width), y.data(),
                            static_cast<std::ptrdiff_t>(width), dots, k);
        binary32_chain_rows(len, x.data(), static_cast<std::ptrdiff_t>(width), nullptr, 0, sums, k);
        for (std::size_t r = 0; r < rows; ++r) {
          const std::vector<double> xr(x.begin() + static_cast<std::ptrdiff_t>(r * width),
                                       x.begin() + static_cast<std::ptrdiff_t>(r * width + len[r]));
          const std::vector<double> yr(y.begin() + static_cast<std::ptrdiff_t>(r * width),
                                       y.begin() + static_cast<std::ptrdiff_t>(r * width + len[r]));
          const std::string what = "tier " + std::to_string(static_cast<int>(k.isa_limit)) + " rows " +
                                   std::to_string(rows) + " width " + std::to_string(width) + " row " +
                                   std::to_string(r) + " length " + std::to_string(len[r]);
          const double want_dot = len[r] == 0 ? 0.0 : dot(a, xr, yr);
          const double want_sum = len[r] == 0 ? 0.0 : sum(a, xr);
          EXPECT_TRUE(same(static_cast<double>(dots[r]), want_dot)) << what << ": " << dots[r] << " vs " << want_dot;
          EXPECT_TRUE(same(static_cast<double>(sums[r]), want_sum)) << what << ": " << sums[r] << " vs " << want_sum;
        }
      }
  // Signed zeros: a row of −0 products sums to −0 (the chain starts at −0), one with a +0 among them to +0.
  const std::vector<float> mz = {-0.0f, -0.0f, -0.0f}, pz = {-0.0f, 0.0f, -0.0f}, one = {1.0f, 1.0f, 1.0f};
  const std::vector<std::size_t> l3 = {3};
  std::vector<float> o(1);
  binary32_chain_rows(l3, mz.data(), 3, one.data(), 3, o, {});
  EXPECT_TRUE(std::signbit(o[0]) && o[0] == 0.0f);
  EXPECT_TRUE(
      same(o[0], dot(a, std::vector<double>(mz.begin(), mz.end()), std::vector<double>(one.begin(), one.end()))));
  binary32_chain_rows(l3, pz.data(), 3, nullptr, 0, o, {});
  EXPECT_FALSE(std::signbit(o[0]));
  // Not the chain: another accumulator format, order or rounding, an unfused product.
  Accumulation b = a;
  b.format = formats::bf16;
  EXPECT_FALSE(binary32_chain(b));
  b = a;
  b.order = Order::Pairwise;
  EXPECT_FALSE(binary32_chain(b));
  b = a;
  b.rounding = Rounding::TowardZero;
  EXPECT_FALSE(binary32_chain(b));
  b = a;
  b.fused = false;
  EXPECT_FALSE(binary32_chain(b));
}


TEST(Binary32Arith, ChainColumnsEqualTheAccumulationsDotOnEveryTier) {
  const Accumulation a = chain32();
  for (const KernelOptions& k : tiers())
    for (const std::size_t rows : {std::size_t{0}, std::size_t{1}, std::size_t{9}, std::size_t{64}})
      for (const std::size_t cols : {std::size_t{1}, std::size_t{8}, std::size_t{15}, std::size_t{16}, std::size_t{37}}) {
        const std::vector<float> x = operands(rows * cols + 1, 41 + rows), y = operands(rows * cols + 1, 53 + cols);
        std::vector<float> out(cols);
        binary32_chain_columns(rows, x.data(), y.data(), cols, out, k);
        for (std::size_t j = 0; j < cols; ++j) {
          std::vector<double> xc(rows), yc(rows);
          for (std::size_t r = 0; r < rows; ++r) {
            xc[r] = x[r * cols + j];
            yc[r] = y[r * cols + j];
          }
          const double want = rows == 0 ? 0.0 : dot(a, xc, yc);
          EXPECT_TRUE(same(static_cast<double>(out[j]), want))
              << "tier " << static_cast<int>(k.isa_limit) << " rows " << rows << " cols " << cols << " col " << j
              << ": " << out[j] << " vs " << want;
        }
      }  // Signed zeros: columns of −0 products are −0 (the chains start at −0) on every tier and in every lane group.
  for (const KernelOptions& k : tiers()) {
    const std::size_t rows = 3, cols = 37;
    const std::vector<float> mz(rows * cols, -0.0f), one(rows * cols, 1.0f);
    std::vector<float> out(cols, 1.0f);
    binary32_chain_columns(rows, mz.data(), one.data(), cols, out, k);
    for (std::size_t j = 0; j < cols; ++j)
      EXPECT_TRUE(out[j] == 0.0f && std::signbit(out[j])) << "tier " << static_cast<int>(k.isa_limit) << " col " << j;
  }
}

/// binary64_sum_of_squares16 against its definition written out here (16 chains by index mod 16 from +0, then the
/// tree), bit for bit on every tier, at lengths around the vector widths and long ones, over the whole binary32 range
/// (subnormals, the largest values, signed zeros): non-finite with an infinity or a NaN among the values.
TEST(Binary32Arith, SumOfSquaresInSixteenChainsOnEveryTier) {
  const auto definition16 = [](const std::vector<float>& x) {
    std::vector<double> c(16, 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) c[i % 16] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    std::vector<double> level = c;
    while (level.size() > 1) {  // pairs of neighbours, four levels
      std::vector<double> next;
      for (std::size_t k = 0; k < level.size(); k += 2) next.push_back(level[k] + level[k + 1]);
      level = next;
    }
    return level[0];
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const KernelOptions& k : tiers())
    for (const std::size_t n : std::vector<std::size_t>{0, 1, 5, 15, 16, 17, 31, 32, 33, 100, 4099, 70001}) {
      std::vector<float> x = operands(n, 97 + n), near(n);
      for (float& v : x)
        if (std::isinf(v)) v = std::copysign(0x1.fffffep127f, v);  // finite values: infinities below
      std::mt19937_64 rng(n);  // comparable magnitudes, where the order shows in the bits
      std::uniform_real_distribution<float> m(-2.0f, 2.0f);
      for (float& v : near) v = m(rng);
      for (const std::vector<float>* v : {&x, &near}) {
        const double want = definition16(*v), got = binary64_sum_of_squares16(*v, k);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(got), std::bit_cast<std::uint64_t>(want))
            << "tier " << static_cast<int>(k.isa_limit) << " n " << n << std::hexfloat << ": " << got << " vs " << want;
        EXPECT_TRUE(std::isfinite(got));
      }
      if (n == 0) continue;
      for (const float special : {inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<float> y = x;
        y[n / 2] = special;
        EXPECT_FALSE(std::isfinite(binary64_sum_of_squares16(y, k))) << "tier " << static_cast<int>(k.isa_limit);
      }
    }
}

}  // namespace
}  // namespace roundoff::numerics
