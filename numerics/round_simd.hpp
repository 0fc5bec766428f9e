#pragma once
/// \file round_simd.hpp
/// Fast array paths for rounding binary32 data, chosen at run time. Each returns false when it does not
/// handle the (format, mode) pair, and the caller falls back to the scalar round_to. Every path must be
/// bit-identical to round_to (tests/numerics/round_simd_test.cpp checks all 2^32 inputs under -L exhaustive
/// and a stratified sample by default).
#include <cstdint>
#include <span>

#include "numerics/round.hpp"

namespace roundoff::numerics::simd {

/// Integer bit-trick paths with no ISA requirement (the compiler may auto-vectorise them).
bool round_float_portable(const RoundingPlan& plan, Rounding mode, std::span<const float> src,
                          std::span<float> dst, StochasticBits bits, std::uint64_t first_index);
/// The best path the running CPU supports (AVX-512 / F16C), else round_float_portable.
bool round_float_fast(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                      StochasticBits bits, std::uint64_t first_index);
/// Name of the path round_float_fast would take on this CPU ("avx512", "f16c", "portable").
const char* fast_path_name();

}  // namespace roundoff::numerics::simd
