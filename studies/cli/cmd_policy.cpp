// `roundoff policy show P`: the canonical form of a precision policy (preset, spec or policy file), and
// optionally its full per-(op, pass) table.
#include <cstdio>
#include <string>

#include "ops/policy.hpp"
#include "studies/cli/commands.hpp"

namespace roundoff::cli {

namespace {

struct PolicyArgs {
  std::string spec;
  bool table = false;
};

void print_table(const ops::Policy& p) {
  std::printf("%-14s %-10s %s\n", "op", "pass", "storage/compute/accumulation/rounding [approx saturate nan ftz daz]");
  for (ops::OpKind k : ops::kAllOps)
    for (ops::Pass ps : ops::kAllPasses) {
      const std::string extra = ops::extras_text(p.at(k, ps));
      std::printf("%-14s %-10s %s%s\n", std::string(ops::name_of(k)).c_str(), std::string(ops::name_of(ps)).c_str(),
                  ops::to_string(p.at(k, ps)).c_str(), extra.empty() ? "" : ("  " + extra).c_str());
    }
  for (ops::TensorRole r : ops::kAllRoles)
    std::printf("%-14s %-10s %s\n", std::string(ops::name_of(r)).c_str(), "role",
                numerics::name_of(p.storage_for(r)).c_str());
  std::printf("%-14s %-10s %g\n", "loss-scale", "default", p.loss_scale());
  if (!(p.block_keep() == ops::BlockKeep{}))  // block-quantized GEMMs run unquantized in these blocks
    std::printf("%-14s %-10s first %d, last %d\n", "block-keep", "layers", p.block_keep().first, p.block_keep().last);
}

}  // namespace

void add_policy_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("policy", "Precision policies: presets, specs with overrides, policy files.");
  cmd->require_subcommand(1);
  auto* show = cmd->add_subcommand("show", "Print the canonical form of a policy (exit 2 with a one-line reason "
                                           "when the spec is malformed).");
  static PolicyArgs args;
  show->add_option("policy", args.spec,
                   "Preset (" + [] {
                     std::string s;
                     for (const auto& n : ops::Policy::preset_names()) s += (s.empty() ? "" : ", ") + n;
                     return s;
                   }() + "), spec such as ane-fp16,softmax=fp32,matmul.acc=fp32-seq, or a policy file")
      ->required();
  show->add_flag("--table", args.table, "Also print the full (op, pass) table and the tensor-role formats");
  show->footer("Examples:\n  roundoff policy show ane-fp16\n"
               "  roundoff policy show ane-fp16,softmax=fp32,matmul.bwd-data=fp16/fp16-seq --table\n"
               "  roundoff policy show my-layout.policy\nGrammar: docs/policy.md");
  show->callback([] {
    std::string source;
    const ops::Policy p = ops::load_policy(args.spec, &source);
    if (source != "spec") std::fprintf(stderr, "policy show: read %s\n", source.c_str());
    std::printf("%s\n", p.canonical().c_str());
    if (args.table) print_table(p);
  });
}

}  // namespace roundoff::cli
