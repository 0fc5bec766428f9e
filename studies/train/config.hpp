#pragma once
/// \file config.hpp
/// Model shapes and the training recipe of STUDY_PROTOCOL.md §4.2–4.3.
///
/// Architecture (every config): Llama-style Pre-RMSNorm decoder, RoPE base 10000, attention with
/// `kv_heads` K/V heads shared by heads/kv_heads query heads each (kv_heads == heads: multi-head attention),
/// SwiGLU with hidden ≈ 2.75·d rounded to a multiple of 16, embedding and classifier untied unless
/// `tie_embeddings`, no biases or dropout, RMSNorm eps 1e-5.
#include <cstdint>
#include <string>
#include <string_view>

namespace roundoff::studies::train {

/// Which tokenizer feeds the model: raw bytes (V = 256) or byte-level BPE with a configurable vocabulary.
enum class TokenizerKind : std::uint8_t { Byte, Bpe };

/// "byte" or "bpe".
std::string_view name_of(TokenizerKind k);

/// Which K/V head query head h of `heads` reads when there are N = kv_heads of them (AUTOANE_FACTS §3.1).
enum class GqaMap : std::uint8_t {
  Block,   ///< ⌊h·N/heads⌋: consecutive query heads share a KV head (AutoANE's CPU gqa_tile_kv)
  Cyclic,  ///< h mod N: AutoANE's ANE kernel, concat(k, k, k, k) along the head axis
};
/// "block" or "cyclic".
std::string_view name_of(GqaMap m);
/// Parses the CLI name; throws std::invalid_argument listing the valid names.
GqaMap parse_gqa_map(std::string_view text);
/// The feed-forward block (`roundoff train --ffn`). SwiGlu: f = W2·(silu(W1·h) ⊙ W3·h), the Llama FFN and the
/// default; Gelu / GeluTanh: f = W2·gelu(W1·h) with GELU's erf form (exact) or tanh form (GPT-2), no W3 (its
/// parameter tensor is empty), the same hidden width H as the config defines (T0: 176, T1: 352).
enum class Ffn : std::uint8_t { SwiGlu, Gelu, GeluTanh };
/// "swiglu", "gelu" or "gelu-tanh".
std::string_view name_of(Ffn f);
/// Parses the CLI name; throws std::invalid_argument listing the valid names.
Ffn parse_ffn(std::string_view text);

/// The KV head that query head h reads under map m (heads query heads, kv_heads KV heads).
int kv_head_of(GqaMap m, int h, int heads, int kv_heads);

/// AutoANE's code defects (AUTOANE_FACTS §3), reproducible on purpose; all off by default.
struct Defects {
  /// ANE-full's GQA mismatch: the forward tiles K/V cyclically (h mod N); the attention backward recomputes
  /// the scores and softmax from the same q, k, v with the block map ⌊h·N/heads⌋, takes the block model's
  /// attention gradients at the cyclic forward's upstream gradient, and reduces dK/dV with the block map;
  /// the fp32 evaluation model (AutoANE's CPU validation) is the block model. The model's gqa_map is unused.
  bool gqa_mismatch = false;
  /// RMSNorm backward as in AutoANE's cpu_ops.h before 2026-03-12: dx = w·r·(dy − x·dot) instead of
  /// r·(w·dy − x·dot), dot = r²·Σ w·dy·x / C. The forward and the gain gradient are unchanged.
  bool rmsnorm_bwd = false;
  bool any() const { return gqa_mismatch || rmsnorm_bwd; }
  friend bool operator==(const Defects&, const Defects&) = default;
};
/// "gqa-mismatch,rmsnorm-bwd" style list of the defects that are on ("none" when none is).
std::string defects_text(const Defects& d);
/// Parses a comma list of defect names ("none" or empty: none); throws std::invalid_argument naming the
/// unknown item and the valid names.
Defects parse_defects(std::string_view text);

/// Shapes of one model. Invariants (checked by validate()): d % heads == 0, head size even (RoPE rotates
/// pairs), kv_heads divides heads, every size ≥ 1, vocab == 256 for bytes and > 256 for BPE (with
/// compact_vocab: 2 ≤ vocab ≤ tokenizer_vocab, which obeys those rules instead).
struct ModelConfig {
  std::string name = "custom";  ///< "T0", "T1" or "custom"
  int d = 64;                   ///< model width (channels C)
  int layers = 2;               ///< L
  int heads = 4;                ///< NH; head size hs = d / heads
  int kv_heads = 0;             ///< NKV K/V heads (divides heads); 0: as many as heads (multi-head attention)
  GqaMap gqa_map = GqaMap::Block;
  int seq = 64;                 ///< T (context length)
  int batch = 4;                ///< B (sequences per step)
  int vocab = 256;              ///< V
  int hidden = 176;             ///< FFN hidden width h (SwiGLU's, and GELU's under --ffn gelu)
  Ffn ffn = Ffn::SwiGlu;        ///< the feed-forward block
  TokenizerKind tokenizer = TokenizerKind::Byte;
  bool tie_embeddings = false;  ///< the classifier is the embedding matrix (no wcls tensor)
  /// AutoANE's vocabulary compaction: the model's vocab covers only the token ids that occur in the corpus
  /// (train, val and test), renumbered in increasing id order; the tokenizer has tokenizer_vocab ids.
  /// `vocab` is then set from the data (TrainData::vocab).
  bool compact_vocab = false;
  int tokenizer_vocab = 0;      ///< the tokenizer's size when compact_vocab (0 otherwise)
  Defects defects;
  double norm_eps = 1e-5;       ///< RMSNorm epsilon
  double rope_base = 10000.0;   ///< RoPE θ base

