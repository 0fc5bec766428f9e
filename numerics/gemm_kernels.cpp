// Bit-exact SIMD GEMM kernels (see gemm_kernels.hpp for the contract and the exactness argument).
#include "numerics/gemm_kernels.hpp"
#include "numerics/pack_cache_derived.hpp"

// GCC 12's AVX-512 intrinsics build their pass-through operands from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined (a known false positive of the header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "numerics/adder_kernels.hpp"
#include "numerics/arith.hpp"
#include "numerics/binary32_arith.hpp"
#include "numerics/gemm_binary64.hpp"
#include "numerics/gemm_kernel_tiers.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::numerics::kernels {
namespace {

#define ROUNDOFF_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))
#define ROUNDOFF_AVX512FP16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,avx512fp16")))
#define ROUNDOFF_INLINE __attribute__((always_inline)) inline

struct Plan {
  Acc acc;
  std::size_t block;  ///< 0 = sequential; else block size, block sums combined in fp32
  bool tile = false;  ///< the exact tile stage of ane-tile4 (acc fp32, sequential; see tile_ane)
  bool flush = false; ///< with tile: subnormal fp16 tile values become zeros of their sign (ane-tile4-ftz)
};

std::optional<Acc> acc_of(const Format& f) {
  if (f == formats::fp16) return Acc::Fp16;
  if (f == formats::bf16) return Acc::Bf16;
  if (f == formats::fp32) return Acc::Fp32;
  return std::nullopt;
}

std::optional<Plan> plan_for(const Accumulation& a) {
  if (a.rounding != Rounding::NearestEven || a.promote_every != 0 || a.adder.group != 0 || a.splitk.count != 0)
    return std::nullopt;
  // The step flush (subnormal partial sums to zero): the fp16 sequential kernels only (Acc::Fp16Ftz, the flush
  // threshold 2^-14 of fp16 itself); any other combination runs on the generic path.
  if (a.flush.step) {
    if (!(a.format == formats::fp16) || a.order != Order::Sequential || a.tile.size != 0 || !a.fused ||
        (a.flush.step_format && !(*a.flush.step_format == formats::fp16)))
      return std::nullopt;
    return Plan{Acc::Fp16Ftz, 0};
  }
  // Unfused with an fp32/fp64 product format rounds nothing: every product the kernels accept is exact in fp32.
  if (!a.fused && !(a.product_format == formats::fp32 || a.product_format == formats::fp64)) return std::nullopt;
  const auto acc = acc_of(a.format);
  if (!acc) return std::nullopt;
  if (a.tile.size != 0) {
    const TileStage ane{static_cast<int>(kTile), formats::fp16, Rounding::TowardZero};
    if (!(a.tile == ane) || *acc != Acc::Fp32 || a.order != Order::Sequential) return std::nullopt;
    return Plan{Acc::Fp32, 0, true, a.flush.tile};
  }
  switch (a.order) {
    case Order::Sequential:
      return Plan{*acc, 0};
    case Order::Blocked:
      if (a.block <= 0 || !(a.outer_format == formats::fp32)) return std::nullopt;
      return Plan{*acc, static_cast<std::size_t>(a.block)};
    case Order::Reverse:
    case Order::Pairwise:
    case Order::Kahan:
      return std::nullopt;
  }
  return std::nullopt;
}

constexpr std::uint16_t kNegZeroHalf = 0x8000;
constexpr std::size_t kPanel = 64;  ///< columns per packed B panel
constexpr std::size_t kMr = kPanelRows;  ///< rows per micro-tile: one A panel (ALayout::Panels)
constexpr std::size_t kPanelGroups = 8;  ///< groups of B panels per row chunk when several threads share a GEMM

// ---------------------------------------------------------------------------------------------------------
// Native fp16 kernel (AVX512-FP16): s ← fma_fp16(a, b, s) on 32 lanes, one correctly rounded operation.

/// Where A(r, k)'s fp16 word pair is read in layout L (gemm_kernel_tiers.hpp).
template <ALayout L>
inline const std::uint32_t* ah_at(const std::uint32_t* Ap, std::size_t lda, std::size_t r, std::size_t k) {
  return L == ALayout::Rows ? Ap + r * lda + k : Ap + k * kPanelRows + r;
}

// The same false positive of the header's _mm*_undefined_*() pass-through operands, reported as certain once the
// 12-row tile's conversions are inlined (GCC 12).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <std::size_t MR, ALayout L>
ROUNDOFF_AVX512FP16 void tile_ph(const std::uint32_t* Ap, std::size_t lda, const std::uint16_t* Bp, std::size_t K,
                                 std::size_t block, float* tile, std::size_t ldt) {
  // tile: MR×64 floats (fp16 values when sequential; fp32 totals when blocked).
  if (block == 0) {
    __m512h s[MR][2];
    for (std::size_t r = 0; r < MR; ++r) {
      for (std::size_t v = 0; v < 2; ++v) {
        const __m256i lo = _mm512_cvtps_ph(_mm512_loadu_ps(tile + r * ldt + 32 * v), _MM_FROUND_TO_NEAREST_INT);
        const __m256i hi = _mm512_cvtps_ph(_mm512_loadu_ps(tile + r * ldt + 32 * v + 16), _MM_FROUND_TO_NEAREST_INT);
        s[r][v] = _mm512_castsi512_ph(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      }
    }
    for (std::size_t k = 0; k < K; ++k) {
      const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(Bp + k * kPanel));
      const __m512h b1 = _mm512_castsi512_ph(_mm512_loadu_si512(Bp + k * kPanel + 32));
#pragma GCC unroll 12
      for (std::size_t r = 0; r < MR; ++r) {
        const auto* ar = reinterpret_cast<const float*>(ah_at<L>(Ap, lda, r, k));
        const __m512h a = _mm512_castps_ph(_mm512_broadcastss_ps(_mm_load_ss(ar)));
        s[r][0] = _mm512_fmadd_ph(a, b0, s[r][0]);
        s[r][1] = _mm512_fmadd_ph(a, b1, s[r][1]);
      }
    }
    for (std::size_t r = 0; r < MR; ++r) {
      for (std::size_t v = 0; v < 2; ++v) {
        const __m512i si = _mm512_castph_si512(s[r][v]);
        _mm512_storeu_ps(tile + r * ldt + 32 * v, _mm512_cvtph_ps(_mm512_castsi512_si256(si)));
        _mm512_storeu_ps(tile + r * ldt + 32 * v + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(si, 1)));
      }
    }
  } else {
    __m512 S[MR][4];
    for (std::size_t r = 0; r < MR; ++r)
      for (std::size_t v = 0; v < 4; ++v) S[r][v] = _mm512_loadu_ps(tile + r * ldt + 16 * v);
    const __m512h neg0 = _mm512_castsi512_ph(_mm512_set1_epi16(static_cast<short>(kNegZeroHalf)));
    for (std::size_t k0 = 0; k0 < K; k0 += block) {
      const std::size_t k1 = std::min(K, k0 + block);
      __m512h p[MR][2];
      for (std::size_t r = 0; r < MR; ++r) p[r][0] = p[r][1] = neg0;
      for (std::size_t k = k0; k < k1; ++k) {
        const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(Bp + k * kPanel));
        const __m512h b1 = _mm512_castsi512_ph(_mm512_loadu_si512(Bp + k * kPanel + 32));
#pragma GCC unroll 12
        for (std::size_t r = 0; r < MR; ++r) {
          const auto* ar = reinterpret_cast<const float*>(ah_at<L>(Ap, lda, r, k));
          const __m512h a = _mm512_castps_ph(_mm512_broadcastss_ps(_mm_load_ss(ar)));
          p[r][0] = _mm512_fmadd_ph(a, b0, p[r][0]);
          p[r][1] = _mm512_fmadd_ph(a, b1, p[r][1]);
        }
      }
      for (std::size_t r = 0; r < MR; ++r) {
        for (std::size_t v = 0; v < 2; ++v) {
          const __m512i si = _mm512_castph_si512(p[r][v]);
          S[r][2 * v] = _mm512_add_ps(S[r][2 * v], _mm512_cvtph_ps(_mm512_castsi512_si256(si)));
          S[r][2 * v + 1] = _mm512_add_ps(S[r][2 * v + 1], _mm512_cvtph_ps(_mm512_extracti64x4_epi64(si, 1)));
        }
      }
    }
    for (std::size_t r = 0; r < MR; ++r)
      for (std::size_t v = 0; v < 4; ++v) _mm512_storeu_ps(tile + r * ldt + 16 * v, S[r][v]);
  }
}
#pragma GCC diagnostic pop

template <ALayout L>
ROUNDOFF_AVX512FP16 void tile_ph_rows_in(std::size_t rows, const std::uint32_t* Ap, std::size_t lda,
                                         const std::uint16_t* Bp, std::size_t K, std::size_t block, float* tile,
                                         std::size_t ldt) {
  // 12 rows (24 accumulators) when sequential; the blocked kernel keeps 4 fp32 totals per row beside them: 8.
  for (std::size_t r0 = 0; r0 < rows;) {
    const std::size_t left = rows - r0;
    const std::uint32_t* a = ah_at<L>(Ap, lda, r0, 0);
    float* t = tile + r0 * ldt;
    if (left >= 12 && block == 0) {
      tile_ph<12, L>(a, lda, Bp, K, block, t, ldt);
      r0 += 12;
    } else if (left >= 8) {
      tile_ph<8, L>(a, lda, Bp, K, block, t, ldt);
      r0 += 8;
    } else if (left >= 4) {
      tile_ph<4, L>(a, lda, Bp, K, block, t, ldt);
      r0 += 4;
    } else if (left >= 2) {
      tile_ph<2, L>(a, lda, Bp, K, block, t, ldt);
      r0 += 2;
    } else {
      tile_ph<1, L>(a, lda, Bp, K, block, t, ldt);
      r0 += 1;
    }
  }
}

/// `rows` rows × kPanel columns of the native fp16 GEMM: A's fp16 word pairs read as `layout` says, fp16 B columns
/// Bp[k·kPanel + 0..63], running sums in/out tile[r·ldt + c] (fp16 values when sequential, fp32 totals when blocked).
void tile_ph_rows(std::size_t rows, const std::uint32_t* Ap, std::size_t lda, const std::uint16_t* Bp, std::size_t K,
                  std::size_t block, float* tile, std::size_t ldt, ALayout layout) {
  switch (layout) {
    case ALayout::Rows: tile_ph_rows_in<ALayout::Rows>(rows, Ap, lda, Bp, K, block, tile, ldt); return;
    case ALayout::Panels: tile_ph_rows_in<ALayout::Panels>(rows, Ap, lda, Bp, K, block, tile, ldt); return;
  }
}

