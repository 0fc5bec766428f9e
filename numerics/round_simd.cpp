#include "numerics/round_simd.hpp"

// GCC 12 reports -Wmaybe-uninitialized inside the intrinsic headers (the self-initialised
// _mm*_undefined_* placeholders of unmasked intrinsics); the state at the header's own lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>

namespace roundoff::numerics::simd {

namespace {

constexpr std::uint32_t kSign = 0x80000000u;
constexpr std::uint32_t kAbs = 0x7FFFFFFFu;
constexpr std::uint32_t kInfBits = 0x7F800000u;
constexpr std::uint32_t kQuietNaN = 0x7FC00000u;  ///< static_cast<float>(quiet_NaN<double>())
constexpr std::uint64_t kPhi = 0x9E3779B97F4A7C15ull;

/// A handled format seen from the binary32 encoding.
///  - Normal range (|x| >= 2^emin): the format keeps the top p bits of the 24-bit significand, so its
///    quantum is 2^s0 units of the encoding, s0 = 24 - p, in every binade.
///  - Subnormal range (|x| < 2^emin): the quantum is 2^qexp_min, qexp_min = emin - p + 1 <= 0, so
///    |x|·2^-qexp_min < 2^(p-1) is rounded to an integer q and the result is q·2^qexp_min.
struct FloatTarget {
  std::uint32_t s0;               ///< 24 - p
  std::uint32_t emin_biased;      ///< emin + 127 >= 1: biased exponents below it are in the subnormal range
  std::uint32_t max_bits;         ///< encoding of max_finite
  float up_hi, up_lo;             ///< up_hi·up_lo = 2^-qexp_min, each factor a normal float
  float down_hi, down_lo;         ///< down_hi·down_lo = 2^qexp_min
  std::int32_t qexp_min;          ///< emin - p + 1
};

/// 2^k as a normal float, |k| <= 126 (no libm call: float_target runs once per array call).
float pow2f(int k) { return std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23); }

std::optional<FloatTarget> float_target(const RoundingPlan& plan) {
  const Format& f = plan.format;
  if (f.specials != Specials::Ieee || !f.subnormals || f.saturate) return std::nullopt;
  if (f.precision < 2 || f.precision > 23 || f.emin < -126 || f.emax > 127) return std::nullopt;
  const int qexp_min = f.emin - f.precision + 1;
  if (qexp_min > 0) return std::nullopt;
  const int k = -qexp_min;  // in [0, 148]
  const int k_lo = k / 2, k_hi = k - k_lo;
  FloatTarget t{};
  t.s0 = static_cast<std::uint32_t>(24 - f.precision);
  t.emin_biased = static_cast<std::uint32_t>(f.emin + 127);
  t.max_bits = std::bit_cast<std::uint32_t>(static_cast<float>(plan.max_finite));
  t.up_hi = pow2f(k_hi);
  t.up_lo = pow2f(k_lo);
  t.down_hi = pow2f(-k_hi);
  t.down_lo = pow2f(-k_lo);
  t.qexp_min = qexp_min;
  return t;
}

/// Magnitude encodings that replace a rounded magnitude above max_finite (round.cpp's overflow_value for
/// an IEEE, non-saturating format).
struct Overflow {
  std::uint32_t pos, neg;
};
Overflow overflow_for(const FloatTarget& t, Rounding mode) {
  switch (mode) {
    case Rounding::NearestEven:
    case Rounding::NearestAway:
    case Rounding::Stochastic: return {kInfBits, kInfBits};
    case Rounding::TowardZero:
    case Rounding::Odd: return {t.max_bits, t.max_bits};
    case Rounding::Up: return {kInfBits, t.max_bits};
    case Rounding::Down: return {t.max_bits, kInfBits};
  }
  return {kInfBits, kInfBits};
}

/// Whether a deterministic mode increments the truncated magnitude q: the discarded fraction is above,
/// at or (nonzero) below one half; odd = q's last bit; neg = sign of x.
template <Rounding M>
constexpr bool increments(bool above, bool tie, bool nonzero, bool odd, bool neg) {
  // Bitwise & and | (not && and ||) keep the loop free of branches.
  switch (M) {
    case Rounding::NearestEven: return above | (tie & odd);
    case Rounding::NearestAway: return above | tie;
    case Rounding::TowardZero: return false;
    case Rounding::Up: return nonzero & !neg;
    case Rounding::Down: return nonzero & neg;
    case Rounding::Odd: return nonzero & !odd;
    case Rounding::Stochastic: return false;  // needs a draw: see round_bits_stochastic
  }
  return false;
}

/// The final steps shared by every mode: overflow, infinities, NaN, sign.
inline std::uint32_t finish(const FloatTarget& t, Overflow o, std::uint32_t a, std::uint32_t sign,
                            std::uint32_t res_normal, std::uint32_t res_sub) {
  const std::uint32_t ovf = sign ? o.neg : o.pos;
  std::uint32_t res = (a >> 23) >= t.emin_biased ? res_normal : res_sub;
  res = res > t.max_bits ? ovf : res;
  res = a == kInfBits ? kInfBits : res;
  return a > kInfBits ? kQuietNaN : (res | sign);
}

/// |x|·2^-qexp_min clamped below 2^23 (exact when |x| < 2^emin; the clamp keeps the integer conversion
/// defined for the other lanes, whose value is not used).
inline float scaled_magnitude(const FloatTarget& t, std::uint32_t a) {
  const float s = (std::bit_cast<float>(a) * t.up_hi) * t.up_lo;
  return s < 0x1p23f ? s : 0x1p23f;
}
inline std::uint32_t unscale(const FloatTarget& t, std::int32_t q) {
  return std::bit_cast<std::uint32_t>((static_cast<float>(q) * t.down_hi) * t.down_lo);
}

/// One element, deterministic mode M (the scalar tail of portable_loop; round_bits4 is the 4-lane form).
template <Rounding M>
inline std::uint32_t round_bits(const FloatTarget& t, Overflow o, std::uint32_t u) {
  const std::uint32_t sign = u & kSign, a = u & kAbs;
  const bool neg = sign != 0;
  // Normal range: keep the encoding above bit s0, increment it there (a carry walks into the exponent).
  const std::uint32_t pw = 1u << t.s0, r = a & (pw - 1), half = pw >> 1;
  const bool inc_n = increments<M>(r > half, r == half, r != 0, (a & pw) != 0, neg);
  const std::uint32_t res_n = (a - r) + (inc_n ? pw : 0u);
  // Subnormal range: an integer q plus an exact fraction fr in [0, 1).
  const float sc = scaled_magnitude(t, a);
  const std::int32_t q = static_cast<std::int32_t>(sc);
  const float fr = sc - static_cast<float>(q);
  const bool inc_s = increments<M>(fr > 0.5f, fr == 0.5f, fr != 0.0f, (q & 1) != 0, neg);
  const std::uint32_t res_s = unscale(t, q + static_cast<std::int32_t>(inc_s));
  return finish(t, o, a, sign, res_n, res_s);
}

/// One element, stochastic: up (in magnitude) iff draw < frac64, or draw == frac64 when the fraction has
/// bits below its top 64 (round.cpp round_parts).
inline std::uint32_t round_bits_stochastic(const FloatTarget& t, Overflow o, std::uint32_t u, std::uint64_t draw) {
  const std::uint32_t sign = u & kSign, a = u & kAbs;
  const std::uint32_t pw = 1u << t.s0, r = a & (pw - 1);
  const std::uint64_t frac_n = std::uint64_t{r} << (64 - t.s0);
  const std::uint32_t res_n = (a - r) + (draw < frac_n ? pw : 0u);
  const float sc = scaled_magnitude(t, a);
  const std::int32_t q = static_cast<std::int32_t>(sc);
  const float f64 = (sc - static_cast<float>(q)) * 0x1p64f;  // exact, below 2^64
  const auto frac_s = static_cast<std::uint64_t>(f64);
  const bool rest = static_cast<float>(frac_s) != f64;
  const bool inc_s = draw < frac_s || (rest && draw == frac_s);
  const std::uint32_t res_s = unscale(t, q + static_cast<std::int32_t>(inc_s));
  return finish(t, o, a, sign, res_n, res_s);
}

// The same computation four lanes at a time with GCC/Clang vector extensions (SSE2 on x86-64, NEON or
// plain scalar code elsewhere): GCC does not if-convert the float compares and conversions of round_bits
// under -ftrapping-math, so the plain loop would stay scalar.
typedef std::uint32_t U4 __attribute__((vector_size(16)));
typedef std::int32_t I4 __attribute__((vector_size(16)));
typedef float F4 __attribute__((vector_size(16)));

/// increments() on lane masks (all ones = true).
template <Rounding M>
inline I4 increments4(I4 above, I4 tie, I4 nonzero, I4 odd, I4 neg) {
  switch (M) {
    case Rounding::NearestEven: return above | (tie & odd);
    case Rounding::NearestAway: return above | tie;
    case Rounding::TowardZero: return I4{};
    case Rounding::Up: return nonzero & ~neg;
    case Rounding::Down: return nonzero & neg;
    case Rounding::Odd: return nonzero & ~odd;
    case Rounding::Stochastic: return I4{};
  }
  return I4{};
}

/// Normal range as add-and-mask on the magnitude encoding a: adding `bias` below the format's last bit
/// (mask `low`) carries into it exactly when the mode increments.
template <Rounding M>
inline U4 normal_range4(const FloatTarget& t, U4 a, I4 neg) {
  const U4 low = U4{} + ((1u << t.s0) - 1), keep = ~low;
  switch (M) {
    case Rounding::NearestEven: return (a + (low >> 1) + ((a >> t.s0) & 1)) & keep;
    case Rounding::NearestAway: return (a + (low >> 1) + 1) & keep;
    case Rounding::TowardZero: return a & keep;
    case Rounding::Up: return (a + (low & ~std::bit_cast<U4>(neg))) & keep;
    case Rounding::Down: return (a + (low & std::bit_cast<U4>(neg))) & keep;
    case Rounding::Odd: return (a & keep) | (std::bit_cast<U4>((a & low) != 0) & (low + 1));
    case Rounding::Stochastic: return a;
  }
  return a;
}

/// Subnormal range: |x|·2^-qexp_min = q + fr exactly (fr in [0, 1)), rounded to an integer and scaled back.
template <Rounding M>
inline U4 subnormal_range4(const FloatTarget& t, U4 a, I4 neg) {
  const F4 lim = F4{} + 0x1p23f;
  const F4 s = (std::bit_cast<F4>(a) * t.up_hi) * t.up_lo;
  const F4 sc = s < lim ? s : lim;
  const I4 q = __builtin_convertvector(sc, I4);
  const F4 fr = sc - __builtin_convertvector(q, F4);
  const I4 inc = increments4<M>(fr > 0.5f, fr == 0.5f, fr != 0.0f, -(q & 1), neg);
  const F4 q_up = __builtin_convertvector(q - inc, F4);  // inc is 0 or -1
  return std::bit_cast<U4>((q_up * t.down_hi) * t.down_lo);
}

/// Lanes in the subnormal range (zero is handled by either range).
inline I4 small_lanes(const FloatTarget& t, I4 ai) {
  return (ai < static_cast<std::int32_t>(t.emin_biased << 23)) & (ai != 0);
}

/// Four lanes of round_bits. Compares are on signed lanes: every compared quantity lies in [0, 2^31).
/// The subnormal-range computation runs only when any_small (some lane of the group needs it).
template <Rounding M>
inline U4 round_bits4(const FloatTarget& t, Overflow o, U4 u, bool any_small) {
  constexpr bool kOverflowIsInf = M == Rounding::NearestEven || M == Rounding::NearestAway;
  const U4 zero{}, sign = u & kSign, a = u & kAbs;
  const I4 ai = std::bit_cast<I4>(a);
  const I4 neg = std::bit_cast<I4>(u) < 0;
  U4 res = normal_range4<M>(t, a, neg);
  if (any_small) res = small_lanes(t, ai) ? subnormal_range4<M>(t, a, neg) : res;
  const I4 inf = I4{} + static_cast<std::int32_t>(kInfBits);
  const I4 over = std::bit_cast<I4>(res) > static_cast<std::int32_t>(t.max_bits);
  if constexpr (kOverflowIsInf) {
    res = over ? zero + kInfBits : res;  // an inf input also lands here
  } else {
    res = over ? (neg ? zero + o.neg : zero + o.pos) : res;
    res = ai == inf ? zero + kInfBits : res;
  }
  return ai > inf ? zero + kQuietNaN : (res | sign);
}

template <Rounding M>
void portable_loop(const FloatTarget& target, Overflow o, const float* src, float* dst, std::size_t n) {
  const FloatTarget t = target;  // a local copy: stores to dst cannot alias it, so constants stay in registers
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U4 u0, u1;
    std::memcpy(&u0, src + i, sizeof u0);
    std::memcpy(&u1, src + i + 4, sizeof u1);
    // One branch per 8 lanes on whether any needs the subnormal-range computation: rarely taken for
    // typical tensors, and mostly taken (so still predictable) when many values are tiny.
    const I4 small = small_lanes(t, std::bit_cast<I4>(u0 & kAbs)) | small_lanes(t, std::bit_cast<I4>(u1 & kAbs));
    std::uint64_t halves[2];
    std::memcpy(halves, &small, sizeof halves);
    const bool any_small = (halves[0] | halves[1]) != 0;
    const U4 r0 = round_bits4<M>(t, o, u0, any_small), r1 = round_bits4<M>(t, o, u1, any_small);
    std::memcpy(dst + i, &r0, sizeof r0);
    std::memcpy(dst + i + 4, &r1, sizeof r1);
  }
  for (; i < n; ++i)
    dst[i] = std::bit_cast<float>(round_bits<M>(t, o, std::bit_cast<std::uint32_t>(src[i])));
}

