// round_to's normal-binade fast path on 8 binary64 lanes (AVX-512F) or 4 (AVX2); every other lane through round_to.
#include "numerics/round_span.hpp"

#include "numerics/kernel_options.hpp"

// GCC 12 reports -Wmaybe-uninitialized inside the intrinsic headers (the self-initialised
// _mm*_undefined_* placeholders of unmasked intrinsics); the state at the header's own lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace roundoff::numerics {
namespace {

/// The lanes of one 8-value block; returns the mask of lanes the scalar round_to must recompute.
template <Rounding M>
__attribute__((target("avx512f"))) inline __mmask8 round_block(__m512i bits, const RoundingPlan& plan,
                                                                __m512i& out) {
  const __m512i sign = _mm512_set1_epi64(static_cast<long long>(std::uint64_t{1} << 63));
  // (and with complemented constants: GCC 12 warns on _mm512_andnot_si512's undefined source operand)
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi64(static_cast<long long>(~(std::uint64_t{1} << 63))));
  const __mmask8 in = _mm512_cmpge_epu64_mask(mag, _mm512_set1_epi64(static_cast<long long>(plan.fast_lo_bits))) &
                      _mm512_cmple_epu64_mask(mag, _mm512_set1_epi64(static_cast<long long>(plan.fast_hi_bits)));
  const __mmask8 zero = _mm512_cmpeq_epu64_mask(mag, _mm512_setzero_si512());
  const int sh = plan.drop_bits;
  if (sh == 0) {  // binary64 itself: round_to returns x in the fast range
    out = bits;
    return static_cast<__mmask8>(~(in | zero));
  }
  const __m512i low = _mm512_set1_epi64(static_cast<long long>((std::uint64_t{1} << sh) - 1));
  const __m512i ulp = _mm512_set1_epi64(static_cast<long long>(std::uint64_t{1} << sh));
  const __m512i half = _mm512_set1_epi64(static_cast<long long>(std::uint64_t{1} << (sh - 1)));
  const __m512i rem = _mm512_and_si512(mag, low);
  __m512i r = _mm512_and_si512(mag, _mm512_set1_epi64(static_cast<long long>(~((std::uint64_t{1} << sh) - 1))));
  const __mmask8 neg = _mm512_test_epi64_mask(bits, sign);
  const __mmask8 odd = _mm512_test_epi64_mask(mag, ulp);  // (mag >> sh) & 1
  const __mmask8 inexact = _mm512_test_epi64_mask(rem, rem);
  __mmask8 inc = 0;
  switch (M) {
    case Rounding::NearestEven:
      inc = _mm512_cmpgt_epu64_mask(rem, half) | (_mm512_cmpeq_epu64_mask(rem, half) & odd);
      break;
    case Rounding::NearestAway: inc = _mm512_cmpge_epu64_mask(rem, half); break;
    case Rounding::TowardZero: break;
    case Rounding::Up: inc = static_cast<__mmask8>(inexact & ~neg); break;
    case Rounding::Down: inc = static_cast<__mmask8>(inexact & neg); break;
    case Rounding::Odd: inc = static_cast<__mmask8>(inexact & ~odd); break;
    case Rounding::Stochastic: break;  // not instantiated
  }
  r = _mm512_mask_add_epi64(r, inc, r, ulp);
  const __mmask8 ovf =
      _mm512_cmp_pd_mask(_mm512_castsi512_pd(r), _mm512_set1_pd(plan.max_finite), _CMP_GT_OQ);
  out = _mm512_mask_mov_epi64(_mm512_or_si512(r, _mm512_and_si512(bits, sign)), zero, bits);
  return static_cast<__mmask8>(~((in & ~ovf) | zero));
}

template <Rounding M>
__attribute__((target("avx512f"))) void round_loop(const RoundingPlan& plan, const double* src, double* dst,
                                                   std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    const std::size_t left = n - i;
    const __mmask8 live = left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
    const __m512i bits = _mm512_castpd_si512(_mm512_maskz_loadu_pd(live, src + i));
    __m512i out;
    unsigned slow = static_cast<unsigned>(round_block<M>(bits, plan, out) & live);
    _mm512_mask_storeu_pd(dst + i, live, _mm512_castsi512_pd(out));
    while (slow != 0) {
      const auto l = static_cast<std::size_t>(__builtin_ctz(slow));
      slow &= slow - 1;
      // src[i + l] is read again: the store above may have overwritten it only where dst aliases src, and then
      // only in lanes outside `slow` — the value of a slow lane is still bits' lane l.
      alignas(64) double lanes[8];
      _mm512_store_pd(lanes, _mm512_castsi512_pd(bits));
      dst[i + l] = round_to(plan, M, lanes[l]);
    }
  }
}

