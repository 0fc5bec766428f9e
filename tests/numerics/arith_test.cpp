// Binary operations (add, sub, mul, div, and fma on samples) against the MPFR oracle.
//   - e4m3 and e5m2 (and custom variants): every pair of encodings, every deterministic mode.
//   - fp16 and bf16: a stratified sample of 10^7 pairs per operation, every deterministic mode per pair,
//     with every edge class (zeros of both signs, subnormals, near-overflow, inf/NaN, results on and beside
//     midpoints, exponent gaps > 53, exact cancellation).
//   - *Exhaustive*: all 2^32 fp16 and bf16 pairs per operation, every pair in nearest-even plus one other mode
//     chosen by rotation, against the binary64 hardware result rounded to odd (x86-64 AVX-512 embedded
//     rounding, or MXCSR rounding control: the truncation, its last bit set when rounding down and up differ),
//     then rounded once by round_to (Down uses the binary64 round-down, which carries IEEE's -0 rule). Rounding to odd at >= p + 2 bits and then to the
//     format in any mode equals rounding the exact value (Boldo & Melquiond 2008); binary64 has 53 >= p + 2
//     bits everywhere these results live (|x| in [2^-266, 2^261] or exactly 0), and round_to itself is checked
//     against MPFR in round_to_test.cpp. This path shares no code with numerics/arith.cpp.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "numerics/arith.hpp"
#include "tests/support/exhaustive.hpp"
#include "tests/support/mpfr_oracle.hpp"

using namespace roundoff::numerics;
using roundoff::test::Mismatches;
using roundoff::test::Op;