/// Classifies n contiguous doubles and returns the lowest class met. Inputs (`inputs`): 0 = no kernel (not a
/// binary32 value, more than 12 significant bits, or a finite nonzero |x| outside [2^-63, 2^63); with
/// `any_binary32`, for the fused fp32 accumulator whose hardware FMA rounds the exact a·b + s once, only the
/// first condition), 1 = every
/// product exact in fp32, 2 = additionally every value an fp16 value. Initial C (!inputs): 0 = not a binary32
/// value, 1 = binary32, 2 = fp16 value. Writes the values, where the pointers are not null, as binary32 (NaNs
/// replaced by the quiet NaN, see round_bf16_rne), as fp16 bits, and as fp16 bits twice per 32-bit word
/// (fp16 outputs are meaningful only when the result is 2). `optimistic` (a run packed as it is in the hope that
/// an entry cast is the identity on it, pack_to): returns 2 when every value is an fp16 value and none is NaN, and
/// otherwise 1 or 0 as soon as a vector of 16 values shows it is not so (the outputs then partly written: the
/// caller packs the run again).
/// Inputs packed for binary32 kernels only (no fp16 output: h16 and h32 null) are not tested for fp16 values — no
/// caller tells class 2 from 1 there, as the AVX2 tier's pack_run, which never returns 2 — so they return 1 at most.
/// `rounds`: the conversion binary64 → binary32 (nearest even under the default MXCSR) is the operand's entry
/// cast to binary32 (pack_to, plain_binary32_cast), so a value need not be a binary32 value already: the
/// exactness test is skipped and the other tests apply to the rounded value, as they would to the cast value.
///
/// Binary32 sources (T = float; `rounds` has no effect): every value is a binary32 value, and a NaN is quieted
/// (quiet bit set, payload kept) as the round trip binary32 → binary64 → binary32 of the widened operand does, so
/// the class and every output are those of pack_run on the widened run.
template <class T>
ROUNDOFF_AVX512 int pack_run(const T* src, std::size_t n, bool inputs, bool any_binary32, float* f32,
                             std::uint16_t* h16, std::uint32_t* h32, bool rounds = false, bool optimistic = false) {
  const bool halves = !inputs || h16 != nullptr || h32 != nullptr;
  __mmask16 bad = 0, not_half = halves ? 0 : 1;
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t len = std::min<std::size_t>(16, n - i);
    const auto valid = static_cast<__mmask16>((1u << len) - 1u);
    __m512 f;
    __mmask16 ok = valid;
    if constexpr (std::is_same_v<T, float>) {
      const __m512 raw = _mm512_maskz_loadu_ps(valid, src + i);
      f = _mm512_mask_or_ps(raw, _mm512_cmp_ps_mask(raw, raw, _CMP_UNORD_Q), raw,
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000)));
    } else {
      const auto vlo = static_cast<__mmask8>(valid & 0xFF), vhi = static_cast<__mmask8>(valid >> 8);
      const __m512d lo = _mm512_maskz_loadu_pd(vlo, src + i), hi = _mm512_maskz_loadu_pd(vhi, src + i + 8);
      const __m256 flo = _mm512_cvtpd_ps(lo), fhi = _mm512_cvtpd_ps(hi);
      // Exactly a binary32 value (NaN compares unordered: accepted).
      const __mmask8 exlo = _mm512_cmp_pd_mask(_mm512_cvtps_pd(flo), lo, _CMP_EQ_UQ);
      const __mmask8 exhi = _mm512_cmp_pd_mask(_mm512_cvtps_pd(fhi), hi, _CMP_EQ_UQ);
      const auto exact = static_cast<__mmask16>(exlo | (static_cast<unsigned>(exhi) << 8));
      f = _mm512_insertf32x8(_mm512_castps256_ps512(flo), fhi, 1);
      ok = rounds ? valid : exact;
    }
    // fp16 values (NaN counted as one) always pass the input test below (at most 11 significant bits, |x| within
    // [2^-24, 65504]): under the fp16 test only the lanes that fail it need the other.
    __m256i h = _mm256_setzero_si256();
    __mmask16 wide = valid;
    if (halves) {
      h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      wide = static_cast<__mmask16>(valid & ~_mm512_cmp_ps_mask(_mm512_cvtph_ps(h), f, _CMP_EQ_UQ));
      not_half |= wide;
    }
    if (inputs && !any_binary32 && wide != 0) {
      const __m512i fi = _mm512_castps_si512(f);
      const __m512i e = _mm512_and_si512(_mm512_srli_epi32(fi, 23), _mm512_set1_epi32(0xFF));
      const __mmask16 special = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)) |
                                _mm512_testn_epi32_mask(fi, _mm512_set1_epi32(0x7FFFFFFF));
      const __mmask16 in_range = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(127 - 63)) &
                                 _mm512_cmple_epi32_mask(e, _mm512_set1_epi32(127 + 62));
      const __mmask16 short_sig = _mm512_testn_epi32_mask(fi, _mm512_set1_epi32(0xFFF));  // <= 12 bits
      ok &= static_cast<__mmask16>(special | (in_range & short_sig));
    }
    bad |= static_cast<__mmask16>(valid & ~ok);
    if (f32) {
      const __m512 f_canon = _mm512_mask_mov_ps(f, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q),
                                                _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
      _mm512_mask_storeu_ps(f32 + i, valid, f_canon);
    }
    if (!halves) continue;
    if (optimistic && (bad | not_half | _mm512_mask_cmp_ps_mask(valid, f, f, _CMP_UNORD_Q)) != 0) return bad ? 0 : 1;
    if (h16) _mm256_mask_storeu_epi16(h16 + i, valid, h);
    if (h32) {
      // each fp16 word twice per 32-bit word: word t of h into 16-bit places 2t and 2t + 1
      const __m512i twice = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6,
                                             5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
      _mm512_mask_storeu_epi32(h32 + i, valid, _mm512_permutexvar_epi16(twice, _mm512_castsi256_si512(h)));
    }
  }
  return bad ? 0 : not_half ? 1 : 2;
}

/// dst[i] = src[i] as binary64 (exact), i < n.
ROUNDOFF_AVX512 void widen(const float* src, double* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8) {
    const auto live = static_cast<__mmask8>(n - i >= 8 ? 0xFF : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_pd(dst + i, live, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(live, src + i)));
  }
}

// ---------------------------------------------------------------------------------------------------------

/// The tile stage alone: numerics::sum of one tile's terms under it is the tile value (and its overflow count).
const Accumulation& tile_only() {
  static const Accumulation a = [] {
    Accumulation t;
    t.format = formats::fp16;
    t.rounding = Rounding::TowardZero;
    t.tile = TileStage{static_cast<int>(kTile), formats::fp16, Rounding::TowardZero};
    return t;
  }();
  return a;
}

}  // namespace

__attribute__((noinline)) void tile_fixup(std::uint16_t* h, std::uint32_t exact, const double* su, const double* a,
                                          const float* b, std::size_t ldb, std::size_t n, std::size_t lanes,
                                          std::int64_t& overflows) {
  for (std::size_t c = 0; c < lanes; ++c) {
    if ((exact >> c) & 1u) {
      if (std::isfinite(su[c]) && std::fabs(su[c]) >= 65536.0) ++overflows;
      continue;
    }
    double terms[kTile];
    for (std::size_t t = 0; t < n; ++t) terms[t] = a[t] * static_cast<double>(b[t * ldb + c]);
    AccumStats st;
    const double v = numerics::sum(tile_only(), std::span<const double>(terms, n), {}, &st);
    overflows += st.overflows;
    h[c] = std::bit_cast<std::uint16_t>(static_cast<_Float16>(static_cast<float>(v)));  // v is an fp16 value
  }
}