/// dst[i] = round_to(plan, NearestEven, src[i]) on 8 lanes with Convert (a rounding by hardware conversions whose
/// result is round_to's for every non-NaN binary64); NaN lanes go through round_to (its NaN rules: quieting,
/// payload, sign).
template <class Convert>
__attribute__((target("avx512f"))) void conversion_loop(const RoundingPlan& plan, const double* src, double* dst,
                                                        std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    const std::size_t left = n - i;
    const __mmask8 live = left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
    const __m512d x = _mm512_maskz_loadu_pd(live, src + i);
    const __m512d r = Convert::apply(x);
    unsigned nan = static_cast<unsigned>(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q) & live);
    _mm512_mask_storeu_pd(dst + i, static_cast<__mmask8>(live & ~nan), r);
    while (nan != 0) {
      const auto l = static_cast<std::size_t>(__builtin_ctz(nan));
      nan &= nan - 1;
      alignas(64) double lanes[8];  // x's lanes: dst may alias src, but only non-NaN lanes were stored
      _mm512_store_pd(lanes, x);
      dst[i + l] = round_to(plan, Rounding::NearestEven, lanes[l]);
    }
  }
}

/// round_to(fp32, NearestEven, x) by the hardware conversions binary64 → binary32 → binary64. Only under the
/// default MXCSR (default_mxcsr()); the argument is at round_doubles_avx512 (numerics/round_span.hpp).
struct ToBinary32 {
  __attribute__((target("avx512f"))) static __m512d apply(__m512d x) { return _mm512_cvtps_pd(_mm512_cvtpd_ps(x)); }
};

/// round_to(fp16, NearestEven, x) by the hardware conversions binary64 → binary32 rounded to odd → binary16
/// (nearest even) → binary32 → binary64. Rounding to odd in binary32 is the conversion toward zero with the
/// last bit set when it was inexact. Argument (docs/numerics.md, "Rounding binary64 arrays to binary16 by the
/// hardware conversions"): binary32 has 24 ≥ 11 + 2 bits and its quantum at every magnitude is at most 2^-26 of
/// binary16's (at most 2^-149 against 2^-24 below binary16's normal range), so rounding to odd there and then
/// to nearest even in binary16 is the single rounding to nearest even (Boldo and Melquiond), subnormals
/// included; a |x| beyond binary32's range becomes ±FLT_MAX (odd, inexact) and then ±inf, as binary16's
/// overflow rule gives. Only under the default MXCSR (default_mxcsr()).
struct ToBinary16 {
  __attribute__((target("avx512f"))) static __m512d apply(__m512d x) {
    const __m256 z = _mm512_cvt_roundpd_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(z), x, _CMP_NEQ_OQ);
    const __m512i zb = _mm512_zextsi256_si512(_mm256_castps_si256(z));  // upper 8 lanes +0
    const __m512i odd = _mm512_mask_or_epi32(zb, inexact, zb, _mm512_set1_epi32(1));
    const __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(odd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_cvtph_ps(h)));
  }
};

/// Lane roundings for op_loop: r = round_to(plan, NearestEven, x) in every lane outside the returned mask (the
/// lanes round_to must recompute). Conv: the hardware conversions (NaN lanes returned); Int: round_block.
template <class Convert>
struct ConvLanes {
  __attribute__((target("avx512f"))) static __mmask8 apply(const RoundingPlan&, __m512d x, __m512d& r) {
    r = Convert::apply(x);
    return _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
  }
};
struct IntLanes {
  __attribute__((target("avx512f"))) static __mmask8 apply(const RoundingPlan& plan, __m512d x, __m512d& r) {
    __m512i o;
    const __mmask8 m = round_block<Rounding::NearestEven>(_mm512_castpd_si512(x), plan, o);
    r = _mm512_castsi512_pd(o);
    return m;
  }
};

template <SpanOp op>
__attribute__((target("avx512f"), always_inline)) inline __m512d apply_op(__m512d a, __m512d b) {
  switch (op) {
    case SpanOp::Add: return _mm512_add_pd(a, b);
    case SpanOp::Sub: return _mm512_sub_pd(a, b);
    case SpanOp::Mul: return _mm512_mul_pd(a, b);
    case SpanOp::Div: return _mm512_div_pd(a, b);
  }
  return a;
}

