#pragma once
// Shared helpers of the ops tests: random inputs already rounded to a format, and a contiguous-span view.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "numerics/round.hpp"
#include "ops/backend.hpp"
#include "ops/policy.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::ops::test {

/// n values N(0, sigma²) rounded (nearest-even) to f.
inline std::vector<double> randn(std::size_t n, double sigma, const numerics::Format& f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  const numerics::RoundingPlan plan(f);
  std::vector<double> v(n);
  for (double& x : v) x = numerics::round_to(plan, numerics::Rounding::NearestEven, d(rng));
  return v;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, std::int32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

/// Every preset's name, then the extra policy specs.
inline std::vector<std::string> presets_and(std::initializer_list<const char*> extra) {
  std::vector<std::string> p = Policy::preset_names();
  p.insert(p.end(), extra.begin(), extra.end());
  return p;
}

template <class T>
std::span<const T> cs(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

/// Input regimes of the fast-path tests: N(0,1); N(0,1) with magnitudes around √max_finite in a block of rows and
/// columns (products overflow there; in_special_block); around √min_normal / 4 (products underflow); N(0,1) with
/// ±0, ±inf and NaN mixed into the same block.
enum class Regime { Normal, Overflow, Subnormal, Specials };
inline constexpr Regime kRegimes[] = {Regime::Normal, Regime::Overflow, Regime::Subnormal, Regime::Specials};

/// Whether value i of an input laid out in rows of `cols` values is in the block where the Overflow and Specials
/// regimes put their large values and specials: the rows r ≡ 1 (mod 3) and, within them, the odd columns (every
/// value of such a row when cols is 1: then every third value). A reduction along rows (softmax, rmsnorm's dx,
/// a GEMM's inner dimension) keeps two rows in three finite, and one down the columns (rmsnorm's dw, a GEMM's
/// backward weight) the even columns, so that every output compares real numbers as well as the special ones.
inline bool in_special_block(std::size_t i, std::size_t cols) {
  const std::size_t c = cols > 1 ? cols : 1;
  return (i / c) % 3 == 1 && (c == 1 || (i % c) % 2 == 1);
}

/// n values of `regime` rounded (nearest-even) to f, in rows of `cols` values (see in_special_block). Specials
/// without NaN when !nans: for an operand whose NaN would reach every output through a per-row scale (rmsnorm's x:
/// a NaN makes its row's rstd NaN, and dw sums every row), ±inf still tests the specials there.
inline std::vector<double> inputs(std::size_t n, Regime regime, const numerics::Format& f, std::uint64_t seed,
                                  std::size_t cols = 1, bool nans = true) {
  const double big = std::sqrt(numerics::RoundingPlan(f).max_finite);
  const double sigma = regime == Regime::Subnormal ? std::sqrt(numerics::RoundingPlan(f).min_normal) / 4 : 1.0;
  std::vector<double> v = randn(n, sigma, f, seed);
  if (regime == Regime::Overflow) {  // the block's values ~ N(0, max_finite)
    const std::vector<double> large = randn(n, big, f, seed);
    for (std::size_t i = 0; i < n; ++i)
      if (in_special_block(i, cols)) v[i] = large[i];
  }
  if (regime == Regime::Specials) {  // half the block's values special
    std::mt19937_64 rng(seed + 1);
    const double inf = std::numeric_limits<double>::infinity();
    const double special[] = {0.0, -0.0, -0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
    const std::uint64_t kinds = nans ? 7 : 6;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t draw = rng(), kind = rng();
      if (in_special_block(i, cols) && draw % 2 == 0) v[i] = special[kind % kinds];
    }
  }
  // Whole rows of −0 so that some dot products are exact −0 sums (zero padding would give +0).
  for (std::size_t i = 0; i < n / 7; ++i) v[i] = -0.0;
  return v;
}

/// Bitwise equality; any NaN equal to any NaN unless nan_bits.
inline bool same(double a, double b, bool nan_bits = false) {
  return (!nan_bits && std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

/// Whether a comparison may find NaN in every output (an operand that is NaN by construction).
enum class AllNan { Fails, Allowed };

/// fast and oracle bit for bit: the NaN positions the same on both (a NaN on one path where the other has a number,
/// either way, fails with its own message), every other value the same bits, NaN encodings too when nan_bits. Fails
/// when every output is NaN on both paths (the inputs compare nothing) unless all_nan is Allowed.
inline void expect_same(const std::vector<double>& fast, const std::vector<double>& oracle, const std::string& what,
                        bool nan_bits = false, AllNan all_nan = AllNan::Fails) {
  ASSERT_EQ(fast.size(), oracle.size()) << what;
  std::size_t bad = 0, first = 0, nan_moved = 0, first_nan = 0, numbers = 0;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    const bool fast_nan = std::isnan(fast[i]), oracle_nan = std::isnan(oracle[i]);
    if (fast_nan != oracle_nan) {
      if (nan_moved++ == 0) first_nan = i;
      continue;
    }
    numbers += !fast_nan;
    if (!same(fast[i], oracle[i], nan_bits) && bad++ == 0) first = i;
  }
  EXPECT_EQ(nan_moved, 0u) << what << ": the NaN positions differ (" << nan_moved << " of " << fast.size()
                           << "), first at " << first_nan << ": fast " << fast[first_nan] << ", oracle "
                           << oracle[first_nan];
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << fast[first] << " vs " << oracle[first];
  if (all_nan == AllNan::Fails) {
    EXPECT_GT(numbers, 0u) << what << ": all " << fast.size()
                           << " outputs are NaN on both paths: the inputs compare nothing";
  }
}

/// c with the execution options ex (the same precision and stochastic stream).
inline Ctx<Emulated> on(const Ctx<Emulated>& c, const ExecOptions& ex) {
  return Ctx<Emulated>(c.precision(), c.bits(), ex);
}

/// Whether a policy quantizes any GEMM operand to a block format (the block presets need shapes whose contraction
/// axes are multiples of their blocks: tests/ops/gemm_quant_test.cpp and tests/studies/train_fast_paths_test.cpp).
inline bool has_block_quant(const Policy& p) {
  for (OpKind k : kAllOps)
    for (Pass ps : kAllPasses)
      if (p.at(k, ps).quant.active()) return true;
  return false;
}

/// The policies of the span fast-path and reference tests: every preset without block quantization, then
/// stochastic, directed, saturating, NaN→inf and flush-to-zero variants.
inline std::vector<std::string> span_policies() {
  std::vector<std::string> p;
  for (const std::string& name : Policy::preset_names())  // block presets: ragged shapes here (gemm_quant_test)
    if (!has_block_quant(Policy::preset(name))) p.push_back(name);
  p.push_back("ane-fp16,all.rounding=stochastic");
  p.push_back("pure-bf16,all.rounding=up");
  p.push_back("ane-fp16,all.rounding=odd,all.saturate=1000,all.nan=ane-inf");
  p.push_back("amp-bf16,all.rounding=toward-zero,matmul.acc=fp64-seq");
  // Flush to zero (OpPrecision::ftz, daz): every span path flushes as the per-element calls do.
  p.push_back("ane-guide,all.ftz=all,all.daz=on");
  p.push_back("pure-fp16,all.ftz=out");
  p.push_back("pure-bf16,all.ftz=all,all.daz=on");
  p.push_back("fp32,all.ftz=all,all.daz=on");
  p.push_back("fp32,all.ftz=out");
  p.push_back("ane-fp16,all.rounding=stochastic,all.ftz=all,all.daz=on");
  p.push_back("amp-fp16,all.rounding=up,all.ftz=out,all.daz=on");
  return p;
}

/// Runs f(ex) twice, with the fast paths on and off (ex = ::roundoff::test::exec_for(true / false, kernels)), and
/// returns both results.
template <class F>
std::pair<std::vector<std::vector<double>>, std::vector<std::vector<double>>> both(
    F&& f, const numerics::KernelOptions& kernels = {}) {
  auto fast = f(::roundoff::test::exec_for(true, kernels));
  auto oracle = f(::roundoff::test::exec_for(false, kernels));
  return {fast, oracle};
}

}  // namespace roundoff::ops::test
