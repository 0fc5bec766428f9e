#pragma once
/// \file policy.hpp
/// Per-op precision policies: which format each op stores and computes in, how it rounds, and how every
/// reduction inside it accumulates — per (op, pass) — plus the formats of the weight/optimizer tensors.
///
/// Text form (grammar in docs/policy.md):
///   spec  := item ("," item)*            items apply left to right
///   item  := PRESET                      only as the first item (fp64, fp32, ane-fp16, ...)
///          | SEL "=" PREC                SEL = OP[.PASS] | all[.PASS];  PASS = fwd | bwd-data | bwd-weight | bwd
///          | SEL "." FIELD "=" VALUE     FIELD = storage | compute | rounding | acc | approx | saturate | nan
///                                        | ftz | daz
///          | ROLE "=" FORMAT             ROLE = weights | master | adam-m | adam-v | grads
///          | "loss-scale=" NUMBER
///          | "attention=" ORDER            ORDER = materialised | online (AttentionOrder)
///          | "block-keep=" F ":" L          the first F and last L blocks' GEMMs unquantized (BlockKeep)
///   FIELD also: block | block-x | block-w | block-dy | block-sr | rht (GEMM ops only: GemmQuant, docs/policy.md)
///          | fp8 | fp8-x | fp8-w | fp8-dy  (scaled fp8 operands, GEMM ops only: ops/fp8_scaling.hpp)
///          | "fp8-scaling=" current[:M] | delayed[:H[:ALGO[:M]]]   per-tensor fp8 scales (Fp8Scaling)
///   PREC  := FORMAT ["/" FORMAT] ["/" ACC] ["/" ROUNDING]   storage[/compute][/acc][/rounding]; missing
///            compute = storage; missing acc = sequential in the compute format; missing rounding = unchanged
///   ACC   := accumulation preset (fp16-seq, fp32-seq, ...) or "[" key=value,... "]"
/// Without a leading preset the base is fp32 (every preset is materialised). canonical() prints the nearest
/// preset followed by the overrides in table order (all.ftz= / all.daz= first when every entry shares the
/// value; attention= only when online); parse(canonical(p)) == p for every policy.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/format.hpp"
#include "numerics/lut.hpp"
#include "numerics/rounding.hpp"
#include "ops/gemm_quant.hpp"
#include "ops/op_kind.hpp"

