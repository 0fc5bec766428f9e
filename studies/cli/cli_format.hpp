#pragma once
/// \file cli_format.hpp
/// Shared helpers for printing format values at the CLI: bits, hex-float, JSON lines.
#include <cstdint>
#include <string>

#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::cli {

/// The encoding of x in f as "0x3c00" (width from the format), or "" when f has no encoding.
std::string bits_text(const numerics::Format& f, double x);
/// Shortest decimal that reads back to x ("%.17g" trimmed), "inf", "-inf" or "nan".
std::string decimal_text(double x);

/// Why the exact value of `text` is not a value of plan's format ("" when it is). lo and hi are `text` rounded
/// down and up to the format: a finite value must have lo == hi; an infinity needs a format with infinities
/// (e4m3 and :nospecials formats have none, and rounding saturates or gives NaN instead); a NaN needs a
/// format with a NaN.
std::string not_a_value_of(const numerics::RoundingPlan& plan, const std::string& text, double lo, double hi);

}  // namespace roundoff::cli
