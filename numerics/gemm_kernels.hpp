#pragma once
/// \file gemm_kernels.hpp
/// SIMD GEMM kernels that are bit-identical to the generic numerics::gemm for the accumulations the studies
/// live on. numerics::gemm calls gemm_fast first and runs the generic path when it returns false.
///
/// The plain binary64 accumulation (fp64 accumulator, fused, sequential, nearest-even) goes to
/// numerics/gemm_binary64.hpp (its own argument; any binary64 inputs).
///
/// Accumulations with a multi-term adder (the tc-* tensor-core models) go to numerics/adder_kernels.hpp (its own
/// contract and exactness argument); everything below is about the other kernels.
/// Handled accumulations (rounding NearestEven, no promotion, no multi-term adder; fused, or unfused with an
/// fp32/fp64 product format, which rounds nothing because every product below is exact in fp32):
///   order Sequential, accumulator fp16, bf16 or fp32;
///   order Blocked (block b), block sums in fp16, bf16 or fp32, outer sum fp32;
///   the exact tile stage of ane-tile4: accumulator fp32, order Sequential, tile = 4:fp16:toward-zero, with or
///   without flush=tile (ane-tile4-ftz); never flush=step (the generic path runs the step flush).
/// Handled inputs (checked while packing; otherwise gemm_fast returns false): every element of A and B is 0,
/// ±inf, NaN, or a finite value with at most 12 significant bits and 2^-63 <= |x| < 2^63 (this covers every
/// fp16 value and every bf16 value in that range). Then each product a·b is exact and normal (or 0/inf/NaN)
/// in fp32. With accumulate, every C_ij must be a binary32 value.
///
/// Why bit-exact (NUMERICS.md trap 1): with exact products, one step s ← round_acc(s + a·b) is
///   fp32 accumulator:      one fp32 FMA (RNE) — the product is exact, so this is the one rounding;
///   fp16/bf16 accumulator: the fp32 sum rounded to odd (two FMAs with embedded rounding down and up; if they
///                          differ the sum is inexact and the odd one of the two is taken), then rounded to nearest-even in the
///                          accumulator format. Round-to-odd at 24 >= p + 2 bits followed by one rounding is
///                          correct (Boldo & Melquiond 2008), including subnormal results (the fp32 grid is
///                          finer there too) and overflow (round-to-odd gives the fp32 max, which rounds to
///                          inf). fp16 rounding is vcvtps2ph (exact on all 2^32 inputs); bf16 rounding is an
///                          integer round-half-even on the bits (vcvtneps2bf16 flushes subnormals: trap 3);
///   fp16 accumulator with AVX512-FP16 and all inputs (and C) fp16 values: the native vfmadd*ph, which is
///                          exactly one correctly rounded fp16 FMA.
///   tile stage: per tile and 16 lanes, first the products' binary32 sums rounded down and up, each rounded
///                          toward zero to fp16: equal, nonzero and below 65504 in every lane proves that value
///                          RZ16(S) (monotone rounding, AVX-512 tier); otherwise the products' binary64 sums
///                          rounded down (sd) and up (su); sd == su proves su exact (monotone directed
///                          rounding brackets the exact sum), else that lane's tile is computed by the scalar
///                          definition. The exact sum is rounded toward zero to
///                          binary32 then to fp16 (RZ of RZ is RZ since fp16 ⊂ binary32), added in fp32 (RNE).
///                          Full argument, signed zeros and overflow counting at the tile stage in gemm_kernels_avx512.cpp.
///                          flush=tile: on the final fp16 bits h of every lane (certified, exact or scalar
///                          fallback alike), (h & 0x7C00) == 0 gives h & 0x8000: a subnormal tile value
///                          becomes the zero of its sign (zeros stay), before the fp32 add (in the binary32
///                          bracket only in its rare branch: its common case then needs |h| >= 2^-14).
///   AVX2 tier (no embedded rounding): the same steps, with round-to-odd and the tile's exactness built from
///                          TwoSum errors instead (argument in gemm_kernel_tiers.hpp).
/// Operands are packed into per-calling-thread buffers that grow and are reused across calls (scratch: every
/// element read is written first in the same call, so they carry nothing from one call to the next). A is packed
/// in panels of 12 rows stored term by term (the micro-tile's broadcasts read one stream), except for the tile
/// stage and gemm_ranged, which read it row by row; B in panels of 64 columns. Where a value is packed changes no
/// sum: each output's terms are summed in the same order by whichever micro-tile height computes it.
/// The running sum starts at −0 (the additive identity, so the first step gives round(t_0) with its sign).
/// Vectorised across output columns; threads split output rows only, so results do not depend on threads.
/// A long sum (K > 1024) runs in passes of ≈ 512 terms over row blocks of 60 rows, so a pass's packed B rows stay
/// in L2; between passes a row's state is its running sum, a binary32 value the next pass loads unchanged, and
/// every pass ends where a block or a tile ends, so the split changes no bit (gemm_kernels.cpp, split_terms).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "numerics/accumulate.hpp"
#include "numerics/kernel_options.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics::kernels {

