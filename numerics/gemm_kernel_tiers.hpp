#pragma once
/// \file gemm_kernel_tiers.hpp
/// The instruction-set tiers of the GEMM kernels (internal to gemm_kernels.cpp, which chooses one at run time):
/// fp32, fp16 and bf16 accumulators, sequential and blocked, and the ane-tile4 tile stage, in the AVX-512 tier
/// (numerics/gemm_kernels_avx512.cpp, 16 lanes) and the AVX2 + FMA tier (numerics/gemm_kernels_avx2.cpp, 8 lanes,
/// for CPUs without AVX-512; also its operand packing). Both tiers' register-tile loops are one source,
/// numerics/gemm_tile_loops.inc, compiled once per tier, so they cannot drift; each tier supplies only its
/// arithmetic of one step (the AVX-512 one is argued in gemm_kernels.hpp and at the tile stage in
/// gemm_kernels_avx512.cpp, the AVX2 one below).
///
/// The AVX2 tier: same contract as the AVX-512 kernels (gemm_kernels.hpp), 8 lanes:
///   fp32 accumulator: with products exact in fp32 (or any binary32 inputs for the fused fp32 accumulator), one
///     step s ← s + a·b is one hardware FMA (FMA3 rounds a·b + s once, RNE).
///   fp16/bf16 accumulator: AVX2 has no per-instruction rounding, so the fp32 sum is rounded to odd from its
///     RNE value and exact error: p = a·b (exact), r = RN(s + p), e = (s + p) − r by TwoSum (exact: s, p, r
///     finite). e = 0: r is exact (and for an exact zero carries IEEE's sign, as the AVX-512 kernel's RU
///     does). e ≠ 0: the exact sum lies strictly between r and its neighbour on e's side; r odd is the
///     round-to-odd value, else that neighbour is (the encoding ± 1: + when e and r have the same sign;
///     r ≠ 0 because every nonzero sum of these values is a multiple of 2^-149, exact in binary32 when tiny).
///     r = ±inf from finite s and p (overflow) is kept: round-to-odd would give ±max32, and both round to ±inf
///     in fp16 and bf16. Non-finite operands: r, as IEEE.
///     Then one RNE rounding to fp16 (vcvtps2ph) or bf16 (integer round-half-even), as on AVX-512.
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::kernels {

/// Accumulator format of a kernel. Fp16Ftz: fp16 with the step flush (`flush=step`): after each step's rounding
/// a partial sum with 0 < |s| < 2^-14 (an fp16 subnormal) becomes the zero of its sign, as the definition's
/// `flushed` (numerics/accumulate.cpp) does; ±0, normals, ±inf and NaN pass (the compare is ordered).
enum class Acc : std::uint8_t { Fp16, Fp16Ftz, Bf16, Fp32 };

/// Terms per tile of the one tile stage the kernels handle (ane-tile4).
inline constexpr std::size_t kTile = 4;

/// Rows of one A panel in the panel layout (ALayout::Panels).
inline constexpr std::size_t kPanelRows = 12;

/// How the kernels read their packed A: Rows, A(r, k) = Ap[r·lda + k] (row-major); Panels, A(r, k) =
/// Ap[k·kPanelRows + r] (a panel of kPanelRows rows stored term by term, so a micro-tile's broadcasts of one term
/// are one stream of adjacent values instead of one stream per row; lda unused). The layout changes where values
/// are read, never which values or in what order they are summed.
enum class ALayout : std::uint8_t { Rows, Panels };

/// Which test the tile-stage kernels (tile_ane_rows) give the binary32 attempt's common case, kept by their caller
/// across the calls of one GEMM's rows on one thread. The test in binary32 bits (every lane's tile value a normal
/// fp16 value below 65504, `ane_f32_n` in gemm_kernels_avx512.cpp) costs a third of the conversion test where it
/// succeeds, but a vector where it fails (a subnormal or zero tile value, as small gradients give, or a straddle)
/// costs a mispredicted branch and the conversion test after it; so the calls stop using it once more than one
/// vector in 16 has failed it (after a grace of 8). Both tests give every lane the same value: only the speed
/// depends on the choice, never a result.
struct AneProbe {
  std::size_t tried = 0;   ///< vectors that ran the test in bits
  std::size_t misses = 0;  ///< of which it did not certify
  bool bits() const { return 16 * misses <= tried + 16 * 8; }
};

/// The rare lanes of one tile step of the tile-stage kernels (gemm_kernels.cpp; `lanes` columns): lanes not set
/// in `exact` get their tile value by the scalar definition (fp16 bits in h) and count its overflow; exact lanes
/// (whose h is ±65504, ±inf or NaN) count an overflow when their exact sum su is finite with |su| >= 65536.
/// a: the row's n terms; b: column 0 of the first term, terms ldb apart.
void tile_fixup(std::uint16_t* h, std::uint32_t exact, const double* su, const double* a, const float* b,
                std::size_t ldb, std::size_t n, std::size_t lanes, std::int64_t& overflows);

}  // namespace roundoff::numerics::kernels

