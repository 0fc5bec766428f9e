#pragma once
/// \file config.hpp
/// Model shapes and the training recipe of STUDY_PROTOCOL.md §4.2–4.3.
///
/// Architecture (every config): Llama-style Pre-RMSNorm decoder, RoPE base 10000, multi-head attention
/// (no GQA), SwiGLU with hidden ≈ 2.75·d rounded to a multiple of 16, untied embedding and classifier,
/// no biases or dropout, RMSNorm eps 1e-5.
#include <cstdint>
#include <string>
#include <string_view>

namespace roundoff::studies::train {

/// Which tokenizer feeds the model: raw bytes (V = 256) or byte-level BPE with a configurable vocabulary.
enum class TokenizerKind : std::uint8_t { Byte, Bpe };

/// "byte" or "bpe".
std::string_view name_of(TokenizerKind k);

/// Shapes of one model. Invariants (checked by validate()): d % heads == 0, head size even (RoPE rotates
/// pairs), every size ≥ 1, vocab == 256 for bytes and > 256 for BPE.
struct ModelConfig {
  std::string name = "custom";  ///< "T0", "T1" or "custom"
  int d = 64;                   ///< model width (channels C)
  int layers = 2;               ///< L
  int heads = 4;                ///< NH; head size hs = d / heads
  int seq = 64;                 ///< T (context length)
  int batch = 4;                ///< B (sequences per step)
  int vocab = 256;              ///< V
  int hidden = 176;             ///< SwiGLU hidden width h
  TokenizerKind tokenizer = TokenizerKind::Byte;
  double norm_eps = 1e-5;       ///< RMSNorm epsilon
  double rope_base = 10000.0;   ///< RoPE θ base

  int head_size() const { return d / heads; }
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
/// "T0", "T1" or "custom" (custom starts from T0's shapes); throws std::invalid_argument otherwise.
ModelConfig config_by_name(std::string_view name);

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
};
std::string_view name_of(InitRule r);
InitRule parse_init_rule(std::string_view text);

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
};

/// Learning rate for 0-based `step` of `total` steps: lr·(step+1)/warmup during warmup, then cosine from
/// lr to final_lr_ratio·lr reached at step total-1.
double learning_rate(const Recipe& r, std::int64_t step, std::int64_t total);

}  // namespace roundoff::studies::train
