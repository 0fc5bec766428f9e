#pragma once
/// \file model.hpp
/// The Llama-family decoder of the trainer, every op through ops::Runner under a precision Policy.
///
/// Per block l (x: the residual stream, (B·T, C)):
///   h  = RMSNorm(x; ln1w)                      (Pre-Norm; under DeepNorm h = x)
///   q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ               (Matmul; k, v have kv_heads heads)
///   q, k ← RoPE(q), RoPE(k)                     (RopeRotate, table from RopeAngles, base 10000)
///   k, v ← tile(k), tile(v)                     (GQA only: exact copies to the NH query heads by the head map;
///                                               backward: dk, dv summed over the query heads sharing a KV
///                                               head, ops/gqa.hpp under the (residual-attn, bwd-data) entry)
///   att = softmax(q·kᵀ/√hs, causal);  y = att·v  (AttnScores, Softmax, AttnValues; under the policy's
///                                               attention=online: one online pass giving y and the row lse,
///                                               att recomputed as exp(s − lse) for the backward)
///   x ← x + β·(y·Woᵀ)                           (ResidualAttn; DeepNorm: x ← RMSNorm_{eps·α²}(x + o/α; ln1w))
///   h2 = RMSNorm(x; ln2w)                       (Pre-Norm; under DeepNorm h2 = x)
///   z = SiLU(h2·W1ᵀ) ⊙ (h2·W3ᵀ);  f = z·W2ᵀ      (Matmul, Silu, SwiGlu, Matmul)
///   (--ffn gelu | gelu-tanh: z = GELU(h2·W1ᵀ), erf or tanh form, no W3; Matmul, Gelu, Matmul)
///   x ← x + β·f                                 (ResidualFfn; DeepNorm: x ← RMSNorm_{eps·α²}(x + f/α; ln2w))
/// then logits = RMSNorm(x; lnfw)·Wclsᵀ (Classifier; Wcls = wte when the embeddings are tied) and the mean cross-entropy (CrossEntropy, binary64 mean).
/// β is the residual rule's branch multiplier (1, 1/√(2L), or 1/α).
///
/// Weights: the forward and backward read the working copy, the masters rounded to the policy's `weights`
/// role format (nearest-even; the masters themselves when that format is fp64), made afresh from the masters
/// at every call unless the caller promised the weights unchanged (weights_changed), so after every update (AutoANE stages fp16 copies of its fp32 masters the same way). Each
/// op then rounds its inputs to its own storage format on entry. Weight gradients are rounded to the policy's Gradient
/// role format after the backward pass. Telemetry: every step, each op output is scanned for non-finite
/// values (the first one names the op); at detailed steps, per-op range events (inf, nan, subnormal, zero
/// counts and max |y|), per-layer max |x| and rms of the stream, the swamping ratio rms(x)/rms(β·F) of each
/// residual add, and the max attention logit per layer.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/policy.hpp"
#include "ops/probe.hpp"
#include "ops/runner.hpp"
#include "studies/train/config.hpp"
#include "studies/train/model_interface.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train {

