#include "studies/cli/cli_format.hpp"

#include "numerics/csv.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace roundoff::cli {

std::string bits_text(const numerics::Format& f, double x) {
  const auto enc = numerics::encoding_of(f);
  if (!enc) return "";
  if (std::isnan(x) && f.specials == numerics::Specials::None) return "";
  const int digits = (enc->total_bits() + 3) / 4;
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(numerics::to_bits(f, x)));
  return buf;
}

std::string decimal_text(double x) { return numerics::shortest_decimal(x); }

std::string not_a_value_of(const numerics::RoundingPlan& plan, const std::string& text, double lo, double hi) {
  const std::string fmt = numerics::name_of(plan.format);
  const double approx = std::strtod(text.c_str(), nullptr);  // only its class is used: inf, nan or finite
  if (std::isnan(approx))
    return numerics::is_representable(plan, approx) ? "" : "is not a value of " + fmt + " (the format has no NaN)";
  if (std::isinf(approx) && !numerics::is_representable(plan, approx))
    return "is not a value of " + fmt + " (the format has no infinities)";
  if (!(lo == hi))
    return "is not representable in " + fmt + " (neighbours " + decimal_text(lo) + " and " + decimal_text(hi) + ")";
  if (!numerics::is_representable(plan, lo)) return "is not a value of " + fmt;
  return {};
}

}  // namespace roundoff::cli
