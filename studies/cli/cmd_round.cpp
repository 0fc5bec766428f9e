// `roundoff round` and `roundoff arith`: one correctly rounded conversion or operation per line.
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/arith.hpp"
#include "numerics/mpfr_util.hpp"
#include "studies/cli/cli_format.hpp"
#include "studies/cli/cli_checks.hpp"
#include "studies/cli/commands.hpp"

namespace roundoff::cli {

using namespace numerics;

namespace {

struct RoundArgs {
  std::string format = "fp16";
  std::string mode = "nearest-even";
  std::uint64_t seed = 0;
  bool json = false;
  std::vector<std::string> values;
  std::string op;
};

/// Error of `result` against the exact value of `text`, in ulps of the format at the exact value
/// (NUMERICS.md convention), evaluated with MPFR at 256 bits.
double error_ulps(const Format& f, const std::string& text, double result) {
  if (!std::isfinite(result)) return std::nan("");
  Mpfr exact(256), diff(256);
  const int inexact = mpfr_strtofr(exact, text.c_str(), nullptr, 0, MPFR_RNDN);  // nonzero: beyond 256 bits
  if (!mpfr_number_p(exact)) return std::nan("");
  mpfr_sub_d(diff, exact, result, MPFR_RNDN);
  const long e = mpfr_zero_p(exact) ? f.emin : std::max<long>(mpfr_get_exp(exact) - 1, f.emin);
  mpfr_mul_2si(diff, diff, -(e - f.precision + 1), MPFR_RNDN);
  const double ulps = std::fabs(mpfr_get_d(diff, MPFR_RNDN));
  // An error too small for a double (round 1e-999999 -> 0) is still not zero: say so rather than "0 ulp".
  if (ulps == 0 && (inexact != 0 || !mpfr_zero_p(diff))) return std::numeric_limits<double>::denorm_min();
  return ulps;
}

/// The error text: "%.4g", or "< 1e-300" for an inexact result whose error underflows a double.
std::string error_text(double ulps) {
  if (ulps == std::numeric_limits<double>::denorm_min()) return "< 1e-300";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", ulps);
  return buf;
}

/// A format without NaN (nospecials) cannot hold a NaN result: refused instead of printed as one.
void require_encodable(const Format& f, const std::string& what, double r) {
  if (std::isnan(r) && f.specials == Specials::None)
    throw CliError(what + " is NaN, which " + name_of(f) +
                   " cannot encode (nospecials: no NaN); valid: a format with NaN, e.g. without :nospecials");
}

void print_result(const RoundArgs& a, const Format& f, Rounding mode, const std::string& what, double r,
                  double err_ulps, const RoundingPlan& plan) {
  const std::string bits = bits_text(f, r);
  if (a.json) {
    nlohmann::json j;
    j["input"] = what;
    j["format"] = name_of(f);
    j["mode"] = std::string(name_of(mode));
    j["result"] = hex_float(r);
    j["decimal"] = decimal_text(r);
    j["bits"] = bits.empty() ? nlohmann::json(nullptr) : nlohmann::json(bits);
    if (!std::isnan(err_ulps)) {
      j["error_ulps"] = err_ulps == std::numeric_limits<double>::denorm_min() ? 0.0 : err_ulps;
      j["exact"] = err_ulps == 0;
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s -> %s = %s", what.c_str(), hex_float(r).c_str(), decimal_text(r).c_str());
  if (!bits.empty()) std::printf("  bits %s", bits.c_str());
  if (std::isfinite(r)) {
    const double down = round_to(plan, Rounding::Down, std::nextafter(r, -INFINITY));
    const double up = round_to(plan, Rounding::Up, std::nextafter(r, INFINITY));
    std::printf("  neighbours [%s, %s]", decimal_text(down).c_str(), decimal_text(up).c_str());
  }
  if (!std::isnan(err_ulps)) std::printf("  error %s ulp", error_text(err_ulps).c_str());
  std::printf("\n");
}

/// Parses an operand that must be a value of the format (exactly).
double exact_operand(const RoundingPlan& plan, const std::string& text) {
  const double lo = parse_and_round(plan, Rounding::Down, text);
  const double hi = parse_and_round(plan, Rounding::Up, text);
  if (const std::string why = not_a_value_of(plan, text, lo, hi); !why.empty())
    throw CliError("operand '" + text + "' " + why);
  return lo;
}

const std::map<std::string, int>& arith_ops() {
  static const std::map<std::string, int> ops = {
      {"add", 2}, {"sub", 2}, {"mul", 2}, {"div", 2}, {"fma", 3}, {"sqrt", 1}, {"exp", 1},
      {"log", 1}, {"sigmoid", 1}, {"tanh", 1}, {"rsqrt", 1}, {"sin", 1}, {"cos", 1}, {"erf", 1}};
  return ops;
}

double compute(const RoundingPlan& p, Rounding m, const std::string& op, const std::vector<double>& x,
               std::uint64_t draw) {
  if (op == "add") return add(p, m, x[0], x[1], draw);
  if (op == "sub") return sub(p, m, x[0], x[1], draw);
  if (op == "mul") return mul(p, m, x[0], x[1], draw);
  if (op == "div") return div(p, m, x[0], x[1], draw);
  if (op == "fma") return fma(p, m, x[0], x[1], x[2], draw);
  if (op == "sqrt") return sqrt(p, m, x[0], draw);
  for (Elementary f : kAllElementary)
    if (op == name_of(f)) return elementary(p, m, f, x[0], draw);
  throw CliError("unknown op '" + op + "'");
}

void add_common(CLI::App* cmd, RoundArgs& a) {
  cmd->add_option("--format,-f", a.format, "Target format: fp64 fp32 tf32 bf16 fp16 e4m3 e5m2 or custom "
                                           "p<P>:emin<A>:emax<B>[:nosub][:nanonly|:nospecials][:sat]")
      ->capture_default_str();
  cmd->add_option("--mode,-m", a.mode, "Rounding: nearest-even nearest-away toward-zero up down odd stochastic")
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of the stochastic-rounding stream (stream 0, index = position)")
      ->check(seed_value());
  cmd->add_flag("--json", a.json, "One JSON object per line: input, format, mode, result (hex-float), decimal, "
                                  "bits (hex encoding), error_ulps");
}

}  // namespace

void add_round_command(CLI::App& app) {
  static RoundArgs a;
  auto* cmd = app.add_subcommand("round", "Round the exact value of each X (decimal or C99 hex-float; 0.1 means one "
                                          "tenth) once to a format, and show bits, neighbours and error in ulps.");
  add_common(cmd, a);
  cmd->add_option("X", a.values, "Values to round")->required()->allow_extra_args();
  cmd->footer("Examples:\n  roundoff round --format bf16 --mode up 0x1.0000000000000000000000001p+0\n"
              "  roundoff round -f fp16 0.1 65519 65520 1e-8\n  roundoff round -f e4m3 --mode stochastic --seed 7 3.3 3.3 3.3\n"
              "  roundoff round -f p5:emin-6:emax7:nosub --json 0.01");
  cmd->callback([] {
    const Format f = parse_format(a.format);
    const Rounding mode = parse_rounding(a.mode);
    const RoundingPlan plan(f);
    const StochasticBits bits{a.seed, 0};
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      const double r = parse_and_round(plan, mode, a.values[i], bits.draw(i));
      require_encodable(f, "round: '" + a.values[i] + "'", r);
      print_result(a, f, mode, a.values[i], r, error_ulps(f, a.values[i], r), plan);
    }
  });
}

void add_arith_command(CLI::App& app) {
  static RoundArgs a;
  std::string names;
  for (const auto& [k, n] : arith_ops()) names += (names.empty() ? "" : " ") + k;
  auto* cmd = app.add_subcommand("arith", "One correctly rounded operation in a format and mode: OP X [Y [Z]]; "
                                          "operands must be values of the format. OP: " + names);
  add_common(cmd, a);
  cmd->add_option("OP", a.op, "Operation: " + names)->required();
  cmd->add_option("X", a.values, "Operands (1 to 3 by OP)")->required();
  cmd->footer("Examples:\n  roundoff arith -f bf16 -m up add 1 0x1p-100        # 1.0078125, not 1\n"
              "  roundoff arith -f fp16 fma 1.75 0x1.b7p+0 0x1p-24      # 3.001953125 (fp32 FMA then round gives 3)\n"
              "  roundoff arith -f fp16 -m down exp 0.5 --json");
  cmd->callback([] {
    const auto it = arith_ops().find(a.op);
    if (it == arith_ops().end()) {
      std::string valid;
      for (const auto& [k, n] : arith_ops()) valid += (valid.empty() ? "" : ", ") + k;
      throw CliError("arith: unknown OP '" + a.op + "'; valid: " + valid);
    }
    if (static_cast<int>(a.values.size()) != it->second)
      throw CliError("arith: " + a.op + " takes " + std::to_string(it->second) + " operand(s), got " +
                     std::to_string(a.values.size()));
    const Format f = parse_format(a.format);
    const Rounding mode = parse_rounding(a.mode);
    const RoundingPlan plan(f);
    std::vector<double> x;
    for (const auto& v : a.values) x.push_back(exact_operand(plan, v));
    const double r = compute(plan, mode, a.op, x, StochasticBits{a.seed, 0}.draw(0));
    std::string what = a.op;
    for (const auto& v : a.values) what += " " + v;
    require_encodable(f, "arith: the result of " + what, r);
    print_result(a, f, mode, what, r, std::nan(""), plan);
  });
}

}  // namespace roundoff::cli
