// Hardware binary32 arithmetic on arrays of floats (numerics/binary32_arith.hpp).
// GCC 12's _mm512_cvtps_pd uses an undefined source operand that -Wmaybe-uninitialized reports once inlined (a
// known false positive of the header, as in gemm_kernels.cpp and binary32_values.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "numerics/binary32_arith.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "numerics/round.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::numerics {
namespace {

template <Binary32Op op>
float one(float x, float y) {
  if constexpr (op == Binary32Op::Add) return x + y;
  if constexpr (op == Binary32Op::Sub) return x - y;
  if constexpr (op == Binary32Op::Mul) return x * y;
  return x / y;
}

template <Binary32Op op>
__attribute__((target("avx512f"))) __m512 lanes512(__m512 x, __m512 y) {
  if constexpr (op == Binary32Op::Add) return _mm512_add_ps(x, y);
  if constexpr (op == Binary32Op::Sub) return _mm512_sub_ps(x, y);
  if constexpr (op == Binary32Op::Mul) return _mm512_mul_ps(x, y);
  return _mm512_div_ps(x, y);
}

/// The binary32 results r rounded to binary16 to nearest-even and widened back; a NaN lane becomes the quiet NaN
/// 0x7FC00000 (as round_array's fp16 paths give it, numerics/round_simd.cpp).
__attribute__((target("avx512f"))) inline __m512 fp16_rne512(__m512 r) {
  const __m512 y = _mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

/// out = a op b on 16 lanes at a time; Fp16: each result then rounded to fp16 (fp16_rne512).
template <Binary32Op op, bool Fp16 = false>
__attribute__((target("avx512f"))) void arith_avx512(const float* a, const float* b, bool bcast, float* out,
                                                     std::size_t n) {
  const __m512 yb = _mm512_set1_ps(bcast ? b[0] : 0.0f);
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t left = n - i;
    const auto live = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(live, a + i);
    const __m512 y = bcast ? yb : _mm512_maskz_loadu_ps(live, b + i);
    const __m512 r = lanes512<op>(x, y);
    _mm512_mask_storeu_ps(out + i, live, Fp16 ? fp16_rne512(r) : r);
  }
}

template <Binary32Op op>
__attribute__((target("avx2"))) __m256 lanes256(__m256 x, __m256 y) {
  if constexpr (op == Binary32Op::Add) return _mm256_add_ps(x, y);
  if constexpr (op == Binary32Op::Sub) return _mm256_sub_ps(x, y);
  if constexpr (op == Binary32Op::Mul) return _mm256_mul_ps(x, y);
  return _mm256_div_ps(x, y);
}

template <Binary32Op op>
__attribute__((target("avx2"))) void arith_avx2(const float* a, const float* b, bool bcast, float* out,
                                                std::size_t n) {
  const __m256 yb = _mm256_set1_ps(bcast ? b[0] : 0.0f);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = bcast ? yb : _mm256_loadu_ps(b + i);
    _mm256_storeu_ps(out + i, lanes256<op>(_mm256_loadu_ps(a + i), y));
  }
  for (; i < n; ++i) out[i] = one<op>(a[i], b[bcast ? 0 : i]);
}

template <Binary32Op op>
__attribute__((target("avx2,f16c"))) void arith_fp16_f16c(const float* a, const float* b, bool bcast, float* out,
                                                          std::size_t n) {
  const __m256 yb = _mm256_set1_ps(bcast ? b[0] : 0.0f);
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = bcast ? yb : _mm256_loadu_ps(b + i);
    const __m256 r = lanes256<op>(_mm256_loadu_ps(a + i), y);
    const __m256 h = _mm256_cvtph_ps(_mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(out + i, _mm256_blendv_ps(h, qnan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q)));
  }
  for (; i < n; ++i) {
    const float r = one<op>(a[i], b[bcast ? 0 : i]);
    const float h = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(r), _MM_FROUND_TO_NEAREST_INT)));
    out[i] = std::isnan(r) ? std::bit_cast<float>(0x7FC00000u) : h;
  }
}

template <Binary32Op op>
void arith_portable(const float* a, const float* b, bool bcast, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = one<op>(a[i], b[bcast ? 0 : i]);
}

template <Binary32Op op>
void arith_tier(const float* a, const float* b, bool bcast, float* out, std::size_t n, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return arith_avx512<op>(a, b, bcast, out, n);
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return arith_avx2<op>(a, b, bcast, out, n);
  arith_portable<op>(a, b, bcast, out, n);
}

