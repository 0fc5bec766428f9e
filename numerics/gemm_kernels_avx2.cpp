// The AVX2 + FMA tier of the GEMM kernels (see gemm_kernel_tiers.hpp).
#include "numerics/gemm_kernel_tiers.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace roundoff::numerics::kernels::avx2 {
namespace {

#define ROUNDOFF_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ROUNDOFF_INLINE __attribute__((always_inline)) inline
#define ROUNDOFF_GEMM_TARGET ROUNDOFF_AVX2
#define ROUNDOFF_GEMM_UNROLL_ROWS _Pragma("GCC unroll 6")
#define ROUNDOFF_GEMM_UNROLL_ANE _Pragma("GCC unroll 4")

using VF = __m256;
using VD = __m256d;
constexpr std::size_t kW = 8;
static_assert(2 * kW == kCols && kW == kAneCols);

ROUNDOFF_AVX2 ROUNDOFF_INLINE VF load(const float* p) { return _mm256_loadu_ps(p); }
ROUNDOFF_AVX2 ROUNDOFF_INLINE void store(float* p, VF v) { _mm256_storeu_ps(p, v); }
ROUNDOFF_AVX2 ROUNDOFF_INLINE VF bcast(const float* p) { return _mm256_broadcast_ss(p); }
ROUNDOFF_AVX2 ROUNDOFF_INLINE VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
ROUNDOFF_AVX2 ROUNDOFF_INLINE VF neg_zero() { return _mm256_set1_ps(-0.0f); }

/// Micro-tile heights. 16 ymm registers: 6 rows × 2 accumulators (fp32, sequential) or 3 rows × 2 partial + 2
/// total sums (blocked), plus the two B vectors and the broadcast; the round-to-odd step needs about 5 more, so 4
/// and 2 rows there. The tile stage: 4 rows, unrolled (its upward phase holds the 4 B vectors, the constants and
/// one row's chains; the running sums wait in memory until the phase's adds).
constexpr bool kRowHeights[13] = {false, true, true, true, true, true, true, false, false,
                                  false, false, false, false};
constexpr bool kAneHeights[13] = {false, true, true, true, true, false, false, false, false,
                                  false, false, false, false};
std::size_t rows_for(std::size_t left, Acc acc, std::size_t block) {
  const bool fp32 = acc == Acc::Fp32;
  return std::min(left, block == 0 ? std::size_t{fp32 ? 6u : 4u} : std::size_t{fp32 ? 3u : 2u});
}
std::size_t ane_rows_for(std::size_t left) { return std::min<std::size_t>(left, 4); }

/// The class of one value (see pack_run) and its binary32 value (NaN: the quiet NaN); `rounds`: x is cast by
/// the conversion (no exactness check).
int classify(double x, bool inputs, bool any_binary32, bool rounds, float& out) {
  const auto f = static_cast<float>(x);
  out = std::isnan(x) ? std::numeric_limits<float>::quiet_NaN() : f;
  if (!rounds && !std::isnan(x) && static_cast<double>(f) != x) return 0;
  if (!inputs || any_binary32) return 1;
  const auto u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t e = (u >> 23) & 0xFFu;
  const bool special = e == 0xFFu || (u & 0x7FFFFFFFu) == 0;
  const bool in_range = e >= 127 - 63 && e <= 127 + 62;
  const bool short_sig = (u & 0xFFFu) == 0;  // <= 12 significant bits
  return special || (in_range && short_sig) ? 1 : 0;
}

/// The lanes of f (binary32 values) that classify accepts as kernel inputs (the input tests of pack_run: 0, inf,
/// NaN, or at most 12 significant bits with 2^-63 <= |x| < 2^63), as an 8-bit mask.
ROUNDOFF_AVX2 __attribute__((always_inline)) inline int accepted_lanes(__m256 f) {
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
  return _mm256_movemask_ps(_mm256_castsi256_ps(good));
}

/// One step s ← round_acc(s + a·b) on 8 lanes (see gemm_kernel_tiers.hpp).
template <Acc acc>
ROUNDOFF_AVX2 __attribute__((always_inline)) inline __m256 mac(__m256 a, __m256 b, __m256 s) {
  if constexpr (acc == Acc::Fp32) {
    return _mm256_fmadd_ps(a, b, s);
  } else {
    const __m256 p = _mm256_mul_ps(a, b);  // exact
    const __m256 r = _mm256_add_ps(s, p);
    const __m256 bb = _mm256_sub_ps(r, s);
    const __m256 e = _mm256_add_ps(_mm256_sub_ps(s, _mm256_sub_ps(r, bb)), _mm256_sub_ps(p, bb));
    const __m256i ri = _mm256_castps_si256(r), one = _mm256_set1_epi32(1);
    // Inexact (e ≠ 0; NaN e only in lanes with a non-finite r, which stay r) with r even: step to the neighbour.
    const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_NEQ_OQ));
    const __m256i even = _mm256_cmpeq_epi32(_mm256_and_si256(ri, one), _mm256_setzero_si256());
    const __m256i step = _mm256_or_si256(_mm256_srai_epi32(_mm256_xor_si256(_mm256_castps_si256(e), ri), 31), one);
    // An overflowing r (±inf from finite s and p) stays ±inf: round-to-odd would give ±max32, which rounds to
    // ±inf in fp16 and bf16 alike, so the final result is the same.
    const __m256i t = _mm256_add_epi32(ri, _mm256_and_si256(_mm256_and_si256(inexact, even), step));
    if constexpr (acc == Acc::Fp16 || acc == Acc::Fp16Ftz) {
      const __m256 h =
          _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_castsi256_ps(t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      if constexpr (acc == Acc::Fp16) return h;
      // The step flush: |h| < 2^-14 (ordered: NaN stays) → the zero of h's sign.
      const __m256 sign = _mm256_set1_ps(-0.0f);
      const __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(sign, h), _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ);
      return _mm256_blendv_ps(h, _mm256_and_ps(h, sign), tiny);
    } else {  // round-half-even on the bits; NaNs here are quiet with a zero low half, so nothing carries out
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(t, 16), one);
      const __m256i q = _mm256_add_epi32(_mm256_add_epi32(t, _mm256_set1_epi32(0x7FFF)), lsb);
      return _mm256_castsi256_ps(_mm256_and_si256(q, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
    }
  }
}

}  // namespace

