// exp and sigmoid over spans: a binary64 evaluation with a derived error bound, a per-lane rounding test, the
// scalar numerics::elementary for the lanes that fail it (contract in elementary_span.hpp, argument in
// docs/numerics.md).
#include "numerics/elementary_span.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/elementary_dd_span.hpp"

namespace roundoff::numerics {

namespace {

#define ROUNDOFF_AVX512 __attribute__((target("avx512f")))
#define ROUNDOFF_AVX2 __attribute__((target("avx2,fma")))

// Range reduction x = k·ln2 + r: k = rint(x/ln2) by the shifter 1.5·2^52 (|x/ln2| < 2^51), r = x - k·ln2 in two
// fused steps with ln2 = kLn2Hi + kLn2Lo + O(2^-110).
constexpr double kInvLn2 = 0x1.71547652b82fep0;
constexpr double kShifter = 0x1.8p52;
constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;
constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;

// e^r ≈ Σ_{i<=11} r^i/i! (Taylor; |r| <= 0.3466), evaluated by Horner with one FMA per step.
constexpr int kDegree = 11;
constexpr double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }
// 1/i!, i! exact in binary64 for i <= 18, the quotient correctly rounded. A table evaluated at compile time: the
// loops below index it with a run-time i, and a constexpr function called there is evaluated at run time (the
// AVX2 tier called factorial 12 times per 4 lanes).
constexpr std::array<double, kDegree + 1> kCoefficients = [] {
  std::array<double, kDegree + 1> c{};
  for (int i = 0; i <= kDegree; ++i) c[static_cast<std::size_t>(i)] = 1.0 / factorial(i);
  return c;
}();
constexpr double coefficient(int i) { return kCoefficients[static_cast<std::size_t>(i)]; }

// Derived bounds (docs/numerics.md): exp's evaluation has relative error <= 1.5038e-14 < 0x1.1p-46; sigmoid's
// adds two binary64 roundings (1 + e^-x, then 1/·): (1 + 2^-53)/((1 - ε_exp)(1 - 2^-53)) - 1 < 0x1.2p-46.
constexpr double kExpError = 0x1.1p-46;
constexpr double kSigmoidError = 0x1.2p-46;
// Added to ε_f for the rounding test: covers glibc's assumed error and numerics::elementary's own check
// interval for the stochastic mode (≤ 18.01·2^-52) and the binary64 roundings of y·K and y ± B (≤ 1.1·2^-52).
constexpr double kMargin = 0x1p-47;

constexpr std::size_t kChunk = 256;

/// One lane, in the scalar tier; the vector tiers perform the same operations in the same order.
double exp_lane(double x) {
  const double t = x * kInvLn2;
  const double s = t + kShifter;
  const double kd = s - kShifter;
  const double r1 = __builtin_fma(-kd, kLn2Hi, x);
  const double r = __builtin_fma(-kd, kLn2Lo, r1);
  double p = coefficient(kDegree);
  for (int i = kDegree - 1; i >= 0; --i) p = __builtin_fma(p, r, coefficient(i));
  const std::uint64_t k = std::bit_cast<std::uint64_t>(s) - std::bit_cast<std::uint64_t>(kShifter);
  return p * std::bit_cast<double>((k + 1023) << 52);
}

double core_lane(Elementary f, double x) {
  if (!(std::fabs(x) <= kSpanMaxArg)) return std::numeric_limits<double>::quiet_NaN();
  if (f == Elementary::Exp) return exp_lane(x);
  const double e = exp_lane(-x);
  const double d = 1.0 + e;
  return 1.0 / d;
}

ROUNDOFF_AVX512 inline __m512d exp8(__m512d x) {
  const __m512d shifter = _mm512_set1_pd(kShifter);
  const __m512d t = _mm512_mul_pd(x, _mm512_set1_pd(kInvLn2));
  const __m512d s = _mm512_add_pd(t, shifter);
  const __m512d kd = _mm512_sub_pd(s, shifter);
  const __m512d r1 = _mm512_fnmadd_pd(kd, _mm512_set1_pd(kLn2Hi), x);
  const __m512d r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(kLn2Lo), r1);
  __m512d p = _mm512_set1_pd(coefficient(kDegree));
  for (int i = kDegree - 1; i >= 0; --i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(coefficient(i)));
  const __m512i k = _mm512_sub_epi64(_mm512_castpd_si512(s), _mm512_castpd_si512(shifter));
  const __m512i e = _mm512_maskz_slli_epi64(0xFF, _mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(e));
}

