#pragma once
/// \file binary32_values.hpp
/// Whether a binary64 array holds binary32 values only: the test that lets a rounding to a format holding every
/// binary32 value be skipped (round_to of a value of the format is that value, in every mode).
#include <span>

#include "numerics/kernel_options.hpp"

namespace roundoff::numerics {

/// True when every x[i] is a binary32 value, ±0 and ±inf included, NaN excluded: the conversion binary64 →
/// binary32 → binary64 gives x[i] back and x[i] is not NaN. 8 lanes with AVX-512F, 4 with AVX2, a portable loop
/// otherwise (opts.isa_limit caps the tier); the answer does not depend on the path. Under a control register
/// other than the default (numerics::default_mxcsr: FTZ or DAZ would change what the conversions and the
/// comparison see) it returns false, the conservative answer.
bool all_binary32(std::span<const double> x, const KernelOptions& opts = {});

}  // namespace roundoff::numerics
