#include "numerics/rounding.hpp"

#include <stdexcept>

namespace roundoff::numerics {

std::string_view name_of(Rounding r) {
  switch (r) {
    case Rounding::NearestEven: return "nearest-even";
    case Rounding::NearestAway: return "nearest-away";
    case Rounding::TowardZero: return "toward-zero";
    case Rounding::Up: return "up";
    case Rounding::Down: return "down";
    case Rounding::Odd: return "odd";
    case Rounding::Stochastic: return "stochastic";
  }
  return "?";
}

Rounding parse_rounding(std::string_view text) {
  for (Rounding r : kAllRoundings)
    if (name_of(r) == text) return r;
  std::string valid;
  for (Rounding r : kAllRoundings) valid += std::string(valid.empty() ? "" : ", ") + std::string(name_of(r));
  throw std::invalid_argument("unknown rounding mode '" + std::string(text) + "'; valid: " + valid);
}

}  // namespace roundoff::numerics