/// draws == nullptr: draw(i) = bits.draw(first_index + i); else draws[i] (tests).
void portable_stochastic(const FloatTarget& t, Overflow o, const float* src, float* dst, std::size_t n,
                         StochasticBits bits, std::uint64_t first_index, const std::uint64_t* draws) {
  if (draws) {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = std::bit_cast<float>(round_bits_stochastic(t, o, std::bit_cast<std::uint32_t>(src[i]), draws[i]));
    return;
  }
  const std::uint64_t key = bits.key();
  std::uint64_t z = key + (first_index + 1) * kPhi;  // draw(i) = mix64(key + (i + 1)·φ), mod 2^64
  for (std::size_t i = 0; i < n; ++i, z += kPhi)
    dst[i] = std::bit_cast<float>(round_bits_stochastic(t, o, std::bit_cast<std::uint32_t>(src[i]), mix64(z)));
}

bool run_portable(const FloatTarget& t, Rounding mode, const float* src, float* dst, std::size_t n,
                  StochasticBits bits, std::uint64_t first_index, const std::uint64_t* draws) {
  const Overflow o = overflow_for(t, mode);
  switch (mode) {
    case Rounding::NearestEven: portable_loop<Rounding::NearestEven>(t, o, src, dst, n); break;
    case Rounding::NearestAway: portable_loop<Rounding::NearestAway>(t, o, src, dst, n); break;
    case Rounding::TowardZero: portable_loop<Rounding::TowardZero>(t, o, src, dst, n); break;
    case Rounding::Up: portable_loop<Rounding::Up>(t, o, src, dst, n); break;
    case Rounding::Down: portable_loop<Rounding::Down>(t, o, src, dst, n); break;
    case Rounding::Odd: portable_loop<Rounding::Odd>(t, o, src, dst, n); break;
    case Rounding::Stochastic: portable_stochastic(t, o, src, dst, n, bits, first_index, draws); break;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Hardware fp16 conversion. vcvtps2ph rounds per IEEE 754 with the immediate's direction (subnormal results
// exact, overflow to inf or max by direction); vcvtph2ps is exact. NaNs are replaced by the canonical one.

/// The vcvtps2ph immediate for a mode, or -1 when the instruction has no such direction.
constexpr int fp16_immediate(Rounding mode) {
  switch (mode) {
    case Rounding::NearestEven: return _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    case Rounding::TowardZero: return _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
    case Rounding::Up: return _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
    case Rounding::Down: return _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
    case Rounding::NearestAway:
    case Rounding::Odd:
    case Rounding::Stochastic: return -1;
  }
  return -1;
}

template <int Imm>
__attribute__((target("avx2,f16c"))) void fp16_f16c(const float* src, float* dst, std::size_t n) {
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kQuietNaN)));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256 y = _mm256_cvtph_ps(_mm256_cvtps_ph(x, Imm));
    _mm256_storeu_ps(dst + i, _mm256_blendv_ps(y, qnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
  for (; i < n; ++i) {
    const __m128 x = _mm_set_ss(src[i]);
    const __m128 y = _mm_cvtph_ps(_mm_cvtps_ph(x, Imm));
    dst[i] = std::isnan(src[i]) ? std::bit_cast<float>(kQuietNaN) : _mm_cvtss_f32(y);
  }
}

template <int Imm>
__attribute__((target("avx512f"))) inline __m512 fp16_round_trip(__m512 x) {
  const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kQuietNaN)));
  const __m512 y = _mm512_cvtph_ps(_mm512_cvtps_ph(x, Imm));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), qnan);
}