ROUNDOFF_AVX2 int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32,
                           bool rounds) {
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
    int ok = rounds ? 0xFF : exact;
    if (check_inputs) ok &= accepted_lanes(f);
    bad |= ~ok & 0xFF;
    if (f32) {
      const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
      _mm256_storeu_ps(f32 + i, _mm256_blendv_ps(f, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan));
    }
  }
  for (; i < n; ++i) {
    float f;
    if (classify(src[i], inputs, any_binary32, rounds, f) == 0) bad = 1;
    if (f32) f32[i] = f;
  }
  return bad ? 0 : 1;
}

ROUNDOFF_AVX2 int pack_run(const float* src, std::size_t n, bool inputs, bool any_binary32, float* f32) {
  const bool check_inputs = inputs && !any_binary32;
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
  int bad = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 raw = _mm256_loadu_ps(src + i);
    const __m256 f = _mm256_blendv_ps(raw, _mm256_or_ps(raw, quiet), _mm256_cmp_ps(raw, raw, _CMP_UNORD_Q));
    if (check_inputs) bad |= ~accepted_lanes(f) & 0xFF;
    if (f32) {
      const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
      _mm256_storeu_ps(f32 + i, _mm256_blendv_ps(f, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan));
    }
  }
  for (; i < n; ++i) {
    float f;
    if (classify(static_cast<double>(src[i]), inputs, any_binary32, false, f) == 0) bad = 1;
    if (f32) f32[i] = f;
  }
  return bad ? 0 : 1;
}

