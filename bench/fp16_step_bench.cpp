// Instruction-level bound of one fused fp16 accumulation step s ← RNE_fp16(s + a·b) on a CPU with AVX-512F but
// no AVX512-FP16 (issue 9: why the fp16-accumulator GEMM kernel, and so the E11 step, cannot go much faster
// there). Each benchmark runs the register tile of the production kernel (8 rows × 32 columns, 16 independent
// accumulator chains, K = 256 steps of fp16 inputs from N(0, σ) rounded to fp16) with a different step body;
// FLOPS = 2 per lane and step.
//
//   step/fp16-rto        the exact step the kernel takes (numerics/gemm_kernels.cpp, mac<Acc::Fp16>): the fp32
//                        sum rounded down and up (two FMAs with embedded rounding), the odd one kept (round to
//                        odd), then vcvtps2ph (nearest even) and vcvtph2ps back
//   step/fp16-rto-minmax the same exact step with the odd one chosen without mask registers: of two adjacent
//                        encodings {n, n+1} the odd one is n | 1, so min(rd, ru) | (max(rd, ru) & 1)
//   step/fp16-rto-magic  the same round to odd, then binary16's nearest even without the conversion pair: t + M − M
//                        with M = ±2^(e+13) (e the exponent of t, clamped to binary16's), sign, NaN payload and
//                        overflow fixed after (equal to the conversion pair on all 2^32 binary32 inputs, checked
//                        once with a throwaway program; 12 more instructions)
//   step/rd-cvt          one FMA rounded down, then the conversion pair: NOT exact; whether embedded rounding costs
//   step/rdru-min-cvt    both FMAs and their minimum, then the conversion pair: NOT exact; the second FMA's cost
//   step/rn-cvt          one FMA rounded to nearest, then the conversion pair: NOT exact (double rounding when the
//                        fp32 sum is an fp16 midpoint); the floor for any step that converts through fp16
//   step/rn-cvt-suspect  rn-cvt plus a branch per row to the exact step when a lane's fp32 sum could be an fp16
//                        midpoint (low 12 bits zero and not an fp16 value): exact, the "optimistic" design
//   step/fp32-fma        one FMA (the fp32 accumulator's step), for scale
//
// One thread; compare rows of one run only. These are not the kernel (no packing, no loads beyond the tile's);
// they show where its time per step goes.
// GCC 12's AVX-512 intrinsics build pass-through operands from _mm512_undefined_*() (false positives once inlined).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <random>
#include <vector>

#include "numerics/round.hpp"

namespace {

#define STEP_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))
#define STEP_INLINE __attribute__((always_inline)) inline

enum class Body { Rto, RtoMinMax, RtoMagic, RdCvt, RdRuCvt, RnCvt, RnCvtSuspect, Fma };

STEP_TARGET STEP_INLINE __m512 rto_step(__m512 a, __m512 b, __m512 s) {
  const __m512 rd = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 ru = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  const __mmask16 rd_odd = _mm512_test_epi32_mask(_mm512_castps_si512(rd), _mm512_set1_epi32(1));
  const __m512 t = _mm512_mask_mov_ps(ru, rd_odd, rd);
  return _mm512_cvtph_ps(_mm512_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
STEP_TARGET __attribute__((noinline)) __m512 rto_step_call(__m512 a, __m512 b, __m512 s) { return rto_step(a, b, s); }
STEP_TARGET STEP_INLINE __m512 to_fp16(__m512 t) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/// RNE to fp16 of binary32 t without the conversion pair (prototype): t + M − M with M = ±2^(e+13).
STEP_TARGET STEP_INLINE __m512 rne16_magic(__m512 t) {
  const __m512i ti = _mm512_castps_si512(t);
  __m512i v = _mm512_add_epi32(_mm512_and_si512(ti, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(13 << 23));
  v = _mm512_min_epu32(_mm512_max_epu32(v, _mm512_set1_epi32(126 << 23)), _mm512_set1_epi32(156 << 23));
  const __m512i sign = _mm512_set1_epi32(INT32_MIN);
  const __m512 m = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(v, ti, sign, 0xF8));
  const __m512i h = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(t, m), m));
  const __m512i hs = _mm512_and_si512(_mm512_ternarylogic_epi32(h, ti, sign, 0xF8), _mm512_set1_epi32(-8192));
  const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(t), _mm512_set1_ps(65520.0f), _CMP_GE_OQ);
  return _mm512_castsi512_ps(_mm512_mask_ternarylogic_epi32(hs, big, _mm512_set1_epi32(0x7F800000), sign, 0xEC));
}
STEP_TARGET STEP_INLINE __m512 rto_magic_step(__m512 a, __m512 b, __m512 s) {
  const __m512 rd = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 ru = _mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  const __mmask16 rd_odd = _mm512_test_epi32_mask(_mm512_castps_si512(rd), _mm512_set1_epi32(1));
  return rne16_magic(_mm512_mask_mov_ps(ru, rd_odd, rd));
}