template <class Lanes, SpanOp op>
__attribute__((target("avx512f"))) void op_loop(const RoundingPlan& plan, const double* a, const double* b, bool bcast,
                                                double* out, std::size_t n, std::vector<std::size_t>& slow) {
  const __m512d inf = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  const __m512i abs_mask = _mm512_set1_epi64(static_cast<long long>(~(std::uint64_t{1} << 63)));
  __m512d yb = _mm512_set1_pd(bcast ? b[0] : 0.0), yr = yb;
  const __mmask8 y_bad =
      bcast ? static_cast<__mmask8>(Lanes::apply(plan, yb, yr) |
                                    static_cast<__mmask8>(~_mm512_cmpeq_epi64_mask(_mm512_castpd_si512(yr),
                                                                                  _mm512_castpd_si512(yb))))
            : static_cast<__mmask8>(0);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::size_t left = n - i;
    const __mmask8 live = left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
    const __m512d x = _mm512_maskz_loadu_pd(live, a + i);
    __m512d xr;
    __mmask8 bad = Lanes::apply(plan, x, xr);
    bad |= static_cast<__mmask8>(~_mm512_cmpeq_epi64_mask(_mm512_castpd_si512(xr), _mm512_castpd_si512(x)));
    __m512d y = yb;
    if (bcast) {
      bad |= y_bad;
    } else {
      y = _mm512_maskz_loadu_pd(live, b + i);
      __m512d r;
      bad |= Lanes::apply(plan, y, r);
      bad |= static_cast<__mmask8>(~_mm512_cmpeq_epi64_mask(_mm512_castpd_si512(r), _mm512_castpd_si512(y)));
    }
    __m512d z;
    bad |= Lanes::apply(plan, apply_op<op>(x, y), z);
    bad |= static_cast<__mmask8>(~_mm512_cmp_pd_mask(_mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(z), abs_mask)),
                                                     inf, _CMP_LT_OQ));
    _mm512_mask_storeu_pd(out + i, live, z);
    unsigned s = static_cast<unsigned>(bad & live);
    while (s != 0) {
      slow.push_back(i + static_cast<std::size_t>(__builtin_ctz(s)));
      s &= s - 1;
    }
  }
}

bool cpu_has_avx512f() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return ok;
}

}  // namespace

bool default_mxcsr() { return (_mm_getcsr() & 0xFFC0u) == 0x1F80u; }

bool round_doubles_avx512_supported() { return cpu_has_avx512f(); }

namespace {

/// round_block on 4 lanes with AVX2: the same integer arithmetic on the binary64 encoding. AVX2 has only signed
/// 64-bit comparisons; every operand compared is below 2^63 (magnitudes, remainders below 2^52, the plan's bounds),
/// where signed and unsigned order agree. Returns the lanes (all ones) the scalar round_to must recompute.
template <Rounding M>
__attribute__((target("avx2"))) inline __m256i round_block4(__m256i bits, const RoundingPlan& plan, __m256i& out) {
  const __m256i sign = _mm256_set1_epi64x(static_cast<long long>(std::uint64_t{1} << 63));
  const __m256i zeros = _mm256_setzero_si256();
  const __m256i mag = _mm256_andnot_si256(sign, bits);
  const __m256i outside =
      _mm256_or_si256(_mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<long long>(plan.fast_lo_bits)), mag),
                      _mm256_cmpgt_epi64(mag, _mm256_set1_epi64x(static_cast<long long>(plan.fast_hi_bits))));
  const __m256i zero = _mm256_cmpeq_epi64(mag, zeros);
  const int sh = plan.drop_bits;
  if (sh == 0) {  // binary64 itself: round_to returns x in the fast range
    out = bits;
    return _mm256_andnot_si256(zero, outside);
  }
  const __m256i low = _mm256_set1_epi64x(static_cast<long long>((std::uint64_t{1} << sh) - 1));
  const __m256i ulp = _mm256_set1_epi64x(static_cast<long long>(std::uint64_t{1} << sh));
  const __m256i half = _mm256_set1_epi64x(static_cast<long long>(std::uint64_t{1} << (sh - 1)));
  const __m256i rem = _mm256_and_si256(mag, low);
  __m256i r = _mm256_andnot_si256(low, mag);
  const __m256i neg = _mm256_cmpgt_epi64(zeros, bits);  // sign bit set
  const __m256i odd = _mm256_cmpeq_epi64(_mm256_and_si256(mag, ulp), ulp);
  const __m256i exact = _mm256_cmpeq_epi64(rem, zeros);
  __m256i inc = zeros;
  switch (M) {
    case Rounding::NearestEven:
      inc = _mm256_or_si256(_mm256_cmpgt_epi64(rem, half), _mm256_and_si256(_mm256_cmpeq_epi64(rem, half), odd));
      break;
    case Rounding::NearestAway: inc = _mm256_andnot_si256(_mm256_cmpgt_epi64(half, rem), _mm256_set1_epi64x(-1)); break;
    case Rounding::TowardZero: break;
    case Rounding::Up: inc = _mm256_andnot_si256(_mm256_or_si256(exact, neg), _mm256_set1_epi64x(-1)); break;
    case Rounding::Down: inc = _mm256_andnot_si256(exact, neg); break;
    case Rounding::Odd: inc = _mm256_andnot_si256(_mm256_or_si256(exact, odd), _mm256_set1_epi64x(-1)); break;
    case Rounding::Stochastic: break;  // not instantiated
  }
  r = _mm256_add_epi64(r, _mm256_and_si256(inc, ulp));
  const __m256i ovf = _mm256_castpd_si256(
      _mm256_cmp_pd(_mm256_castsi256_pd(r), _mm256_set1_pd(plan.max_finite), _CMP_GT_OQ));
  out = _mm256_blendv_epi8(_mm256_or_si256(r, _mm256_and_si256(bits, sign)), bits, zero);
  return _mm256_andnot_si256(zero, _mm256_or_si256(outside, ovf));
}