ROUNDOFF_AVX2 void widen(const float* src, double* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(dst + i, _mm256_cvtps_pd(_mm_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

namespace {

/// flush=tile on 8 fp16 tile values (argument in gemm_kernels_avx512.cpp): (h & 0x7C00) == 0 gives h & 0x8000.
ROUNDOFF_AVX2 __attribute__((always_inline)) inline __m128i flush_halves(__m128i h) {
  const __m128i tiny = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7C00)), _mm_setzero_si128());
  return _mm_andnot_si128(_mm_and_si128(tiny, _mm_set1_epi16(0x7FFF)), h);
}

/// One tile of N terms added into the 8 sums s of one row (see tile_ane_rows): af = the row at k0 (binary32,
/// widened here: the row is in cache from the binary32 attempt, a binary64 copy would not be), bl/bh = the
/// terms' B columns 0..3 / 4..7 as binary64, b = the same as binary32 (for the fallback). Flush: flush=tile.
template <std::size_t N, bool Flush>
ROUNDOFF_AVX2 __attribute__((always_inline)) inline __m256 ane_f64(__m256 s, const float* af, const __m256d* bl,
                                                                      const __m256d* bh, const float* b,
                                                                      std::size_t ldb, std::int64_t& overflows) {
  double a[N];
  for (std::size_t t = 0; t < N; ++t) a[t] = static_cast<double>(af[t]);
  const __m256d zero = _mm256_setzero_pd();
  const __m256d a0 = _mm256_broadcast_sd(a);
  __m256d sl = _mm256_mul_pd(a0, bl[0]), sh = _mm256_mul_pd(a0, bh[0]);
  __m256d bad_l = zero, bad_h = zero;
#pragma GCC unroll 4
  for (std::size_t t = 1; t < N; ++t) {
    const __m256d at = _mm256_broadcast_sd(a + t);
    const __m256d pl = _mm256_mul_pd(at, bl[t]), ph = _mm256_mul_pd(at, bh[t]);
    const __m256d rl = _mm256_add_pd(sl, pl), rh = _mm256_add_pd(sh, ph);
    const __m256d vl = _mm256_sub_pd(rl, sl), vh = _mm256_sub_pd(rh, sh);
    const __m256d el = _mm256_add_pd(_mm256_sub_pd(sl, _mm256_sub_pd(rl, vl)), _mm256_sub_pd(pl, vl));
    const __m256d eh = _mm256_add_pd(_mm256_sub_pd(sh, _mm256_sub_pd(rh, vh)), _mm256_sub_pd(ph, vh));
    // A nonzero error marks the lane inexact; NaN errors come only from non-finite sums, which are exact.
    bad_l = _mm256_or_pd(bad_l, _mm256_cmp_pd(el, zero, _CMP_NEQ_OQ));
    bad_h = _mm256_or_pd(bad_h, _mm256_cmp_pd(eh, zero, _CMP_NEQ_OQ));
    sl = rl;
    sh = rh;
  }
  // An exact zero becomes +0; then RZ to binary32 by truncating 29 significand bits (exact conversion after).
  sl = _mm256_add_pd(sl, zero);
  sh = _mm256_add_pd(sh, zero);
  const __m256d keep = _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(~0x1FFFFFFFull)));
  const __m256 f =
      _mm256_set_m128(_mm256_cvtpd_ps(_mm256_and_pd(sh, keep)), _mm256_cvtpd_ps(_mm256_and_pd(sl, keep)));
  __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m128i big = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7BFE));
  const auto exact = static_cast<std::uint32_t>(~(_mm256_movemask_pd(bad_l) | (_mm256_movemask_pd(bad_h) << 4)) & 0xFF);
  if (__builtin_expect(exact != 0xFF || _mm_movemask_epi8(big) != 0, 0)) {  // ±65504, ±inf, NaN or inexact
    alignas(32) double su[8];
    alignas(16) std::uint16_t hb[8];
    _mm256_store_pd(su, sl);
    _mm256_store_pd(su + 4, sh);
    _mm_store_si128(reinterpret_cast<__m128i*>(hb), h);
    tile_fixup(hb, exact, su, a, b, ldb, N, 8, overflows);
    h = _mm_load_si128(reinterpret_cast<const __m128i*>(hb));
  }
  if constexpr (Flush) h = flush_halves(h);
  return _mm256_add_ps(s, _mm256_cvtph_ps(h));
}

