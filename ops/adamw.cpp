// Explicit instantiations (each op compiles once per backend) and AdamW's binary32 path (AVX2).
#include "ops/adamw.hpp"

#include "numerics/gemm_kernels.hpp"

// GCC 12 reports -Wmaybe-uninitialized inside the intrinsic headers (the self-initialised
// _mm*_undefined_* placeholders of unmasked intrinsics); the state at the header's own lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace roundoff::ops {

namespace detail {
namespace {

#define ROUNDOFF_ADAMW_AVX2 __attribute__((target("avx2")))

/// All-ones lanes where t is finite (t − t is 0 for finite t, NaN for ±inf and NaN).
ROUNDOFF_ADAMW_AVX2 inline __m256 finite(__m256 t) {
  return _mm256_cmp_ps(_mm256_sub_ps(t, t), _mm256_setzero_ps(), _CMP_EQ_OQ);
}

/// t, and-ing its finite lanes into ok.
ROUNDOFF_ADAMW_AVX2 inline __m256 step(__m256 t, __m256& ok) {
  ok = _mm256_and_ps(ok, finite(t));
  return t;
}

/// t flushed in binary32 when `on`: lanes with 0 < |t| < 2^-126 become a zero of their sign (the sign bit kept,
/// the magnitude bits cleared); zeros, normals, infinities and NaN unchanged.
ROUNDOFF_ADAMW_AVX2 inline __m256 flush(__m256 t, bool on) {
  if (!on) return t;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 tiny = _mm256_cmp_ps(_mm256_and_ps(t, magnitude), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
  return _mm256_andnot_ps(_mm256_and_ps(tiny, magnitude), t);
}

/// Loads 8 doubles as binary32 and clears the bits of `exact` whose conversion was not exact (NaN is not).
ROUNDOFF_ADAMW_AVX2 inline __m256 load_b32(const double* p, unsigned& exact) {
  const __m256d lo = _mm256_loadu_pd(p), hi = _mm256_loadu_pd(p + 4);
  const __m128 flo = _mm256_cvtpd_ps(lo), fhi = _mm256_cvtpd_ps(hi);
  exact &= static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(_mm256_cvtps_pd(flo), lo, _CMP_EQ_OQ)) |
                                 (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_cvtps_pd(fhi), hi, _CMP_EQ_OQ)) << 4));
  return _mm256_set_m128(fhi, flo);
}

/// Loads 8 binary32 values (exact: nothing to clear).
ROUNDOFF_ADAMW_AVX2 inline __m256 load_b32(const float* p, unsigned&) { return _mm256_loadu_ps(p); }

/// Stores the lanes of x whose bit is set in `lanes` to p[0, 8).
ROUNDOFF_ADAMW_AVX2 inline void store_lanes(float* p, __m256 x, unsigned lanes) {
  const __m256i bit = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
  _mm256_maskstore_ps(p, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(lanes)), bit), bit), x);
}

/// Stores the lanes of x (as binary64) whose bit is set in `lanes` to p[0, 8).
ROUNDOFF_ADAMW_AVX2 inline void store_lanes(double* p, __m256 x, unsigned lanes) {
  const __m256i bit = _mm256_set_epi64x(8, 4, 2, 1);
  const __m256i lo = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(lanes & 0xF), bit), bit);
  const __m256i hi = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x((lanes >> 4) & 0xF), bit), bit);
  _mm256_maskstore_pd(p, lo, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
  _mm256_maskstore_pd(p + 4, hi, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
}

}  // namespace

bool adamw_binary32_supported(const numerics::KernelOptions& opts) {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return cpu && opts.isa_limit >= numerics::kernels::Isa::Avx2;
}

