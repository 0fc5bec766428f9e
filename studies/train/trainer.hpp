#pragma once
/// \file trainer.hpp
/// The training loop (STUDY_PROTOCOL.md §4.3): seeded init, deterministic batches, loss scaling,
/// unscale → fp32 global-norm clip → AdamW, linear warmup + cosine schedule, periodic evaluation in fp32
/// and in the run's own precision, checkpoints that resume bit-identically, and the results directory:
///   DIR/summary.json   run identity, final metrics, provenance (see docs/trainer.md for every key)
///   DIR/curves.csv     step,metric,value
///   DIR/telemetry.csv  step,layer,op,pass,tensor,metric,value
///   DIR/events.csv     step,kind,detail (loss-scale changes, skipped steps, non-finite values)
///   DIR/checkpoint.bin the state after the last completed step (checkpoint.hpp)
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/format.hpp"
#include "numerics/kernel_options.hpp"
#include "ops/fp8_scaling.hpp"
#include "studies/train/config.hpp"
#include "studies/train/loss_scaler.hpp"
#include "studies/train/model_interface.hpp"
#include "studies/train/param_store.hpp"
#include "studies/train/params.hpp"
#include "studies/train/run_log.hpp"

namespace roundoff::studies::train {

/// A tokenised evaluation split cut into the fixed in-order windows of data::validation_windows, grouped
/// into batches of up to B full windows (a shorter last window forms its own batch).
struct EvalSet {
  std::vector<Batch> batches;
  std::int64_t tokens = 0;  ///< predicted tokens
  std::int64_t bytes = 0;   ///< bytes those tokens stand for (bits per byte)
};

/// Mean loss (nats per predicted token) and bits per byte of a model on an evaluation split.
struct EvalLoss {
  double loss, bpb;
};
/// `m` with weights `master` on every batch of `set`, in order.
EvalLoss evaluate_loss(Model& m, const EvalSet& set, std::span<const double> master);
EvalLoss evaluate_loss(Model& m, const EvalSet& set, const ParamStore& master);
/// sha256 of master weights as little-endian binary64 in buffer order (a run's summary "weights_sha256").
std::string weights_sha256(std::span<const double> master);
/// The same of stored masters, widened (the same digest as of their binary64 values).
std::string weights_sha256(const ParamStore& master);

/// Everything the loop reads from the data: train tokens, eval sets and where they came from.
struct TrainData {
  std::vector<std::int32_t> train;
  EvalSet val, test;
  std::string source;     ///< "brown-1.9.80" or "excerpt"
  std::string tokenizer;  ///< "bytes", "bpe-<V>" or "bpe-<V>-compact-<n>"
  int vocab = 0;          ///< the model's vocabulary: the tokenizer's size, or the compacted count
  /// {"train", "val", "test"}: the splits' sha256 from the corpus manifest (null when not known). Checkpoints
  /// record it; --resume refuses another corpus even when its manifest carries the same `source` label.
  nlohmann::json split_sha256;
};

/// The model config as run identities, summaries and eval.json record it.
nlohmann::json config_json(const ModelConfig& c);

/// Run options (the `roundoff train` flags).
struct TrainOptions {
  ModelConfig config;
  Recipe recipe;
  ResidualScale residual = ResidualScale::None;
  LossScaleSpec loss_scale;
  std::string policy;         ///< canonical policy text
  /// Format of the unscaled gradients, their norm and the clip (update_format of the policy's grads role).
  numerics::Format update_format = numerics::formats::fp32;
  std::int64_t steps = 200;           ///< updates (optimizer steps); each runs recipe.accum micro-steps
  std::uint64_t seed = 1;
  std::int64_t eval_every = 0;        ///< 0: evaluate at the end only
  std::int64_t telemetry_every = 50;  ///< detailed activation telemetry every N steps (and step 0)
  std::int64_t shadow_every = 0;      ///< 0: no MPFR shadow
  std::int64_t checkpoint_every = 0;  ///< 0: checkpoint at evaluations and at the end only
  std::int64_t stop_after = 0;        ///< > 0: stop after this many steps of this invocation (sharding)
  std::int64_t progress_every = 10;   ///< stderr progress line every N steps; 0: silent
  int threads = 1;
  /// The instruction set the kernels run on (ops::ExecOptions::kernels.isa(); recorded in the summary beside the
  /// threads for timings, no bit depends on it).
  numerics::kernels::Isa kernel_isa = numerics::kernels::detected_isa();
  std::filesystem::path out;          ///< results directory (empty: write nothing — benchmarks)
  bool resume = false;
};

/// Hook for shadow attribution at sampled steps: called before the step's own update with the step, the
/// current master weights and the current loss scale.
using ShadowHook =
    std::function<void(std::int64_t step, std::span<const double> master, double loss_scale, RunLog& log)>;

class Trainer {
 public:
  /// `own` runs the policy; `fp32` is the same model under the fp32 policy (evaluation and the underflow
  /// telemetry's fp32 pass). When the own policy is fp32's, `fp32` may be `own` itself (one model, no twin):
  /// the own-precision evaluation is then the fp32 one, and the underflow telemetry at loss scale 1 reads the
  /// own gradients instead of repeating the pass; both give the bits the separate twin gives.
  Trainer(TrainOptions opts, Model& own, Model& fp32, const TrainData& data, std::ostream* progress,
          ShadowHook shadow = {});

