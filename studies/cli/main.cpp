// roundoff: one executable, git-style subcommands. See `roundoff --help`.
#include <algorithm>
#include <cctype>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "studies/cli/commands.hpp"
#include "studies/sweep/runner.hpp"
#include "studies/common/huge_pages.hpp"
#include "studies/common/provenance.hpp"

namespace {
/// True for "-inf", "-infinity" and "-nan" in any letter case.
bool is_negative_special(std::string_view arg) {
  std::string low;
  for (const char c : arg) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return low == "-inf" || low == "-infinity" || low == "-nan";
}

/// CLI11 2.1.2 ends a subcommand's positionals at "--" as soon as each has its minimum count, so
/// `roundoff round 0.1 -- -0` was "The following argument was not expected: -0" although the tool's own hint
/// says to put negative operands after "--". Rewrites `SUB A.. -- B..` to `SUB OPTIONS.. -- POSITIONALS.. B..`:
/// the operands given before "--" move after it, in their order; options (and their values) stay before it.
std::vector<std::string> positionals_after_mark(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (argc < 3) return args;
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name() == args[1]) sub = s;
  const auto mark = std::find(args.begin() + 2, args.end(), "--");
  if (sub == nullptr || mark == args.end()) return args;
  std::vector<std::string> options, operands;
  for (auto it = args.begin() + 2; it != mark; ++it) {
    if (it->size() < 2 || (*it)[0] != '-') {
      operands.push_back(*it);
      continue;
    }
    options.push_back(*it);
    const bool is_long = it->rfind("--", 0) == 0;
    const std::string name = is_long ? it->substr(2, it->find('=') - 2) : it->substr(1, 1);
    const CLI::Option* opt = sub->get_option_no_throw(is_long ? "--" + name : "-" + name);
    const bool inline_value = is_long ? it->find('=') != std::string::npos : it->size() > 2;
    if (opt != nullptr && opt->get_items_expected_max() > 0 && !inline_value && std::next(it) != mark) options.push_back(*++it);
  }
  if (operands.empty()) return args;
  std::vector<std::string> out(args.begin(), args.begin() + 2);
  out.insert(out.end(), options.begin(), options.end());
  out.push_back("--");
  out.insert(out.end(), operands.begin(), operands.end());
  out.insert(out.end(), std::next(mark), args.end());
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  roundoff::studies::reexec_with_huge_pages(argv);  // large buffers on 2 MiB pages (speed only; huge_pages.hpp)
  // A train shard started by a local sweep dies with it (a SIGKILLed sweep left its trains running, holding
  // their run directories' locks, so an immediate rerun marked those runs FAILED: issue 43 item 14).
  if (const char* parent = std::getenv(roundoff::studies::sweep::kSweepParentEnv); parent != nullptr) {
    const long want = std::strtol(parent, nullptr, 10);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (want > 0 && ::getppid() != static_cast<pid_t>(want)) return 1;  // the sweep ended before we started
    ::unsetenv(roundoff::studies::sweep::kSweepParentEnv);
  }
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
  roundoff::cli::add_quantize_command(app);
  roundoff::cli::add_gemm_command(app);
  try {
    const std::vector<std::string> args = positionals_after_mark(app, argc, argv);
    std::vector<const char*> ptrs;
    for (const std::string& s : args) ptrs.push_back(s.c_str());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
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
  } catch (const roundoff::cli::CheckFailed& e) {
    std::cerr << "roundoff: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "roundoff: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