namespace {
/// does not page-fault fresh pack buffers in on every GEMM call (E11's classifier packs 69 MB of B).
template <class T>
class Reusable {
 public:
  T* get(std::size_t n) {
    if (n > capacity_) {
      data_.reset();
      data_.reset(new T[n]);
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  std::size_t capacity_ = 0;
};

/// The pack buffers of one calling thread (the threads a call forks share their caller's set).
struct PackBuffers {
  Reusable<float> A, B;
  Reusable<std::uint32_t> Ah;
  Reusable<std::uint16_t> Bh;
};

/// Packed operands (uninitialised storage: every element read is written first); the buffers a kernel does not
/// use are null.
struct Packed {
  std::size_t M, N, K, panels;
  bool any_binary32 = false;  ///< fused fp32 accumulator: any binary32 inputs (one hardware FMA per step)
  bool avx2 = false;          ///< the AVX2 tier (its kernels and packing, gemm_kernel_tiers.hpp)
  ALayout a_layout = ALayout::Rows;  ///< how A and Ah are packed (a_at)
  float* A = nullptr;           ///< M×K (a_size values; fp32-lane kernels)
  float* B = nullptr;           ///< panels × K × kPanel, zero-padded columns
  std::uint32_t* Ah = nullptr;  ///< native fp16 path: fp16 bits twice per word, M×K as A
  std::uint16_t* Bh = nullptr;  ///< native fp16 path: panels × K × kPanel fp16 bits
};

/// Where A(i, k) lies in a packed A (pk.A and pk.Ah alike): Rows, i·K + k; Panels, in panel i / kPanelRows (the
/// panels kPanelRows·K values apart), term k's kPanelRows values, row i % kPanelRows among them.
std::size_t a_at(const Packed& pk, std::size_t i, std::size_t k) {
  if (pk.a_layout == ALayout::Rows) return i * pk.K + k;
  return (i / kPanelRows * pk.K + k) * kPanelRows + i % kPanelRows;
}

/// Values of a packed A (Panels: the last panel takes kPanelRows rows, those past M never written or read).
std::size_t a_size(const Packed& pk) {
  return pk.a_layout == ALayout::Rows ? pk.M * pk.K : (pk.M + kPanelRows - 1) / kPanelRows * kPanelRows * pk.K;
}

/// The shape and kernel flags of a product's packed operands (no buffers yet).
Packed packed_shape(const Accumulation& a, const Plan& plan, Isa isa, std::size_t M, std::size_t N, std::size_t K) {
  Packed pk;
  pk.M = M;
  pk.N = N;
  pk.K = K;
  pk.panels = (N + kPanel - 1) / kPanel;
  pk.any_binary32 = plan.acc == Acc::Fp32 && a.fused && !plan.tile;
  pk.avx2 = isa == Isa::Avx2;
  return pk;
}

}  // namespace

void cast_values(const OperandCast& c, std::span<const double> src, std::span<double> dst) {
  round_array(*c.plan, c.mode, src, dst);
  if (c.flush)
    for (double& v : dst)
      if (std::fabs(v) < c.plan->min_normal) v = std::copysign(0.0, v);
  if (c.nan_to_inf)
    for (double& v : dst)
      if (std::isnan(v)) v = std::numeric_limits<double>::infinity();
}

namespace {

/// Where one run of packed values goes: value t to index t of each buffer that is not null.
struct Dest {
  float* f32 = nullptr;
  std::uint16_t* h16 = nullptr;
  std::uint32_t* h32 = nullptr;
};

/// True when the cast is round_to(fp32, NearestEven) alone (no flush, no NaN rule) under the default MXCSR:
/// numerics::round_array then takes the hardware conversions binary64 → binary32 → binary64 itself (NaN lanes by
/// round_to, which pack_run replaces by the quiet NaN either way; numerics/round_span.hpp), so the cast followed by
/// pack_run's conversion to binary32 gives the bits and the class of pack_run's conversion of the uncast value with
/// `rounds` (the cast value is a binary32 value, so its exactness test always passes).
bool plain_binary32_cast(const OperandCast& c) {
  return c.plan->format == formats::fp32 && c.mode == Rounding::NearestEven && !c.flush && !c.nan_to_inf &&
         default_mxcsr();
}

/// Classifies and converts n contiguous source values (pack_run) into n contiguous places of d (a transposed operand
/// is read along its stored rows into a tile on the stack and written from there: pack_a, pack_b).
int pack_to(const Packed& pk, const double* src, std::size_t n, Dest d, const OperandCast* cast) {
  // Binary32 panels only (a NaN's fp16 bits could depend on the payload that the cast leaves).
  if (cast != nullptr && d.h16 == nullptr && d.h32 == nullptr && plain_binary32_cast(*cast))
    return pk.avx2 ? avx2::pack_run(src, n, true, pk.any_binary32, d.f32, true)
                   : pack_run(src, n, true, pk.any_binary32, d.f32, nullptr, nullptr, true);
  if (cast != nullptr) {  // the run cast in per-thread scratch (in L1), then packed from there
    thread_local Reusable<double> cast_buf;
    double* r = cast_buf.get(n);
    cast_values(*cast, std::span<const double>(src, n), std::span<double>(r, n));
    return pack_to(pk, r, n, d, nullptr);
  }
  return pk.avx2 ? avx2::pack_run(src, n, true, pk.any_binary32, d.f32)
                 : pack_run(src, n, true, pk.any_binary32, d.f32, d.h16, d.h32);
}

/// n contiguous binary32 values as binary64 (exact), in the tier's lanes.
void widen_run(const Packed& pk, const float* src, double* dst, std::size_t n) {
  if (pk.avx2)
    avx2::widen(src, dst, n);
  else
    widen(src, dst, n);
}

/// Values widened per chunk of a binary32 run (on the stack: 2 KiB, in L1).
constexpr std::size_t kWidenChunk = 256;

/// pack_to of a binary32 source, every packed value and the class those of the widened operand: read directly, cast
/// in binary32 (binary32 panels), or else each chunk of the run widened (exactly) on the stack and packed from there
/// by the binary64 pack_to (pack_run's class is the lowest over its values, so the chunks' lowest is the run's).
int pack_to(const Packed& pk, const float* src, std::size_t n, Dest d, const OperandCast* cast) {
  // Read directly where the cast is none or the identity on binary32 values (plain_binary32_cast; binary32 panels
  // only, as there: a NaN's fp16 bits after the cast could depend on its payload), and, for the native fp16
  // attempt's fp16 panels, where an fp16 cast without flush meets a run of fp16 values without NaN: round_to
  // returns a value of the format in every mode and the NaN rule touches only NaNs, so the cast is the identity
  // there (binary32 panels take the binary32 cast below, which covers that case too). That run is packed as it is
  // first: class 2 (every value an fp16 value, NaN counted as one) and no NaN is exactly that case; otherwise the
  // cast below packs the run again, every place and the class.
  const bool f32_only = d.h16 == nullptr && d.h32 == nullptr;
  if (cast == nullptr || (f32_only && plain_binary32_cast(*cast)))
    return pk.avx2 ? avx2::pack_run(src, n, true, pk.any_binary32, d.f32)
                   : pack_run(src, n, true, pk.any_binary32, d.f32, d.h16, d.h32);
  if (!f32_only && !pk.avx2 && cast->plan->format == formats::fp16 && !cast->flush &&
      pack_run(src, n, true, pk.any_binary32, d.f32, d.h16, d.h32, false, true) == 2)
    return 2;
  if (fits_binary32(cast->plan->format)) {
    // A cast whose format fits binary32 (e.g. ane-fp16's fp32 weights cast to fp16): each chunk cast in binary32
    // on the stack (in L1) as cast_values casts the widened values — round_array's binary32 form is round_to on
    // the widened values, each result a binary32 value; then the flush and the NaN rule — and packed from there.
    // A NaN's payload may differ from the binary64 cast's: binary32 panels take it alike (pack_run writes every NaN
    // to them as the quiet NaN and classes it alike), but the native fp16 attempt's fp16 words could keep it, so
    // for those a chunk holding a NaN takes the widened path below.
    float w[kWidenChunk];
    double wd[kWidenChunk];
    int worst = 2;
    for (std::size_t c = 0; c < n; c += kWidenChunk) {
      const std::size_t m = std::min(kWidenChunk, n - c);
      const Dest dc{d.f32 ? d.f32 + c : nullptr, d.h16 ? d.h16 + c : nullptr, d.h32 ? d.h32 + c : nullptr};
      if (!f32_only && any_nan(std::span<const float>(src + c, m))) {
        widen_run(pk, src + c, wd, m);
        worst = std::min(worst, pack_to(pk, wd, m, dc, cast));
        continue;
      }
      const std::span<float> wc(w, m);
      round_array(*cast->plan, cast->mode, std::span<const float>(src + c, m), wc);
      if (cast->flush)
        for (float& v : wc)
          if (std::fabs(static_cast<double>(v)) < cast->plan->min_normal) v = std::copysign(0.0f, v);
      if (cast->nan_to_inf)
        for (float& v : wc)
          if (std::isnan(v)) v = std::numeric_limits<float>::infinity();
      worst = std::min(worst, pk.avx2 ? avx2::pack_run(w, m, true, pk.any_binary32, dc.f32)
                                      : pack_run(w, m, true, pk.any_binary32, dc.f32, dc.h16, dc.h32));
    }
    return worst;
  }
  double w[kWidenChunk];
  int worst = 2;
  for (std::size_t c = 0; c < n; c += kWidenChunk) {
    const std::size_t m = std::min(kWidenChunk, n - c);
    widen_run(pk, src + c, w, m);
    const Dest dc{d.f32 ? d.f32 + c : nullptr, d.h16 ? d.h16 + c : nullptr, d.h32 ? d.h32 + c : nullptr};
    worst = std::min(worst, pack_to(pk, w, m, dc, cast));
  }
  return worst;
}

/// pack_run of an initial C run (!inputs: its class, its binary32 values into f32 where not null), either width.
int pack_c(const Packed& pk, const double* src, std::size_t n, float* f32) {
  return pk.avx2 ? avx2::pack_run(src, n, false, false, f32) : pack_run(src, n, false, false, f32, nullptr, nullptr);
}
int pack_c(const Packed& pk, const float* src, std::size_t n, float* f32) {
  return pk.avx2 ? avx2::pack_run(src, n, false, false, f32) : pack_run(src, n, false, false, f32, nullptr, nullptr);
}

/// Packed runs per tile of a transposed operand's binary32 packing (pack_a, pack_b).
constexpr std::size_t kTransK = 16;

/// Columns packed per work item of a transposed B (a quarter panel).
constexpr std::size_t kPackCols = 16;

/// Calls f(t) for t in [0, n): work-shared among the threads of the enclosing parallel region (static schedule, no
/// closing barrier) when `shared`, all by the calling thread otherwise.
template <class F>
void for_items(bool shared, std::size_t n, F f) {
  if (!shared) {
    for (std::size_t t = 0; t < n; ++t) f(t);
    return;
  }
  const auto items = static_cast<std::ptrdiff_t>(n);
#pragma omp for schedule(static) nowait
  for (std::ptrdiff_t t = 0; t < items; ++t) f(static_cast<std::size_t>(t));
}

// 16 × 16 blocks of 32-bit words (binary32 values, fp16 word pairs) or 16-bit words (fp16 bits) transposed in
// registers, for the packs' write-outs: rows packed side by side on the stack, then written term by term.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12: the intrinsics' undefined pass-through operands
/// r[c] ← column c of the 16 × 16 block whose rows are r[0..15] (word c of each r[i], in order i): pairs of rows
/// interleaved by 32 and then 64 bits (4 × 4 blocks transposed within each 128-bit lane), then the lanes of four
/// vectors transposed. Moves bits only.
__attribute__((always_inline)) ROUNDOFF_AVX512 inline void transpose16_regs(__m512i r[16]) {
  __m512i t[16];
  for (std::size_t i = 0; i < 16; i += 2) {  // lane L: [a_4L b_4L a_4L+1 b_4L+1], [a_4L+2 b_4L+2 ..]
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[g][m] (in r[4g + m]): lane L holds column 4L + m of rows 4g .. 4g + 3.
  for (std::size_t g = 0; g < 4; ++g) {
    const __m512i* a = t + 4 * g;
    r[4 * g] = _mm512_unpacklo_epi64(a[0], a[2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(a[0], a[2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(a[1], a[3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(a[1], a[3]);
  }
  for (std::size_t m = 0; m < 4; ++m) {  // column 4L + m: lane L of u[0][m] .. u[3][m]
    const __m512i x0 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x44), x1 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xEE);
    const __m512i x2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x44);
    const __m512i x3 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xEE);
    t[m] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    t[4 + m] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    t[8 + m] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    t[12 + m] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
  for (std::size_t c = 0; c < 16; ++c) r[c] = t[c];
}

/// dst[c·ldd + i] = src[i·lds + c] for i < rows (≤ 16), c < 16: 16 terms of `rows` packed rows written term by
/// term (each term's `rows` words adjacent; words past `rows` in dst untouched).
template <class W>
ROUNDOFF_AVX512 void transpose_rows16(const W* src, std::size_t lds, std::size_t rows, W* dst, std::size_t ldd) {
  static_assert(sizeof(W) == 4);
  __m512i r[16];
  for (std::size_t i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(src + i * lds) : _mm512_setzero_si512();
  transpose16_regs(r);
  const auto live = static_cast<__mmask16>((1u << rows) - 1u);
  for (std::size_t c = 0; c < 16; ++c) _mm512_mask_storeu_epi32(dst + c * ldd, live, r[c]);
}

/// dst[c·ldd + i] = src[i·lds + c] for i, c < 16, 16-bit words (widened to 32 bits in registers and narrowed back).
ROUNDOFF_AVX512 void transpose16_u16(const std::uint16_t* src, std::size_t lds, std::uint16_t* dst, std::size_t ldd) {
  __m512i r[16];
  for (std::size_t i = 0; i < 16; ++i)
    r[i] = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * lds)));
  transpose16_regs(r);
  for (std::size_t c = 0; c < 16; ++c)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ldd), _mm512_cvtepi32_epi16(r[c]));
}
#pragma GCC diagnostic pop

/// Terms per run of a stored row of A packed in panels (pack_a_panels).
constexpr std::size_t kPanelRun = 128;
/// Rows per run of a transposed A packed in panels (pack_a_panels).
constexpr std::size_t kPanelRunRows = 8 * kPanelRows;

/// pack_a in the panel layout: each stored row's runs of kPanelRun terms packed side by side into a tile on the
/// stack (the kPanelRows rows of a panel), then written term by term (kPanelRows adjacent values); a transposed A
/// (A(i, k) = data[k·ld + i]) in runs of up to kPanelRunRows rows of one term, each panel's part written in place.
/// The runs are calls of pack_to, so every value and the class are those of the row layout's packing.
template <class MA>
int pack_a_panels(Packed& pk, MA A, const OperandCast* cast_a, bool shared) {
  const std::size_t M = pk.M, K = pk.K;
  int worst = 2;
  if (!A.transposed) {
    for_items(shared, (M + kPanelRows - 1) / kPanelRows, [&](std::size_t q) {
      const std::size_t i0 = q * kPanelRows, m = std::min(kPanelRows, M - i0);
      float tf[kPanelRows * kPanelRun];
      std::uint32_t th[kPanelRows * kPanelRun];
      for (std::size_t k0 = 0; k0 < K; k0 += kPanelRun) {
        const std::size_t kn = std::min(kPanelRun, K - k0);
        for (std::size_t r = 0; r < m; ++r) {
          const Dest d{pk.A ? tf + r * kPanelRun : nullptr, nullptr, pk.Ah ? th + r * kPanelRun : nullptr};
          worst = std::min(worst, pack_to(pk, A.data + (i0 + r) * A.ld + k0, kn, d, cast_a));
        }
        const std::size_t at = a_at(pk, i0, k0);
        std::size_t k16 = 0;  // 16 terms at a time in registers (AVX-512), the rest one by one
        if (!pk.avx2)
          for (; k16 + 16 <= kn; k16 += 16) {
            if (pk.A)
              transpose_rows16(reinterpret_cast<const std::uint32_t*>(tf) + k16, kPanelRun, m,
                               reinterpret_cast<std::uint32_t*>(pk.A) + at + k16 * kPanelRows, kPanelRows);
            if (pk.Ah) transpose_rows16(th + k16, kPanelRun, m, pk.Ah + at + k16 * kPanelRows, kPanelRows);
          }
        if (pk.A)
          for (std::size_t kk = k16; kk < kn; ++kk)
            for (std::size_t r = 0; r < m; ++r) pk.A[at + kk * kPanelRows + r] = tf[r * kPanelRun + kk];
        if (pk.Ah)
          for (std::size_t kk = k16; kk < kn; ++kk)
            for (std::size_t r = 0; r < m; ++r) pk.Ah[at + kk * kPanelRows + r] = th[r * kPanelRun + kk];
      }
    });
  } else {
    for_items(shared, (M + kPanelRunRows - 1) / kPanelRunRows, [&](std::size_t g) {
      const std::size_t i0 = g * kPanelRunRows, n = std::min(kPanelRunRows, M - i0);
      constexpr std::size_t kLine = 64 / sizeof(*A.data);
      float tf[kPanelRunRows];
      std::uint32_t th[kPanelRunRows];
      const Dest d{pk.A ? tf : nullptr, nullptr, pk.Ah ? th : nullptr};
      for (std::size_t k = 0; k < K; ++k) {
        if (k + 1 < K)  // the next term's run, one ahead of the hardware's streams
          for (std::size_t l = 0; l < n; l += kLine) __builtin_prefetch(A.data + (k + 1) * A.ld + i0 + l);
        worst = std::min(worst, pack_to(pk, A.data + k * A.ld + i0, n, d, cast_a));
        for (std::size_t r0 = 0; r0 < n; r0 += kPanelRows) {
          const std::size_t m = std::min(kPanelRows, n - r0), at = a_at(pk, i0 + r0, k);
          if (pk.A) std::copy_n(tf + r0, m, pk.A + at);
          if (pk.Ah) std::copy_n(th + r0, m, pk.Ah + at);
        }
      }
    });
  }
  return worst;
}

/// Packs rows [0, M) of A into the buffers that are allocated, casting each value by cast_a where not null and
/// classifying it (see pack_run); returns the lowest class. A transposed A is read along its stored rows (runs of up
/// to kPanel rows) and written into the packed layout. `shared`: called by every thread of a parallel region,
/// the loops work-shared (see for_items); otherwise the calling thread packs everything. The row layout holds
/// binary32 values only (the tile stage and gemm_ranged; the native fp16 attempt always packs panels).
template <class MA>
int pack_a(Packed& pk, MA A, const OperandCast* cast_a, bool shared) {
  if (pk.a_layout == ALayout::Panels) return pack_a_panels(pk, A, cast_a, shared);
  const std::size_t M = pk.M, K = pk.K;
  assert(pk.Ah == nullptr);
  int worst = 2;
  if (!A.transposed) {
    for_items(shared, M, [&](std::size_t i) {
      worst = std::min(worst, pack_to(pk, A.data + i * A.ld, K, Dest{pk.A + i * K}, cast_a));
    });
  } else {  // A(i, k) = data[k·ld + i]: row k of the stored matrix holds rows i of A
    // Binary32 panels: kTransK runs of a block packed side by side into a tile, then written row by row (kTransK
    // consecutive floats of each packed row, one cache line), instead of one float per row K floats apart (a
    // stride of 2 KiB at K = 512 maps every write of a run to the same few L1 sets). The runs are the same calls
    // of pack_to, so the values and the class are those of writing each value K floats apart.
    for_items(shared, (M + kPanel - 1) / kPanel, [&](std::size_t bb) {
      const std::size_t i0 = bb * kPanel, n = std::min(kPanel, M - i0);
      float t[kTransK * kPanel];
      for (std::size_t k0 = 0; k0 < K; k0 += kTransK) {
        const std::size_t kn = std::min(kTransK, K - k0);
        for (std::size_t kk = 0; kk < kn; ++kk) {
          if (k0 + kTransK + kk < K)  // the next block's run of this row, one run ahead of the hardware's streams
            for (std::size_t l = 0; l < n; l += 16) __builtin_prefetch(A.data + (k0 + kTransK + kk) * A.ld + i0 + l);
          worst = std::min(worst, pack_to(pk, A.data + (k0 + kk) * A.ld + i0, n, Dest{t + kk * kPanel}, cast_a));
        }
        for (std::size_t i = 0; i < n; ++i) {
          float* row = pk.A + (i0 + i) * K + k0;
          for (std::size_t kk = 0; kk < kn; ++kk) row[kk] = t[kk * kPanel + i];
        }
      }
    });
  }
  return worst;
}

/// Packs the K×kPanel panels of B as pack_a packs A (a transposed B read along its stored rows, i.e. the columns of
/// B, in runs of up to 64 terms of 16 columns side by side, then written term by term); returns the lowest class.
template <class MB>
int pack_b(Packed& pk, MB B, const OperandCast* cast_b, bool shared) {
  const std::size_t N = pk.N, K = pk.K;
  auto b_dest = [&](std::size_t at) {
    return Dest{pk.B ? pk.B + at : nullptr, pk.Bh ? pk.Bh + at : nullptr, nullptr};
  };
  int worst = 2;
  if (!B.transposed) {  // row k of B read in order, its kPanel-column segments written to every panel
    for_items(shared, K, [&](std::size_t k) {
      for (std::size_t p = 0; p < pk.panels; ++p) {
        const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0), at = (p * K + k) * kPanel;
        worst = std::min(worst, pack_to(pk, B.data + k * B.ld + j0, jn, b_dest(at), cast_b));
        for (std::size_t c = jn; c < kPanel; ++c) {
          if (pk.B) pk.B[at + c] = 0.0f;
          if (pk.Bh) pk.Bh[at + c] = 0;
        }
      }
    });
  } else {  // B(k, j) = data[j·ld + k]: row j of the stored matrix is column j of B
    // Runs of kTransB values of the work item's kPackCols columns packed side by side into a tile (binary32, and
    // the fp16 words beside them for the native fp16 attempt), then written k by k (kPackCols consecutive values,
    // one cache line or half of one) instead of one value every kPanel; the same values and class as packing each
    // column's K values scattered kPanel apart (pack_to's class is the lowest of its runs' and the cast acts per
    // value: tests/accumulation/gemm_binary32_operands_test.cpp holds the casts to the definition).
    constexpr std::size_t q_per_panel = kPanel / kPackCols, kTransB = 64;
    for_items(shared, pk.panels * q_per_panel, [&](std::size_t idx) {
      const std::size_t p = idx / q_per_panel, q = idx % q_per_panel;
      const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
      float tf[kPackCols * kTransB];
      std::uint16_t th[kPackCols * kTransB];
      for (std::size_t k0 = 0; k0 < K; k0 += kTransB) {
        const std::size_t kn = std::min(kTransB, K - k0);
        for (std::size_t cc = 0; cc < kPackCols; ++cc) {
          const std::size_t c = q * kPackCols + cc;
          if (c < jn) {
            if (k0 + kTransB < K)  // the next block's run of this column (see pack_a)
              for (std::size_t l = 0; l < std::min(kTransB, K - k0 - kTransB); l += 16)
                __builtin_prefetch(B.data + (j0 + c) * B.ld + k0 + kTransB + l);
            const Dest t{pk.B ? tf + cc * kTransB : nullptr, pk.Bh ? th + cc * kTransB : nullptr, nullptr};
            worst = std::min(worst, pack_to(pk, B.data + (j0 + c) * B.ld + k0, kn, t, cast_b));
          } else {
            std::fill_n(tf + cc * kTransB, kn, 0.0f);
            std::fill_n(th + cc * kTransB, kn, std::uint16_t{0});
          }
        }
        std::size_t k16 = 0;  // 16 terms at a time in registers (AVX-512), the rest one by one
        if (!pk.avx2)
          for (; k16 + 16 <= kn; k16 += 16) {
            const std::size_t at = (p * K + k0 + k16) * kPanel + q * kPackCols;
            if (pk.B)
              transpose_rows16(reinterpret_cast<const std::uint32_t*>(tf) + k16, kTransB, kPackCols,
                               reinterpret_cast<std::uint32_t*>(pk.B) + at, kPanel);
            if (pk.Bh) transpose16_u16(th + k16, kTransB, pk.Bh + at, kPanel);
          }
        for (std::size_t kk = k16; kk < kn; ++kk) {
          const std::size_t at = (p * K + k0 + kk) * kPanel + q * kPackCols;
          if (pk.B)
            for (std::size_t cc = 0; cc < kPackCols; ++cc) pk.B[at + cc] = tf[cc * kTransB + kk];
          if (pk.Bh)
            for (std::size_t cc = 0; cc < kPackCols; ++cc) pk.Bh[at + cc] = th[cc * kTransB + kk];
        }
      }
    });
  }
  return worst;
}

/// pack_a and pack_b; the lower of their classes.
template <class MA, class MB>
int pack_operands(Packed& pk, MA A, MB B, const OperandCast* cast_a, const OperandCast* cast_b, bool shared) {
  const int wa = pack_a(pk, A, cast_a, shared);
  return std::min(wa, pack_b(pk, B, cast_b, shared));
}

// ---------------------------------------------------------------------------------------------------------
// B-operand pack cache (see PackCache in the header).

/// What a packed B depends on besides its values: where and how it is read, its entry cast, and how it is packed.
struct BKey {
  const std::byte* data;  ///< B's first element (binary64 or binary32: `binary32`)
  bool binary32;
  std::size_t ld, K, N;
  bool transposed;
  bool cast;
  Format cast_format;
  Rounding cast_mode;
  bool cast_nan_to_inf;
  bool cast_flush;
  Acc acc;
  bool tile, any_binary32, avx2;
  std::uint64_t version;
  bool operator==(const BKey& o) const {
    return data == o.data && binary32 == o.binary32 && ld == o.ld && K == o.K && N == o.N &&
           transposed == o.transposed && cast == o.cast &&
           (!cast || (cast_format == o.cast_format && cast_mode == o.cast_mode &&
                      cast_nan_to_inf == o.cast_nan_to_inf && cast_flush == o.cast_flush)) &&
           acc == o.acc && tile == o.tile && any_binary32 == o.any_binary32 && avx2 == o.avx2 && version == o.version;
  }
};

/// One cached packed B (binary32 panels, the layout pack_b writes) and its class (1 or 2).
struct PackedB {
  BKey key;
  std::unique_ptr<float[]> panels;
  std::size_t floats = 0;
  int worst = 0;
};

/// A registered range, in bytes (binary64 or binary32 elements).
struct ImmutableRange {
  const std::byte* data;
  std::size_t bytes;
  std::uint64_t version;
  bool holds(const std::byte* p, std::size_t n) const { return p >= data && p + n <= data + bytes; }
};

const std::byte* bytes_of(const void* p) { return static_cast<const std::byte*>(p); }

}  // namespace

/// The registry and the cache, behind one mutex (looked up once per gemm_fast call, outside its parallel region).
struct PackCache::Impl {
  explicit Impl(std::size_t capacity_bytes) : capacity(capacity_bytes) {}
  std::mutex mutex;
  /// The most bytes of binary32 panels held, in entries and in spare buffers each (PackCache's constructor).
  std::size_t capacity;
  std::vector<ImmutableRange> ranges;
  std::vector<std::shared_ptr<const PackedB>> entries;
  std::size_t bytes = 0;
  std::uint64_t hits = 0, misses = 0;
  /// Derived operands (find_derived): made from [data, data + n) under `version`.
  struct Derived {
    const double* data;
    std::size_t n;
    std::uint64_t version;
    std::string tag;
    std::shared_ptr<const std::vector<double>> values;
  };
  std::vector<Derived> derived;
  std::size_t derived_bytes = 0;
  std::uint64_t derived_hits = 0;

