#pragma once
/// \file pair_parts.hpp
/// The exact value of a double pair hi + lo as ExactParts, for round_pair_scaled and numerics/elementary_dd.
#include "numerics/round.hpp"

namespace roundoff::numerics {

/// hi + lo for finite hi != 0 and |lo| <= 2·ulp(hi): hi's 53 bits at bits 64..116 of m, lo added exactly down to
/// bit 0, and below that floored with sticky set (so the value lies in (m, m + 1)·2^exp when sticky).
ExactParts pair_parts(double hi, double lo);

}  // namespace roundoff::numerics
