// `roundoff formats`: the table of format presets (or of given formats) and their derived constants.
#include <cstdio>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "studies/cli/cli_format.hpp"
#include "studies/cli/commands.hpp"

namespace roundoff::cli {

namespace {
void print_formats(const std::vector<std::string>& names) {
  using namespace numerics;
  std::printf("%-34s %3s %6s %5s %-7s %-12s %-12s %-12s %-12s %-12s %s\n", "format", "p", "emin", "emax", "subnorm",
              "u", "max finite", "min normal", "min subnorm", "specials", "bits");
  for (const auto& n : names) {
    const Format f = parse_format(n);
    const auto enc = encoding_of(f);
    const char* sp = f.specials == Specials::Ieee ? "inf,nan" : f.specials == Specials::NanOnly ? "nan only" : "none";
    std::printf("%-34s %3d %6d %5d %-7s %-12.5g %-12.6g %-12.5g %-12.5g %-12s %s\n", name_of(f).c_str(), f.precision,
                f.emin, f.emax, f.subnormals ? "yes" : "no", unit_roundoff(f), max_finite(f), min_normal(f),
                f.subnormals ? pow2(f.emin - f.precision + 1) : 0.0,
                (std::string(sp) + (f.saturate ? ",sat" : "")).c_str(),
                enc ? (std::to_string(enc->total_bits()) + " (1+" + std::to_string(enc->exponent_bits) + "+" +
                       std::to_string(enc->fraction_bits) + ")").c_str()
                    : "-");
  }
}
}  // namespace

void add_formats_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "Table of formats: p, emin, emax, unit roundoff, max finite, "
                                            "smallest normal and subnormal, specials and bit layout.");
  static std::vector<std::string> names;
  cmd->add_option("format", names, "Formats to show (presets or custom p<P>:emin<A>:emax<B>[:nosub][:nanonly|"
                                   ":nospecials][:sat]); default: all presets");
  cmd->footer("Examples:\n  roundoff formats\n  roundoff formats fp16 p5:emin-6:emax7:nosub e5m2:sat");
  cmd->callback([] { print_formats(names.empty() ? numerics::preset_format_names() : names); });
}

}  // namespace roundoff::cli