/// An entry rounding of an operand, applied to each value as it is packed: x ← round_to(*plan, mode, x) (through
/// numerics::round_array), then, when flush, a result of magnitude below plan->min_normal becomes the zero of its
/// sign (denormals-are-zero in the cast format), then NaN → +inf when nan_to_inf. mode is deterministic (not
/// Stochastic).
struct OperandCast {
  const RoundingPlan* plan;
  Rounding mode;
  bool nan_to_inf;
  bool flush = false;
};

/// dst[i] = src[i] cast as `c` describes (the order above), i < src.size(); dst may be src.
void cast_values(const OperandCast& c, std::span<const double> src, std::span<double> dst);

/// B-operand pack cache, owned by its user (ops::Runner owns one per model; nothing is cached without one). A
/// caller may promise that the n values (binary64 or binary32) at data do not change until it calls
/// register_immutable again for the same data pointer (with a new version) or unregister_immutable(data); both drop
/// every pack made from inside the range. While the promise holds, gemm_fast reuses the packed panels of a B that
/// lies inside the range, packed earlier from the same address, element width, leading dimension, shape,
/// transposition, entry cast and kernel plan under the same version: the packing is a function of those and of the
/// values alone, so the product is the same bits as packing afresh (a binary32 B packs as its widened values do,
/// so either width may be cached). The trainer's model registers its working weights once per update (an update's
/// micro-steps and the own-precision evaluation then pack each weight matrix once). Unregistered memory is never
/// cached. The cache holds at most its capacity (512 MiB by default) of binary32 panels; a pack beyond that is not
/// cached. Not used for the native fp16 kernel's packing (AVX512-FP16). Thread-safe (one mutex, taken once per
/// call).
struct PackCacheStats {
  std::size_t ranges, entries, bytes;
  std::uint64_t hits, misses;
};
class PackCache {
 public:
  /// The default capacity: E11's own-precision weights (matmul and classifier B operands of the forward and
  /// bwd-data GEMMs, ≈ 500 MB of binary32 panels) fit.
  static constexpr std::size_t kDefaultCapacity = std::size_t{512} << 20;
  /// capacity_bytes: the most bytes of packed panels the cache holds (and, apart, of spare panel buffers kept for
  /// reuse); a pack that would exceed it is not cached (no eviction, so nothing is packed into fresh memory twice).
  /// Only speed and memory depend on it, never a bit of a product. 0: nothing is cached.
  explicit PackCache(std::size_t capacity_bytes = kDefaultCapacity);
  ~PackCache();
  PackCache(const PackCache&) = delete;
  PackCache& operator=(const PackCache&) = delete;

  /// The n elements at data, binary64 or binary32 (a model's working weights in either storage).
  void register_immutable(const double* data, std::size_t n, std::uint64_t version);
  void register_immutable(const float* data, std::size_t n, std::uint64_t version);
  void unregister_immutable(const void* data);
  PackCacheStats stats() const;
  /// The capacity of later insertions (entries already held stay until their range is dropped).
  void set_capacity(std::size_t capacity_bytes);
  std::size_t capacity() const;

  struct Impl;  ///< the registry and the entries (gemm_kernels.cpp)
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// C = A·B (+ C) as numerics::gemm specifies, when a bit-identical kernel exists for `a` and the inputs; returns
/// false (C untouched) otherwise, and always when opts.fast_paths is off or opts.isa() is None. Shapes must
/// already be checked by the caller. With cast_a / cast_b, the product is cast(A)·cast(B) (each value of the
/// operand cast as it is packed, so no cast copy of the operand is made); the inputs the kernels must accept are
/// then the cast values. Casts need stats == nullptr (the overflow replay reads the operands) and a
/// deterministic mode; otherwise the call returns false. cache: the caller's pack cache (nullptr: none).
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a = nullptr, const OperandCast* cast_b = nullptr,
               const KernelOptions& opts = {}, PackCache* cache = nullptr);

