#include "ops/policy.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace roundoff::ops {

using numerics::Accumulation;
using numerics::Format;
using numerics::Rounding;
namespace fmts = numerics::formats;

Accumulation sequential_in(const Format& f) {
  const std::string name = numerics::name_of(f) + "-seq";
  for (const std::string& p : numerics::preset_accumulation_names())
    if (p == name) return numerics::parse_accumulation(name);
  Accumulation a;
  a.format = f;
  return a;
}

numerics::LutSpec lut_spec(const Approx& a, numerics::LutFunction f) {
  numerics::LutSpec s = numerics::default_lut(f);
  if (a.knots > 0) s.knots = a.knots;
  if (!(a.lo == 0 && a.hi == 0)) {
    s.lo = a.lo;
    s.hi = a.hi;
  }
  return s;
}

OpPrecision uniform(const Format& f) { return OpPrecision{f, f, Rounding::NearestEven, sequential_in(f)}; }

Policy::Policy(const OpPrecision& everywhere) {
  for (auto& row : table_) row.fill(everywhere);
  roles_.fill(everywhere.storage);
}

Policy& Policy::set(OpKind k, Pass p, const OpPrecision& prec) {
  at(k, p) = prec;
  return *this;
}
Policy& Policy::set(OpKind k, const OpPrecision& prec) {
  for (Pass p : kAllPasses) at(k, p) = prec;
  return *this;
}
Policy& Policy::set_role(TensorRole r, const Format& f) {
  roles_[index_of(r)] = f;
  return *this;
}
Policy& Policy::set_loss_scale(double s) {
  loss_scale_ = s;
  return *this;
}
Policy& Policy::set_attention_order(AttentionOrder o) {
  attention_order_ = o;
  return *this;
}
Policy& Policy::set_fp8_scaling(const Fp8Scaling& s) {
  fp8_scaling_ = s;
  return *this;
}
Policy& Policy::set_block_keep(BlockKeep k) {
  block_keep_ = k;
  return *this;
}

std::string_view name_of(AttentionOrder o) {
  switch (o) {
    case AttentionOrder::Materialised: return "materialised";
    case AttentionOrder::Online: return "online";
  }
  return "";
}

std::string_view name_of(Ftz f) {
  switch (f) {
    case Ftz::Off: return "off";
    case Ftz::Out: return "out";
    case Ftz::All: return "all";
  }
  return "";
}

std::string_view name_of(Daz d) {
  switch (d) {
    case Daz::Off: return "off";
    case Daz::On: return "on";
  }
  return "";
}

// ---- presets ------------------------------------------------------------------------------------------------

