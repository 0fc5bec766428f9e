#pragma once
/// \file binary32_values.hpp
/// Whether a binary64 array holds binary32 values only: the test that lets a rounding to a format holding every
/// binary32 value be skipped (round_to of a value of the format is that value, in every mode); and the widening and
/// narrowing conversions of tensors held in binary32 storage.
#include <span>

#include "numerics/kernel_options.hpp"

namespace roundoff::numerics {

/// True when every x[i] is a binary32 value, ±0 and ±inf included, NaN excluded: the conversion binary64 →
/// binary32 → binary64 gives x[i] back and x[i] is not NaN. 8 lanes with AVX-512F, 4 with AVX2, a portable loop
/// otherwise (opts.isa_limit caps the tier); the answer does not depend on the path. Under a control register
/// other than the default (numerics::default_mxcsr: FTZ or DAZ would change what the conversions and the
/// comparison see) it returns false, the conservative answer.
bool all_binary32(std::span<const double> x, const KernelOptions& opts = {});

/// dst[i] = src[i] widened to binary64 (exact; a NaN keeps its payload, quieted), i < src.size(): the loads of a
/// tensor held in binary32 storage (ops/backend.hpp). 16 lanes with AVX-512F, 8 with AVX2, a portable loop
/// otherwise (opts.isa_limit caps the tier); every path gives static_cast<double>'s bits. dst.size() ≥ src.size().
void widen_binary32(std::span<const float> src, std::span<double> dst, const KernelOptions& opts = {});

/// widen_binary32, returning true when no src[i] is NaN (the loads that may skip a rounding that leaves every
/// non-NaN binary32 value as it is; ops/backend.hpp). Tiers as widen_binary32, the same bits in dst.
bool widen_binary32_checked(std::span<const float> src, std::span<double> dst, const KernelOptions& opts = {});

/// dst[i] = static_cast<float>(src[i]), i < src.size(): the stores into binary32 storage, where every src[i] is a
/// binary32 value already (so exact; otherwise rounded as the control register says, as the cast is). Tiers as
/// widen_binary32; every path gives the cast's bits under any control register (the same conversion instruction).
void narrow_to_binary32(std::span<const double> src, std::span<float> dst, const KernelOptions& opts = {});

}  // namespace roundoff::numerics