template <int Imm>
__attribute__((target("avx512f"))) void fp16_avx512(const float* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(src + i), x1 = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_ps(dst + i, fp16_round_trip<Imm>(x0));
    _mm512_storeu_ps(dst + i + 16, fp16_round_trip<Imm>(x1));
  }
  for (; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, fp16_round_trip<Imm>(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

// ---------------------------------------------------------------------------------------------------------
// bf16 by add-and-mask on the whole encoding (sign included: the carry of a finite magnitude stops at the
// exponent, reaching 0x7F80 = inf exactly when the rounded magnitude exceeds max_finite = 0x7F7F). The float
// subnormals are the bf16 subnormals shifted by 16 bits, so they round exactly.

/// Sign-bit mask of 16 lanes (AVX-512F only: no DQ movepi32_mask needed).
__attribute__((target("avx512f"))) inline __mmask16 sign_mask(__m512i u) {
  return _mm512_cmplt_epi32_mask(u, _mm512_setzero_si512());
}

template <Rounding M>
__attribute__((target("avx512f"))) inline __m512i bf16_round(__m512i u) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i low = _mm512_set1_epi32(0xFFFF);
  const __mmask16 neg = sign_mask(u);
  __m512i r;
  if constexpr (M == Rounding::NearestEven) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
  } else if constexpr (M == Rounding::NearestAway) {
    r = _mm512_add_epi32(u, _mm512_set1_epi32(0x8000));
  } else if constexpr (M == Rounding::TowardZero) {
    r = u;
  } else if constexpr (M == Rounding::Up) {
    r = _mm512_mask_add_epi32(u, static_cast<__mmask16>(~neg), u, low);
  } else if constexpr (M == Rounding::Down) {
    r = _mm512_mask_add_epi32(u, neg, u, low);
  } else {  // Odd: truncate, then set the last kept bit when anything was discarded
    const __mmask16 inexact = _mm512_test_epi32_mask(u, low);
    r = _mm512_mask_or_epi32(u, inexact, u, _mm512_set1_epi32(0x10000));
  }
  r = _mm512_and_si512(r, hi);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(kAbs)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(static_cast<int>(kInfBits)));
  return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(static_cast<int>(kQuietNaN)));
}