namespace {

/// Where AutoANE's "ANE full" layout runs a group: on the ANE in the forward and bwd-data passes (the
/// projections, the RoPE rotation, attention scores, softmax and values, and the feed-forward activations: SiLU,
/// SwiGLU's product, GELU) or on the CPU. The FFN residual add is on the ANE in its forward only (fused into an
/// ANE kernel, gen_ffn_fused_dynamic_alpha; its backward and the attention residual stay on the CPU).
enum class AneSite : std::uint8_t { Cpu, Ane, AneForwardOnly };
AneSite ane_site(OpGroup g) {
  switch (g) {
    case OpGroup::Projection:
    case OpGroup::RopeRotation:
    case OpGroup::AttnScores:
    case OpGroup::Softmax:
    case OpGroup::AttnValues:
    case OpGroup::FfnActivation: return AneSite::Ane;
    case OpGroup::ResidualFfn: return AneSite::AneForwardOnly;
    case OpGroup::Embedding:
    case OpGroup::Norm:
    case OpGroup::RopeTable:
    case OpGroup::ResidualAttn:
    case OpGroup::Classifier:
    case OpGroup::Loss:
    case OpGroup::Optimizer: return AneSite::Cpu;
  }
  return AneSite::Cpu;
}

/// The ANE's matrix products (the MAC output port, which saturates at 32768 under ane-guide).
bool ane_mac_product(OpGroup g) {
  switch (g) {
    case OpGroup::Projection:
    case OpGroup::AttnScores:
    case OpGroup::AttnValues: return true;
    case OpGroup::Embedding:
    case OpGroup::Norm:
    case OpGroup::RopeTable:
    case OpGroup::RopeRotation:
    case OpGroup::Softmax:
    case OpGroup::FfnActivation:
    case OpGroup::ResidualAttn:
    case OpGroup::ResidualFfn:
    case OpGroup::Classifier:
    case OpGroup::Loss:
    case OpGroup::Optimizer: return false;
  }
  return false;
}

/// The (op, pass) entries the ANE runs in AutoANE's "ANE full" layout (ane_site of each op's group), in table
/// order.
const std::vector<std::pair<OpKind, Pass>>& ane_entries() {
  static const std::vector<std::pair<OpKind, Pass>> entries = [] {
    std::vector<std::pair<OpKind, Pass>> e;
    for (OpKind k : kAllOps) switch (ane_site(group_of(k))) {
        case AneSite::Cpu: break;
        case AneSite::Ane:
          for (Pass ps : {Pass::Forward, Pass::BackwardData}) e.emplace_back(k, ps);
          break;
        case AneSite::AneForwardOnly: e.emplace_back(k, Pass::Forward); break;
      }
    return e;
  }();
  return entries;
}

/// The AutoANE "ANE full" layout (STUDY_PROTOCOL.md §3 item 5): the ANE kernels (ane_entries) in `ane`, the CPU
/// parts (RMSNorm, embedding, classifier, cross-entropy, weight gradients, AdamW, attention residual) in fp32.
Policy ane_layout(const OpPrecision& ane) {
  Policy p(uniform(fmts::fp32));
  for (const auto& [k, ps] : ane_entries()) p.set(k, ps, ane);
  // RoPE: cos/sin tables precomputed in fp32 and stored in fp16 (on the CPU).
  OpPrecision table = uniform(fmts::fp32);
  table.storage = fmts::fp16;
  for (OpKind k : kAllOps)
    if (group_of(k) == OpGroup::RopeTable) p.set(k, table);
  p.set_loss_scale(256.0);
  return p;
}

/// The ane-guide preset (below).
Policy ane_guide() {
  OpPrecision ane{fmts::fp16, fmts::fp16, Rounding::NearestEven, numerics::parse_accumulation("ane-tile4")};
  ane.nan = NanRule::AneInf;
  Policy p = ane_layout(ane);
  for (OpKind k : kAllOps)
    if (ane_mac_product(group_of(k)))
      for (Pass ps : {Pass::Forward, Pass::BackwardData}) p.at(k, ps).saturate = 32768;
  return p;
}

/// ane-guide with the M1's subnormal flush as the guide measured it (part 1 ch. 3: "preserves denormals
/// elementwise but flushes them inside the multiply-accumulate"; preregistration amendment 15): every ANE
/// accumulation flushes its subnormal fp16 tile values (ane-tile4-ftz) and the matrix products (the ops with the
/// MAC port's saturation) flush their fp16 outputs; elementwise ops keep subnormals.
Policy ane_guide_m1() {
  Policy p = ane_guide();
  const numerics::Accumulation tile = numerics::parse_accumulation("ane-tile4");
  const numerics::Accumulation tile_ftz = numerics::parse_accumulation("ane-tile4-ftz");
  for (const auto& [k, ps] : ane_entries()) {
    OpPrecision& e = p.at(k, ps);
    if (e.accumulate == tile) e.accumulate = tile_ftz;
    if (e.saturate > 0) e.ftz = Ftz::Out;
  }
  return p;
}

/// A flush-to-zero ANE datapath (amendment 15): ane-guide-m1 plus, on every op the ANE runs, every fp16 result
/// flushed (ftz=all) and every input flushed on entry (daz=on).
Policy ane_guide_ftz() {
  Policy p = ane_guide_m1();
  for (const auto& [k, ps] : ane_entries()) {
    p.at(k, ps).ftz = Ftz::All;
    p.at(k, ps).daz = Daz::On;
  }
  return p;
}

/// ane-fp16 on a flush-to-zero datapath (amendment 15): ftz=all and daz=on on the ANE entries, whose fp16
/// sequential accumulations flush every subnormal partial sum (flush=step).
Policy ane_fp16_ftz() {
  OpPrecision ane = uniform(fmts::fp16);
  ane.accumulate.flush.step = true;
  ane.ftz = Ftz::All;
  ane.daz = Daz::On;
  return ane_layout(ane);
}

/// What torch.amp's autocast does with a group: a GEMM (reads and writes the half format h, accumulates in
/// `gemm_acc`), a pointwise op on h tensors (stores h, computes fp32), or fp32 (softmax, norms, exp/log,
/// cross-entropy, the residual stream, the embedding, RoPE, AdamW).
enum class AmpClass : std::uint8_t { Gemm, Pointwise, Fp32 };
AmpClass amp_class(OpGroup g) {
  switch (g) {
    case OpGroup::Projection:
    case OpGroup::Classifier:
    case OpGroup::AttnScores:
    case OpGroup::AttnValues: return AmpClass::Gemm;
    case OpGroup::FfnActivation: return AmpClass::Pointwise;
    case OpGroup::Embedding:
    case OpGroup::Norm:
    case OpGroup::RopeTable:
    case OpGroup::RopeRotation:
    case OpGroup::Softmax:
    case OpGroup::ResidualAttn:
    case OpGroup::ResidualFfn:
    case OpGroup::Loss:
    case OpGroup::Optimizer: return AmpClass::Fp32;
  }
  return AmpClass::Fp32;
}

/// torch.amp-like autocast with half format h: GEMMs read and write h with fp32 accumulation (`gemm_acc`: fp32-seq,
/// or a GPU's tensor-core model chained over K); softmax, norms, exp/log, cross-entropy and the residual stream in
/// fp32; pointwise ops on h tensors store h, compute fp32 (amp_class).
Policy amp_layout(const Format& h, double loss_scale, const numerics::Accumulation& gemm_acc) {
  Policy p(uniform(fmts::fp32));
  const OpPrecision gemm{h, h, Rounding::NearestEven, gemm_acc};
  const OpPrecision pointwise{h, fmts::fp32, Rounding::NearestEven, sequential_in(fmts::fp32)};
  for (OpKind k : kAllOps) switch (amp_class(group_of(k))) {
      case AmpClass::Gemm: p.set(k, gemm); break;
      case AmpClass::Pointwise: p.set(k, pointwise); break;
      case AmpClass::Fp32: break;
    }
  p.set_loss_scale(loss_scale);
  return p;
}

/// Everything in h including accumulation, except AdamW, master weights and both moments in fp32.
Policy pure_layout(const Format& h, double loss_scale) {
  Policy p(uniform(h));
  for (OpKind k : kAllOps)
    if (group_of(k) == OpGroup::Optimizer) p.set(k, uniform(fmts::fp32));
  p.set_role(TensorRole::MasterWeight, fmts::fp32).set_role(TensorRole::AdamM, fmts::fp32);
  p.set_role(TensorRole::AdamV, fmts::fp32);
  p.set_loss_scale(loss_scale);
  return p;
}

/// The block-scaled training presets (issue 41, docs/policy.md "Block-scaled GEMMs"): amp-bf16 with the linear
/// layers' GEMMs (the Projection group: Q K V O W1 W3 W2, every pass) reading block-quantized operands: x and W in
/// `act_w`, dy in `grad`; the classifier, the attention GEMMs and every other op as in amp-bf16. Placed by group
/// (as every preset is), so that this file names no op.
Policy block_training(const char* act_w, const char* grad) {
  Policy p = amp_layout(fmts::bf16, 1.0, sequential_in(fmts::fp32));
  for (OpKind k : kAllOps)
    if (group_of(k) == OpGroup::Projection)
      for (Pass ps : kAllPasses) {
        GemmQuant& q = p.at(k, ps).quant;
        q.format[index_of(GemmRole::X)] = numerics::parse_block_format(act_w);
        q.format[index_of(GemmRole::W)] = numerics::parse_block_format(act_w);
        q.format[index_of(GemmRole::Dy)] = numerics::parse_block_format(grad);
      }
  return p;
}

/// NVIDIA's NVFP4 pre-training recipe (arXiv 2509.25149 §4): nvfp4 operands in every linear-layer GEMM, weights in
/// 16×16 tiles (nvfp4-16x16: one quantization for fprop and dgrad), gradients rounded stochastically, a 16×16 random
/// Hadamard transform on both wgrad operands, and the last transformer block kept in bf16 (of 4 blocks in T1 and
/// A512: the nearest whole-block share at or above the paper's ~16 % of linear layers, at the end, where the paper
/// keeps most of them).
Policy nvfp4_recipe() {
  Policy p = block_training("nvfp4", "nvfp4");
  for (OpKind k : kAllOps) {
    if (group_of(k) != OpGroup::Projection) continue;
    for (Pass ps : kAllPasses) {
      GemmQuant& q = p.at(k, ps).quant;
      q.format[index_of(GemmRole::W)] = numerics::parse_block_format("nvfp4-16x16");
      q.stochastic[index_of(GemmRole::Dy)] = true;
    }
    p.at(k, Pass::BackwardWeight).quant.rht = true;
  }
  p.set_block_keep({0, 1});
  return p;
}

/// The fp8 recipes' linear layers: every pass of the Projection group's GEMMs reads the fp8 operands x, W and dy and
/// accumulates under `fwd_acc` (Pass::Forward) or `bwd_acc` (both backward passes).
void fp8_projections(Policy& p, const Fp8Operand& x, const Fp8Operand& w, const Fp8Operand& dy, std::string_view fwd_acc,
                     std::string_view bwd_acc) {
  for (OpKind k : kAllOps)
    if (group_of(k) == OpGroup::Projection)
      for (Pass ps : kAllPasses) {
        OpPrecision& e = p.at(k, ps);
        e.quant.fp8[index_of(GemmRole::X)] = x;
        e.quant.fp8[index_of(GemmRole::W)] = w;
        e.quant.fp8[index_of(GemmRole::Dy)] = dy;
        e.accumulate = numerics::parse_accumulation(ps == Pass::Forward ? fwd_acc : bwd_acc);
      }
}

/// Transformer Engine's per-tensor fp8 recipes (issue 44, docs/policy.md "FP8 training recipes"): h100-amp-bf16 with
/// the linear layers' GEMMs (the Projection group, every pass) reading per-tensor scaled fp8 operands: x and W in E4M3,
/// dy in E5M2 (TE's Format.HYBRID); fprop without promotion (TE's _2X_ACC_FPROP = False: cuBLAS fast accumulation),
/// dgrad and wgrad promoted every 128 products into fp32 (_2X_ACC_DGRAD/_WGRAD = True: split accumulator), in the
/// e5m2 model since they read dy. The classifier (Megatron's output layer), attention GEMMs and the rest as in
/// h100-amp-bf16. Placed by group, so that this file names no op.
Policy te_fp8(const Fp8Scaling& scaling) {
  Policy p = amp_layout(fmts::bf16, 1.0, numerics::parse_accumulation("tc-h100-bf16"));
  const Fp8Operand e4m3{Fp8Elem::E4M3, 0, 0}, e5m2{Fp8Elem::E5M2, 0, 0};
  fp8_projections(p, e4m3, e4m3, e5m2, "tc-h100-fp8", "tc-h100-fp8-e5m2,promote=128:fp32");
  p.set_fp8_scaling(scaling);
  return p;
}

/// DeepSeek-V3's fine-grained fp8 recipe (arXiv 2412.19437 §3.3): E4M3 for every operand, activations and gradients
/// in 1×128 tiles along the contraction axis, weights in 128×128 blocks, fp32 scales (ops/fp8_scaling.hpp), every
/// pass of the linear layers' GEMMs under tc-h100-fp8 promoted into fp32 every 128 products (the promotion interval
/// is the block size). Embedding, output head (classifier), norms, attention core and optimizer stay as in
/// h100-amp-bf16 (DeepSeek keeps them in bf16/fp32); `promote` = false gives the nopromote variant, whose GEMM is the
/// decoded model; `rescale` (nopromote only) scales its decoded operands by powers of two into E4M3's range first
/// (fp8-rescale=e4m3: docs/studies/fp8-recipes.md, amendment 2).
Policy deepseek_fp8(bool promote, bool rescale = false) {
  Policy p = amp_layout(fmts::bf16, 1.0, numerics::parse_accumulation("tc-h100-bf16"));
  // Zero-padded last blocks (DeepGEMM pads K to a multiple of 128): the same as exact blocks where 128 divides the
  // dimension, and T1's SwiGLU hidden size (352) runs.
  const Fp8Operand tile{Fp8Elem::E4M3, 1, 128, true}, block{Fp8Elem::E4M3, 128, 128, true};
  const char* acc = promote ? "tc-h100-fp8,promote=128:fp32" : "tc-h100-fp8";
  fp8_projections(p, tile, block, tile, acc, acc);
  if (rescale)
    for (OpKind k : kAllOps)
      if (group_of(k) == OpGroup::Projection)
        for (Pass ps : kAllPasses) p.at(k, ps).quant.rescale = Fp8Elem::E4M3;
  return p;
}

/// Weight-only quantization for evaluation: fp32 everywhere, the linear layers' forward GEMMs reading W quantized in
/// `fmt` (activations stay fp32; the classifier unquantized, as GPTQ, AWQ and QLoRA leave the output head).
Policy weight_only(const char* fmt) {
  Policy p(uniform(fmts::fp32));
  for (OpKind k : kAllOps)
    if (group_of(k) == OpGroup::Projection)
      p.at(k, Pass::Forward).quant.format[index_of(GemmRole::W)] = numerics::parse_block_format(fmt);
  return p;
}

struct PresetEntry {
  std::string name;
  std::function<Policy()> make;
};

const std::vector<PresetEntry>& presets() {
  static const std::vector<PresetEntry> table = [] {
    std::vector<PresetEntry> t;
    t.push_back({"fp64", [] { return Policy(uniform(fmts::fp64)); }});
    t.push_back({"fp32", [] { return Policy(uniform(fmts::fp32)); }});
    t.push_back({"ane-fp16", [] { return ane_layout(uniform(fmts::fp16)); }});
    t.push_back({"ane-fp16-acc32", [] {
                   return ane_layout(OpPrecision{fmts::fp16, fmts::fp16, Rounding::NearestEven,
                                                 sequential_in(fmts::fp32)});
                 }});
    // The ANE-full layout with the accumulator the reverse-engineered ane-guide measured: fp16 inputs, exact
    // products, exact tiles of 4 rounded to fp16, an fp32 accumulator, the result rounded to fp16 half to even
    // (docs/policy.md, docs/numerics.md).
    // The MAC output port's saturation (guide: |output| >= 32768 is inf) on the ANE's matrix products, and the
    // engine's NaN -> +inf rule on every ANE op; the activation tables are not in the default (docs/policy.md).
    t.push_back({"ane-guide", ane_guide});
    t.push_back({"ane-matmul-only", [] {
                   Policy p(uniform(fmts::fp32));
                   for (OpKind k : kAllOps)
                     if (group_of(k) == OpGroup::Projection) p.set(k, Pass::Forward, uniform(fmts::fp16));
                   p.set_loss_scale(256.0);
                   return p;
                 }});
    t.push_back({"amp-fp16", [] { return amp_layout(fmts::fp16, 65536.0, sequential_in(fmts::fp32)); }});
    t.push_back({"amp-bf16", [] { return amp_layout(fmts::bf16, 1.0, sequential_in(fmts::fp32)); }});
    t.push_back({"pure-fp16", [] { return pure_layout(fmts::fp16, 65536.0); }});
    t.push_back({"pure-bf16", [] { return pure_layout(fmts::bf16, 1.0); }});
    // PyTorch autocast as it runs on a GPU (issue 40): the amp layout with every GEMM (matmul, classifier,
    // attention scores and values, forward and backward) chained over K through the GPU's tensor-core model, as
    // cuBLAS does without split-K (docs/studies/tensorcore.md). No b200-* presets: tc-b200 is tc-h100 (the same
    // model reproduces every measured B200 line), so a B200 policy would be h100-amp-* under another name.
    for (const char* gpu : {"h100", "a100"}) {
      const std::string g(gpu);
      t.push_back({g + "-amp-fp16", [g] {
                     return amp_layout(fmts::fp16, 65536.0, numerics::parse_accumulation("tc-" + g));
                   }});
      t.push_back({g + "-amp-bf16", [g] {
                     return amp_layout(fmts::bf16, 1.0, numerics::parse_accumulation("tc-" + g + "-bf16"));
                   }});
    }
    // The subnormal-flush variants of the ANE layouts (issue 42, preregistration amendment 15), last so that no
    // earlier policy's canonical text changes.
    t.push_back({"ane-guide-m1", ane_guide_m1});
    t.push_back({"ane-guide-ftz", ane_guide_ftz});
    t.push_back({"ane-fp16-ftz", ane_fp16_ftz});
    // Block-scaled formats (issue 41 item 3), last so that no earlier policy's canonical text changes.
    t.push_back({"mxfp8", [] { return block_training("mxfp8-e4m3", "mxfp8-e5m2"); }});
    t.push_back({"mxfp6", [] { return block_training("mxfp6-e3m2", "mxfp6-e3m2"); }});
    t.push_back({"mxfp4", [] { return block_training("mxfp4", "mxfp4"); }});
    t.push_back({"nvfp4", nvfp4_recipe});
    t.push_back({"int4-g32", [] { return weight_only("int4-g32"); }});
    t.push_back({"nf4", [] { return weight_only("nf4"); }});
    // FP8 training recipes (issue 44), last so that no earlier policy's canonical text changes.
    t.push_back({"te-fp8-delayed", [] {
                   return te_fp8(Fp8Scaling{Fp8ScaleMode::Delayed, 1024, AmaxAlgo::Max, 0});
                 }});
    t.push_back({"te-fp8-current", [] { return te_fp8(Fp8Scaling{}); }});
    t.push_back({"deepseek-fp8", [] { return deepseek_fp8(true); }});
    t.push_back({"deepseek-fp8-nopromote", [] { return deepseek_fp8(false); }});
    // Amendment 2 of docs/studies/fp8-recipes.md, last so that no earlier policy's canonical text changes.
    t.push_back({"deepseek-fp8-nopromote-rescaled", [] { return deepseek_fp8(false, true); }});
    return t;
  }();
  return table;
}

}  // namespace