  /// Panel buffers of dropped entries, kept for the next entries of the same size (a trainer re-registers its
  /// weights every update and packs the same shapes again): a fresh buffer would be zeroed and page-faulted in on
  /// every update. Every element of a buffer is written by pack_b before it is read (the layout's zero padding
  /// included), so a reused buffer gives the bits of a fresh one. At most `capacity` bytes in all.
  std::vector<std::pair<std::unique_ptr<float[]>, std::size_t>> spare;
  std::size_t spare_bytes = 0;

  /// A buffer of `floats` floats: a spare one of exactly that size, or a new one.
  std::unique_ptr<float[]> take_panels(std::size_t floats) {
    for (std::size_t i = 0; i < spare.size(); ++i)
      if (spare[i].second == floats) {
        std::unique_ptr<float[]> p = std::move(spare[i].first);
        spare.erase(spare.begin() + static_cast<std::ptrdiff_t>(i));
        spare_bytes -= floats * sizeof(float);
        return p;
      }
    return std::unique_ptr<float[]>(new float[floats]);
  }

  /// Drops the entries made from inside [data, data + n) (under any version). An entry no call holds any more
  /// (only the cache owns it, which the mutex held here makes certain: calls take entries under it) gives its
  /// panels to `spare`.
  void drop_range(const std::byte* data, std::size_t n);
  /// The version of the registered range holding the n bytes at data, if any.
  std::optional<std::uint64_t> version_of(const void* data, std::size_t n) const {
    for (const ImmutableRange& r : ranges)
      if (r.holds(bytes_of(data), n)) return r.version;
    return std::nullopt;
  }
  void register_range(const void* data, std::size_t bytes, std::uint64_t version);
  void unregister_range(const void* data);
};

namespace {

/// The stored extent of B in bytes: the elements from B.data that a K×N product reads.
template <class MB>
std::size_t b_extent(MB B, std::size_t K, std::size_t N) {
  return (B.transposed ? (N - 1) * B.ld + K : (K - 1) * B.ld + N) * sizeof(*B.data);
}

/// For a B inside a registered range: the cached pack of the same key (a hit), or a fresh entry to pack into and
/// insert afterwards (a miss with room left); both null for any other B.
template <class MB>
std::pair<std::shared_ptr<const PackedB>, std::shared_ptr<PackedB>> cache_lookup(PackCache::Impl& pc, MB B,
                                                                                 const OperandCast* cast_b,
                                                                                 const Plan& plan, const Packed& pk) {
  const std::lock_guard<std::mutex> lock(pc.mutex);
  if (pc.ranges.empty()) return {};
  const std::size_t extent = b_extent(B, pk.K, pk.N);
  for (const ImmutableRange& r : pc.ranges) {
    if (!r.holds(bytes_of(B.data), extent)) continue;
    const BKey key{bytes_of(B.data),
                   std::is_same_v<MB, ConstMatrix32>,
                   B.ld,
                   pk.K,
                   pk.N,
                   B.transposed,
                   cast_b != nullptr,
                   cast_b ? cast_b->plan->format : formats::fp64,
                   cast_b ? cast_b->mode : Rounding::NearestEven,
                   cast_b ? cast_b->nan_to_inf : false,
                   cast_b ? cast_b->flush : false,
                   plan.acc,
                   plan.tile,
                   pk.any_binary32,
                   pk.avx2,
                   r.version};
    for (const auto& e : pc.entries)
      if (e->key == key) {
        ++pc.hits;
        return {e, nullptr};
      }
    ++pc.misses;
    const std::size_t floats = pk.panels * pk.K * kPanel;
    if (pc.bytes + floats * sizeof(float) > pc.capacity) return {};
    auto fresh = std::make_shared<PackedB>();
    fresh->key = key;
    fresh->panels = pc.take_panels(floats);
    fresh->floats = floats;
    pc.bytes += floats * sizeof(float);  // reserved now, released if it is not inserted
    return {nullptr, std::move(fresh)};
  }
  return {};
}

/// Inserts a pack made by cache_lookup's miss when B was accepted (class > 0), its range is still registered
/// under the key's version and no other thread inserted the same key meanwhile; otherwise releases its bytes.
void cache_insert(PackCache::Impl& pc, std::shared_ptr<PackedB> fresh, int worst_b) {
  const std::lock_guard<std::mutex> lock(pc.mutex);
  const BKey& key = fresh->key;
  const bool registered = std::any_of(pc.ranges.begin(), pc.ranges.end(), [&](const ImmutableRange& r) {
    return r.version == key.version && r.holds(key.data, 1);
  });
  const bool present =
      std::any_of(pc.entries.begin(), pc.entries.end(), [&](const auto& e) { return e->key == key; });
  if (worst_b == 0 || !registered || present) {
    pc.bytes -= fresh->floats * sizeof(float);
    return;
  }
  fresh->worst = worst_b;
  pc.entries.push_back(std::move(fresh));
}

/// The wide fp32 micro-tile of a tier that has none (the AVX2 tier: 64 columns of 8 lanes would not fit its 16
/// registers).
constexpr void (*kNoWideRows)(std::size_t, const float*, std::size_t, const float*, std::size_t, std::size_t, float*,
                              std::size_t, ALayout) = nullptr;

/// Rows × jn columns of one panel through a tier's kernels (tile_rows over kCols columns at a time; the sequential
/// fp32 accumulator's wide micro-tiles over the whole panel where the tier has them and jn needs more than one
/// kCols call; or tile_ane_rows over kAneCols for the tile stage, whose A is packed in rows), the columns past jn
/// computed on the panel's zero padding and never stored.
template <std::size_t kCols, std::size_t kAneCols, class Rows, class AneRows, class WideRows>
void tier_rows(const Plan& plan, std::size_t rows, const float* Ap, std::size_t lda, ALayout layout, const float* Bp,
               std::size_t len, std::size_t jn, float* tile, std::int64_t& overflows, AneProbe& probe, Rows tile_rows,
               AneRows tile_ane_rows, WideRows wide_rows) {
  if (plan.tile) {
    assert(layout == ALayout::Rows);
    for (std::size_t c = 0; c < kPanel && c < jn; c += kAneCols)
      tile_ane_rows(rows, Ap, lda, Bp + c, kPanel, len, tile + c, kPanel, overflows, probe, plan.flush);
  } else if (wide_rows && plan.acc == Acc::Fp32 && plan.block == 0 && jn > kPanel - kCols) {
    static_assert(avx512::kWideCols == kPanel);
    wide_rows(rows, Ap, lda, Bp, kPanel, len, tile, kPanel, layout);
  } else {
    for (std::size_t c = 0; c < kPanel && c < jn; c += kCols)
      tile_rows(plan.acc, rows, Ap, lda, Bp + c, kPanel, len, plan.block, tile + c, kPanel, layout);
  }
}

/// Rows [i, i + rows) of panel p of C into tile (rows × kPanel, running sums in/out): the terms k0 .. k0+len-1
/// of the packed operands (packed A columns and B rows k0..), counted from k0 (blocks and tiles start there).
/// Panels: the rows lie in one A panel. probe: the tile-stage kernels' choice of test, kept across one GEMM's rows.
void kernel_rows(const Plan& plan, const Packed& pk, bool native, std::size_t rows, std::size_t i, std::size_t k0,
                 std::size_t len, std::size_t p, std::size_t jn, float* tile, std::int64_t& overflows,
                 AneProbe& probe) {
  const std::size_t K = pk.K, a0 = a_at(pk, i, k0), b0 = (p * K + k0) * kPanel;
  const ALayout la = pk.a_layout;
  assert(la == ALayout::Rows || i % kPanelRows + rows <= kPanelRows);
  if (native) {
    tile_ph_rows(rows, pk.Ah + a0, K, pk.Bh + b0, len, plan.block, tile, kPanel, la);
  } else if (pk.avx2) {
    tier_rows<avx2::kCols, avx2::kAneCols>(plan, rows, pk.A + a0, K, la, pk.B + b0, len, jn, tile, overflows, probe,
                                           avx2::tile_rows, avx2::tile_ane_rows, kNoWideRows);
  } else {
    tier_rows<avx512::kCols, avx512::kAneCols>(plan, rows, pk.A + a0, K, la, pk.B + b0, len, jn, tile, overflows,
                                               probe, avx512::tile_rows, avx512::tile_ane_rows,
                                               avx512::tile_rows_fp32_wide);
  }
}

/// Where an output's running sum starts: the sum alone (−0, the identity of IEEE addition), C's value, or +0
/// for a C known to hold +0 everywhere.
enum class Start { Sum, C, PositiveZero };

/// tile[0, n) = v (n a multiple of 16) in whole 64-byte stores: the AVX-512 kernels load the running sums as
/// vectors, and a vector load of narrower stores (std::fill's, in the baseline's 16-byte registers) waits for them
/// to retire instead of taking their data forwarded.
ROUNDOFF_AVX512 void fill_tile_avx512(float* tile, std::size_t n, float v) {
  const __m512 x = _mm512_set1_ps(v);
  for (std::size_t i = 0; i < n; i += 16) _mm512_storeu_ps(tile + i, x);
}
/// The running sums' fill for the tier's kernels (the AVX2 tier's 32-byte loads take std::fill's stores as they come).
void fill_tile(const Packed& pk, float* tile, std::size_t n, float v) {
  if (pk.avx2)
    std::fill(tile, tile + n, v);
  else
    fill_tile_avx512(tile, n, v);
}

/// dst[0, n) = src[0, n) for n ≤ kPanel (src a tile row of kPanel values), in 64-byte vectors.
ROUNDOFF_AVX512 void copy_row(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, live, _mm512_loadu_ps(src + i));
  }
}