ROUNDOFF_AVX512 void core_avx512(Elementary f, const double* x, double* y, std::size_t n) {
  const __m512d nan = _mm512_set1_pd(std::numeric_limits<double>::quiet_NaN());
  const __m512d one = _mm512_set1_pd(1.0);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_loadu_pd(x + i);
    const __mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(v), _mm512_set1_pd(kSpanMaxArg), _CMP_LE_OQ);
    __m512d r;
    if (f == Elementary::Exp) {
      r = exp8(v);
    } else {
      const __m512d d = _mm512_add_pd(one, exp8(_mm512_sub_pd(_mm512_setzero_pd(), v)));
      r = _mm512_div_pd(one, d);
    }
    _mm512_storeu_pd(y + i, _mm512_mask_blend_pd(ok, nan, r));
  }
  for (; i < n; ++i) y[i] = core_lane(f, x[i]);
}

ROUNDOFF_AVX2 inline __m256d exp4(__m256d x) {
  const __m256d shifter = _mm256_set1_pd(kShifter);
  const __m256d t = _mm256_mul_pd(x, _mm256_set1_pd(kInvLn2));
  const __m256d s = _mm256_add_pd(t, shifter);
  const __m256d kd = _mm256_sub_pd(s, shifter);
  const __m256d r1 = _mm256_fnmadd_pd(kd, _mm256_set1_pd(kLn2Hi), x);
  const __m256d r = _mm256_fnmadd_pd(kd, _mm256_set1_pd(kLn2Lo), r1);
  __m256d p = _mm256_set1_pd(coefficient(kDegree));
  for (int i = kDegree - 1; i >= 0; --i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(coefficient(i)));
  const __m256i k = _mm256_sub_epi64(_mm256_castpd_si256(s), _mm256_castpd_si256(shifter));
  const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(k, _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

ROUNDOFF_AVX2 void core_avx2(Elementary f, const double* x, double* y, std::size_t n) {
  const __m256d nan = _mm256_set1_pd(std::numeric_limits<double>::quiet_NaN());
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFF));
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_loadu_pd(x + i);
    const __m256d ok = _mm256_cmp_pd(_mm256_and_pd(v, abs_mask), _mm256_set1_pd(kSpanMaxArg), _CMP_LE_OQ);
    __m256d r;
    if (f == Elementary::Exp) {
      r = exp4(v);
    } else {
      const __m256d d = _mm256_add_pd(one, exp4(_mm256_sub_pd(_mm256_setzero_pd(), v)));
      r = _mm256_div_pd(one, d);
    }
    _mm256_storeu_pd(y + i, _mm256_blendv_pd(nan, r, ok));
  }
  for (; i < n; ++i) y[i] = core_lane(f, x[i]);
}

void core(Elementary f, const double* x, double* y, std::size_t n, kernels::Isa isa) {
  switch (std::min(isa, kernels::detected_isa())) {
    case kernels::Isa::Avx512:
    case kernels::Isa::Avx512Fp16: return core_avx512(f, x, y, n);
    case kernels::Isa::Avx2: return core_avx2(f, x, y, n);
    case kernels::Isa::None: break;
  }
  for (std::size_t i = 0; i < n; ++i) y[i] = core_lane(f, x[i]);
}

bool has_core(Elementary f) {
  switch (f) {
    case Elementary::Exp:
    case Elementary::Sigmoid: return true;
    case Elementary::Log:
    case Elementary::Tanh:
    case Elementary::Rsqrt:
    case Elementary::Sin:
    case Elementary::Cos:
    case Elementary::Erf: return false;
  }
  return false;
}

}  // namespace