template <Rounding M>
__attribute__((target("avx512f"))) void bf16_avx512(const float* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i u0 = _mm512_loadu_si512(src + i), u1 = _mm512_loadu_si512(src + i + 16);
    _mm512_storeu_si512(dst + i, bf16_round<M>(u0));
    _mm512_storeu_si512(dst + i + 16, bf16_round<M>(u1));
  }
  for (; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1);
    _mm512_mask_storeu_epi32(dst + i, m, bf16_round<M>(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

/// The same add-and-mask in 8 lanes (AVX2; sign masks by arithmetic shift, the NaN test signed because the
/// magnitude has no sign bit).
template <Rounding M>
__attribute__((target("avx2"))) inline __m256i bf16_round8(__m256i u) {
  const __m256i low = _mm256_set1_epi32(0xFFFF);
  const __m256i neg = _mm256_srai_epi32(u, 31);  // all ones in negative lanes
  __m256i r;
  if constexpr (M == Rounding::NearestEven) {
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  } else if constexpr (M == Rounding::NearestAway) {
    r = _mm256_add_epi32(u, _mm256_set1_epi32(0x8000));
  } else if constexpr (M == Rounding::TowardZero) {
    r = u;
  } else if constexpr (M == Rounding::Up) {
    r = _mm256_add_epi32(u, _mm256_andnot_si256(neg, low));
  } else if constexpr (M == Rounding::Down) {
    r = _mm256_add_epi32(u, _mm256_and_si256(neg, low));
  } else {  // Odd: truncate, then set the last kept bit when anything was discarded
    const __m256i exact = _mm256_cmpeq_epi32(_mm256_and_si256(u, low), _mm256_setzero_si256());
    r = _mm256_or_si256(u, _mm256_andnot_si256(exact, _mm256_set1_epi32(0x10000)));
  }
  r = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(kAbs)));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(kInfBits)));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(static_cast<int>(kQuietNaN)), nan);
}