/// gemm_fast with binary32 operands (ConstMatrix32: activations held in binary32 storage) and C in binary64 or in
/// binary32, for the kernels of this file only (false for the multi-term adder and the binary64 chain, whose
/// callers widen the operands). A binary32 operand is widened into per-thread scratch one run at a time (in L1) and
/// packed from there, so its class, its entry cast and its packed values are those of the widened operand: the
/// result is bit for bit gemm_fast of the operands widened (and, with a binary32 C, the same values: every result
/// of these kernels is a binary32 value, written without the widening; an initial C is read as its widened values).
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a = nullptr, const OperandCast* cast_b = nullptr,
               const KernelOptions& opts = {}, PackCache* cache = nullptr);
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix32 B,
               double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a = nullptr, const OperandCast* cast_b = nullptr,
               const KernelOptions& opts = {}, PackCache* cache = nullptr);
/// What the results a binary32-C gemm_fast stored hold, found while each row of a tile is stored from L1 (so
/// that a caller need not read C again to learn it): nan_free, no NaN among them; fp16_values, every one of them
/// a value of fp16 and none NaN (numerics::binary16_values(row, false) of every stored row). Both start true and
/// are and-ed over the rows, whichever thread stores them. Meaningful only when gemm_fast returns true.
struct StoreScan {
  bool nan_free = true;
  bool fp16_values = true;
};

bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix B,
               float* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a = nullptr, const OperandCast* cast_b = nullptr,
               const KernelOptions& opts = {}, PackCache* cache = nullptr, StoreScan* scan = nullptr);
bool gemm_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A, ConstMatrix32 B,
               float* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
               const OperandCast* cast_a = nullptr, const OperandCast* cast_b = nullptr,
               const KernelOptions& opts = {}, PackCache* cache = nullptr, StoreScan* scan = nullptr);

/// numerics::gemm_ranged's product when a bit-identical kernel exists (the accumulations and inputs above);
/// false (C untouched) otherwise. Ranges must already be checked. In the calling thread. The rows of a micro-tile
/// run their common prefix together: with sequential steps a row's state after k terms is its running sum
/// alone, so a prefix cut at a multiple of the plan's period (1 sequential, the block size blocked, 4 for the
/// tile stage) resumes exactly; each row then finishes its own tail, its terms counted from its own lo. With
/// sequential steps, rows with one hi and ascending lo (suffix ranges) run alone up to the last lo of their
/// micro-tile and then together, for the same reason. The
/// native fp16 kernel is not used here (the round-to-odd kernel gives the same bits).
bool gemm_ranged_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                      const KRange* rows, double* C, std::size_t ldc, const KernelOptions& opts = {});
/// gemm_ranged_fast with binary32 operands and C, for this file's kernels only (false for the multi-term adder and
/// the binary64 chain): bit for bit the binary64 form on the operands widened, every result a binary32 value.
bool gemm_ranged_fast(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix32 A,
                      ConstMatrix32 B, const KRange* rows, float* C, std::size_t ldc, const KernelOptions& opts = {});

/// Name of the kernel gemm_fast would use under opts for `a` on fp16-valued inputs ("fp16-avx512fp16",
/// "fp16-rto-avx512", "bf16-rto-avx512", "fp32-avx512", "fp16-rto-avx2", "bf16-rto-avx2", "fp32-avx2", with
/// "-blocked" for split-K; "ane-tile4-avx512", "ane-tile4-avx2", "ane-tile4-ftz-avx512", "ane-tile4-ftz-avx2";
/// "adder-avx512", "adder-avx2" for the
/// multi-term adder, numerics/adder_kernels.hpp; "fp64-avx512", "fp64-avx2" for the binary64 chain on any binary64
/// inputs, numerics/gemm_binary64.hpp), or nullptr when none.
const char* kernel_name(const Accumulation& a, const KernelOptions& opts = {});

}  // namespace roundoff::numerics::kernels