/// The lanes of the 4-value blocks; a tail of fewer than 4 values, and every lane the block hands back, through
/// round_to.
template <Rounding M>
__attribute__((target("avx2"))) void round_loop4(const RoundingPlan& plan, const double* src, double* dst,
                                                 std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i bits = _mm256_castpd_si256(_mm256_loadu_pd(src + i));
    __m256i out;
    unsigned slow = static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(round_block4<M>(bits, plan, out))));
    _mm256_storeu_pd(dst + i, _mm256_castsi256_pd(out));
    while (slow != 0) {
      const auto l = static_cast<std::size_t>(__builtin_ctz(slow));
      slow &= slow - 1;
      alignas(32) double lanes[4];  // bits' lanes: dst may alias src, and the store above wrote every lane
      _mm256_store_pd(lanes, _mm256_castsi256_pd(bits));
      dst[i + l] = round_to(plan, M, lanes[l]);
    }
  }
  for (; i < n; ++i) dst[i] = round_to(plan, M, src[i]);
}

/// conversion_loop on 4 lanes: dst[i] = round_to(plan, NearestEven, src[i]) by Convert (AVX2 conversions whose
/// result is round_to's for every non-NaN binary64); NaN lanes and a tail of fewer than 4 values through round_to.
template <class Convert>
__attribute__((target("avx2,f16c"))) void conversion_loop4(const RoundingPlan& plan, const double* src, double* dst,
                                                           std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d x = _mm256_loadu_pd(src + i);
    const __m256d r = Convert::apply(x);
    unsigned slow = static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(x, x, _CMP_UNORD_Q)));
    _mm256_storeu_pd(dst + i, r);
    while (slow != 0) {
      const auto l = static_cast<std::size_t>(__builtin_ctz(slow));
      slow &= slow - 1;
      alignas(32) double lanes[4];  // x's lanes: dst may alias src
      _mm256_store_pd(lanes, x);
      dst[i + l] = round_to(plan, Rounding::NearestEven, lanes[l]);
    }
  }
  for (; i < n; ++i) dst[i] = round_to(plan, Rounding::NearestEven, src[i]);
}

/// ToBinary32 on 4 lanes (vcvtpd2ps rounds by the MXCSR: nearest even in its default state).
struct ToBinary32x4 {
  __attribute__((target("avx2,f16c"))) static __m256d apply(__m256d x) { return _mm256_cvtps_pd(_mm256_cvtpd_ps(x)); }
};

/// ToBinary16 on 4 lanes with AVX2 and F16C. AVX2 has no conversion with an explicit rounding, so the conversion
/// toward zero is built from the one to nearest: z = RN32(x) is RZ32(x) or its neighbour away from zero; it is the
/// neighbour exactly when |z| > |x| (compared exactly in binary64), and then the encoding less one is RZ32(x) — a
/// decrement of a binary32 encoding steps its magnitude one quantum toward zero, from ±inf to ±max_float and
/// from ±2^-149 to ±0, the sign kept. Then, as in ToBinary16: the last bit set when inexact (rounding to odd),
/// vcvtps2ph to nearest even (explicit in its immediate), and the exact conversions back.
struct ToBinary16x4 {
  __attribute__((target("avx2,f16c"))) static __m256d apply(__m256d x) {
    const __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(~(std::uint64_t{1} << 63))));
    const __m128 n = _mm256_cvtpd_ps(x);
    const __m256d away = _mm256_cmp_pd(_mm256_and_pd(_mm256_cvtps_pd(n), abs), _mm256_and_pd(x, abs), _CMP_GT_OQ);
    // the 64-bit lane masks narrowed to 32-bit lanes (the low halves of the 4 lanes)
    const __m128i idx = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m128i z = _mm_add_epi32(_mm_castps_si128(n), idx);  // all ones = −1
    const __m256d inexact = _mm256_cmp_pd(_mm256_cvtps_pd(_mm_castsi128_ps(z)), x, _CMP_NEQ_OQ);
    const __m128i inexact32 = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m128i odd = _mm_or_si128(z, _mm_and_si128(inexact32, _mm_set1_epi32(1)));
    const __m128i h = _mm_cvtps_ph(_mm_castsi128_ps(odd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvtps_pd(_mm_cvtph_ps(h));
  }
};