template <Rounding M>
__attribute__((target("avx2"))) void bf16_avx2(const float* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        bf16_round8<M>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {  // lanes below n - i: all ones
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i u = _mm256_maskload_epi32(reinterpret_cast<const int*>(src + i), m);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(dst + i), m, bf16_round8<M>(u));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Stochastic rounding with AVX-512: the counter RNG in 8 × 64-bit lanes, the fraction as 64-bit shifts of the
// significand (a different computation from the portable path's float scaling; the tests compare them).

__attribute__((target("avx512f,avx512dq"))) inline __m512i mix64_x8(__m512i z) {
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 30));
  z = _mm512_mullo_epi64(z, _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 27));
  z = _mm512_mullo_epi64(z, _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

/// Increment mask for 8 lanes: v = the integer whose low s bits are the fraction (s <= 88), draw = 64 bits.
/// frac64 = floor(frac·2^64) = v << (64 - s) (mod 2^64) for s <= 64, v >> (s - 64) above; the variable
/// shifts give 0 for counts >= 64 (a negative count is a huge unsigned one), so OR-ing both covers all s.
__attribute__((target("avx512f,avx512dq"))) inline __mmask8 stochastic_up_x8(__m512i v, __m512i s, __m512i draw) {
  const __m512i c64 = _mm512_set1_epi64(64), c128 = _mm512_set1_epi64(128);
  const __m512i frac = _mm512_or_si512(_mm512_sllv_epi64(v, _mm512_sub_epi64(c64, s)),
                                       _mm512_srlv_epi64(v, _mm512_sub_epi64(s, c64)));
  const __mmask8 rest = _mm512_test_epi64_mask(_mm512_sllv_epi64(v, _mm512_sub_epi64(c128, s)),
                                               _mm512_set1_epi64(-1));
  return static_cast<__mmask8>(_mm512_cmplt_epu64_mask(draw, frac) |
                               (rest & _mm512_cmpeq_epu64_mask(draw, frac)));
}

__attribute__((target("avx512f,avx512dq"))) void stochastic_avx512(const FloatTarget& t, const float* src,
                                                                     float* dst, std::size_t n, StochasticBits bits,
                                                                     std::uint64_t first_index,
                                                                     const std::uint64_t* draws) {
  const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kAbs));
  const __m512i frac_mask = _mm512_set1_epi32(0x7FFFFF);
  const __m512i hidden = _mm512_set1_epi32(0x800000);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i s0 = _mm512_set1_epi32(static_cast<int>(t.s0));
  const __m512i pw = _mm512_set1_epi32(static_cast<int>(1u << t.s0));
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(~((1u << t.s0) - 1)));
  const __m512i emin_b = _mm512_set1_epi32(static_cast<int>(t.emin_biased));
  const __m512i sub_base = _mm512_set1_epi32(static_cast<int>(t.s0 + t.emin_biased));
  const __m512i s_cap = _mm512_set1_epi32(88);
  const __m512i max_bits = _mm512_set1_epi32(static_cast<int>(t.max_bits));
  const __m512i inf = _mm512_set1_epi32(static_cast<int>(kInfBits));
  const __m512i qnan = _mm512_set1_epi32(static_cast<int>(kQuietNaN));
  const __m512 down_hi = _mm512_set1_ps(t.down_hi), down_lo = _mm512_set1_ps(t.down_lo);
  const __m512i low = _mm512_set1_epi32(static_cast<int>((1u << t.s0) - 1));
  const __m512i odd_dwords = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m128i top_shift = _mm_cvtsi32_si128(static_cast<int>(32 - t.s0));

  // z_j = key + (first_index + j + 1)·φ for lanes j = 0..15 (mod 2^64), then + 16φ per step.
  const std::uint64_t key = bits.key();
  alignas(64) std::uint64_t z0[16];
  for (std::uint64_t j = 0; j < 16; ++j) z0[j] = key + (first_index + j + 1) * kPhi;
  __m512i z_lo = _mm512_load_si512(z0), z_hi = _mm512_load_si512(z0 + 8);
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(16 * kPhi));

  for (std::size_t i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1);
    const __m512i u = _mm512_maskz_loadu_epi32(m, src + i);
    __m512i draw_lo, draw_hi;
    if (draws) {
      draw_lo = _mm512_maskz_loadu_epi64(static_cast<__mmask8>(m), draws + i);
      draw_hi = _mm512_maskz_loadu_epi64(static_cast<__mmask8>(m >> 8), draws + i + 8);
    } else {
      draw_lo = mix64_x8(z_lo);
      draw_hi = mix64_x8(z_hi);
    }
    z_lo = _mm512_add_epi64(z_lo, step);
    z_hi = _mm512_add_epi64(z_hi, step);

    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __m512i e = _mm512_srli_epi32(a, 23);
    const __mmask16 normal = _mm512_cmpge_epu32_mask(e, emin_b);
    __m512i res;
    if (static_cast<__mmask16>(normal | _mm512_testn_epi32_mask(a, a)) == 0xFFFF) {
      // Every lane in the normal range or zero: frac64 = r·2^(64-s0), r = the low s0 bits of a, with no
      // bits below, so draw < frac64 iff (draw >> (64 - s0)) < r: a 32-bit compare on the draws' high halves.
      const __m512i top = _mm512_permutex2var_epi32(draw_lo, odd_dwords, draw_hi);
      const __mmask16 up = _mm512_cmplt_epu32_mask(_mm512_srl_epi32(top, top_shift), _mm512_and_si512(a, low));
      const __m512i trunc_n = _mm512_and_si512(a, keep);
      res = _mm512_mask_add_epi32(trunc_n, up, trunc_n, pw);
    } else {
      // General case: fraction of v over 2^s with v = a, s = s0 in the normal range, and in the subnormal
      // range v = the significand (hidden bit for normal floats), s = s0 + emin+127 - max(E,1), capped at 88.
      const __m512i sig = _mm512_mask_or_epi32(_mm512_and_si512(a, frac_mask), _mm512_test_epi32_mask(e, e),
                                               _mm512_and_si512(a, frac_mask), hidden);
      const __m512i s_sub = _mm512_min_epi32(_mm512_sub_epi32(sub_base, _mm512_max_epu32(e, one)), s_cap);
      const __m512i v = _mm512_mask_mov_epi32(sig, normal, a);
      const __m512i s = _mm512_mask_mov_epi32(s_sub, normal, s0);

      const __mmask8 up_lo = stochastic_up_x8(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(v)),
                                              _mm512_cvtepu32_epi64(_mm512_castsi512_si256(s)), draw_lo);
      const __mmask8 up_hi = stochastic_up_x8(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(v, 1)),
                                              _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(s, 1)), draw_hi);
      const auto up = static_cast<__mmask16>(up_lo | (static_cast<unsigned>(up_hi) << 8));

      const __m512i trunc_n = _mm512_and_si512(a, keep);
      const __m512i res_n = _mm512_mask_add_epi32(trunc_n, up, trunc_n, pw);
      const __m512i q = _mm512_srlv_epi32(sig, s_sub);  // counts >= 32 give 0
      // Increment only subnormal-range lanes: in the others q = 0, and 1·2^qexp_min may be a float
      // subnormal (bf16), whose multiply would take a microcode assist.
      const __m512i q_up = _mm512_mask_add_epi32(q, static_cast<__mmask16>(up & ~normal), q, one);
      const __m512i res_s =
          _mm512_castps_si512(_mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q_up), down_hi), down_lo));
      res = _mm512_mask_mov_epi32(res_s, normal, res_n);
    }
    res = _mm512_mask_mov_epi32(res, _mm512_cmpgt_epu32_mask(res, max_bits), inf);  // inf input stays inf
    res = _mm512_or_si512(res, _mm512_andnot_si512(abs_mask, u));
    res = _mm512_mask_mov_epi32(res, _mm512_cmpgt_epu32_mask(a, inf), qnan);
    _mm512_mask_storeu_epi32(dst + i, m, res);
  }
}