/// B columns Bp[(k + t)·ldb + 0..7], t < n, as binary64 quarters.
ROUNDOFF_AVX2 __attribute__((always_inline)) inline void load_b_f64(const float* Bp, std::size_t ldb, std::size_t k,
                                                                     std::size_t n, __m256d* bl, __m256d* bh) {
  for (std::size_t t = 0; t < n; ++t) {
    const __m256 b = _mm256_loadu_ps(Bp + (k + t) * ldb);
    bl[t] = _mm256_cvtps_pd(_mm256_castps256_ps128(b));
    bh[t] = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
  }
}

/// 8 lanes of 32-bit masks as 8 lanes of 16-bit masks.
ROUNDOFF_AVX2 __attribute__((always_inline)) inline __m128i halves(__m256 m) {
  const __m256i i = _mm256_castps_si256(m);
  return _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extractf128_si256(i, 1));
}

/// The tile stage's binary32 attempt runs in phases with MXCSR rounding upward (AVX2 has no per-instruction
/// rounding): ane_tile in gemm_tile_loops.inc computes a run of tiles' values h with ane_up between round_upward
/// and round_as_before, and adds them to the running sums after, in the caller's rounding.
#define ROUNDOFF_GEMM_ANE_UPWARD 1

/// Sets MXCSR's rounding control to upward and returns the MXCSR it found. The asm statements carry a memory
/// clobber: no load, store or call moves across them, and the attempt's inputs are loads after round_upward and
/// its results reach the running sums only through stores before round_as_before (gemm_tile_loops.inc).
ROUNDOFF_AVX2 ROUNDOFF_INLINE unsigned round_upward() {
  unsigned found = 0, up = 0;
  __asm__ volatile("vstmxcsr %0" : "=m"(found) : : "memory");
  up = (found & ~0x6000u) | 0x4000u;
  __asm__ volatile("vldmxcsr %0" : : "m"(up) : "memory");
  return found;
}
/// Restores the rounding control of `found` (round_upward's result), keeping the exception flags raised since.
ROUNDOFF_AVX2 ROUNDOFF_INLINE void round_as_before(unsigned found) {
  unsigned now = 0;
  __asm__ volatile("vstmxcsr %0" : "=m"(now) : : "memory");
  now = (now & ~0x6000u) | (found & 0x6000u);
  __asm__ volatile("vldmxcsr %0" : : "m"(now) : "memory");
}

