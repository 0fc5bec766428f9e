#pragma once
/// \file round_simd.hpp
/// Fast array paths for rounding binary32 data, chosen at run time. Each returns false when it does not
/// handle the (format, mode) pair, and the caller falls back to the scalar round_to. Every path is
/// bit-identical to round_to, NaN included (a NaN input gives the quiet NaN 0x7FC00000, as
/// static_cast<float>(round_to(...)) does); tests/numerics/round_simd_test.cpp checks all 2^32 inputs for
/// the nearest-even fp16/bf16 paths and stratified samples for every handled (format, mode).
///
/// Handled formats: IEEE specials, subnormals on, not saturating, 2 <= p <= 23, emin >= -126, emax <= 127,
/// emin - p + 1 <= 0 (fp16, bf16, tf32, e5m2 and custom formats of that shape). Everything else (nosub,
/// saturating, NanOnly/None specials, e4m3) returns false. The binary32 environment must not flush
/// subnormals (no FTZ/DAZ), as for the scalar path's float conversions.
///
/// Paths:
///  - Portable: add-and-mask on the binary32 encoding for targets in the normal range (the carry walks into
///    the exponent), exact float scaling and a truncating conversion for targets in the subnormal range;
///    all seven modes; no ISA requirement (GCC/Clang vector extensions in 4-lane groups, SSE2 on x86-64;
///    scalar tails; the stochastic variant is scalar). Independent of the FP rounding mode.
///  - F16C (AVX2 + F16C): fp16 nearest-even / toward-zero / up / down via vcvtps2ph + vcvtph2ps; bf16 all
///    deterministic modes by the AVX-512 path's add-and-mask in 8 lanes; stochastic rounding for every handled
///    format with the counter RNG in 4 × 64-bit lanes (8 elements whose values are all in the normal range or
///    zero at a time; others by the portable scalar code with the same draws).
///  - AVX-512 (F + DQ): fp16 as F16C but 16 lanes; bf16 all deterministic modes by add-and-mask on the
///    encoding (subnormals exact, unlike vcvtneps2bf16); stochastic rounding for every handled format with
///    the counter RNG vectorised (8 × 64-bit lanes, vpmullq); other pairs go to Portable.
#include <cstdint>
#include <span>

#include "numerics/round.hpp"

namespace roundoff::numerics::simd {

/// An implementation of the float array rounding. Avx512 and F16c need the CPU features named.
enum class Path : std::uint8_t { Portable, F16c, Avx512 };

/// True when the running CPU (and OS) supports the path.
bool path_supported(Path path);
/// "portable", "f16c", "avx512".
const char* path_name(Path path);

/// dst[i] = round(src[i]) with stochastic draws bits.draw(first_index + i), through the given path (which
/// must be supported). Returns false, leaving dst untouched, when the path does not handle
/// (plan.format, mode) or src and dst differ in size. dst may alias src exactly (same element positions).
bool round_float_with(Path path, const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                      std::span<float> dst, StochasticBits bits, std::uint64_t first_index);

/// Stochastic rounding with explicit draws: element i rounds up (in magnitude) as round_to(plan,
/// Stochastic, src[i], draws[i]) does. For tests of the draw == frac64 boundary, which the counter stream
/// cannot be steered to. False as round_float_with, or when draws.size() != src.size().
bool round_float_stochastic_with_draws(Path path, const RoundingPlan& plan, std::span<const float> src,
                                       std::span<float> dst, std::span<const std::uint64_t> draws);

/// The portable path (no ISA requirement).
bool round_float_portable(const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                          std::span<float> dst, StochasticBits bits, std::uint64_t first_index);
/// The best path the running CPU supports (AVX-512 / F16C), else round_float_portable.
bool round_float_fast(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                      StochasticBits bits, std::uint64_t first_index);
/// The best path this CPU supports.
Path fast_path();
/// Name of the path round_float_fast would take on this CPU ("avx512", "f16c", "portable").
const char* fast_path_name();

}  // namespace roundoff::numerics::simd