namespace roundoff::ops {

/// Elementwise transcendental functions of an op (exp, sigmoid): correctly rounded (Exact) or the ANE's fp16
/// piecewise-linear lookup table (AneLut, numerics/lut.hpp). knots == 0 takes each function's default table
/// (numerics::default_lut); knots > 0 with lo == hi == 0 that knot count on the default range; else K knots on
/// [lo, hi]. Text: exact | ane-lut | ane-lut:K | ane-lut:K:LO:HI.
enum class ApproxKind : std::uint8_t { Exact, AneLut };
struct Approx {
  ApproxKind kind = ApproxKind::Exact;
  int knots = 0;
  double lo = 0;
  double hi = 0;
  friend bool operator==(const Approx&, const Approx&) = default;
};
/// The table an op with this Approx uses for f (kind must be AneLut).
numerics::LutSpec lut_spec(const Approx& a, numerics::LutFunction f);

/// What an op does with NaN: Ieee (propagate) or AneInf (the ANE's rule: every NaN the op reads or writes
/// becomes +inf; the guide reports the engine never emits NaN). Text: ieee | ane-inf.
enum class NanRule : std::uint8_t { Ieee, AneInf };

/// Flush-to-zero of an op's results (a flush-to-zero datapath). A value v is *flushed in format F* when it is
/// nonzero, finite and |v| < 2^F.emin (subnormal in F): it becomes a zero with v's sign; otherwise it is kept.
///   Off  results keep their subnormals (gradual underflow; the default)
///   Out  every value the op writes (store, store_to, the span forms) is flushed in the format it was rounded to
///   All  Out, plus every compute-format result (elementwise operations and reduction results converted to
///        compute) flushed in compute; constants are not results and keep their value
/// Text: off | out | all.
enum class Ftz : std::uint8_t { Off, Out, All };
/// Denormals-are-zero of an op's inputs: On flushes every input, after its entry cast to storage, in storage.
/// Text: off | on.
enum class Daz : std::uint8_t { Off, On };

/// How one op (in one pass) rounds.
///   storage     outputs and tensors saved for backward are rounded to it; inputs are rounded to it on
///               entry (a no-op when they already are values of it — the autocast model: an fp16 matmul
///               reading an fp32 activation or weight sees its fp16 rounding)
///   compute     every elementwise operation rounds its exact result to it, once
///   rounding    the mode of both storage and compute roundings (Stochastic draws per element)
///   accumulate  every reduction (sum, dot, GEMM); its result is then rounded to compute
///   approx      exp and sigmoid correctly rounded in compute, or the ANE lookup table (rounded to compute)
///   saturate    0 = off; L > 0: a reduction result whose compute value has |v| >= L becomes ±inf (the ANE's
///               matmul output port: 32752 passes, 32768 is inf)
///   nan         Ieee, or AneInf: NaN read (in) or written (store) becomes +inf
///   ftz         Off, Out (outputs flushed in their format) or All (also every compute result): see Ftz
///   daz         Off, or On: inputs flushed in storage after their entry cast
///   quant       block-scaled quantization of a GEMM's operands (matmul and classifier only; ops/gemm_quant.hpp):
///               after the entry cast, each operand role with a format is quantized along the pass's contraction
///               axis and replaced by its decoded values; the Reference backend ignores it
/// Order inside one rounding: round, then flush, then the NaN rule / saturation (a flushed value is a zero,
/// which neither is NaN nor reaches a saturation limit, so the order among them does not change any bits).
struct OpPrecision {
  numerics::Format storage = numerics::formats::fp32;
  numerics::Format compute = numerics::formats::fp32;
  numerics::Rounding rounding = numerics::Rounding::NearestEven;
  numerics::Accumulation accumulate{};
  Approx approx{};
  double saturate = 0;
  NanRule nan = NanRule::Ieee;
  Ftz ftz = Ftz::Off;
  Daz daz = Daz::Off;
  GemmQuant quant{};
  friend bool operator==(const OpPrecision&, const OpPrecision&) = default;
};

/// Transformer blocks whose GEMMs run without their entries' block quantization (NVIDIA's NVFP4 recipe keeps some
/// first and last blocks in BF16, arXiv 2509.25149 §4.1): layers [0, first) and [layers - last, layers). Only
/// the `quant` field is dropped there; every other field of the entry (bf16 storage, fp32 accumulation) stays.
/// Text: block-keep=F:L (e.g. block-keep=0:1 keeps the last block).
struct BlockKeep {
  int first = 0;
  int last = 0;
  /// Whether layer `layer` (of `layers`; -1 = outside the blocks, never kept) is kept.
  bool keeps(int layer, int layers) const {
    return layer >= 0 && (layer < first || (layers > 0 && layer >= layers - last));
  }
  friend bool operator==(const BlockKeep&, const BlockKeep&) = default;
};

/// How causal softmax·V is evaluated (the model picks the ops; the precisions stay the Softmax and AttnValues
/// entries):
///   Materialised  softmax_forward then attn_values_forward (ops/attention.hpp): the T×T weights are rounded
///                 and stored, then multiplied with V.
///   Online        online_attention_forward (ops/online_attention.hpp): one pass over each row with a running
///                 max, denominator and output rescaled when the max grows (FlashAttention); the backward
///                 recomputes the weights from the saved log-sum-exp (softmax_from_lse).
enum class AttentionOrder : std::uint8_t { Materialised, Online };
inline constexpr std::size_t kAttentionOrderCount = 2;
inline constexpr std::array<AttentionOrder, kAttentionOrderCount> kAllAttentionOrders{AttentionOrder::Materialised,
                                                                                     AttentionOrder::Online};
/// "materialised", "online".
std::string_view name_of(AttentionOrder o);
/// "off", "out", "all" / "off", "on".
std::string_view name_of(Ftz f);
std::string_view name_of(Daz d);

/// Sequential accumulation in format f (the "<f>-seq" preset when one exists).
numerics::Accumulation sequential_in(const numerics::Format& f);
/// storage = compute = f, sequential accumulation in f, round-to-nearest-even.
OpPrecision uniform(const numerics::Format& f);

/// A frozen table OpKind × Pass → OpPrecision plus the tensor-role formats. A value type (copy freely).
class Policy {
 public:
  /// Every (op, pass) at `everywhere`; every role in its storage format; loss scale 1.
  explicit Policy(const OpPrecision& everywhere = uniform(numerics::formats::fp32));

