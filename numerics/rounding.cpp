#include "numerics/rounding.hpp"

#include "numerics/named.hpp"

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

Rounding parse_rounding(std::string_view text) { return parse_named<Rounding>(text, kAllRoundings, "rounding mode"); }

}  // namespace roundoff::numerics
