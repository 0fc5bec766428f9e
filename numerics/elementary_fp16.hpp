#pragma once
/// \file elementary_fp16.hpp
/// The correctly rounded fp16 elementary functions of fp16 inputs, by table.
///
/// An fp16 input has 65,536 encodings, so elementary(RoundingPlan(fp16), nearest-even, f, x) over all of them is
/// a table: binary32 results (every fp16 value, ±0 and ±inf is one) indexed by the input's fp16 bits, 256 KiB
/// per function, built once per process from elementary_span (bit for bit numerics::elementary) and never
/// changed after. A call converts each input to its fp16 bits (exact: the inputs are fp16 values) and reads the
/// table. tests/numerics/elementary_fp16_test.cpp compares every entry with MPFR (elementary_mpfr) and every tier
/// with the portable loop.
#include <span>

#include "numerics/arith.hpp"
#include "numerics/kernel_options.hpp"

namespace roundoff::numerics {

/// When every src[i] is an fp16 value (NaN is not one): dst[i] = elementary(RoundingPlan(formats::fp16),
/// Rounding::NearestEven, f, src[i]) for every i (a binary32 value: exact) and true. Otherwise false, dst
/// unchanged. dst may be src; otherwise the two do not overlap. `opts`: the instruction sets the loops may use.
bool elementary_fp16_values(Elementary f, std::span<const float> src, std::span<float> dst,
                            const KernelOptions& opts = {});

}  // namespace roundoff::numerics
