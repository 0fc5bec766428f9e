#pragma once
/// \file round_span.hpp
/// Rounding of binary64 spans in the deterministic modes with AVX-512F, 8 values per instruction, or AVX2, 4.
///
/// Contract: round_doubles_avx512(plan, mode, src, dst) writes dst[i] = round_to(plan, mode, src[i]) for every
/// i, bit for bit, for every format and every mode but Stochastic. Argument: it is round_to's own fast path
/// (numerics/round.cpp) evaluated on 8 lanes. A lane whose magnitude's encoding lies in
/// [plan.fast_lo_bits, plan.fast_hi_bits] (the format's normal binades) is rounded by integer arithmetic on the
/// binary64 encoding, with the same comparisons of the dropped bits against half an ulp, the same carry into
/// the exponent and the sign put back, as round_to does; a zero is returned as it is (round_to returns x for
/// ±0). Every other lane (subnormal-range, out-of-range, ±inf, NaN) and every lane whose rounded magnitude
/// exceeds plan.max_finite (the overflow rule) is recomputed by the scalar round_to itself. So the two can
/// differ only if the lane arithmetic differs from round_to's, which tests/numerics/round_span_test.cpp checks
/// on every handled mode for formats of every shape (binary16/32/64, bfloat16, tf32, FP8, no-subnormal,
/// saturating) on random, boundary, tie, subnormal, overflow and special inputs. One exception: the IEEE
/// binary32 format under NearestEven, with the control register in its default state (exceptions masked,
/// round-to-nearest-even, no FTZ/DAZ), takes the hardware conversions binary64 → binary32 → binary64, which
/// IEEE 754 defines as that same rounding (gradual underflow, overflow to ±inf); NaN lanes still go through
/// round_to (argument: docs/numerics.md; RoundSpan.Binary32NearestEvenConversionEqualsRoundTo).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "numerics/kernel_options.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

/// dst[i] = round_to(plan, mode, src[i]) for every i. Returns false, leaving dst untouched, when mode is
/// Stochastic, the sizes differ, or the CPU lacks AVX-512F. dst may alias src exactly.
bool round_doubles_avx512(const RoundingPlan& plan, Rounding mode, std::span<const double> src,
                          std::span<double> dst);

/// True when the running CPU supports round_doubles_avx512.
bool round_doubles_avx512_supported();

/// round_doubles_avx512 on 4 lanes with AVX2 (for CPUs without AVX-512F): the same contract, the same integer
/// lane arithmetic (with signed 64-bit comparisons, exact here because every operand compared is below 2^63) and
/// the same hardware-conversion paths under the default MXCSR for the IEEE binary32 and binary16 formats under
/// NearestEven. AVX2 has no conversion with an explicit rounding, so binary16's rounding to odd in binary32 takes
/// the conversion to nearest and steps the encoding one quantum toward zero where the result's magnitude exceeds
/// |x| (argument at ToBinary16x4 in numerics/round_span.cpp and in docs/numerics.md). A tail of fewer than 4
/// values goes through round_to. Returns false, leaving dst untouched, when mode is Stochastic, the sizes differ,
/// or the CPU lacks AVX2 or F16C. dst may alias src exactly.
bool round_doubles_avx2(const RoundingPlan& plan, Rounding mode, std::span<const double> src, std::span<double> dst);

/// True when the running CPU supports round_doubles_avx2.
bool round_doubles_avx2_supported();

/// True when the SSE/AVX control register holds the default state: every exception masked (bits 7–12),
/// round to nearest even (bits 13–14 zero), no flush-to-zero (bit 15) and no denormals-are-zero (bit 6).
/// The binary32 conversion paths (here and in the GEMM kernels' cast-in-pack) rely on it; another state falls
/// back to the integer path.
bool default_mxcsr();

/// True when every x[i] is finite (not ±inf, not NaN): 8 lanes at a time with AVX-512F, 4 with AVX2, a portable
/// loop on the exponent bits otherwise (opts.isa() caps the tier). The answer does not depend on the path.
bool all_finite(std::span<const double> x, const KernelOptions& opts = {});
/// The same for binary32 values (16 lanes with AVX-512F, 8 with AVX2, the portable loop otherwise).
bool all_finite(std::span<const float> x, const KernelOptions& opts = {});

/// True when every x[i] is a value of IEEE binary16 (fp16: ±0, subnormals from 2^-24, normals up to 65504, ±inf),
/// NaNs counting as values when nan_ok: the conversion to binary16 (nearest even) and back returns each such
/// x[i] and no other. 16 lanes with AVX-512F, 8 with AVX2 and F16C, under the default MXCSR (default_mxcsr());
/// otherwise, or with opts.isa() below both, round_to to fp16 per element. The answer does not depend on the path.
bool binary16_values(std::span<const float> x, bool nan_ok, const KernelOptions& opts = {});

/// The binary64 operations of op_round_avx512.
enum class SpanOp : std::uint8_t { Add, Sub, Mul, Div };

/// One fused pass of an elementwise operation rounded to a format: for every i < n, with y = b[bcast ? 0 : i],
/// out[i] = round_to(plan, NearestEven, a[i] op y), the operation in binary64, when a[i] and y are values of
/// plan.format (round_to returns them bit for bit) and that result is finite; every other i (an operand NaN or
/// not a value of the format, a non-finite result, or a lane round_to's lane path hands to the scalar
/// round_to) is appended to `slow` in ascending order, its out[i] unspecified. The lanes use the roundings of
/// round_doubles_avx512 (so out[i] is round_to's value); whether a[i] op y rounded once to the format is the
/// correctly rounded operation is the caller's argument (ops/span_arith.hpp). Returns false, touching nothing,
/// when the CPU lacks AVX-512F or opts.isa_limit is below AVX-512. out must not alias a or b.
bool op_round_avx512(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
                     std::size_t n, std::vector<std::size_t>& slow, const KernelOptions& opts = {});

/// op_round_avx512 on 4 lanes with AVX2 (the lane roundings of round_doubles_avx2); the elements of a tail of
/// fewer than 4 are appended to `slow` as well. Returns false, touching nothing, when the CPU lacks AVX2 or F16C
/// or opts.isa_limit is below AVX2. out must not alias a or b.
bool op_round_avx2(const RoundingPlan& plan, SpanOp op, const double* a, const double* b, bool bcast, double* out,
                   std::size_t n, std::vector<std::size_t>& slow, const KernelOptions& opts = {});

}  // namespace roundoff::numerics
