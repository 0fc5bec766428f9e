// `roundoff dot` (one sum or dot product under an Accumulation, with its exact value) and `roundoff accumulate`
// (the error-growth study).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/accumulate.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/mpfr_util.hpp"
#include "studies/accumulation/error_growth.hpp"
#include "studies/cli/cli_format.hpp"
#include "studies/cli/commands.hpp"

namespace roundoff::cli {

using namespace numerics;

namespace {

/// The value tokens of a LIST: comma/whitespace separated values, where a token "@path" stands for the
/// values in that file (same separators, newlines too).
std::vector<std::string> list_tokens(const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> out;
  auto split = [&out](const std::string& text) {
    std::string cur;
    for (char c : text) {
      if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) out.push_back(cur);
  };
  for (const auto& a : args) {
    if (!a.empty() && a[0] == '@') {
      std::ifstream f(a.substr(1));
      if (!f) throw CliError("dot: cannot read " + what + " file '" + a.substr(1) + "'");
      std::stringstream ss;
      ss << f.rdbuf();
      split(ss.str());
    } else {
      split(a);
    }
  }
  return out;
}

/// Parses LIST values that must be values of the input format, exactly.
std::vector<double> parse_values(const RoundingPlan& plan, const std::vector<std::string>& args, const std::string& what) {
  std::vector<double> v;
  const auto tokens = list_tokens(args, what);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    double lo, hi;
    try {
      lo = parse_and_round(plan, Rounding::Down, t);
      hi = parse_and_round(plan, Rounding::Up, t);
    } catch (const std::invalid_argument&) {
      throw CliError("dot: " + what + " value " + std::to_string(i + 1) + " '" + t + "' is not a number");
    }
    if (!(lo == hi || (std::isnan(lo) && std::isnan(hi))))
      throw CliError("dot: " + what + " value " + std::to_string(i + 1) + " '" + t + "' is not representable in " +
                     name_of(plan.format) + " (neighbours " + decimal_text(lo) + " and " + decimal_text(hi) + ")");
    v.push_back(lo);
  }
  return v;
}

struct DotArgs {
  std::string inputs = "fp16";
  std::string accumulation = "fp16-seq";
  std::vector<std::string> x, y;
  std::uint64_t seed = 0, stream = 0;
  bool json = false;
};

void run_dot(const DotArgs& a) {
  const Format in = parse_format(a.inputs);
  const Accumulation acc = parse_accumulation(a.accumulation);
  const RoundingPlan plan(in);
  const std::vector<double> x = parse_values(plan, a.x, "--x");
  const bool is_dot = !a.y.empty();
  std::vector<double> y;
  if (is_dot) {
    y = parse_values(plan, a.y, "--y");
    if (y.size() != x.size())
      throw CliError("dot: --x has " + std::to_string(x.size()) + " values but --y has " + std::to_string(y.size()));
  }
  AccumStats st;
  const StochasticBits bits{a.seed, a.stream};
  const double r = is_dot ? dot(acc, x, y, bits, &st) : sum(acc, x, bits, &st);
  const ExactSum exact = is_dot ? exact_dot(in, x.data(), 1, y.data(), 1, x.size()) : exact_sum(x.data(), 1, x.size());
  const Format out = result_format(acc);
  const double ulps = error_ulps(out, exact, r);
  if (a.json) {
    nlohmann::json j;
    j["inputs"] = name_of(in);
    j["accumulation"] = canonical(acc);
    j["spec"] = spec_text(acc);
    j["n"] = x.size();
    j["operation"] = is_dot ? "dot" : "sum";
    j["result"] = hex_float(r);
    j["decimal"] = decimal_text(r);
    j["result_format"] = name_of(out);
    j["exact"] = exact.to_decimal();
    j["error_ulps"] = std::isfinite(ulps) ? nlohmann::json(ulps) : nlohmann::json(nullptr);
    j["overflows"] = st.overflows;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s of %zu %s values under %s (%s)\n", is_dot ? "dot" : "sum", x.size(), name_of(in).c_str(),
              canonical(acc).c_str(), spec_text(acc).c_str());
  std::printf("result  %s = %s (%s)\n", hex_float(r).c_str(), decimal_text(r).c_str(), name_of(out).c_str());
  std::printf("exact   %s\n", exact.to_decimal().c_str());
  if (std::isfinite(ulps)) std::printf("error   %.6g ulp of %s at the exact value\n", ulps, name_of(out).c_str());
  if (st.overflows) std::printf("overflows %lld\n", static_cast<long long>(st.overflows));
}

}  // namespace

