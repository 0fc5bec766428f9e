#pragma once
/// \file runner.hpp
/// Runner: the entry point a model uses. It holds a Policy (with a prebuilt context per (op, pass)), the
/// stochastic-rounding seed and step, and an optional shadow: every sampled call also runs the Reference
/// backend on the SAME (already rounded) inputs for a subset of units and records the op's local error and
/// its range events in a Tape.
///
///   ops::Runner run(ops::Policy::parse("ane-fp16"), seed);
///   ops::Tape tape;
///   run.enable_shadow(&tape, {.every = 10, .units = 4});
///   run.set_step(step);
///   run.matmul_forward({ops::OpKind::Matmul, layer, "q"}, q, xn, wq, {N, C, C});
///
/// Every method has the argument order, shapes and add-into semantics of the op function it wraps (see the
/// op headers); Site names the policy entry (Matmul vs Classifier, ResidualAttn vs ResidualFfn), the layer
/// and the tensor for the tape. Stochastic rounding uses the stream mix(step, call index within the step),
/// so a run is reproducible for any thread count as long as the op calls come in the same order.
/// The trainer's global error (emulated vs a full-reference model) goes through record_global().
///
/// An observer (set_observer) sees every watched output of every op call right after it is computed: the
/// model's non-finite scan, range telemetry and fault injection run there, so a forward or backward pass
/// reads as a list of Runner calls.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/adamw.hpp"
#include "ops/backend.hpp"
#include "ops/gelu.hpp"
#include "ops/policy.hpp"
#include "ops/probe.hpp"
#include "ops/profile.hpp"
#include "ops/shape.hpp"
#include "ops/values.hpp"

namespace roundoff::ops {

/// Whether an op call's outputs go to the Runner's observer: Off for a call whose outputs the caller looks
/// at itself, e.g. one term of a gradient sum that the last term's call completes.
enum class Observe : std::uint8_t { Outputs, Off };

/// Where an op call sits: the policy entry, the layer (-1 outside blocks) and a tensor name for the tape and
/// the observer.
/// `module` names the linear layer of a GEMM call (the weight's owner: "q", "w2", "logits") when `tensor` does not
/// (a backward call's tensor is its output, "dh1"); the per-tensor fp8 state is keyed by layer and module
/// (ops/fp8_scaling.hpp). Empty: the tensor name.
struct Site {
  OpKind op;
  int layer = -1;
  std::string_view tensor = "";
  Observe observe = Observe::Outputs;
  std::string_view module = "";
};

/// One output of an op call as the Runner's observer sees it, after the emulated call (and the shadow, if the
/// call was sampled). tensor: the Site's tensor name when the call has one watched output, else the output's
/// own name ("dq", "dk"; "cos", "sin"). storage: the format the output is stored in (the (op, pass) entry's
/// storage, or the output's own role format).
struct Observation {
  OpKind op;
  Pass pass;
  int layer;
  std::string_view tensor;
  Values data;  ///< binary64 or binary32, as the caller's tensor (ops/values.hpp)
  const numerics::Format& storage;
};
using Observer = std::function<void(const Observation&)>;

class Runner {
 public:
  using Span = std::span<double>;
  using CSpan = std::span<const double>;
  using Tokens = std::span<const std::int32_t>;

  /// exec: how the op calls compute (ExecOptions; the same bits whatever it says). Its pack_cache, when null,
  /// becomes the Runner's own (pack_cache()).
  explicit Runner(const Policy& policy, std::uint64_t seed = 0, const ExecOptions& exec = {});

