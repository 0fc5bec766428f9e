// The AVX-512 tier of the GEMM kernels: its arithmetic of one step (round-to-odd by embedded rounding, the
// tile stage's directed brackets) and, from numerics/gemm_tile_loops.inc, the register-tile loops every tier
// shares. Contract and exactness argument in gemm_kernels.hpp; the driver is gemm_kernels.cpp.
#include "numerics/gemm_kernel_tiers.hpp"

// GCC 12's AVX-512 intrinsics build their pass-through operands from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined (a known false positive of the header), and -Wuninitialized as
// certain once the tile stage's binary64 path is inlined into its out-of-line function (ane_by_f64).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::kernels::avx512 {
namespace {

#define ROUNDOFF_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))
#define ROUNDOFF_INLINE __attribute__((always_inline)) inline
#define ROUNDOFF_GEMM_TARGET ROUNDOFF_AVX512
#define ROUNDOFF_GEMM_UNROLL_ROWS _Pragma("GCC unroll 12")
#define ROUNDOFF_GEMM_UNROLL_ANE _Pragma("GCC unroll 12")
#define ROUNDOFF_GEMM_ANE_UPWARD 0  // the tile stage rounds up and down per instruction (ane_f32_n)

using VF = __m512;
using VD = __m512d;
constexpr std::size_t kW = 16;
static_assert(2 * kW == kCols && kW == kAneCols);

ROUNDOFF_AVX512 ROUNDOFF_INLINE VF load(const float* p) { return _mm512_loadu_ps(p); }
ROUNDOFF_AVX512 ROUNDOFF_INLINE void store(float* p, VF v) { _mm512_storeu_ps(p, v); }
ROUNDOFF_AVX512 ROUNDOFF_INLINE VF bcast(const float* p) { return _mm512_set1_ps(*p); }
ROUNDOFF_AVX512 ROUNDOFF_INLINE VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
ROUNDOFF_AVX512 ROUNDOFF_INLINE VF neg_zero() { return _mm512_set1_ps(-0.0f); }

/// Micro-tile heights: 12 rows (24 accumulator vectors: one A panel) for every sequential accumulator; 6 rows for
/// the blocked sums (12 totals and 12 partial sums: two tiles per panel); then 4, 2, 1 for the ragged rest. The
/// round-to-odd step (fp16, bf16) needs 3–4 temporaries beside the 24 sums, the two B vectors and the broadcast:
/// its fp16 loop keeps every sum in registers (bf16's reloads some values from the stack and is still ≈ 4 % faster
/// than 8 + 4). 8 + 4 rows per panel cost the fp16 steps ≈ 13 %: the 4-row tile's 8 chains cannot hide the step's
/// latency (FMA pair, test, blend, vcvtps2ph, vcvtph2ps), 12 rows' 24 chains can; the blocked sums likewise ran
/// 8 + 4 (log, "thirty-fourth session").
constexpr bool kRowHeights[13] = {false, true, true, false, true, false, true, false, true,
                                  false, false, false, true};
constexpr bool kAneHeights[13] = {false, true, true, false, true, false, false, false, true,
                                  false, false, false, true};
std::size_t rows_for(std::size_t left, Acc /*acc: every sequential one alike*/, std::size_t block) {
  if (block == 0 && left >= 12) return 12;
  if (block != 0 && left >= 6) return 6;
  return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}
std::size_t ane_rows_for(std::size_t left) {
  return left >= 12 ? 12 : left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

// ---------------------------------------------------------------------------------------------------------
// fp32-lane kernels (AVX-512 F): one step s ← round_acc(s + a·b) on 16 lanes.

/// Round-half-even of binary32 bits to bf16 (kept as binary32), subnormals included. NaNs in the kernels are
/// always 0x7FC00000 or 0xFFC00000, possibly with the last bit set by round-to-odd (input NaNs are replaced by
/// the quiet NaN when packed), so the addition cannot carry out of a NaN.
ROUNDOFF_AVX512 ROUNDOFF_INLINE __m512 round_bf16_rne(__m512i t) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(t, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(t, _mm512_set1_epi32(0x7FFF)), lsb);
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

template <Acc acc>
ROUNDOFF_AVX512 ROUNDOFF_INLINE __m512 mac(__m512 a, __m512 b, __m512 s) {
  if constexpr (acc == Acc::Fp32) {
    return _mm512_fmadd_ps(a, b, s);
  } else {
    // Round to odd = the odd one of rd and ru. Inexact: they are adjacent, exactly one is odd (on overflow the
    // odd one is ±max, not ±inf). Exact: rd == ru, except for an exact zero sum, where rd = −0 is even and ru
    // carries IEEE's sign (+0 unless both addends are −0).
    const __m512 rd = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 ru = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    const __mmask16 rd_odd = _mm512_test_epi32_mask(_mm512_castps_si512(rd), _mm512_set1_epi32(1));
    const __m512i t = _mm512_castps_si512(_mm512_mask_mov_ps(ru, rd_odd, rd));
    if constexpr (acc == Acc::Fp16 || acc == Acc::Fp16Ftz) {
      const __m512 h =
          _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_castsi512_ps(t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      if constexpr (acc == Acc::Fp16) return h;
      // The step flush: |h| < 2^-14 (ordered: NaN stays) → the zero of h's sign.
      const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(h), _mm512_set1_ps(0x1p-14f), _CMP_LT_OQ);
      return _mm512_mask_mov_ps(h, tiny, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(h),
                                                                               _mm512_set1_epi32(INT32_MIN))));
    } else {
      return round_bf16_rne(t);
    }
  }
}

