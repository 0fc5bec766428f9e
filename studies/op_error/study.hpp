#pragma once
/// \file study.hpp
/// `roundoff op-error`: the per-op local error of one op (single mode) or of every op under every preset plus
/// the four targeted measurements (study mode), written as tidy CSV with a JSON sidecar.
///
/// Files (study mode, under `out`):
///   op_error.csv           one row per (preset, op, tensor, pass, output, scale): ErrorStats + RangeEvents
///   rmsnorm_overflow.csv   format, d, sigma, rows, mean_rms, overflow_fraction
///   residual_swamping.csv  format, d, ratio, measured_ratio, rel_error, lost_fraction
///   softmax_bias.csv       arm, precision, S, logit_std, rows, mean_rel_bias, max_abs_rel, mean_Z
///   rope_angles.csv        arm, precision, position, max_angle_error, mean_angle_error, max_table_error
///   op_error.json          provenance, seed, configuration, canonical policies, thresholds found, the ranked
///                          ane-fp16 table
/// Single mode writes <op>.csv (same columns as op_error.csv) and <op>.json.
#include <array>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "ops/probe.hpp"
#include "studies/op_error/op_case.hpp"

namespace roundoff::studies::op_error {

/// One measured case: the op records plus what produced them.
struct CaseResult {
  std::string preset;  ///< preset name or policy spec
  CaseConfig config;
  std::array<std::string, ops::kPassCount> precision;  ///< the op's precision per pass (PREC text)
  std::vector<ops::OpRecord> records;
};

/// Tidy CSV of case results (header + one row per record).
void write_cases_csv(std::ostream& out, const std::vector<CaseResult>& results);

struct SingleOptions {
  std::string op;
  std::string precision = "ane-fp16";
  std::string shape;  ///< "k=v,..." overrides of the op's default shape
  std::vector<double> scales{1.0};
  std::int64_t rows = 16;
  std::uint64_t seed = 1;
  std::filesystem::path out;
  std::string command;
};
/// Runs one op under one policy at every scale; writes <op>.csv and <op>.json. Returns the CSV path.
std::filesystem::path run_single(const SingleOptions& opt);

struct StudyOptions {
  std::vector<std::string> presets{"fp32",     "ane-fp16", "ane-fp16-acc32", "ane-matmul-only",
                                   "amp-fp16", "amp-bf16", "pure-fp16",      "pure-bf16"};
  std::vector<double> sigmas{0.25, 1.0, 4.0, 16.0};       ///< activation σ sweep
  std::vector<double> logit_stds{1.0, 4.0, 16.0};         ///< attention logit sweep
  std::vector<ops::OpKind> ops;                           ///< empty = every op
  std::int64_t rows = 16;
  double ref_budget = 2.0e5;
  std::int64_t overflow_rows = 256;                       ///< rows per σ in the RMSNorm overflow sweep
  std::int64_t softmax_max_len = 4096;
  std::int64_t rope_positions = 4096;
  std::uint64_t seed = 1;
  std::filesystem::path out;
  std::string command;
};
/// The whole study (see the file comment). Progress lines go to `log`.
void run_study(const StudyOptions& opt, std::ostream& log);

/// The RMSNorm overflow sweep the study uses: σ from 6 to 10 in steps of 1/8 (plus a coarse range 1..16).
std::vector<double> overflow_sigmas();

}  // namespace roundoff::studies::op_error
