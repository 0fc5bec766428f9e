#pragma once
/// \file accumulate.hpp
/// How a sum or dot product is formed. Every reduction in roundoff goes through an Accumulation.
///
/// Semantics (the MPFR-executed twin in tests/support/accum_mpfr_twin proves each bit-exact):
///   terms     t_i = x_i (sum) or x_i·y_i (dot). fused: the exact product enters the accumulator (one rounding
///             per multiply-add, like an FMA into the accumulator format). unfused: t_i = round(product_format,
///             x_i·y_i) first, then added with one rounding.
///   rounding  every rounding of a reduction (products, accumulator, outer and promoted sums) uses `rounding`,
///             except inside the multi-term adder, which uses adder.align / adder.normalize, and the split-K sum
///             of chunk results, which uses splitk.rounding.
///   order     Sequential  s = round(s + t_i), i = 0..n-1; a partial sum starts with round(t_0) (no +0 is added
///                         first, so signed zeros and directed modes see exactly one rounding of t_0).
///             Reverse     the same for i = n-1..0.
///             Pairwise    recursive halving: sum(t_lo..t_hi) = round(sum(lo half) + sum(hi half)), the lower half
///                         holding floor(count/2) terms; a single term is round(t_i).
///             Blocked     consecutive blocks of `block` terms (the last one ragged) summed sequentially in the
///                         accumulator format; the block sums are then combined sequentially in `outer_format`
///                         (split-K / FABsum): S = round_outer(block_sum_0), S = round_outer(S + block_sum_j).
///             Kahan       compensated summation in the accumulator format, every operation rounded:
///                         s = round(t_0), c = 0; then y = round(t_i − c) (fused: one FMA), t = round(s + y),
///                         c = round(round(t − s) − y), s = t.
///   promote   promote_every = N > 0 (orders seq/reverse, with or without the adder): after every N terms (in
///             processing order; the last chunk ragged) the partial sum is added into a `promote_format` total
///             T (T = round_pf(partial_0), then T = round_pf(T + partial_j)) and the partial restarts (TE /
///             DeepSeek fp8 GEMM promotion). The result is T.
///   adder     adder.group = g > 0 (orders seq/reverse): a multi-term fused adder (tensor-core model after Fasi,
///             Higham, Mikaitis & Pranesh 2021). The running sum s starts at 0; each step takes the next g terms
///             (fewer at the end of a chunk) and computes s = N(Σ A(v)) over v ∈ {s, t_k..t_k+g-1}: with E the
///             largest exponent floor(log2|v|) among the nonzero addends and q = E − (p − 1) − extra_bits, A
///             rounds each addend to a multiple of 2^q (adder.align: toward-zero truncation or nearest-even); the
///             aligned values are summed exactly in a register of p + extra_bits + carry_bits bits: a sum longer
///             than that first loses its low bits (rounded per adder.align); N rounds the result once to the
///             accumulator format per adder.normalize. An exactly zero result is +0.
///             adder.anchor = ExponentSum changes only E: a fused product x·y then counts with the exponent
///             e(x) + e(y), e(v) = max(floor(log2|v|), adder.input_emin) (what the hardware knows before the
///             significands are multiplied; the product's leading bit may sit one above it, or below it for
///             subnormal factors); the running sum and every other addend count with their leading bit. This is
///             the H100 tensor-core model fitted bit for bit to the hardware (docs/studies/tensorcore.md).
///             adder.edges = InfPositiveZero changes only N's edge cases: a result of magnitude at least
///             2^(emax+1) is ±inf whatever adder.normalize is (IEEE toward-zero would give ±max_finite), and a
///             result that rounds to zero is +0 (IEEE keeps the sign of an underflowed value).
///             adder.feed = EvenPairsFirst changes which terms a step takes: the terms of each chunk (the whole sum,
///             or each promotion chunk) form blocks of 2·g (the last ragged), and each block is two steps: first
///             its terms at block positions j with floor(j/2) even, then those with floor(j/2) odd (a step with
///             no term is skipped). This is how nvcc runs an fp8 mma.sync (k 32) on sm_90 and sm_100: two fp16
///             HMMA.16816 on the k-pairs {0,1,4,5,...} and {2,3,6,7,...}; C then enters last through promotion.
///   tile      tile.size = g > 0 (orders seq/reverse, no adder, no promotion): an exact first reduction stage (the
///             Apple Neural Engine model of the reverse-engineered ane-guide, docs/numerics.md). Consecutive terms
///             (processing order; the last tile ragged) form tiles of g; each tile's exact sum Σ t_k (fused: exact
///             products; unfused: the rounded products) is rounded once to tile.format with tile.rounding, and the
///             tile values are then the terms of the sequential sum in the accumulator format:
///             s = round(T_0), s = round(s + T_j). An exactly zero tile sum is +0; a tile holding a non-finite
///             term is the IEEE sum of its non-finite terms. Tile roundings draw no stochastic bits (the mode
///             cannot be stochastic); a tile that overflows counts in AccumStats::overflows.
///   splitk    splitk.count = S > 0 (every order but blocked): split-K as cuBLAS runs it (a K-split kernel, then
///             splitKreduce_kernel). The n terms, in k order, are cut into consecutive chunks of
///             L = G·ceil(n / (G·S)) terms, G = splitk.granule (the kernel's k-tile): at most S chunks, the last
///             one ragged, fewer than S when (S − 1)·L >= n. Each chunk is reduced on its own exactly as this
///             accumulation without splitk reduces those terms alone (numerics::dot of the chunk: from zero, its
///             order, adder groups, promotion chunks and tiles counted from the chunk's first term). The chunk
///             results R_c are then summed in chunk order in outer_format with splitk.rounding (not `rounding`):
///             T = round(R_0), T = round(T + R_c). cuBLAS on an H200 does this in binary32 to nearest-even, with
///             G = 64 (fp16/bf16 nvjet kernels), 128 (fp8) and 32 (tf32 CUTLASS kernels)
///             (docs/studies/tensorcore.md, "cuBLAS on H200"). The result is T.
///   flush     subnormal flush inside the accumulator (the Apple M1 Neural Engine, which per the ane-guide part 1
///             ch. 3 returns +0 for two fp16 denormals summed inside a matmul whose exact total is a representable
///             denormal, while its elementwise ops keep subnormals; the M5 keeps them). A flushed value becomes a
///             zero with its own sign; the flush comes after the rounding it follows (stochastic draws unchanged).
///             flush.tile (needs the tile stage): every tile value T, after its rounding to tile.format, with
///             0 < |T| < 2^tile.format.emin becomes ±0.
///             flush.step (orders seq/reverse only; not with the adder, promotion, split-K): every partial sum s
///             the accumulator holds after a rounding to the accumulator format — the first, round(t_0) or
///             round(T_0), and each s = round(s + t_i) or round(s + T_j) — with 0 < |s| < 2^emin(F) becomes ±0, F =
///             flush.step_format when given, else the accumulator format (so ane-tile4,flush=step:fp16 flushes
///             binary32 partial sums below 2^-14). gemm's exact starting value C_ij is not a rounded partial and
///             is not flushed; every sum after it is. Spec: flush=none|tile|step[:FORMAT]|tile+step[:FORMAT].
///   initial   gemm with accumulate: the current C_ij is an exact starting value (never rounded on entry): the
///             running sum of seq/reverse/kahan/adder starts at C_ij, the outer sum of blocked, the promoted
///             total and the split-K total T start at C_ij (T = C_ij, then T = round(T + R_c) for every chunk;
///             the chunks themselves start from zero), and pairwise gives round(C_ij + tree).
///   specials  IEEE: NaN propagates, inf - inf = NaN. Overflow as IEEE 754 §7.4 defines it: an operation on
///             finite operands whose result, rounded as if the exponent range were unbounded, exceeds
///             max_finite (the result is then inf, NaN for NaN-only formats, or ±max_finite when the format
///             saturates or the mode rounds toward zero); each is counted in AccumStats::overflows. (A ±max_finite
///             result in a format with emax = 1023 is not counted: binary64 has no binade above it to probe.)
///   stochastic rounding draws from StochasticBits{seed, stream}: the k-th rounding of the reduction, in the
///             order the algorithm above performs them, uses draw(k) (unfused: the product's rounding comes
///             just before the addition's), so results do not depend on thread count.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/kernel_options.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::numerics {