const std::vector<std::string>& Policy::preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const PresetEntry& e : presets()) n.push_back(e.name);
    return n;
  }();
  return names;
}

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
template <std::size_t N>
std::string join(const std::array<std::string_view, N>& v) {
  std::string s;
  for (std::string_view x : v) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}
}  // namespace

Policy Policy::preset(std::string_view name) {
  for (const PresetEntry& e : presets())
    if (e.name == name) return e.make();
  throw std::invalid_argument("unknown policy preset '" + std::string(name) + "'; valid: " + join(preset_names()));
}

// ---- text form ------------------------------------------------------------------------------------------------

namespace {

/// The first four fields make up PREC; approx, saturate, nan, ftz and daz are only ever written as
/// OP.FIELD=VALUE.
/// The GEMM quantization fields (block-x, block-w, block-dy, block-sr, rht) are printed one per item; `block` only
/// parses (it sets block-x, block-w and block-dy at once) and is not in kAllFields.
enum class Field : std::uint8_t {
  Storage, Compute, Rounding, Acc, Approx, Saturate, Nan, Ftz, Daz, BlockX, BlockW, BlockDy, BlockSr, Rht, Block,
  Fp8X, Fp8W, Fp8Dy, Fp8, Fp8Rescale
};
constexpr std::array<Field, 18> kAllFields{Field::Storage, Field::Compute,  Field::Rounding, Field::Acc,
                                           Field::Approx,  Field::Saturate, Field::Nan,      Field::Ftz,
                                           Field::Daz,     Field::BlockX,   Field::BlockW,   Field::BlockDy,
                                           Field::BlockSr, Field::Rht,      Field::Fp8X,     Field::Fp8W,
                                           Field::Fp8Dy,   Field::Fp8Rescale};
constexpr std::array<std::string_view, 20> kFieldNames{"storage", "compute",  "rounding", "acc",   "approx",
                                                       "saturate", "nan",     "ftz",      "daz",   "block-x",
                                                       "block-w",  "block-dy", "block-sr", "rht",  "block",
                                                       "fp8-x",    "fp8-w",    "fp8-dy",   "fp8",  "fp8-rescale"};
/// A field of GemmQuant (GEMM ops only).
bool is_quant_field(Field f) {
  switch (f) {
    case Field::BlockX:
    case Field::BlockW:
    case Field::BlockDy:
    case Field::BlockSr:
    case Field::Rht:
    case Field::Block:
    case Field::Fp8X:
    case Field::Fp8W:
    case Field::Fp8Dy:
    case Field::Fp8:
    case Field::Fp8Rescale: return true;
    case Field::Storage:
    case Field::Compute:
    case Field::Rounding:
    case Field::Acc:
    case Field::Approx:
    case Field::Saturate:
    case Field::Nan:
    case Field::Ftz:
    case Field::Daz: return false;
  }
  return false;
}
/// The role a block-ROLE or fp8-ROLE field sets.
GemmRole role_of(Field f) {
  if (f == Field::BlockX || f == Field::Fp8X) return GemmRole::X;
  if (f == Field::BlockW || f == Field::Fp8W) return GemmRole::W;
  return GemmRole::Dy;
}
constexpr std::array<Ftz, 3> kAllFtz{Ftz::Off, Ftz::Out, Ftz::All};
constexpr std::array<Daz, 2> kAllDaz{Daz::Off, Daz::On};
bool in_prec(Field f) {
  switch (f) {
    case Field::Storage:
    case Field::Compute:
    case Field::Rounding:
    case Field::Acc: return true;
    case Field::Approx:
    case Field::Saturate:
    case Field::Nan:
    case Field::Ftz:
    case Field::Daz:
    case Field::BlockX:
    case Field::BlockW:
    case Field::BlockDy:
    case Field::BlockSr:
    case Field::Rht:
    case Field::Block:
    case Field::Fp8X:
    case Field::Fp8W:
    case Field::Fp8Dy:
    case Field::Fp8:
    case Field::Fp8Rescale: return false;
  }
  return false;
}

std::string number_text(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string approx_text(const Approx& a) {
  switch (a.kind) {
    case ApproxKind::Exact: return "exact";
    case ApproxKind::AneLut:
      if (a.knots == 0) return "ane-lut";
      if (a.lo == 0 && a.hi == 0) return "ane-lut:" + std::to_string(a.knots);
      return "ane-lut:" + std::to_string(a.knots) + ":" + number_text(a.lo) + ":" + number_text(a.hi);
  }
  return {};
}

std::string_view nan_text(NanRule r) {
  switch (r) {
    case NanRule::Ieee: return "ieee";
    case NanRule::AneInf: return "ane-inf";
  }
  return {};
}

std::string acc_text(const Accumulation& a) {
  const std::string c = numerics::canonical(a);
  if (c.find_first_of(",/=[]") == std::string::npos) return c;
  return "[" + c + "]";
}

std::string block_text(const std::optional<numerics::BlockFormat>& f) { return f ? f->name : std::string("off"); }

std::string sr_text(const GemmQuant& q) {
  std::string s;
  for (GemmRole r : kAllGemmRoles)
    if (q.stochastic[index_of(r)]) s += (s.empty() ? "" : "+") + std::string(name_of(r));
  return s.empty() ? "none" : s;
}

std::string rht_text(const GemmQuant& q) {
  if (!q.rht) return "off";
  return q.rht_seed == kDefaultRhtSeed ? "on" : "on:" + std::to_string(q.rht_seed);
}

std::string field_text(const OpPrecision& p, Field f) {
  switch (f) {
    case Field::Storage: return numerics::name_of(p.storage);
    case Field::Compute: return numerics::name_of(p.compute);
    case Field::Rounding: return std::string(numerics::name_of(p.rounding));
    case Field::Acc: return acc_text(p.accumulate);
    case Field::Approx: return approx_text(p.approx);
    case Field::Saturate: return p.saturate == 0 ? std::string("none") : number_text(p.saturate);
    case Field::Nan: return std::string(nan_text(p.nan));
    case Field::Ftz: return std::string(name_of(p.ftz));
    case Field::Daz: return std::string(name_of(p.daz));
    case Field::BlockX:
    case Field::BlockW:
    case Field::BlockDy: return block_text(p.quant.of(role_of(f)));
    case Field::BlockSr: return sr_text(p.quant);
    case Field::Rht: return rht_text(p.quant);
    case Field::Fp8X:
    case Field::Fp8W:
    case Field::Fp8Dy: return to_string(p.quant.fp8_of(role_of(f)));
    case Field::Fp8Rescale: return std::string(name_of(p.quant.rescale));
    case Field::Block:
    case Field::Fp8: break;
  }
  return {};
}

bool field_equal(const OpPrecision& a, const OpPrecision& b, Field f) {
  switch (f) {
    case Field::Storage: return a.storage == b.storage;
    case Field::Compute: return a.compute == b.compute;
    case Field::Rounding: return a.rounding == b.rounding;
    case Field::Acc: return a.accumulate == b.accumulate;
    case Field::Approx: return a.approx == b.approx;
    case Field::Saturate: return a.saturate == b.saturate;
    case Field::Nan: return a.nan == b.nan;
    case Field::Ftz: return a.ftz == b.ftz;
    case Field::Daz: return a.daz == b.daz;
    case Field::BlockX:
    case Field::BlockW:
    case Field::BlockDy: {
      const auto &fa = a.quant.of(role_of(f)), &fb = b.quant.of(role_of(f));
      return fa.has_value() == fb.has_value() && (!fa || fa->name == fb->name);
    }
    case Field::BlockSr: return a.quant.stochastic == b.quant.stochastic;
    case Field::Rht: return a.quant.rht == b.quant.rht && a.quant.rht_seed == b.quant.rht_seed;
    case Field::Fp8X:
    case Field::Fp8W:
    case Field::Fp8Dy: return a.quant.fp8_of(role_of(f)) == b.quant.fp8_of(role_of(f));
    case Field::Fp8Rescale: return a.quant.rescale == b.quant.rescale;
    case Field::Block:
    case Field::Fp8: break;
  }
  return false;
}

/// Overrides that turn `base0` into `p` (the canonical order: all.ftz / all.daz, then ops in table order, then
/// roles, then loss scale). ftz and daz, which no preset sets, take one all.FIELD item when every entry has the
/// same value (`ane-guide,all.ftz=out` rather than one item per op and pass); every other field is printed per
/// op or per pass, as before these two fields existed.
std::vector<std::string> overrides(const Policy& base0, const Policy& p) {
  std::vector<std::string> out;
  Policy base = base0;
  const OpPrecision& first = p.at(kAllOps[0], Pass::Forward);
  for (Field f : {Field::Ftz, Field::Daz}) {
    bool same = true, differs = false;
    for (OpKind k : kAllOps)
      for (Pass ps : kAllPasses) {
        same = same && field_equal(p.at(k, ps), first, f);
        differs = differs || !field_equal(base.at(k, ps), first, f);
      }
    if (!same || !differs) continue;
    out.push_back("all." + std::string(kFieldNames[static_cast<std::size_t>(f)]) + "=" + field_text(first, f));
    for (OpKind k : kAllOps)
      for (Pass ps : kAllPasses) {
        if (f == Field::Ftz) base.at(k, ps).ftz = first.ftz;
        if (f == Field::Daz) base.at(k, ps).daz = first.daz;
      }
  }
  for (OpKind k : kAllOps) {
    const std::string op(name_of(k));
    const OpPrecision& v0 = p.at(k, Pass::Forward);
    const bool all_equal = v0 == p.at(k, Pass::BackwardData) && v0 == p.at(k, Pass::BackwardWeight);
    auto emit_for = [&](const std::string& sel, const OpPrecision& v, const std::vector<Pass>& passes) {
      std::vector<Field> diff, extra;
      for (Field f : kAllFields) {
        bool differs = false;
        for (Pass ps : passes) differs = differs || !field_equal(base.at(k, ps), v, f);
        if (differs) (in_prec(f) ? diff : extra).push_back(f);
      }
      auto field_item = [&](Field f) {
        return sel + "." + std::string(kFieldNames[static_cast<std::size_t>(f)]) + "=" + field_text(v, f);
      };
      if (diff.size() == 1) out.push_back(field_item(diff[0]));
      if (diff.size() > 1) out.push_back(sel + "=" + to_string(v));
      for (Field f : extra) out.push_back(field_item(f));
    };
    if (all_equal) {
      emit_for(op, v0, {Pass::Forward, Pass::BackwardData, Pass::BackwardWeight});
    } else {
      for (Pass ps : kAllPasses) emit_for(op + "." + std::string(name_of(ps)), p.at(k, ps), {ps});
    }
  }
  for (TensorRole r : kAllRoles)
    if (!(p.storage_for(r) == base.storage_for(r)))
      out.push_back(std::string(name_of(r)) + "=" + numerics::name_of(p.storage_for(r)));
  if (p.loss_scale() != base.loss_scale()) out.push_back("loss-scale=" + number_text(p.loss_scale()));
  if (p.attention_order() != base.attention_order())
    out.push_back("attention=" + std::string(name_of(p.attention_order())));
  if (!(p.fp8_scaling() == base.fp8_scaling())) out.push_back("fp8-scaling=" + to_string(p.fp8_scaling()));
  if (!(p.block_keep() == base.block_keep()))
    out.push_back("block-keep=" + std::to_string(p.block_keep().first) + ":" + std::to_string(p.block_keep().last));
  return out;
}

/// Splits at `sep` outside square brackets.
std::vector<std::string> split_top(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == sep && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(std::string_view s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

/// A parse error for one token: "policy spec token N 'TOKEN': REASON".
[[noreturn]] void fail(std::size_t index, const std::string& token, const std::string& reason) {
  throw std::invalid_argument("policy spec item " + std::to_string(index + 1) + " '" + token + "': " + reason);
}

/// Runs a numerics parser, turning its exception into a one-line error about this token.
template <class F>
auto guarded(std::size_t index, const std::string& token, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    fail(index, token, e.what());
  }
}

std::optional<Rounding> find_rounding(std::string_view s) {
  for (Rounding r : numerics::kAllRoundings)
    if (numerics::name_of(r) == s) return r;
  return std::nullopt;
}

bool looks_like_format(const std::string& s) {
  try {
    (void)numerics::parse_format(s);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

Accumulation parse_acc(const std::string& s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') return numerics::parse_accumulation(s.substr(1, s.size() - 2));
  return numerics::parse_accumulation(s);
}

/// Applies PREC text to `v` (storage[/compute][/acc][/rounding]).
void apply_prec(std::size_t index, const std::string& token, const std::string& text, OpPrecision& v) {
  const std::vector<std::string> parts = split_top(text, '/');
  std::optional<Format> storage, compute;
  std::optional<Rounding> rounding;
  std::optional<Accumulation> acc;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string part = trim(parts[i]);
    if (i == 0) {
      storage = guarded(index, token, [&] { return numerics::parse_format(part); });
    } else if (!compute && !acc && !rounding && looks_like_format(part)) {
      compute = numerics::parse_format(part);
    } else if (auto r = find_rounding(part)) {
      if (rounding) fail(index, token, "rounding given twice");
      rounding = r;
    } else {
      if (acc) fail(index, token, "'" + part + "' is not a rounding mode and the accumulation is already given");
      acc = guarded(index, token, [&] { return parse_acc(part); });
    }
  }
  v.storage = *storage;
  v.compute = compute ? *compute : *storage;
  v.accumulate = acc ? *acc : sequential_in(v.compute);
  if (rounding) v.rounding = *rounding;
}

/// exact | ane-lut | ane-lut:K | ane-lut:K:LO:HI.
Approx parse_approx(std::size_t index, const std::string& token, const std::string& text) {
  constexpr const char* kValid = "valid: exact, ane-lut, ane-lut:K, ane-lut:K:LO:HI (e.g. ane-lut:33:-8:8)";
  if (text == "exact") return Approx{};
  const std::vector<std::string> parts = split_top(text, ':');
  if (parts[0] != "ane-lut" || parts.size() == 3 || parts.size() > 4)
    fail(index, token, "unknown approximation '" + text + "'; " + kValid);
  Approx a{ApproxKind::AneLut, 0, 0, 0};
  if (parts.size() == 1) return a;
  const std::string& k = parts[1];
  const auto r = std::from_chars(k.data(), k.data() + k.size(), a.knots);
  if (r.ec != std::errc() || r.ptr != k.data() + k.size() || a.knots < 2 || a.knots > 4097)
    fail(index, token, "knot count '" + k + "' is not an integer in 2..4097; " + kValid);
  if (parts.size() == 2) return a;
  for (std::size_t i = 2; i < 4; ++i) {
    double& d = i == 2 ? a.lo : a.hi;
    const std::string& t = parts[i];
    const auto q = std::from_chars(t.data(), t.data() + t.size(), d);
    if (q.ec != std::errc() || q.ptr != t.data() + t.size() || !std::isfinite(d))
      fail(index, token, "table bound '" + t + "' is not a finite number; " + kValid);
  }
  if (!(a.lo < a.hi)) fail(index, token, "table range needs LO < HI; " + std::string(kValid));
  return a;
}

/// none | a positive finite number.
double parse_saturate(std::size_t index, const std::string& token, const std::string& text) {
  if (text == "none") return 0;
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !(v > 0) || !std::isfinite(v))
    fail(index, token, "saturate must be none or a positive finite number (e.g. 32768), not '" + text + "'");
  return v;
}

NanRule parse_nan(std::size_t index, const std::string& token, const std::string& text) {
  for (NanRule r : {NanRule::Ieee, NanRule::AneInf})
    if (nan_text(r) == text) return r;
  fail(index, token, "unknown NaN rule '" + text + "'; valid: ieee, ane-inf");
}

/// One of `all`'s names (Ftz or Daz) or a one-line error listing them.
template <class E, std::size_t N>
E parse_choice(std::size_t index, const std::string& token, const std::string& text, const char* what,
               const std::array<E, N>& all) {
  std::string valid;
  for (E e : all) {
    if (name_of(e) == text) return e;
    valid += (valid.empty() ? "" : ", ") + std::string(name_of(e));
  }
  fail(index, token, "unknown " + std::string(what) + " '" + text + "'; valid: " + valid);
}

/// FMT (numerics::parse_block_format's names, with an MX rule suffix) or off.
std::optional<numerics::BlockFormat> parse_block(std::size_t index, const std::string& token, const std::string& text) {
  if (text == "off") return std::nullopt;
  try {
    return numerics::parse_block_format(text);
  } catch (const std::invalid_argument& e) {
    fail(index, token, std::string(e.what()) + "; or off");
  }
}

/// none | ROLE("+"ROLE)*, ROLE in x, w, dy.
std::array<bool, kGemmRoleCount> parse_sr(std::size_t index, const std::string& token, const std::string& text) {
  std::array<bool, kGemmRoleCount> r{};
  if (text == "none") return r;
  for (const std::string& part : split_top(text, '+')) {
    bool found = false;
    for (GemmRole g : kAllGemmRoles)
      if (name_of(g) == part) {
        r[index_of(g)] = true;
        found = true;
      }
    if (!found) fail(index, token, "unknown operand role '" + part + "' in block-sr; valid: none or roles x, w, dy joined by + (e.g. dy, x+dy)");
  }
  return r;
}

/// off | on | on:SEED.
void parse_rht(std::size_t index, const std::string& token, const std::string& text, GemmQuant& q) {
  constexpr const char* kValid = "valid: off, on, on:SEED (SEED a decimal integer < 2^64)";
  if (text == "off") {
    q.rht = false;
    q.rht_seed = kDefaultRhtSeed;
    return;
  }
  if (text == "on") {
    q.rht = true;
    q.rht_seed = kDefaultRhtSeed;
    return;
  }
  if (text.rfind("on:", 0) == 0) {
    std::uint64_t seed = 0;
    const char* b = text.data() + 3;
    const auto r = std::from_chars(b, text.data() + text.size(), seed);
    if (r.ec == std::errc() && r.ptr == text.data() + text.size() && b != r.ptr) {
      q.rht = true;
      q.rht_seed = seed;
      return;
    }
  }
  fail(index, token, "unknown rht value '" + text + "'; " + kValid);
}

/// off | e4m3 | e5m2 (the fp8 element into whose range the decoded model scales its operands).
Fp8Elem parse_rescale(std::size_t index, const std::string& token, const std::string& text) {
  for (Fp8Elem e : {Fp8Elem::Off, Fp8Elem::E4M3, Fp8Elem::E5M2})
    if (name_of(e) == text) return e;
  fail(index, token, "unknown fp8-rescale value '" + text + "'; valid: off, e4m3, e5m2");
}

void apply_field(std::size_t index, const std::string& token, Field f, const std::string& text, OpPrecision& v) {
  switch (f) {
    case Field::Storage: v.storage = guarded(index, token, [&] { return numerics::parse_format(text); }); return;
    case Field::Compute: v.compute = guarded(index, token, [&] { return numerics::parse_format(text); }); return;
    case Field::Rounding: v.rounding = guarded(index, token, [&] { return numerics::parse_rounding(text); }); return;
    case Field::Acc: v.accumulate = guarded(index, token, [&] { return parse_acc(text); }); return;
    case Field::Approx: v.approx = parse_approx(index, token, text); return;
    case Field::Saturate: v.saturate = parse_saturate(index, token, text); return;
    case Field::Nan: v.nan = parse_nan(index, token, text); return;
    case Field::Ftz: v.ftz = parse_choice(index, token, text, "ftz mode", kAllFtz); return;
    case Field::Daz: v.daz = parse_choice(index, token, text, "daz mode", kAllDaz); return;
    // A role has one quantization: a block format replaces the role's scaled fp8 and a scaled fp8 replaces its block
    // format (items apply left to right); `off` clears only its own field.
    case Field::BlockX:
    case Field::BlockW:
    case Field::BlockDy: {
      const GemmRole r = role_of(f);
      v.quant.format[index_of(r)] = parse_block(index, token, text);
      if (v.quant.format[index_of(r)]) v.quant.fp8[index_of(r)] = Fp8Operand{};
      return;
    }
    case Field::Block: {
      const std::optional<numerics::BlockFormat> b = parse_block(index, token, text);
      for (GemmRole r : kAllGemmRoles) {
        v.quant.format[index_of(r)] = b;
        if (b) v.quant.fp8[index_of(r)] = Fp8Operand{};
      }
      return;
    }
    case Field::BlockSr: v.quant.stochastic = parse_sr(index, token, text); return;
    case Field::Rht: parse_rht(index, token, text, v.quant); return;
    case Field::Fp8X:
    case Field::Fp8W:
    case Field::Fp8Dy: {
      const GemmRole r = role_of(f);
      v.quant.fp8[index_of(r)] = guarded(index, token, [&] { return parse_fp8_operand(text); });
      if (v.quant.fp8[index_of(r)].on()) v.quant.format[index_of(r)] = std::nullopt;
      return;
    }
    case Field::Fp8: {
      const Fp8Operand o = guarded(index, token, [&] { return parse_fp8_operand(text); });
      for (GemmRole r : kAllGemmRoles) {
        v.quant.fp8[index_of(r)] = o;
        if (o.on()) v.quant.format[index_of(r)] = std::nullopt;
      }
      return;
    }
    case Field::Fp8Rescale: v.quant.rescale = parse_rescale(index, token, text); return;
  }
}

/// A role that rounds stochastically in a format that cannot is refused when the item that makes it so is read.
void check_stochastic(std::size_t index, const std::string& token, const OpPrecision& v) {
  for (GemmRole r : kAllGemmRoles) {
    const auto& f = v.quant.of(r);
    if (v.quant.stochastic[index_of(r)] && f && !supports_stochastic(*f))
      fail(index, token,
           "stochastic rounding of " + f->name + " elements (role " + std::string(name_of(r)) +
               ") is not supported; valid: the 1-D MX floating-point formats (mxfp8-*, mxfp6-*, mxfp4) and nvfp4");
  }
}

/// "materialised, online" for error messages.
std::string attention_order_list() {
  std::string s;
  for (AttentionOrder o : kAllAttentionOrders) s += (s.empty() ? "" : ", ") + std::string(name_of(o));
  return s;
}

/// A table range whose bounds (or width) the compute format cannot hold gives NaN knots and every output NaN:
/// refused when the item that makes it so is read.
void check_lut_range(std::size_t index, const std::string& token, const OpPrecision& v) {
  const Approx& a = v.approx;
  if (a.kind != ApproxKind::AneLut || (a.lo == 0 && a.hi == 0)) return;
  const double top = numerics::max_finite(v.compute);
  if (std::fabs(a.lo) <= top && std::fabs(a.hi) <= top && std::isfinite(a.hi - a.lo)) return;
  fail(index, token,
       "table range " + number_text(a.lo) + ":" + number_text(a.hi) + " overflows the compute format " +
           numerics::name_of(v.compute) + "; valid: bounds within ±" + number_text(top) + " (e.g. ane-lut:33:-8:8)");
}

void apply_item(Policy& p, std::size_t index, const std::string& token) {
  const std::size_t eq = token.find('=');
  if (eq == std::string::npos)
    fail(index, token, "expected SELECTOR=VALUE (a preset name is only allowed as the first item; presets: " +
                           join(Policy::preset_names()) + ")");
  const std::string lhs = trim(std::string_view(token).substr(0, eq));
  const std::string rhs = trim(std::string_view(token).substr(eq + 1));
  if (rhs.empty()) fail(index, token, "empty value");
  if (lhs == "loss-scale") {
    double s = 0;
    const auto r = std::from_chars(rhs.data(), rhs.data() + rhs.size(), s);
    if (r.ec != std::errc() || r.ptr != rhs.data() + rhs.size() || !(s > 0) || !std::isfinite(s))
      fail(index, token, "loss-scale must be a positive finite number");
    p.set_loss_scale(s);
    return;
  }
  if (lhs == "attention") {
    std::optional<AttentionOrder> order;
    for (AttentionOrder o : kAllAttentionOrders)
      if (name_of(o) == rhs) order = o;
    if (!order) fail(index, token, "unknown attention order '" + rhs + "'; valid: " + attention_order_list());
    p.set_attention_order(*order);
    return;
  }
  if (lhs == "fp8-scaling") {
    p.set_fp8_scaling(guarded(index, token, [&] { return parse_fp8_scaling(rhs); }));
    return;
  }
  if (lhs == "block-keep") {
    const std::size_t colon = rhs.find(':');
    BlockKeep k;
    const auto num = [&](std::string_view t, int& out) {
      const auto r = std::from_chars(t.data(), t.data() + t.size(), out);
      return r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty() && out >= 0 && out <= 1000000;
    };
    if (colon == std::string::npos || !num(std::string_view(rhs).substr(0, colon), k.first) ||
        !num(std::string_view(rhs).substr(colon + 1), k.last))
      fail(index, token, "block-keep must be F:L, the number of first and last blocks kept unquantized (e.g. 0:1)");
    p.set_block_keep(k);
    return;
  }
  if (auto role = find_role(lhs)) {
    p.set_role(*role, guarded(index, token, [&] { return numerics::parse_format(rhs); }));
    return;
  }
  const std::vector<std::string> sel = split_top(lhs, '.');
  if (sel.size() > 3) fail(index, token, "selector has too many parts; expected OP[.PASS][.FIELD]");
  if (sel[0] == "attention")
    fail(index, token, "attention takes no pass or field; expected attention=ORDER, ORDER: " + attention_order_list());
  std::vector<OpKind> ops;
  if (sel[0] == "all") {
    ops.assign(kAllOps.begin(), kAllOps.end());
  } else if (auto k = find_op(sel[0])) {
    ops.push_back(*k);
  } else {
    fail(index, token,
         "unknown op or role '" + sel[0] + "'; valid: all, " + std::string(op_names_list()) + ", " +
             join(kRoleNames) + ", loss-scale, attention, block-keep, fp8-scaling");
  }
  std::vector<Pass> passes(kAllPasses.begin(), kAllPasses.end());
  std::optional<Field> field;
  for (std::size_t i = 1; i < sel.size(); ++i) {
    if (auto ps = find_pass(sel[i]); ps && i == 1) {
      passes = {*ps};
    } else if (sel[i] == "bwd" && i == 1) {
      passes = {Pass::BackwardData, Pass::BackwardWeight};
    } else {
      std::optional<Field> f;
      for (std::size_t c = 0; c < kFieldNames.size(); ++c)
        if (kFieldNames[c] == sel[i]) f = static_cast<Field>(c);
      if (!f || i != sel.size() - 1)
        fail(index, token,
             "unknown pass or field '" + sel[i] + "'; valid passes: " + join(kPassNames) +
                 ", bwd; fields: " + join(kFieldNames));
      field = f;
    }
  }
  if (field && is_quant_field(*field))
    for (OpKind k : ops)
      if (group_of(k) != OpGroup::Projection && group_of(k) != OpGroup::Classifier)  // the GEMMs of ops/matmul.hpp
        fail(index, token,
             "block quantization applies to the GEMM ops matmul and classifier, not " + std::string(name_of(k)) +
                 "; valid: matmul[.PASS]." + sel.back() + "=..., classifier[.PASS]." + sel.back() + "=...");
  for (OpKind k : ops)
    for (Pass ps : passes) {
      if (field) apply_field(index, token, *field, rhs, p.at(k, ps));
      else apply_prec(index, token, rhs, p.at(k, ps));
      check_lut_range(index, token, p.at(k, ps));
      check_stochastic(index, token, p.at(k, ps));
    }
}

}  // namespace

std::string to_string(const OpPrecision& p) {
  return numerics::name_of(p.storage) + "/" + numerics::name_of(p.compute) + "/" + acc_text(p.accumulate) + "/" +
         std::string(numerics::name_of(p.rounding));
}

std::string extras_text(const OpPrecision& p) {
  const OpPrecision d{};
  std::string s;
  // Every field but PREC's four (storage, compute, rounding, acc), in kAllFields' order, so that a new field is
  // listed without a second edit here (fp8-rescale was once missing from a hand-written list).
  for (Field f : kAllFields)
    if (f != Field::Storage && f != Field::Compute && f != Field::Rounding && f != Field::Acc && !field_equal(p, d, f))
      s += (s.empty() ? "" : " ") + std::string(kFieldNames[static_cast<std::size_t>(f)]) + "=" + field_text(p, f);
  return s;
}

std::string Policy::canonical() const {
  std::size_t best = 0;
  std::vector<std::string> best_items;
  for (std::size_t i = 0; i < presets().size(); ++i) {
    std::vector<std::string> items = overrides(presets()[i].make(), *this);
    if (i == 0 || items.size() < best_items.size()) {
      best = i;
      best_items = std::move(items);
    }
  }
  std::string s = presets()[best].name;
  for (const std::string& it : best_items) s += "," + it;
  return s;
}

Policy Policy::parse(std::string_view spec) {
  const std::vector<std::string> items = split_top(spec, ',');
  Policy p = preset("fp32");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string token = trim(items[i]);
    if (token.empty()) fail(i, token, "empty item (check for doubled or trailing commas)");
    if (token.find('=') == std::string::npos) {
      bool found = false;
      for (const PresetEntry& e : presets())
        if (e.name == token) {
          if (i != 0) fail(i, token, "a preset is only allowed as the first item");
          p = e.make();
          found = true;
        }
      if (!found) fail(i, token, "unknown preset; valid: " + join(preset_names()));
      continue;
    }
    apply_item(p, i, token);
  }
  return p;
}

namespace {

/// The spec held by policy file `path` (comments and blank lines dropped, lines joined by commas).
std::string read_policy_file(const std::string& path) {
  const std::string what = "policy file '" + path + "'";
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found)
    throw std::invalid_argument(what + " does not exist");
  if (st.type() == std::filesystem::file_type::directory) throw std::invalid_argument(what + " is a directory");
  if (st.type() != std::filesystem::file_type::regular)
    throw std::invalid_argument(what + " is not a regular file (a FIFO, socket or device is not read)");
  constexpr std::uintmax_t kMaxBytes = 1 << 20;
  if (std::filesystem::file_size(path, ec) > kMaxBytes) throw std::invalid_argument(what + " is larger than 1 MiB");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(what + " cannot be read");
  std::string spec, line;
  while (std::getline(in, line)) {
    const std::size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const std::string t = trim(line);
    if (t.empty()) continue;
    if (!spec.empty()) spec += ",";
    spec += t;
  }
  if (spec.empty()) throw std::invalid_argument(what + " holds no policy items (only blank lines and comments)");
  return spec;
}

Policy parse_policy_file(const std::string& path) {
  const std::string spec = read_policy_file(path);
  try {
    return Policy::parse(spec);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("policy file '" + path + "': " + e.what());
  }
}

}  // namespace

Policy load_policy(const std::string& arg, std::string* source) {
  if (!arg.empty() && arg[0] == '@') {
    if (source) *source = "file " + arg.substr(1);
    return parse_policy_file(arg.substr(1));
  }
  try {
    Policy p = Policy::parse(arg);
    if (source) *source = "spec";
    return p;
  } catch (const std::invalid_argument& e) {
    std::error_code ec;
    if (!arg.empty() && std::filesystem::symlink_status(arg, ec).type() != std::filesystem::file_type::not_found &&
        !ec) {
      if (source) *source = "file " + arg;
      return parse_policy_file(arg);
    }
    if (arg.find_first_of("=,") == std::string::npos)
      throw std::invalid_argument("'" + arg + "' is neither a policy preset (" + join(Policy::preset_names()) +
                                  ") nor an existing policy file");
    throw;
  }
}

}  // namespace roundoff::ops
