#pragma once
/// \file demo.hpp
/// The training part of `roundoff demo`: T0 trained for the same steps and seed under `fp32` and
/// `ane-fp16`, the validation gap, and a per-op attribution table from the MPFR shadow.
#include <filesystem>
#include <iosfwd>

namespace roundoff::studies::train {

/// Trains T0 twice (fp32, ane-fp16; same seed, init and batches) on the full corpus if prepared, else the
/// committed excerpt; prints the validation gap and the per-op attribution table to `out`; writes
/// out_dir/{fp32,ane-fp16}/ (each a complete `roundoff train` results directory), out_dir/demo_curves.csv,
/// out_dir/demo_attribution.csv and, when /usr/bin/python3 has matplotlib, out_dir/demo_training.png.
/// Returns 0 on success.
int run_training_demo(std::ostream& out, const std::filesystem::path& out_dir);

/// Empties `dir` of a previous training run so the demo can write one there again: removes only the files a
/// run writes (summary.json, curves.csv, telemetry.csv, events.csv, checkpoint.bin, .roundoff.lock). When
/// `dir` holds anything else it throws std::runtime_error naming it and removes nothing: the demo never
/// deletes what it did not write.
void clear_previous_run(const std::filesystem::path& dir);

}  // namespace roundoff::studies::train
