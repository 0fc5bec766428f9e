#include "studies/cli/cli_format.hpp"

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

std::string decimal_text(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace roundoff::cli