__attribute__((target("avx512f"))) bool any_nan_avx512(const float* x, std::size_t n) {
  __mmask16 nan = 0;
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t left = n - i;
    const auto live = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  return nan != 0;
}

/// Values per block of all_positive_zero's scans (1 KiB), tested before the next block is read.
constexpr std::size_t kZeroBlock = 256;

__attribute__((target("avx512f"))) bool all_positive_zero_avx512(const float* x, std::size_t n) {
  for (std::size_t b = 0; b < n; b += kZeroBlock) {
    const std::size_t e = std::min(n, b + kZeroBlock);
    __m512i any = _mm512_setzero_si512();
    for (std::size_t i = b; i < e; i += 16) {
      const std::size_t left = e - i;
      const auto live = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
      any = _mm512_or_si512(any, _mm512_maskz_loadu_epi32(live, x + i));
    }
    if (_mm512_test_epi32_mask(any, any) != 0) return false;
  }
  return true;
}

__attribute__((target("avx2"))) bool all_positive_zero_avx2(const float* x, std::size_t n) {
  for (std::size_t b = 0; b < n; b += kZeroBlock) {
    const std::size_t e = std::min(n, b + kZeroBlock);
    __m256i any = _mm256_setzero_si256();
    std::size_t i = b;
    for (; i + 8 <= e; i += 8)
      any = _mm256_or_si256(any, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    std::uint32_t rest = 0;
    for (; i < e; ++i) rest |= std::bit_cast<std::uint32_t>(x[i]);
    if (!_mm256_testz_si256(any, any) || rest != 0) return false;
  }
  return true;
}

__attribute__((target("avx2"))) bool any_nan_avx2(const float* x, std::size_t n) {
  __m256 nan = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  bool found = _mm256_movemask_ps(nan) != 0;
  for (; i < n; ++i) found = found || std::isnan(x[i]);
  return found;
}


/// One row's chain from s (the state after the common prefix), terms [k0, n).
template <bool Dot>
float chain_tail(const float* x, const float* y, std::size_t k0, std::size_t n, float s) {
  for (std::size_t k = k0; k < n; ++k) {
    if constexpr (Dot) s = std::fma(x[k], y[k], s);
    else s = s + x[k];
  }
  return s;
}

template <bool Dot>
__attribute__((target("fma"))) void chain_rows_fma(const std::size_t* len, const float* x, std::ptrdiff_t xr,
                                                   const float* y, std::ptrdiff_t yr, float* out, std::size_t R) {
  constexpr std::size_t G = 8;  // independent chains: an FMA's latency over its throughput
  std::size_t r = 0;
  for (; r + G <= R; r += G) {
    std::size_t common = len[r];
    for (std::size_t i = 1; i < G; ++i) common = std::min(common, len[r + i]);
    __m128 s[G];
    for (std::size_t i = 0; i < G; ++i) s[i] = _mm_set_ss(-0.0f);
    for (std::size_t k = 0; k < common; ++k)
      for (std::size_t i = 0; i < G; ++i) {
        const auto ri = static_cast<std::ptrdiff_t>(r + i);
        const __m128 a = _mm_load_ss(x + ri * xr + static_cast<std::ptrdiff_t>(k));
        if constexpr (Dot) s[i] = _mm_fmadd_ss(a, _mm_load_ss(y + ri * yr + static_cast<std::ptrdiff_t>(k)), s[i]);
        else s[i] = _mm_add_ss(s[i], a);
      }
    for (std::size_t i = 0; i < G; ++i) {
      const auto ri = static_cast<std::ptrdiff_t>(r + i);
      float t = _mm_cvtss_f32(s[i]);
      for (std::size_t k = common; k < len[r + i]; ++k) {
        const __m128 a = _mm_load_ss(x + ri * xr + static_cast<std::ptrdiff_t>(k));
        if constexpr (Dot)
          t = _mm_cvtss_f32(_mm_fmadd_ss(a, _mm_load_ss(y + ri * yr + static_cast<std::ptrdiff_t>(k)), _mm_set_ss(t)));
        else t = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(t), a));
      }
      out[r + i] = len[r + i] == 0 ? 0.0f : t;
    }
  }
  for (; r < R; ++r) {
    const auto ri = static_cast<std::ptrdiff_t>(r);
    __m128 s = _mm_set_ss(-0.0f);
    for (std::size_t k = 0; k < len[r]; ++k) {
      const __m128 a = _mm_load_ss(x + ri * xr + static_cast<std::ptrdiff_t>(k));
      if constexpr (Dot) s = _mm_fmadd_ss(a, _mm_load_ss(y + ri * yr + static_cast<std::ptrdiff_t>(k)), s);
      else s = _mm_add_ss(s, a);
    }
    out[r] = len[r] == 0 ? 0.0f : _mm_cvtss_f32(s);
  }
}