/// Lane roundings for op_loop4, as ConvLanes and IntLanes for op_loop: the returned lanes (all ones) are those
/// round_to must recompute.
template <class Convert>
struct ConvLanes4 {
  __attribute__((target("avx2,f16c"))) static __m256i apply(const RoundingPlan&, __m256d x, __m256d& r) {
    r = Convert::apply(x);
    return _mm256_castpd_si256(_mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  }
};
struct IntLanes4 {
  __attribute__((target("avx2"))) static __m256i apply(const RoundingPlan& plan, __m256d x, __m256d& r) {
    __m256i o;
    const __m256i m = round_block4<Rounding::NearestEven>(_mm256_castpd_si256(x), plan, o);
    r = _mm256_castsi256_pd(o);
    return m;
  }
};

template <SpanOp op>
__attribute__((target("avx2"), always_inline)) inline __m256d apply_op4(__m256d a, __m256d b) {
  switch (op) {
    case SpanOp::Add: return _mm256_add_pd(a, b);
    case SpanOp::Sub: return _mm256_sub_pd(a, b);
    case SpanOp::Mul: return _mm256_mul_pd(a, b);
    case SpanOp::Div: return _mm256_div_pd(a, b);
  }
  return a;
}

/// All ones in the lanes whose 64-bit encodings differ.
__attribute__((target("avx2"), always_inline)) inline __m256i differ4(__m256d x, __m256d y) {
  return _mm256_andnot_si256(_mm256_cmpeq_epi64(_mm256_castpd_si256(x), _mm256_castpd_si256(y)),
                             _mm256_set1_epi64x(-1));
}

/// op_loop on 4 lanes; a tail of fewer than 4 elements goes to `slow`.
template <class Lanes, SpanOp op>
__attribute__((target("avx2,f16c"))) void op_loop4(const RoundingPlan& plan, const double* a, const double* b,
                                                   bool bcast, double* out, std::size_t n,
                                                   std::vector<std::size_t>& slow) {
  const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(~(std::uint64_t{1} << 63))));
  const __m256d yb = _mm256_set1_pd(bcast ? b[0] : 0.0);
  __m256i y_bad = _mm256_setzero_si256();
  if (bcast) {
    __m256d yr;
    y_bad = Lanes::apply(plan, yb, yr);
    y_bad = _mm256_or_si256(y_bad, differ4(yr, yb));
  }
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d x = _mm256_loadu_pd(a + i);
    __m256d xr;
    __m256i bad = Lanes::apply(plan, x, xr);
    bad = _mm256_or_si256(bad, differ4(xr, x));
    __m256d y = yb;
    if (bcast) {
      bad = _mm256_or_si256(bad, y_bad);
    } else {
      y = _mm256_loadu_pd(b + i);
      __m256d r;
      bad = _mm256_or_si256(bad, Lanes::apply(plan, y, r));
      bad = _mm256_or_si256(bad, differ4(r, y));
    }
    __m256d z;
    bad = _mm256_or_si256(bad, Lanes::apply(plan, apply_op4<op>(x, y), z));
    const __m256d finite = _mm256_cmp_pd(_mm256_and_pd(z, abs_mask), inf, _CMP_LT_OQ);
    bad = _mm256_or_si256(bad, _mm256_andnot_si256(_mm256_castpd_si256(finite), _mm256_set1_epi64x(-1)));
    _mm256_storeu_pd(out + i, z);
    auto s = static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(bad)));
    while (s != 0) {
      slow.push_back(i + static_cast<std::size_t>(__builtin_ctz(s)));
      s &= s - 1;
    }
  }
  for (; i < n; ++i) slow.push_back(i);
}

bool cpu_has_avx2_f16c() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("f16c") != 0;
  }();
  return ok;
}

}  // namespace

bool round_doubles_avx2_supported() { return cpu_has_avx2_f16c(); }