// Exact tile stage (ane-tile4, AVX-512 F): an fp32 accumulator fed by tiles of 4 exact products, each tile sum
// rounded once toward zero to fp16. 16 output columns per vector (two binary64 halves for the tile sums).
//
// Per tile and lane, with the products p_t = a_t·b_t exact in binary64 (they are exact in binary32 already):
//   sd = RD(RD(RD(p_0 + p_1) + p_2) + p_3),  su = RU(RU(RU(RU(+0 + p_0) + p_1) + p_2) + p_3)   (FMAs with
//   embedded rounding). Directed rounding is monotone, so sd <= S <= su for the exact tile sum S: sd == su
//   means su == S exactly ("exact" lanes; an exactly zero S gives su = +0, as the definition wants, because
//   in RU x + (−x) = +0 and +0 + −0 = +0). Inexact lanes (products spread over more than binary64 holds, e.g.
//   2^10 + 2^-48 − 2^-48) are recomputed by the scalar definition (numerics::sum under the tile-only
//   accumulation below), as are the overflow counts of lanes whose tile value is ±65504, ±inf or NaN.
//   Non-finite products: sd and su are then the same IEEE sum of the non-finite terms (finite terms are
//   absorbed; the finite part cannot overflow binary64), i.e. the definition's special sum.
//   h = RZ16(RZ32(su)): RZ of RZ is RZ. fp16 ⊂ binary32 as sets of values (subnormals 2^-24.. and ±65504
//   included), so the largest-magnitude fp16 value v with |v| <= |x| and x's sign satisfies |v| <= |RZ32(x)|
//   <= |x|; every fp16 value below |RZ32(x)| is below |x|, so RZ16(RZ32(x)) = v = RZ16(x). This covers
//   subnormal fp16 results (binary32 is normal there) and overflow: RZ32 saturates at ±max32 (never inf) and
//   vcvtps2ph with RZ gives ±65504 for |x| > 65504, as IEEE 754 RZ does; ±0, ±inf and NaN pass through.
//   s = s + h in binary32 RNE is the accumulator step; s starts at −0 (the exact identity: −0 + T_0 = T_0) or C.
// Overflow events: a tile overflows iff S is finite and |S| >= 65536 (RZ in fp16 with one more binade exceeds
// 65504); exact lanes are counted here (their h is ±65504, so they are among the rare lanes), inexact ones by
// the scalar fallback. The fp32 accumulator never overflows: |s| <= max32 and |h| <= 65504 give
// |s + h| < max32 + 2^103 (half an ulp of max32), which rounds to at most max32, also with an unbounded exponent.
//
// Binary32 bracket, tried first (AVX-512 tier): the products are exact in binary32 as well (pack_run: at most 12
// significant bits each, 2^-63 <= |x| < 2^63, so |p_t| lies in [2^-126, 2^126] or is 0/inf/NaN), so the binary32
// FMA chains lo = RD(..RD(p_0 + p_1)..+ p_3) and hi = RU(..) satisfy lo <= S <= hi the same way (an overflowing
// chain only widens the bracket, to ±max32 or ±inf). RZ16 is monotone, so when RZ16(lo) and RZ16(hi) are the
// same fp16 value h, h = RZ16(S) (RZ16 of a binary32 value is one vcvtps2ph with RZ). A lane is taken when the
// two agree and 0 < |h| < 65504 (then S is finite, nonzero and |S| < 65504: no overflow event), or h = ±0 with
// S's sign proven (lo > 0: S > 0 and h = +0; hi < 0: S < 0 and h = −0, RZ16 of a tiny nonzero S), or lo = hi = 0
// (S = 0 exactly: h = +0, the definition's exact zero, whatever the signs of lo and hi). In each case h is what
// the binary64 path gives (RZ16(S), or +0 for S = 0, in its exact lanes and its scalar fallback alike). The

