#pragma once
/// \file commands.hpp
/// The `roundoff` subcommands. Each add_*_command registers one subcommand with its options, help text and
/// examples; main.cpp calls them in order. Errors are reported by throwing CliError (one line, exit code 2).
#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>

namespace roundoff::cli {

/// A user error: printed as one line "roundoff <cmd>: <message>", exit status 2.
struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A check the user asked for failed (e.g. gemm --expect found differing bits): printed as one line, exit
/// status 1, after the command's normal output.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void add_formats_command(CLI::App& app);
void add_round_command(CLI::App& app);
void add_arith_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_policy_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_op_error_command(CLI::App& app);
void add_dot_command(CLI::App& app);
void add_accumulate_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_tensorcore_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_gemm_command(CLI::App& app);

}  // namespace roundoff::cli