template <bool Dot>
void chain_rows_portable(const std::size_t* len, const float* x, std::ptrdiff_t xr, const float* y, std::ptrdiff_t yr,
                         float* out, std::size_t R) {
  for (std::size_t r = 0; r < R; ++r) {
    const auto ri = static_cast<std::ptrdiff_t>(r);
    const float t = chain_tail<Dot>(x + ri * xr, Dot ? y + ri * yr : nullptr, 0, len[r], -0.0f);
    out[r] = len[r] == 0 ? 0.0f : t;
  }
}

__attribute__((target("avx512f"))) void chain_columns_avx512(std::size_t R, const float* x, const float* y,
                                                             std::size_t ld, float* out, std::size_t C) {
  std::size_t j = 0;
  for (; j + 16 <= C; j += 16) {
    __m512 s = _mm512_set1_ps(-0.0f);
    for (std::size_t r = 0; r < R; ++r)
      s = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ld + j), _mm512_loadu_ps(y + r * ld + j), s);
    _mm512_storeu_ps(out + j, s);
  }
  if (j < C) {
    const auto m = static_cast<__mmask16>((1u << (C - j)) - 1u);
    __m512 s = _mm512_set1_ps(-0.0f);
    for (std::size_t r = 0; r < R; ++r)
      s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + r * ld + j), _mm512_maskz_loadu_ps(m, y + r * ld + j), s);
    _mm512_mask_storeu_ps(out + j, m, s);
  }
}

__attribute__((target("avx2,fma"))) void chain_columns_fma(std::size_t R, const float* x, const float* y,
                                                          std::size_t ld, float* out, std::size_t C) {
  std::size_t j = 0;
  for (; j + 8 <= C; j += 8) {
    __m256 s = _mm256_set1_ps(-0.0f);
    for (std::size_t r = 0; r < R; ++r)
      s = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ld + j), _mm256_loadu_ps(y + r * ld + j), s);
    _mm256_storeu_ps(out + j, s);
  }
  for (; j < C; ++j) {
    __m128 s = _mm_set_ss(-0.0f);
    for (std::size_t r = 0; r < R; ++r) s = _mm_fmadd_ss(_mm_load_ss(x + r * ld + j), _mm_load_ss(y + r * ld + j), s);
    out[j] = _mm_cvtss_f32(s);
  }
}

constexpr std::size_t kSquareChains = 16;

double square(float v) { return static_cast<double>(v) * static_cast<double>(v); }

/// The chains' tree (binary64_sum_of_squares16), after the tail's elements joined their chains.
double finish_squares(double* c, const float* x, std::size_t from, std::size_t n) {
  for (std::size_t i = from; i < n; ++i) c[i % kSquareChains] += square(x[i]);
  const double lo = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
  const double hi = ((c[8] + c[9]) + (c[10] + c[11])) + ((c[12] + c[13]) + (c[14] + c[15]));
  return lo + hi;
}

__attribute__((target("avx512f"))) double squares_avx512(const float* x, std::size_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();  // chains 0–7, 8–15
  std::size_t i = 0;
  for (; i + kSquareChains <= n; i += kSquareChains) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
    hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
  }
  double c[kSquareChains];
  _mm512_storeu_pd(c, lo);
  _mm512_storeu_pd(c + 8, hi);
  return finish_squares(c, x, i, n);
}

__attribute__((target("avx2"))) double squares_avx2(const float* x, std::size_t n) {
  __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  std::size_t i = 0;
  for (; i + kSquareChains <= n; i += kSquareChains)
    for (std::size_t q = 0; q < 4; ++q) {  // chains 4q … 4q + 3
      const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * q));
      s[q] = _mm256_add_pd(s[q], _mm256_mul_pd(a, a));
    }
  double c[kSquareChains];
  for (std::size_t q = 0; q < 4; ++q) _mm256_storeu_pd(c + 4 * q, s[q]);
  return finish_squares(c, x, i, n);
}

bool cpu_has_fma() {
  static const bool fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return fma;
}

bool cpu_has_f16c() {
  static const bool f16c = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") != 0;
  }();
  return f16c;
}

