#pragma once
/// \file cli_format.hpp
/// Shared helpers for printing format values at the CLI: bits, hex-float, JSON lines.
#include <cstdint>
#include <string>

#include "numerics/format.hpp"

namespace roundoff::cli {

/// The encoding of x in f as "0x3c00" (width from the format), or "" when f has no encoding.
std::string bits_text(const numerics::Format& f, double x);
/// Shortest decimal that reads back to x ("%.17g" trimmed), "inf", "-inf" or "nan".
std::string decimal_text(double x);

}  // namespace roundoff::cli