/// Terms per pass over a panel when K is long (split_terms): with K = 16,893 (E11's classifier, bwd-data) a panel's
/// B columns are 4.3 MB and every micro-tile of kMr rows streamed all of them from memory; in passes of ≈ kKc terms
/// the pass's B rows (kKc × kPanel binary32, 128 KiB) and the row block's A columns stay in L2 while the kMb rows
/// of a row block read them. Splitting K is exact: between passes a row's whole state is its running sum, a value
/// of the accumulator's format that the kernels store in binary32 and load back unchanged, provided each pass
/// ends where a block (blocked plans) or a tile (the tile stage) ends, as with gemm_ranged's `period`.
constexpr std::size_t kKc = 512;
constexpr std::size_t kMb = 5 * kMr;  ///< rows per row block of the split passes (their running sums: 15 KiB)

/// The terms of one pass (a multiple of the plan's period), or K when K is short enough to take in one.
std::size_t split_terms(const Plan& plan, std::size_t K) {
  const std::size_t period = plan.tile ? kTile : plan.block != 0 ? plan.block : 1;
  const std::size_t kc = (kKc + period - 1) / period * period;
  return K > 2 * kc ? kc : K;
}

/// The running sums' start for `rows` rows of panel p (row i first) in tile: +0 or −0, or C's values.
template <class TC>
void start_sums(const Packed& pk, Start start, const TC* C, std::size_t ldc, std::size_t i, std::size_t rows,
                std::size_t j0, std::size_t jn, float* tile) {
  // Running sums: C's rows (binary32 values, checked while packing), +0 or −0; lanes beyond them the same
  // (computed, never stored).
  const float zero = start == Start::PositiveZero ? 0.0f : -0.0f;
  fill_tile(pk, tile, rows * kPanel, zero);
  if (start == Start::C)
    for (std::size_t r = 0; r < rows; ++r) (void)pack_c(pk, C + (i + r) * ldc + j0, jn, tile + r * kPanel);
}

