// The AVX2 + FMA tier of the GEMM kernels (see gemm_kernels_avx2.hpp).
#include "numerics/gemm_kernels_avx2.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace roundoff::numerics::kernels::avx2 {
namespace {

#define ROUNDOFF_AVX2 __attribute__((target("avx2,fma")))

/// The class of one value (see pack_run) and its binary32 value (NaN: the quiet NaN).
int classify(double x, bool inputs, bool any_binary32, float& out) {
  const auto f = static_cast<float>(x);
  out = std::isnan(x) ? std::numeric_limits<float>::quiet_NaN() : f;
  if (!std::isnan(x) && static_cast<double>(f) != x) return 0;
  if (!inputs || any_binary32) return 1;
  const auto u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t e = (u >> 23) & 0xFFu;
  const bool special = e == 0xFFu || (u & 0x7FFFFFFFu) == 0;
  const bool in_range = e >= 127 - 63 && e <= 127 + 62;
  const bool short_sig = (u & 0xFFFu) == 0;  // <= 12 significant bits
  return special || (in_range && short_sig) ? 1 : 0;
}

template <std::size_t MR>
ROUNDOFF_AVX2 void tile(const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb, std::size_t K,
                        std::size_t block, float* t, std::size_t ldt) {
  __m256 s[MR][2];
  for (std::size_t r = 0; r < MR; ++r) {
    s[r][0] = _mm256_loadu_ps(t + r * ldt);
    s[r][1] = _mm256_loadu_ps(t + r * ldt + 8);
  }
  if (block == 0) {
    for (std::size_t k = 0; k < K; ++k) {
      const __m256 b0 = _mm256_loadu_ps(Bp + k * ldb), b1 = _mm256_loadu_ps(Bp + k * ldb + 8);
#pragma GCC unroll 6
      for (std::size_t r = 0; r < MR; ++r) {
        const __m256 a = _mm256_broadcast_ss(Ap + r * lda + k);
        s[r][0] = _mm256_fmadd_ps(a, b0, s[r][0]);
        s[r][1] = _mm256_fmadd_ps(a, b1, s[r][1]);
      }
    }
  } else {
    const __m256 neg0 = _mm256_set1_ps(-0.0f);
    for (std::size_t k0 = 0; k0 < K; k0 += block) {
      const std::size_t k1 = std::min(K, k0 + block);
      __m256 p[MR][2];
      for (std::size_t r = 0; r < MR; ++r) p[r][0] = p[r][1] = neg0;
      for (std::size_t k = k0; k < k1; ++k) {
        const __m256 b0 = _mm256_loadu_ps(Bp + k * ldb), b1 = _mm256_loadu_ps(Bp + k * ldb + 8);
#pragma GCC unroll 6
        for (std::size_t r = 0; r < MR; ++r) {
          const __m256 a = _mm256_broadcast_ss(Ap + r * lda + k);
          p[r][0] = _mm256_fmadd_ps(a, b0, p[r][0]);
          p[r][1] = _mm256_fmadd_ps(a, b1, p[r][1]);
        }
      }
      for (std::size_t r = 0; r < MR; ++r) {
        s[r][0] = _mm256_add_ps(s[r][0], p[r][0]);
        s[r][1] = _mm256_add_ps(s[r][1], p[r][1]);
      }
    }
  }
  for (std::size_t r = 0; r < MR; ++r) {
    _mm256_storeu_ps(t + r * ldt, s[r][0]);
    _mm256_storeu_ps(t + r * ldt + 8, s[r][1]);
  }
}

}  // namespace

ROUNDOFF_AVX2 int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32) {
  const bool check_inputs = inputs && !any_binary32;
  int bad = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_loadu_pd(src + i), hi = _mm256_loadu_pd(src + i + 4);
    const __m128 flo = _mm256_cvtpd_ps(lo), fhi = _mm256_cvtpd_ps(hi);
    // Exactly a binary32 value (NaN compares unordered: accepted).
    const int exact = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_cvtps_pd(flo), lo, _CMP_EQ_UQ)) |
                      (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_cvtps_pd(fhi), hi, _CMP_EQ_UQ)) << 4);
    const __m256 f = _mm256_set_m128(fhi, flo);
    int ok = exact;
    if (check_inputs) {
      const __m256i fi = _mm256_castps_si256(f);
      const __m256i e = _mm256_and_si256(_mm256_srli_epi32(fi, 23), _mm256_set1_epi32(0xFF));
      const __m256i zero = _mm256_setzero_si256();
      const __m256i special =
          _mm256_or_si256(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF)),
                          _mm256_cmpeq_epi32(_mm256_and_si256(fi, _mm256_set1_epi32(0x7FFFFFFF)), zero));
      const __m256i in_range = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_set1_epi32(127 - 64)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(127 + 63), e));
      const __m256i short_sig = _mm256_cmpeq_epi32(_mm256_and_si256(fi, _mm256_set1_epi32(0xFFF)), zero);
      const __m256i good = _mm256_or_si256(special, _mm256_and_si256(in_range, short_sig));
      ok &= _mm256_movemask_ps(_mm256_castsi256_ps(good));
    }
    bad |= ~ok & 0xFF;
    if (f32) {
      const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
      _mm256_storeu_ps(f32 + i, _mm256_blendv_ps(f, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan));
    }
  }
  for (; i < n; ++i) {
    float f;
    if (classify(src[i], inputs, any_binary32, f) == 0) bad = 1;
    if (f32) f32[i] = f;
  }
  return bad ? 0 : 1;
}

void tile_f32_rows(std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
                   std::size_t K, std::size_t block, float* t, std::size_t ldt) {
  // 16 ymm registers: 6 rows × 2 accumulators (sequential) or 3 rows × 2 partial + 2 total sums (blocked),
  // plus the two B vectors and the broadcast. Each output row is computed the same way in any tile height.
  const std::size_t tall = block == 0 ? 6 : 3;
  for (std::size_t r0 = 0; r0 < rows;) {
    const std::size_t left = rows - r0, h = std::min(left, tall);
    const float* a = Ap + r0 * lda;
    float* out = t + r0 * ldt;
    switch (h) {
      case 6: tile<6>(a, lda, Bp, ldb, K, block, out, ldt); break;
      case 5: tile<5>(a, lda, Bp, ldb, K, block, out, ldt); break;
      case 4: tile<4>(a, lda, Bp, ldb, K, block, out, ldt); break;
      case 3: tile<3>(a, lda, Bp, ldb, K, block, out, ldt); break;
      case 2: tile<2>(a, lda, Bp, ldb, K, block, out, ldt); break;
      default: tile<1>(a, lda, Bp, ldb, K, block, out, ldt); break;
    }
    r0 += h;
  }
}

}  // namespace roundoff::numerics::kernels::avx2