/// The full tile of 4 terms in binary32 under MXCSR rounding upward (see "binary32 bracket" in
/// gemm_kernel_tiers.hpp): its tile values h on all 8 lanes and true, or false with h untouched when a lane's
/// bracket straddles an fp16 value (lo = hi = 0 excepted) or its h is ±65504, ±inf or NaN.
/// a: the row's 4 values as binary32; b[t]: the terms' 8 B columns. Flush: flush=tile. Bits: the common case
/// tested in binary32 bits first, `misses` counting the vectors where it fails.
template <bool Flush, bool Bits>
ROUNDOFF_AVX2 __attribute__((always_inline)) inline bool ane_up(__m256& h, const float* a, const __m256* b,
                                                                std::size_t& misses) {
  const __m256 a1 = _mm256_broadcast_ss(a + 1), a2 = _mm256_broadcast_ss(a + 2), a3 = _mm256_broadcast_ss(a + 3);
  const __m256 u0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a), b[0], _mm256_setzero_ps());  // p_0 (+0 for −0)
  const __m256 u1 = _mm256_fmadd_ps(a1, b[1], u0), m1 = _mm256_fnmsub_ps(a1, b[1], u0);
  const __m256 u2 = _mm256_fmadd_ps(a2, b[2], u1), m2 = _mm256_fnmadd_ps(a2, b[2], m1);
  const __m256 hi = _mm256_fmadd_ps(a3, b[3], u2), m3 = _mm256_fnmadd_ps(a3, b[3], m2);  // hi >= S >= lo = −m3
  // The common case in binary32 bits, as the AVX-512 tier's (ane_f32_n): lo and hi agree in sign, exponent and
  // the 10 fraction bits an fp16 normal keeps, and 2^-14 <= |hi| < 65504; then h = hi with its 13 low bits cleared.
  if constexpr (Bits) {
    const __m256i hb = _mm256_castps_si256(hi);
    const __m256i top = _mm256_set1_epi32(static_cast<int>(0xFFFFE000u));
    // The range in one signed compare: |hi| − 2^-14 (as bits) <= last unsigned, shifted by 2^31 into signed order.
    const __m256i above =
        _mm256_sub_epi32(_mm256_castps_si256(_mm256_and_ps(hi, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)))),
                         _mm256_set1_epi32(static_cast<int>(0x38800000u + 0x80000000u)));
    __m256i last = _mm256_set1_epi32(static_cast<int>(0x477FE000u - 0x38800000u - 1u + 0x80000000u));
    __asm__("" : "+x"(last));  // opaque: GCC would turn x > last into min/equal against last + 1 (one op more)
    // lo = −m3 agrees with hi in the kept bits when m3 ^ hi is 1 in the sign and 0 in the 18 bits below it that
    // are kept: as a signed integer, below INT_MIN + 2^13.
    const __m256i agree = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(0x80002000u)),
                                             _mm256_xor_si256(_mm256_castps_si256(m3), hb));
    const __m256i good = _mm256_andnot_si256(_mm256_cmpgt_epi32(above, last), agree);
    if (__builtin_expect(_mm256_testc_si256(good, top), 1)) {
      h = _mm256_castsi256_ps(_mm256_and_si256(hb, top));
      return true;
    }
    ++misses;
  }
  constexpr int kRz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
  __m128i hh = _mm256_cvtps_ph(hi, kRz);
  const __m128i hl = _mm_xor_si128(_mm256_cvtps_ph(m3, kRz), _mm_set1_epi16(static_cast<short>(0x8000)));  // RZ16(lo)
  // The common case: hl = hh and |h| <= 0x7BFE (below 65504), ±0 included (gemm_kernel_tiers.hpp: hi is never
  // −0, so hh = −0 proves S < 0 and hl = +0 proves S >= 0). One unsigned saturating subtraction is nonzero
  // exactly above the range; with hl ^ hh, one vptest.
  const __m128i miss = _mm_or_si128(_mm_xor_si128(hl, hh),
                                    _mm_subs_epu16(_mm_and_si128(hh, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7BFE)));
  if (__builtin_expect(!_mm_testz_si128(miss, miss), 0)) {
    // S = 0 exactly when lo = hi = 0 (hi = +0, lo = ±0): h = hh = +0, the definition's exact zero.
    const __m256 zero = _mm256_setzero_ps();
    const __m128i exact_zero =
        halves(_mm256_and_ps(_mm256_cmp_ps(m3, zero, _CMP_EQ_OQ), _mm256_cmp_ps(hi, zero, _CMP_EQ_OQ)));
    const __m128i ok = _mm_cmpeq_epi16(miss, _mm_setzero_si128());
    if (_mm_movemask_epi8(_mm_or_si128(ok, exact_zero)) != 0xFFFF) return false;
  }
  // flush=tile: the certified subnormal h (which has S's sign) become zeros of their sign.
  if constexpr (Flush) hh = flush_halves(hh);
  h = _mm256_cvtph_ps(hh);
  return true;
}

#include "numerics/gemm_tile_loops.inc"

}  // namespace roundoff::numerics::kernels::avx2