// flush=tile (ane-tile4-ftz): the definition turns a tile value T = RZ16(S) with 0 < |T| < 2^-14 into the zero
// of T's sign. Both paths end with the fp16 bits h of each lane's T (the bracket's certified lanes, the binary64
// path's exact lanes and tile_fixup's scalar lanes, which compute T without the flush); flush_halves then maps
// every h with (h & 0x7C00) == 0 to h & 0x8000 (a nonzero subnormal to the zero of its sign, ±0 to itself) before
// the fp32 add. In the bracket the accepted lanes are: 0 < |h| < 65504 with RZ16(lo) = RZ16(hi), so h = RZ16(S)
// and a subnormal h has S's sign, which the flush keeps; h = ±0 with S's sign proven (RZ16 of a tiny S, already
// the zero of S's sign: unchanged); S = 0 exactly (h = +0: unchanged). So every lane is the flushed definition.
// The bracket's common case (all 16 lanes with a normal h) then has nothing to flush: under the flush it requires
// |h| >= 2^-14 instead of h != 0, and lanes with a subnormal h take the rare branch, which flushes; so
// ane-tile4-ftz runs the common case with the instructions of ane-tile4. A lane whose bracket ends are not the
// same fp16 value declines as before, also when one end is subnormal (the other may be of the other sign, or
// normal: AccumulateFlush.BinaryThirtyTwoBracketsAroundTheSubnormalRangeDecline).

/// flush=tile on 16 fp16 tile values: (h & 0x7C00) == 0 gives h & 0x8000.
ROUNDOFF_AVX512 ROUNDOFF_INLINE __m256i flush_halves(__m256i h) {
  const __mmask16 tiny = _mm256_testn_epi16_mask(h, _mm256_set1_epi16(0x7C00));
  return _mm256_mask_mov_epi16(h, tiny, _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))));
}

/// One tile of N terms (k0 .. k0+N-1) added into the 16 sums s of one row: af = the row at k0 (binary32, widened
/// here: the row is in cache from the binary32 attempt, a binary64 copy read only by declined tiles would not
/// be), b[t] = the terms' B columns as binary64 halves (lo: columns 0..7, hi: 8..15). Flush: flush=tile.
template <std::size_t N, bool Flush>
ROUNDOFF_AVX512 ROUNDOFF_INLINE __m512 ane_f64(__m512 s, const float* af, const __m512d* bl, const __m512d* bh,
                                                 const float* b, std::size_t ldb, std::int64_t& overflows) {
  double a[N];
  for (std::size_t t = 0; t < N; ++t) a[t] = static_cast<double>(af[t]);
  constexpr int kRd = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC, kRu = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
  constexpr int kRz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
  const __m512d a0 = _mm512_set1_pd(a[0]), zero = _mm512_setzero_pd();
  __m512d dl = _mm512_mul_pd(a0, bl[0]), dh = _mm512_mul_pd(a0, bh[0]);
  __m512d ul = _mm512_fmadd_round_pd(a0, bl[0], zero, kRu), uh = _mm512_fmadd_round_pd(a0, bh[0], zero, kRu);
#pragma GCC unroll 4
  for (std::size_t t = 1; t < N; ++t) {
    const __m512d at = _mm512_set1_pd(a[t]);
    dl = _mm512_fmadd_round_pd(at, bl[t], dl, kRd);
    dh = _mm512_fmadd_round_pd(at, bh[t], dh, kRd);
    ul = _mm512_fmadd_round_pd(at, bl[t], ul, kRu);
    uh = _mm512_fmadd_round_pd(at, bh[t], uh, kRu);
  }
  const auto exact = static_cast<__mmask16>(_mm512_cmp_pd_mask(dl, ul, _CMP_EQ_UQ) |
                                            (static_cast<unsigned>(_mm512_cmp_pd_mask(dh, uh, _CMP_EQ_UQ)) << 8));
  const __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(ul, kRz)),
                                      _mm512_cvt_roundpd_ps(uh, kRz), 1);
  __m256i h = _mm512_cvtps_ph(f, kRz);
  const __mmask16 big = _mm256_cmpge_epu16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                _mm256_set1_epi16(0x7BFF));  // ±65504, ±inf, NaN
  if (__builtin_expect(exact != 0xFFFF || big != 0, 0)) {
    alignas(64) double su[16];
    alignas(32) std::uint16_t hb[16];
    _mm512_store_pd(su, ul);
    _mm512_store_pd(su + 8, uh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hb), h);
    tile_fixup(hb, exact, su, a, b, ldb, N, 16, overflows);
    h = _mm256_load_si256(reinterpret_cast<const __m256i*>(hb));
  }
  if constexpr (Flush) h = flush_halves(h);
  return _mm512_add_ps(s, _mm512_cvtph_ps(h));
}