  Policy& set(OpKind k, Pass p, const OpPrecision& prec);
  Policy& set(OpKind k, const OpPrecision& prec);  ///< all three passes
  Policy& set_role(TensorRole r, const numerics::Format& f);
  Policy& set_loss_scale(double s);
  Policy& set_attention_order(AttentionOrder o);
  Policy& set_block_keep(BlockKeep k);
  Policy& set_fp8_scaling(const Fp8Scaling& s);

  const OpPrecision& at(OpKind k, Pass p) const { return table_[index_of(k)][index_of(p)]; }
  OpPrecision& at(OpKind k, Pass p) { return table_[index_of(k)][index_of(p)]; }
  const numerics::Format& storage_for(TensorRole r) const { return roles_[index_of(r)]; }
  /// The initial loss scale the preset suggests (the trainer owns loss scaling; this is only a default).
  double loss_scale() const { return loss_scale_; }
  /// Materialised unless the spec says attention=online.
  AttentionOrder attention_order() const { return attention_order_; }
  /// The blocks whose GEMMs are not block-quantized (none unless the spec says block-keep=F:L).
  const BlockKeep& block_keep() const { return block_keep_; }
  /// How per-tensor fp8 scales are found (current unless the spec says fp8-scaling=delayed...; ops/fp8_scaling.hpp).
  const Fp8Scaling& fp8_scaling() const { return fp8_scaling_; }

  /// Canonical text: nearest preset + overrides in table order. parse(canonical()) == *this.
  std::string canonical() const;
  /// Parses a spec (see the file comment). Throws std::invalid_argument with one line naming the offending
  /// token and listing the valid names.
  static Policy parse(std::string_view spec);
  /// A preset by name; throws std::invalid_argument listing the preset names.
  static Policy preset(std::string_view name);
  /// fp64 fp32 ane-fp16 ane-fp16-acc32 ane-guide ane-matmul-only amp-fp16 amp-bf16 pure-fp16 pure-bf16
  /// h100-amp-fp16 h100-amp-bf16 a100-amp-fp16 a100-amp-bf16 ane-guide-m1 ane-guide-ftz ane-fp16-ftz mxfp8 mxfp6
  /// mxfp4 nvfp4 int4-g32 nf4 te-fp8-delayed te-fp8-current deepseek-fp8 deepseek-fp8-nopromote
  /// deepseek-fp8-nopromote-rescaled
  static const std::vector<std::string>& preset_names();

  friend bool operator==(const Policy&, const Policy&) = default;

 private:
  std::array<std::array<OpPrecision, kPassCount>, kOpCount> table_{};
  std::array<numerics::Format, kRoleCount> roles_{};
  double loss_scale_ = 1.0;
  AttentionOrder attention_order_ = AttentionOrder::Materialised;
  BlockKeep block_keep_{};
  Fp8Scaling fp8_scaling_{};
};

/// Reads a policy from a command-line argument. A spec (a preset, or a preset with overrides) always wins: a
/// file is read only when `arg` is not a valid spec, or when it is written "@PATH". A policy file holds the
/// spec ('#' starts a comment to end of line; newlines separate items like commas) and must be a regular file
/// of at most 1 MiB with at least one item (a directory, FIFO or device such as /dev/zero is refused without
/// being opened). When `source` is given it receives what was used: "spec" or "file PATH". Throws
/// std::invalid_argument with one line naming the file or the offending item.
Policy load_policy(const std::string& arg, std::string* source = nullptr);

/// The non-default approx, saturate, nan, ftz and daz of an entry as "approx=... saturate=... nan=... ftz=...
/// daz=..." ("" when all are defaults), for tables.
std::string extras_text(const OpPrecision& p);

/// Text of one OpPrecision as PREC ("fp16/fp32/fp32-seq/nearest-even": all four parts; approx, saturate, nan,
/// ftz and daz are separate fields, printed by Policy::canonical as OP.approx=..., OP.saturate=..., ...).
std::string to_string(const OpPrecision& p);

}  // namespace roundoff::ops
