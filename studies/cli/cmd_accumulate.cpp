// `roundoff dot` (one sum or dot product under an Accumulation, with its exact value) and `roundoff accumulate`
// (the error-growth study).
#include <cmath>
#include <cstdio>
#include <filesystem>
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
#include "studies/cli/cli_checks.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/out_dir.hpp"

namespace roundoff::cli {

using namespace numerics;

namespace {

/// Appends the values of `text` to `out`: values separated by commas and/or whitespace. An empty field (a
/// leading, trailing or doubled comma) is an error, never silently dropped.
void split_values(const std::string& text, const std::string& where, std::vector<std::string>& out) {
  std::string cur;
  bool any = false, need_value = false;  // need_value: a comma waits for the value after it
  auto flush = [&] {
    if (cur.empty()) return;
    out.push_back(cur);
    cur.clear();
    any = true;
    need_value = false;
  };
  for (const char c : text) {
    if (c == ',') {
      flush();
      if (!any || need_value) throw CliError("dot: " + where + " has an empty value (a leading or doubled comma)");
      need_value = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (need_value) throw CliError("dot: " + where + " has an empty value (a trailing comma)");
}

/// The contents of the values file `path` (a regular file; a directory, FIFO or device is refused unopened).
std::string read_values_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  const std::string name = "dot: " + what + " file '" + path + "'";
  if (type == std::filesystem::file_type::not_found) throw CliError(name + " does not exist");
  if (type == std::filesystem::file_type::directory) throw CliError(name + " is a directory");
  if (type != std::filesystem::file_type::regular) throw CliError(name + " is not a regular file");
  std::ifstream f(path);
  if (!f) throw CliError(name + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The value tokens of a LIST: comma/whitespace separated values, where a token "@path" stands for the
/// values in that file (same separators, newlines too). An empty list is an error.
std::vector<std::string> list_tokens(const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    if (!a.empty() && a[0] == '@')
      split_values(read_values_file(a.substr(1), what), what + " file '" + a.substr(1) + "'", out);
    else
      split_values(a, what, out);
  }
  if (out.empty()) throw CliError("dot: " + what + " holds no values (give at least one number, or @FILE)");
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
    if (const std::string why = not_a_value_of(plan, t, lo, hi); !why.empty())
      throw CliError("dot: " + what + " value " + std::to_string(i + 1) + " '" + t + "' " + why);
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
  cmd->add_option("--seed", args.seed, "Seed of stochastic rounding")->check(seed_value());
  cmd->add_option("--stream", args.stream, "Stream of stochastic rounding")->check(seed_value());
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
  cmd->add_option("--out", out, "Output directory")->capture_default_str();
  cmd->add_option("--seed", opt.seed, "Seed of the input data and stochastic rounding")->check(seed_value());
  cmd->add_option("--trials", opt.trials, "Inputs per (n, data) cell (default 1000; 8 with --quick)")
      ->check(integer_in(1, 100000000));
  cmd->add_flag("--quick", opt.quick, "Smoke run: n up to 1024, 8 trials");
  cmd->footer("Examples:\n  roundoff accumulate\n  roundoff accumulate --quick --out /tmp/acc\n"
              "Figures and docs: /usr/bin/python3 studies/accumulation/plot_accumulation.py");
  cmd->callback([] {
    studies::require_out_dir(out, "accumulate: --out");
    const studies::OutDirLock lock(out);
    opt.out = out;
    std::cerr << "roundoff accumulate: running (progress per cell)\n";
    const auto res = studies::run_and_write_error_growth(opt, &std::cerr);
    std::printf("wrote %s/error_growth.csv (%zu rows), error_growth_fits.csv, error_growth.json\n", out.c_str(),
                res.rows.size());
    std::printf("growth of the median error in ulps of the input format, zero-mean dot products (C·n^α):\n");
    for (const auto& f : res.fits)
      if (f.data == "zero-mean" && f.metric == "median_ulps")
        std::printf("  %-5s %-20s α = %6.3f ± %.3f (95 %% CI)  C = %8.4g  (R² %.3f)\n", f.inputs.c_str(),
                    f.accumulation.c_str(), f.exponent, f.exponent_ci95, f.constant, f.r2);
  });
}

}  // namespace roundoff::cli