  /// Initialises from the seed, or loads DIR/checkpoint.bin when resuming. Throws std::runtime_error if
  /// a checkpoint exists and resume is off (it is never overwritten), if resume is on and there is none, if
  /// it is corrupt, or if it belongs to a different run (config, policy, seed, steps, recipe, data).
  void start();
  /// Without --resume: refuses an --out whose summary.json is another run's (checkpoint.bin deleted), instead of
  /// overwriting its summary and CSVs.
  void refuse_other_runs_results() const;
  /// True when all steps are done, the run diverged, or stop_after steps ran in this invocation.
  bool done() const;
  /// One optimisation step: recipe.accum micro-steps (forward+backward on their own batches, gradients
  /// summed), one update (plus the evaluation, telemetry and checkpoint due at it).
  void step();
  /// Final evaluation (val in fp32 and own precision, test in fp32), writes the results; returns summary.
  nlohmann::json finish();
  /// Profiles every following step into `profile` (nullptr: off): the own model's op calls per (op, pass),
  /// the trainer's phases, and each step's wall time (evaluation and checkpoints excluded), and each
  /// evaluation's seconds and windows ("evaluation: val fp32", "val own", "test fp32"). No bit changes.
  void set_profile(ops::Profile* profile) { profile_ = profile; }
  /// start(); while (!done()) step(); finish() — returns the summary (partial if stopped early).
  nlohmann::json run();

  /// The master weights, stored as own.master_storage() says.
  const ParamStore& master() const { return master_; }
  std::int64_t steps_completed() const { return step_; }
  const RunLog& log() const { return log_; }
  /// sha256 of the master weights as little-endian binary64 in buffer order.
  std::string weights_sha256() const;
  /// past_segments_ plus this invocation's (first_update = started_at_, last_update = step_).
  nlohmann::json segments() const;
  /// AutoANE's reported number: the own-precision training loss averaged over the last kAutoAneWindow
  /// micro-steps (fewer at the start); NaN before the first step.
  double autoane_metric() const;
  static constexpr std::size_t kAutoAneWindow = 200;

 private:
  // The phases of step(), in order.
  /// Micro-batching: recipe.accum forward+backward passes of update s at loss scale `scale`, their gradients
  /// summed into grads_ (with the underflow telemetry at a detailed step); returns the mean loss.
  double micro_steps(std::int64_t s, double scale, StepTelemetry& tel);
  /// The micro-steps of update s run again with the op output scans on (StepTelemetry::check_outputs), gradients
  /// into a store whose values are dead (grads_ when the update is `skipped`), until one names the first op that
  /// produced a non-finite value: the same values as the step's own pass (deterministic, keyed by the micro-step),
  /// which ran without the scans. Sets
  /// tel.first_nonfinite_op to that name, or leaves it empty when none is found (the sum of finite micro-steps
  /// overflowed, or the unscaling did).
  void name_first_nonfinite(std::int64_t s, double scale, bool skipped, StepTelemetry& tel);
  /// Records the first non-finite step (naming the op) and the RMSNorm collapses of the step.
  void record_nonfinite(std::int64_t s, const StepTelemetry& tel, bool finite);
  /// Loss scaling: the update skipped for non-finite gradients (logged).
  void skip_update(std::int64_t s, const StepTelemetry& tel, double scale);
  /// The optimizer: global norm, clip, AdamW tensor by tensor with the stagnation telemetry, divergence check.
  /// The optimizer step; `fused_norm`: the gradients' global norm when the step computed it already
  /// (unscale_with_norm), else global_norm reads them.
  void update(std::int64_t s, const StepTelemetry& tel, double lr, std::optional<double> fused_norm = std::nullopt);
  /// Evaluation and checkpoint when due after the step.
  void evaluate_and_save_if_due();
  /// The progress line when due.
  void print_progress(double loss, double lr) const;
  /// Loss and bits per byte of `m` on `set`; with a profile, its seconds and windows under `name`.
  EvalLoss evaluate(Model& m, const EvalSet& set, const char* name);
  /// The own-precision validation result, given the fp32 one (reused when own_ is fp32_).
  EvalLoss evaluate_own(const EvalLoss& fp32_val);
  void evaluate_and_log();
  /// Per tensor: fraction of weight-gradient elements that are 0 in the run's precision (this micro-step's
  /// gradients) but not in an fp32 pass over the same batch and weights (STUDY_PROTOCOL §4.4 "gradient
  /// underflow fraction").
  /// `loss_scale`: the scale of the own pass.
  void log_gradient_underflow(std::int64_t step, const Batch& batch, double loss_scale);
  /// Tensor t: fraction of elements with a non-zero gradient whose master weight did not change (before_:
  /// t's weights before its update).
  void log_stagnation(std::int64_t step, ParamTensor t);
  void save();
  nlohmann::json identity() const;
  /// Before model `next` runs: with binary32 masters, the other model frees its working copy, so that the two
  /// never hold one at once (Model::drop_derived; the fp32 twin needs one only then). Nothing with binary64 masters.
  void make_room_for(Model& next);
  /// Tells both models their weights changed (Model::weights_changed): master_ was set or updated; it
  /// changes nowhere else, so the models may reuse their working copies until the next call. With one
  /// micro-step per update nothing is reused before the next update, so it withdraws the promise instead
  /// (Model::release_weights: the GEMM pack cache holds nothing); evaluate() promises for its batches.
  void weights_changed();