class Transformer final : public Model {
 public:
  /// `seed` drives the stochastic-rounding stream (with the step and call index; see ops::Runner).
  /// exec: how the op calls compute (ops::ExecOptions; the same bits whatever it says).
  Transformer(const ModelConfig& c, ResidualScale residual, const ops::Policy& policy, std::uint64_t seed,
              const ops::ExecOptions& exec = {});
  ~Transformer() override;
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  double total_loss(const Batch& b, std::span<const double> master) override;
  double loss_and_grad(const Batch& b, std::span<const double> master, double loss_scale, std::span<double> grads,
                       StepTelemetry& telemetry) override;
  /// Fused: the gradient-role rounding, its finiteness scan, the accumulation into `total` and the clearing of
  /// `grads` in one pass per tensor ("model: gradient rounding + accumulate"); the next backward into the same
  /// buffer skips its zeroing.
  double loss_and_grad_accumulate(const Batch& b, std::span<const double> master, double loss_scale,
                                  std::span<double> grads, std::span<double> total, bool first,
                                  StepTelemetry& telemetry) override;
  void update_tensor(ParamTensor tensor, std::span<double> master, ParamStore& m, ParamStore& v,
                     std::span<const double> grads, const Recipe& recipe, double lr, std::int64_t t,
                     double coef) override;
  /// storage_kind_for the policy's AdamM and AdamV role formats.
  StorageKind moments_storage() const override;
  /// storage_kind_for the policy's MasterWeight role format when the model holds a working copy anyway (the Weight
  /// role does not hold every master value: bf16 or fp16 weights over fp32 masters), else Binary64: the ops then
  /// read the binary64 masters directly, with no copy (fp32, ane-fp16, ane-guide).
  StorageKind master_storage() const override;
  /// storage_kind_for the formats a gradient value is stored in: the storage of every op pass that writes a weight
  /// gradient (Matmul, Classifier, RmsNorm and Embedding backward-weight: each op stores its sums in its entry's
  /// storage format), the Gradient role (finish_gradients rounds to it), the update format (unscale_gradients) and
  /// fp32 (accumulate_gradients).
  StorageKind grads_storage() const override;
  // The stored entry points: the working copy derived from binary32 masters directly (no binary64 copy of the
  // masters), binary32 gradients written op by op through one binary64 slice (GradOut), and AdamW on binary32
  // masters and gradients through one tensor's binary64 slices.
  double total_loss_stored(const Batch& b, const ParamStore& master) override;
  double loss_and_grad_stored(const Batch& b, const ParamStore& master, double loss_scale, ParamStore& grads,
                              StepTelemetry& telemetry) override;
  double loss_and_grad_accumulate_stored(const Batch& b, const ParamStore& master, double loss_scale,
                                         ParamStore& grads, ParamStore& total, bool first,
                                         StepTelemetry& telemetry) override;
  void update_tensor_stored(ParamTensor tensor, ParamStore& master, ParamStore& m, ParamStore& v,
                            const ParamStore& grads, const Recipe& recipe, double lr, std::int64_t t,
                            double coef) override;
  /// Frees the working copy and unregisters its packs; the next call derives them again.
  void drop_derived() override;
  /// Op calls per (op, pass) (ops::Runner), plus the output scans as phases: "model: output checks" (the
  /// non-finite and collapsed-row scans of every step) and "model: range telemetry" (the detailed steps'
  /// range events and stream statistics); and the model's work outside the ops: "model: buffer growth" (the
  /// activation and activation-gradient buffers grown to a new shape, i.e. allocated and first touched: the
  /// first step, almost nothing after), "model: gradient zeroing", "model: gradient rounding" (to the
  /// gradient role, with its finiteness scan) and "model: gqa kv reduce" (dK, dV summed to the KV heads).
  void set_profile(ops::Profile* profile) override {
    runner_.enable_profile(profile);
    profile_ = profile;
  }
  /// A new version (or none) withdraws the working weights' registration with the Runner's GEMM pack cache at
  /// once (numerics::kernels::PackCache; working_weights registers the next copy it derives).
  void weights_changed() override;
  void release_weights() override;

  /// One forward+backward on `b` (loss scale `loss_scale`) with the MPFR shadow on (ops::Runner::enable_shadow):
  /// every op call records its local error on `units` sampled units into `tape` (tagged with `step`). With a
  /// `reference` model, the same pass's activations and gradients then also get their global error
  /// (see global_error) without a second forward+backward of this model.
  void shadow(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale, ops::Tape& tape,
              std::int64_t units, Transformer* reference = nullptr);

  /// Global error: one forward+backward on `b` (loss scale `loss_scale`) by this model and by `reference`
  /// (normally the same config under the `fp64` policy: its rounding error, ≲ γ_n·2^-53 relative, is far below
  /// any emulated format's ulp), then every saved forward activation and every weight gradient (per tensor
  /// and layer) of this model against the reference's, recorded as RecordKind::Global in `tape` (ulps in
  /// the storage format of the op that produced the tensor). Unlike the local error, this includes the
  /// error every earlier op passed down. Both models' stochastic streams are keyed by `step`.
  void global_error(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale,
                    Transformer& reference, ops::Tape& tape);