/// The same round-to-odd without mask registers: of two adjacent integers {n, n+1} the odd one is n | 1, so
/// rto = min(rd, ru) | (max(rd, ru) & 1) on the bit patterns (rd and ru have the same sign; exact: rd == ru).
STEP_TARGET STEP_INLINE __m512 rto_minmax_step(__m512 a, __m512 b, __m512 s) {
  const __m512i rd = _mm512_castps_si512(_mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  const __m512i ru = _mm512_castps_si512(_mm512_fmadd_round_ps(a, b, s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i t = _mm512_ternarylogic_epi32(_mm512_min_epu32(rd, ru), _mm512_max_epu32(rd, ru), one, 0xF8);
  return to_fp16(_mm512_castsi512_ps(t));
}

template <Body body>
STEP_TARGET void tile(const float* A, const float* B, std::size_t K, float* out) {
  __m512 s[8][2];
  for (auto& r : s) r[0] = r[1] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < K; ++k) {
    const __m512 b0 = _mm512_loadu_ps(B + k * 32), b1 = _mm512_loadu_ps(B + k * 32 + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m512 a = _mm512_set1_ps(A[k * 8 + r]);
      if constexpr (body == Body::Rto) {
        s[r][0] = rto_step(a, b0, s[r][0]);
        s[r][1] = rto_step(a, b1, s[r][1]);
      } else if constexpr (body == Body::RtoMagic) {
        s[r][0] = rto_magic_step(a, b0, s[r][0]);
        s[r][1] = rto_magic_step(a, b1, s[r][1]);
      } else if constexpr (body == Body::RtoMinMax) {
        s[r][0] = rto_minmax_step(a, b0, s[r][0]);
        s[r][1] = rto_minmax_step(a, b1, s[r][1]);
      } else if constexpr (body == Body::RdCvt) {
        s[r][0] = to_fp16(_mm512_fmadd_round_ps(a, b0, s[r][0], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
        s[r][1] = to_fp16(_mm512_fmadd_round_ps(a, b1, s[r][1], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
      } else if constexpr (body == Body::RdRuCvt) {
        const __m512 d0 = _mm512_fmadd_round_ps(a, b0, s[r][0], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        const __m512 u0 = _mm512_fmadd_round_ps(a, b0, s[r][0], _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        const __m512 d1 = _mm512_fmadd_round_ps(a, b1, s[r][1], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        const __m512 u1 = _mm512_fmadd_round_ps(a, b1, s[r][1], _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        s[r][0] = to_fp16(_mm512_castsi512_ps(_mm512_min_epu32(_mm512_castps_si512(d0), _mm512_castps_si512(u0))));
        s[r][1] = to_fp16(_mm512_castsi512_ps(_mm512_min_epu32(_mm512_castps_si512(d1), _mm512_castps_si512(u1))));
      } else if constexpr (body == Body::RnCvt) {
        s[r][0] = to_fp16(_mm512_fmadd_ps(a, b0, s[r][0]));
        s[r][1] = to_fp16(_mm512_fmadd_ps(a, b1, s[r][1]));
      } else if constexpr (body == Body::RnCvtSuspect) {
        const __m512 t0 = _mm512_fmadd_ps(a, b0, s[r][0]), t1 = _mm512_fmadd_ps(a, b1, s[r][1]);
        const __m512 h0 = to_fp16(t0), h1 = to_fp16(t1);
        const __m512i low = _mm512_set1_epi32(0xFFF);
        const __mmask16 sus =
            _mm512_mask_cmp_ps_mask(_mm512_testn_epi32_mask(_mm512_castps_si512(t0), low), t0, h0, _CMP_NEQ_UQ) |
            _mm512_mask_cmp_ps_mask(_mm512_testn_epi32_mask(_mm512_castps_si512(t1), low), t1, h1, _CMP_NEQ_UQ);
        if (__builtin_expect(sus != 0, 0)) {
          s[r][0] = rto_step_call(a, b0, s[r][0]);
          s[r][1] = rto_step_call(a, b1, s[r][1]);
        } else {
          s[r][0] = h0;
          s[r][1] = h1;
        }
      } else {
        s[r][0] = _mm512_fmadd_ps(a, b0, s[r][0]);
        s[r][1] = _mm512_fmadd_ps(a, b1, s[r][1]);
      }
    }
  }
  for (int r = 0; r < 8; ++r) {
    _mm512_storeu_ps(out + r * 32, s[r][0]);
    _mm512_storeu_ps(out + r * 32 + 16, s[r][1]);
  }
}

template <Body body>
void step(benchmark::State& state) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512F on this CPU");
    return;
  }
  constexpr std::size_t K = 256;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const roundoff::numerics::RoundingPlan half(roundoff::numerics::formats::fp16);
  const auto fp16 = [&](float x) {
    return static_cast<float>(roundoff::numerics::round_to(half, roundoff::numerics::Rounding::NearestEven, x));
  };
  std::vector<float> A(K * 8), B(K * 32), out(256);
  for (float& x : A) x = fp16(0.5f * nd(rng));
  for (float& x : B) x = fp16(0.05f * nd(rng));
  for (auto _ : state) {
    tile<body>(A.data(), B.data(), K, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * K * 8 * 32 * static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

BENCHMARK(step<Body::Rto>)->Name("step/fp16-rto");
BENCHMARK(step<Body::RtoMinMax>)->Name("step/fp16-rto-minmax");
BENCHMARK(step<Body::RtoMagic>)->Name("step/fp16-rto-magic");
BENCHMARK(step<Body::RdCvt>)->Name("step/rd-cvt");
BENCHMARK(step<Body::RdRuCvt>)->Name("step/rdru-min-cvt");
BENCHMARK(step<Body::RnCvt>)->Name("step/rn-cvt");
BENCHMARK(step<Body::RnCvtSuspect>)->Name("step/rn-cvt-suspect");
BENCHMARK(step<Body::Fma>)->Name("step/fp32-fma");

}  // namespace

BENCHMARK_MAIN();