double elementary_core_error(Elementary f) {
  switch (f) {
    case Elementary::Exp: return kExpError;
    case Elementary::Sigmoid: return kSigmoidError;
    case Elementary::Log:
    case Elementary::Tanh:
    case Elementary::Rsqrt:
    case Elementary::Sin:
    case Elementary::Cos:
    case Elementary::Erf: break;
  }
  throw std::invalid_argument(std::string("elementary_core: no vectorised evaluation of ") + name_of(f) +
                              " (valid: exp, sigmoid)");
}

void elementary_core(Elementary f, std::span<const double> x, std::span<double> y, kernels::Isa isa) {
  elementary_core_error(f);  // rejects the functions without a core
  if (x.size() != y.size()) throw std::invalid_argument("elementary_core: input and output sizes differ");
  core(f, x.data(), y.data(), x.size(), isa);
}

bool elementary_span_vectorised(Elementary f, const RoundingPlan& plan) {
  return has_core(f) && plan.format.precision <= 24;
}

void elementary_span(const RoundingPlan& plan, Rounding mode, Elementary f, std::span<const double> in,
                     std::span<double> out, std::span<const std::uint64_t> draws, const KernelOptions& opts) {
  if (in.size() != out.size()) throw std::invalid_argument("elementary_span: input and output sizes differ");
  const bool stochastic = mode == Rounding::Stochastic;
  if (stochastic && draws.size() != in.size())
    throw std::invalid_argument("elementary_span: stochastic rounding needs one draw per element");
  const auto draw = [&](std::size_t i) { return stochastic ? draws[i] : std::uint64_t{0}; };
  if (elementary_dd_span(plan, mode, f, in, out, opts)) return;  // binary64 nearest-even (elementary_dd_span.hpp)
  if (!elementary_span_vectorised(f, plan)) {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = elementary(plan, mode, f, in[i], draw(i));
    return;
  }
  const double rel = elementary_core_error(f) + kMargin;
  const kernels::Isa isa = opts.isa();
  double y[kChunk], lo[kChunk], hi[kChunk], a[kChunk], b[kChunk];
  for (std::size_t c = 0; c < in.size(); c += kChunk) {
    const std::size_t n = std::min(kChunk, in.size() - c);
    const double* x = in.data() + c;
    double* o = out.data() + c;
    core(f, x, y, n, isa);
    for (std::size_t i = 0; i < n; ++i) {
      const double bound = y[i] * rel;  // y > 0 (or NaN, which fails every test below)
      lo[i] = y[i] - bound;
      hi[i] = y[i] + bound;
    }
    const std::span<const double> los(lo, n), his(hi, n);
    if (!stochastic) {
      round_array(plan, mode, los, std::span<double>(a, n));
      round_array(plan, mode, his, std::span<double>(b, n));
      for (std::size_t i = 0; i < n; ++i) o[i] = a[i] == b[i] ? a[i] : elementary(plan, mode, f, x[i]);
      continue;
    }
    // Strictly between two neighbours d < u: then numerics::elementary's own check passes and it rounds glibc's
    // value, which lies in [lo, hi], with the draw; both ends rounding alike decide it.
    double d[kChunk], u[kChunk];
    round_array(plan, Rounding::Down, los, std::span<double>(a, n));
    round_array(plan, Rounding::Down, his, std::span<double>(b, n));
    round_array(plan, Rounding::Up, los, std::span<double>(d, n));
    round_array(plan, Rounding::Up, his, std::span<double>(u, n));
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t r = draws[c + i];
      if (a[i] == b[i] && d[i] == u[i] && a[i] != d[i]) {
        const double s = round_to(plan, mode, lo[i], r);
        if (s == round_to(plan, mode, hi[i], r)) {
          o[i] = s;
          continue;
        }
      }
      o[i] = elementary(plan, mode, f, x[i], r);
    }
  }
}

}  // namespace roundoff::numerics
