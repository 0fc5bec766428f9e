#pragma once
/// \file fp8_scaling.hpp
/// Scaled fp8 operands of a GEMM as the two fp8 training recipes run on Hopper compute them (issue 44; the grammar,
/// presets and the source of every choice are in docs/policy.md, "FP8 training recipes"):
///
/// Per-tensor scaling (Transformer Engine's Float8CurrentScaling and DelayedScaling). Every step below is a binary32
/// operation rounded to nearest-even, as TE's kernels compute it (read from TE's common/recipe/*.cu and
/// common/cast; no code copied):
///   amax     = max over the tensor of |fp32(v_i)| with fmaxf semantics: a NaN element is skipped, ±inf gives +inf;
///              0 for an empty or all-NaN tensor.
///   scaled_max = fp8_max · 2^-margin (fp8_max 448 for E4M3, 57344 for E5M2; exact for margin 0..100).
///   current scaling: scale = 1 when amax is 0, ±inf or NaN; else scaled_max / amax, and FLT_MAX when that
///              overflows (TE's compute_scale_from_amax with epsilon 0; TE has no margin there: margin 0 is TE).
///   delayed scaling (amax_and_scale_update): the tensor keeps a history h[0..H-1] (zeros at the start) and a
///              scale (1 at the start). During a step every cast of the tensor sets h[0] = fmaxf(h[0], amax) and
///              uses the stored scale. At the step's end (update()): a_i = h[i+1] for i < H-1, a_{H-1} = h[0];
///              amax = h[0] (most-recent) or the fmaxf of all a_i (max); the history becomes [0, a_1, ..., a_{H-1}];
///              scale = scaled_max / amax when amax is finite and > 0, else the previous scale; FLT_MAX when the
///              quotient overflows.
///   scale_inv = 1 / scale (binary32, TE's reciprocal kernel).
///   code q_i  = fp8(fp32(fp32(v_i) · scale)): nearest-even, saturating to ±fp8_max (CUDA's __NV_SATFINITE: ±inf
///              and overflow give ±fp8_max), NaN stays NaN.
///   decoded   = fp32(q_i · scale_inv).
///
/// Block scaling (DeepSeek-V3's recipe, the inference kernel act_quant of deepseek-ai/DeepSeek-V3 and DeepGEMM's
/// per_token/per_block_cast_to_fp8): blocks of 1×B along the contraction axis (activations, gradients) or B×B tiles
/// of the stored matrix (weights), for each block:
///   amax = max |fp32(v_i)|, then max(amax, fp32(1e-4)); s = fp32(amax / fp8_max) (the fp32 scale the GEMM reads);
///   q_i = fp8(fp32(fp32(v_i) / s)) (nearest-even, saturating); decoded = fp32(q_i · s).
///   A NaN or ±inf in a block makes every decoded value of that block NaN (the kernels do not define it; a diverged
///   operand stays diverged, so the trainer's non-finite scan reports it).
///
/// The GEMM (ops/matmul_quant.hpp): the hardware multiplies the fp8 codes (exact products) and applies the scales
/// afterwards (TE: once, in the epilogue; DeepSeek: at every promotion, 128 products). Summing decoded fp32 values
/// instead agrees with that only where scaling commutes with the accumulator's roundings (power-of-two scales, no
/// under/overflow), which neither recipe's fp32 scales are; so where the recipe's structure allows it (both operands
/// per tensor, or blocks as long as the promotion interval) the GEMM runs on the codes and applies the scales as the
/// hardware does (the exact model), and only otherwise on the decoded values (docs/policy.md, "FP8 training
/// recipes").
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace roundoff::ops {

/// The fp8 element of a scaled operand.
enum class Fp8Elem : std::uint8_t { Off, E4M3, E5M2 };
/// "off", "e4m3", "e5m2".
std::string_view name_of(Fp8Elem e);
/// 448, 57344 (0 for Off).
float fp8_max(Fp8Elem e);

/// One operand role's scaled fp8: the element and the granularity: block_rows == block_cols == 0 per tensor;
/// block_rows == 1: 1×block_cols blocks along the pass's contraction axis; block_rows == block_cols > 1: tiles of the
/// matrix in its storage layout (so that W and Wᵀ share one quantization).
/// Text: off | e4m3 | e5m2 | ELEM:1xB[:pad] | ELEM:BxB[:pad] (B in 1..65536).
struct Fp8Operand {
  Fp8Elem elem = Fp8Elem::Off;
  int block_rows = 0;
  int block_cols = 0;
  /// Blocks: a dimension that the block does not divide is refused, unless `pad` (text suffix ":pad"): then the last
  /// block along it is ragged, which is DeepGEMM's zero padding exactly (per_token_cast_to_fp8 pads K with zeros to a
  /// multiple of 128: zeros change neither the amax nor the products).
  bool pad = false;
  bool on() const { return elem != Fp8Elem::Off; }
  bool per_tensor() const { return block_rows == 0; }
  friend bool operator==(const Fp8Operand&, const Fp8Operand&) = default;
};
std::string to_string(const Fp8Operand& o);
/// Throws std::invalid_argument (one line naming the valid forms).
Fp8Operand parse_fp8_operand(std::string_view text);

/// How per-tensor scales are found (the policy's fp8-scaling item; block scales are always current).
/// Text: current[:M] | delayed[:H[:ALGO[:M]]], ALGO max | most-recent; defaults H 1024, max, M 0 (TE's defaults).
enum class Fp8ScaleMode : std::uint8_t { Current, Delayed };
enum class AmaxAlgo : std::uint8_t { Max, MostRecent };
struct Fp8Scaling {
  Fp8ScaleMode mode = Fp8ScaleMode::Current;
  int history = 1024;
  AmaxAlgo algo = AmaxAlgo::Max;
  int margin = 0;
  friend bool operator==(const Fp8Scaling&, const Fp8Scaling&) = default;
};
/// "current" (margin 0), "current:M", "delayed:H:ALGO:M".
std::string to_string(const Fp8Scaling& s);
/// Throws std::invalid_argument: history length 0 or negative margin refused with the valid ranges.
Fp8Scaling parse_fp8_scaling(std::string_view text);

// ---- the arithmetic (pure functions; tests/ops/fp8_scaling_test.cpp checks each against a written-out definition)

/// max |fp32(v_i)| with fmaxf semantics (NaN skipped).
float tensor_amax(std::span<const double> v);
/// TE's scaled_max: fp32(fp8_max · 2^-margin).
float scaled_max(Fp8Elem e, int margin);
/// Current scaling: the scale from amax (see the file comment).
float current_scale(float amax, float scaled_max);
/// One delayed-scaling update of a history (in place) and the previous scale: returns the new scale.
float delayed_update(std::span<float> history, float scale, AmaxAlgo algo, float scaled_max);
/// 1 / scale in binary32.
float scale_inverse(float scale);
/// The fp8 value of a binary32 x: nearest-even, saturating to ±fp8_max, NaN kept.
float fp8_cast(Fp8Elem e, float x);
/// v ← fp32(fp8(fp32(fp32(v_i) · scale)) · scale_inv), element by element (with `codes_only`: v ← the fp8 values).
void quantize_per_tensor(std::span<double> v, Fp8Elem e, float scale, bool codes_only = false);
/// DeepSeek's block scale s = fp32(max(amax, fp32(1e-4)) / fp8_max).
float block_scale(float amax, Fp8Elem e);
/// The power of two that brings a decoded operand vector into the fp8 element's range (the fp8-rescale field of
/// ops/gemm_quant.hpp, docs/policy.md): for amax = max |v_i| over its finite elements, the largest integer k with
/// amax · 2^k <= fp8_max(e) (448 for E4M3), computed exactly as k = ilogb(fp8_max) − ilogb(amax), less 1 when
/// amax · 2^k > fp8_max; k = 0 when amax is 0 (no finite nonzero element) or not finite. e must not be Off.
int rescale_exponent(double amax, Fp8Elem e);
/// One block: v ← fp32(fp8(fp32(fp32(v_i) / s)) · s); a non-finite element makes the block NaN. With `codes_only`
/// v ← the fp8 values q_i instead (NaN for a non-finite block); returns s (NaN for a non-finite block).
float quantize_block(std::span<double> v, Fp8Elem e, bool codes_only = false);

// ---- state ----------------------------------------------------------------------------------------------------

/// The delayed-scaling state of one tensor: its amax history and its current scale (binary32).
struct Fp8TensorState {
  Fp8Elem elem = Fp8Elem::Off;  ///< the tensor's fp8 element (its scaled max)
  std::vector<float> history;
  float scale = 1.0f;
  friend bool operator==(const Fp8TensorState&, const Fp8TensorState&) = default;
};

/// Every scaled tensor's state of a run, keyed by name ("L<layer>.<module>.<role>"). It travels with the Runner
/// (ops::Runner::fp8_state) and the trainer's checkpoint, so that resume continues bit for bit.
class Fp8ScalingState {
 public:
  explicit Fp8ScalingState(const Fp8Scaling& cfg = {}) : cfg_(cfg) {}
  const Fp8Scaling& config() const { return cfg_; }
  /// The state of `key`, created with element `elem`, H zeros and scale 1 on first use.
  Fp8TensorState& tensor(const std::string& key, Fp8Elem elem);
  /// Delayed scaling: the end-of-step update of every tensor (nothing for current scaling).
  void update();
  const std::map<std::string, Fp8TensorState>& tensors() const { return tensors_; }
  /// Replaces the tensors (a checkpoint's); every history must have the configured length (else
  /// std::invalid_argument naming the key).
  void assign(std::map<std::string, Fp8TensorState> t);
  friend bool operator==(const Fp8ScalingState&, const Fp8ScalingState&) = default;

 private:
  Fp8Scaling cfg_;
  std::map<std::string, Fp8TensorState> tensors_;
};

/// What the casts of one tensor did to its elements (issue 44 item 4: the per-tensor statistics of the recipes):
/// `elements` cast, how many `saturated` (y = fp32(fp32(v)·scale) per tensor or fp32(fp32(v)/s) per block rounds,
/// nearest-even with an unbounded exponent, to more than fp8_max, ±inf included: the saturating cast clamps it; a y
/// a rounding above fp8_max that rounds to fp8_max anyway is not counted) and how many `underflowed` (v nonzero and
/// finite, its code 0). A NaN element counts in `elements` only. Counting changes no bit of the cast.
struct Fp8CastCounts {
  std::uint64_t elements = 0;
  std::uint64_t saturated = 0;
  std::uint64_t underflowed = 0;
  friend bool operator==(const Fp8CastCounts&, const Fp8CastCounts&) = default;
};
/// Adds to c what casting v (the values before the cast) to e with the scaled value y_i = fp32(fp32(v_i) · mul)
/// (per tensor: mul = scale) or fp32(fp32(v_i) / div) (per block: div = s; `divide`) does (Fp8CastCounts).
void count_fp8_cast(std::span<const double> v, Fp8Elem e, float factor, bool divide, Fp8CastCounts& c);

/// What one GEMM call's operands read of the state: per role (x, w, dy) the tensor's state (nullptr: none), whether
/// the call records its amax into it, and the scaling configuration; `counts` (nullptr: none): where each role's
/// casts add their Fp8CastCounts (the trainer's telemetry steps).
struct Fp8Slots {
  std::array<Fp8TensorState*, 3> tensor{};
  bool record = false;
  Fp8Scaling cfg{};
  std::array<Fp8CastCounts*, 3> counts{};
};

/// Where quantize_fp8_operand leaves the fp8 codes instead of the decoded values (the exact GEMM of matmul_quant):
/// v ← the fp8 values q_i, and here the scales that decode them: per tensor `tensor_inv` (scale_inv); per block the
/// scale s of every block, blocks in row-major order of the (rows / block_rows) × (cols / block_cols) grid (a ragged
/// last block counts as one).
struct Fp8Codes {
  float tensor_inv = 1.0f;
  std::vector<float> block;
  std::size_t block_grid_cols = 0;
};

/// One operand in a rows × K layout (K the contraction axis, last) or, for tiles, its storage layout
/// (`rows` × `cols`): v ← its decoded values under o. `state` (per-tensor only): delayed scaling reads its scale and,
/// when `record`, folds the amax into history[0]; current scaling ignores it. Throws std::invalid_argument (one line,
/// prefixed by `where`) when a block does not divide the axis, or for delayed scaling without a state.
/// `codes`: when given, v ← the codes and their scales there (Fp8Codes) instead of the decoded values.
/// `counts`: when given, the cast's Fp8CastCounts are added there (the same v either way).
void quantize_fp8_operand(const Fp8Operand& o, std::span<double> v, std::size_t rows, std::size_t cols,
                          const Fp8Scaling& cfg, Fp8TensorState* state, bool record, const std::string& where,
                          Fp8Codes* codes = nullptr, Fp8CastCounts* counts = nullptr);

}  // namespace roundoff::ops