namespace {

constexpr Op kBinaryOps[] = {Op::Add, Op::Sub, Op::Mul, Op::Div};

const char* op_name(Op op) {
  switch (op) {
    case Op::Convert: return "convert";
    case Op::Add: return "add";
    case Op::Sub: return "sub";
    case Op::Mul: return "mul";
    case Op::Div: return "div";
    case Op::Fma: return "fma";
    case Op::Sqrt: return "sqrt";
  }
  return "?";
}

double library(const RoundingPlan& p, Rounding m, Op op, double a, double b, double c = 0) {
  switch (op) {
    case Op::Add: return add(p, m, a, b);
    case Op::Sub: return sub(p, m, a, b);
    case Op::Mul: return mul(p, m, a, b);
    case Op::Div: return div(p, m, a, b);
    case Op::Fma: return fma(p, m, a, b, c);
    case Op::Sqrt: return sqrt(p, m, a);
    case Op::Convert: return round_to(p, m, a);
  }
  return 0;
}

/// Compares the library against the oracle in all six modes; returns false on a mismatch (logged).
bool check_case(const Format& f, const RoundingPlan& plan, Op op, double a, double b, double c, Mismatches& bad) {
  const auto want = roundoff::test::oracle_op(f, op, a, b, c);
  bool ok = true;
  for (const Rounding m : kDeterministicRoundings) {
    const double got = library(plan, m, op, a, b, c);
    if (!roundoff::test::same_value(got, want.value(m))) {
      ok = false;
      bad.add(std::string(op_name(op)) + " " + std::string(name_of(m)) + " a=" + hex_float(a) + " b=" +
              hex_float(b) + (op == Op::Fma ? " c=" + hex_float(c) : std::string()) + " got " + hex_float(got) +
              " want " + hex_float(want.value(m)));
    }
  }
  return ok;
}

void check_every_pair(const Format& f) {
  const RoundingPlan plan(f);
  const auto enc = encoding_of(f);
  ASSERT_TRUE(enc.has_value());
  const std::int64_t n = std::int64_t{1} << enc->total_bits();
  for (const Op op : kBinaryOps) {
    Mismatches bad;
    roundoff::test::parallel_for(n * n, [&](std::int64_t i) {
      const double a = from_bits(f, static_cast<std::uint64_t>(i / n));
      const double b = from_bits(f, static_cast<std::uint64_t>(i % n));
      check_case(f, plan, op, a, b, 0, bad);
    });
    EXPECT_EQ(bad.count(), 0u) << name_of(f) << " " << op_name(op) << ": " << bad.report();
  }
}

/// Counter-based draws for the samplers (deterministic, independent of threads).
struct Draws {
  std::uint64_t key;
  std::uint64_t operator()(std::uint64_t i, std::uint64_t j) const { return mix64(key ^ mix64(i * 8 + j)); }
};

/// An operand from one of the edge classes, as an encoding of a 16-bit format.
double sample_operand(const Format& f, const Encoding& enc, std::uint64_t r) {
  const int fb = enc.fraction_bits;
  const std::uint64_t frac_mask = (std::uint64_t{1} << fb) - 1;
  const std::uint64_t exp_all = (std::uint64_t{1} << enc.exponent_bits) - 1;
  const std::uint64_t sign = (r >> 63) << (enc.total_bits() - 1);
  const std::uint64_t frac = (r >> 8) & frac_mask;
  const std::uint64_t e_rand = ((r >> 32) % (exp_all - 1)) + 1;  // a normal exponent field
  std::uint64_t bits = 0;
  switch (r % 10) {
    case 0:
    case 1: bits = (r >> 20) & ((std::uint64_t{1} << enc.total_bits()) - 1); break;  // any encoding
    case 2: bits = sign; break;                                                          // ±0
    case 3: bits = sign | frac; break;                                                   // subnormal (or 0)
    case 4: bits = sign | ((exp_all - 1 - (r >> 40) % 2) << fb) | frac; break;           // top two binades
    case 5: bits = sign | (exp_all << fb) | ((r >> 40) % 2 ? frac : 0); break;           // inf or NaN
    case 6: bits = sign | ((static_cast<std::uint64_t>(enc.bias) - 3 + (r >> 40) % 7) << fb) | frac; break;
    case 7: bits = sign | (e_rand << fb) | (frac & (std::uint64_t{3} << (fb - 2))); break;  // sparse significand
    case 8: bits = sign | (((r >> 40) % 2) << fb) | (frac | (frac_mask - 7)); break;        // around 2^emin
    default: bits = sign | (e_rand << fb) | frac; break;                                    // any normal
  }
  return from_bits(f, bits);
}

/// A pair from the stratified distribution: independent edge-class operands, or a constructed relation.
std::array<double, 2> sample_pair(const Format& f, const RoundingPlan& plan, const Encoding& enc, const Draws& d,
                                  std::uint64_t i) {
  double a = sample_operand(f, enc, d(i, 0));
  double b = sample_operand(f, enc, d(i, 1));
  const std::uint64_t r = d(i, 2);
  if (!std::isfinite(a) || a == 0) return {a, b};
  const int ea = std::ilogb(a);
  const double sign = (r >> 62) & 1 ? -1.0 : 1.0;
  switch (r % 8) {
    case 4: {  // sum on or next to a midpoint of a: b = ±k·2^(ea - p - j), k in 1..7
      const double k = static_cast<double>(1 + (r >> 8) % 7);
      b = round_to(plan, Rounding::NearestEven, sign * std::ldexp(k, ea - f.precision - static_cast<int>((r >> 16) % 3)));
      break;
    }
    case 5: {  // exponent gap of 54 to 180 (beyond binary64's reach when the format allows it)
      const double frac = 1.0 + static_cast<double>((r >> 8) % 128) / 128.0;
      b = round_to(plan, Rounding::NearestEven, sign * std::ldexp(frac, ea - 54 - static_cast<int>((r >> 20) % 127)));
      break;
    }
    case 6: {  // exact cancellation or a neighbour: a - a, a + (-a), a ± ulp
      const double nb = std::nextafter(a, (r >> 8) % 2 ? 1e300 : -1e300);
      b = (r >> 9) % 2 ? a : round_to(plan, Rounding::TowardZero, nb);
      if ((r >> 10) % 2) b = -b;
      break;
    }
    case 7: {  // products and quotients on midpoints: sparse b = ±(1 + k/8)·2^e
      const double frac = 1.0 + static_cast<double>((r >> 8) % 8) / 8.0;
      b = sign * std::ldexp(frac, static_cast<int>((r >> 16) % 40) - 20);
      b = round_to(plan, Rounding::NearestEven, b);
      break;
    }
    default: break;
  }
  return {a, b};
}

void check_sample(const Format& f, Op op, std::int64_t n, std::uint64_t seed) {
  const RoundingPlan plan(f);
  const Encoding enc = *encoding_of(f);
  const Draws d{mix64(seed)};
  Mismatches bad;
  roundoff::test::parallel_for(n, [&](std::int64_t i) {
    const auto [a, b] = sample_pair(f, plan, enc, d, static_cast<std::uint64_t>(i));
    check_case(f, plan, op, a, b, 0, bad);
  });
  EXPECT_EQ(bad.count(), 0u) << name_of(f) << " " << op_name(op) << ": " << bad.report();
}

constexpr std::int64_t kSamplePairs = 10'000'000;

}  // namespace