/// Asks for C's lines of rows i .. i + rows − 1, columns j0 .. j0 + jn − 1, for writing, before the kernels that
/// compute them run: a column strip of C is a new line every 64 floats of each row, which the hardware does not
/// prefetch, and store_sums' stores missing them would hold the store buffer (and the next tile's fill) behind
/// them. A hint only: no value depends on it.
template <class TC>
void prefetch_c_strip(TC* C, std::size_t ldc, std::size_t i, std::size_t rows, std::size_t j0, std::size_t jn) {
  constexpr std::size_t kLine = 64 / sizeof(TC);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < jn; c += kLine) __builtin_prefetch(C + (i + r) * ldc + j0 + c, 1, 3);
}

/// copy_row with the StoreScan of the stored values: `nan` gets the lanes holding a NaN; with `test16`, `not16`
/// those that the round trip binary32 → fp16 (nearest even) → binary32 changes or that hold a NaN
/// (binary16_values' test, NaN not accepted: NEQ unordered).
ROUNDOFF_AVX512 void copy_row_scanned(const float* src, float* dst, std::size_t n, bool test16, __mmask16& nan,
                                      __mmask16& not16) {
  for (std::size_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    const __m512 v = _mm512_loadu_ps(src + i);
    _mm512_mask_storeu_ps(dst + i, live, v);
    nan |= _mm512_mask_cmp_ps_mask(live, v, v, _CMP_UNORD_Q);
    if (test16) {
      const __m512 back = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      not16 |= _mm512_mask_cmp_ps_mask(live, back, v, _CMP_NEQ_UQ);
    }
  }
}

/// True when every result of `plan` is an fp16 value (or NaN): the sequential fp16 accumulators, whose running
/// sums are rounded to fp16 (flushed, for Fp16Ftz) at every term, K ≥ 1. The StoreScan then needs no conversion
/// test: its fp16_values is its nan_free.
bool results_fp16(const Plan& plan) {
  return (plan.acc == Acc::Fp16 || plan.acc == Acc::Fp16Ftz) && plan.block == 0 && !plan.tile;
}

/// C's rows i .. i + rows − 1 of panel p from the finished running sums in tile; with `scan` (a binary32 C), what
/// the stored values hold and-ed into it (the conversion test skipped once a row has failed it, or for a plan
/// whose results are fp16 values by construction: `fp16`).
template <class TC>
void store_sums(const Packed& pk, TC* C, std::size_t ldc, std::size_t i, std::size_t rows, std::size_t j0,
                std::size_t jn, const float* tile, StoreScan* scan, bool fp16) {
  if constexpr (std::is_same_v<TC, float>) {
    if (scan != nullptr && !pk.avx2) {
      __mmask16 nan = 0, not16 = 0;
      const bool test16 = scan->fp16_values && !fp16;
      for (std::size_t r = 0; r < rows; ++r)
        copy_row_scanned(tile + r * kPanel, C + (i + r) * ldc + j0, jn, test16, nan, not16);
      scan->nan_free = scan->nan_free && nan == 0;
      scan->fp16_values = scan->fp16_values && nan == 0 && not16 == 0;
      return;
    }
    if (scan != nullptr) {  // the AVX2 tier: numerics' scans of each stored row (in L1)
      const KernelOptions avx2{true, Isa::Avx2};
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const float> row(tile + r * kPanel, jn);
        std::copy_n(row.data(), jn, C + (i + r) * ldc + j0);
        scan->nan_free = scan->nan_free && !any_nan(row, avx2);
        if (fp16) scan->fp16_values = scan->fp16_values && scan->nan_free;
        else scan->fp16_values = scan->fp16_values && binary16_values(row, false, avx2);
      }
      return;
    }
  }
  for (std::size_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<TC, float>) {
      if (pk.avx2)
        std::copy_n(tile + r * kPanel, jn, C + (i + r) * ldc + j0);
      else
        copy_row(tile + r * kPanel, C + (i + r) * ldc + j0, jn);
    } else if (pk.avx2)
      avx2::widen(tile + r * kPanel, C + (i + r) * ldc + j0, jn);
    else
      widen(tile + r * kPanel, C + (i + r) * ldc + j0, jn);
  }
}

/// Rows [i_begin, i_end) × panels [p_begin, p_end) of C from the packed operands, panel by panel, in micro-tiles of
/// kMr rows (for a long K, row blocks of kMb rows in passes of split_terms terms). Adds the tile overflows the
/// tile-stage kernel counts to `overflows`.
///
/// Start::PositiveZero starts every running sum at +0, C's value, without reading C: the kernels take whatever
/// the tile holds as the running sums (Start::C loads C's values there), so this is the sum from C itself.
template <class TC>
void compute_rows(const Plan& plan, const Packed& pk, bool native, Start start, TC* C, std::size_t ldc,
                  std::size_t i_begin, std::size_t i_end, std::size_t p_begin, std::size_t p_end,
                  std::int64_t& overflows, StoreScan* scan) {
  const std::size_t N = pk.N, K = pk.K, kc = split_terms(plan, K);
  const bool fp16 = results_fp16(plan);
  AneProbe probe;
  if (kc < K) {
    alignas(64) float sums[kMb * kPanel];
    for (std::size_t p = p_begin; p < p_end; ++p) {
      const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
      for (std::size_t ib = i_begin; ib < i_end; ib += kMb) {
        const std::size_t ie = std::min(i_end, ib + kMb);
        start_sums(pk, start, C, ldc, ib, ie - ib, j0, jn, sums);
        for (std::size_t k0 = 0; k0 < K; k0 += kc)
          for (std::size_t i = ib; i < ie; i += kMr)
            kernel_rows(plan, pk, native, std::min(kMr, ie - i), i, k0, std::min(kc, K - k0), p, jn,
                        sums + (i - ib) * kPanel, overflows, probe);
        store_sums(pk, C, ldc, ib, ie - ib, j0, jn, sums, scan, fp16);
      }
    }
    return;
  }
  alignas(64) float tile[kMr * kPanel];
  for (std::size_t p = p_begin; p < p_end; ++p) {
    const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
    for (std::size_t i = i_begin; i < i_end; i += kMr) {
      const std::size_t rows = std::min(kMr, i_end - i);
      start_sums(pk, start, C, ldc, i, rows, j0, jn, tile);
      prefetch_c_strip(C, ldc, i, rows, j0, jn);
      kernel_rows(plan, pk, native, rows, i, 0, K, p, jn, tile, overflows, probe);
      store_sums(pk, C, ldc, i, rows, j0, jn, tile, scan, fp16);
    }
  }
}

/// True when every element of p[0, n) is +0 (its encoding is all zero bits): binary32 rows by numerics'
/// vector scan under the GEMM's instruction-set limit.
bool all_positive_zero(const double* p, std::size_t n, const KernelOptions&) {
  std::uint64_t any = 0;
  for (std::size_t i = 0; i < n; ++i) any |= std::bit_cast<std::uint64_t>(p[i]);
  return any == 0;
}
bool all_positive_zero(const float* p, std::size_t n, const KernelOptions& opts) {
  return numerics::all_positive_zero(std::span<const float>(p, n), opts);
}

/// Overflow events of one output, replayed step by step with the correctly rounded scalar operations and
/// counted as numerics::gemm counts them (IEEE 754 §7.4): operands finite and the result rounded with an
/// unbounded exponent range above max_finite. For round-to-nearest in the (non-saturating) formats of these
/// kernels that is exactly: finite operands and a result that is ±inf.
template <class MA, class MB>
std::int64_t replay_overflows(const Plan& plan, std::size_t i, std::size_t j, std::size_t K, MA A, MB B,
                              bool accumulate, double c0) {
  const RoundingPlan acc(plan.acc == Acc::Fp16 || plan.acc == Acc::Fp16Ftz ? formats::fp16
                         : plan.acc == Acc::Bf16                            ? formats::bf16
                                                 : formats::fp32);
  const RoundingPlan outer(formats::fp32);
  const Rounding rn = Rounding::NearestEven;
  std::int64_t n = 0;
  auto partial = [&](std::size_t k0, std::size_t k1, bool has_init, double init) {
    double s = init;
    bool have = has_init;
    for (std::size_t k = k0; k < k1; ++k) {
      const double x = A(i, k), y = B(k, j);
      const double r = have ? numerics::fma(acc, rn, x, y, s) : numerics::mul(acc, rn, x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y) && (!have || std::isfinite(s))) ++n;
      s = plan.acc == Acc::Fp16Ftz && std::fabs(r) < 0x1p-14 ? std::copysign(0.0, r) : r;
      have = true;
    }
    return s;
  };
  if (plan.block == 0) {
    (void)partial(0, K, accumulate, c0);
    return n;
  }
  double total = c0;
  bool have = accumulate;
  for (std::size_t k0 = 0; k0 < K; k0 += plan.block) {
    const double p = partial(k0, std::min(K, k0 + plan.block), false, 0.0);
    const double r = have ? numerics::add(outer, rn, total, p) : numerics::round_to(outer, rn, p);
    if (std::isinf(r) && std::isfinite(p) && (!have || std::isfinite(total))) ++n;
    total = r;
    have = true;
  }
  return n;
}

