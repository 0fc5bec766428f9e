// The training loop.
#include "studies/train/trainer.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <ostream>
#include <stdexcept>
#include <utility>

#include "numerics/round_span.hpp"
#include "studies/common/huge_pages.hpp"
#include "studies/common/provenance.hpp"
#include "studies/data/batches.hpp"
#include "studies/data/sha256.hpp"
#include "studies/train/checkpoint.hpp"
#include "studies/train/fp8_checkpoint.hpp"
#include "studies/train/grad_telemetry.hpp"
#include "studies/train/optimizer.hpp"

namespace roundoff::studies::train {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  return buf;
}

}  // namespace

nlohmann::json config_json(const ModelConfig& c) {
  nlohmann::json j = {{"name", c.name},
          {"d", c.d},
          {"layers", c.layers},
          {"heads", c.heads},
          {"kv_heads", c.kv_count()},
          {"gqa_map", std::string(name_of(c.gqa_map))},
          {"seq", c.seq},
          {"batch", c.batch},
          {"vocab", c.vocab},
          {"hidden", c.hidden},
          {"tokenizer", std::string(name_of(c.tokenizer))},
          {"tie_embeddings", c.tie_embeddings},
          {"compact_vocab", c.compact_vocab},
          {"tokenizer_vocab", c.tokens()},
          {"defects", defects_text(c.defects)},
          {"norm_eps", c.norm_eps},
          {"rope_base", c.rope_base}};
  // Only a non-default FFN is named, so that every SwiGLU run keeps its identity (and its checkpoints resume).
  if (c.ffn != Ffn::SwiGlu) j["ffn"] = std::string(name_of(c.ffn));
  return j;
}

namespace {

nlohmann::json recipe_json(const Recipe& r) {
  return {{"lr", r.lr},
          {"warmup", r.warmup},
          {"final_lr_ratio", r.final_lr_ratio},
          {"beta1", r.beta1},
          {"beta2", r.beta2},
          {"eps", r.eps},
          {"weight_decay", r.weight_decay},
          {"clip_norm", r.clip_norm},
          {"init_std", r.init_std},
          {"init", std::string(name_of(r.init))},
          {"decay_embedding", r.decay_embedding},
          {"accum", r.accum},
          {"schedule", std::string(name_of(r.schedule))},
          {"total_steps", r.total_steps}};
}

/// "KEY: checkpoint A, this run B" for the first key (in key order, dotted for nested objects) whose values
/// differ between the two run identities; "" when they are equal.
std::string first_difference(const nlohmann::json& saved, const nlohmann::json& now, const std::string& prefix) {
  if (saved == now) return {};
  if (saved.is_object() && now.is_object()) {
    for (const auto& [key, value] : saved.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (!now.contains(key)) return path + ": in the checkpoint but not in this run";
      if (std::string d = first_difference(value, now.at(key), path); !d.empty()) return d;
    }
    for (const auto& [key, value] : now.items())
      if (!saved.contains(key)) return (prefix.empty() ? key : prefix + "." + key) + ": in this run but not in the checkpoint";
  }
  return (prefix.empty() ? std::string("identity") : prefix) + ": checkpoint " + saved.dump() + ", this run " +
         now.dump();
}

}  // namespace

double update_learning_rate(const Recipe& r, std::int64_t update, std::int64_t steps) {
  switch (r.schedule) {
    case Schedule::Updates: return learning_rate(r, update, steps);
    case Schedule::AutoAne: return learning_rate_autoane(r, (update + 1) * r.accum - 1);
  }
  return r.lr;
}

EvalSet make_eval_set(std::span<const std::int32_t> tokens, int seq, int batch, std::int64_t max_tokens,
                      const std::function<std::int64_t(std::int32_t)>& bytes_of) {
  EvalSet set;
  const auto windows = data::validation_windows(tokens.size(), static_cast<std::size_t>(seq));
  Batch current;
  auto flush = [&] {
    if (current.batch > 0) set.batches.push_back(std::move(current));
    current = Batch{};
  };
  for (const data::EvalWindow& w : windows) {
    const auto len = static_cast<int>(w.length);
    if (max_tokens > 0 && set.tokens + len > max_tokens) break;
    if (current.batch > 0 && (current.seq != len || current.batch == batch)) flush();
    current.seq = len;
    ++current.batch;
    for (std::size_t i = 0; i < w.length; ++i) {
      current.inputs.push_back(tokens[w.start + i]);
      current.targets.push_back(tokens[w.start + i + 1]);
      set.bytes += bytes_of(tokens[w.start + i + 1]);
    }
    set.tokens += len;
  }
  flush();
  return set;
}