TEST(Arith, E4m3EveryPairEveryMode) { check_every_pair(formats::e4m3); }
TEST(Arith, E5m2EveryPairEveryMode) { check_every_pair(formats::e5m2); }
TEST(Arith, EightBitVariantsEveryPairEveryMode) {
  check_every_pair(Format{4, -6, 8, true, Specials::NanOnly, true});  // e4m3 saturating
  check_every_pair(Format{3, -14, 15, false, Specials::Ieee, false});  // e5m2 without subnormals
  check_every_pair(Format{4, -6, 8, false, Specials::None, false});    // no specials, no subnormals
}

TEST(Arith, Fp16StratifiedSampleAdd) { check_sample(formats::fp16, Op::Add, kSamplePairs, 1); }
TEST(Arith, Fp16StratifiedSampleSub) { check_sample(formats::fp16, Op::Sub, kSamplePairs, 2); }
TEST(Arith, Fp16StratifiedSampleMul) { check_sample(formats::fp16, Op::Mul, kSamplePairs, 3); }
TEST(Arith, Fp16StratifiedSampleDiv) { check_sample(formats::fp16, Op::Div, kSamplePairs, 4); }
TEST(Arith, Bf16StratifiedSampleAdd) { check_sample(formats::bf16, Op::Add, kSamplePairs, 5); }
TEST(Arith, Bf16StratifiedSampleSub) { check_sample(formats::bf16, Op::Sub, kSamplePairs, 6); }
TEST(Arith, Bf16StratifiedSampleMul) { check_sample(formats::bf16, Op::Mul, kSamplePairs, 7); }
TEST(Arith, Bf16StratifiedSampleDiv) { check_sample(formats::bf16, Op::Div, kSamplePairs, 8); }

TEST(Arith, FmaSampleEveryMode) {
  // Triples from the edge classes; for 8-bit formats uniformly random encodings.
  for (const Format f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2}) {
    const RoundingPlan plan(f);
    const Encoding enc = *encoding_of(f);
    const Draws d{mix64(99 + static_cast<std::uint64_t>(f.precision))};
    Mismatches bad;
    roundoff::test::parallel_for(200'000, [&](std::int64_t i) {
      const auto u = static_cast<std::uint64_t>(i);
      const auto [a, b] = sample_pair(f, plan, enc, d, u);
      double c = sample_operand(f, enc, d(u, 3));
      if (d(u, 4) % 4 == 0 && std::isfinite(a) && std::isfinite(b)) {
        // c cancels most of a·b: the result is the product's low part plus c's rounding.
        c = -round_to(plan, Rounding::NearestEven, a * b);
      }
      check_case(f, plan, Op::Fma, a, b, c, bad);
    });
    EXPECT_EQ(bad.count(), 0u) << name_of(f) << " fma: " << bad.report();
  }
}

TEST(Arith, Binary64NearestEvenFmaIsTheHardwareFma) {
  // numerics::fma's binary64 nearest-even path (the hardware FMA) against the MPFR oracle: random encodings
  // (NaN, inf, subnormal and zero operands included), sums that cancel the product down to its low part, and
  // products near binary64's overflow and underflow. NaN results must be the positive quiet NaN round_to gives.
  const RoundingPlan plan(formats::fp64);
  const Draws d{mix64(4242)};
  Mismatches bad;
  roundoff::test::parallel_for(100'000, [&](std::int64_t i) {
    const auto u = static_cast<std::uint64_t>(i);
    auto operand = [&](std::uint64_t r) {
      switch (r % 4) {
        case 0: return std::bit_cast<double>(mix64(r));  // any encoding
        case 1: return std::ldexp(1.0 + static_cast<double>(mix64(r) >> 12) * 0x1p-52,
                                  static_cast<int>(mix64(r + 1) % 2200) - 1100) * ((r >> 3) & 1 ? -1.0 : 1.0);
        case 2: return std::ldexp(1.0 + static_cast<double>(mix64(r) >> 12) * 0x1p-52,
                                  static_cast<int>(mix64(r + 1) % 60) - 30);
        default: return (r >> 3) & 1 ? -0.0 : 0.0;
      }
    };
    const double a = operand(d(u, 0)), b = operand(d(u, 1));
    double c = operand(d(u, 2));
    if (d(u, 3) % 3 == 0 && std::isfinite(a * b)) c = -(a * b);
    const double want = roundoff::test::oracle_op(formats::fp64, roundoff::test::Op::Fma, a, b, c)
                            .value(Rounding::NearestEven);
    const double got = fma(plan, Rounding::NearestEven, a, b, c);
    const bool nan_ok = !std::isnan(got) || std::bit_cast<std::uint64_t>(got) ==
                                                std::bit_cast<std::uint64_t>(std::numeric_limits<double>::quiet_NaN());
    if (!roundoff::test::same_value(got, want) || !nan_ok)
      bad.add("fma a=" + hex_float(a) + " b=" + hex_float(b) + " c=" + hex_float(c) + " got " + hex_float(got) +
              " want " + hex_float(want));
  });
  EXPECT_EQ(bad.count(), 0u) << bad.report();
}

