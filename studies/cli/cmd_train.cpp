// `roundoff train`: train the Llama-family model under a precision policy (docs/trainer.md).
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "ops/policy.hpp"
#include "studies/cli/cli_checks.hpp"
#include "studies/common/memory.hpp"
#include "studies/common/out_dir.hpp"
#include "studies/cli/commands.hpp"
#include "studies/train/session.hpp"

namespace roundoff::cli {

namespace {

struct TrainArgs {
  std::string config = "T0", tokenizer, precision = "fp32", residual = "none", init = "normal", loss_scale = "auto";
  std::string ffn = "swiglu";
  std::string gqa_map = "block", defects = "none", recipe = "default", schedule = "updates";
  std::string eval_checkpoint, shadow_checkpoint;
  int accum = 1;
  std::int64_t total_steps = 0;
  bool decay_embedding = false;
  int d = 0, layers = 0, heads = 0, kv_heads = 0, seq = 0, batch = 0, vocab = 0;
  bool tie_embeddings = false;
  std::int64_t steps = 200, warmup = 100, eval_every = 0, eval_tokens = 0, shadow_every = 0, shadow_units = 4,
               telemetry_every = 50, checkpoint_every = 0, stop_after = 0, progress_every = 10;
  std::uint64_t seed = 1;
  double lr = 1e-3, clip = 1.0, weight_decay = 0.1;
  int threads = 1;
  std::int64_t pack_cache_mib = 512;
  std::string isa = "best";
  std::string out, corpus;
  bool resume = false, profile = false, check = false;
};

studies::train::ModelConfig build_config(const TrainArgs& a, const CLI::App& cmd) {
  namespace tr = studies::train;
  tr::ModelConfig c = tr::config_by_name(a.config);
  const bool custom = a.config == "custom";
  auto given = [&](const char* name) { return cmd.count(name) > 0; };
  for (const char* flag : {"--d", "--layers", "--heads", "--kv-heads", "--gqa-map", "--tie-embeddings", "--seq",
                           "--batch", "--vocab", "--tokenizer"})
    if (given(flag) && !custom)
      throw CliError(std::string("train: ") + flag + " is only valid with --config custom (--config " + a.config +
                     " is a preset; valid presets: " + tr::preset_config_names() + ")");
  if (given("--d")) {
    c.d = a.d;
    c.hidden = tr::swiglu_hidden(a.d);
  }
  if (given("--layers")) c.layers = a.layers;
  if (given("--heads")) c.heads = a.heads;
  if (given("--kv-heads")) {
    if (a.kv_heads < 1 || c.heads % a.kv_heads != 0)
      throw CliError("train: --kv-heads " + std::to_string(a.kv_heads) + " does not divide --heads " +
                     std::to_string(c.heads) + " (valid: a divisor of " + std::to_string(c.heads) + ")");
    c.kv_heads = a.kv_heads;
  }
  if (given("--gqa-map")) c.gqa_map = tr::parse_gqa_map(a.gqa_map);
  if (given("--tie-embeddings")) c.tie_embeddings = a.tie_embeddings;
  if (given("--seq")) c.seq = a.seq;
  if (given("--batch")) c.batch = a.batch;
  if (given("--tokenizer")) {
    if (a.tokenizer == "byte") {
      c.tokenizer = tr::TokenizerKind::Byte;
      c.vocab = 256;
    } else if (a.tokenizer == "bpe") {
      c.tokenizer = tr::TokenizerKind::Bpe;
      c.vocab = 512;
    } else {
      throw CliError("train: unknown --tokenizer '" + a.tokenizer + "' (valid: byte, bpe)");
    }
  }
  if (given("--vocab")) c.vocab = a.vocab;
  try {
    c.ffn = tr::parse_ffn(a.ffn);
  } catch (const std::invalid_argument& e) {
    throw CliError(std::string("train: ") + e.what());
  }
  c.defects = tr::parse_defects(a.defects);
  if (c.defects.gqa_mismatch && given("--gqa-map"))
    throw CliError("train: --gqa-map cannot be combined with --defect gqa-mismatch (it fixes the forward map to "
                   "cyclic and the backward map to block)");
  c.validate();
  if (c.defects.gqa_mismatch) {  // the defect is the cyclic forward against the block backward: they must differ
    bool differ = false;
    for (int h = 0; h < c.heads; ++h)
      differ |= tr::kv_head_of(tr::GqaMap::Cyclic, h, c.heads, c.kv_count()) !=
                tr::kv_head_of(tr::GqaMap::Block, h, c.heads, c.kv_count());
    if (!differ)
      throw CliError("train: --defect gqa-mismatch changes nothing on " + c.name + " (heads " +
                     std::to_string(c.heads) + ", kv-heads " + std::to_string(c.kv_count()) +
                     ": its cyclic and block maps agree); valid: a model with grouped-query attention, 1 < kv-heads "
                     "< heads (E11, A512, or --config custom --kv-heads)");
  }
  return c;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train the small Llama-family model under a --precision policy");
  cmd->footer(
      "Examples:\n"
      "  roundoff train --config T0 --precision fp32 --steps 200 --out runs/t0-fp32\n"
      "  roundoff train --config T0 --precision ane-fp16 --loss-scale static:256 --residual-scale inv-sqrt-2L "
      "--out runs/t0-ane\n"
      "  roundoff train --config custom --d 32 --layers 4 --heads 4 --precision amp-fp16 "
      "--loss-scale dynamic:65536,2,0.5,100 --out runs/d32\n"
      "  roundoff train ... --out runs/t0-ane --resume        # continue from runs/t0-ane/checkpoint.bin\n"
      "  roundoff train --config E11 --recipe autoane --precision ane-guide --defect gqa-mismatch,rmsnorm-bwd "
      "--steps 104 --out runs/e11-ane   # AutoANE's ANE-full mode (docs/trainer.md)\n"
      "Outputs: DIR/summary.json, curves.csv, telemetry.csv, events.csv, checkpoint.bin (docs/trainer.md).");
  cmd->add_option("--config", args->config, "T0 | T1 | E11 | A512 | custom (E11, A512: the AutoANE replica)")
      ->capture_default_str();
  cmd->add_option("--d", args->d, "custom: model width (SwiGLU hidden = 2.75·d rounded to 16)");
  cmd->add_option("--layers", args->layers, "custom: number of blocks");
  cmd->add_option("--heads", args->heads, "custom: attention heads (must divide d; d/heads even)");
  cmd->add_option("--ffn", args->ffn,
                  "feed-forward block: swiglu (Llama, default) | gelu (W2·gelu(W1·h), erf form) | gelu-tanh "
                  "(tanh form); hidden width as the config defines, no W3 under gelu")
      ->capture_default_str();
  cmd->add_option("--kv-heads", args->kv_heads, "custom: K/V heads of grouped-query attention (divides heads)");
  cmd->add_option("--gqa-map", args->gqa_map, "custom: query head h reads KV head block: h*kv/heads | cyclic: h mod kv")
      ->capture_default_str();
  cmd->add_flag("--tie-embeddings", args->tie_embeddings, "custom: the classifier is the embedding matrix");
  cmd->add_option("--seq", args->seq, "custom: context length");
  cmd->add_option("--batch", args->batch, "custom: sequences per step");
  cmd->add_option("--tokenizer", args->tokenizer, "custom: byte | bpe");
  cmd->add_option("--vocab", args->vocab, "custom: BPE vocabulary size (byte: 256)");
  cmd->add_option("--eval-checkpoint", args->eval_checkpoint,
                  "Do not train: evaluate the master weights of this checkpoint (another run's, any policy) on the "
                  "validation split under this command's config, precision and defects (refused for another model: "
                  "another shape, head split, residual scale or tokenizer); writes OUT/eval.json")
      ->check(CLI::ExistingFile);
  cmd->add_option("--shadow-checkpoint", args->shadow_checkpoint,
                  "Do not train: per-op attribution of the master weights of this checkpoint (another run's, any "
                  "policy) under this command's config, precision and defects: the MPFR-shadowed step on the probe "
                  "batch that --shadow-every records at the checkpoint's step; writes OUT/telemetry.csv and "
                  "OUT/shadow.json (refused when OUT holds a training run)")
      ->check(CLI::ExistingFile)
      ->excludes("--eval-checkpoint");
  cmd->add_option("--defect", args->defects,
                  "AutoANE's code defects, a comma list: gqa-mismatch, rmsnorm-bwd (default none); gqa-mismatch is refused "
                  "on a model whose cyclic and block GQA maps agree (no grouped-query attention, or kv-heads 1)")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision, "policy: preset, spec or file (see `roundoff policy`)")
      ->capture_default_str();
  cmd->add_option("--recipe", args->recipe,
                  "default | autoane: AutoANE's recipe (init autoane, residual inv-sqrt-2L, lr 3e-4, warmup 100 "
                  "micro-steps, accum 10, schedule autoane over --total-steps 10000, weight decay 0.1 on the "
                  "embedding too, loss scale static:256); a flag given explicitly overrides its part")
      ->capture_default_str();
  cmd->add_option("--accum", args->accum, "micro-steps per update, gradients summed (--steps counts updates)")
      ->capture_default_str();
  cmd->add_option("--schedule", args->schedule,
                  "updates: warmup+cosine in updates over --steps | autoane: in micro-steps over --total-steps, "
                  "evaluated at update steps")
      ->capture_default_str();
  cmd->add_option("--total-steps", args->total_steps, "schedule autoane: cosine horizon in micro-steps");
  cmd->add_flag("--decay-embedding", args->decay_embedding, "AdamW weight decay on the embedding as well");
  cmd->add_option("--residual-scale", args->residual, "none | inv-sqrt-2L | deepnorm")->capture_default_str();
  cmd->add_option("--init", args->init, "normal | gpt2-scaled (std/sqrt(2L) on Wo, W2)")->capture_default_str();
  cmd->add_option("--loss-scale", args->loss_scale,
                  "auto | none | static:S | dynamic[:init,growth,backoff,interval]")
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "optimisation steps")->capture_default_str()->check(integer_at_least(1));
  cmd->add_option("--seed", args->seed, "drives init, batches and stochastic rounding")
      ->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--lr", args->lr, "peak learning rate")->capture_default_str()->check(finite_at_least(0, true));
  cmd->add_option("--warmup", args->warmup, "linear warmup steps (capped at --steps)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--clip", args->clip, "global gradient-norm clip (0: off)")
      ->capture_default_str()
      ->check(finite_at_least(0, false));
  cmd->add_option("--weight-decay", args->weight_decay, "AdamW decay on matrices")
      ->capture_default_str()
      ->check(finite_at_least(0, false));
  cmd->add_option("--eval-every", args->eval_every, "evaluate val every N steps (0: at the end only)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--eval-tokens", args->eval_tokens, "evaluate on the first N val/test tokens (0: whole split; refused below --seq, where no window fits)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--shadow-every", args->shadow_every, "MPFR shadow on the probe batch every N steps (0: off)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--shadow-units", args->shadow_units, "rows/heads per shadowed op call")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--telemetry-every", args->telemetry_every, "activation/gradient telemetry every N steps")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "extra checkpoints every N steps (0: at evals)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--stop-after", args->stop_after, "stop after N steps of this invocation (sharding)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--progress-every", args->progress_every, "stderr progress every N steps (0: quiet)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--threads", args->threads, "OpenMP threads (results do not depend on it)")
      ->capture_default_str()
      ->check(thread_count());
  cmd->add_option("--pack-cache-mib", args->pack_cache_mib,
                  "MiB of packed GEMM weight panels kept between an update's micro-steps (memory against repacking; "
                  "no bit depends on it; 0: none)")
      ->capture_default_str()
      ->check(integer_in(0, std::int64_t{1} << 20));
  cmd->add_option("--isa", args->isa,
                  "the best instruction set the kernels may use: best (what the CPU has), avx512fp16, avx512, avx2 "
                  "or none (the generic code); for timing another CPU's tier, no bit depends on it")
      ->capture_default_str()
      ->check(isa_limit());
  cmd->add_option("--corpus", args->corpus, "prepared corpus: brown, kjv or children (under $ROUNDOFF_DATA), or a directory (default: brown, else the excerpt)");
  cmd->add_option("--out", args->out, "results directory")->required();
  cmd->add_flag("--resume", args->resume, "continue from DIR/checkpoint.bin");
  cmd->add_flag("--check", args->check,
                "only check the arguments (what `roundoff sweep --dry-run` runs for each run): exit 0 with one line, "
                "or 2 with the first error; reads no data and writes nothing");
  cmd->add_flag("--profile", args->profile,
                "time every step per (op, pass): table on stderr at the end and DIR/profile.csv (no bit changes)");
  cmd->callback([args, cmd] {
    namespace tr = studies::train;
    const TrainArgs& a = *args;
    studies::require_out_dir(a.out, "train: --out");
    tr::SessionSpec spec;
    std::string policy_source;
    spec.policy = ops::load_policy(a.precision, &policy_source);
    tr::TrainOptions& o = spec.options;
    o.config = build_config(a, *cmd);
    {  // a lower bound, in floating point (no overflow): master weights and gradients at 8 bytes each, AdamW m and v
       // at 4 (binary32 storage, every policy whose moments fit it; 8 under fp64)
      const tr::ModelConfig& c = o.config;
      const double d = c.d, kv = static_cast<double>(c.kv_count()) / c.heads;
      const double params = c.layers * (2 * d + d * d * (2 + 2 * kv) + 3 * d * c.hidden) +
                            static_cast<double>(c.tokens()) * d * (c.tie_embeddings ? 1 : 2) + d;
      char count[32];
      std::snprintf(count, sizeof count, "%.3g", params);
      studies::require_memory(params * (8 + 4 + 4 + 8),
                              "train: " + c.name + " (d " + std::to_string(c.d) + ", layers " +
                                  std::to_string(c.layers) + ")",
                              std::string(count) + " parameters: master weights and gradients at 8 bytes each, "
                                                   "AdamW moments at 4 or more",
                              "valid: a smaller --d or --layers");
    }
    auto given = [&](const char* name) { return cmd->count(name) > 0; };
    o.steps = a.steps;
    if (a.recipe == "autoane") {
      o.recipe = tr::autoane_recipe();
      o.residual = tr::ResidualScale::InvSqrt2L;
      o.loss_scale = tr::LossScaleSpec::parse("static:256");
    } else if (a.recipe != "default") {
      throw CliError("train: unknown --recipe '" + a.recipe + "' (valid: default, autoane)");
    } else {
      o.recipe.lr = a.lr;
      o.recipe.warmup = static_cast<int>(std::max<std::int64_t>(1, std::min(a.warmup, a.steps)));
      o.loss_scale = tr::resolve_loss_scale(a.loss_scale, spec.policy);
    }
    if (given("--residual-scale") || a.recipe == "default") o.residual = tr::parse_residual_scale(a.residual);
    if (given("--init") || a.recipe == "default") o.recipe.init = tr::parse_init_rule(a.init);
    if (given("--lr")) o.recipe.lr = a.lr;
    if (given("--warmup")) o.recipe.warmup = static_cast<int>(std::max<std::int64_t>(1, a.warmup));
    if (given("--clip") || a.recipe == "default") o.recipe.clip_norm = a.clip;
    if (given("--weight-decay") || a.recipe == "default") o.recipe.weight_decay = a.weight_decay;
    if (given("--loss-scale")) o.loss_scale = tr::resolve_loss_scale(a.loss_scale, spec.policy);
    if (given("--accum") || a.recipe == "default") {
      if (a.accum < 1)
        throw CliError("train: --accum must be >= 1 (micro-steps per update; got " + std::to_string(a.accum) + ")");
      o.recipe.accum = a.accum;
    }
    if (given("--schedule") || a.recipe == "default") o.recipe.schedule = tr::parse_schedule(a.schedule);
    if (given("--total-steps")) {
      if (a.total_steps < 1) throw CliError("train: --total-steps must be >= 1 (micro-steps)");
      o.recipe.total_steps = a.total_steps;
    }
    if (given("--decay-embedding")) o.recipe.decay_embedding = a.decay_embedding;
    if (o.recipe.schedule == tr::Schedule::AutoAne && o.recipe.total_steps == 0)
      o.recipe.total_steps = o.steps * o.recipe.accum;
    if (o.recipe.schedule == tr::Schedule::Updates && given("--total-steps"))
      throw CliError("train: --total-steps is the horizon of --schedule autoane (valid there only)");
    o.seed = a.seed;
    o.eval_every = a.eval_every;
    o.shadow_every = a.shadow_every;
    o.telemetry_every = a.telemetry_every;
    o.checkpoint_every = a.checkpoint_every;
    o.stop_after = a.stop_after;
    o.progress_every = a.progress_every;
    o.threads = a.threads;
    o.out = a.out;
    o.resume = a.resume;
    spec.eval_tokens = a.eval_tokens;
    spec.shadow_units = a.shadow_units;
    spec.profile = a.profile;
    spec.exec.pack_cache_bytes = static_cast<std::size_t>(a.pack_cache_mib) << 20;
    spec.exec.kernels.isa_limit = parse_isa_limit(a.isa);
    if (given("--corpus") && a.corpus.empty())
      throw CliError("train: --corpus must name a corpus (brown, kjv, children) or a directory (got an empty string)");
    if (!a.corpus.empty()) spec.corpus_dir = a.corpus;
    if (a.eval_tokens > 0 && a.eval_tokens < o.config.seq)  // also in load_train_data; here for --check
      throw CliError("train: --eval-tokens " + std::to_string(a.eval_tokens) +
                     " is shorter than one evaluation window of --seq " + std::to_string(o.config.seq) +
                     " tokens (valid: 0 for the whole split, or at least " + std::to_string(o.config.seq) + ")");
    if (a.check) {
      if (!a.eval_checkpoint.empty() && a.resume)
        throw CliError("train: --eval-checkpoint evaluates another run's weights; it cannot --resume");
      std::cout << "train: arguments valid (" << o.config.name << ", policy " << spec.policy.canonical() << ")\n";
      return;
    }
    omp_set_num_threads(a.threads);
    const tr::TrainData data = tr::load_train_data(o.config, spec.corpus_dir, a.eval_tokens);
    o.config.vocab = data.vocab;
    std::cerr << "train: " << o.config.name << " (" << data.tokenizer << ", " << data.source << "), policy "
              << spec.policy.canonical() << " (from " << policy_source << "), loss scale " << o.loss_scale.canonical()
              << ", ";
    if (!a.eval_checkpoint.empty() || !a.shadow_checkpoint.empty())  // no updates run: do not announce 200
      std::cerr << "no training (" << (a.eval_checkpoint.empty() ? "--shadow-checkpoint" : "--eval-checkpoint") << ")";
    else
      std::cerr << o.steps << " updates of " << o.recipe.accum << " micro-step(s) (" << o.steps * o.recipe.accum
                << " micro-steps)";
    std::cerr << ", seed " << o.seed << ", defects " << tr::defects_text(o.config.defects) << "\n";
    // The tail of what --eval-checkpoint and --shadow-checkpoint print: whose weights, used under what.
    auto print_foreign = [&a](const nlohmann::json& e, const char* used) {
      std::cout << "trained under " << e["checkpoint_policy"] << "; " << used << " under " << e["policy"]
                << ", defects " << e["defects"] << ")\nweights_sha256 " << e["weights_sha256"].get<std::string>()
                << "\nresults in " << a.out << "\n";
    };
    if (!a.eval_checkpoint.empty()) {
      if (a.resume) throw CliError("train: --eval-checkpoint evaluates another run's weights; it cannot --resume");
      const nlohmann::json e = tr::evaluate_checkpoint(spec, data, a.eval_checkpoint);
      std::cout << "val_loss " << e["val_loss"] << "  val_bpb " << e["val_bpb"] << "  (checkpoint step "
                << e["checkpoint_step"] << ", ";
      print_foreign(e, "evaluated");
      return;
    }
    if (!a.shadow_checkpoint.empty()) {
      if (a.resume) throw CliError("train: --shadow-checkpoint attributes another run's weights; it cannot --resume");
      const nlohmann::json e = tr::shadow_checkpoint(spec, data, a.shadow_checkpoint);
      std::cout << "shadow records " << e["records"] << " at step " << e["checkpoint_step"] << " (loss scale "
                << e["loss_scale"] << ", ";
      print_foreign(e, "attributed");
      return;
    }
    const nlohmann::json s = tr::run_session(spec, data, &std::cerr);
    std::cout << "updates " << s["steps_completed"] << "/" << s["steps"] << " (micro-steps "
              << s["micro_steps_completed"] << ")  autoane_train_loss " << s["autoane_train_loss"];
    if (s.contains("val_loss_fp32"))
      std::cout << "  val_loss_fp32 " << s["val_loss_fp32"] << "  val_loss_own " << s["val_loss_own"]
                << "  val_bpb_fp32 " << s["val_bpb_fp32"];
    std::cout << "  skipped " << s["skipped_steps"] << "  first_nonfinite_step " << s["first_nonfinite_step"]
              << "\nweights_sha256 " << s["weights_sha256"].get<std::string>() << "\nresults in " << a.out << "\n";
  });
}

}  // namespace roundoff::cli
