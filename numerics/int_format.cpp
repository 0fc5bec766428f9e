#include "numerics/int_format.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "numerics/named.hpp"

namespace roundoff::numerics {

std::string_view name_of(IntFormat t) {
  switch (t) {
    case IntFormat::Int8: return "int8";
    case IntFormat::Uint8: return "uint8";
    case IntFormat::Int4: return "int4";
    case IntFormat::Uint4: return "uint4";
  }
  return "?";
}

IntFormat parse_int_format(std::string_view text) {
  return parse_named<IntFormat>(text, kAllIntFormats, "integer type");
}

int int_bits(IntFormat t) {
  switch (t) {
    case IntFormat::Int8:
    case IntFormat::Uint8: return 8;
    case IntFormat::Int4:
    case IntFormat::Uint4: return 4;
  }
  return 0;
}

namespace {
bool is_signed(IntFormat t) {
  switch (t) {
    case IntFormat::Int8:
    case IntFormat::Int4: return true;
    case IntFormat::Uint8:
    case IntFormat::Uint4: return false;
  }
  return false;
}
}  // namespace

int int_min(IntFormat t) { return is_signed(t) ? -(1 << (int_bits(t) - 1)) : 0; }
int int_max(IntFormat t) { return is_signed(t) ? (1 << (int_bits(t) - 1)) - 1 : (1 << int_bits(t)) - 1; }

std::uint32_t int_code(IntFormat t, int value) {
  if (value < int_min(t) || value > int_max(t))
    throw std::invalid_argument(std::to_string(value) + " is not an " + std::string(name_of(t)) + " value; valid: " +
                                std::to_string(int_min(t)) + ".." + std::to_string(int_max(t)));
  return static_cast<std::uint32_t>(value) & ((1u << int_bits(t)) - 1);
}

int int_value(IntFormat t, std::uint32_t code) {
  const int bits = int_bits(t);
  if (code >> bits)
    throw std::invalid_argument("code " + std::to_string(code) + " does not fit " + std::string(name_of(t)) + " (" +
                                std::to_string(bits) + " bits)");
  const int v = static_cast<int>(code);
  return is_signed(t) && (code >> (bits - 1)) ? v - (1 << bits) : v;
}

int round_int(IntFormat t, Rounding mode, double x) {
  if (mode == Rounding::Stochastic)
    throw std::invalid_argument(std::string(name_of(t)) +
                                " is rounded deterministically; valid modes: nearest-even, nearest-away, "
                                "toward-zero, up, down, odd");
  if (std::isnan(x))
    throw std::invalid_argument(std::string(name_of(t)) + " has no NaN; only numbers can be rounded to it");
  const double lo_lim = int_min(t), hi_lim = int_max(t);
  if (x <= lo_lim) return int_min(t);
  if (x >= hi_lim) return int_max(t);
  const double fl = std::floor(x);
  const double mid = fl + 0.5;  // exact, and compared with x exactly (x - fl need not be a double)
  const int cls = x < mid ? -1 : (x == mid ? 0 : 1);
  const bool odd_fl = std::fmod(fl, 2.0) != 0;
  double r = fl;
  if (x != fl) {
    switch (mode) {
      case Rounding::NearestEven: r = cls > 0 || (cls == 0 && odd_fl) ? fl + 1 : fl; break;
      case Rounding::NearestAway: r = cls > 0 || (cls == 0 && x > 0) ? fl + 1 : fl; break;
      case Rounding::TowardZero: r = x > 0 ? fl : fl + 1; break;
      case Rounding::Up: r = fl + 1; break;
      case Rounding::Down: r = fl; break;
      case Rounding::Odd: r = odd_fl ? fl : fl + 1; break;
      case Rounding::Stochastic: break;  // refused above
    }
  }
  return static_cast<int>(std::fmin(std::fmax(r, lo_lim), hi_lim));
}

}  // namespace roundoff::numerics
