// Float<F, R>: arithmetic equals the correctly rounded library operations, bits and neighbours, numeric_limits,
// and Eigen interop (coefficient-wise operations, and the order Eigen uses for a small product).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/eigen_support.hpp"
#include "numerics/float.hpp"
#include "numerics/mpfr_util.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::same_value;

namespace {
/// Deterministic bf16 test values in [-4, 4) with full significands.
double bf16_value(std::uint64_t i) {
  const double u = static_cast<double>(mix64(i) >> 11) * 0x1p-53;  // [0, 1)
  return round_to(formats::bf16, Rounding::NearestEven, 8 * u - 4);
}
}  // namespace

TEST(Float, ArithmeticIsOneCorrectRoundingPerOperation) {
  const RoundingPlan bf16(formats::bf16);
  const RoundingPlan fp16(formats::fp16);
  for (std::uint64_t i = 0; i < 20000; ++i) {
    const double a = bf16_value(2 * i), b = bf16_value(2 * i + 1);
    const Bf16 x = a, y = b;
    EXPECT_TRUE(same_value((x + y).value(), add(bf16, Rounding::NearestEven, a, b)));
    EXPECT_TRUE(same_value((x - y).value(), sub(bf16, Rounding::NearestEven, a, b)));
    EXPECT_TRUE(same_value((x * y).value(), mul(bf16, Rounding::NearestEven, a, b)));
    EXPECT_TRUE(same_value((x / y).value(), div(bf16, Rounding::NearestEven, a, b)));
    EXPECT_TRUE(same_value(fma(x, y, x).value(), fma(bf16, Rounding::NearestEven, a, b, a)));
    using Fp16Up = Float<formats::fp16, Rounding::Up>;
    const Fp16Up u = a, v = b;  // bf16 values rounded up to fp16
    EXPECT_EQ(u.value(), round_to(fp16, Rounding::Up, a));
    EXPECT_TRUE(same_value((u * v).value(), mul(fp16, Rounding::Up, u.value(), v.value())));
    EXPECT_TRUE(same_value(sqrt(abs(u)).value(), sqrt(fp16, Rounding::Up, std::fabs(u.value()))));
    EXPECT_TRUE(same_value(exp(v).value(), exp(fp16, Rounding::Up, v.value())));
  }
  EXPECT_EQ(Fp16(0.1).value(), round_to(fp16, Rounding::NearestEven, 0.1));
  EXPECT_EQ(Fp16(3).value(), 3.0);
  // Trap 2 through the type: one rounding of the exact sum.
  using Bf16Up = Float<formats::bf16, Rounding::Up>;
  EXPECT_EQ((Bf16Up(1) + Bf16Up(0x1p-100)).value(), 1.0078125);
  Bf16 acc = 1;
  acc += Bf16(0x1p-9);  // below half an ulp of 1: nearest-even stays
  EXPECT_EQ(acc.value(), 1.0);
}

TEST(Float, ComparisonsAreIeee) {
  const Fp16 nan = std::numeric_limits<Fp16>::quiet_NaN();
  EXPECT_FALSE(nan == nan);
  EXPECT_FALSE(nan < Fp16(1));
  EXPECT_FALSE(nan > Fp16(1));
  EXPECT_TRUE(Fp16(-0.0) == Fp16(0.0));
  EXPECT_TRUE(Fp16(1) < Fp16(2));
  EXPECT_TRUE(Fp16(1.00001) == Fp16(1));  // rounds to 1 in fp16
  EXPECT_TRUE(isnan(nan));
  EXPECT_TRUE(isinf(Fp16(1e6)));
  EXPECT_EQ(Fp16(1e6).value(), INFINITY);
  EXPECT_TRUE(isnan(E4m3(1e6)));  // e4m3 overflow is NaN
}

