#pragma once
/// \file cli_checks.hpp
/// Validators for numeric command-line options. They read the option's text before CLI11 converts it, so
/// nothing wraps or saturates silently: "-1" is not a seed, "inf" is not a learning rate, "abc" is not a
/// count. A failure prints one line "--flag: <what is valid> (got '<text>')" and exits non-zero.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "numerics/kernel_options.hpp"

namespace roundoff::cli {

/// A decimal integer in [min, max] (no sign for min >= 0, no spaces, no exponent).
CLI::Validator integer_in(std::int64_t min, std::int64_t max);
/// A decimal integer >= min (up to 2^63 − 1).
CLI::Validator integer_at_least(std::int64_t min);
/// A seed: a decimal integer in [0, 2^64 − 1].
CLI::Validator seed_value();
/// A finite number, > min when `strict`, else >= min (rejects inf, nan and text that is not a number).
CLI::Validator finite_at_least(double min, bool strict);
/// A thread count: 1 .. the number of processors OpenMP sees.
CLI::Validator thread_count();
/// An instruction-set limit for the kernels: best, avx512fp16, avx512, avx2 or none (the generic code). A named set
/// this CPU lacks is refused, so a timing never silently runs another tier than the one asked for.
CLI::Validator isa_limit();
/// The limit an isa_limit()-checked text names ("best": no limit).
numerics::kernels::Isa parse_isa_limit(const std::string& text);

}  // namespace roundoff::cli