namespace roundoff::numerics::kernels::avx512 {

/// Columns of one tile_rows call (two vectors of 16 binary32 lanes) and of one tile_ane_rows call (one vector).
inline constexpr std::size_t kCols = 32, kAneCols = 16;

/// `rows` rows × kCols columns of the GEMM with accumulator `acc`: rows A(r, k) read as `layout` says
/// (Panels: rows ≤ kPanelRows, all in Ap's panel), B columns Bp[k·ldb + 0..kCols−1], running sums in/out
/// tile[r·ldt + c]. block == 0: sequential; else block sums (in `acc`) restart at −0 every `block` terms and are
/// added to the fp32 totals.
void tile_rows(Acc acc, std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
               std::size_t K, std::size_t block, float* tile, std::size_t ldt, ALayout layout);

/// `rows` rows × kAneCols columns of the ane-tile4 GEMM (argument at the tile stage in gemm_kernels_avx512.cpp):
/// rows Af[r·lda + k] (binary32), B columns Bp[k·ldb + 0..kAneCols−1], running sums in/out tile[r·ldt + c]; tile
/// overflows are added to `overflows`. flush: flush=tile (a subnormal fp16 tile value h, (h & 0x7C00) == 0,
/// becomes h & 0x8000 before the add; see gemm_kernels_avx512.cpp). probe: the caller's AneProbe, the choice of
/// test for the binary32 attempt kept across one GEMM's rows (it changes the speed only).
void tile_ane_rows(std::size_t rows, const float* Af, std::size_t lda, const float* Bp, std::size_t ldb, std::size_t K,
                   float* tile, std::size_t ldt, std::int64_t& overflows, AneProbe& probe, bool flush);

/// Rows and columns of the wide micro-tile of the sequential fp32 accumulator (tile_rows_fp32_wide).
inline constexpr std::size_t kWideRows = 6, kWideCols = 64;

/// tile_rows(Acc::Fp32, rows, ..., block 0, ...) over kWideCols columns (two kCols calls' worth), with the same
/// bits: micro-tiles of kWideRows rows × kWideCols columns (24 accumulators; per term 4 vector loads and 6
/// broadcasts for 24 FMAs, where a 12-row tile_rows call makes 2 and 12), the rows past the last whole micro-tile
/// by tile_rows. Arguments as tile_rows's; B columns Bp[k·ldb + 0..kWideCols−1].
void tile_rows_fp32_wide(std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
                         std::size_t K, float* tile, std::size_t ldt, ALayout layout);

}  // namespace roundoff::numerics::kernels::avx512

