// roundoff: one executable, git-style subcommands. See `roundoff --help`.
#include <cctype>
#include <iostream>
#include <string>
#include <string_view>

#include "studies/cli/commands.hpp"
#include "studies/common/provenance.hpp"

namespace {
/// True for "-inf", "-infinity" and "-nan" in any letter case.
bool is_negative_special(std::string_view arg) {
  std::string low;
  for (const char c : arg) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return low == "-inf" || low == "-infinity" || low == "-nan";
}
}  // namespace

int main(int argc, char** argv) {
  roundoff::studies::record_command_line(argc, argv);
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
  roundoff::cli::add_tensorcore_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reads "-inf" and "-nan" as short options; say so instead of "argument was not expected".
    for (int i = 1; i < argc && e.get_exit_code() != 0; ++i)
      if (is_negative_special(argv[i])) {
        std::cerr << "roundoff: '" << argv[i] << "' was read as an option; put operands that start with '-' "
                  << "after --, e.g. roundoff round -f fp16 -- " << argv[i] << "\n";
        return 2;
      }
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
