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
/// The file holds binary64 whatever the storage of the moments in memory (param_store.hpp): binary32 moments are
/// written widened (the bytes a binary64 store of the same run would write) and read back narrowed, each value
/// checked to be exact; so files of either storage load in either.
/// Both directions stream: the writer sends the arrays from the caller's buffers to a temporary file while
/// hashing them, writes the digest into line 2 last and renames the file into place (atomic: a crash leaves
/// the old checkpoint or none, never a partial one); the reader fills the arrays straight from the file and
/// checks the digest at the end. Neither holds the file in memory. Loading verifies the magic, the
/// checksum and the sizes and refuses a damaged file with one line naming it; it never modifies the file.
#include <filesystem>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "studies/train/param_store.hpp"

namespace roundoff::studies::train {

struct Checkpoint {
  nlohmann::json meta;  ///< run identity, counters, scaler state and the run log
  std::vector<double> master;
  ParamStore m, v;  ///< the AdamW moments
};

/// Writes a checkpoint of `meta` and the three arrays atomically to `path`, streaming the arrays.
void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, std::span<const double> master,
                     const ParamStore& m, const ParamStore& v);
/// The same with stored masters (written as binary64 whatever their kind: the same file bytes).
void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, const ParamStore& master,
                     const ParamStore& m, const ParamStore& v);
/// save_checkpoint of ck's fields.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ck);
/// Reads and verifies a checkpoint; throws std::runtime_error ("checkpoint <path> is corrupt: …") if the
/// file is truncated, has a bad header or its sha256 does not match, and ("checkpoint <path> is format
/// version N; this build reads version 1") for a checkpoint of another format version. The moments are stored as
/// `moments` says; a moment that storage cannot hold exactly (a binary64 value in a file read into binary32)
/// is refused with one line naming it.
Checkpoint load_checkpoint(const std::filesystem::path& path, StorageKind moments = StorageKind::Binary64);

}  // namespace roundoff::studies::train