  const ops::Policy& policy() const { return runner_.policy(); }
  /// The per-tensor fp8 scaling state (delayed scaling's amax histories; ops/fp8_scaling.hpp), saved in checkpoints.
  ops::Fp8ScalingState* fp8_state() override { return &runner_.fp8_state(); }
  /// Test hook: multiplies the forward output of one observed site (op, layer, tensor as the Runner's observer
  /// names it, e.g. the Matmul "v" or "w2", or the AttnScores "scores") by `factor` at training step `step`
  /// (e.g. 1e6 to inject an overflow), before that output's scan and before any later op reads it.
  void inject(std::int64_t step, ops::OpKind op, int layer, std::string tensor, double factor);

 private:
  /// Saved activations of one block, row-major. N = B·T token rows, C = d, H = hidden, KVD = kv_heads·hs; the
  /// (B, T, NH·hs) tensors are (N, C) with head h in columns [h·hs, (h+1)·hs). Sized once per (B, T) by
  /// allocate_forward; a tensor a variant does not use stays empty.
  struct LayerActs {
    ops::Buffer x_in;            ///< (N, C) the block's input stream
    ops::Buffer h1;              ///< (N, C) rmsnorm(x_in) ⊙ ln1w (Post-Norm: x_in)
    ops::Buffer r1;              ///< (N) rstd of ln1 (Pre-Norm only)
    ops::Buffer q;               ///< (N, C) h1 · Wqᵀ
    ops::Buffer k, v;            ///< (N, KVD) h1 · Wkᵀ, h1 · Wvᵀ
    ops::Buffer qr;              ///< (N, C) q rotated by position
    ops::Buffer kr;              ///< (N, KVD) k rotated by position
    ops::Buffer kt, vt;          ///< (N, C) GQA only: kr and v tiled to the NH query heads (forward head map)
    ops::Buffer preatt;          ///< (B, NH, T, T) qr · ktᵀ / √hs, causal
    ops::Buffer att;             ///< (B, NH, T, T) softmax(preatt) by row (online order: recomputed in backward)
    ops::Buffer lse;             ///< (B, NH, T) online order only: the row log-sum-exp of preatt
    ops::Buffer y;               ///< (N, C) att · vt per head
    ops::Buffer o;               ///< (N, C) y · Woᵀ
    ops::Buffer pre1;            ///< (N, C) x_in + β·o
    ops::Buffer rp1;             ///< (N) rstd of post1 (Post-Norm only)
    ops::Buffer x_mid;           ///< (N, C) pre1 (Post-Norm: rmsnorm(pre1) ⊙ ln1w)
    ops::Buffer h2;              ///< (N, C) rmsnorm(x_mid) ⊙ ln2w (Post-Norm: x_mid)
    ops::Buffer r2;              ///< (N) rstd of ln2 (Pre-Norm only)
    ops::Buffer g;               ///< (N, H) h2 · W1ᵀ
    ops::Buffer u;               ///< (N, H) SwiGLU only: h2 · W3ᵀ
    ops::Buffer a;               ///< (N, H) SwiGLU only: silu(g)
    ops::Buffer z;               ///< (N, H) a ⊙ u (GELU: gelu(g))
    ops::Buffer f;               ///< (N, C) z · W2ᵀ
    ops::Buffer pre2;            ///< (N, C) x_mid + β·f
    ops::Buffer rp2;             ///< (N) rstd of post2 (Post-Norm only)
  };
  /// The dimensions of one pass over a batch.
  struct Dims {
    std::int64_t B, T, C, H, N, V, NH, hs, NKV, KVD;
    ops::RowShape rows() const { return {N, C}; }
    ops::RowShape hidden() const { return {N, H}; }
    ops::AttnShape attn() const { return {B, NH, T, hs}; }
    ops::AttnShape kv_attn() const { return {B, NKV, T, hs}; }
    bool gqa() const { return NKV != NH; }
  };
  Dims dims_of(const Batch& b) const;
  /// Sizes every forward buffer (acts_, x_, the head's) for d's shape, once per shape ("model: buffer growth").
  void allocate_forward(const Dims& d);
  /// Sizes every backward buffer (bw_) for d's shape, once per shape.
  void allocate_backward(const Dims& d);
  using Span = std::span<double>;
  using CSpan = std::span<const double>;
  /// Elements [off, off + n) of the gradients: one tensor (of one layer).
  struct Slot {
    std::size_t off, n;
  };
  /// A micro-step of an accumulated update with binary32 gradients summed straight into the update's binary32
  /// total (loss_and_grad_accumulate_stored without a micro-step store): each slice's gradient is finished —
  /// rounded to the gradient role, scanned, summed into the total by the same elementwise operations as
  /// finish_gradients — as soon as its last writer ran, so no parameter-sized micro-step vector is held.
  struct DirectSink {
    ParamStore* total = nullptr;
    bool first = true;
    std::vector<float> pending;  ///< a slice between its writers (the tied wte: classifier, then embedding)
    std::size_t pending_off = static_cast<std::size_t>(-1);
    std::vector<Slot> finished;            ///< every finished slice (each element once: checked at the end)
    std::vector<ParamTensor> nonfinite;    ///< tensors whose rounded gradients held a non-finite value
  };
  /// The weight gradients a backward pass writes: binary64 ones in place (`binary64`), a Binary32 ParamStore
  /// (`store`) written in place, or (`direct`) no store: each slice written into `scratch` (binary32) and summed
  /// into the DirectSink's total.
  struct GradOut {
    std::span<double> binary64;
    ParamStore* store = nullptr;
    std::vector<float>* scratch = nullptr;
    DirectSink* direct = nullptr;
  };
  /// The working weights' named slices (ParamViews of a flat buffer of either width: binary32 working weights are
  /// read by the ops in place, ops/runner.hpp).
  struct WeightViews {
    ops::CValues wte, ln1w, wq, wk, wv, wo, ln2w, w1, w3, w2, lnfw, wcls;
    WeightViews(ops::CValues flat, const ParamLayout& lay);
  };
  /// One block's part of the per-layer weight tensors.
  struct BlockWeights {
    ops::CValues ln1w, wq, wk, wv, wo, ln2w, w1, w3, w2;
  };
  BlockWeights block_weights(const WeightViews& p, int l) const;

