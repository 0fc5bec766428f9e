#pragma once
/// \file gemm_binary64.hpp
/// The binary64 GEMM kernel: numerics::gemm and gemm_ranged bit for bit for the plain binary64 dot product —
/// accumulator fp64, rounding NearestEven, fused products, order Sequential, and nothing else (no
/// promotion, blocks, tile stage, multi-term adder, split-K or step flush). Any binary64 inputs.
///
/// Why bit-exact. Under that accumulation numerics::gemm's C_ij is the chain s ← fma64(a_ik, b_kj, s) for
/// k = 0 … K−1, started from C_ij (accumulate) or, without it, s_0 = mul64(a_i0, b_0j); numerics::fma at fp64
/// nearest-even is the hardware FMA (IEEE 754 fusedMultiplyAdd: one rounding, gradual underflow, overflow to
/// ±inf, IEEE signed zeros) with a NaN result replaced by the positive quiet NaN, and mul64 is the correctly
/// rounded product. The kernel runs the hardware FMA chain in SIMD lanes (one output per lane, the same k order),
/// started from C_ij or from −0: fma(a, b, −0) = RN(a·b) for all a, b — a nonzero exact product added to −0 is
/// itself, rounded once; an exact zero product (+0 or −0) plus −0 is that zero under roundTiesToEven; inf and NaN
/// products give inf and NaN as the product does. Non-finite values are absorbing along a chain (a finite product
/// plus ±inf is ±inf; any NaN operand gives NaN; an infinite operand can only give ±inf or NaN), so an output
/// that ends finite passed only finite steps, where the hardware step is the definition's; an output that ends
/// ±inf has the definition's infinity (the same hardware steps; only NaN bits were ever changed, and a NaN never
/// turns back into a number); an output that ends NaN is set to the positive quiet NaN. Overflow statistics
/// (stats): only outputs that end non-finite can have overflowed (an overflow gives ±inf and nothing leaves
/// inf/NaN), so those are replayed step by step with numerics::fma/mul and counted as numerics::gemm counts them
/// (finite operands, infinite result; binary64 has no wider format to probe for ±max_finite).
/// Entry casts (OperandCast) are applied to every value as it is packed, exactly as gemm_kernels' pack does.
/// Threads split output rows only, so the bits do not depend on the thread count.
/// tests/accumulation/gemm_binary64_test.cpp compares both entry points with the generic path (fast paths off)
/// on random, cancelling, subnormal, overflowing and special inputs, every tier, every transposition.
#include <cstddef>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/kernel_options.hpp"

namespace roundoff::numerics::kernels {

/// True when `a` is the accumulation above (the kernel's whole domain).
bool binary64_chain(const Accumulation& a);

/// gemm_fast for binary64_chain(a) on a CPU with AVX2 + FMA at least (opts.isa() != None): computes C and returns
/// true; false (C untouched) otherwise. Same contract as gemm_fast (shapes already checked, casts need stats ==
/// nullptr and a deterministic mode).
bool gemm_binary64(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                   double* C, std::size_t ldc, bool accumulate, AccumStats* stats, int threads,
                   const OperandCast* cast_a, const OperandCast* cast_b, const KernelOptions& opts);

/// gemm_ranged_fast for binary64_chain(a): rows that share their lo run their common prefix together (a row's
/// state after k terms is its running sum alone), then each its own tail. In the calling thread.
bool gemm_ranged_binary64(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A,
                          ConstMatrix B, const KRange* rows, double* C, std::size_t ldc, const KernelOptions& opts);

/// "fp64-avx512" or "fp64-avx2" under opts for binary64_chain(a), else nullptr.
const char* binary64_kernel_name(const Accumulation& a, const KernelOptions& opts);

}  // namespace roundoff::numerics::kernels
