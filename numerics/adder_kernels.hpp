#pragma once
/// \file adder_kernels.hpp
/// SIMD GEMM kernels for the multi-term adder (Accumulation::adder, the tensor-core models tc-*), bit-identical to
/// the generic numerics::gemm / gemm_ranged. numerics::kernels::gemm_fast and gemm_ranged_fast call them for every
/// accumulation with an adder; they return false (C untouched) when they do not cover it, and the generic path runs.
///
/// Covered accumulations (adder_plan checks every field: the accumulation is rebuilt from the fields below and
/// must equal the given one, so a field added to Accumulation later is declined until it is implemented here):
///   fused, order Sequential, no block, no tile stage; any adder group (the presets use 4..32), extra and carry
///   bits, anchor LeadingBit or ExponentSum (any input emin), edges Ieee or InfPositiveZero; align and normalize
///   toward-zero or nearest-even; an accumulator format with subnormals, IEEE specials, not saturating,
///   p ≤ 30, p + extra ≤ 42, its range inside 2^±850; when align and normalize are not both toward-zero, the
///   register must be wide enough that it never loses bits (g·2^(p+1+extra) + 2^(p+extra) < 2^(p+extra+carry),
///   2^(p+extra) per product for LeadingBit: true for tc-h100-f16acc); promotion (promote=N) only into binary32
///   with rounding NearestEven and an accumulator inside binary32. The accumulation's own rounding is unused
///   without promotion (the adder rounds with align/normalize), so it may be any deterministic mode there.
/// Covered inputs (checked while packing, else false): every element of A and B is 0, inf, NaN, or finite with at
/// most 26 significant bits and 2^-400 ≤ |x| ≤ 2^400 (every fp16, bf16, tf32, fp8 value); with accumulate, every
/// finite C_ij is 0 or 2^-900 ≤ |C_ij| ≤ 2^900, and a binary32 value when promoting. An output whose row of A or
/// column of B holds an inf or NaN (or whose C_ij is not finite) is recomputed afterwards by the generic path
/// alone (numerics::gemm of that one output, or numerics::dot of its range for gemm_ranged: each output depends
/// only on its row, column and C_ij), its lane's result and overflow count discarded; when that is more than half
/// of the outputs the call declines instead.
///
/// Why bit-exact: the generic step (numerics/accumulate.cpp, adder_step) is, for addends v (the running sum s and
/// the exact products), E = max anchor, q = E − (p−1) − extra, T = Σ A(v·2^−q) (A: truncate or round to an
/// integer), the register kept to p + extra + carry bits, then N(T·2^q) with the edge rules. The kernels compute,
/// per lane (one output column), all in binary64:
///   products  a·b exact (26 + 26 ≤ 53 bits, no underflow or overflow in the range above);
///   anchors   as powers of two: 2^E = max over nonzero addends of 2^anchor (ExponentSum: 2^ea·2^eb with the
///             anchors packed from each operand's exponent, max(e, input_emin); LeadingBit and the running sum:
///             the exponent field of the binary64 value, which is 2^⌊log2|v|⌋ for a normal value, 0 for zero);
///   alignment v·2^−q is exact (a power-of-two scale; a value that lands below binary64's normal range is below
///             1 and its integer part, 0, is still exact), then roundscale/round to an integer toward zero or to
///             nearest-even = A. Each |A(v)| ≤ 2^(p+1+extra), at most 257 of them: T is an exact binary64 sum of
///             integers below 2^53 (p + extra ≤ 42), and +0 when it is zero (the sum starts at +0);
///   register  never wider than p + extra + carry bits under the bound above; when align and normalize are both
///             toward zero, cutting the register first changes nothing: both truncations land on nested grids
///             (the accumulator's quantum at T's binade is coarser than the register's) and keep the leading bit;
///   N         V = T·2^q is exact; Q = max(2^⌊log2|V|⌋·2^(1−p), 2^(emin−p+1)) is the accumulator's quantum there,
///             x = round(V/Q)·Q with the normalize mode, exact; |x| > max_finite is an overflow (counted as IEEE
///             754 §7.4 does), giving ±inf (nearest-even, or edges InfPositiveZero, whose test "the register's
///             leading bit above emax" is the same set of values) or ±max_finite (toward zero, IEEE edges); a zero
///             result keeps V's sign under IEEE edges and is +0 under InfPositiveZero;
///   specials  with finite operands (the lanes kept) the only non-finite value is an overflowed running sum ±inf:
///             the generic step then returns round(±inf) = ±inf, so such lanes keep it;
///   promotion the chunk sums (binary32 values) enter the binary32 total by binary32 addition (one RNE rounding),
///             overflows counted when both operands are finite; a NaN (inf − inf) is the positive quiet NaN.
/// Vectorised across output columns (panels of 16), several rows per call sharing each B load; threads split
/// output rows only, so results do not depend on the thread count. tests/accumulation/adder_kernels_test.cpp
/// compares every class of input against the generic path.
#include <cstddef>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"

namespace roundoff::numerics::kernels {

/// C = A·B (+ C) as numerics::gemm specifies, when `a` has a multi-term adder these kernels cover and the inputs
/// qualify (see above); false with C untouched otherwise, or when isa is None.
bool gemm_adder(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads, Isa isa);

/// numerics::gemm_ranged's product under the same conditions, in the calling thread.
bool gemm_ranged_adder(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A,
                       ConstMatrix B, const KRange* rows, double* C, std::size_t ldc, Isa isa);

/// "adder-avx512" or "adder-avx2" when the kernels cover `a` on `isa`, else nullptr.
const char* adder_kernel_name(const Accumulation& a, Isa isa);

}  // namespace roundoff::numerics::kernels