namespace {
/// The AVX-512F scan of all_finite: an exponent field of all ones marks ±inf and NaN, and it is the largest
/// exponent field, so the lanewise maximum of the fields equals it exactly when some value is non-finite. Two
/// accumulators, full vectors, an early exit per block of 256 values; the tail (fewer than 8) masked.
__attribute__((target("avx512f"))) bool all_finite_avx512(const double* x, std::size_t n) {
  const __m512i exp = _mm512_set1_epi64(0x7FF0000000000000ll);
  constexpr std::size_t kBlock = 256;
  std::size_t i = 0;
  while (n - i >= 8) {
    const std::size_t end = i + std::min(kBlock, (n - i) / 8 * 8);
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    for (; i + 16 <= end; i += 16) {
      m0 = _mm512_max_epu64(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), exp));
      m1 = _mm512_max_epu64(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 8), exp));
    }
    for (; i < end; i += 8) m0 = _mm512_max_epu64(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), exp));
    if (_mm512_cmpeq_epi64_mask(_mm512_max_epu64(m0, m1), exp) != 0) return false;
  }
  if (i == n) return true;
  const auto live = static_cast<__mmask8>((1u << (n - i)) - 1u);
  return _mm512_mask_cmpeq_epi64_mask(live, _mm512_and_si512(_mm512_maskz_loadu_epi64(live, x + i), exp), exp) == 0;
}

/// The AVX2 scan of all_finite, 4 lanes; a tail of fewer than 4 values by the portable test.
__attribute__((target("avx2"))) bool all_finite_avx2(const double* x, std::size_t n) {
  const __m256i exp = _mm256_set1_epi64x(0x7FF0000000000000ll);
  constexpr std::size_t kBlock = 256;
  std::size_t i = 0;
  for (std::size_t at = 0; at + 4 <= n; at += kBlock) {
    const std::size_t end = std::min(n, at + kBlock);
    __m256i bad = _mm256_setzero_si256();
    for (i = at; i + 4 <= end; i += 4) {
      const __m256i v = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), exp);
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi64(v, exp));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  for (; i < n; ++i)
    if ((std::bit_cast<std::uint64_t>(x[i]) & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) return false;
  return true;
}
/// all_finite of binary32 values, 16 lanes (exponent field 0xFF: ±inf or NaN), as the binary64 scan: the lanewise
/// maximum of the exponent fields, early exit per block of 512 values, the tail (fewer than 16) masked.
__attribute__((target("avx512f"))) bool all_finite_avx512(const float* x, std::size_t n) {
  const __m512i exp = _mm512_set1_epi32(0x7F800000);
  constexpr std::size_t kBlock = 512;
  std::size_t i = 0;
  while (n - i >= 16) {
    const std::size_t end = i + std::min(kBlock, (n - i) / 16 * 16);
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    for (; i + 32 <= end; i += 32) {
      m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), exp));
      m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), exp));
    }
    for (; i < end; i += 16) m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), exp));
    if (_mm512_cmpeq_epi32_mask(_mm512_max_epu32(m0, m1), exp) != 0) return false;
  }
  if (i == n) return true;
  const auto live = static_cast<__mmask16>((1u << (n - i)) - 1u);
  return _mm512_mask_cmpeq_epi32_mask(live, _mm512_and_si512(_mm512_maskz_loadu_epi32(live, x + i), exp), exp) == 0;
}

/// The same, 8 lanes; a tail of fewer than 8 values by the portable test.
__attribute__((target("avx2"))) bool all_finite_avx2(const float* x, std::size_t n) {
  const __m256i exp = _mm256_set1_epi32(0x7F800000);
  constexpr std::size_t kBlock = 512;
  std::size_t i = 0;
  for (std::size_t at = 0; at + 8 <= n; at += kBlock) {
    const std::size_t end = std::min(n, at + kBlock);
    __m256i bad = _mm256_setzero_si256();
    for (i = at; i + 8 <= end; i += 8) {
      const __m256i v = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), exp);
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(v, exp));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  for (; i < n; ++i)
    if ((std::bit_cast<std::uint32_t>(x[i]) & 0x7F800000u) == 0x7F800000u) return false;
  return true;
}
}  // namespace