namespace roundoff::numerics::kernels::avx2 {

/// Columns of one tile_rows call (two vectors of 8 binary32 lanes) and of one tile_ane_rows call (one vector).
inline constexpr std::size_t kCols = 16, kAneCols = 8;

/// Classifies n contiguous doubles as the AVX-512 pack_run does, returning 0 (no kernel: not a binary32 value,
/// or, for inputs without `any_binary32`, more than 12 significant bits or a finite nonzero |x| outside
/// [2^-63, 2^63)) or 1 (handled); whether the values are fp16 values is not computed (only the AVX512-FP16
/// kernel needs it). Writes the binary32 values to f32 where not null, NaNs replaced by the quiet NaN. `rounds`:
/// the conversion to binary32 (nearest even, default MXCSR) is the operand's entry cast, so a value need not be
/// a binary32 value already (see the AVX-512 pack_run).
int pack_run(const double* src, std::size_t n, bool inputs, bool any_binary32, float* f32, bool rounds = false);
/// pack_run of binary32 values: the class and the outputs of pack_run on the values widened (every value is a
/// binary32 value; a NaN is quieted as the round trip through binary64 quiets it).
int pack_run(const float* src, std::size_t n, bool inputs, bool any_binary32, float* f32);

/// dst[i] = src[i] as binary64 (exact), i < n.
void widen(const float* src, double* dst, std::size_t n);

/// `rows` rows × kCols columns of the GEMM with accumulator `acc`: rows A(r, k) read as `layout` says (as in the
/// AVX-512 tier), B columns Bp[k·ldb + 0..15], running sums in/out tile[r·ldt + c]. block == 0: sequential; else
/// block sums (in `acc`) restart at −0 every `block` terms and are added to the fp32 totals.
void tile_rows(Acc acc, std::size_t rows, const float* Ap, std::size_t lda, const float* Bp, std::size_t ldb,
               std::size_t K, std::size_t block, float* tile, std::size_t ldt, ALayout layout);

/// `rows` rows × kAneCols columns of the ane-tile4 GEMM (tiles of 4 exact products rounded toward zero to fp16, summed
/// in fp32): rows Af[r·lda + k] (binary32), B columns Bp[k·ldb + 0..7], running sums in/out tile[r·ldt + c];
/// tile overflows are added to `overflows`. flush: flush=tile, as in the AVX-512 tier.
///
/// Binary32 bracket, tried first for each full tile of a row (8 lanes). The products p_t = a_t·b_t are exact in
/// binary32 (pack_run: at most 12 significant bits, 2^-63 <= |x| < 2^63, so |p_t| lies in [2^-126, 2^126] or is
/// 0/inf/NaN). AVX2 has no per-instruction rounding, so the attempt runs with MXCSR's rounding control set to
/// upward (RU; the tile loop's phases, gemm_tile_loops.inc, set it for a run of tiles and restore it before the
/// running sums' adds and the binary64 path) and gives the AVX-512 kernel's directed ends from two FMA chains:
///   u_0 = RU(p_0 + (+0)), u_t = RU(p_t + u_{t−1}), hi = u_3;
///   m_1 = RU(−p_1 − u_0), m_t = RU(−p_t + m_{t−1}), lo = −m_3.
/// RU is monotone and RU(x) >= x (also past the range: RU(x) = +inf above max32, −max32 below −max32), so by
/// induction u_t >= p_0 + … + p_t and m_t >= −(p_0 + … + p_t) in value: lo <= S <= hi. u_0 = p_0 except +0 for
/// p_0 = −0 (same value). hi is never −0: RU gives −0 for a sum of zeros only from two −0 operands, and u_0 is
/// not −0. Overflow or an infinite or NaN product gives an end of ±inf or NaN, or |hi| >= 65504, which the tests
/// below decline. RZ16 is monotone, so when RZ16(lo) and RZ16(hi) (vcvtps2ph with RZ, exact for binary32 inputs;
/// RZ16(lo) taken as RZ16(m_3) with its sign flipped, RZ16 being odd) are the same fp16 value h, h = RZ16(S).
/// A lane is taken when they agree and |h| < 65504 (S finite, |S| < 65504: no overflow event), ±0 included:
/// hi is never −0, so h = −0 means hi < 0, S < 0 and h = RZ16(S); h = +0 means lo >= +0, so S > 0 with
/// h = RZ16(S) or S = 0 with h = +0, the definition's exact zero. Also taken: lo = hi = 0 (S = 0 exactly, hi = +0,
/// h = +0). In each case h is what the binary64 path below gives. The common case is tested in binary32 bits
/// first (as on AVX-512): lo and hi agree in sign, exponent and the 10 fraction bits an fp16 normal keeps (m_3 ^ hi
/// is 1 in the sign and 0 in those 18 bits: one signed compare) and 2^-14 <= |hi| < 65504.
/// The attempt succeeds only when all 8 lanes are taken; otherwise, and for the last partial tile, the tile is
/// summed by the binary64 path. The ends are each at most 3 binary32 ulps of their partial sums from S (one per
/// step), so the attempt declines tiles whose exact sum lies on or within a few ulps of an fp16 value, and tiles
/// with heavy cancellation only where the cancelled partial sums' ulps reach an fp16 boundary.
///
/// Binary64 path: without per-instruction rounding the exactness certificate is TwoSum: the binary64 running sum
/// of a tile's exact products with every step's error 0 is the exact sum S (+0 added last, so an exact zero is
/// +0); other lanes take tile_fixup. The row's values are widened from Af here (exact), not read from a binary64
/// copy: Af is in cache from the binary32 attempt, and a copy, read only by the rare declined tiles, was not (its
/// cache misses were a quarter of the kernel's time). RZ to binary32 is truncation of S's significand to 24 bits
/// (S is normal in binary64, below 2^128 and a multiple of 2^-148, so values in binary32's subnormal range are
/// already binary32 values), then vcvtps2ph with RZ (RZ of RZ is RZ, see gemm_kernels_avx512.cpp), then one
/// binary32 add.
///
/// flush=tile: both paths turn the final fp16 bits h of a lane with (h & 0x7C00) == 0 into h & 0x8000 before the
/// add (the bracket's lanes included: their h is RZ16(S), which has S's sign, so a nonzero subnormal h becomes
/// the zero of S's sign, as the definition flushes T = RZ16(S); zero lanes stay as proven above).
void tile_ane_rows(std::size_t rows, const float* Af, std::size_t lda, const float* Bp, std::size_t ldb, std::size_t K,
                   float* tile, std::size_t ldt, std::int64_t& overflows, AneProbe& probe, bool flush);

}  // namespace roundoff::numerics::kernels::avx2