/// B columns Bp[(k + t)·ldb + 0..15], t < n, as binary64 halves.
ROUNDOFF_AVX512 ROUNDOFF_INLINE void load_b_f64(const float* Bp, std::size_t ldb, std::size_t k, std::size_t n,
                                                __m512d* bl, __m512d* bh) {
  for (std::size_t t = 0; t < n; ++t) {
    const __m512 b = _mm512_loadu_ps(Bp + (k + t) * ldb);
    bl[t] = _mm512_cvtps_pd(_mm512_castps512_ps256(b));
    bh[t] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1));
  }
}

/// The tile of N terms in binary32 first (see "binary32 bracket" above): s += h on all 16 lanes and true, or
/// false with s untouched when a lane's bracket straddles an fp16 value, its h is ±65504, ±inf or NaN, or its h
/// is ±0 without a proof of S's sign or of S = 0.
/// a: the row's N values as binary32; b[t]: the terms' 16 B columns. Flush: flush=tile. Bits: the common case
/// tested in binary32 bits first (below), `misses` counting the vectors where it fails.
template <std::size_t N, bool Flush, bool Bits>
ROUNDOFF_AVX512 ROUNDOFF_INLINE bool ane_f32_n(__m512& s, const float* a, const __m512* b, std::size_t& misses) {
  constexpr int kRd = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC, kRu = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
  constexpr int kRz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
  __m512 lo = _mm512_mul_ps(_mm512_set1_ps(a[0]), b[0]);  // exact
  __m512 hi = lo;
#pragma GCC unroll 4
  for (std::size_t t = 1; t < N; ++t) {
    const __m512 at = _mm512_set1_ps(a[t]);
    lo = _mm512_fmadd_round_ps(at, b[t], lo, kRd);
    hi = _mm512_fmadd_round_ps(at, b[t], hi, kRu);
  }
  // The common case in binary32 bits: lo and hi agree in sign, exponent and the 10 fraction bits an fp16 normal
  // keeps, and 2^-14 <= |hi| < 65504. Then RZ16(lo) = RZ16(hi) = hi with its 13 low bits cleared (in fp16's normal
  // range RZ16 truncates a binary32 significand to 11 bits), a normal fp16 value below 65504: exactly the lanes
  // `ok` accepts below with a normal h, with the same h, at a third of the instructions (no conversions).
  if constexpr (Bits) {
    const __m512i hb = _mm512_castps_si512(hi);
    const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFFE000u));
    const __mmask16 agree = _mm512_testn_epi32_mask(_mm512_xor_si512(_mm512_castps_si512(lo), hb), top);
    const __m512i above = _mm512_sub_epi32(_mm512_and_si512(hb, _mm512_set1_epi32(0x7FFFFFFF)),
                                           _mm512_set1_epi32(0x38800000));  // |hi| − 2^-14 as bits
    const __mmask16 normal = _mm512_mask_cmplt_epu32_mask(agree, above, _mm512_set1_epi32(0x477FE000 - 0x38800000));
    if (__builtin_expect(normal == 0xFFFF, 1)) {
      s = _mm512_add_ps(s, _mm512_castsi512_ps(_mm512_and_si512(hb, top)));
      return true;
    }
    ++misses;
  }
  __m256i hh = _mm512_cvtps_ph(hi, kRz);
  const __m256i hl = _mm512_cvtps_ph(lo, kRz);
  const __m256i mag = _mm256_and_si256(hh, _mm256_set1_epi16(0x7FFF));
  const __mmask16 same = _mm256_cmpeq_epi16_mask(hl, hh);
  // Under the flush a subnormal h (mag <= 0x3FF) also leaves the common case (there is nothing to flush in it),
  // so the flush costs the common case nothing.
  const __m256i floor = _mm256_set1_epi16(Flush ? 0x03FF : 0);
  const __mmask16 ok = same & _mm256_cmpgt_epu16_mask(mag, floor) &
                       _mm256_cmplt_epu16_mask(mag, _mm256_set1_epi16(0x7BFF));
  if (__builtin_expect(ok != 0xFFFF, 0)) {
    // Zero lanes: S = 0 exactly when lo = hi = 0 (h = +0, the definition's exact zero); a nonzero S of known sign
    // (lo > 0 or hi < 0) whose ends both round toward zero to that signed zero.
    const __m512 zero = _mm512_setzero_ps();
    const __mmask16 exact_zero = _mm512_cmp_ps_mask(lo, zero, _CMP_EQ_OQ) & _mm512_cmp_ps_mask(hi, zero, _CMP_EQ_OQ);
    const __mmask16 signed_tiny = same & _mm256_cmpeq_epi16_mask(mag, _mm256_setzero_si256()) &
                                  (_mm512_cmp_ps_mask(lo, zero, _CMP_GT_OQ) | _mm512_cmp_ps_mask(hi, zero, _CMP_LT_OQ));
    // Flush: the certified lanes with a nonzero subnormal h, which the flush turns into zeros of their sign.
    const __mmask16 subnormal = Flush ? same & _mm256_cmpgt_epu16_mask(mag, _mm256_setzero_si256()) &
                                            _mm256_cmple_epu16_mask(mag, _mm256_set1_epi16(0x03FF))
                                      : 0;
    if (static_cast<__mmask16>(ok | exact_zero | signed_tiny | subnormal) != 0xFFFF) return false;
    hh = _mm256_mask_mov_epi16(hh, exact_zero, _mm256_setzero_si256());
    if constexpr (Flush) hh = flush_halves(hh);
  }
  s = _mm512_add_ps(s, _mm512_cvtph_ps(hh));
  return true;
}

