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
  need(kv_heads >= 0 && heads % kv_count() == 0,
       "--kv-heads must divide --heads (got heads " + std::to_string(heads) + ", kv-heads " +
           std::to_string(kv_heads) + "; valid: the divisors of " + std::to_string(heads) + ")");
  need(seq >= 1, "--seq must be >= 1 (got " + std::to_string(seq) + ")");
  need(batch >= 1, "--batch must be >= 1 (got " + std::to_string(batch) + ")");
  need(hidden >= 1, "hidden width must be >= 1 (got " + std::to_string(hidden) + ")");
  const int tv = tokens();
  switch (tokenizer) {
    case TokenizerKind::Byte:
      need(tv == 256, "the byte tokenizer has vocab 256 (got " + std::to_string(tv) + ")");
      break;
    case TokenizerKind::Bpe:
      need(tv > 256 && tv <= 65536, "a BPE vocab must be in 257..65536 (got " + std::to_string(tv) + ")");
      break;
  }
  if (compact_vocab)
    need(vocab >= 2 && vocab <= tv, "a compacted vocab must be in 2.." + std::to_string(tv) + " (got " +
                                        std::to_string(vocab) + ")");
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

ModelConfig e11_config() {
  ModelConfig c;
  c.name = "E11";
  c.d = 1024;
  c.layers = 4;
  c.heads = 16;
  c.kv_heads = 4;
  c.seq = 256;
  c.batch = 1;
  c.hidden = 2816;
  c.tokenizer = TokenizerKind::Bpe;
  c.tie_embeddings = true;
  c.compact_vocab = true;
  c.tokenizer_vocab = kReplicaBpeVocab;
  c.vocab = kReplicaBpeVocab;
  return c;
}

ModelConfig a512_config() {
  ModelConfig c = e11_config();
  c.name = "A512";
  c.d = 512;
  c.heads = 8;
  c.kv_heads = 2;
  c.seq = 128;
  c.hidden = 1408;
  return c;
}

ModelConfig config_by_name(std::string_view name) {
  if (name == "T0") return t0_config();
  if (name == "T1") return t1_config();
  if (name == "E11") return e11_config();
  if (name == "A512") return a512_config();
  if (name == "custom") {
    ModelConfig c = t0_config();
    c.name = "custom";
    return c;
  }
  throw std::invalid_argument("unknown --config '" + std::string(name) + "' (valid: " + preset_config_names() +
                              ", custom)");
}

std::string preset_config_names() { return "T0, T1, E11, A512"; }

std::string_view name_of(GqaMap m) {
  switch (m) {
    case GqaMap::Block: return "block";
    case GqaMap::Cyclic: return "cyclic";
  }
  return "?";
}

GqaMap parse_gqa_map(std::string_view text) {
  for (const GqaMap m : {GqaMap::Block, GqaMap::Cyclic})
    if (text == name_of(m)) return m;
  throw std::invalid_argument("unknown --gqa-map '" + std::string(text) + "' (valid: block, cyclic)");
}

std::string_view name_of(Ffn f) {
  switch (f) {
    case Ffn::SwiGlu: return "swiglu";
    case Ffn::Gelu: return "gelu";
    case Ffn::GeluTanh: return "gelu-tanh";
  }
  return "?";
}

Ffn parse_ffn(std::string_view text) {
  for (const Ffn f : {Ffn::SwiGlu, Ffn::Gelu, Ffn::GeluTanh})
    if (text == name_of(f)) return f;
  throw std::invalid_argument("unknown --ffn '" + std::string(text) + "' (valid: swiglu, gelu, gelu-tanh)");
}

int kv_head_of(GqaMap m, int h, int heads, int kv_heads) {
  switch (m) {
    case GqaMap::Block: return h * kv_heads / heads;
    case GqaMap::Cyclic: return h % kv_heads;
  }
  return 0;
}

std::string defects_text(const Defects& d) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ",";
    s += name;
  };
  add(d.gqa_mismatch, "gqa-mismatch");
  add(d.rmsnorm_bwd, "rmsnorm-bwd");
  return s.empty() ? "none" : s;
}

Defects parse_defects(std::string_view text) {
  Defects d;
  if (text.empty() || text == "none") return d;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item == "gqa-mismatch") {
      d.gqa_mismatch = true;
    } else if (item == "rmsnorm-bwd") {
      d.rmsnorm_bwd = true;
    } else {
      throw std::invalid_argument("unknown --defect '" + std::string(item) +
                                  "' (valid: a comma list of gqa-mismatch, rmsnorm-bwd; or none)");
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return d;
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

std::string_view name_of(Schedule s) {
  switch (s) {
    case Schedule::Updates: return "updates";
    case Schedule::AutoAne: return "autoane";
  }
  return "?";
}

Schedule parse_schedule(std::string_view text) {
  for (const Schedule s : {Schedule::Updates, Schedule::AutoAne})
    if (text == name_of(s)) return s;
  throw std::invalid_argument("unknown --schedule '" + std::string(text) + "' (valid: updates, autoane)");
}

Recipe autoane_recipe() {
  Recipe r;
  r.lr = 3e-4;
  r.warmup = 100;
  r.final_lr_ratio = 0.1;
  r.beta1 = 0.9;
  r.beta2 = 0.95;
  r.eps = 1e-8;
  r.weight_decay = 0.1;
  r.clip_norm = 1.0;
  r.init = InitRule::AutoAne;
  r.decay_embedding = true;
  r.accum = 10;
  r.schedule = Schedule::AutoAne;
  r.total_steps = 10000;
  return r;
}

std::string_view name_of(InitRule r) {
  switch (r) {
    case InitRule::Normal: return "normal";
    case InitRule::Gpt2Scaled: return "gpt2-scaled";
    case InitRule::AutoAne: return "autoane";
  }
  return "?";
}

InitRule parse_init_rule(std::string_view text) {
  for (const InitRule r : {InitRule::Normal, InitRule::Gpt2Scaled, InitRule::AutoAne})
    if (text == name_of(r)) return r;
  throw std::invalid_argument("unknown --init '" + std::string(text) + "' (valid: normal, gpt2-scaled, autoane)");
}

double learning_rate(const Recipe& r, std::int64_t step, std::int64_t total) {
  if (step < r.warmup) return r.lr * static_cast<double>(step + 1) / static_cast<double>(r.warmup);
  const std::int64_t decay_steps = total - 1 - r.warmup;
  if (decay_steps <= 0) return r.lr;
  const double progress = std::min(1.0, static_cast<double>(step - r.warmup) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return r.lr * (r.final_lr_ratio + (1.0 - r.final_lr_ratio) * cosine);
}

double learning_rate_autoane(const Recipe& r, std::int64_t micro) {
  if (micro < r.warmup) return r.lr * static_cast<double>(micro + 1) / static_cast<double>(r.warmup);
  const std::int64_t span = r.total_steps - r.warmup;
  const double ratio =
      span <= 0 ? 1.0 : std::min(1.0, static_cast<double>(micro - r.warmup) / static_cast<double>(span));
  const double lr_min = r.final_lr_ratio * r.lr;
  return lr_min + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (r.lr - lr_min);
}

}  // namespace roundoff::studies::train
