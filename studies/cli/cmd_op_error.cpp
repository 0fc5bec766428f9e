// `roundoff op-error`: local error (vs MPFR) of one op forward and backward under a precision policy, or with
// --study the whole per-op error study (every op × every preset, input-scale sweeps, and the RMSNorm overflow,
// residual swamping, softmax denominator and RoPE angle measurements).
#include <iostream>
#include <string>
#include <vector>

#include "ops/op_kind.hpp"
#include "studies/cli/cli_checks.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/out_dir.hpp"
#include "studies/op_error/study.hpp"

namespace roundoff::cli {

namespace {

struct OpErrorArgs {
  std::string op;
  std::string precision = "ane-fp16";
  std::string shape;
  std::vector<double> sigma;
  std::int64_t rows = 16;
  std::uint64_t seed = 1;
  std::string out = "notebooks-data/op-error";
  bool study = false;
};

std::string join(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

void add_op_error_command(CLI::App& app) {
  static OpErrorArgs a;
  auto* cmd = app.add_subcommand(
      "op-error", "Local error of an op (forward and backward) against MPFR on the same inputs, under a policy; "
                  "--study runs the whole per-op error study.");
  cmd->add_option("--op", a.op, "Op name (" + std::string(ops::op_names_list()) + ")");
  cmd->add_option("--precision", a.precision, "Policy: preset, spec with overrides, or policy file (default ane-fp16)");
  cmd->add_option("--shape", a.shape,
                  "Overrides of the op's AutoANE shape, KEY=N,... (e.g. tokens=256,in=1024,out=2816)");
  cmd->add_option("--sigma", a.sigma,
                  "Input scales (activation sigma; logit std for attn-scores/softmax/attn-values); default 1")
      ->delimiter(',');
  cmd->add_option("--rows", a.rows, "Independent outputs (rows) computed per call (default 16)")
      ->check(integer_at_least(1));
  cmd->add_option("--seed", a.seed, "Seed of the input draws (default 1)")->check(seed_value());
  cmd->add_option("--out", a.out, "Output directory")->capture_default_str();
  cmd->add_flag("--study", a.study, "Run the whole study (every op and preset, sweeps, thresholds)");
  cmd->footer("Examples:\n  roundoff op-error --op rmsnorm --precision pure-fp16 --sigma 1,8,16 --out /tmp/oe\n"
              "  roundoff op-error --op matmul --shape in=2816,out=1024 --precision amp-bf16 --out /tmp/oe\n"
              "  roundoff op-error --study --out notebooks-data/op-error\n"
              "Non-finite outputs are not compared: the inf and nan columns count them, a line on stderr names each "
              "tensor that has them, and a tensor with no finite output has its error statistics written as nan "
              "(never 0).");
  cmd->callback([] {
    studies::require_out_dir(a.out, "op-error: --out");
    const std::string& out = a.out;
    const studies::OutDirLock lock(out);
    if (a.study) {
      if (!a.op.empty() || !a.shape.empty() || !a.sigma.empty())
        throw CliError("op-error: --study runs every op; drop --op/--shape/--sigma");
      studies::op_error::StudyOptions o;
      o.rows = a.rows;
      o.seed = a.seed;
      o.out = out;
      o.command = "roundoff op-error --study --rows " + std::to_string(a.rows) + " --seed " + std::to_string(a.seed) +
                  " --out " + out;
      studies::op_error::run_study(o, std::cerr);
      return;
    }
    if (a.op.empty()) throw CliError("op-error: give --op OP (" + std::string(ops::op_names_list()) + ") or --study");
    studies::op_error::SingleOptions o;
    o.op = a.op;
    o.precision = a.precision;
    o.shape = a.shape;
    if (!a.sigma.empty()) o.scales = a.sigma;
    o.rows = a.rows;
    o.seed = a.seed;
    o.out = out;
    o.command = "roundoff op-error --op " + a.op + " --precision " + a.precision +
                (a.shape.empty() ? "" : " --shape " + a.shape) + " --sigma " + join(o.scales) + " --rows " +
                std::to_string(a.rows) + " --seed " + std::to_string(a.seed) + " --out " + out;
    std::cout << studies::op_error::run_single(o).string() << "\n";
  });
}

}  // namespace roundoff::cli
