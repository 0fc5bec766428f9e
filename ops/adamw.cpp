// Explicit instantiations (each op compiles once per backend) and AdamW's binary32 path (AVX-512F).
#include "ops/adamw.hpp"

// GCC 12 reports -Wmaybe-uninitialized inside the intrinsic headers (the self-initialised
// _mm*_undefined_* placeholders of unmasked intrinsics); the state at the header's own lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace roundoff::ops {

namespace detail {
namespace {

/// All-ones lanes where t is finite (t − t is 0 for finite t, NaN for ±inf and NaN).
__attribute__((target("avx512f"))) inline __m256 finite(__m256 t) {
  return _mm256_cmp_ps(_mm256_sub_ps(t, t), _mm256_setzero_ps(), _CMP_EQ_OQ);
}

/// t, and-ing its finite lanes into ok.
__attribute__((target("avx512f"))) inline __m256 step(__m256 t, __m256& ok) {
  ok = _mm256_and_ps(ok, finite(t));
  return t;
}

/// Loads 8 doubles as binary32 and sets `exact` lanes where the conversion was exact (NaN is not).
__attribute__((target("avx512f"))) inline __m256 load_b32(const double* p, __mmask8 live, __mmask8& exact) {
  const __m512d d = _mm512_maskz_loadu_pd(live, p);
  const __m256 f = _mm512_cvtpd_ps(d);
  exact &= _mm512_cmp_pd_mask(_mm512_cvtps_pd(f), d, _CMP_EQ_OQ);
  return f;
}

}  // namespace

bool adamw_binary32_supported() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return ok;
}

__attribute__((target("avx512f"))) void adamw_binary32(double* w, double* m, double* v, const double* g,
                                                        std::size_t n, const AdamWBinary32& c, std::uint8_t* bad) {
  const __m256 b1 = _mm256_set1_ps(c.b1), b2 = _mm256_set1_ps(c.b2), ob1 = _mm256_set1_ps(c.ob1),
               ob2 = _mm256_set1_ps(c.ob2), c1 = _mm256_set1_ps(c.c1), c2 = _mm256_set1_ps(c.c2),
               eps = _mm256_set1_ps(c.eps), wd = _mm256_set1_ps(c.wd), lr = _mm256_set1_ps(c.lr),
               gs = _mm256_set1_ps(c.gs);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::size_t left = n - i;
    const __mmask8 live = left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
    __mmask8 exact = live;
    const __m256 wi = load_b32(w + i, live, exact), mi0 = load_b32(m + i, live, exact),
                 vi0 = load_b32(v + i, live, exact);
    __m256 gi = load_b32(g + i, live, exact);
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    if (c.scale) gi = step(_mm256_mul_ps(gi, gs), ok);
    const __m256 mi = step(_mm256_add_ps(step(_mm256_mul_ps(b1, mi0), ok), step(_mm256_mul_ps(ob1, gi), ok)), ok);
    const __m256 g2 = step(_mm256_mul_ps(gi, gi), ok);
    const __m256 vi = step(_mm256_add_ps(step(_mm256_mul_ps(b2, vi0), ok), step(_mm256_mul_ps(ob2, g2), ok)), ok);
    const __m256 mhat = step(_mm256_div_ps(mi, c1), ok), vhat = step(_mm256_div_ps(vi, c2), ok);
    const __m256 den = step(_mm256_add_ps(step(_mm256_sqrt_ps(vhat), ok), eps), ok);
    const __m256 upd = step(_mm256_add_ps(step(_mm256_div_ps(mhat, den), ok), step(_mm256_mul_ps(wd, wi), ok)), ok);
    const __m256 wn = step(_mm256_sub_ps(wi, step(_mm256_mul_ps(lr, upd), ok)), ok);
    const auto good = static_cast<__mmask8>(exact & static_cast<unsigned>(_mm256_movemask_ps(ok)));
    _mm512_mask_storeu_pd(m + i, good, _mm512_cvtps_pd(mi));
    _mm512_mask_storeu_pd(v + i, good, _mm512_cvtps_pd(vi));
    _mm512_mask_storeu_pd(w + i, good, _mm512_cvtps_pd(wn));
    bad[i / 8] = static_cast<std::uint8_t>(live & ~good);
  }
}

}  // namespace detail

ROUNDOFF_ADAMW_DECL(, Emulated)
ROUNDOFF_ADAMW_DECL(, Reference)
}  // namespace roundoff::ops