  const Policy& policy() const { return policy_; }
  const ExecOptions& exec() const { return exec_; }
  /// Replaces the execution options of every later op call (a null pack_cache: the Runner's own).
  void set_exec(const ExecOptions& exec);
  /// The GEMMs' B-operand pack cache of this Runner's op calls: a model registers its immutable working
  /// weights here (numerics::kernels::PackCache).
  numerics::kernels::PackCache& pack_cache() { return *exec_.pack_cache; }
  /// Sets the training step (recorded on the tape, and part of the stochastic stream); resets the call index.
  void set_step(std::int64_t step);
  std::int64_t step() const { return step_; }
  /// Turns the shadow on (tape non-null) or off (nullptr).
  void enable_shadow(Tape* tape, const Sampling& sampling = {});
  /// Adds the wall time of every emulated op call to `profile` under its (op, pass); nullptr: off.
  void enable_profile(Profile* profile) { profile_ = profile; }
  /// Calls `observer` for every watched output of every op call whose Site has Observe::Outputs, in call
  /// order and output order; an empty function: off. Returns the previous observer.
  Observer set_observer(Observer observer);
  /// The emulated context of (op, pass) for the next call (advances the stochastic stream). For callers that
  /// use an op function directly.
  const Ctx<Emulated>& context(OpKind op, Pass pass);
  /// The same for a call at `layer`: in a layer the policy's block_keep() keeps, the entry without its block
  /// quantization (OpPrecision::quant cleared; every other field as the entry says).
  const Ctx<Emulated>& context(OpKind op, Pass pass, int layer);
  /// The per-tensor fp8 scaling state of the GEMM operands (ops/fp8_scaling.hpp: Transformer Engine's amax
  /// histories and scales), keyed "L<layer>.<module>.<role>"; created from the policy's fp8-scaling. A checkpoint
  /// saves and restores it (studies/train/trainer.cpp).
  Fp8ScalingState& fp8_state() { return fp8_; }
  const Fp8ScalingState& fp8_state() const { return fp8_; }
  /// Whether GEMM calls fold their operands' amax into the history (delayed scaling). Off by default: a training
  /// forward+backward turns it on, and then calls fp8_update(); evaluation and shadow passes read the scales only.
  void set_fp8_recording(bool on) { fp8_record_ = on; }
  bool fp8_recording() const { return fp8_record_; }
  /// The end of a recorded forward+backward: every tensor's delayed-scaling update (Fp8ScalingState::update).
  void fp8_update() { fp8_.update(); }
  /// Whether recorded GEMM calls (fp8_recording()) count what their scaled fp8 casts saturate and flush to zero
  /// (Fp8CastCounts), per tensor, keyed as fp8_state() ("L<layer>.<op>.<module>.<role>"; block casts too). Off by
  /// default; the trainer turns it on for its telemetry steps. Counting changes no bit.
  void set_fp8_counting(bool on) { fp8_count_ = on; }
  const std::map<std::string, Fp8CastCounts>& fp8_counts() const { return fp8_counts_; }
  void clear_fp8_counts() { fp8_counts_.clear(); }
  /// How an op call ran, by the widths of its Values / CValues tensors: all binary64, all binary32, or mixed and
  /// then on binary64 copies of the binary32 tensors (Widened) or on binary32 copies of the binary64 ones
  /// (Narrowed: fewer elements, every value a binary32 value, every binary64 output's storage fitting binary32).
  /// Every way gives the same bits.
  enum class Width : std::uint8_t { Binary64, Binary32, Widened, Narrowed };
  /// Op calls so far per Width (index: the enum's value), e.g. to see that a model's hot calls convert nothing.
  const std::array<std::int64_t, 4>& width_counts() const { return widths_; }
  /// The model's number of transformer blocks, for block_keep()'s "last L" (0, the default: no layer counts as
  /// one of the last).
  void set_layer_count(int layers) { layers_ = layers; }