  // The forward's steps that differ between variants (the residual rule's norm placement, GQA, the attention
  // order, the feed-forward); forward() itself reads as the Pre-Norm SwiGLU block.
  /// y (N, C) = rmsnorm_eps(x) ⊙ w, rstd (N); then the collapsed-row check (check_norm).
  void norm(StepTelemetry* tel, ops::Site s, ops::Values y, ops::Values rstd, ops::CValues x, ops::CValues w,
            ops::RowShape rows, double eps);
  /// A block's input norm: h = rmsnorm(x) ⊙ w (Pre-Norm) or h = x (Post-Norm: DeepNorm).
  void norm_in(StepTelemetry* tel, ops::Site s, ops::Values h, ops::Values rstd, ops::CValues x, ops::CValues w,
               ops::RowShape rows);
  /// A residual add's output: y = pre (Pre-Norm) or y = rmsnorm_{eps·α²}(pre) ⊙ w (Post-Norm).
  void norm_out(StepTelemetry* tel, ops::Site s, ops::Values y, ops::Values rstd, ops::CValues pre, ops::CValues w,
                ops::RowShape rows);
  /// The K or V (B, T, NH·hs) each query head reads: kv itself, or under GQA kv tiled to the NH heads into `tiled`.
  ops::CValues kv_for_heads(ops::Buffer& tiled, const ops::Buffer& kv, const Dims& d);
  /// att and y of block l from preatt and vt, in the policy's attention order (online: y and lse, att later).
  void attention_forward(StepTelemetry* tel, int l, LayerActs& L, ops::CValues vt, ops::AttnShape ash);
  /// z (N, H) of block l from h2: SwiGLU silu(h2·W1ᵀ) ⊙ (h2·W3ᵀ), or GELU gelu(h2·W1ᵀ).
  void ffn_forward(int l, LayerActs& L, const BlockWeights& w, const Dims& d);
  // Their backward steps.
  /// Backward of norm_out: dpre = dy (Pre-Norm), or through the post-norm into `buffer` (checked) with dw += ....
  ops::CValues norm_out_backward(StepTelemetry* tel, ops::Site s, std::string_view weight, ops::Buffer& buffer,
                                 ops::CValues dy, ops::CValues pre, ops::CValues w, ops::CValues rstd, const GradOut& g,
                                 Slot dw, ops::RowShape rows);
  /// Backward of norm_in, adding into dx: through the norm (dw += ...), or dx += dh as a residual-stream gradient
  /// sum under `residual`'s bwd-data entry (Post-Norm, checked).
  void norm_in_backward(StepTelemetry* tel, ops::Site s, std::string_view weight, ops::OpKind residual,
                        ops::Values dx, ops::CValues dh, ops::CValues x, ops::CValues w, ops::CValues rstd,
                        const GradOut& g, Slot dw, ops::RowShape rows);
  /// dh2 (N, C) += through ffn_forward's z, given dz (N, H); dW1 (and dW3) += ....
  void ffn_backward(int l, const LayerActs& L, const BlockWeights& w, const GradOut& g,
                    ops::CValues dz, ops::Values dh2, const Dims& d);
  /// What the attention backward of block l reads: K, V (B, T, NH·hs) and att (B, NH, T, T).
  struct AttnOperands {
    ops::CValues kt, vt, att;
  };
  AttnOperands attention_operands(StepTelemetry* tel, int l, LayerActs& L, const Dims& d);
  /// dK, dV of the KV heads (B, T, NKV·hs): the query heads' dkt, dvt, or under GQA their sums per KV head.
  std::pair<ops::CValues, ops::CValues> kv_heads_backward(ops::CValues dkt, ops::CValues dvt, const Dims& d);
  /// The detailed steps' statistics of a forward output beyond its range events (from observe()): the max
  /// attention logit, the swamping ratio rms(x)/rms(β·F) of each residual add, max |logits|.
  void op_statistics(StepTelemetry* tel, const ops::Observation& o);
  /// The detailed steps' max |x| and rms of the stream after block `layer`.
  void stream_statistics(StepTelemetry* tel, int layer, ops::CValues x);