/// 64-bit lane product mod 2^64 from AVX2's 32×32→64 multiplies.
__attribute__((target("avx2"))) inline __m256i mullo64_x4(__m256i a, __m256i b) {
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}

__attribute__((target("avx2"))) inline __m256i mix64_x4(__m256i z) {
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 30));
  z = mullo64_x4(z, _mm256_set1_epi64x(static_cast<long long>(0xBF58476D1CE4E5B9ull)));
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 27));
  z = mullo64_x4(z, _mm256_set1_epi64x(static_cast<long long>(0x94D049BB133111EBull)));
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

/// stochastic_up_x8 on 4 lanes (AVX2: unsigned 64-bit compares by flipping the sign bits); all-ones lanes = up.
__attribute__((target("avx2"))) inline __m256i stochastic_up_x4(__m256i v, __m256i s, __m256i draw) {
  const __m256i c64 = _mm256_set1_epi64x(64), c128 = _mm256_set1_epi64x(128);
  const __m256i flip = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
  const __m256i frac = _mm256_or_si256(_mm256_sllv_epi64(v, _mm256_sub_epi64(c64, s)),
                                       _mm256_srlv_epi64(v, _mm256_sub_epi64(s, c64)));
  const __m256i rest = _mm256_xor_si256(
      _mm256_cmpeq_epi64(_mm256_sllv_epi64(v, _mm256_sub_epi64(c128, s)), _mm256_setzero_si256()),
      _mm256_set1_epi64x(-1));
  const __m256i below = _mm256_cmpgt_epi64(_mm256_xor_si256(frac, flip), _mm256_xor_si256(draw, flip));
  return _mm256_or_si256(below, _mm256_and_si256(rest, _mm256_cmpeq_epi64(draw, frac)));
}

