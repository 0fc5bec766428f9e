#include "numerics/elementary_fp16.hpp"
// GCC 12's AVX-512 intrinsics (_mm512_cvtps_ph, _mm512_cvtepu16_epi32, _mm512_i32gather_ps) pass an undefined
// source operand that -Wmaybe-uninitialized reports once inlined (a known false positive of the header, as in
// gemm_kernels.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "numerics/elementary_span.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::numerics {
namespace {

constexpr std::size_t kEncodings = std::size_t{1} << 16;

/// The table of f: entry b is elementary(fp16, nearest-even, f, x) for the fp16 value x with bits b; NaN for the
/// NaN encodings (never read: NaN inputs are refused).
std::vector<float> build_table(Elementary f) {
  std::vector<double> x(kEncodings), y(kEncodings);
  for (std::size_t b = 0; b < kEncodings; ++b) {
    x[b] = from_bits(formats::fp16, b);
    if (std::isnan(x[b])) x[b] = 0.0;
  }
  elementary_span(RoundingPlan(formats::fp16), Rounding::NearestEven, f, x, y);
  std::vector<float> t(kEncodings);
  for (std::size_t b = 0; b < kEncodings; ++b)
    t[b] = std::isnan(from_bits(formats::fp16, b)) ? std::numeric_limits<float>::quiet_NaN()
                                                   : static_cast<float>(y[b]);
  return t;
}

/// The table of f, built on first use (thread-safe: a function-local static), constant after.
const float* table_of(Elementary f) {
  switch (f) {
    case Elementary::Exp: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Log: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Sigmoid: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Tanh: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Rsqrt: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Sin: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Cos: { static const std::vector<float> t = build_table(f); return t.data(); }
    case Elementary::Erf: { static const std::vector<float> t = build_table(f); return t.data(); }
  }
  return nullptr;
}

/// The portable loop: each value's fp16 bits by to_bits (exact for an fp16 value).
void lookup(const float* t, const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = t[to_bits(formats::fp16, static_cast<double>(src[i]))];
}

/// 16 lanes: the fp16 bits by the hardware conversion (exact: fp16 values), zero-extended, then a gather.
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void lookup_avx512(const float* t, const float* src,
                                                                             float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(dst + i, _mm512_i32gather_ps(_mm512_cvtepu16_epi32(h), t, 4));
  }
  if (i == n) return;
  const auto live = static_cast<__mmask16>((1u << (n - i)) - 1u);
  const __m256i h =
      _mm512_cvtps_ph(_mm512_maskz_loadu_ps(live, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 y = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, _mm512_cvtepu16_epi32(h), t, 4);
  _mm512_mask_storeu_ps(dst + i, live, y);
}

/// 8 lanes, as lookup_avx512; the tail by the portable loop.
__attribute__((target("avx2,f16c"))) void lookup_avx2(const float* t, const float* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_i32gather_ps(t, _mm256_cvtepu16_epi32(h), 4));
  }
  lookup(t, src + i, dst + i, n - i);
}

}  // namespace

bool elementary_fp16_values(Elementary f, std::span<const float> src, std::span<float> dst,
                            const KernelOptions& opts) {
  if (!binary16_values(src, false, opts)) return false;
  const float* t = table_of(f);
  // The SIMD conversions under the default control register only (as binary16_values' scans).
  switch (default_mxcsr() ? opts.isa() : kernels::Isa::None) {
    case kernels::Isa::Avx512:
    case kernels::Isa::Avx512Fp16: lookup_avx512(t, src.data(), dst.data(), src.size()); return true;
    case kernels::Isa::Avx2: lookup_avx2(t, src.data(), dst.data(), src.size()); return true;
    case kernels::Isa::None: lookup(t, src.data(), dst.data(), src.size()); return true;
  }
  return true;
}

}  // namespace roundoff::numerics