  /// The summed loss of an evaluation forward on b (step −1) from `master` (binary64 span or ParamStore): the body of
  /// total_loss and total_loss_stored.
  template <class Master>
  double total_loss_of(const Batch& b, const Master& master);
  /// The working weights: `master` rounded to the `weights` role format (master itself for fp64, and
  /// whenever that rounding changes no master value: then no copy is held).
  ops::CValues working_weights(std::span<const double> master);
  /// The same from stored masters: a Binary64 store as above; binary32 masters widened and rounded into the copy
  /// (always held: the ops read binary64).
  ops::CValues working_weights(const ParamStore& master);
  /// Whether working_weights may return what it derived last from the `n` values at `data` (the promise holds).
  bool derived_current(const void* data, std::size_t n) const;
  /// Layer l's slice of t (l = 0 for the tensors outside the blocks).
  Slot grad_slot(ParamTensor t, int l) const;
  /// op(dw) with dw the gradient elements of `at`: a span of g.binary64 itself, or of the binary32 store (the ops
  /// write binary32 weight gradients, their storage format fitting binary32: grads_storage(); a format beyond it is
  /// refused by the op, std::logic_error). Direct (g.direct): dw, binary32 as in a store, starts at +0 (or holds
  /// the slice's earlier writers' sum), and after op the slice is finished (finish_slice) unless `last` is false (a
  /// later op writes into the same slice: it is kept pending until then).
  template <class F>
  void with_grad(const GradOut& g, Slot at, F&& op, bool last = true);
  /// A direct micro-step's slice `at`, complete in `part`: rounded to the gradient role, scanned, summed into
  /// d.total (accumulate_and_clear), as finish_gradients does range by range; `part` is left +0.
  void finish_slice(DirectSink& d, Slot at, std::span<float> part);
  /// The end of a direct backward: every gradient element no op wrote is finished as +0 (as a cleared store's
  /// would be), each element finished once (else std::logic_error), then the first non-finite tensor named
  /// in kAllParamTensors order, as finish_gradients names it.
  void finish_direct(DirectSink& d, StepTelemetry* tel);
  /// One AdamW update of tensor `tensor` (its elements w, g; its moments at offset `off` of m, v).
  /// g: binary64, or binary32 gradients read in place (binary32 moments; else widened here).
  void update_slice(ParamTensor tensor, ops::Values w, ParamStore& m, ParamStore& v, std::size_t off,
                    ops::CValues g, const Recipe& recipe, double lr, std::int64_t t, double coef);
  void forward(const Batch& b, ops::CValues w, StepTelemetry* tel);
  /// Where backward's gradient pass leaves the weight gradients: in `grads`, rounded to the gradient role
  /// (no total), or summed into `total` by accumulate_and_clear and `grads` cleared. The total is binary64
  /// (`total`) when the gradients are, else a store of their kind (`total_store`).
  struct GradSink {
    std::span<double> total;
    bool first;
    ParamStore* total_store = nullptr;
    bool accumulates() const { return !total.empty() || total_store != nullptr; }
  };
  /// One training forward+backward on the working weights w (every loss_and_grad* form): records the fp8 amaxes,
  /// counts the fp8 casts' saturation and underflow at telemetry steps, updates the delayed scales.
  double training_pass(const Batch& b, ops::CValues w, double loss_scale, const GradOut& grads,
                       StepTelemetry& telemetry, GradSink sink);
  void backward(const Batch& b, ops::CValues w, double loss_scale, std::span<double> grads,
                StepTelemetry* tel, GradSink sink);
  void backward(const Batch& b, ops::CValues w, double loss_scale, const GradOut& grads,
                StepTelemetry* tel, GradSink sink);
  /// The gradient pass at the end of backward: each tensor's gradients rounded to the gradient role (unless it
  /// is fp64), scanned for non-finite values (naming the first tensor), then summed into sink.total and cleared.
  void finish_gradients(std::span<double> grads, StepTelemetry* tel, GradSink sink);
  /// The same on binary32 gradients (and a binary32 total), range by range through binary64 pieces.
  void finish_gradients(ParamStore& grads, StepTelemetry* tel, GradSink sink);
  /// The backward's GradOut over stored gradients (binary64 ones in place).
  GradOut grad_out(ParamStore& grads);
  /// The Runner's observer during forward() and backward(): the injection hook (forward outputs), then check().
  void observe(StepTelemetry* tel, const ops::Observation& o);
  /// Scans y for non-finite values (names the first op) and, at detailed steps, logs its range events.
  void check(StepTelemetry* tel, ops::OpKind op, ops::Pass pass, int layer, std::string_view tensor,
             ops::CValues y);
  /// Runs `reference` on the same batch, weights and loss scale, then records every saved activation and
  /// every weight gradient of this model's last pass (gradients `grads`) against the reference's in `tape`.
  void record_global(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale,
                     std::span<const double> grads, Transformer& reference, ops::Tape& tape);
  /// RMSNorm backward-data, AutoANE's defective form under Defects::rmsnorm_bwd (rmsnorm_defect.hpp).
  void norm_backward_data(ops::Site s, ops::Values dx, ops::CValues dy, ops::CValues x, ops::CValues w,
                          ops::CValues rstd, ops::RowShape sh);
  /// RMSNorm range event the output scan cannot see: a row whose Σx² overflowed the compute format has
  /// rstd = 1/√inf = 0, so the row becomes silent zeros. Counts rows with rstd = 0 but x ≠ 0 (names the first
  /// such norm of the step; at detailed steps logs `collapsed_rows`).
  void check_norm(StepTelemetry* tel, int layer, std::string_view tensor, ops::CValues x, ops::CValues rstd,
                  std::int64_t cols);