enum class Order : std::uint8_t { Sequential, Reverse, Pairwise, Blocked, Kahan };
/// "seq", "reverse", "pairwise", "blocked", "kahan".
std::string_view name_of(Order o);

/// Which exponent a multi-term adder aligns its addends on (see `adder` above).
enum class AdderAnchor : std::uint8_t {
  LeadingBit,   ///< the largest leading-bit exponent of the addends (Fasi et al.'s V100/A100 model)
  ExponentSum,  ///< fused products by the sum of their factors' exponents (H100, fitted to the hardware)
};
/// "lead", "exp-sum".
std::string_view name_of(AdderAnchor a);

/// How a multi-term adder's normalisation treats overflow and zero results (see `adder` above).
enum class AdderEdges : std::uint8_t {
  Ieee,             ///< as IEEE 754 defines for adder.normalize
  InfPositiveZero,  ///< overflow is ±inf whatever the rounding, every zero result is +0 (H100 binary32 output)
};
/// "ieee", "inf-pos-zero".
std::string_view name_of(AdderEdges e);

/// Which terms each step of a multi-term adder takes (see `adder` above).
enum class AdderFeed : std::uint8_t {
  InOrder,         ///< consecutive terms, group by group
  EvenPairsFirst,  ///< per block of 2·group terms: the pairs at even pair positions, then those at odd ones
};
/// "in-order", "even-pairs-first".
std::string_view name_of(AdderFeed f);

