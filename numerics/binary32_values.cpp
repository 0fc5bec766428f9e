// Whether a binary64 array holds binary32 values only (numerics/binary32_values.hpp).
// GCC 12's AVX-512 conversion intrinsics (_mm512_cvtpd_ps, _mm512_cvtps_pd) use an undefined source operand that
// -Wmaybe-uninitialized reports once inlined (a known false positive of the header, as in gemm_kernels.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "numerics/binary32_values.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstddef>

#include "numerics/round_span.hpp"

namespace roundoff::numerics {
namespace {

/// One value: the round trip through binary32 is exact and the value is no NaN (NaN != NaN).
bool is_binary32(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

__attribute__((target("avx512f"))) bool all_binary32_avx512(const double* x, std::size_t n) {
  constexpr std::size_t kBlock = 256;  // an early exit per block, no branch per vector
  for (std::size_t at = 0; at < n; at += kBlock) {
    const std::size_t end = n - at < kBlock ? n : at + kBlock;
    __mmask8 bad = 0;
    for (std::size_t i = at; i < end; i += 8) {
      const std::size_t left = end - i;
      const __mmask8 live = left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
      const __m512d v = _mm512_maskz_loadu_pd(live, x + i);
      const __m512d r = _mm512_cvtps_pd(_mm512_cvtpd_ps(v));
      bad |= static_cast<__mmask8>(live & ~_mm512_cmp_pd_mask(r, v, _CMP_EQ_OQ));  // NaN: unordered, not equal
    }
    if (bad != 0) return false;
  }
  return true;
}

__attribute__((target("avx2"))) bool all_binary32_avx2(const double* x, std::size_t n) {
  constexpr std::size_t kBlock = 256;
  std::size_t i = 0;
  for (std::size_t at = 0; at + 4 <= n; at += kBlock) {
    const std::size_t end = n - at < kBlock ? n : at + kBlock;
    __m256d ok = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    for (i = at; i + 4 <= end; i += 4) {
      const __m256d v = _mm256_loadu_pd(x + i);
      ok = _mm256_and_pd(ok, _mm256_cmp_pd(_mm256_cvtps_pd(_mm256_cvtpd_ps(v)), v, _CMP_EQ_OQ));
    }
    if (_mm256_movemask_pd(ok) != 0xF) return false;
  }
  for (; i < n; ++i)
    if (!is_binary32(x[i])) return false;
  return true;
}

__attribute__((target("avx512f"))) void widen_avx512(const float* src, double* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_pd(dst + i, _mm512_cvtps_pd(_mm256_loadu_ps(src + i)));
    _mm512_storeu_pd(dst + i + 8, _mm512_cvtps_pd(_mm256_loadu_ps(src + i + 8)));
  }
  for (; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

/// widen_avx512, returning whether no value is NaN.
__attribute__((target("avx512f"))) bool widen_checked_avx512(const float* src, double* dst, std::size_t n) {
  std::size_t i = 0;
  __mmask16 nan = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm512_storeu_pd(dst + i, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    _mm512_storeu_pd(dst + i + 8, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  bool clean = nan == 0;
  for (; i < n; ++i) {
    dst[i] = static_cast<double>(src[i]);
    clean = clean && !std::isnan(src[i]);
  }
  return clean;
}

__attribute__((target("avx512f"))) void narrow_avx512(const double* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(dst + i, _mm512_cvtpd_ps(_mm512_loadu_pd(src + i)));
    _mm256_storeu_ps(dst + i + 8, _mm512_cvtpd_ps(_mm512_loadu_pd(src + i + 8)));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

__attribute__((target("avx2"))) void widen_avx2(const float* src, double* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_pd(dst + i, _mm256_cvtps_pd(_mm_loadu_ps(src + i)));
    _mm256_storeu_pd(dst + i + 4, _mm256_cvtps_pd(_mm_loadu_ps(src + i + 4)));
  }
  for (; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

/// widen_avx2, returning whether no value is NaN.
__attribute__((target("avx2"))) bool widen_checked_avx2(const float* src, double* dst, std::size_t n) {
  std::size_t i = 0;
  __m256 nan = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    _mm256_storeu_pd(dst + i, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    _mm256_storeu_pd(dst + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  bool clean = _mm256_movemask_ps(nan) == 0;
  for (; i < n; ++i) {
    dst[i] = static_cast<double>(src[i]);
    clean = clean && !std::isnan(src[i]);
  }
  return clean;
}

__attribute__((target("avx2"))) void narrow_avx2(const double* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_ps(dst + i, _mm256_cvtpd_ps(_mm256_loadu_pd(src + i)));
    _mm_storeu_ps(dst + i + 4, _mm256_cvtpd_ps(_mm256_loadu_pd(src + i + 4)));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace

bool all_binary32(std::span<const double> x, const KernelOptions& opts) {
  if (!default_mxcsr()) return false;
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return all_binary32_avx512(x.data(), x.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return all_binary32_avx2(x.data(), x.size());
  for (const double v : x)
    if (!is_binary32(v)) return false;
  return true;
}

void widen_binary32(std::span<const float> src, std::span<double> dst, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return widen_avx512(src.data(), dst.data(), src.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return widen_avx2(src.data(), dst.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<double>(src[i]);
}

bool widen_binary32_checked(std::span<const float> src, std::span<double> dst, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return widen_checked_avx512(src.data(), dst.data(), src.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return widen_checked_avx2(src.data(), dst.data(), src.size());
  bool clean = true;
  for (std::size_t i = 0; i < src.size(); ++i) {
    dst[i] = static_cast<double>(src[i]);
    clean = clean && !std::isnan(src[i]);
  }
  return clean;
}

void narrow_to_binary32(std::span<const double> src, std::span<float> dst, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return narrow_avx512(src.data(), dst.data(), src.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return narrow_avx2(src.data(), dst.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace roundoff::numerics