#if defined(__x86_64__)
namespace {

/// Rounding-control values (MXCSR.RC and AVX-512 embedded rounding use the same encoding).
constexpr unsigned kRcDown = 1, kRcUp = 2, kRcZero = 3;

/// One binary64 operation through MXCSR rounding control; the asm statements are volatile, so they keep their
/// order, and the caller's MXCSR is restored before any compiled floating-point code runs.
double hw_mxcsr(Op op, double a, double b, unsigned rc) {
  unsigned saved = 0;
  const unsigned csr = 0x1F80u | (rc << 13);  // all exceptions masked, no FTZ/DAZ
  asm volatile("stmxcsr %0" : "=m"(saved));
  asm volatile("ldmxcsr %0" : : "m"(csr));
  switch (op) {
    case Op::Add: asm volatile("addsd %1, %0" : "+x"(a) : "x"(b)); break;
    case Op::Sub: asm volatile("subsd %1, %0" : "+x"(a) : "x"(b)); break;
    case Op::Mul: asm volatile("mulsd %1, %0" : "+x"(a) : "x"(b)); break;
    case Op::Div: asm volatile("divsd %1, %0" : "+x"(a) : "x"(b)); break;
    case Op::Convert:
    case Op::Fma:
    case Op::Sqrt: break;
  }
  asm volatile("ldmxcsr %0" : : "m"(saved));
  return a;
}

/// The same with AVX-512 embedded rounding (no MXCSR traffic: about twice as fast).
template <unsigned Rc>
__attribute__((target("avx512f"))) double hw_avx512(Op op, double a, double b) {
  constexpr int mode = (Rc == kRcDown ? _MM_FROUND_TO_NEG_INF : Rc == kRcUp ? _MM_FROUND_TO_POS_INF : _MM_FROUND_TO_ZERO) |
                       _MM_FROUND_NO_EXC;
  const __m128d x = _mm_set_sd(a), y = _mm_set_sd(b);
  switch (op) {
    case Op::Add: return _mm_cvtsd_f64(_mm_add_round_sd(x, y, mode));
    case Op::Sub: return _mm_cvtsd_f64(_mm_sub_round_sd(x, y, mode));
    case Op::Mul: return _mm_cvtsd_f64(_mm_mul_round_sd(x, y, mode));
    case Op::Div: return _mm_cvtsd_f64(_mm_div_round_sd(x, y, mode));
    case Op::Convert:
    case Op::Fma:
    case Op::Sqrt: break;
  }
  return a;
}

const bool kHaveAvx512 = __builtin_cpu_supports("avx512f");

template <unsigned Rc>
double hw(Op op, double a, double b) {
  return kHaveAvx512 ? hw_avx512<Rc>(op, a, b) : hw_mxcsr(op, a, b, Rc);
}

/// Binary64 round-to-odd of a op b: the truncation, with its last bit set when inexact (down != up).
double hw_odd(Op op, double a, double b) {
  const double z = hw<kRcZero>(op, a, b);
  if (std::isnan(z) || hw<kRcDown>(op, a, b) == hw<kRcUp>(op, a, b)) return z;
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(z) | 1u);
}

