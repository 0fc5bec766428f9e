// roundoff: one executable, git-style subcommands. See `roundoff --help`.
#include <iostream>

#include "studies/cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"roundoff: measure, op by op, what low-precision arithmetic does to a transformer.\n"
               "Bit-accurate format and rounding emulation, accumulation-order emulation, per-op error "
               "against MPFR, and a trainer with a --precision policy."};
  app.require_subcommand(1);
  app.footer("Examples:\n  roundoff formats\n  roundoff round --format bf16 --mode up 1.00001\n"
             "  roundoff arith --format fp16 --mode nearest-even fma 1.75 0x1.b7p+0 0x1p-24\n  roundoff demo");
  roundoff::cli::add_formats_command(app);
  roundoff::cli::add_round_command(app);
  roundoff::cli::add_arith_command(app);
  roundoff::cli::add_demo_command(app);
  roundoff::cli::add_policy_command(app);
  roundoff::cli::add_data_command(app);
  roundoff::cli::add_op_error_command(app);
  roundoff::cli::add_dot_command(app);
  roundoff::cli::add_accumulate_command(app);
  roundoff::cli::add_train_command(app);
  roundoff::cli::add_sweep_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::invalid_argument& e) {
    std::cerr << "roundoff: " << e.what() << "\n";
    return 2;
  } catch (const roundoff::cli::CliError& e) {
    std::cerr << "roundoff: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "roundoff: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