  // Activations are Values / CValues (ops/values.hpp): binary64 or binary32 tensors. When every such tensor of a
  // call is binary32 the op's binary32 body runs on them; when every one is binary64, its binary64 body; when the
  // widths are mixed, the binary64 body on widened copies, its binary32 outputs narrowed back (exact: a binary32
  // output must be in a storage format that fits binary32, else std::logic_error before the call). The GEMM weights
  // are CValues of either width that do not take part in that choice: read in place by the binary32 body, widened
  // by the binary64 one (a binary32 weight is a model's binary32 working copy; ops/matmul.hpp). A GEMM's weight
  // gradient is Values of either width that does not take part in that choice either (binary32 when the model's
  // gradients are: the binary32 activations' GEMM adds into it in binary32, a binary64 body through an exact copy);
  // the losses are binary64 (Span / CSpan) at every width. The same bits whatever the widths
  // (tests/ops/runner_typed_test.cpp).
  void embedding_forward(Site s, Values out, Tokens tokens, CValues wte, RowShape sh);
  void embedding_backward_weight(Site s, Values dwte, CValues dout, Tokens tokens, RowShape sh);
  void rmsnorm_forward(Site s, Values y, Values rstd, CValues x, CValues w, RowShape sh, double eps);
  void rmsnorm_backward_data(Site s, Values dx, CValues dy, CValues x, CValues w, CValues rstd, RowShape sh);
  void rmsnorm_backward_weight(Site s, Values dw, CValues dy, CValues x, CValues rstd, RowShape sh);
  void matmul_forward(Site s, Values y, CValues x, CValues w, MatmulShape sh);
  void matmul_backward_data(Site s, Values dx, CValues dy, CValues w, MatmulShape sh);
  void matmul_backward_weight(Site s, Values dw, CValues dy, CValues x, MatmulShape sh);
  void rope_angles(Site s, Span cos_t, Span sin_t, std::int64_t T, std::int64_t hs, double base);
  void rope_forward(Site s, Values y, CValues x, CValues cos_t, CValues sin_t, AttnShape sh);
  void rope_backward_data(Site s, Values dx, CValues dy, CValues cos_t, CValues sin_t, AttnShape sh);
  void attn_scores_forward(Site s, Values preatt, CValues q, CValues k, AttnShape sh);
  void attn_scores_backward_data(Site s, Values dq, Values dk, CValues dpreatt, CValues q, CValues k, AttnShape sh);
  void softmax_forward(Site s, Values att, CValues preatt, AttnShape sh);
  void softmax_backward_data(Site s, Values dpreatt, CValues datt, CValues att, AttnShape sh);
  void attn_values_forward(Site s, Values out, CValues att, CValues v, AttnShape sh);
  void attn_values_backward_data(Site s, Values datt, Values dv, CValues dout, CValues att, CValues v, AttnShape sh);
  /// The online order of softmax·V (ops/online_attention.hpp, Policy::attention_order() == Online): y and the
  /// row log-sum-exp lse (B, NH, T) from preatt and v, under the Softmax and AttnValues forward entries. One
  /// fused op, so it is recorded (and sampled) as (attn-values, fwd) whatever s.op says: outputs "y" (ulps of
  /// attn-values storage) and "lse" (ulps of softmax storage); unit = head. Replaces softmax_forward +
  /// attn_values_forward.
  void online_attention_forward(Site s, Values y, Values lse, CValues preatt, CValues v, AttnShape sh);
  /// Backward of the online order, first step: att = exp(preatt − lse) under the (softmax, bwd-data) entry
  /// (recorded as that whatever s.op says; unit = query row); then attn_values_backward_data and
  /// softmax_backward_data run on this att exactly as in the materialised order. Overwrites att.
  void softmax_from_lse(Site s, Values att, CValues preatt, CValues lse, AttnShape sh);
  void silu_forward(Site s, Values y, CValues x, RowShape sh);
  void silu_backward_data(Site s, Values dx, CValues dy, CValues x, RowShape sh);
  void swiglu_forward(Site s, Values h, CValues a, CValues u, RowShape sh);
  void swiglu_backward_data(Site s, Values da, Values du, CValues dh, CValues a, CValues u, RowShape sh);
  void gelu_forward(Site s, Values y, CValues x, RowShape sh, GeluForm form);
  void gelu_backward_data(Site s, Values dx, CValues dy, CValues x, RowShape sh, GeluForm form);
  void residual_forward(Site s, Values out, CValues x, CValues f, double alpha, RowShape sh);
  void residual_backward_data(Site s, Values dx, Values df, CValues dout, double alpha, RowShape sh);
  /// Returns the mean loss over the N tokens, reduced in binary64 (the losses are binary64 at every width).
  double cross_entropy_forward(Site s, Span losses, Values probs, CValues logits, Tokens targets, RowShape sh);
  void cross_entropy_backward_data(Site s, Values dlogits, CValues probs, Tokens targets, double grad_scale,
                                   RowShape sh);
  /// AdamW on one parameter tensor (formats from the policy's tensor roles); t is the 1-based update count.
  void adamw_update(Site s, Span w, Span m, Span v, CSpan g, Span weights, const AdamWConfig& cfg, std::int64_t t);
  /// adamw_update with binary32 moments (the policy's AdamM and AdamV roles hold only binary32 values): the same
  /// bits. Under the shadow, the reference reads the moments widened and records w only (m and v are no outputs),
  /// under the site's tensor name (the binary64 call's record of w is "<tensor>.w").
  void adamw_update(Site s, Span w, std::span<float> m, std::span<float> v, CValues g, Span weights,
                    const AdamWConfig& cfg, std::int64_t t);
  /// adamw_update with binary32 masters and moments (the MasterWeight role's values fit binary32; no working copy):
  /// the same bits. The shadow as above; w is recorded as the binary64 call records it.
  void adamw_update(Site s, std::span<float> w, std::span<float> m, std::span<float> v, CValues g,
                    const AdamWConfig& cfg, std::int64_t t);