/// The full tile of kTile terms in binary32 (ane_f32_n).
template <bool Flush, bool Bits>
ROUNDOFF_AVX512 ROUNDOFF_INLINE bool ane_f32(VF& s, const float* a, const VF* b, std::size_t& misses) {
  return ane_f32_n<kTile, Flush, Bits>(s, a, b, misses);
}

#include "numerics/gemm_tile_loops.inc"

static_assert(kWideCols % kW == 0 && kWideCols % kCols == 0);

namespace {
template <ALayout L>
void wide_rows_in(std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb, std::size_t K,
                  float* t, std::size_t ldt) {
  std::size_t r0 = 0;
  for (; r0 + kWideRows <= rows; r0 += kWideRows)
    tile_wide<kWideRows, kWideCols / kW, L>(a_at<L>(Ap, lda, r0, 0), lda, Bp, ldb, K, t + r0 * ldt, ldt);
  if (r0 < rows)  // the rows past the last whole micro-tile
    for (std::size_t c = 0; c < kWideCols; c += kCols)
      rows_of<Acc::Fp32, L>(rows - r0, a_at<L>(Ap, lda, r0, 0), lda, Bp + c, ldb, K, 0, t + r0 * ldt + c, ldt);
}
}  // namespace

void tile_rows_fp32_wide(std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
                         std::size_t K, float* t, std::size_t ldt, ALayout layout) {
  switch (layout) {
    case ALayout::Rows: wide_rows_in<ALayout::Rows>(rows, Ap, lda, Bp, ldb, K, t, ldt); return;
    case ALayout::Panels: wide_rows_in<ALayout::Panels>(rows, Ap, lda, Bp, ldb, K, t, ldt); return;
  }
}

}  // namespace roundoff::numerics::kernels::avx512
