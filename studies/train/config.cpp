// Model configs, residual rules and the learning-rate schedule.
#include "studies/train/config.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace roundoff::studies::train {

std::string_view name_of(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::Byte: return "byte";
    case TokenizerKind::Bpe: return "bpe";
  }
  return "?";
}

void ModelConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("invalid model config: " + what);
  };
  need(d >= 2, "--d must be >= 2 (got " + std::to_string(d) + ")");
  need(layers >= 1, "--layers must be >= 1 (got " + std::to_string(layers) + ")");
  need(heads >= 1 && d % heads == 0,
       "--heads must divide --d (got d " + std::to_string(d) + ", heads " + std::to_string(heads) + ")");
  need(head_size() % 2 == 0, "head size d/heads must be even for RoPE (got " + std::to_string(head_size()) + ")");
  need(seq >= 1, "--seq must be >= 1 (got " + std::to_string(seq) + ")");
  need(batch >= 1, "--batch must be >= 1 (got " + std::to_string(batch) + ")");
  need(hidden >= 1, "hidden width must be >= 1 (got " + std::to_string(hidden) + ")");
  switch (tokenizer) {
    case TokenizerKind::Byte:
      need(vocab == 256, "the byte tokenizer has vocab 256 (got " + std::to_string(vocab) + ")");
      break;
    case TokenizerKind::Bpe:
      need(vocab > 256 && vocab <= 65536,
           "a BPE vocab must be in 257..65536 (got " + std::to_string(vocab) + ")");
      break;
  }
}

int swiglu_hidden(int d) {
  const int h = static_cast<int>(std::lround(2.75 * d / 16.0)) * 16;
  return h < 16 ? 16 : h;
}

ModelConfig t0_config() {
  ModelConfig c;
  c.name = "T0";
  c.d = 64;
  c.layers = 2;
  c.heads = 4;
  c.seq = 64;
  c.batch = 4;
  c.vocab = 256;
  c.hidden = swiglu_hidden(64);
  c.tokenizer = TokenizerKind::Byte;
  return c;
}

ModelConfig t1_config() {
  ModelConfig c;
  c.name = "T1";
  c.d = 128;
  c.layers = 4;
  c.heads = 4;
  c.seq = 64;
  c.batch = 4;
  c.vocab = 512;
  c.hidden = swiglu_hidden(128);
  c.tokenizer = TokenizerKind::Bpe;
  return c;
}

ModelConfig config_by_name(std::string_view name) {
  if (name == "T0") return t0_config();
  if (name == "T1") return t1_config();
  if (name == "custom") {
    ModelConfig c = t0_config();
    c.name = "custom";
    return c;
  }
  throw std::invalid_argument("unknown --config '" + std::string(name) + "' (valid: T0, T1, custom)");
}

std::string_view name_of(ResidualScale r) {
  switch (r) {
    case ResidualScale::None: return "none";
    case ResidualScale::InvSqrt2L: return "inv-sqrt-2L";
    case ResidualScale::DeepNorm: return "deepnorm";
  }
  return "?";
}

ResidualScale parse_residual_scale(std::string_view text) {
  for (const ResidualScale r : {ResidualScale::None, ResidualScale::InvSqrt2L, ResidualScale::DeepNorm})
    if (text == name_of(r)) return r;
  throw std::invalid_argument("unknown --residual-scale '" + std::string(text) +
                              "' (valid: none, inv-sqrt-2L, deepnorm)");
}

ResidualRule residual_rule(ResidualScale kind, int layers) {
  ResidualRule r;
  r.kind = kind;
  const double two_l = 2.0 * layers;
  switch (kind) {
    case ResidualScale::None: break;
    case ResidualScale::InvSqrt2L: r.branch = 1.0 / std::sqrt(two_l); break;
    case ResidualScale::DeepNorm:
      r.alpha = std::pow(two_l, 0.25);
      r.branch = 1.0 / r.alpha;
      r.post_norm = true;
      r.post_norm_eps_factor = r.alpha * r.alpha;
      r.init_gain = std::pow(8.0 * layers, -0.25);
      break;
  }
  return r;
}

std::string_view name_of(InitRule r) {
  switch (r) {
    case InitRule::Normal: return "normal";
    case InitRule::Gpt2Scaled: return "gpt2-scaled";
  }
  return "?";
}

InitRule parse_init_rule(std::string_view text) {
  for (const InitRule r : {InitRule::Normal, InitRule::Gpt2Scaled})
    if (text == name_of(r)) return r;
  throw std::invalid_argument("unknown --init '" + std::string(text) + "' (valid: normal, gpt2-scaled)");
}

double learning_rate(const Recipe& r, std::int64_t step, std::int64_t total) {
  if (step < r.warmup) return r.lr * static_cast<double>(step + 1) / static_cast<double>(r.warmup);
  const std::int64_t decay_steps = total - 1 - r.warmup;
  if (decay_steps <= 0) return r.lr;
  const double progress = std::min(1.0, static_cast<double>(step - r.warmup) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return r.lr * (r.final_lr_ratio + (1.0 - r.final_lr_ratio) * cosine);
}

}  // namespace roundoff::studies::train