/// Overflow events of the whole product. An event makes a partial sum ±inf, and inf/NaN are absorbing (in the
/// running sum, in a block sum and in the outer total that receives it), so only outputs that end non-finite
/// can have had one; those are replayed. The tile-stage kernel counts its tile overflows itself; its fp32
/// accumulator never overflows (see tile_ane).
template <class MA, class MB, class TC>
std::int64_t count_overflows(const Plan& plan, const Packed& pk, MA A, MB B, const TC* C, std::size_t ldc,
                             bool accumulate, const std::vector<double>& c_initial) {
  std::int64_t n = 0;
  if (plan.tile) return n;
  for (std::size_t i = 0; i < pk.M; ++i)
    for (std::size_t j = 0; j < pk.N; ++j)
      if (!std::isfinite(C[i * ldc + j]))
        n += replay_overflows(plan, i, j, pk.K, A, B, accumulate, accumulate ? c_initial[i * pk.N + j] : 0.0);
  return n;
}

}  // namespace

const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::None: return "none";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Fp16: return "avx512fp16";
  }
  return "none";
}

Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    const bool base = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (!base) {
      const bool avx2 =
          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
      return avx2 ? Isa::Avx2 : Isa::None;
    }
    return __builtin_cpu_supports("avx512fp16") ? Isa::Avx512Fp16 : Isa::Avx512;
  }();
  return isa;
}

void PackCache::Impl::drop_range(const std::byte* data, std::size_t n) {
  std::erase_if(entries, [&](std::shared_ptr<const PackedB>& e) {
    const bool inside = e->key.data >= data && e->key.data < data + n;
    if (!inside) return false;
    bytes -= e->floats * sizeof(float);
    if (e.use_count() == 1 && spare_bytes + e->floats * sizeof(float) <= capacity) {
      // Sole owner: the entry was made non-const by cache_lookup (make_shared<PackedB>), so its panels may move.
      auto& owned = const_cast<PackedB&>(*e);
      spare_bytes += owned.floats * sizeof(float);
      spare.emplace_back(std::move(owned.panels), owned.floats);
    }
    return true;
  });
  std::erase_if(derived, [&](const Derived& d) {
    const bool inside = bytes_of(d.data) >= data && bytes_of(d.data) < data + n;
    if (inside) derived_bytes -= d.values->size() * sizeof(double);
    return inside;
  });
}

PackCache::PackCache(std::size_t capacity_bytes) : impl_(std::make_unique<Impl>(capacity_bytes)) {}
PackCache::~PackCache() = default;

void PackCache::set_capacity(std::size_t capacity_bytes) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->capacity = capacity_bytes;
}

std::size_t PackCache::capacity() const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->capacity;
}

void PackCache::Impl::register_range(const void* p, std::size_t n, std::uint64_t version) {
  const std::lock_guard<std::mutex> lock(mutex);
  const std::byte* data = bytes_of(p);
  for (ImmutableRange& r : ranges)
    if (r.data == data) {
      if (r.bytes == n && r.version == version) return;
      drop_range(r.data, r.bytes);
      r = ImmutableRange{data, n, version};
      return;
    }
  ranges.push_back(ImmutableRange{data, n, version});
}

void PackCache::Impl::unregister_range(const void* p) {
  const std::lock_guard<std::mutex> lock(mutex);
  for (std::size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].data == bytes_of(p)) {
      drop_range(ranges[i].data, ranges[i].bytes);
      ranges.erase(ranges.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
}

void PackCache::register_immutable(const double* data, std::size_t n, std::uint64_t version) {
  impl_->register_range(data, n * sizeof(double), version);
}

void PackCache::register_immutable(const float* data, std::size_t n, std::uint64_t version) {
  impl_->register_range(data, n * sizeof(float), version);
}

void PackCache::unregister_immutable(const void* data) { impl_->unregister_range(data); }

PackCacheStats PackCache::stats() const {
  Impl& pc = *impl_;
  const std::lock_guard<std::mutex> lock(pc.mutex);
  return {pc.ranges.size(), pc.entries.size(), pc.bytes, pc.hits, pc.misses};
}

DerivedStats derived_stats(const PackCache& cache) {
  PackCache::Impl& pc = cache.impl();
  const std::lock_guard<std::mutex> lock(pc.mutex);
  return {pc.derived.size(), pc.derived_bytes, pc.derived_hits};
}

namespace {
/// The derived operands' capacity (A512's quantized weights, both layouts: ≈ 180 MB).
constexpr std::size_t kDerivedBytes = std::size_t{512} << 20;
}  // namespace

std::shared_ptr<const std::vector<double>> find_derived(const PackCache& cache, const double* data, std::size_t n,
                                                        const std::string& tag) {
  PackCache::Impl& pc = cache.impl();
  const std::lock_guard<std::mutex> lock(pc.mutex);
  const std::optional<std::uint64_t> version = pc.version_of(data, n * sizeof(double));
  if (!version) return nullptr;
  for (const PackCache::Impl::Derived& d : pc.derived)
    if (d.data == data && d.n == n && d.version == *version && d.tag == tag) {
      ++pc.derived_hits;
      return d.values;
    }
  return nullptr;
}

void store_derived(PackCache& cache, const double* data, std::size_t n, std::string tag, std::vector<double> values) {
  PackCache::Impl& pc = cache.impl();
  const std::lock_guard<std::mutex> lock(pc.mutex);
  const std::optional<std::uint64_t> version = pc.version_of(data, n * sizeof(double));
  const std::size_t b = values.size() * sizeof(double);
  if (!version || pc.derived_bytes + b > kDerivedBytes) return;
  std::erase_if(pc.derived, [&](const PackCache::Impl::Derived& d) {  // an older version's entry of the same key
    const bool same = d.data == data && d.n == n && d.tag == tag;
    if (same) pc.derived_bytes -= d.values->size() * sizeof(double);
    return same;
  });
  pc.derived.push_back({data, n, *version, std::move(tag), std::make_shared<const std::vector<double>>(std::move(values))});
  pc.derived_bytes += b;
}

bool holds_immutable(const PackCache& cache, const double* data, std::size_t n) {
  PackCache::Impl& pc = cache.impl();
  const std::lock_guard<std::mutex> lock(pc.mutex);
  return pc.version_of(data, n * sizeof(double)).has_value();
}

const char* kernel_name(const Accumulation& a, const KernelOptions& opts) {
  if (a.adder.group != 0) return adder_kernel_name(a, opts.isa());  // numerics/adder_kernels.hpp
  if (binary64_chain(a)) return binary64_kernel_name(a, opts);       // numerics/gemm_binary64.hpp
  const auto plan = plan_for(a);
  const Isa isa = opts.isa();
  if (!plan || isa == Isa::None) return nullptr;
  const bool blocked = plan->block != 0;
  if (isa == Isa::Avx2) {
    if (plan->tile) return plan->flush ? "ane-tile4-ftz-avx2" : "ane-tile4-avx2";
    switch (plan->acc) {
      case Acc::Fp16: return blocked ? "fp16-rto-avx2-blocked" : "fp16-rto-avx2";
      case Acc::Fp16Ftz: return "fp16-ftz-rto-avx2";
      case Acc::Bf16: return blocked ? "bf16-rto-avx2-blocked" : "bf16-rto-avx2";
      case Acc::Fp32: return blocked ? "fp32-avx2-blocked" : "fp32-avx2";
    }
  }
  if (plan->tile) return plan->flush ? "ane-tile4-ftz-avx512" : "ane-tile4-avx512";
  switch (plan->acc) {
    case Acc::Fp16:
      if (isa == Isa::Avx512Fp16) return blocked ? "fp16-avx512fp16-blocked" : "fp16-avx512fp16";
      return blocked ? "fp16-rto-avx512-blocked" : "fp16-rto-avx512";
    case Acc::Fp16Ftz: return "fp16-ftz-rto-avx512";
    case Acc::Bf16: return blocked ? "bf16-rto-avx512-blocked" : "bf16-rto-avx512";
    case Acc::Fp32: return blocked ? "fp32-avx512-blocked" : "fp32-avx512";
  }
  return nullptr;
}

namespace {

/// gemm_fast for the kernels of this file, operands and C of either width (the public overloads below).
template <class MA, class MB, class TC>
bool gemm_fast_t(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, MA A, MB B, TC* C,
                 std::size_t ldc, bool accumulate, AccumStats* stats, int threads, const OperandCast* cast_a,
                 const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache, StoreScan* scan = nullptr) {
  const auto plan_opt = plan_for(a);
  const Isa isa = opts.isa();
  if (!plan_opt || isa == Isa::None) return false;
  const Plan plan = *plan_opt;
  const int nthreads = threads > 0 ? threads : omp_get_max_threads();

  Packed pk = packed_shape(a, plan, isa, M, N, K);
  // The native fp16 kernel needs every input (and C) to be an fp16 value: packed optimistically as fp16; if
  // some value is not, the operands are packed again as binary32 for the round-to-odd kernel.
  const bool try_native = plan.acc == Acc::Fp16 && isa == Isa::Avx512Fp16;
  thread_local PackBuffers tls_buffers;
  PackBuffers& buffers = tls_buffers;  // the caller's set, also inside the parallel region below
  // B from the pack cache when it lies in a range registered immutable (binary32 panels only: not for the
  // native fp16 attempt, whose fp16 panels may be repacked).
  std::shared_ptr<const PackedB> cached;
  std::shared_ptr<PackedB> fill;
  if (!try_native && cache != nullptr) std::tie(cached, fill) = cache_lookup(cache->impl(), B, cast_b, plan, pk);
  // A in panels (a micro-tile's rows read as one stream), except for the tile stage, whose kernels read rows.
  pk.a_layout = plan.tile ? ALayout::Rows : ALayout::Panels;
  if (try_native) {
    pk.Ah = buffers.Ah.get(a_size(pk));
    pk.Bh = buffers.Bh.get(pk.panels * K * kPanel);
  } else {
    pk.A = buffers.A.get(a_size(pk));  // the tile kernel's binary32 attempt too
    pk.B = cached ? cached->panels.get() : fill ? fill->panels.get() : buffers.B.get(pk.panels * K * kPanel);
  }
  std::vector<double> c_initial;  // only needed to replay overflowing outputs
  if (stats && accumulate && !plan.tile) {
    c_initial.resize(M * N);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) c_initial[i * N + j] = C[i * ldc + j];
  }

  // Threads split output rows in chunks of whole micro-tiles, one per thread; with several threads a chunk is
  // done in up to kPanelGroups groups of B panels, taken in order from the chunk's counter. A thread takes its own
  // chunk's groups (the loop order of one pass over the chunk), then helps with the groups left in the others: a
  // chunk's time depends on its data (the tile stage's bits test and declined tiles), and equal halves left one
  // thread waiting at the end of each call (0.74 s of E11's 6.4 s of tile-stage GEMMs per update on 2 threads,
  // log "thirty-sixth session"). Every output is computed the same way by whichever thread takes it. One parallel
  // region: pack (work-shared), agree on the kernel, compute.
  const auto threads_z = static_cast<std::size_t>(nthreads);
  const std::size_t per_thread = (M + threads_z - 1) / threads_z;
  const std::size_t chunk = (per_thread + kMr - 1) / kMr * kMr;
  const std::size_t nchunks = (M + chunk - 1) / chunk;
  const std::size_t groups_wanted = nthreads > 1 ? kPanelGroups : 1;  // one thread: one group, the panels in order
  const std::size_t group = (pk.panels + groups_wanted - 1) / groups_wanted;  // panels per group
  const std::size_t ngroups = (pk.panels + group - 1) / group;  // of `group` panels each, the last maybe fewer
  const std::unique_ptr<std::atomic<std::size_t>[]> next_group(new std::atomic<std::size_t>[nchunks]());
  int worst = 2, worst_b = 2;
  bool native = false, c_zero = true;
  std::int64_t tile_overflows = 0;
#pragma omp parallel num_threads(nthreads)
  {
    int w = pack_a(pk, A, cast_a, true);
    const int wb = cached ? cached->worst : pack_b(pk, B, cast_b, true);
    w = std::min(w, wb);
    bool zeros = true;
    if (accumulate) {  // C classified, unless every row is +0 (e.g. a freshly zeroed gradient): see Start
      const auto rows = static_cast<std::ptrdiff_t>(M);
#pragma omp for schedule(static) nowait
      for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const TC* c_row = C + static_cast<std::size_t>(i) * ldc;
        if (zeros && all_positive_zero(c_row, N, opts)) continue;
        zeros = false;
        w = std::min(w, pack_c(pk, c_row, N, nullptr));
      }
    }
#pragma omp critical(roundoff_gemm_kernels_worst)
    {
      worst = std::min(worst, w);
      worst_b = std::min(worst_b, wb);
      c_zero = c_zero && zeros;
    }
#pragma omp barrier
#pragma omp single
    {
      native = try_native && worst == 2;
      if (try_native && worst == 1) {  // not all fp16: binary32 operands for the round-to-odd kernel
        pk.Ah = nullptr;
        pk.Bh = nullptr;
        pk.A = buffers.A.get(a_size(pk));
        pk.B = buffers.B.get(pk.panels * K * kPanel);
      }
    }
    if (worst > 0 && try_native && !native) {
      (void)pack_operands(pk, A, B, cast_a, cast_b, true);
#pragma omp barrier
    }
    if (worst > 0) {
      std::int64_t ov = 0;
      StoreScan own;  // this thread's rows, and-ed into *scan below
      const auto me = static_cast<std::size_t>(omp_get_thread_num());
      for (std::size_t d = 0; d < nchunks; ++d) {
        const std::size_t ci = (me + d) % nchunks, i_begin = ci * chunk;  // its own chunk first
        for (std::size_t g; (g = next_group[ci].fetch_add(1, std::memory_order_relaxed)) < ngroups;)
          compute_rows(plan, pk, native, !accumulate ? Start::Sum : c_zero ? Start::PositiveZero : Start::C, C,
                       ldc, i_begin, std::min(M, i_begin + chunk), g * group, std::min(pk.panels, (g + 1) * group),
                       ov, scan != nullptr ? &own : nullptr);
      }
#pragma omp atomic
      tile_overflows += ov;
      if (scan != nullptr) {
#pragma omp critical(roundoff_gemm_kernels_scan)
        {
          scan->nan_free = scan->nan_free && own.nan_free;
          scan->fp16_values = scan->fp16_values && own.fp16_values;
        }
      }
    }
  }
  if (fill) cache_insert(cache->impl(), std::move(fill), worst_b);
  if (worst == 0) return false;

  if (stats) {
    stats->terms += static_cast<std::int64_t>(M * N * K);
    stats->overflows += tile_overflows + count_overflows(plan, pk, A, B, C, ldc, accumulate, c_initial);
  }
  return true;
}