  TrainOptions opts_;
  Model& own_;
  Model& fp32_;
  const TrainData& data_;
  std::ostream* progress_;
  ShadowHook shadow_;
  ParamLayout layout_;
  /// The master weights and the update's gradients, stored as own_.master_storage() and own_.grads_storage() say
  /// (binary32 under every preset but fp64).
  ParamStore master_, grads_;
  /// The AdamW moments, stored as own_.moments_storage() says (binary32 under every preset but fp64).
  ParamStore m_, v_;
  /// The micro-step gradients when accum > 1; with accum 1, the fp32 pass's gradients of the underflow
  /// telemetry (allocated at the first detailed step). Stored as grads_.
  ParamStore micro_grads_;  ///< binary64 gradients of an accumulated update's micro-step; else the underflow pass's
  /// True when a micro-step's gradients go straight into grads_: one micro-step per update, or binary32 gradients
  /// (summed slice by slice as the backward completes them); else through micro_grads_.
  bool gradients_in_total() const;
  std::vector<double> before_;  ///< one tensor's master weights before its update (stagnation telemetry)
  std::deque<double> micro_losses_;  ///< the last kAutoAneWindow micro-step training losses
  /// The own model's fp8 scaling state before each micro-step of the current update (empty without one): the
  /// delayed-scaling histories move with every training pass, so name_first_nonfinite runs micro-step j from the
  /// state it ran from and puts the update's final state back after.
  std::vector<ops::Fp8ScalingState> fp8_before_;
  std::vector<double> update_losses_;  ///< the current update's micro-step losses (name_first_nonfinite checks them)
  LossScaler scaler_;
  RunLog log_;
  std::int64_t step_ = 0;        ///< steps completed
  std::int64_t adam_t_ = 0;      ///< applied (non-skipped) updates
  std::int64_t skipped_ = 0;
  std::int64_t started_at_ = 0;  ///< step_ when this invocation started
  /// The earlier invocations of this run (from its checkpoint): one object each, {"first_update",
  /// "last_update", "git_revision", "build_flags", "command"}; segments() appends this invocation's.
  nlohmann::json past_segments_ = nlohmann::json::array();
  std::optional<std::int64_t> first_nonfinite_step_;
  std::string first_nonfinite_op_;
  std::int64_t collapsed_norm_steps_ = 0;  ///< steps in which an RMSNorm row collapsed to zeros (Σx² overflow)
  std::optional<std::int64_t> first_collapsed_norm_step_;
  std::string first_collapsed_norm_;
  bool diverged_ = false;
  double last_train_loss_ = 0;
  double wall_start_ = 0;
  ops::Profile* profile_ = nullptr;
};

/// Cuts tokenised split `tokens` into the fixed evaluation windows, batched by `batch`. When
/// max_tokens > 0 only the leading windows covering at most max_tokens predictions are kept (a documented
/// fixed subset for quick runs). `bytes_of` returns the bytes a token stands for.
EvalSet make_eval_set(std::span<const std::int32_t> tokens, int seq, int batch, std::int64_t max_tokens,
                      const std::function<std::int64_t(std::int32_t)>& bytes_of);

/// The learning rate of 0-based update `update` of a `steps`-update run under r.schedule.
double update_learning_rate(const Recipe& r, std::int64_t update, std::int64_t steps);

/// The training batch of `step` (data::BatchSampler over the train tokens; the micro-step index).
Batch train_batch(std::span<const std::int32_t> train, int seq, int batch, std::uint64_t seed,
                  std::int64_t step);

}  // namespace roundoff::studies::train