/// Multi-term fused adder parameters (tensor cores / NPUs). group == 0 disables the model.
struct MultiTermAdder {
  int group = 0;                           ///< products added per step (4 on V100, 8/16 on later parts)
  int extra_bits = 0;                      ///< bits kept below the accumulator's last place during alignment
  Rounding align = Rounding::TowardZero;   ///< TowardZero (truncate) or NearestEven, for alignment shifts
  Rounding normalize = Rounding::TowardZero;  ///< rounding of the normalised result to the accumulator format
  int carry_bits = 2;                      ///< carry-out bits available above the leading bit
  AdderAnchor anchor = AdderAnchor::LeadingBit;
  int input_emin = 0;  ///< ExponentSum: the factors' format emin (subnormal factors count with it); else 0
  AdderEdges edges = AdderEdges::Ieee;
  AdderFeed feed = AdderFeed::InOrder;
  friend constexpr bool operator==(const MultiTermAdder&, const MultiTermAdder&) = default;
};

/// Exact tile stage (ANE model). size == 0 disables it.
struct TileStage {
  int size = 0;                               ///< terms per tile (4 on the ANE per the guide)
  Format format = formats::fp16;              ///< each tile's exact sum is rounded once to this format
  Rounding rounding = Rounding::TowardZero;   ///< ... in this mode (not stochastic)
  friend constexpr bool operator==(const TileStage&, const TileStage&) = default;
};

/// Split-K: K cut into chunks reduced separately, their results summed (see `splitk` above). count == 0 disables it.
struct SplitK {
  int count = 0;                              ///< S: at most S chunks
  int granule = 1;                            ///< G: chunk lengths are multiples of G (the last chunk ragged)
  Rounding rounding = Rounding::NearestEven;  ///< rounding of the chunk results' sum in outer_format
  friend constexpr bool operator==(const SplitK&, const SplitK&) = default;
};

/// Subnormal flush of the accumulator (see `flush` above). Both off (the default): nothing is flushed.
struct AccumFlush {
  bool tile = false;                  ///< tile values below 2^tile.format.emin become zeros of their sign
  bool step = false;                  ///< rounded partial sums below 2^emin(F) become zeros of their sign
  std::optional<Format> step_format;  ///< F for the step flush; unset: the accumulator format
  friend constexpr bool operator==(const AccumFlush&, const AccumFlush&) = default;
};

/// The chunk length L = G·ceil(n / (G·S)) of a split-K over n terms (n when splitk is off or n == 0).
std::size_t splitk_chunk(const SplitK& s, std::size_t n);

/// A complete description of how a sum or dot product is formed.
struct Accumulation {
  Format format = formats::fp32;           ///< accumulator format
  Rounding rounding = Rounding::NearestEven;  ///< accumulator rounding
  bool fused = true;                       ///< exact products enter the accumulator
  Format product_format = formats::fp32;   ///< when !fused: products are rounded here first
  Order order = Order::Sequential;
  int block = 0;                           ///< Blocked: block size b
  Format outer_format = formats::fp32;     ///< Blocked / split-K: format of the outer sum of block/chunk sums
  int promote_every = 0;                   ///< 0 = never
  Format promote_format = formats::fp32;
  MultiTermAdder adder{};
  TileStage tile{};
  SplitK splitk{};
  AccumFlush flush{};
  friend constexpr bool operator==(const Accumulation&, const Accumulation&) = default;
};

