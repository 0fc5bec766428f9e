#pragma once
/// \file checkpoint.hpp
/// Checkpoints: everything needed to continue a run bit-identically (master weights, AdamW moments,
/// loss-scaler state, step counters, the run log). Random streams are counter-based and indexed by step,
/// so the step is the RNG position.
///
/// File layout:
///   line 1  "roundoff-checkpoint 1"
///   line 2  "sha256 <64 hex digits of the payload>"
///   payload: u64 n_json, JSON meta (n_json bytes), then master, m, v as (u64 count, count × binary64),
///            all little-endian.
/// Both directions stream: the writer sends the arrays from the caller's buffers to a temporary file while
/// hashing them, writes the digest into line 2 last and renames the file into place (atomic: a crash leaves
/// the old checkpoint or none, never a partial one); the reader fills the arrays straight from the file and
/// checks the digest at the end. Neither holds the file in memory. Loading verifies the magic, the
/// checksum and the sizes and refuses a damaged file with one line naming it; it never modifies the file.
#include <filesystem>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

namespace roundoff::studies::train {

struct Checkpoint {
  nlohmann::json meta;  ///< run identity, counters, scaler state and the run log
  std::vector<double> master, m, v;
};

/// Writes a checkpoint of `meta` and the three arrays atomically to `path`, streaming the arrays.
void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, std::span<const double> master,
                     std::span<const double> m, std::span<const double> v);
/// save_checkpoint of ck's fields.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ck);
/// Reads and verifies a checkpoint; throws std::runtime_error ("checkpoint <path> is corrupt: …") if the
/// file is truncated, has a bad header or its sha256 does not match, and ("checkpoint <path> is format
/// version N; this build reads version 1") for a checkpoint of another format version.
Checkpoint load_checkpoint(const std::filesystem::path& path);

}  // namespace roundoff::studies::train