/// Stochastic rounding with AVX2, 8 lanes: the counter RNG in 2 × 4 64-bit lanes, then the AVX-512 path's
/// computation: when every lane is in the normal range or zero, up iff the draw's top s0 bits, as an integer,
/// are below the discarded bits r (a 32-bit compare; both below 2^22, so signed compares are unsigned ones);
/// otherwise the general case with 64-bit fractions. The tail takes the scalar round_bits_stochastic.
__attribute__((target("avx2"))) void stochastic_avx2(const FloatTarget& t, Overflow o, const float* src, float* dst,
                                                     std::size_t n, StochasticBits bits, std::uint64_t first_index,
                                                     const std::uint64_t* draws) {
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(kAbs));
  const __m256i low = _mm256_set1_epi32(static_cast<int>((1u << t.s0) - 1));
  const __m256i keep = _mm256_set1_epi32(static_cast<int>(~((1u << t.s0) - 1)));
  const __m256i pw = _mm256_set1_epi32(static_cast<int>(1u << t.s0));
  const __m256i below_emin = _mm256_set1_epi32(static_cast<int>(t.emin_biased) - 1);
  const __m256i max_bits = _mm256_set1_epi32(static_cast<int>(t.max_bits));
  const __m256i inf = _mm256_set1_epi32(static_cast<int>(kInfBits));
  const __m256i qnan = _mm256_set1_epi32(static_cast<int>(kQuietNaN));
  const __m256i odd_dwords = _mm256_setr_epi32(1, 3, 5, 7, 0, 2, 4, 6);
  const __m256i even_dwords = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i frac_mask = _mm256_set1_epi32(0x7FFFFF), hidden = _mm256_set1_epi32(0x800000);
  const __m256i one = _mm256_set1_epi32(1), ones = _mm256_set1_epi32(-1);
  const __m256i s0 = _mm256_set1_epi32(static_cast<int>(t.s0));
  const __m256i sub_base = _mm256_set1_epi32(static_cast<int>(t.s0 + t.emin_biased));
  const __m256i s_cap = _mm256_set1_epi32(88);
  const __m256 down_hi = _mm256_set1_ps(t.down_hi), down_lo = _mm256_set1_ps(t.down_lo);
  const __m128i top_shift = _mm_cvtsi32_si128(static_cast<int>(32 - t.s0));
  const std::uint64_t key = bits.key();
  alignas(32) std::uint64_t z0[8];
  for (std::uint64_t j = 0; j < 8; ++j) z0[j] = key + (first_index + j + 1) * kPhi;
  __m256i z_lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(z0));
  __m256i z_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(z0 + 4));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(8 * kPhi));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i draw_lo = draws ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(draws + i)) : mix64_x4(z_lo);
    const __m256i draw_hi =
        draws ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(draws + i + 4)) : mix64_x4(z_hi);
    z_lo = _mm256_add_epi64(z_lo, step);
    z_hi = _mm256_add_epi64(z_hi, step);
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i a = _mm256_and_si256(u, abs_mask);
    const __m256i fast = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_srli_epi32(a, 23), below_emin),
                                         _mm256_cmpeq_epi32(a, _mm256_setzero_si256()));
    __m256i res;
    if (_mm256_movemask_ps(_mm256_castsi256_ps(fast)) == 0xFF) {
      // The draws' high halves, lanes 0..7: odd dwords of each 4-lane vector into its low 128 bits.
      const __m256i top = _mm256_permute2x128_si256(_mm256_permutevar8x32_epi32(draw_lo, odd_dwords),
                                                    _mm256_permutevar8x32_epi32(draw_hi, odd_dwords), 0x20);
      const __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(a, low), _mm256_srl_epi32(top, top_shift));
      res = _mm256_add_epi32(_mm256_and_si256(a, keep), _mm256_and_si256(up, pw));
    } else {
      // General case (as the AVX-512 path): fraction of v over 2^s with v = a, s = s0 in the normal range, and in
      // the subnormal range v = the significand, s = s0 + emin+127 - max(E,1), capped at 88.
      const __m256i e = _mm256_srli_epi32(a, 23);
      const __m256i normal = _mm256_cmpgt_epi32(e, below_emin);
      const __m256i has_hidden = _mm256_xor_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()), ones);
      const __m256i sig = _mm256_or_si256(_mm256_and_si256(a, frac_mask), _mm256_and_si256(has_hidden, hidden));
      const __m256i s_sub = _mm256_min_epi32(_mm256_sub_epi32(sub_base, _mm256_max_epu32(e, one)), s_cap);
      const __m256i v = _mm256_blendv_epi8(sig, a, normal);
      const __m256i s = _mm256_blendv_epi8(s_sub, s0, normal);
      const __m256i up_lo = stochastic_up_x4(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(v)),
                                             _mm256_cvtepu32_epi64(_mm256_castsi256_si128(s)), draw_lo);
      const __m256i up_hi = stochastic_up_x4(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(v, 1)),
                                             _mm256_cvtepu32_epi64(_mm256_extracti128_si256(s, 1)), draw_hi);
      // 64-bit masks to 32-bit lanes 0..7 (their low dwords).
      const __m256i up = _mm256_permute2x128_si256(_mm256_permutevar8x32_epi32(up_lo, even_dwords),
                                                   _mm256_permutevar8x32_epi32(up_hi, even_dwords), 0x20);
      const __m256i trunc_n = _mm256_and_si256(a, keep);
      const __m256i res_n = _mm256_add_epi32(trunc_n, _mm256_and_si256(up, pw));
      const __m256i q = _mm256_srlv_epi32(sig, s_sub);  // counts >= 32 give 0
      // Increment only subnormal-range lanes (in the others q = 0, and 2^qexp_min may be a float subnormal).
      const __m256i q_up = _mm256_add_epi32(q, _mm256_and_si256(_mm256_andnot_si256(normal, up), one));
      const __m256i res_s =
          _mm256_castps_si256(_mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q_up), down_hi), down_lo));
      res = _mm256_blendv_epi8(res_s, res_n, normal);
    }
    res = _mm256_blendv_epi8(res, inf, _mm256_cmpgt_epi32(res, max_bits));  // inf input stays inf
    res = _mm256_or_si256(res, _mm256_andnot_si256(abs_mask, u));
    res = _mm256_blendv_epi8(res, qnan, _mm256_cmpgt_epi32(a, inf));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), res);
  }
  std::uint64_t z = key + (first_index + i + 1) * kPhi;
  for (; i < n; ++i, z += kPhi)
    dst[i] = std::bit_cast<float>(
        round_bits_stochastic(t, o, std::bit_cast<std::uint32_t>(src[i]), draws ? draws[i] : mix64(z)));
}

struct CpuFeatures {
  bool avx512 = false;
  bool f16c = false;
};
const CpuFeatures& cpu() {
  static const CpuFeatures features = [] {
    __builtin_cpu_init();
    CpuFeatures c;
    c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    c.f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return c;
  }();
  return features;
}