template <Binary32Op op>
void arith_fp16_tier(const float* a, const float* b, bool bcast, float* out, std::size_t n,
                     const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return arith_avx512<op, true>(a, b, bcast, out, n);
  if (round_doubles_avx2_supported() && cpu_has_f16c() && opts.isa_limit >= kernels::Isa::Avx2)
    return arith_fp16_f16c<op>(a, b, bcast, out, n);
  arith_portable<op>(a, b, bcast, out, n);
  static const RoundingPlan fp16{formats::fp16};
  round_array(fp16, Rounding::NearestEven, std::span<const float>(out, n), std::span<float>(out, n));
}

/// binary32_arith (Fp16 false) or binary32_arith_fp16 (true): op chosen at run time, the tier's loop by the template.
template <bool Fp16>
void arith_spans(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                 const KernelOptions& opts) {
  const bool bcast = b.size() == 1 && out.size() != 1;
  const auto run = [&]<Binary32Op o>() {
    if constexpr (Fp16) arith_fp16_tier<o>(a.data(), b.data(), bcast, out.data(), out.size(), opts);
    else arith_tier<o>(a.data(), b.data(), bcast, out.data(), out.size(), opts);
  };
  switch (op) {
    case Binary32Op::Add: return run.template operator()<Binary32Op::Add>();
    case Binary32Op::Sub: return run.template operator()<Binary32Op::Sub>();
    case Binary32Op::Mul: return run.template operator()<Binary32Op::Mul>();
    case Binary32Op::Div: return run.template operator()<Binary32Op::Div>();
  }
}

}  // namespace

void binary32_arith_fp16(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                         const KernelOptions& opts) {
  arith_spans<true>(op, a, b, out, opts);
}

void binary32_arith(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                    const KernelOptions& opts) {
  arith_spans<false>(op, a, b, out, opts);
}

bool all_positive_zero(std::span<const float> x, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return all_positive_zero_avx512(x.data(), x.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return all_positive_zero_avx2(x.data(), x.size());
  for (const float v : x)
    if (std::bit_cast<std::uint32_t>(v) != 0) return false;
  return true;
}

bool any_nan(std::span<const float> x, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return any_nan_avx512(x.data(), x.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2) return any_nan_avx2(x.data(), x.size());
  for (const float v : x)
    if (std::isnan(v)) return true;
  return false;
}

bool binary32_chain(const Accumulation& a) {
  return a.format == formats::fp32 && a.rounding == Rounding::NearestEven && a.fused && a.order == Order::Sequential &&
         a.promote_every == 0 && a.adder.group == 0 && a.tile.size == 0 && a.splitk.count == 0 && !a.flush.step &&
         !validate(a);
}

void binary32_chain_rows(std::span<const std::size_t> length, const float* x, std::ptrdiff_t x_row, const float* y,
                         std::ptrdiff_t y_row, std::span<float> out, const KernelOptions& opts) {
  if (length.size() != out.size())
    throw std::invalid_argument("binary32_chain_rows: lengths and outputs differ in size");
  const std::size_t R = out.size();
  if (cpu_has_fma() && opts.isa_limit >= kernels::Isa::Avx2) {
    if (y != nullptr) chain_rows_fma<true>(length.data(), x, x_row, y, y_row, out.data(), R);
    else chain_rows_fma<false>(length.data(), x, x_row, y, y_row, out.data(), R);
    return;
  }
  if (y != nullptr) chain_rows_portable<true>(length.data(), x, x_row, y, y_row, out.data(), R);
  else chain_rows_portable<false>(length.data(), x, x_row, y, y_row, out.data(), R);
}

void binary32_chain_columns(std::size_t rows, const float* x, const float* y, std::size_t ld, std::span<float> out,
                            const KernelOptions& opts) {
  const std::size_t C = out.size();
  if (rows == 0) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return chain_columns_avx512(rows, x, y, ld, out.data(), C);
  if (cpu_has_fma() && round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2)
    return chain_columns_fma(rows, x, y, ld, out.data(), C);
  for (std::size_t j = 0; j < C; ++j) {
    float s = -0.0f;
    for (std::size_t r = 0; r < rows; ++r) s = std::fma(x[r * ld + j], y[r * ld + j], s);
    out[j] = s;
  }
}

double binary64_sum_of_squares16(std::span<const float> x, const KernelOptions& opts) {
  if (round_doubles_avx512_supported() && opts.isa_limit >= kernels::Isa::Avx512)
    return squares_avx512(x.data(), x.size());
  if (round_doubles_avx2_supported() && opts.isa_limit >= kernels::Isa::Avx2) return squares_avx2(x.data(), x.size());
  double c[kSquareChains] = {};
  return finish_squares(c, x.data(), 0, x.size());
}

}  // namespace roundoff::numerics