  /// Global error: an emulated tensor against the same tensor of a full-reference model run.
  void record_global(Site s, Pass pass, CSpan emulated, std::span<const Ref> reference);
  void record_global(Site s, Pass pass, CSpan emulated, CSpan reference);

  /// Output description used by the shadow (public for tests of new ops; see docs/adding-an-op.md).
  struct UnitMap {
    enum class Kind : std::uint8_t { Rows, Columns, Heads } kind = Kind::Rows;
    std::int64_t width = 1;  ///< Rows: elements per unit; Columns: row length
    std::int64_t rows = 0;   ///< Columns: number of rows
    AttnShape attn{};        ///< Heads: (B, T, NH·hs) tensors, unit = head b·NH + h
  };
  struct Output {
    std::string_view name;
    Values data;
    UnitMap map;
    bool dot = false;  ///< a dot-product output: record the dot ratio (Reference rerun on |inputs|)
    const numerics::Format* format = nullptr;  ///< ulp format when not the op's storage (AdamW roles)
    bool watched = true;  ///< passed to the observer (false: saved statistics such as rstd, probs)
  };

 private:
  /// The one call site of an (op, pass): `call(ctx, io)` is a generic lambda that calls the op function on
  /// io's arguments, run once with the emulated context on the caller's spans (io.out(y) = y, io.in(x) = x,
  /// io.sel() = all units) and, when the shadow samples the call, again with a Reference context on the lifted
  /// inputs, the reference outputs and the sampled units (and a third time on |inputs| for dot outputs).
  /// `acc` (GEMM calls): the exact product of the call's quantized operands for the sampled units
  /// (ops/quant_shadow.hpp), given the emulated context, the units and the first output's values before the call;
  /// nullopt when the call quantizes nothing. When it gives one, the first output's record gets OpRecord::acc.
  using AccReference = std::function<std::optional<std::vector<Ref>>(
      const Ctx<Emulated>&, std::span<const std::int64_t>, std::span<const Ref>)>;
  /// `typed`: the call's Values and CValues arguments (outputs and inputs), whose widths choose the body.
  template <class Call>
  void run(Site s, Pass pass, std::int64_t n_units, std::initializer_list<Output> outs,
           std::initializer_list<CValues> typed, Call&& call, const AccReference& acc = {});

  /// adamw_update with binary32 moments, the masters w binary64 or (no working copy) binary32, the gradients g of
  /// either width (the emulated body reads them at their own width).
  template <class W>
  void adamw_binary32_moments(Site s, std::span<W> w, std::span<float> m, std::span<float> v, CValues g, Span weights,
                              const AdamWConfig& cfg, std::int64_t t);
  /// The Width of a call (outs: its outputs; typed: its Values and CValues).
  static Width width_of(std::initializer_list<Output> outs, std::initializer_list<CValues> typed,
                        const OpPrecision& prec);
  /// The fp8 state slots of a GEMM call at site s under (op, pass) (nullptr when the entry has no per-tensor fp8).
  const Fp8Slots* fp8_slots(const Site& s, Pass pass);

  Policy policy_;
  std::uint64_t seed_;
  Fp8ScalingState fp8_;
  bool fp8_record_ = false;
  bool fp8_count_ = false;
  std::map<std::string, Fp8CastCounts> fp8_counts_;
  Fp8Slots slots_{};
  std::unique_ptr<numerics::kernels::PackCache> pack_cache_;  ///< owned here: stable when the Runner moves
  ExecOptions exec_;
  std::int64_t step_ = 0;
  std::uint64_t call_ = 0;
  std::vector<Ctx<Emulated>> ctx_;  ///< kOpCount × kPassCount
  std::vector<Ctx<Emulated>> ctx_kept_;  ///< the same entries without block quantization (BlockKeep layers)
  int layers_ = 0;
  std::array<std::int64_t, kOpCount * kPassCount> calls_{};
  Tape* tape_ = nullptr;
  Sampling sampling_{};
  Profile* profile_ = nullptr;
  Observer observer_;
  std::array<std::int64_t, 4> widths_{};
};

/// k of n units (all when k == 0 or k >= n), one per stratum [⌊i·n/k⌋, ⌊(i+1)·n/k⌋) at an offset hashed from
/// (n, i): deterministic, spread over all n, and never aliased with an inner dimension. (Evenly spaced
/// midpoints put every sampled softmax row of a (B·NH·T)-row tensor at t = 0 when n/k is a multiple of T, so
/// the shadow only ever saw one-element rows and reported 0 ulp.)
std::vector<std::int64_t> spaced_units(std::int64_t n, std::int64_t k);

}  // namespace roundoff::ops