  /// v (sized by allocate_backward) set to zero: the start of an add-into output (backward ops add into their
  /// gradients).
  ops::Values zeros(ops::Buffer& v);

  /// The backward pass's activation gradients, sized once per shape (allocate_backward) and zeroed where the
  /// backward starts them (the ops add into their gradients). Shapes as in LayerActs.
  struct BackwardBuffers {
    ops::Buffer dlogits;                   ///< (N, V)
    ops::Buffer dxf, dx, dxi;              ///< (N, C) the stream's gradient (dx, dxi trade places per block)
    ops::Buffer scratch;                   ///< (N, C) Post-Norm only: the unused term of a gradient sum
    ops::Buffer dpre2, dpre1;              ///< (N, C) Post-Norm only: through post2, post1
    ops::Buffer dxm, df, dh2, dout, dy;    ///< (N, C)
    ops::Buffer dz, dg;                    ///< (N, H)
    ops::Buffer da, du;                    ///< (N, H) SwiGLU only
    ops::Buffer datt, dpreatt;             ///< (B, NH, T, T)
    ops::Buffer dvt, dqr, dkrt, dq, dh1;   ///< (N, C)
    ops::Buffer dk;                        ///< (N, KVD)
    ops::Buffer dkr_kv, dv_kv;             ///< (N, KVD) GQA only: dK and dV summed to the KV heads
    ops::Buffer kt_b, vt_b;                ///< (N, C) gqa-mismatch defect only: the backward's K, V
    ops::Buffer pre_b, att_b;              ///< (B, NH, T, T) gqa-mismatch defect only: its softmax
  };

