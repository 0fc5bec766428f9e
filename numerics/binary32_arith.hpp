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

#include "numerics/kernel_options.hpp"

namespace roundoff::numerics {

enum class Binary32Op : std::uint8_t { Add, Sub, Mul, Div };

/// out[i] = a[i] op b[i] (b[0] for every i when b has one value and out more), i < out.size(); a holds out.size()
/// values. out may alias a or b.
void binary32_arith(Binary32Op op, std::span<const float> a, std::span<const float> b, std::span<float> out,
                    const KernelOptions& opts = {});

/// True when some x[i] is NaN. Tiers as binary32_arith; the answer does not depend on the path.
bool any_nan(std::span<const float> x, const KernelOptions& opts = {});

}  // namespace roundoff::numerics
