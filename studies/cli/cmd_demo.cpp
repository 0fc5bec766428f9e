// `roundoff demo`: the README's main job. A short tour: the formats, what each rounding mode does to one
// value, and the two traps that break naive emulation (double rounding in FMA, directed rounding through
// binary64), each computed by the library and checked against the value it must have.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "numerics/arith.hpp"
#include "numerics/mpfr_util.hpp"
#include "ops/demo.hpp"
#include "studies/accumulation/demo.hpp"
#include "studies/train/demo.hpp"
#include "studies/cli/cli_format.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/out_dir.hpp"

namespace roundoff::cli {

namespace {

using namespace numerics;

void section(const char* title) { std::printf("\n== %s ==\n", title); }

void formats_table() {
  section("Formats");
  std::printf("%-6s %3s %6s %5s %-11s %-13s %-12s %-12s\n", "name", "p", "emin", "emax", "u", "max finite",
              "min normal", "min subnorm");
  for (const auto& n : preset_format_names()) {
    const Format f = parse_format(n);
    std::printf("%-6s %3d %6d %5d %-11.4g %-13.6g %-12.4g %-12.4g\n", n.c_str(), f.precision, f.emin, f.emax,
                unit_roundoff(f), max_finite(f), min_normal(f), min_positive(f));
  }
}

void modes_table() {
  section("Rounding modes: the exact value 0.1 and -(2.5 + 2^-10) (a tie) in fp16, and 3.3 in e4m3");
  const char* inputs[][2] = {{"fp16", "0.1"}, {"fp16", "-0x1.402p+1"}, {"e4m3", "3.3"}};
  std::printf("%-12s", "mode");
  for (const auto& in : inputs) std::printf(" %22s", (std::string(in[1]) + " in " + in[0]).c_str());
  std::printf("\n");
  for (Rounding m : kAllRoundings) {
    std::printf("%-12s", std::string(name_of(m)).c_str());
    for (const auto& in : inputs) {
      const RoundingPlan plan(parse_format(in[0]));
      const double r = parse_and_round(plan, m, in[1], StochasticBits{1, 0}.draw(0));
      std::printf(" %22s", decimal_text(r).c_str());
    }
    std::printf("\n");
  }
  // Stochastic rounding is unbiased: the mean of many roundings of 0.1 approaches 0.1.
  const RoundingPlan h(formats::fp16);
  const StochasticBits bits{42, 7};
  double mean = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) mean += parse_and_round(h, Rounding::Stochastic, "0.1", bits.draw(i));
  std::printf("mean of %d stochastic roundings of 0.1 to fp16: %.7f (nearest-even gives %.7f)\n", n, mean / n,
              parse_and_round(h, Rounding::NearestEven, "0.1"));
}

void check_line(const char* what, double got, double want, double naive) {
  std::printf("%-52s roundoff %-14s naive %-14s %s\n", what, hex_float(got).c_str(), hex_float(naive).c_str(),
              got == want ? "[correct]" : "[WRONG]");
}

void traps() {
  section("Traps that break naive emulation");
  const RoundingPlan h(formats::fp16), b(formats::bf16);
  // Trap 1: fp16 FMA via an fp32 FMA then rounding to fp16 (double rounding).
  const double a = 1.75, x = 439.0 / 256, c = 0x1p-24;
  const float naive32 = std::fma(static_cast<float>(a), static_cast<float>(x), static_cast<float>(c));
  check_line("fp16 fma(1.75, 439/256, 2^-24), nearest-even", fma(h, Rounding::NearestEven, a, x, c), 3.001953125,
             round_to(h, Rounding::NearestEven, naive32));
  // Trap 2: directed rounding through binary64.
  check_line("bf16 round-up of 1 + 2^-100", add(b, Rounding::Up, 1.0, 0x1p-100), 1.0078125,
             round_to(b, Rounding::Up, 1.0 + 0x1p-100));
  // Swamping: the sequential fp16 sum of 4096 ones stops at 2048.
  double s = 0;
  for (int i = 0; i < 4096; ++i) s = add(h, Rounding::NearestEven, s, 1.0);
  std::printf("%-52s %g (exact 4096)\n", "sequential fp16 sum of 4096 ones", s);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "The main job: formats, rounding modes, the double-rounding traps, accumulation orders, per-op error of a block, and T0 trained under fp32 and ane-fp16.");
  static std::string out_dir = "out/demo";
  cmd->add_option("--out", out_dir, "Directory for the training part's CSV, runs and figure")->capture_default_str();
  cmd->footer("Example:\n  roundoff demo\n  roundoff demo --out /tmp/demo");
  cmd->callback([] {
    studies::require_out_dir(out_dir, "demo: --out");
    const studies::OutDirLock lock(out_dir);
    std::printf("roundoff demo\n");
    formats_table();
    modes_table();
    traps();
    section("Accumulation order: the same dot products formed differently");
    std::fflush(stdout);
    studies::print_accumulation_demo(std::cout);
    std::cout.flush();
    section("Per-op local error of one transformer block under ane-fp16 (MPFR shadow on the same inputs)");
    std::fflush(stdout);
    ops::print_block_error_demo(std::cout);
    std::cout.flush();
    if (const int rc = studies::train::run_training_demo(std::cout, out_dir); rc != 0)
      throw CliError("demo: the training part failed (exit " + std::to_string(rc) + ")");
  });
}

}  // namespace roundoff::cli