/// Runs the hardware fp16 kernel for the mode's immediate; false when the mode has none.
template <bool Wide>
bool run_fp16_hw(Rounding mode, const float* src, float* dst, std::size_t n) {
  switch (mode) {
    case Rounding::NearestEven:
      Wide ? fp16_avx512<fp16_immediate(Rounding::NearestEven)>(src, dst, n)
           : fp16_f16c<fp16_immediate(Rounding::NearestEven)>(src, dst, n);
      return true;
    case Rounding::TowardZero:
      Wide ? fp16_avx512<fp16_immediate(Rounding::TowardZero)>(src, dst, n)
           : fp16_f16c<fp16_immediate(Rounding::TowardZero)>(src, dst, n);
      return true;
    case Rounding::Up:
      Wide ? fp16_avx512<fp16_immediate(Rounding::Up)>(src, dst, n)
           : fp16_f16c<fp16_immediate(Rounding::Up)>(src, dst, n);
      return true;
    case Rounding::Down:
      Wide ? fp16_avx512<fp16_immediate(Rounding::Down)>(src, dst, n)
           : fp16_f16c<fp16_immediate(Rounding::Down)>(src, dst, n);
      return true;
    case Rounding::NearestAway:
    case Rounding::Odd:
    case Rounding::Stochastic: return false;
  }
  return false;
}

/// The add-and-mask bf16 kernel for the mode, 16 lanes (Wide: AVX-512) or 8 (AVX2); false for stochastic.
template <bool Wide>
bool run_bf16_hw(Rounding mode, const float* src, float* dst, std::size_t n) {
  switch (mode) {
    case Rounding::NearestEven:
      Wide ? bf16_avx512<Rounding::NearestEven>(src, dst, n) : bf16_avx2<Rounding::NearestEven>(src, dst, n);
      return true;
    case Rounding::NearestAway:
      Wide ? bf16_avx512<Rounding::NearestAway>(src, dst, n) : bf16_avx2<Rounding::NearestAway>(src, dst, n);
      return true;
    case Rounding::TowardZero:
      Wide ? bf16_avx512<Rounding::TowardZero>(src, dst, n) : bf16_avx2<Rounding::TowardZero>(src, dst, n);
      return true;
    case Rounding::Up:
      Wide ? bf16_avx512<Rounding::Up>(src, dst, n) : bf16_avx2<Rounding::Up>(src, dst, n);
      return true;
    case Rounding::Down:
      Wide ? bf16_avx512<Rounding::Down>(src, dst, n) : bf16_avx2<Rounding::Down>(src, dst, n);
      return true;
    case Rounding::Odd:
      Wide ? bf16_avx512<Rounding::Odd>(src, dst, n) : bf16_avx2<Rounding::Odd>(src, dst, n);
      return true;
    case Rounding::Stochastic: return false;
  }
  return false;
}

}  // namespace

bool path_supported(Path path) {
  switch (path) {
    case Path::Portable: return true;
    case Path::F16c: return cpu().f16c;
    case Path::Avx512: return cpu().avx512;
  }
  return false;
}

const char* path_name(Path path) {
  switch (path) {
    case Path::Portable: return "portable";
    case Path::F16c: return "f16c";
    case Path::Avx512: return "avx512";
  }
  return "?";
}

namespace {
bool dispatch(Path path, const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
              StochasticBits bits, std::uint64_t first_index, const std::uint64_t* draws) {
  if (src.size() != dst.size()) return false;
  const std::optional<FloatTarget> t = float_target(plan);
  if (!t) return false;
  const float* s = src.data();
  float* d = dst.data();
  const std::size_t n = src.size();
  const bool fp16 = plan.format == formats::fp16, bf16 = plan.format == formats::bf16;
  switch (path) {
    case Path::Portable: return run_portable(*t, mode, s, d, n, bits, first_index, draws);
    case Path::F16c:
      if (fp16 && run_fp16_hw<false>(mode, s, d, n)) return true;
      if (bf16 && run_bf16_hw<false>(mode, s, d, n)) return true;
      if (mode == Rounding::Stochastic) {
        stochastic_avx2(*t, overflow_for(*t, mode), s, d, n, bits, first_index, draws);
        return true;
      }
      return run_portable(*t, mode, s, d, n, bits, first_index, draws);
    case Path::Avx512:
      if (fp16 && run_fp16_hw<true>(mode, s, d, n)) return true;
      if (bf16 && run_bf16_hw<true>(mode, s, d, n)) return true;
      if (mode == Rounding::Stochastic) {
        stochastic_avx512(*t, s, d, n, bits, first_index, draws);
        return true;
      }
      return run_portable(*t, mode, s, d, n, bits, first_index, draws);
  }
  return false;
}
}  // namespace

bool round_float_with(Path path, const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                      std::span<float> dst, StochasticBits bits, std::uint64_t first_index) {
  return dispatch(path, plan, mode, src, dst, bits, first_index, nullptr);
}

bool round_float_stochastic_with_draws(Path path, const RoundingPlan& plan, std::span<const float> src,
                                       std::span<float> dst, std::span<const std::uint64_t> draws) {
  if (draws.size() != src.size()) return false;
  return dispatch(path, plan, Rounding::Stochastic, src, dst, {}, 0, draws.data());
}

bool round_float_portable(const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                          std::span<float> dst, StochasticBits bits, std::uint64_t first_index) {
  return round_float_with(Path::Portable, plan, mode, src, dst, bits, first_index);
}

Path fast_path() {
  if (cpu().avx512) return Path::Avx512;
  if (cpu().f16c) return Path::F16c;
  return Path::Portable;
}

bool round_float_fast(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                      StochasticBits bits, std::uint64_t first_index) {
  return round_float_with(fast_path(), plan, mode, src, dst, bits, first_index);
}

const char* fast_path_name() { return path_name(fast_path()); }

}  // namespace roundoff::numerics::simd
