#pragma once
/// \file accumulate.hpp
/// How a sum or dot product is formed. Every reduction in roundoff goes through an Accumulation.
///
/// Semantics (the MPFR-executed twin in tests/accumulation proves each bit-exact):
///   terms     t_i = x_i (sum) or x_i·y_i (dot). fused: the exact product enters the accumulator (one rounding
///             per multiply-add, like an FMA into the accumulator format). unfused: t_i = round(product_format,
///             x_i·y_i) first, then added with one rounding.
///   order     Sequential  s = round(s + t_i), i = 0..n-1, s starts at the exact 0 (first term: round(t_0)).
///             Reverse     the same for i = n-1..0.
///             Pairwise    recursive halving: sum(lo half) + sum(hi half), halves split at n/2 (floor),
///                         each addition rounded.
///             Blocked     consecutive blocks of `block` terms summed sequentially in the accumulator format;
///                         the block sums are then combined sequentially in `outer_format` (split-K / FABsum):
///                         S = round_outer(S + block_sum_j), block sums converted exactly (outer >= acc).
///             Kahan       compensated summation in the accumulator format (every operation rounded).
///   promote   promote_every = N > 0: after every N terms the partial sum is added into a `promote_format`
///             total (rounded there) and the partial restarts at 0 (TE / DeepSeek fp8 GEMM promotion).
///   adder     adder.group = g > 0: a multi-term fused adder (tensor-core model after Fasi, Higham, Mikaitis &
///             Pranesh 2021): each step adds g exact products and the running sum in one operation; the
///             addends are aligned to the largest exponent keeping adder.extra_bits bits below the
///             accumulator's last place (truncated or rounded-to-nearest per adder.align), summed exactly,
///             and normalised to the accumulator format per adder.normalize.
///   specials  IEEE: NaN propagates, inf - inf = NaN. Overflow of the accumulator gives inf (or max finite for
///             saturating formats) and is counted in AccumStats::overflows.
///   stochastic accumulator rounding draws from StochasticBits{seed, stream}: draw index = the step number of
///             the reduction (so results do not depend on thread count).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::numerics {

enum class Order : std::uint8_t { Sequential, Reverse, Pairwise, Blocked, Kahan };

/// Multi-term fused adder parameters (tensor cores / NPUs). group == 0 disables the model.
struct MultiTermAdder {
  int group = 0;                           ///< products added per step (4 on V100, 8/16 on later parts)
  int extra_bits = 0;                      ///< bits kept below the accumulator's last place during alignment
  Rounding align = Rounding::TowardZero;   ///< TowardZero (truncate) or NearestEven, for alignment shifts
  Rounding normalize = Rounding::TowardZero;  ///< rounding of the normalised result to the accumulator format
  int carry_bits = 2;                      ///< carry-out bits available above the leading bit
  friend constexpr bool operator==(const MultiTermAdder&, const MultiTermAdder&) = default;
};

/// A complete description of how a sum or dot product is formed.
struct Accumulation {
  Format format = formats::fp32;           ///< accumulator format
  Rounding rounding = Rounding::NearestEven;  ///< accumulator rounding
  bool fused = true;                       ///< exact products enter the accumulator
  Format product_format = formats::fp32;   ///< when !fused: products are rounded here first
  Order order = Order::Sequential;
  int block = 0;                           ///< Blocked: block size b
  Format outer_format = formats::fp32;     ///< Blocked: format of the outer sum of block sums
  int promote_every = 0;                   ///< 0 = never
  Format promote_format = formats::fp32;
  MultiTermAdder adder{};
  friend constexpr bool operator==(const Accumulation&, const Accumulation&) = default;
};

/// Counters a reduction reports.
struct AccumStats {
  std::int64_t overflows = 0;  ///< partial sums that overflowed to inf (or saturated)
  std::int64_t terms = 0;
};

/// Canonical text, e.g. "fp16-seq", "acc=fp16:nearest-even,order=blocked:32,outer=fp32,fused". Presets print as
/// their preset name; parse_accumulation(canonical(a)) == a.
std::string canonical(const Accumulation& a);
/// Preset name (fp16-seq, bf16-seq, fp32-seq, fp64-seq, fp16-pairwise, fp16-kahan, fp16-splitk32-fp32,
/// fp16-sr, tc-v100, ...) or key=value spec. Throws std::invalid_argument naming the bad token and valid names.
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

/// C(M×N) = A(M×K)·B(K×N) [+ C when accumulate], C row-major with leading dimension ldc. Each C_ij is
/// dot(a, row i of A, column j of B) in k order 0..K-1 as the Accumulation prescribes, with the current C_ij as
/// the initial partial sum when accumulate (it enters the accumulator first, exactly). Outputs are in the
/// accumulator format (the caller rounds to storage). Threads (up to `threads`, 0 = OpenMP default) split output
/// rows only; stochastic draws use stream bits.stream + i·N + j, index = step. SIMD kernels are used where a
/// bit-identical one exists. Throws std::invalid_argument on inconsistent shapes.
void gemm(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B, double* C,
          std::size_t ldc, bool accumulate = false, StochasticBits bits = {}, AccumStats* stats = nullptr,
          int threads = 0);

}  // namespace roundoff::numerics