void add_dot_command(CLI::App& app) {
  static DotArgs args;
  auto* cmd = app.add_subcommand("dot", "One sum or dot product under an accumulation, with its exact value.");
  cmd->add_option("--inputs", args.inputs, "Format the inputs must be values of (default fp16)");
  cmd->add_option("--accumulation", args.accumulation,
                  "Accumulation preset or key=value spec (default fp16-seq); presets: " + [] {
                    std::string s;
                    for (const auto& n : preset_accumulation_names()) s += (s.empty() ? "" : ", ") + n;
                    return s;
                  }());
  cmd->add_option("--x", args.x, "Values: comma/space separated, or @file")->required();
  cmd->add_option("--y", args.y, "Second operand of the dot product (omitted: the plain sum of x)");
  cmd->add_option("--seed", args.seed, "Seed of stochastic rounding");
  cmd->add_option("--stream", args.stream, "Stream of stochastic rounding");
  cmd->add_flag("--json", args.json, "Print one JSON object: result (hex-float), exact (decimal), error_ulps, ...");
  cmd->footer(
      "Examples:\n  roundoff dot --inputs fp16 --accumulation fp16-seq --x 1,2,3 --y 4,5,6\n"
      "  roundoff dot --inputs fp16 --accumulation fp16-unfused-seq --x 0x1p-24,1.75 --y 1,1.71484375 --json\n"
      "  roundoff dot --inputs bf16 --accumulation 'acc=bf16,order=blocked:2,outer=fp32' --x @values.txt");
  cmd->callback([] { run_dot(args); });
}

void add_accumulate_command(CLI::App& app) {
  static studies::ErrorGrowthOptions opt;
  static std::string out = "notebooks-data/accumulation";
  auto* cmd = app.add_subcommand(
      "accumulate",
      "Error-growth study: error of fp16/bf16 sums and dot products vs length n (16..4096) for each accumulation "
      "order, against Higham's γ_n and the probabilistic λ√n·u bounds; writes error_growth.csv, "
      "error_growth_fits.csv and error_growth.json.");
  cmd->add_option("--out", out, "Output directory (default notebooks-data/accumulation)");
  cmd->add_option("--seed", opt.seed, "Seed of the input data and stochastic rounding");
  cmd->add_option("--trials", opt.trials, "Inputs per (n, data) cell (default 1000; 8 with --quick)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--quick", opt.quick, "Smoke run: n up to 1024, 8 trials");
  cmd->footer("Examples:\n  roundoff accumulate\n  roundoff accumulate --quick --out /tmp/acc\n"
              "Figures and docs: /usr/bin/python3 studies/accumulation/plot_accumulation.py");
  cmd->callback([] {
    opt.out = out;
    opt.command = "roundoff accumulate --out " + out + " --seed " + std::to_string(opt.seed) +
                  (opt.trials ? " --trials " + std::to_string(opt.trials) : "") + (opt.quick ? " --quick" : "");
    std::cerr << "roundoff accumulate: running (progress per cell)\n";
    const auto res = studies::run_and_write_error_growth(opt, &std::cerr);
    std::printf("wrote %s/error_growth.csv (%zu rows), error_growth_fits.csv, error_growth.json\n", out.c_str(),
                res.rows.size());
    std::printf("growth of the median error in ulps of the input format, zero-mean dot products (C·n^α):\n");
    for (const auto& f : res.fits)
      if (f.data == "zero-mean" && f.metric == "median_ulps")
        std::printf("  %-5s %-20s α = %6.3f  C = %8.4g  (R² %.3f)\n", f.inputs.c_str(), f.accumulation.c_str(),
                    f.exponent, f.constant, f.r2);
  });
}

}  // namespace roundoff::cli