/// The fast oracle: round_to of the binary64 round-to-odd result, or for Down of the binary64 round-down
/// (which carries IEEE's -0 for exact zero sums; directed double rounding in one direction is innocuous).
double fast_oracle(const RoundingPlan& plan, Rounding m, Op op, double a, double b, double odd) {
  if (m == Rounding::Down) return round_to(plan, m, hw<kRcDown>(op, a, b));
  return round_to(plan, m, odd);
}

constexpr Rounding kRotated[] = {Rounding::NearestAway, Rounding::TowardZero, Rounding::Up, Rounding::Down,
                                 Rounding::Odd};

void check_all_pairs_fast(const Format& f, Op op) {
  const RoundingPlan plan(f);
  Mismatches bad;
  roundoff::test::parallel_for(65536, [&](std::int64_t ia) {
    const double a = from_bits(f, static_cast<std::uint64_t>(ia));
    for (std::uint64_t ib = 0; ib < 65536; ++ib) {
      const double b = from_bits(f, ib);
      const double odd = hw_odd(op, a, b);
      const double want_ne = round_to(plan, Rounding::NearestEven, odd);
      const double got_ne = library(plan, Rounding::NearestEven, op, a, b);
      if (!roundoff::test::same_value(got_ne, want_ne))
        bad.add(std::string(op_name(op)) + " nearest-even a=" + hex_float(a) + " b=" + hex_float(b) + " got " +
                hex_float(got_ne) + " want " + hex_float(want_ne));
      const Rounding m = kRotated[(static_cast<std::uint64_t>(ia) * 65536 + ib) % 5];
      const double want = fast_oracle(plan, m, op, a, b, odd);
      const double got = library(plan, m, op, a, b);
      if (!roundoff::test::same_value(got, want))
        bad.add(std::string(op_name(op)) + " " + std::string(name_of(m)) + " a=" + hex_float(a) + " b=" +
                hex_float(b) + " got " + hex_float(got) + " want " + hex_float(want));
    }
  });
  EXPECT_EQ(bad.count(), 0u) << name_of(f) << " " << op_name(op) << ": " << bad.report();
}

}  // namespace

TEST(ArithFastOracle, AgreesWithMpfrOnTheStratifiedSample) {
  // The fast oracle used by the exhaustive tests, checked against MPFR in every mode it is used for.
  for (const Format f : {formats::fp16, formats::bf16}) {
    const RoundingPlan plan(f);
    const Encoding enc = *encoding_of(f);
    const Draws d{mix64(1234)};
    for (const Op op : kBinaryOps) {
      Mismatches bad;
      roundoff::test::parallel_for(200'000, [&](std::int64_t i) {
        const auto [a, b] = sample_pair(f, plan, enc, d, static_cast<std::uint64_t>(i));
        const auto want = roundoff::test::oracle_op(f, op, a, b);
        const double odd = hw_odd(op, a, b);
        for (const Rounding m : kDeterministicRoundings) {
          const double fast = fast_oracle(plan, m, op, a, b, odd);
          if (!roundoff::test::same_value(fast, want.value(m)))
            bad.add(std::string(op_name(op)) + " " + std::string(name_of(m)) + " a=" + hex_float(a) + " b=" +
                    hex_float(b) + " fast " + hex_float(fast) + " mpfr " + hex_float(want.value(m)));
        }
      });
      EXPECT_EQ(bad.count(), 0u) << name_of(f) << " " << op_name(op) << ": " << bad.report();
    }
  }
}

TEST(ArithExhaustive, Fp16AddAllPairs) { check_all_pairs_fast(formats::fp16, Op::Add); }
TEST(ArithExhaustive, Fp16SubAllPairs) { check_all_pairs_fast(formats::fp16, Op::Sub); }
TEST(ArithExhaustive, Fp16MulAllPairs) { check_all_pairs_fast(formats::fp16, Op::Mul); }
TEST(ArithExhaustive, Fp16DivAllPairs) { check_all_pairs_fast(formats::fp16, Op::Div); }
TEST(ArithExhaustive, Bf16AddAllPairs) { check_all_pairs_fast(formats::bf16, Op::Add); }
TEST(ArithExhaustive, Bf16SubAllPairs) { check_all_pairs_fast(formats::bf16, Op::Sub); }
TEST(ArithExhaustive, Bf16MulAllPairs) { check_all_pairs_fast(formats::bf16, Op::Mul); }
TEST(ArithExhaustive, Bf16DivAllPairs) { check_all_pairs_fast(formats::bf16, Op::Div); }
#endif
