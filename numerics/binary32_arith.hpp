#pragma once
/// \file binary32_arith.hpp
/// Hardware binary32 arithmetic on arrays of floats: the elementwise + − × ÷ that an op computing and storing in
/// IEEE binary32 itself performs (ops/backend.hpp, Ctx::binary32_through), and the NaN scan its stores need.
///
/// Every tier (16 lanes with AVX-512F, 8 with AVX2, a portable loop; opts.isa_limit caps the tier) issues the same
/// IEEE 754 binary32 operation per element (the build has -ffp-contract=off: no fused multiply-add), so the bits do
/// not depend on the path; they are those of the control register in force, which the callers require to be the
/// default (numerics::default_mxcsr: round to nearest even, no flush, no denormals-are-zero). Under it each finite
/// or infinite result is the correctly rounded a op b, which is what the binary64 operation rounded once to binary32
/// gives (53 ≥ 2·24 + 2: the double rounding is innocuous; ops/span_arith.hpp has the argument for quotients and
/// subnormal results). A NaN result's encoding is the hardware's: callers that must match another path's NaN bits
/// scan with any_nan and take that path instead.
#include <cstdint>
#include <span>

#include "numerics/accumulate.hpp"
#include "numerics/kernel_options.hpp"

namespace roundoff::numerics {

enum class Binary32Op : std::uint8_t { Add, Sub, Mul, Div };

/// out[i] = a[i] op b[i] (b[0] for every i when b has one value and out more), i < out.size(); a holds out.size()
/// values. out may alias a or b.
void binary32_arith(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                    const KernelOptions& opts = {});

/// binary32_arith, then every result rounded to IEEE binary16 (fp16) to nearest-even and widened back, in one pass:
/// out[i] = fp16(a[i] op b[i]) as binary32, a NaN result the quiet NaN 0x7FC00000 — the values binary32_arith
/// followed by round_array(fp16, NearestEven) on out gives (the same two roundings, one load and store fewer). The
/// fp16 step of the ops' binary32 bodies under an fp16 compute (ops/span_arith.hpp, arith_binary32). Tiers: AVX-512F
/// and F16C conversions; otherwise the two passes.
void binary32_arith_fp16(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                         const KernelOptions& opts = {});

/// True when some x[i] is NaN. Tiers as binary32_arith; the answer does not depend on the path.
bool any_nan(std::span<const float> x, const KernelOptions& opts = {});

/// True when every x[i] is +0 (all 32 bits zero: −0 is not +0). Tiers as binary32_arith, each returning at the
/// first 1 KiB block holding a nonzero encoding; the answer does not depend on the path.
bool all_positive_zero(std::span<const float> x, const KernelOptions& opts = {});

/// True when a is the plain binary32 chain: accumulator IEEE binary32 (fp32) to nearest even, exact products
/// (fused), sequential order, no promotion, multi-term adder, tile stage, split-K or step flush (as binary64_chain
/// for fp64): a dot is s = −0, then s = fl32(s + x_k·y_k) for each k, the exact product added and rounded once.
bool binary32_chain(const Accumulation& a);

/// The binary32 chain (binary32_chain) of every row: out[r] = s after s = −0 and, for k < length[r],
/// s = fl32(s + x_r[k]·y_r[k]) (one fused multiply-add: the exact product added, rounded once to nearest even), or
/// with y null s = fl32(s + x_r[k]) (the sum); +0 for an empty row (as numerics::reduce_rows gives them). Row r of x
/// starts at x + r·x_row, of y at y + r·y_row, each with contiguous elements. Every value is a binary32 value; so is
/// every product's exact value's rounding here, which is what numerics::dot and reduce_rows compute for such an
/// accumulation on these values (the emulated round of s + x·y, exact in binary64, to binary32). Tiers: FMA
/// (vfmadd, eight rows' chains interleaved) and portable (std::fma on floats, correctly rounded as C requires): the
/// same bits, under the default control register, which callers require (default_mxcsr). NaN encodings are the
/// hardware's: callers that must match another path's NaN bits check the results.
void binary32_chain_rows(std::span<const std::size_t> length, const float* x, std::ptrdiff_t x_row, const float* y,
                         std::ptrdiff_t y_row, std::span<float> out, const KernelOptions& opts = {});

/// The binary32 chain of every column of two row-major rows × out.size() matrices (leading dimension ld):
/// out[j] = s after s = −0 and s = fl32(s + x[r·ld + j]·y[r·ld + j]) for r = 0, 1, …, rows − 1 (one fused
/// multiply-add per step, in row order); +0 when rows is 0. Tiers: AVX-512 (16 columns per vector), FMA (8), portable
/// (std::fma): lane-wise fused multiply-adds, so the same bits as binary32_chain_rows on each column.
void binary32_chain_columns(std::size_t rows, const float* x, const float* y, std::size_t ld, std::span<float> out,
                            const KernelOptions& opts = {});


/// Σ x[i]² in binary64 in a fixed order of 16 interleaved chains: chain c holds c_0 = +0 and, for the elements
/// i ≡ c (mod 16) in increasing order, c ← c + x[i]·x[i] (each square exact in binary64: 48 significant bits; each
/// addition rounded once to nearest even); the result is (((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7))) +
/// (((c8 + c9) + (c10 + c11)) + ((c12 + c13) + (c14 + c15))). Every square passes through at most ⌈n/16⌉ + 4
/// additions (the depth an error bound of the sum needs); non-finite exactly when some x[i] is (a sum of fewer than
/// 2^700 squares of finite binary32 values stays below 2^957). Tiers: AVX-512 (two vectors of 8 chains), AVX2 (four
/// of 4), portable: the same operations per chain, so the same bits, under the default control register.
double binary64_sum_of_squares16(std::span<const float> x, const KernelOptions& opts = {});
}  // namespace roundoff::numerics