/// The checks every overload makes first: false when no kernel may run.
bool may_run(std::size_t M, std::size_t N, std::size_t K, AccumStats* stats, const OperandCast* cast_a,
             const OperandCast* cast_b, const KernelOptions& opts) {
  if (!opts.fast_paths || M == 0 || N == 0 || K == 0) return false;
  const bool casts = cast_a != nullptr || cast_b != nullptr;
  return !(casts && (stats != nullptr || (cast_a && cast_a->mode == Rounding::Stochastic) ||
                     (cast_b && cast_b->mode == Rounding::Stochastic)));
}

/// The binary32 overloads: this file's kernels only.
template <class MB, class TC>
bool gemm_fast_binary32(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, MB B,
                        TC* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
                        const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts,
                        PackCache* cache, StoreScan* scan = nullptr) {
  if (!may_run(M, N, K, stats, cast_a, cast_b, opts) || a.adder.group != 0 || binary64_chain(a)) return false;
  return gemm_fast_t(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache, scan);
}

}  // namespace

bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache) {
  if (!may_run(M, N, K, stats, cast_a, cast_b, opts)) return false;
  if (a.adder.group != 0)  // the multi-term adder's kernels (numerics/adder_kernels.hpp); no entry casts there
    return cast_a == nullptr && cast_b == nullptr &&
           gemm_adder(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, opts.isa());
  if (binary64_chain(a))  // the binary64 policy's accumulation (numerics/gemm_binary64.hpp)
    return gemm_binary64(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts);
  return gemm_fast_t(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache);
}

bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache) {
  return gemm_fast_binary32(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache);
}
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix32 B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache) {
  return gemm_fast_binary32(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache);
}
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix B,
               float* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache,
               StoreScan* scan) {
  return gemm_fast_binary32(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache, scan);
}
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix32 B,
               float* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts, PackCache* cache,
               StoreScan* scan) {
  return gemm_fast_binary32(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, cast_a, cast_b, opts, cache, scan);
}

}  // namespace roundoff::numerics::kernels

namespace roundoff::numerics::kernels {

namespace {

/// gemm_ranged_fast on this file's kernels (either operand width; C binary64 or binary32: every result is a
/// binary32 value).
template <class MA, class MB, class TC>
bool gemm_ranged_tiles(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, MA A, MB B,
                       const KRange* rows, TC* C, std::size_t ldc, const KernelOptions& opts) {
  const auto plan_opt = plan_for(a);
  const Isa isa = opts.isa();
  if (!plan_opt || isa == Isa::None) return false;
  const Plan plan = *plan_opt;
  Packed pk = packed_shape(a, plan, isa, M, N, K);
  thread_local PackBuffers buffers;
  // Packed by the calling thread (no work-sharing: callers may be inside a parallel region). As gemm_fast_t: the
  // native fp16 kernel when every input is an fp16 value (A in panels, which the row groups below do not cross),
  // else binary32 operands (A in rows) for the other kernels.
  bool native = false;
  if (plan.acc == Acc::Fp16 && isa == Isa::Avx512Fp16) {
    pk.a_layout = ALayout::Panels;
    pk.Ah = buffers.Ah.get(a_size(pk));
    pk.Bh = buffers.Bh.get(pk.panels * K * kPanel);
    native = pack_operands(pk, A, B, nullptr, nullptr, false) == 2;
    if (!native) {
      pk.Ah = nullptr;
      pk.Bh = nullptr;
      pk.a_layout = ALayout::Rows;
    }
  }
  if (!native) {
    pk.A = buffers.A.get(M * K);  // the tile kernel's binary32 attempt too
    pk.B = buffers.B.get(pk.panels * K * kPanel);
    if (pack_operands(pk, A, B, nullptr, nullptr, false) == 0) return false;
  }
  // Rows grouped with row i (a micro-tile) stay in i's panel when A is packed in panels.
  const auto joins = [&](std::size_t i, std::size_t r) { return !native || (i + r) % kPanelRows != 0; };

  // Terms after which a row's whole state is its running sum (see the header).
  const std::size_t period = plan.tile ? kTile : plan.block != 0 ? plan.block : 1;
  std::int64_t overflows = 0;  // gemm_ranged reports no statistics
  AneProbe probe;
  alignas(64) float tile[kMr * kPanel];
  for (std::size_t p = 0; p < pk.panels; ++p) {
    const std::size_t j0 = p * kPanel, jn = std::min(kPanel, N - j0);
    for (std::size_t i = 0; i < M;) {
      const std::size_t lo = rows[i].lo;
      std::size_t g = 1, common = rows[i].hi - lo;
      for (; g < kMr && i + g < M && rows[i + g].lo == lo && joins(i, g); ++g)
        common = std::min(common, rows[i + g].hi - lo);
      if (g == 1 && period == 1) {
        // Rows with one end and ascending starts (the suffix ranges [t, T) of the attention backward): each row
        // alone up to the group's last start, then all of them together to the end (sequential steps: a row's
        // state at any k is its running sum alone).
        const std::size_t hi = rows[i].hi;
        std::size_t h = 1;
        while (h < kMr && i + h < M && rows[i + h].hi == hi && rows[i + h].lo >= rows[i + h - 1].lo &&
               rows[i + h].lo < hi && joins(i, h))
          ++h;
        if (h > 1 && lo < hi) {
          const std::size_t start = rows[i + h - 1].lo;
          fill_tile(pk, tile, h * kPanel, -0.0f);
          for (std::size_t r = 0; r + 1 < h; ++r)
            if (start > rows[i + r].lo)
              kernel_rows(plan, pk, native, 1, i + r, rows[i + r].lo, start - rows[i + r].lo, p, jn, tile + r * kPanel,
                          overflows, probe);
          kernel_rows(plan, pk, native, h, i, start, hi - start, p, jn, tile, overflows, probe);
          for (std::size_t r = 0; r < h; ++r)
            for (std::size_t c = 0; c < jn; ++c) C[(i + r) * ldc + j0 + c] = static_cast<TC>(tile[r * kPanel + c]);
          i += h;
          continue;
        }
      }
      const std::size_t prefix = g == 1 ? common : common - common % period;
      fill_tile(pk, tile, g * kPanel, -0.0f);
      if (prefix > 0) kernel_rows(plan, pk, native, g, i, lo, prefix, p, jn, tile, overflows, probe);
      for (std::size_t r = 0; r < g; ++r)
        if (const std::size_t len = rows[i + r].hi - lo; len > prefix)
          kernel_rows(plan, pk, native, 1, i + r, lo + prefix, len - prefix, p, jn, tile + r * kPanel, overflows,
                      probe);
      for (std::size_t r = 0; r < g; ++r)
        for (std::size_t c = 0; c < jn; ++c) C[(i + r) * ldc + j0 + c] = static_cast<TC>(tile[r * kPanel + c]);
      i += g;
    }
  }
  return true;
}

}  // namespace

bool gemm_ranged_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                      const KRange* rows, double* C, std::size_t ldc, const KernelOptions& opts) {
  if (!opts.fast_paths || M == 0 || N == 0 || K == 0) return false;
  if (a.adder.group != 0) return gemm_ranged_adder(a, M, N, K, A, B, rows, C, ldc, opts.isa());
  if (binary64_chain(a)) return gemm_ranged_binary64(a, M, N, K, A, B, rows, C, ldc, opts);
  return gemm_ranged_tiles(a, M, N, K, A, B, rows, C, ldc, opts);
}

bool gemm_ranged_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A,
                      ConstMatrix32 B, const KRange* rows, float* C, std::size_t ldc, const KernelOptions& opts) {
  if (!opts.fast_paths || M == 0 || N == 0 || K == 0 || a.adder.group != 0 || binary64_chain(a)) return false;
  return gemm_ranged_tiles(a, M, N, K, A, B, rows, C, ldc, opts);
}

}  // namespace roundoff::numerics::kernels
