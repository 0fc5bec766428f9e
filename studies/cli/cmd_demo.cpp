// `roundoff demo`: the README's main job.
#include <cstdio>

#include "numerics/arith.hpp"
#include "studies/cli/commands.hpp"

namespace roundoff::cli {

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "The main job: a tour of formats, rounding modes and the traps.");
  cmd->footer("Example:\n  roundoff demo");
  cmd->callback([] { std::printf("roundoff demo\n"); });
}

}  // namespace roundoff::cli
