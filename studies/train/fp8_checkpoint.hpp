#pragma once
/// \file fp8_checkpoint.hpp
/// The checkpoint's optional "fp8_scaling" section (issue 44): the delayed-scaling amax histories and scales of a
/// run's per-tensor fp8 operands (ops::Fp8ScalingState), so that a resumed run continues bit for bit and an
/// evaluation of the checkpoint (--eval-checkpoint, --shadow-checkpoint) casts with the scales the run had reached.
/// Absent in checkpoints of runs without per-tensor fp8 state and in every checkpoint written before it existed.
///
///   "fp8_scaling": {"scaling": "delayed:1024:max:0",
///                   "tensors": {"L0.matmul.q.x": {"elem": "e4m3", "scale": <binary32 bits>, "history": [<bits>...]}}}
///
/// Scales and histories are stored as binary32 bit patterns (exact).
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "ops/fp8_scaling.hpp"

namespace roundoff::studies::train {

/// The section for `st`.
nlohmann::json fp8_state_json(const ops::Fp8ScalingState& st);

/// Replaces st's tensors with the section's. Throws std::runtime_error (one line naming the checkpoint `ckpt`) when
/// the section's scaling is not st.config()'s or a history has another length.
void load_fp8_state(const nlohmann::json& section, ops::Fp8ScalingState& st, const std::filesystem::path& ckpt);

/// An evaluation of another run's checkpoint under a model whose Runner state is `st` (--eval-checkpoint,
/// --shadow-checkpoint): under delayed scaling the casts read the scales the checkpoint's run had reached, so they
/// are loaded from the checkpoint's section in `meta` (its JSON meta) when it has one; refused in one line naming
/// the checkpoint when the section is for another scaling. Nothing for current scaling (every scale comes from its
/// tensor's own amax). Returns the keys loaded (empty when nothing was).
std::set<std::string> load_fp8_state_for_evaluation(const nlohmann::json& meta, ops::Fp8ScalingState& st,
                                                    const std::filesystem::path& ckpt);

/// After such an evaluation: refused in one line when it cast a delayed-scaled tensor that the checkpoint had no
/// history for (its scale was TE's initial 1: a checkpoint of a run without per-tensor delayed scaling, or an fp8
/// operand its policy did not scale), naming the first such key and what is valid. Nothing for current scaling.
void check_fp8_state_covered(const ops::Fp8ScalingState& st, const std::set<std::string>& loaded,
                             const std::filesystem::path& ckpt);

}  // namespace roundoff::studies::train