/// Empty when the accumulation is consistent, else the reason (e.g. a block size without order=blocked).
std::optional<std::string> validate(const Accumulation& a);
/// Throws std::invalid_argument with the reason when validate(a) fails. sum/dot/gemm call it.
void check_valid(const Accumulation& a);

/// The format the result is in: outer_format for Blocked or split-K, promote_format with promotion, else the
/// accumulator's.
Format result_format(const Accumulation& a);

/// Counters a reduction reports.
struct AccumStats {
  std::int64_t overflows = 0;  ///< partial sums that overflowed to inf (or saturated)
  std::int64_t terms = 0;
};

/// Canonical text, e.g. "fp16-seq", "acc=fp16:nearest-even,order=blocked:32,outer=fp32,fused". Presets print as
/// their preset name (the first, where two presets are the same model); parse_accumulation(canonical(a)) == a.
std::string canonical(const Accumulation& a);
/// The key=value form even for presets ("acc=fp16:nearest-even,order=seq,fused"); parse_accumulation inverts it.
std::string spec_text(const Accumulation& a);
/// Preset name or key=value spec. Presets, for F in {fp16, bf16}: F-seq, F-unfused-seq (products rounded to F),
/// F-reverse, F-pairwise, F-kahan, F-sr (stochastic), F-splitk{16,32,64,128}-fp32 (blocked, fp32 outer sum),
/// F-promote128-fp32; and fp32-seq, fp32-pairwise, fp64-seq; fasi-v100 (fp32 accumulator, group 4, no extra bits,
/// truncation, 2 carry bits, leading-bit anchor: Fasi et al. 2021's V100 model, named tc-v100 before the GPU presets)
/// and fasi-a100 (the same with groups of 8); the tensor-core presets per GPU, each fitted bit for bit to measured
/// output bits (docs/studies/tensorcore.md): exact products, each step adding `group` of them and the running sum
/// aligned on the largest exponent sum (anchor=exp-sum with the input format's emin) with `extra` bits below the
/// accumulator's last place, truncated, 6 carry bits; binary32 results truncated with overflow to inf and +0 for
/// zero, fp16 accumulators the binary32-wide register rounded once to nearest:
///   tc-v100 (fp16 inputs, group 4, extra 0), tc-v100-f16acc (fp16 accumulator, extra 13);
///   tc-a100 (A100, A2, A30; fp16: group 8, extra 1), tc-a100-bf16, tc-a100-tf32 (group 4), tc-a100-f16acc (extra 14);
///   tc-ada, tc-ada-bf16, tc-ada-tf32, tc-ada-f16acc (Ada, L40S: the A100 models), tc-ada-fp8 and
///   tc-ada-fp8-e5m2 (group 16 into a 14-bit accumulator with binary32's range), tc-ada-fp8-f16acc and
///   tc-ada-fp8-e5m2-f16acc (fp16 accumulator, 3 extra bits);
///   tc-h100 (H100, H200; fp16: group 16, extra 2), tc-h100-bf16, tc-h100-tf32 (group 8), tc-h100-f16acc (extra 15),
///   tc-h100-fp8 and tc-h100-fp8-e5m2 (fp8 wgmma: groups of 32, a 14-bit accumulator; add promote=N:fp32 for
///   periodic promotion), tc-h100-fp8-mma and tc-h100-fp8-mma-f16acc (fp8 mma.sync as nvcc runs it: per 32 terms
///   two fp16 steps from zero on the k-pairs, feed=even-pairs-first, then C added to nearest, promote=32);
///   tc-b200, tc-b200-bf16, tc-b200-tf32, tc-b200-f16acc, tc-b200-fp8-mma, tc-b200-fp8-mma-f16acc (B200: the H100
///   models; a preset equal to an earlier one prints as that name); ane-tile4 (fp32 accumulator fed by exact
/// tiles of 4 terms rounded toward zero to fp16: the ane-guide's ANE accumulator) and ane-tile4-ftz (the same
/// with flush=tile: subnormal fp16 tile values become zeros, the M1 ANE's matmul behaviour).
/// Spec: comma-separated tokens, optionally starting with a preset to modify: acc=FORMAT[:ROUNDING],
/// order=seq|reverse|pairwise|kahan|blocked:B, outer=FORMAT, fused, unfused, product=FORMAT, promote=N[:FORMAT],
/// group=G, extra=E, align=ROUNDING, normalize=ROUNDING, carry=C, anchor=lead|exp-sum:EMIN, edges=ieee|inf-pos-zero,
/// feed=in-order|even-pairs-first, tile=G[:FORMAT][:ROUNDING] (FORMAT default fp16, ROUNDING default toward-zero),
/// splitk=S[:G[:ROUNDING]] (G default 1, ROUNDING default nearest-even; e.g. tc-h100,splitk=3:64),
/// flush=none|tile|step[:FORMAT]|tile+step[:FORMAT] (none, the default, is never printed).
/// Unset fields keep the Accumulation{} defaults.
/// Throws std::invalid_argument naming the bad token and listing the presets and keys.
Accumulation parse_accumulation(std::string_view text);
const std::vector<std::string>& preset_accumulation_names();

