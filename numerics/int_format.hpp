#pragma once
/// \file int_format.hpp
/// Integer element types of block-scaled and group-wise formats, as a typed value with its own rounding.
///
/// int8 and int4 are two's complement ([-128, 127], [-8, 7]); uint8 and uint4 unsigned ([0, 255], [0, 15]).
/// The code of a value is its two's-complement (or unsigned) bit pattern in the low `bits` bits.
/// round_int(t, mode, x) rounds the real x to an integer in a deterministic mode (nearest-even: ties to the
/// even integer; nearest-away: ties away from zero; toward-zero, up, down; odd: x when it is an integer,
/// else the odd one of floor(x), floor(x) + 1), then saturates to [min, max] of the type. NaN is refused
/// (std::invalid_argument): an integer type has no NaN; ±inf saturate.
#include <cstdint>
#include <string_view>

#include "numerics/rounding.hpp"

namespace roundoff::numerics {

enum class IntFormat : std::uint8_t { Int8, Uint8, Int4, Uint4 };
inline constexpr IntFormat kAllIntFormats[] = {IntFormat::Int8, IntFormat::Uint8, IntFormat::Int4, IntFormat::Uint4};

/// "int8", "uint8", "int4", "uint4".
std::string_view name_of(IntFormat t);
/// Parses a name; throws std::invalid_argument listing the valid names.
IntFormat parse_int_format(std::string_view text);

int int_bits(IntFormat t);
int int_min(IntFormat t);
int int_max(IntFormat t);
/// The bit pattern of an integer in [min, max] (throws otherwise).
std::uint32_t int_code(IntFormat t, int value);
/// The integer of a code (throws for a code wider than the type).
int int_value(IntFormat t, std::uint32_t code);
/// Rounds x to an integer in `mode` and saturates to the type's range (see above).
int round_int(IntFormat t, Rounding mode, double x);

}  // namespace roundoff::numerics