  int head_size() const { return d / heads; }
  /// NKV: kv_heads, or heads when kv_heads is 0.
  int kv_count() const { return kv_heads > 0 ? kv_heads : heads; }
  /// The tokenizer's vocabulary (tokenizer_vocab when compacting, else vocab).
  int tokens() const { return compact_vocab ? tokenizer_vocab : vocab; }
  /// Throws std::invalid_argument naming the offending field and the valid range.
  void validate() const;
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// SwiGLU hidden width: round(2.75·d / 16)·16, at least 16 (T0: 176, T1: 352).
int swiglu_hidden(int d);

/// T0: d 64, 2 layers, 4 heads, seq 64, batch 4, bytes (V 256).
ModelConfig t0_config();
/// T1: d 128, 4 layers, 4 heads, seq 64, batch 4, BPE-512.
ModelConfig t1_config();
/// The BPE vocabulary of the replica configs, trained on Brown's train split before compaction (docs/trainer.md,
/// "The AutoANE replica", says why this size).
inline constexpr int kReplicaBpeVocab = 17403;
/// E11, AutoANE's experiment model (its models/autoresearch.h at d019e67): d 1024, 4 layers, 16 query heads on
/// 4 KV heads (block map), hidden 2816, seq 256, batch 1, tied embeddings, BPE-kReplicaBpeVocab compacted to
/// the ids in the corpus.
ModelConfig e11_config();
/// A512, AutoANE's default model at its HEAD (80706b7, models/autoresearch.h): d 512, 4 layers, 8 query heads
/// on 2 KV heads, hidden 1408, seq 128, batch 1, tied, the same compacted BPE.
ModelConfig a512_config();
/// "T0", "T1", "E11", "A512" or "custom" (custom starts from T0's shapes); throws std::invalid_argument
/// otherwise.
ModelConfig config_by_name(std::string_view name);
/// The names config_by_name accepts other than "custom", comma-separated (for error messages).
std::string preset_config_names();

/// How the residual stream is scaled (STUDY_PROTOCOL.md §1.4).
enum class ResidualScale : std::uint8_t {
  None,       ///< x + F(Norm(x))
  InvSqrt2L,  ///< AutoANE's rule x + F(Norm(x))/√(2L), forward and backward, init unchanged
  DeepNorm,   ///< Post-LN x' = Norm(α·x + F(x)), α = (2L)^¼; Xavier init, gain β = (8L)^-¼ on FFN, v, o.
              ///< Computed as Norm_{eps·α²}(x + F/α), which is the same function (RMSNorm is scale-invariant
              ///< up to eps: Norm_eps(αy) = Norm_{eps/α²}(y))
};
/// "none", "inv-sqrt-2L", "deepnorm".
std::string_view name_of(ResidualScale r);
/// Parses the CLI name; throws std::invalid_argument listing the valid names.
ResidualScale parse_residual_scale(std::string_view text);

/// The numbers a residual rule implies for a model with `layers` blocks.
/// Every rule is computed as x + branch·F (the residual op's α = branch).
struct ResidualRule {
  ResidualScale kind = ResidualScale::None;
  double alpha = 1.0;           ///< DeepNorm's skip weight α (1 otherwise)
  double branch = 1.0;          ///< multiplier on F: 1/√(2L) (AutoANE), 1/α (DeepNorm), 1
  bool post_norm = false;       ///< DeepNorm: the norm follows the add instead of preceding the branch
  double post_norm_eps_factor = 1.0;  ///< the post-norms use eps·α² (see ResidualScale::DeepNorm)
  double init_gain = 1.0;       ///< DeepNorm β on W1, W3, W2, Wv, Wo (Xavier-normal gain)
};
ResidualRule residual_rule(ResidualScale kind, int layers);

/// How parameters are initialised.
enum class InitRule : std::uint8_t {
  Normal,       ///< every matrix and the embedding N(0, 0.02²); norm gains 1
  Gpt2Scaled,   ///< as Normal, but Wo and W2 use std 0.02/√(2L) (GPT-2 §2.3, nanoGPT)
  AutoAne,      ///< AutoANE's uniform init (params.hpp: init_params)
};
std::string_view name_of(InitRule r);
InitRule parse_init_rule(std::string_view text);

/// How the learning rate follows the steps.
enum class Schedule : std::uint8_t {
  Updates,  ///< learning_rate(): warmup and cosine counted in updates over the run's --steps
  AutoAne,  ///< learning_rate_autoane(): counted in micro-steps over the total_steps horizon, evaluated at the
            ///< last micro-step of each update (AutoANE's train.m)
};
std::string_view name_of(Schedule s);
/// Parses "updates" or "autoane"; throws std::invalid_argument listing them.
Schedule parse_schedule(std::string_view text);

/// AdamW and schedule hyper-parameters (STUDY_PROTOCOL.md §4.3).
struct Recipe {
  double lr = 1e-3;              ///< peak learning rate
  int warmup = 100;              ///< linear warmup steps
  double final_lr_ratio = 0.1;   ///< cosine decays to final_lr_ratio·lr at the final step
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;     ///< on matrices (Wq, Wk, Wv, Wo, W1, W2, W3, classifier) only
  double clip_norm = 1.0;        ///< global gradient-norm clip, fp32, after unscaling; ≤ 0 disables
  double init_std = 0.02;
  InitRule init = InitRule::Normal;
  bool decay_embedding = false;  ///< weight decay on the embedding as well (AutoANE); never on norm gains
  int accum = 1;                 ///< micro-steps per update; their gradients are summed (AutoANE: 10)
  Schedule schedule = Schedule::Updates;
  std::int64_t total_steps = 0;  ///< Schedule::AutoAne horizon in micro-steps (AutoANE's total_steps)
  friend bool operator==(const Recipe&, const Recipe&) = default;
};

/// Learning rate for 0-based `step` of `total` steps: lr·(step+1)/warmup during warmup, then cosine from
/// lr to final_lr_ratio·lr reached at step total-1.
double learning_rate(const Recipe& r, std::int64_t step, std::int64_t total);

/// AutoANE's schedule at 0-based micro-step `micro` (the last micro-step of an update), warmup r.warmup and
/// horizon r.total_steps micro-steps: lr·(micro+1)/warmup during warmup, then
/// lr_min + ½(1 + cos(π·(micro − warmup)/(total − warmup)))·(lr − lr_min), lr_min = final_lr_ratio·lr
/// (the ratio clamped to 1 past the horizon, where AutoANE's loop would have stopped).
double learning_rate_autoane(const Recipe& r, std::int64_t micro);

/// AutoANE's recipe (AUTOANE_FACTS §1): lr 3e-4, β (0.9, 0.95), ε 1e-8, weight decay 0.1 on the matrices and
/// the embedding, clip 1.0, warmup 100 micro-steps, cosine to 0.1·lr over total_steps 10,000 micro-steps
/// (Schedule::AutoAne), accum 10, InitRule::AutoAne. The trainer's residual rule (inv-sqrt-2L) and loss
/// scale (static 256) are set beside it by the CLI.
Recipe autoane_recipe();

}  // namespace roundoff::studies::train