/// Σ x_i under `a`. x holds exact values (binary64). `stream` selects the stochastic stream.
double sum(const Accumulation& a, std::span<const double> x, StochasticBits bits = {}, AccumStats* stats = nullptr);
/// Σ x_i·y_i under `a`, with strides (in elements) so rows and columns can be read in place.
double dot(const Accumulation& a, const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy,
           std::size_t n, StochasticBits bits = {}, AccumStats* stats = nullptr);
inline double dot(const Accumulation& a, std::span<const double> x, std::span<const double> y,
                  StochasticBits bits = {}, AccumStats* stats = nullptr) {
  return dot(a, x.data(), 1, y.data(), 1, x.size() < y.size() ? x.size() : y.size(), bits, stats);
}

/// A read-only row-major matrix operand: element (r, c) is data[r·ld + c], or data[c·ld + r] when transposed.
struct ConstMatrix {
  const double* data;
  std::size_t ld;
  bool transposed = false;
  double operator()(std::size_t r, std::size_t c) const { return transposed ? data[c * ld + r] : data[r * ld + c]; }
};

/// ConstMatrix of binary32 elements (activations held in binary32 storage), read as their binary64 values (exact).
/// Only kernels::gemm_fast takes it; every other path reads a widened binary64 copy.
struct ConstMatrix32 {
  const float* data;
  std::size_t ld;
  bool transposed = false;
  double operator()(std::size_t r, std::size_t c) const { return transposed ? data[c * ld + r] : data[r * ld + c]; }
};

/// C(M×N) = A(M×K)·B(K×N) [+ C when accumulate], C row-major with leading dimension ldc. Each C_ij is
/// dot(a, row i of A, column j of B) in k order 0..K-1 as the Accumulation prescribes, with the current C_ij as
/// the initial partial sum when accumulate (it enters the accumulator first, exactly). Outputs are in the
/// accumulator format (the caller rounds to storage). Threads (up to `threads`, 0 = OpenMP default) split output
/// rows only; stochastic draws use stream bits.stream + i·N + j, index = step. SIMD kernels are used where a
/// bit-identical one exists and `opts` allows it (same bits either way); `cache` is the caller's B-operand pack
/// cache (kernels::PackCache; nullptr: none). Throws std::invalid_argument on inconsistent shapes.
void gemm(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B, double* C,
          std::size_t ldc, bool accumulate = false, StochasticBits bits = {}, AccumStats* stats = nullptr,
          int threads = 0, const KernelOptions& opts = {}, kernels::PackCache* cache = nullptr);

/// The k-range [lo, hi) of one output row of gemm_ranged.
struct KRange {
  std::size_t lo = 0;
  std::size_t hi = 0;
};

/// C(M×N) = A(M×K)·B(K×N) with a k-range per output row (causal products): C_ij = dot(a, A(i, lo_i..hi_i−1),
/// B(lo_i..hi_i−1, j)) in k order lo_i, lo_i+1, .., hi_i−1 — exactly numerics::dot of those hi_i − lo_i terms
/// (the partial sum starts with round(t_lo), blocks and tiles count from lo_i). Elements of A and B outside the
/// ranges are never read into a sum, so nothing is zero-padded (s + 0·x would turn −0 into +0 and 0·inf into
/// NaN). Outputs are in the accumulator format. Runs in the calling thread (callers parallelise over
/// independent problems). Stochastic draws use stream bits.stream + i·N + j, as gemm's. SIMD kernels are used
/// where a bit-identical one exists and `opts` allows it. Throws std::invalid_argument on inconsistent shapes or a
/// range that is empty or ends past K.
void gemm_ranged(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                 std::span<const KRange> rows, double* C, std::size_t ldc, StochasticBits bits = {},
                 const KernelOptions& opts = {});

}  // namespace roundoff::numerics