namespace {

/// adamw_binary32 on masters stored as W and moments stored as M (double or float).
template <class W, class M, class G>
ROUNDOFF_ADAMW_AVX2 void adamw_binary32_on(W* w, M* m, M* v, const G* g, std::size_t n, const AdamWBinary32& c,
                                           std::uint8_t* bad) {
  const __m256 b1 = _mm256_set1_ps(c.b1), b2 = _mm256_set1_ps(c.b2), ob1 = _mm256_set1_ps(c.ob1),
               ob2 = _mm256_set1_ps(c.ob2), c1 = _mm256_set1_ps(c.c1), c2 = _mm256_set1_ps(c.c2),
               eps = _mm256_set1_ps(c.eps), wd = _mm256_set1_ps(c.wd), lr = _mm256_set1_ps(c.lr),
               gs = _mm256_set1_ps(c.gs);
  const bool fa = c.flush_all, fs = c.flush_stored;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    unsigned exact = 0xFF;
    const __m256 wi = load_b32(w + i, exact), mi0 = load_b32(m + i, exact), vi0 = load_b32(v + i, exact);
    __m256 gi = load_b32(g + i, exact);
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    // r(t): an operation's result (finiteness into ok, ftz all's flush); the stores of m, v, w: ftz out's flush.
    const auto r = [&](__m256 t) ROUNDOFF_ADAMW_AVX2 { return flush(step(t, ok), fa); };
    if (c.scale) gi = r(_mm256_mul_ps(gi, gs));
    const __m256 mi = flush(r(_mm256_add_ps(r(_mm256_mul_ps(b1, mi0)), r(_mm256_mul_ps(ob1, gi)))), fs);
    const __m256 g2 = r(_mm256_mul_ps(gi, gi));
    const __m256 vi = flush(r(_mm256_add_ps(r(_mm256_mul_ps(b2, vi0)), r(_mm256_mul_ps(ob2, g2)))), fs);
    const __m256 mhat = r(_mm256_div_ps(mi, c1)), vhat = r(_mm256_div_ps(vi, c2));
    const __m256 den = r(_mm256_add_ps(r(_mm256_sqrt_ps(vhat)), eps));
    const __m256 upd = r(_mm256_add_ps(r(_mm256_div_ps(mhat, den)), r(_mm256_mul_ps(wd, wi))));
    const __m256 wn = flush(r(_mm256_sub_ps(wi, r(_mm256_mul_ps(lr, upd)))), fs);
    const unsigned good = exact & static_cast<unsigned>(_mm256_movemask_ps(ok));
    store_lanes(m + i, mi, good);
    store_lanes(v + i, vi, good);
    store_lanes(w + i, wn, good);
    bad[i / 8] = static_cast<std::uint8_t>(~good & 0xFF);
  }
  if (i < n) bad[i / 8] = static_cast<std::uint8_t>((1u << (n - i)) - 1);  // a ragged group: the scalar path
}

}  // namespace

ROUNDOFF_ADAMW_AVX2 void adamw_binary32(double* w, double* m, double* v, const double* g, std::size_t n,
                                        const AdamWBinary32& c, std::uint8_t* bad) {
  adamw_binary32_on(w, m, v, g, n, c, bad);
}

ROUNDOFF_ADAMW_AVX2 void adamw_binary32(double* w, float* m, float* v, const double* g, std::size_t n,
                                        const AdamWBinary32& c, std::uint8_t* bad) {
  adamw_binary32_on(w, m, v, g, n, c, bad);
}

ROUNDOFF_ADAMW_AVX2 void adamw_binary32(float* w, float* m, float* v, const double* g, std::size_t n,
                                        const AdamWBinary32& c, std::uint8_t* bad) {
  adamw_binary32_on(w, m, v, g, n, c, bad);
}

ROUNDOFF_ADAMW_AVX2 void adamw_binary32(double* w, float* m, float* v, const float* g, std::size_t n,
                                        const AdamWBinary32& c, std::uint8_t* bad) {
  adamw_binary32_on(w, m, v, g, n, c, bad);
}

ROUNDOFF_ADAMW_AVX2 void adamw_binary32(float* w, float* m, float* v, const float* g, std::size_t n,
                                        const AdamWBinary32& c, std::uint8_t* bad) {
  adamw_binary32_on(w, m, v, g, n, c, bad);
}

}  // namespace detail

ROUNDOFF_ADAMW_DECL(, Emulated)
ROUNDOFF_ADAMW_DECL(, Reference)

void adamw_update(std::span<double> w, std::span<float> m, std::span<float> v, std::span<const double> g,
                  std::span<double> weights, const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f,
                  const Ctx<Emulated>& ctx, Select sel) {
  detail::adamw_update_stored<Emulated, float>(w, m, v, g, weights, cfg, t, f, ctx, sel);
}

void adamw_update(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const double> g,
                  const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f, const Ctx<Emulated>& ctx,
                  Select sel) {
  if (!numerics::fits_binary32(f.master.format))
    throw std::logic_error("adamw_update: binary32 masters under a master format beyond binary32 (" +
                           numerics::name_of(f.master.format) + ")");
  detail::adamw_update_stored<Emulated, float, float>(w, m, v, g, {}, cfg, t, f, ctx, sel);
}

void adamw_update(std::span<double> w, std::span<float> m, std::span<float> v, std::span<const float> g,
                  std::span<double> weights, const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f,
                  const Ctx<Emulated>& ctx, Select sel) {
  detail::adamw_update_stored<Emulated, float, double, float>(w, m, v, g, weights, cfg, t, f, ctx, sel);
}

void adamw_update(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
                  const AdamWConfig& cfg, std::int64_t t, const AdamWFormats& f, const Ctx<Emulated>& ctx,
                  Select sel) {
  if (!numerics::fits_binary32(f.master.format))
    throw std::logic_error("adamw_update: binary32 masters under a master format beyond binary32 (" +
                           numerics::name_of(f.master.format) + ")");
  detail::adamw_update_stored<Emulated, float, float, float>(w, m, v, g, {}, cfg, t, f, ctx, sel);
}
}  // namespace roundoff::ops