Batch train_batch(std::span<const std::int32_t> train, int seq, int batch, std::uint64_t seed,
                  std::int64_t step) {
  const data::BatchSampler sampler(train.size(), static_cast<std::size_t>(seq), static_cast<std::size_t>(batch),
                                   seed);
  const std::vector<data::Token> windows = sampler.batch(train, static_cast<std::uint64_t>(step));
  Batch b;
  b.batch = batch;
  b.seq = seq;
  const auto S = static_cast<std::size_t>(seq);
  for (std::size_t r = 0; r < static_cast<std::size_t>(batch); ++r)
    for (std::size_t t = 0; t < S; ++t) {
      b.inputs.push_back(windows[r * (S + 1) + t]);
      b.targets.push_back(windows[r * (S + 1) + t + 1]);
    }
  return b;
}

Trainer::Trainer(TrainOptions opts, Model& own, Model& fp32, const TrainData& data, std::ostream* progress,
                 ShadowHook shadow)
    : opts_(std::move(opts)),
      own_(own),
      fp32_(fp32),
      data_(data),
      progress_(progress),
      shadow_(std::move(shadow)),
      layout_(param_layout(opts_.config)),
      scaler_(opts_.loss_scale) {
  opts_.config.validate();
  if (opts_.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  if (opts_.recipe.accum < 1)
    throw std::invalid_argument("--accum must be >= 1 (micro-steps per update; got " +
                                std::to_string(opts_.recipe.accum) + ")");
  if (opts_.recipe.warmup < 1) throw std::invalid_argument("--warmup must be >= 1");
  if (!(opts_.recipe.lr > 0)) throw std::invalid_argument("--lr must be > 0");
}

nlohmann::json Trainer::identity() const {
  return {{"config", config_json(opts_.config)},
          {"recipe", recipe_json(opts_.recipe)},
          {"policy", opts_.policy},
          {"residual_scale", std::string(name_of(opts_.residual))},
          {"loss_scale", opts_.loss_scale.canonical()},
          {"steps", opts_.steps},
          {"seed", opts_.seed},
          {"data_source", data_.source},
          {"tokenizer", data_.tokenizer},
          {"train_tokens", data_.train.size()}};
}

void Trainer::start() {
  const auto ckpt = opts_.out / "checkpoint.bin";
  const bool have_out = !opts_.out.empty();
  const bool exists = have_out && std::filesystem::exists(ckpt);
  if (exists && !opts_.resume)
    throw std::runtime_error("checkpoint " + ckpt.string() +
                             " already exists; pass --resume to continue that run or choose another --out");
  if (opts_.resume && !exists)
    throw std::runtime_error("--resume: no checkpoint at " + ckpt.string());
  if (!opts_.resume && have_out) refuse_other_runs_results();
  if (opts_.resume) {
    Checkpoint ck = load_checkpoint(ckpt, own_.moments_storage());
    const auto& meta = ck.meta;
    if (const std::string diff = first_difference(meta.at("identity"), identity(), ""); !diff.empty())
      throw std::runtime_error("checkpoint " + ckpt.string() + " belongs to a different run: " + diff);
    // The corpus itself, not only its manifest's `source` label (checkpoints written before this was recorded
    // carry no hashes and are compared by the label alone).
    if (meta.contains("data_sha256") && !meta.at("data_sha256").is_null() && !data_.split_sha256.is_null())
      if (const std::string diff = first_difference(meta.at("data_sha256"), data_.split_sha256, "data_sha256");
          !diff.empty())
        throw std::runtime_error("checkpoint " + ckpt.string() + " was trained on another corpus: " + diff);
    if (ck.master.size() != layout_.total)
      throw std::runtime_error("checkpoint " + ckpt.string() + " has the wrong number of parameters");
    master_ = ParamStore(own_.master_storage(), layout_.total);
    try {
      master_.write(0, ck.master);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("checkpoint " + ckpt.string() + " does not fit this run's storage: master weights " +
                               e.what() + " (the run's policy stores its masters so); refusing to use it");
    }
    std::vector<double>().swap(ck.master);
    m_ = std::move(ck.m);
    v_ = std::move(ck.v);
    step_ = meta.at("step").get<std::int64_t>();
    adam_t_ = meta.at("adam_t").get<std::int64_t>();
    skipped_ = meta.at("skipped_steps").get<std::int64_t>();
    scaler_.restore(meta.at("loss_scale_value").get<double>(), meta.at("loss_scale_clean_steps").get<std::int64_t>());
    if (meta.contains("fp8_scaling") && own_.fp8_state() != nullptr)
      load_fp8_state(meta.at("fp8_scaling"), *own_.fp8_state(), ckpt);
    if (!meta.at("first_nonfinite_step").is_null())
      first_nonfinite_step_ = meta.at("first_nonfinite_step").get<std::int64_t>();
    first_nonfinite_op_ = meta.at("first_nonfinite_op").get<std::string>();
    collapsed_norm_steps_ = meta.at("collapsed_norm_steps").get<std::int64_t>();
    if (!meta.at("first_collapsed_norm_step").is_null())
      first_collapsed_norm_step_ = meta.at("first_collapsed_norm_step").get<std::int64_t>();
    first_collapsed_norm_ = meta.at("first_collapsed_norm").get<std::string>();
    diverged_ = meta.at("diverged").get<bool>();
    last_train_loss_ = meta.at("last_train_loss").get<double>();
    micro_losses_ = meta.at("micro_losses").get<std::deque<double>>();
    log_ = RunLog::from_json(meta.at("log"));
    // Checkpoints written before segment provenance existed: their updates are attributed to an unknown binary.
    past_segments_ = meta.contains("segments")
                         ? meta.at("segments")
                         : nlohmann::json::array({{{"first_update", 0},
                                                   {"last_update", step_},
                                                   {"git_revision", nullptr},
                                                   {"build_flags", nullptr},
                                                   {"command", nullptr}}});
  } else {
    master_ = ParamStore(own_.master_storage(), layout_.total);
    // The initial weights are binary32 values (init_params rounds them to fp32), so any storage holds them.
    master_.write(0, init_params(opts_.config, opts_.recipe, residual_rule(opts_.residual, opts_.config.layers),
                                 opts_.seed));
    m_ = ParamStore(own_.moments_storage(), layout_.total);
    v_ = ParamStore(own_.moments_storage(), layout_.total);
    log_.curve(0, "loss_scale", scaler_.scale());
  }
  grads_ = ParamStore(own_.grads_storage(), layout_.total);
  // Binary32 gradients of an accumulated update are summed into grads_ slice by slice as the backward completes
  // them (no micro-step store: Transformer's DirectSink); binary64 ones go through micro_grads_.
  if (opts_.recipe.accum > 1 && own_.grads_storage() == StorageKind::Binary64)
    micro_grads_ = ParamStore(own_.grads_storage(), layout_.total);
  weights_changed();
  started_at_ = step_;
  wall_start_ = now_seconds();
}

void Trainer::refuse_other_runs_results() const {
  const auto path = opts_.out / "summary.json";
  if (!std::filesystem::exists(path)) return;
  nlohmann::json old;
  try {
    std::ifstream in(path);
    old = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    throw std::runtime_error(opts_.out.string() + " holds a summary.json that is not a run summary; choose another "
                             "--out or remove it");
  }
  // Compared on the identity keys both hold (a summary of an older build may lack some).
  const nlohmann::json full = identity();
  nlohmann::json now = full, was = nlohmann::json::object();
  for (const auto& [key, value] : full.items()) {
    if (old.is_object() && old.contains(key)) was[key] = old.at(key);
    else now.erase(key);
  }
  std::string diff = first_difference(was, now, "");
  if (diff.empty()) return;  // the same run again: its results are recomputed bit for bit
  if (const auto at = diff.find(": checkpoint "); at != std::string::npos) diff.replace(at, 13, ": that run ");
  throw std::runtime_error(opts_.out.string() + " holds the results of another run (" + diff +
                           ") and no checkpoint.bin to resume it; choose another --out or remove its files");
}

bool Trainer::done() const {
  return step_ >= opts_.steps || diverged_ || (opts_.stop_after > 0 && step_ - started_at_ >= opts_.stop_after);
}

void Trainer::step() {
  const std::int64_t s = step_;
  const double scale = scaler_.scale();
  StepTelemetry tel;
  tel.log = &log_;
  tel.detailed = opts_.telemetry_every > 0 && s % opts_.telemetry_every == 0;
  tel.check_outputs = false;  // the first non-finite op is named by name_first_nonfinite, where one is needed
  const auto t_step = ops::Profile::Clock::now();
  const double cpu_step = profile_ != nullptr ? ops::process_cpu_seconds() : 0.0;
  if (shadow_ && opts_.shadow_every > 0 && s % opts_.shadow_every == 0)
    ops::timed_phase(profile_, "trainer: shadow attribution", [&] {
      std::vector<double> copy;
      shadow_(s, std::as_const(master_).view(0, master_.size(), copy), scale, log_);
    });

  own_.set_profile(profile_);
  const double loss = micro_steps(s, scale, tel);
  tel.step = s;
  bool grads_finite = false;
  std::optional<double> norm;  // the global norm, when the finiteness check computed it
  ops::timed_phase(profile_, "trainer: unscale", [&] {
    const auto fused = unscale_with_norm(grads_, scale, opts_.recipe.accum, opts_.update_format);
    if (fused) norm = fused->norm;
    grads_finite = fused ? fused->finite : unscale_gradients(grads_, scale, opts_.recipe.accum, opts_.update_format);
  });
  const bool finite = grads_finite && std::isfinite(loss);
  // The name is read by the first non-finite step's event and by every skipped update's.
  const bool skipped = scaler_.skips(grads_finite);
  if ((!finite && !first_nonfinite_step_) || skipped)
    ops::timed_phase(profile_, "trainer: non-finite replay", [&] { name_first_nonfinite(s, scale, skipped, tel); });
  record_nonfinite(s, tel, finite);
  log_.curve(s, "train_loss", loss);
  const double lr = update_learning_rate(opts_.recipe, s, opts_.steps);
  if (skipped) skip_update(s, tel, scale);
  else update(s, tel, lr, norm);
  if (const auto change = scaler_.update(s, grads_finite)) {
    log_.event(s, "loss_scale", std::string(change->reason) + " " + format_value(change->from) + " -> " +
                                    format_value(change->to));
    log_.curve(s + 1, "loss_scale", change->to);
  }
  last_train_loss_ = loss;
  step_ = s + 1;
  own_.set_profile(nullptr);
  if (profile_ != nullptr) profile_->add_step(ops::seconds_since(t_step), ops::process_cpu_seconds() - cpu_step);

  evaluate_and_save_if_due();
  print_progress(loss, lr);
}

double Trainer::micro_steps(std::int64_t s, double scale, StepTelemetry& tel) {
  // accum micro-steps (micro-step index m = s·accum + j: its batch, and the key of its stochastic roundings),
  // their gradients summed (accumulate_gradients); the loss of the update is the mean of theirs.
  const ModelConfig& c = opts_.config;
  const int accum = opts_.recipe.accum;
  double loss = 0;
  fp8_before_.clear();
  update_losses_.clear();
  for (int j = 0; j < accum; ++j) {
    if (const ops::Fp8ScalingState* st = own_.fp8_state(); st != nullptr) fp8_before_.push_back(*st);
    const std::int64_t micro = s * accum + j;
    const Batch batch = train_batch(data_.train, c.seq, c.batch, opts_.seed, micro);
    tel.step = micro;
    const bool detailed = tel.detailed;
    tel.detailed = detailed && j == 0;
    // A micro-step of an accumulated update sums its gradients into grads_ in the model's gradient pass
    // (loss_and_grad_accumulate), except when the underflow telemetry must read them first.
    const bool fused = accum > 1 && !tel.detailed;
    // Unfused with accum > 1 is the first micro-step (a telemetry step's), whose sum is its own gradient:
    // without a micro-step store it is written into grads_ directly.
    const bool into_total = gradients_in_total();
    ParamStore no_store;
    const double micro_loss =
        fused ? own_.loss_and_grad_accumulate_stored(batch, master_, scale, into_total ? no_store : micro_grads_,
                                                     grads_, j == 0, tel)
              : own_.loss_and_grad_stored(batch, master_, scale, into_total ? grads_ : micro_grads_, tel);
    if (tel.detailed)
      ops::timed_phase(profile_, "trainer: underflow telemetry",
                       [&] { log_gradient_underflow(s, batch, scale); });
    tel.detailed = detailed;
    if (accum > 1 && !fused && !into_total)
      ops::timed_phase(profile_, "trainer: accumulate", [&] { accumulate_gradients(grads_, micro_grads_, j == 0); });
    loss += micro_loss;
    update_losses_.push_back(micro_loss);
    micro_losses_.push_back(micro_loss);
    if (micro_losses_.size() > kAutoAneWindow) micro_losses_.pop_front();
  }
  return loss / accum;
}

void Trainer::name_first_nonfinite(std::int64_t s, double scale, bool skipped, StepTelemetry& tel) {
  const ModelConfig& c = opts_.config;
  // Gradients with a micro-step store (binary64, accum > 1) go there: it is dead once summed into grads_. Else into
  // grads_ when the update is skipped (its gradients are dropped; the next update overwrites them), and only when
  // they are still to be applied into a store of their own, freed after (a run without loss scaling, once).
  ParamStore own_store;
  ParamStore& scratch = !gradients_in_total() ? micro_grads_ : skipped ? grads_ : own_store;
  if (scratch.size() != layout_.total) scratch = ParamStore(grads_.kind(), layout_.total);
  StepTelemetry named;  // no log, no detailed telemetry: only the scans
  ops::Fp8ScalingState* fp8 = own_.fp8_state();
  const std::optional<ops::Fp8ScalingState> fp8_after = fp8 != nullptr ? std::optional(*fp8) : std::nullopt;
  own_.set_profile(nullptr);  // the phase times this pass; its op calls are not the step's
  for (int j = 0; j < opts_.recipe.accum && named.first_nonfinite_op.empty(); ++j) {
    const std::int64_t micro = s * opts_.recipe.accum + j;
    named.step = micro;
    if (fp8 != nullptr) *fp8 = fp8_before_.at(static_cast<std::size_t>(j));
    const double again = own_.loss_and_grad_stored(train_batch(data_.train, c.seq, c.batch, opts_.seed, micro),
                                                   master_, scale, scratch, named);
    // The replay must be the step's own pass: its loss has the bits the micro-step had (or both are NaN).
    const double was = update_losses_.at(static_cast<std::size_t>(j));
    if (std::bit_cast<std::uint64_t>(again) != std::bit_cast<std::uint64_t>(was) &&
        !(std::isnan(again) && std::isnan(was)))
      throw std::logic_error("Trainer: the replay of update " + std::to_string(s) + "'s micro-step " +
                             std::to_string(j) + " computed another loss than the micro-step did");
  }
  if (fp8 != nullptr) *fp8 = *fp8_after;
  own_.set_profile(profile_);
  tel.first_nonfinite_op = named.first_nonfinite_op;
}

void Trainer::record_nonfinite(std::int64_t s, const StepTelemetry& tel, bool finite) {
  if (!finite && !first_nonfinite_step_) {
    first_nonfinite_step_ = s;
    first_nonfinite_op_ = tel.first_nonfinite_op.empty() ? std::string("unknown") : tel.first_nonfinite_op;
    log_.event(s, "nonfinite", "first non-finite value in " + first_nonfinite_op_);
  }
  if (!tel.first_collapsed_norm.empty()) {
    ++collapsed_norm_steps_;
    if (!first_collapsed_norm_step_) {
      first_collapsed_norm_step_ = s;
      first_collapsed_norm_ = tel.first_collapsed_norm;
      log_.event(s, "norm_collapse", "sum of squares overflowed, rows became zeros, first in " + first_collapsed_norm_);
    }
  }
}

void Trainer::skip_update(std::int64_t s, const StepTelemetry& tel, double scale) {
  ++skipped_;
  log_.event(s, "skip", "non-finite gradients at loss scale " + format_value(scale) +
                            (tel.first_nonfinite_op.empty() ? "" : " (first in " + tel.first_nonfinite_op + ")"));
  log_.curve(s, "skipped", 1.0);
}

void Trainer::update(std::int64_t s, const StepTelemetry& tel, double lr, std::optional<double> fused_norm) {
  double norm = 0;
  ops::timed_phase(profile_, "trainer: global norm",
                   [&] { norm = fused_norm ? *fused_norm : global_norm(grads_, opts_.update_format); });
  const double coef = clip_coefficient(norm, opts_.recipe.clip_norm, opts_.update_format);
  ++adam_t_;
  // Tensor by tensor, so the stagnation telemetry holds one tensor's weights from before its update, not
  // a copy of all of them (the same updates in the same order as one whole update).
  for (const ParamTensor t : kAllParamTensors) {
    if (tel.detailed)
      ops::timed_phase(profile_, "trainer: stagnation telemetry", [&] {
        before_.resize(layout_.size_of(t));
        master_.read(layout_.offset_of(t), before_);
      });
    own_.update_tensor_stored(t, master_, m_, v_, grads_, opts_.recipe, lr, adam_t_, coef);
    if (tel.detailed) ops::timed_phase(profile_, "trainer: stagnation telemetry", [&] { log_stagnation(s, t); });
  }
  weights_changed();
  log_.curve(s, "grad_norm", norm);
  log_.curve(s, "lr", lr);
  if (!master_.all_finite()) {
    diverged_ = true;
    if (!first_nonfinite_step_) {
      first_nonfinite_step_ = s;
      first_nonfinite_op_ = "adamw.fwd(master)";
      log_.event(s, "nonfinite", "first non-finite value in " + first_nonfinite_op_);
    }
    log_.event(s, "diverged", "master weights became non-finite; run stopped");
  }
}

void Trainer::evaluate_and_save_if_due() {
  const bool eval_due = opts_.eval_every > 0 && step_ % opts_.eval_every == 0 && step_ < opts_.steps;
  if (eval_due) evaluate_and_log();
  const bool ckpt_due = (opts_.checkpoint_every > 0 && step_ % opts_.checkpoint_every == 0) || eval_due ||
                        step_ == opts_.steps || done();
  if (ckpt_due) save();
}

void Trainer::print_progress(double loss, double lr) const {
  if (!progress_ || opts_.progress_every <= 0 || (step_ % opts_.progress_every != 0 && step_ != opts_.steps)) return;
  const ModelConfig& c = opts_.config;
  const double elapsed = now_seconds() - wall_start_;
  const double done_here = static_cast<double>(step_ - started_at_);
  const double tok_s = done_here * opts_.recipe.accum * c.batch * c.seq / std::max(elapsed, 1e-9);
  const double eta = elapsed / done_here * static_cast<double>(opts_.steps - step_);
  char line[240];
  std::snprintf(line, sizeof line,
                "update %lld/%lld (micro-step %lld)  loss %.4f  lr %.2e  scale %g  %.0f tok/s  ETA %s\n",
                static_cast<long long>(step_), static_cast<long long>(opts_.steps),
                static_cast<long long>(step_ * opts_.recipe.accum), loss, lr, scaler_.scale(), tok_s,
                duration_text(eta).c_str());
  *progress_ << line << std::flush;
}

void Trainer::log_gradient_underflow(std::int64_t s, const Batch& batch, double loss_scale) {
  // The own micro-step's gradients are in grads_ (gradients_in_total) or micro_grads_ (binary64 gradients with
  // accum > 1, where grads_ is dead at the first micro-step: accumulate_gradients overwrites it next). The fp32
  // pass writes into the other buffer.
  // Without a micro-step store (binary32 gradients, accum > 1) the first micro-step's gradients are in grads_.
  const bool in_grads = gradients_in_total();
  const ParamStore& own = in_grads ? grads_ : micro_grads_;
  const ParamStore* g32 = &own;
  // When the fp32 model is the own model (its policy is fp32's: deterministic, no step-keyed rounding), the
  // fp32 pass at loss scale 1 would repeat the own pass bit for bit: its gradients are the own ones.
  if (&fp32_ != &own_ || loss_scale != 1.0) {
    if (in_grads && micro_grads_.size() != layout_.total) micro_grads_ = ParamStore(grads_.kind(), layout_.total);
    ParamStore& out = in_grads ? micro_grads_ : grads_;
    StepTelemetry quiet;
    quiet.step = s;
    quiet.check_outputs = false;  // read for its gradients only
    fp32_.set_profile(nullptr);  // the phase times this pass; its op calls are not the step's
    make_room_for(fp32_);
    fp32_.loss_and_grad_stored(batch, master_, 1.0, out, quiet);
    make_room_for(own_);
    if (&fp32_ == &own_) own_.set_profile(profile_);
    g32 = &out;
  }
  std::vector<double> own_t, ref_t;
  for (const ParamTensor t : kAllParamTensors) {
    const std::size_t off = layout_.offset_of(t), n = layout_.size_of(t);
    const MaskedCount c = count_underflow(own.view(off, n, own_t), g32->view(off, n, ref_t));
    if (c.selected > 0)
      log_.telemetry(s, -1, "grad", "bwd-weight", name_of(t), "underflow_fraction",
                     static_cast<double>(c.hits) / static_cast<double>(c.selected));
  }
}

bool Trainer::gradients_in_total() const {
  return opts_.recipe.accum == 1 || own_.grads_storage() == StorageKind::Binary32;
}

void Trainer::make_room_for(Model& next) {
  // The other model's working copy, packs and pass buffers are dead until it runs again (and then rebuilt with the
  // same values): freed, so that the evaluation or the underflow pass adds only its own model's.
  if (&own_ == &fp32_) return;
  (&next == &own_ ? fp32_ : own_).drop_derived();
}

void Trainer::weights_changed() {
  // With one micro-step per update nothing derived from the weights is read twice before they change (the
  // forward's and the backward's GEMMs pack W in two layouts, once each), so no promise is made: the GEMM pack
  // cache then holds nothing (up to 512 MiB at E11). Evaluations promise for their own batches (evaluate()).
  // Accumulated updates promise, and their micro-steps reuse the packs.
  const bool reuse = opts_.recipe.accum > 1;
  for (Model* m : {&own_, &fp32_}) {
    if (m == &fp32_ && &fp32_ == &own_) break;
    if (reuse) m->weights_changed();
    else m->release_weights();
  }
}

void Trainer::log_stagnation(std::int64_t s, ParamTensor t) {
  const std::size_t off = layout_.offset_of(t), n = layout_.size_of(t);
  std::vector<double> g, after;
  const MaskedCount c = count_stagnation(grads_.view(off, n, g), std::as_const(master_).view(off, n, after), before_);
  if (c.selected > 0)
    log_.telemetry(s, -1, "adamw", "fwd", name_of(t), "stagnation_fraction",
                   static_cast<double>(c.hits) / static_cast<double>(c.selected));
}

EvalLoss evaluate_loss(Model& m, const EvalSet& set, std::span<const double> master) {
  double total = 0;
  for (const Batch& b : set.batches) total += m.total_loss(b, master);
  return {total / static_cast<double>(set.tokens), total / (std::log(2.0) * static_cast<double>(set.bytes))};
}

EvalLoss evaluate_loss(Model& m, const EvalSet& set, const ParamStore& master) {
  double total = 0;
  for (const Batch& b : set.batches) total += m.total_loss_stored(b, master);
  return {total / static_cast<double>(set.tokens), total / (std::log(2.0) * static_cast<double>(set.bytes))};
}

std::string weights_sha256(std::span<const double> master) {
  return data::sha256_hex(
      std::string_view(reinterpret_cast<const char*>(master.data()), master.size() * sizeof(double)));
}

std::string weights_sha256(const ParamStore& master) {
  if (master.kind() == StorageKind::Binary64) return weights_sha256(master.binary64());
  data::Sha256 sha;
  std::vector<double> piece(std::min<std::size_t>(master.size(), std::size_t{1} << 16));
  for (std::size_t at = 0; at < master.size(); at += piece.size()) {
    const std::size_t n = std::min(piece.size(), master.size() - at);
    master.read(at, std::span(piece).first(n));
    sha.update(std::string_view(reinterpret_cast<const char*>(piece.data()), n * sizeof(double)));
  }
  return sha.hex();
}

EvalLoss Trainer::evaluate(Model& m, const EvalSet& set, const char* name) {
  const auto t0 = ops::Profile::Clock::now();
  make_room_for(m);
  // Several batches reuse the working copy and the packed weights; with one micro-step per update the promise
  // ends with the evaluation (weights_changed()). One batch reads them once: no promise, no packs held.
  const bool promise = opts_.recipe.accum == 1 && set.batches.size() > 1;
  if (promise) m.weights_changed();
  const EvalLoss r = evaluate_loss(m, set, master_);
  if (promise) m.release_weights();
  if (profile_ != nullptr) {
    std::int64_t windows = 0;
    for (const Batch& b : set.batches) windows += b.batch;
    profile_->add_outside(name, ops::seconds_since(t0), windows);
  }
  return r;
}

EvalLoss Trainer::evaluate_own(const EvalLoss& fp32_val) {
  // The own model is the fp32 model (see the constructor): its evaluation is the fp32 one, bit for bit.
  return &own_ == &fp32_ ? fp32_val : evaluate(own_, data_.val, "evaluation: val own");
}

void Trainer::evaluate_and_log() {
  const EvalLoss f = evaluate(fp32_, data_.val, "evaluation: val fp32");
  const EvalLoss o = evaluate_own(f);
  log_.curve(step_, "val_loss_fp32", f.loss);
  log_.curve(step_, "val_bpb_fp32", f.bpb);
  log_.curve(step_, "val_loss_own", o.loss);
  log_.curve(step_, "val_bpb_own", o.bpb);
}

void Trainer::save() {
  if (opts_.out.empty()) return;
  const nlohmann::json meta = {{"identity", identity()},
                               {"step", step_},
                               {"adam_t", adam_t_},
                               {"skipped_steps", skipped_},
                               {"loss_scale_value", scaler_.scale()},
                               {"loss_scale_clean_steps", scaler_.clean_steps()},
                               {"first_nonfinite_step",
                                first_nonfinite_step_ ? nlohmann::json(*first_nonfinite_step_) : nlohmann::json()},
                               {"first_nonfinite_op", first_nonfinite_op_},
                               {"collapsed_norm_steps", collapsed_norm_steps_},
                               {"first_collapsed_norm_step", first_collapsed_norm_step_
                                                                 ? nlohmann::json(*first_collapsed_norm_step_)
                                                                 : nlohmann::json()},
                               {"first_collapsed_norm", first_collapsed_norm_},
                               {"diverged", diverged_},
                               {"last_train_loss", last_train_loss_},
                               {"micro_losses", micro_losses_},
                               {"log", log_.to_json()},
                               {"segments", segments()},
                               {"data_sha256", data_.split_sha256}};
  nlohmann::json full = meta;
  if (const ops::Fp8ScalingState* st = own_.fp8_state(); st != nullptr && !st->tensors().empty())
    full["fp8_scaling"] = fp8_state_json(*st);
  save_checkpoint(opts_.out / "checkpoint.bin", full, master_, m_, v_);
}

double Trainer::autoane_metric() const {
  if (micro_losses_.empty()) return std::nan("");
  double total = 0;
  for (const double l : micro_losses_) total += l;
  return total / static_cast<double>(micro_losses_.size());
}

std::string Trainer::weights_sha256() const { return train::weights_sha256(master_); }

nlohmann::json Trainer::segments() const {
  nlohmann::json all = past_segments_;
  const nlohmann::json p = provenance("roundoff train");
  all.push_back({{"first_update", started_at_},
                 {"last_update", step_},
                 {"git_revision", p.at("git_revision")},
                 {"build_flags", p.at("build_flags")},
                 {"command", p.at("command")}});
  return all;
}

nlohmann::json Trainer::finish() {
  // Complete: every step ran. A run stopped by non-finite master weights is not (it is `diverged`).
  const bool complete = step_ >= opts_.steps && !diverged_;
  nlohmann::json summary = identity();
  summary["steps_completed"] = step_;
  summary["complete"] = complete;
  summary["diverged"] = diverged_;
  summary["skipped_steps"] = skipped_;
  summary["first_nonfinite_step"] = first_nonfinite_step_ ? nlohmann::json(*first_nonfinite_step_) : nlohmann::json();
  summary["first_nonfinite_op"] = first_nonfinite_step_ ? nlohmann::json(first_nonfinite_op_) : nlohmann::json();
  summary["collapsed_norm_steps"] = collapsed_norm_steps_;
  summary["first_collapsed_norm_step"] =
      first_collapsed_norm_step_ ? nlohmann::json(*first_collapsed_norm_step_) : nlohmann::json();
  summary["first_collapsed_norm"] =
      first_collapsed_norm_step_ ? nlohmann::json(first_collapsed_norm_) : nlohmann::json();
  summary["final_loss_scale"] = scaler_.scale();
  summary["train_loss_last"] = last_train_loss_;
  summary["steps_count"] = "updates";
  summary["micro_steps_completed"] = step_ * opts_.recipe.accum;
  summary["autoane_train_loss"] = autoane_metric();
  summary["autoane_train_loss_window"] = micro_losses_.size();
  summary["weights_sha256"] = weights_sha256();
  summary["val_tokens"] = data_.val.tokens;
  summary["val_bytes"] = data_.val.bytes;
  summary["threads"] = opts_.threads;
  summary["kernel_isa"] = numerics::kernels::name_of(opts_.kernel_isa);
  summary["malloc_huge_pages"] = malloc_huge_pages();
  if (complete) {
    const EvalLoss f = evaluate(fp32_, data_.val, "evaluation: val fp32");
    const EvalLoss o = evaluate_own(f);
    const EvalLoss t = evaluate(fp32_, data_.test, "evaluation: test fp32");
    summary["val_loss_fp32"] = f.loss;
    summary["val_bpb_fp32"] = f.bpb;
    summary["val_loss_own"] = o.loss;
    summary["val_bpb_own"] = o.bpb;
    summary["test_loss_fp32"] = t.loss;
    summary["test_bpb_fp32"] = t.bpb;
    summary["test_tokens"] = data_.test.tokens;
  }
  summary.update(provenance("roundoff train"));
  summary["segments"] = segments();
  if (!opts_.out.empty()) {
    RunLog out_log = log_;
    if (complete) {
      out_log.curve(step_, "val_loss_fp32", summary["val_loss_fp32"].get<double>());
      out_log.curve(step_, "val_bpb_fp32", summary["val_bpb_fp32"].get<double>());
      out_log.curve(step_, "val_loss_own", summary["val_loss_own"].get<double>());
      out_log.curve(step_, "val_bpb_own", summary["val_bpb_own"].get<double>());
      out_log.curve(step_, "test_loss_fp32", summary["test_loss_fp32"].get<double>());
    }
    write_file_atomic(opts_.out / "curves.csv", out_log.curves_csv());
    write_file_atomic(opts_.out / "telemetry.csv", out_log.telemetry_csv());
    write_file_atomic(opts_.out / "events.csv", out_log.events_csv());
    write_json_atomic(opts_.out / "summary.json", summary);
  }
  return summary;
}

nlohmann::json Trainer::run() {
  start();
  while (!done()) step();
  return finish();
}

}  // namespace roundoff::studies::train