TEST(Float, BitsAndNeighbours) {
  EXPECT_EQ(Fp16::from_bits(0x3C00).value(), 1.0);
  EXPECT_EQ(Fp16(1).to_bits(), 0x3C00u);
  EXPECT_EQ(Bf16(-2).to_bits(), 0xC000u);
  EXPECT_EQ(Fp16(1).next_up().value(), 1 + 0x1p-10);
  EXPECT_EQ(Fp16(1).next_down().value(), 1 - 0x1p-11);
  EXPECT_EQ(Fp16(0.0).next_up().value(), 0x1p-24);
  EXPECT_EQ(Fp16(-0.0).next_up().value(), 0x1p-24);
  EXPECT_TRUE(same_value(Fp16(-0x1p-24).next_up().value(), -0.0));
  EXPECT_EQ(Fp16(65504).next_up().value(), INFINITY);
  EXPECT_TRUE(isnan(E4m3(448).next_up()));
  EXPECT_EQ((Float<Format{11, -14, 15, false}>(0.0).next_up().value()), 0x1p-14);  // no subnormals
  // Walking next_up from -inf visits every fp16 value once, in order: 2·0x7C00 steps to +inf.
  Fp16 x = -std::numeric_limits<Fp16>::infinity();
  int steps = 0;
  while (x.value() != INFINITY) {
    const Fp16 n = x.next_up();
    ASSERT_TRUE(n > x) << hex_float(x.value());
    ASSERT_EQ(Fp16::from_bits(n.to_bits()).value(), n.value());
    x = n;
    ++steps;
  }
  EXPECT_EQ(steps, 2 * 0x7C00);
}

TEST(Float, NumericLimitsOfFp16AndBf16) {
  using L16 = std::numeric_limits<Fp16>;
  EXPECT_TRUE(L16::is_specialized);
  EXPECT_EQ(L16::max().value(), 65504.0);
  EXPECT_EQ(L16::lowest().value(), -65504.0);
  EXPECT_EQ(L16::min().value(), 0x1p-14);
  EXPECT_EQ(L16::denorm_min().value(), 0x1p-24);
  EXPECT_EQ(L16::epsilon().value(), 0x1p-10);
  EXPECT_EQ(L16::round_error().value(), 0.5);
  EXPECT_EQ(L16::digits, 11);
  EXPECT_EQ(L16::digits10, 3);
  EXPECT_EQ(L16::max_digits10, 5);
  EXPECT_EQ(L16::min_exponent, -13);
  EXPECT_EQ(L16::max_exponent, 16);
  EXPECT_EQ(L16::min_exponent10, -4);
  EXPECT_EQ(L16::max_exponent10, 4);
  EXPECT_TRUE(L16::has_infinity);
  EXPECT_TRUE(L16::is_iec559);
  EXPECT_EQ(L16::infinity().value(), INFINITY);

  using Lb = std::numeric_limits<Bf16>;
  EXPECT_EQ(Lb::max().value(), 0x1.fep127);
  EXPECT_EQ(Lb::min().value(), 0x1p-126);
  EXPECT_EQ(Lb::denorm_min().value(), 0x1p-133);
  EXPECT_EQ(Lb::epsilon().value(), 0x1p-7);
  EXPECT_EQ(Lb::digits, 8);
  EXPECT_EQ(Lb::digits10, 2);
  EXPECT_EQ(Lb::max_digits10, 4);
  EXPECT_EQ(Lb::min_exponent, -125);
  EXPECT_EQ(Lb::max_exponent, 128);
  EXPECT_EQ(Lb::min_exponent10, -37);
  EXPECT_EQ(Lb::max_exponent10, 38);

  using L8 = std::numeric_limits<E4m3>;
  EXPECT_FALSE(L8::has_infinity);
  EXPECT_TRUE(L8::has_quiet_NaN);
  EXPECT_EQ(L8::max().value(), 448.0);
  EXPECT_EQ(L8::denorm_min().value(), 0x1p-9);
  EXPECT_FALSE(L8::is_iec559);
  EXPECT_EQ((std::numeric_limits<Float<formats::fp16, Rounding::TowardZero>>::round_style), std::round_toward_zero);
}

