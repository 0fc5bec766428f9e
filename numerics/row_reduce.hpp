#pragma once
/// \file row_reduce.hpp
/// Many independent reductions at once, one reduction per SIMD lane ("rows across lanes"): out[r] is exactly
/// numerics::dot (or numerics::sum) of reduction r under the Accumulation, bit for bit, because every lane runs
/// that reduction's own algorithm — same term order, same roundings — and lanes never mix.
///
/// Lane kernels (binary64 lanes; AVX-512: 4 vectors of 8 lanes, AVX2: 4 of 4; the caller's KernelOptions::isa()
/// caps the tier, Isa::None → no kernel), for accumulations with rounding NearestEven, no promotion, no
/// multi-term adder, fused products (or sums), order Sequential:
///   Seq      accumulator F with p ≤ 24, F inside binary32's exponent range with subnormals, IEEE specials, not
///            saturating (fp16, bf16, tf32, fp32): each step s ← round_F(s + t) is evaluated as
///              t = x·y in binary64, exact (checked per term: fma(x, y, −t) == 0, else the lane is "bad");
///              (hi, lo) = TwoSum(s, t), exact: hi + lo = s + t;
///              v = (hi + c) − c with c = 1.5·2^52·q, q = 2^(max(⌊log2|hi|⌋, emin_F) − p + 1): binary64's
///                ties-to-even rounding of hi to a multiple of q (the sum's ulp is q), i.e. round_F(hi);
///              if hi is an F-midpoint (|hi − v| = q/2) and lo ≠ 0 has the sign of hi − v, v ← v + 2(hi − v).
///            round_F(hi + lo) = round_F(hi) unless hi is a midpoint: F's midpoints are binary64 values, and hi is
///            the binary64 value nearest to hi + lo, so no midpoint lies strictly between them; at a midpoint
///            lo's sign decides. The sign is hi's (a zero sum keeps IEEE's sign of s + t, a tiny one rounded to
///            zero keeps its own). The first step starts from s = −0, so it gives round_F(t_0) as dot does.
///   Binary64 accumulator fp64: s ← fma(x, y, s) (sum: s + x), the correctly rounded binary64 step.
///   Tile     the ane-tile4 family: accumulator F as in Seq, tile stage of g terms rounded toward zero to a
///            format T like F: the tile's terms (exact binary64 products, checked) summed in binary64 with every
///            TwoSum error 0 (checked: the binary64 sum is then the exact tile sum), an exactly zero sum → +0,
///            truncated to T on the encoding (clearing the bits below T's quantum), then added as in Seq. A
///            tile wholly past a lane's length adds nothing. flush=tile: a truncated tile value below 2^emin_T
///            in magnitude becomes the zero of its sign before the add. flush=step (without a tile stage): Seq, each rounded
///            partial sum below 2^emin of the step format becomes the zero of its sign (the definition's order).
/// A lane that meets anything else — a non-finite value, an inexact product or tile sum, a result above
/// max_finite (overflow), a tile sum below 2^-1000 — is recomputed by numerics::dot/sum itself. The
/// stochastic streams are never used (the accumulation is not stochastic), so out[r] equals dot/sum with
/// any stream. tests/accumulation/row_reduce_test.cpp compares every kernel with dot/sum on random, ragged,
/// cancelling, subnormal, overflowing and special inputs at every ISA tier.
#include <cstddef>
#include <cstdint>
#include <span>

#include "numerics/accumulate.hpp"

namespace roundoff::numerics {

/// R independent reductions: reduction r has length[r] terms; its term k is x[r·x_row + k·x_step], multiplied
/// by y[r·y_row + k·y_step] for a dot (y non-null), alone for a sum (y null). T is the value type (binary64
/// here; the ops' reference backend uses the same layout with MPFR values).
template <class T>
struct BasicRowBatch {
  std::span<const std::size_t> length;
  const T* x;
  std::ptrdiff_t x_row, x_step;
  const T* y = nullptr;
  std::ptrdiff_t y_row = 0, y_step = 0;
};
using RowBatch = BasicRowBatch<double>;

/// out[r] = dot(a, x + r·x_row, x_step, y + r·y_row, y_step, length[r]) (or the sum) for every r, through the
/// lane kernels; returns false, writing nothing, when no lane kernel handles `a` on this CPU under opts.isa().
/// recomputed (optional) is incremented by the number of reductions the kernel flagged and dot/sum redid.
bool reduce_rows(const Accumulation& a, const RowBatch& rows, std::span<double> out,
                 std::size_t* recomputed = nullptr, const KernelOptions& opts = {});

/// The lane kernel reduce_rows would use under opts for `a` ("seq-avx512", "binary64-avx2", "tile-avx512", ...),
/// or nullptr.
const char* row_kernel_name(const Accumulation& a, const KernelOptions& opts = {});

}  // namespace roundoff::numerics
