#include "studies/cli/cli_checks.hpp"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace roundoff::cli {

namespace {

/// True when `t` is [-]digits and its value fits in int64 (stored in `v`).
bool parse_int64(const std::string& t, std::int64_t& v) {
  const std::size_t start = !t.empty() && t[0] == '-' ? 1 : 0;
  if (t.size() == start || t.find_first_not_of("0123456789", start) != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(t.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  v = x;
  return true;
}

std::string got(const std::string& t) { return " (got '" + t + "')"; }

}  // namespace

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  const std::string range = max == std::numeric_limits<std::int64_t>::max()
                                ? "an integer >= " + std::to_string(min)
                                : "an integer in " + std::to_string(min) + ".." + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& t) -> std::string {
        std::int64_t v = 0;
        if (!parse_int64(t, v) || v < min || v > max) return "must be " + range + got(t);
        return {};
      },
      range.substr(range.find(' ') + 1));
}

CLI::Validator integer_at_least(std::int64_t min) { return integer_in(min, std::numeric_limits<std::int64_t>::max()); }

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& t) -> std::string {
        const std::string why = "must be an integer in 0..18446744073709551615" + got(t);
        if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos) return why;
        errno = 0;
        char* end = nullptr;
        (void)std::strtoull(t.c_str(), &end, 10);
        if (errno == ERANGE || *end != '\0') return why;
        return {};
      },
      "0..2^64-1");
}

CLI::Validator finite_at_least(double min, bool strict) {
  char num[32];
  std::snprintf(num, sizeof num, "%g", min);
  const std::string bound = std::string(strict ? "> " : ">= ") + num;
  return CLI::Validator(
      [min, strict, bound](std::string& t) -> std::string {
        const std::string why = "must be a finite number " + bound + got(t);
        if (t.empty()) return why;
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        if (*end != '\0' || !std::isfinite(v) || (strict ? !(v > min) : !(v >= min))) return why;
        return {};
      },
      "finite " + bound);
}

numerics::kernels::Isa parse_isa_limit(const std::string& text) {
  using numerics::kernels::Isa;
  for (const Isa isa : {Isa::None, Isa::Avx2, Isa::Avx512, Isa::Avx512Fp16})
    if (text == numerics::kernels::name_of(isa)) return isa;
  return Isa::Avx512Fp16;  // "best"
}

CLI::Validator isa_limit() {
  return CLI::Validator(
      [](std::string& t) -> std::string {
        using numerics::kernels::Isa;
        const std::string valid = "best, avx512fp16, avx512, avx2 or none";
        const Isa cpu = numerics::kernels::detected_isa();
        for (const Isa isa : {Isa::None, Isa::Avx2, Isa::Avx512, Isa::Avx512Fp16}) {
          if (t != numerics::kernels::name_of(isa)) continue;
          if (isa > cpu)
            return "names an instruction set this CPU lacks (it has " + std::string(numerics::kernels::name_of(cpu)) +
                   "; valid: " + valid + " up to that)" + got(t);
          return {};
        }
        return t == "best" ? std::string{} : "must be " + valid + got(t);
      },
      "ISA");
}

CLI::Validator thread_count() {
  const int procs = std::max(1, omp_get_num_procs());
  return integer_in(1, procs);
}

}  // namespace roundoff::cli