TEST(Float, NumericLimitsOfFp32AndFp64MatchTheBuiltinTypes) {
  // The formulas, checked where the standard library already has the answers.
  using F = std::numeric_limits<Float<formats::fp32>>;
  using B = std::numeric_limits<float>;
  EXPECT_EQ(F::digits, B::digits);
  EXPECT_EQ(F::digits10, B::digits10);
  EXPECT_EQ(F::max_digits10, B::max_digits10);
  EXPECT_EQ(F::min_exponent, B::min_exponent);
  EXPECT_EQ(F::max_exponent, B::max_exponent);
  EXPECT_EQ(F::min_exponent10, B::min_exponent10);
  EXPECT_EQ(F::max_exponent10, B::max_exponent10);
  EXPECT_EQ(F::max().value(), static_cast<double>(B::max()));
  EXPECT_EQ(F::min().value(), static_cast<double>(B::min()));
  EXPECT_EQ(F::denorm_min().value(), static_cast<double>(B::denorm_min()));
  EXPECT_EQ(F::epsilon().value(), static_cast<double>(B::epsilon()));
  using G = std::numeric_limits<Float<formats::fp64>>;
  using D = std::numeric_limits<double>;
  EXPECT_EQ(G::digits, D::digits);
  EXPECT_EQ(G::digits10, D::digits10);
  EXPECT_EQ(G::max_digits10, D::max_digits10);
  EXPECT_EQ(G::min_exponent10, D::min_exponent10);
  EXPECT_EQ(G::max_exponent10, D::max_exponent10);
  EXPECT_EQ(G::max().value(), D::max());
  EXPECT_EQ(G::denorm_min().value(), D::denorm_min());
}

TEST(Float, EigenCoefficientWiseOperationsRoundEachElementOnce) {
  using M = Eigen::Matrix<Bf16, 4, 4>;
  M a, b, c;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const auto k = static_cast<std::uint64_t>(4 * i + j);
      a(i, j) = bf16_value(3 * k);
      b(i, j) = bf16_value(3 * k + 1);
      c(i, j) = bf16_value(3 * k + 2);
    }
  const M r = (a.array() * b.array() + c.array()).matrix();
  const M s = a + b - c;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      EXPECT_TRUE(same_value(r(i, j).value(), (a(i, j) * b(i, j) + c(i, j)).value()));
      EXPECT_TRUE(same_value(s(i, j).value(), ((a(i, j) + b(i, j)) - c(i, j)).value()));
    }
}

TEST(Float, EigenFixedSizeMatrixVectorProductOrder) {
  // Eigen 3.4 evaluates a fixed 4x4 * 4 product coefficient by coefficient as an unrolled tree reduction:
  // y_i = (a_i0 x_0 + a_i1 x_1) + (a_i2 x_2 + a_i3 x_3), each product and sum rounded in bf16. This test pins
  // that order (so an Eigen upgrade that changes it is noticed) and shows it differs from the sequential order,
  // which is why emulated ops never use Eigen products.
  using M = Eigen::Matrix<Bf16, 4, 4>;
  using V = Eigen::Matrix<Bf16, 4, 1>;
  M a;
  V x;
  int differs = 0;
  for (std::uint64_t trial = 0; trial < 200; ++trial) {
    for (int i = 0; i < 4; ++i) {
      x(i) = bf16_value(1000 * trial + static_cast<std::uint64_t>(i));
      for (int j = 0; j < 4; ++j) a(i, j) = bf16_value(1000 * trial + 10 + static_cast<std::uint64_t>(4 * i + j));
    }
    x(3) = Bf16(x(3).value() * 0x1p-9);  // small terms make the orders disagree more often
    const V y = a * x;
    for (int i = 0; i < 4; ++i) {
      Bf16 seq = a(i, 0) * x(0);
      for (int j = 1; j < 4; ++j) seq = seq + a(i, j) * x(j);
      const Bf16 tree = (a(i, 0) * x(0) + a(i, 1) * x(1)) + (a(i, 2) * x(2) + a(i, 3) * x(3));
      EXPECT_TRUE(same_value(y(i).value(), tree.value())) << "trial " << trial << " row " << i;
      differs += !same_value(seq.value(), tree.value());
    }
  }
  EXPECT_GT(differs, 0);
}
