#pragma once
/// \file session.hpp
/// One complete training run as the CLI, the demo and the benchmarks start it: loads the corpus (the full
/// prepared Brown corpus when present, else the committed excerpt), tokenises it, builds the model under
/// the policy and an fp32 twin for evaluation, optionally hooks the MPFR shadow, and runs the Trainer.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ops/backend.hpp"
#include "ops/policy.hpp"
#include "studies/train/loss_scaler.hpp"
#include "studies/train/trainer.hpp"

namespace roundoff::studies::train {

struct SessionSpec {
  TrainOptions options;  ///< options.policy is overwritten with policy.canonical()
  ops::Policy policy;
  std::optional<std::filesystem::path> corpus_dir;  ///< default: data::load_corpus()'s choice
  std::int64_t eval_tokens = 0;   ///< > 0: evaluate on the leading windows covering this many tokens
  std::int64_t shadow_units = 4;  ///< units per shadowed op call (rows, heads, columns)
  /// Time every step per (op, pass) (ops::Profile): the table goes to the progress stream at the end and,
  /// with an output directory, to DIR/profile.csv. No bit changes.
  bool profile = false;
  /// How every model of the session computes (ops::ExecOptions: fast paths, kernel ISA limit). No bit changes.
  ops::ExecOptions exec;
};

/// "auto" → none when the policy suggests no loss scale, dynamic (GradScaler defaults) when it suggests
/// 2^16, static:S otherwise; anything else is parsed by LossScaleSpec::parse.
LossScaleSpec resolve_loss_scale(const std::string& text, const ops::Policy& policy);

/// Tokenised splits for `c` (byte or BPE-V trained on the train split; V = c.tokens()). With c.compact_vocab
/// the ids are compacted to those occurring in the train, val or test split (TrainData::vocab of them); the
/// caller then sets the model's vocab to TrainData::vocab.
TrainData load_train_data(const ModelConfig& c, const std::optional<std::filesystem::path>& corpus_dir,
                          std::int64_t eval_tokens);

/// The config of the fp32 evaluation model of a run of `c`: `c` itself, except that under the gqa-mismatch
/// defect it is the block-map model (AutoANE's CPU validation forward uses the block map).
ModelConfig evaluation_config(const ModelConfig& c);

/// Evaluates the master weights stored in `checkpoint` (any run's, trained under any policy) under `spec`'s
/// model config, policy and defects on the validation split, without training or touching the checkpoint:
/// the loss and bits per byte of the model `spec` describes, as Trainer's own-precision evaluation computes
/// them. Returns {"val_loss", "val_bpb", "val_tokens", "val_bytes", "policy", "defects", "seed",
/// "checkpoint", "checkpoint_step", "checkpoint_policy", "checkpoint_seed", "checkpoint_config",
/// "weights_sha256"} plus provenance,
/// and writes it to spec.options.out / "eval.json" (atomically) when out is set. Throws std::runtime_error
/// when the checkpoint cannot be read, holds a different number of parameters than the model, or was trained
/// on another tokenizer.
nlohmann::json evaluate_checkpoint(const SessionSpec& spec, const TrainData& data,
                                   const std::filesystem::path& checkpoint);

/// Per-op attribution of the master weights stored in `checkpoint` (any run's, trained under any policy) under
/// `spec`'s model config, policy and defects, without training or touching the checkpoint: the one MPFR-shadowed
/// forward+backward on the fixed probe batch (the first validation batch) that a run with --shadow-every
/// records at the checkpoint's step — local error of every op call on spec.shadow_units units and global error
/// against the fp64 model — at the checkpoint's step and loss scale, so its rows equal that run's. Writes the
/// rows to spec.options.out / "telemetry.csv" (the run's telemetry columns) and {"step", "loss_scale",
/// "shadow_units", "records"} plus what evaluate_checkpoint records about the checkpoint, and provenance, to
/// "shadow.json", both atomically, when out is set; returns the JSON. Throws as evaluate_checkpoint does.
nlohmann::json shadow_checkpoint(const SessionSpec& spec, const TrainData& data,
                                 const std::filesystem::path& checkpoint);

/// Runs (or resumes) the training described by `spec` on `data`; progress lines go to `progress`
/// (may be null). Returns the summary written to DIR/summary.json. Shadow records land in the run's
/// telemetry (op = <op>, pass, tensor, metric ∈ {median_ulp, p95_ulp, max_ulp, norm_rel, signed_rel, underflow}).
nlohmann::json run_session(SessionSpec spec, const TrainData& data, std::ostream* progress);

}  // namespace roundoff::studies::train