namespace {
/// binary16_values' scans: a lane fails when the round trip binary32 → binary16 (nearest even) → binary32 changes it
/// (NEQ, ordered: a NaN lane passes) or, without nan_ok, when it is NaN; the failures of a block of 512 values
/// are or-ed, then tested (early exit), the tail masked (AVX-512) or by the per-element test (AVX2).
__attribute__((target("avx512f"))) inline __mmask16 binary16_fails(__mmask16 live, __m512 v, bool nan_ok) {
  const __m512 back = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return nan_ok ? _mm512_mask_cmp_ps_mask(live, back, v, _CMP_NEQ_OQ)
                : _mm512_mask_cmp_ps_mask(live, back, v, _CMP_NEQ_UQ);
}

__attribute__((target("avx512f"))) bool binary16_values_avx512(const float* x, std::size_t n, bool nan_ok) {
  constexpr std::size_t kBlock = 512;
  std::size_t i = 0;
  while (n - i >= 16) {
    const std::size_t end = i + std::min(kBlock, (n - i) / 16 * 16);
    __mmask16 bad = 0;
    for (; i < end; i += 16) bad |= binary16_fails(0xFFFF, _mm512_loadu_ps(x + i), nan_ok);
    if (bad != 0) return false;
  }
  if (i == n) return true;
  const auto live = static_cast<__mmask16>((1u << (n - i)) - 1u);
  return binary16_fails(live, _mm512_maskz_loadu_ps(live, x + i), nan_ok) == 0;
}

/// One element of binary16_values by round_to (the portable path and the AVX2 tail).
bool binary16_value(const RoundingPlan& half, float v, bool nan_ok) {
  if (std::isnan(v)) return nan_ok;
  return std::bit_cast<std::uint64_t>(round_to(half, Rounding::NearestEven, v)) ==
         std::bit_cast<std::uint64_t>(static_cast<double>(v));
}

__attribute__((target("avx2,f16c"))) bool binary16_values_avx2(const float* x, std::size_t n, bool nan_ok,
                                                               const RoundingPlan& half) {
  constexpr std::size_t kBlock = 512;
  std::size_t i = 0;
  for (std::size_t at = 0; at + 8 <= n; at += kBlock) {
    const std::size_t end = std::min(n, at + kBlock);
    __m256 bad = _mm256_setzero_ps();
    for (i = at; i + 8 <= end; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 back = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      bad = _mm256_or_ps(bad, nan_ok ? _mm256_cmp_ps(back, v, _CMP_NEQ_OQ) : _mm256_cmp_ps(back, v, _CMP_NEQ_UQ));
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
  }
  for (; i < n; ++i)
    if (!binary16_value(half, x[i], nan_ok)) return false;
  return true;
}
}  // namespace

bool binary16_values(std::span<const float> x, bool nan_ok, const KernelOptions& opts) {
  if (default_mxcsr()) {
    if (cpu_has_avx512f() && opts.isa_limit >= kernels::Isa::Avx512)
      return binary16_values_avx512(x.data(), x.size(), nan_ok);
    if (cpu_has_avx2_f16c() && opts.isa_limit >= kernels::Isa::Avx2)
      return binary16_values_avx2(x.data(), x.size(), nan_ok, RoundingPlan(formats::fp16));
  }
  const RoundingPlan half(formats::fp16);
  for (const float v : x)
    if (!binary16_value(half, v, nan_ok)) return false;
  return true;
}

bool all_finite(std::span<const float> x, const KernelOptions& opts) {
  if (cpu_has_avx512f() && opts.isa_limit >= kernels::Isa::Avx512) return all_finite_avx512(x.data(), x.size());
  if (cpu_has_avx2_f16c() && opts.isa_limit >= kernels::Isa::Avx2) return all_finite_avx2(x.data(), x.size());
  std::uint32_t bad = 0;
  for (const float v : x)
    bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & 0x7F800000u) == 0x7F800000u);
  return bad == 0;
}

bool all_finite(std::span<const double> x, const KernelOptions& opts) {
  if (cpu_has_avx512f() && opts.isa_limit >= kernels::Isa::Avx512) return all_finite_avx512(x.data(), x.size());
  if (cpu_has_avx2_f16c() && opts.isa_limit >= kernels::Isa::Avx2) return all_finite_avx2(x.data(), x.size());
  constexpr std::uint64_t kExponent = 0x7FF0000000000000ull;
  std::uint64_t bad = 0;
  for (const double v : x) bad |= static_cast<std::uint64_t>((std::bit_cast<std::uint64_t>(v) & kExponent) == kExponent);
  return bad == 0;
}

