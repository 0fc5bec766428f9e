#pragma once
/// \file model_interface.hpp
/// What the trainer needs from a model: a batch type and forward / forward+backward over master weights.
/// The model owns its precision (a Policy); the trainer owns the weights, the optimizer and the schedule.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/fp8_scaling.hpp"
#include "ops/profile.hpp"
#include "studies/train/config.hpp"
#include "studies/train/param_store.hpp"
#include "studies/train/params.hpp"
#include "studies/train/run_log.hpp"

namespace roundoff::studies::train {

/// B sequences of T tokens; targets[b·T + t] is the token after inputs[b·T + t].
struct Batch {
  int batch = 0;  ///< B
  int seq = 0;    ///< T (≤ the config's seq)
  std::vector<std::int32_t> inputs, targets;
};

/// Where a training step reports its telemetry. `detailed` asks for the per-layer activation statistics
/// (sampled steps only); range events and the first non-finite op are always reported.
struct StepTelemetry {
  std::int64_t step = 0;
  RunLog* log = nullptr;
  bool detailed = false;
  /// Set by the model to "<op>.<pass>[layer]" of the first op (in execution order) that produced a
  /// non-finite value in this step, if any.
  std::string first_nonfinite_op;
  /// Whether the model scans every op output for first_nonfinite_op (a pass over each output). A caller that
  /// needs the name only for a step whose loss or gradients turn out non-finite may turn the scans off and, for
  /// such a step, run it again with them on: the pass is deterministic, so the second run computes the same
  /// values and names the same op (Trainer::name_first_nonfinite). Off, first_nonfinite_op names at most a
  /// gradient tensor whose rounding overflowed.
  bool check_outputs = true;
  /// Set by the model to "rmsnorm.fwd(<tensor>)[layer]" of the first RMSNorm in this step that turned a
  /// non-zero row into zeros because its Σx² overflowed (rstd = 0), if any.
  std::string first_collapsed_norm;
};

class Model {
 public:
  virtual ~Model() = default;
  /// Σ over the B·T predicted tokens of −ln p(target), reduced in binary64; forward pass only.
  virtual double total_loss(const Batch& b, std::span<const double> master) = 0;
  /// Forward and backward: returns the mean loss (nats/token) and overwrites `grads` (master layout) with
  /// the gradient of loss_scale·mean loss as the policy's backward pass produces it (not yet unscaled).
  virtual double loss_and_grad(const Batch& b, std::span<const double> master, double loss_scale,
                               std::span<double> grads, StepTelemetry& telemetry) = 0;
  /// loss_and_grad into `grads`, then the update's gradient sum accumulate_gradients(total, grads, first), and
  /// `grads` left +0 everywhere. This default runs the three in turn; a model may fuse them into one pass with the
  /// same bits (Transformer: with its gradient-role rounding, and the next call's zeroing skipped).
  virtual double loss_and_grad_accumulate(const Batch& b, std::span<const double> master, double loss_scale,
                                          std::span<double> grads, std::span<double> total, bool first,
                                          StepTelemetry& telemetry);
  /// One AdamW update of `tensor`'s elements of master, m, v (whole buffers in the master layout) from unscaled
  /// gradients, under the model's precision (the OPT group): lr at this step, t = 1-based applied-update
  /// count, coef = clip multiplier, weight decay on is_decayed() tensors only. An update of every tensor is
  /// update_tensor over kAllParamTensors in order (apply_update), so a caller may look at each tensor
  /// between them (the trainer's stagnation telemetry) without copying all of the masters.
  /// m and v are stored as moments_storage() says (the caller made them so).
  virtual void update_tensor(ParamTensor tensor, std::span<double> master, ParamStore& m, ParamStore& v,
                             std::span<const double> grads, const Recipe& recipe, double lr, std::int64_t t,
                             double coef) = 0;
  /// update_tensor of every tensor, in kAllParamTensors order.
  void apply_update(std::span<double> master, ParamStore& m, ParamStore& v, std::span<const double> grads,
                    const Recipe& recipe, double lr, std::int64_t t, double coef) {
    for (const ParamTensor tensor : kAllParamTensors) update_tensor(tensor, master, m, v, grads, recipe, lr, t, coef);
  }
  /// The storage of the AdamW moments m and v under this model's precision: Binary32 when every value the
  /// update can store in them is a binary32 value (storage_kind_for of the moments' formats), else Binary64.
  virtual StorageKind moments_storage() const = 0;
  /// The storage of the master weights under this model's precision: Binary32 may be chosen only when every
  /// master value is a binary32 value (storage_kind_for the MasterWeight role: the update stores its masters in
  /// that format, and the initial weights are binary32 values), else Binary64. This default: Binary64.
  virtual StorageKind master_storage() const { return StorageKind::Binary64; }
  /// The storage of the weight gradients (a micro-step's, and the update's sum when accum > 1): Binary32 when every
  /// value a gradient pass, the accumulation and the unscaling store in them is a binary32 value, else Binary64.
  /// This default: Binary64.
  virtual StorageKind grads_storage() const { return StorageKind::Binary64; }

  // The trainer's entry points, on masters and gradients stored as master_storage() and grads_storage() say: the
  // same results as the span versions on the widened values. These defaults run the span versions, directly on
  // Binary64 stores and on widened copies otherwise (a model whose storage is binary32 overrides them to hold no
  // such copy).
  virtual double total_loss_stored(const Batch& b, const ParamStore& master);
  virtual double loss_and_grad_stored(const Batch& b, const ParamStore& master, double loss_scale, ParamStore& grads,
                                      StepTelemetry& telemetry);
  /// `grads` may be an empty store (size 0): the micro-step's gradients then need no store of their own (Transformer
  /// with binary32 gradients sums each slice into `total` as it completes; this default uses a temporary store).
  virtual double loss_and_grad_accumulate_stored(const Batch& b, const ParamStore& master, double loss_scale,
                                                 ParamStore& grads, ParamStore& total, bool first,
                                                 StepTelemetry& telemetry);
  virtual void update_tensor_stored(ParamTensor tensor, ParamStore& master, ParamStore& m, ParamStore& v,
                                    const ParamStore& grads, const Recipe& recipe, double lr, std::int64_t t,
                                    double coef);
  /// Frees what the model derived from the weights (a working copy, packed operands) without withdrawing a promise
  /// of weights_changed(): the next call derives it again, with the same values. The trainer calls it on one model
  /// before it runs the other, so the two never hold a derived copy at once.
  virtual void drop_derived() {}

  /// The model's per-tensor fp8 scaling state (ops/fp8_scaling.hpp), which a checkpoint saves; nullptr: none.
  virtual ops::Fp8ScalingState* fp8_state() { return nullptr; }
  /// Adds the time of every op call of this model to `profile` (nullptr: off). Timing only, no bit changes.
  /// Models that do not run through ops::Runner have nothing to time and ignore it.
  virtual void set_profile(ops::Profile* /*profile*/) {}
  /// The master weights were set or changed: until the next weights_changed() or release_weights() (and while
  /// the master buffer is the same), the caller promises they do not change, and the model may reuse what it
  /// derived from them (the Transformer's working copy and its packed GEMM operands) instead of deriving it
  /// again at every micro-step and evaluation batch. Each call starts a new version of the model's own.
  virtual void weights_changed() {}
  /// Withdraws the promise (the initial state): everything is derived at each call.
  virtual void release_weights() {}
};

}  // namespace roundoff::studies::train