  ModelConfig c_;
  ResidualRule rule_;
  std::vector<int> fwd_map_, bwd_map_;  ///< KV head of each query head in the forward and the backward
  ParamLayout lay_;
  ops::Runner runner_;
  std::vector<LayerActs> acts_;
  /// Whether the activations and their gradients are binary32 tensors: when the storage format of every (op, pass)
  /// entry fits binary32 (numerics::fits_binary32), else binary64 (ops/values.hpp; the same bits either way).
  bool act32_ = false;
  ops::Buffer x_;  ///< (N, C) the forward's residual stream
  BackwardBuffers bw_;
  ops::Buffer x_final_, xf_;  ///< (N, C) the last block's output; rmsnorm(x_final) ⊙ lnfw
  ops::Buffer rf_;            ///< (N) rstd of the final norm
  ops::Buffer logits_, probs_;  ///< (N, V) xf · Wclsᵀ; softmax(logits)
  std::vector<double> losses_;          ///< (N) per-token cross-entropy
  std::vector<double> cos_, sin_;       ///< (T, hs/2) the RoPE table
  /// The (B, T) the forward and the backward buffers are sized for (-1: none yet).
  std::int64_t fwd_B_ = -1, fwd_T_ = -1, bwd_B_ = -1, bwd_T_ = -1;
  /// working_weights' copy (empty when the masters are read directly): binary32 when weights32_, else binary64.
  ops::Buffer weights_;
  /// Whether the working weights are binary32: the activations are (act32_), the Weight role's format fits binary32,
  /// and no GEMM entry that reads weights quantizes them (a quantized GEMM's derived weights are kept per binary64
  /// buffer). With binary32 masters that the Weight role holds, the masters themselves (no copy).
  bool weights32_ = false;
  /// One tensor's binary64 slice of binary32 gradients: written by the backward's weight-gradient ops (with_grad)
  /// and read by AdamW (update_tensor_stored: a tensor over all its layers). Kept between steps at the largest size
  /// met (E11, A512: the tied wte, which the backward reaches at its first weight gradient anyway), so no step
  /// allocates, zero-fills and faults it in afresh; freed by drop_derived. Every element read is written first
  /// (ParamStore::view widens the slice into it).
  std::vector<double> slice_;
  /// The direct backward's binary32 slice (GradOut::scratch): kept between steps at the largest size met, as slice_.
  std::vector<float> slice32_;
  /// weights_changed's promise (the current version, 0: none; versions_: the last one handed out), and what
  /// working_weights derived last: for which version of which buffer, and whether that was the masters themselves.
  std::uint64_t weights_version_ = 0, versions_ = 0, derived_version_ = 0;
  const void* derived_from_ = nullptr;
  std::size_t derived_size_ = 0;
  bool derived_identity_ = false;
  /// A gradient buffer finish_gradients left all +0 (the next backward into it need not zero it); null: none.
  const void* cleared_grads_ = nullptr;
  std::size_t cleared_size_ = 0;
  /// The working weights registered immutable with the GEMM pack cache under weights_version_ (null: none).
  const void* registered_ = nullptr;
  void register_weights(ops::CValues w);
  void unregister_weights();
  double mean_loss_ = 0;
  std::int64_t inject_step_ = -1;
  ops::OpKind inject_op_ = ops::OpKind::Matmul;
  int inject_layer_ = 0;
  std::string inject_tensor_;
  double inject_factor_ = 1;
  std::int64_t current_step_ = 0;
  ops::Profile* profile_ = nullptr;
};

}  // namespace roundoff::studies::train
