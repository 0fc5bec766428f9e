#pragma once
/// \file named.hpp
/// Parsing an enum from its name: the one loop behind parse_rounding, parse_int_format, parse_scale_format and
/// parse_scale_rule. The list of valid names in the error is built from name_of, so it cannot drift from the
/// enumerators.
#include <stdexcept>
#include <string>
#include <string_view>

namespace roundoff::numerics {

/// The enumerator of `all` whose name_of is `text`; else std::invalid_argument
/// "unknown WHAT 'TEXT'; valid: a, b, c".
template <class E, class All>
E parse_named(std::string_view text, const All& all, std::string_view what) {
  for (const E e : all)
    if (name_of(e) == text) return e;
  std::string valid;
  for (const E e : all) valid += std::string(valid.empty() ? "" : ", ") + std::string(name_of(e));
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(text) + "'; valid: " + valid);
}

}  // namespace roundoff::numerics