namespace {

/// The two SIMD tiers for the dispatch below: each names its lane loops and its lane roundings.
struct Avx512Tier {
  template <Rounding M>
  static void round(const RoundingPlan& p, const double* s, double* d, std::size_t n) {
    round_loop<M>(p, s, d, n);
  }
  template <class Convert>
  static void convert(const RoundingPlan& p, const double* s, double* d, std::size_t n) {
    conversion_loop<Convert>(p, s, d, n);
  }
  template <class Lanes, SpanOp op>
  static void arith(const RoundingPlan& p, const double* a, const double* b, bool bcast, double* out, std::size_t n,
                    std::vector<std::size_t>& slow) {
    op_loop<Lanes, op>(p, a, b, bcast, out, n, slow);
  }
  using To32 = ToBinary32;
  using To16 = ToBinary16;
  using Lanes32 = ConvLanes<ToBinary32>;
  using Lanes16 = ConvLanes<ToBinary16>;
  using LanesInt = IntLanes;
};
struct Avx2Tier {
  template <Rounding M>
  static void round(const RoundingPlan& p, const double* s, double* d, std::size_t n) {
    round_loop4<M>(p, s, d, n);
  }
  template <class Convert>
  static void convert(const RoundingPlan& p, const double* s, double* d, std::size_t n) {
    conversion_loop4<Convert>(p, s, d, n);
  }
  template <class Lanes, SpanOp op>
  static void arith(const RoundingPlan& p, const double* a, const double* b, bool bcast, double* out, std::size_t n,
                    std::vector<std::size_t>& slow) {
    op_loop4<Lanes, op>(p, a, b, bcast, out, n, slow);
  }
  using To32 = ToBinary32x4;
  using To16 = ToBinary16x4;
  using Lanes32 = ConvLanes4<ToBinary32x4>;
  using Lanes16 = ConvLanes4<ToBinary16x4>;
  using LanesInt = IntLanes4;
};

template <class Tier, class Lanes>
void arith_on(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
              std::size_t n, std::vector<std::size_t>& slow) {
  switch (op) {
    case SpanOp::Add: return Tier::template arith<Lanes, SpanOp::Add>(plan, a, b, bcast, out, n, slow);
    case SpanOp::Sub: return Tier::template arith<Lanes, SpanOp::Sub>(plan, a, b, bcast, out, n, slow);
    case SpanOp::Mul: return Tier::template arith<Lanes, SpanOp::Mul>(plan, a, b, bcast, out, n, slow);
    case SpanOp::Div: return Tier::template arith<Lanes, SpanOp::Div>(plan, a, b, bcast, out, n, slow);
  }
}

/// op_round_avx512 / op_round_avx2 once the tier is chosen: the hardware conversions for the IEEE binary32 and
/// binary16 formats under the default MXCSR, the integer lane path otherwise.
template <class Tier>
void op_round_on(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
                 std::size_t n, std::vector<std::size_t>& slow) {
  if (plan.format == formats::fp32 && default_mxcsr())
    arith_on<Tier, typename Tier::Lanes32>(plan, op, a, b, bcast, out, n, slow);
  else if (plan.format == formats::fp16 && default_mxcsr())
    arith_on<Tier, typename Tier::Lanes16>(plan, op, a, b, bcast, out, n, slow);
  else
    arith_on<Tier, typename Tier::LanesInt>(plan, op, a, b, bcast, out, n, slow);
}

/// round_doubles_avx512 / round_doubles_avx2 once the tier is chosen; false for Stochastic.
template <class Tier>
bool round_doubles_on(const RoundingPlan& plan, Rounding mode, const double* s, double* d, std::size_t n) {
  switch (mode) {
    case Rounding::NearestEven:
      if (plan.format == formats::fp32 && default_mxcsr())
        Tier::template convert<typename Tier::To32>(plan, s, d, n);
      else if (plan.format == formats::fp16 && default_mxcsr())
        Tier::template convert<typename Tier::To16>(plan, s, d, n);
      else
        Tier::template round<Rounding::NearestEven>(plan, s, d, n);
      return true;
    case Rounding::NearestAway: Tier::template round<Rounding::NearestAway>(plan, s, d, n); return true;
    case Rounding::TowardZero: Tier::template round<Rounding::TowardZero>(plan, s, d, n); return true;
    case Rounding::Up: Tier::template round<Rounding::Up>(plan, s, d, n); return true;
    case Rounding::Down: Tier::template round<Rounding::Down>(plan, s, d, n); return true;
    case Rounding::Odd: Tier::template round<Rounding::Odd>(plan, s, d, n); return true;
    case Rounding::Stochastic: return false;
  }
  return false;
}

}  // namespace

bool op_round_avx512(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
                     std::size_t n, std::vector<std::size_t>& slow, const KernelOptions& opts) {
  if (!cpu_has_avx512f() || opts.isa_limit < kernels::Isa::Avx512) return false;
  op_round_on<Avx512Tier>(plan, op, a, b, bcast, out, n, slow);
  return true;
}

bool op_round_avx2(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
                   std::size_t n, std::vector<std::size_t>& slow, const KernelOptions& opts) {
  if (!cpu_has_avx2_f16c() || opts.isa_limit < kernels::Isa::Avx2) return false;
  op_round_on<Avx2Tier>(plan, op, a, b, bcast, out, n, slow);
  return true;
}

bool round_doubles_avx512(const RoundingPlan& plan, Rounding mode, std::span<const double> src,
                          std::span<double> dst) {
  if (src.size() != dst.size() || !cpu_has_avx512f()) return false;
  return round_doubles_on<Avx512Tier>(plan, mode, src.data(), dst.data(), src.size());
}

bool round_doubles_avx2(const RoundingPlan& plan, Rounding mode, std::span<const double> src, std::span<double> dst) {
  if (src.size() != dst.size() || !cpu_has_avx2_f16c()) return false;
  return round_doubles_on<Avx2Tier>(plan, mode, src.data(), dst.data(), src.size());
}

}  // namespace roundoff::numerics
