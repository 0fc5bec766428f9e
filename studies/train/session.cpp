// Building and running a complete training session.
#include "studies/train/session.hpp"

#include <optional>
#include <set>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "ops/probe.hpp"
#include "studies/common/provenance.hpp"
#include "studies/common/out_dir.hpp"
#include "studies/data/bpe.hpp"
#include "studies/data/corpus.hpp"
#include "studies/data/tokenizer.hpp"
#include "studies/train/checkpoint.hpp"
#include "studies/train/fp8_checkpoint.hpp"
#include "studies/train/model.hpp"
#include "studies/train/params.hpp"
#include "studies/train/optimizer.hpp"

namespace roundoff::studies::train {

LossScaleSpec resolve_loss_scale(const std::string& text, const ops::Policy& policy) {
  if (text != "auto") return LossScaleSpec::parse(text);
  const double s = policy.loss_scale();
  if (s == 1.0) return LossScaleSpec::parse("none");
  if (s == 65536.0) return LossScaleSpec::parse("dynamic");
  LossScaleSpec spec;
  spec.kind = LossScaleKind::Static;
  spec.init = s;
  return spec;
}

TrainData load_train_data(const ModelConfig& c, const std::optional<std::filesystem::path>& corpus_dir,
                          std::int64_t eval_tokens) {
  if (eval_tokens > 0 && eval_tokens < c.seq)  // no window fits: the evaluation would be empty
    throw std::invalid_argument("--eval-tokens " + std::to_string(eval_tokens) +
                                " is shorter than one evaluation window of --seq " + std::to_string(c.seq) +
                                " tokens (valid: 0 for the whole split, or at least " + std::to_string(c.seq) + ")");
  const data::Corpus corpus = data::load_corpus(corpus_dir);
  std::unique_ptr<data::Tokenizer> tok;
  switch (c.tokenizer) {
    case TokenizerKind::Byte: tok = std::make_unique<data::ByteTokenizer>(); break;
    case TokenizerKind::Bpe: tok = data::make_tokenizer("bpe-" + std::to_string(c.tokens()), corpus.train); break;
  }
  if (tok->vocab_size() != static_cast<std::size_t>(c.tokens()))
    throw std::runtime_error("tokenizer " + tok->name() + " has " + std::to_string(tok->vocab_size()) +
                             " tokens but the model expects vocab " + std::to_string(c.tokens()) +
                             " (the train split is too small for that many merges)");
  TrainData d;
  d.train = tok->encode(corpus.train);
  std::vector<data::Token> val = tok->encode(corpus.val), test = tok->encode(corpus.test);
  // AutoANE's compaction: the ids that occur anywhere in the corpus, renumbered in increasing order.
  std::vector<std::int32_t> original(tok->vocab_size());
  for (std::size_t i = 0; i < original.size(); ++i) original[i] = static_cast<std::int32_t>(i);
  if (c.compact_vocab) {
    std::vector<std::int32_t> compact(tok->vocab_size(), -1);
    for (const auto* split : {&d.train, &val, &test})
      for (const data::Token id : *split) compact[static_cast<std::size_t>(id)] = 0;
    original.clear();
    for (std::size_t i = 0; i < compact.size(); ++i)
      if (compact[i] == 0) {
        compact[i] = static_cast<std::int32_t>(original.size());
        original.push_back(static_cast<std::int32_t>(i));
      }
    for (auto* split : {&d.train, &val, &test})
      for (data::Token& id : *split) id = compact[static_cast<std::size_t>(id)];
  }
  d.vocab = static_cast<int>(original.size());
  const data::Tokenizer& t = *tok;
  auto bytes_of = [&t, &original](std::int32_t id) {
    return static_cast<std::int64_t>(t.token_bytes(original[static_cast<std::size_t>(id)]).size());
  };
  d.val = make_eval_set(val, c.seq, c.batch, eval_tokens, bytes_of);
  d.test = make_eval_set(test, c.seq, c.batch, eval_tokens, bytes_of);
  d.source = corpus.source;
  if (corpus.manifest.contains("splits"))
    for (const char* split : {"train", "val", "test"})
      if (corpus.manifest["splits"].contains(split) && corpus.manifest["splits"][split].contains("sha256"))
        d.split_sha256[split] = corpus.manifest["splits"][split]["sha256"];
  d.tokenizer = tok->name() + (c.compact_vocab ? "-compact-" + std::to_string(d.vocab) : "");
  return d;
}

ModelConfig evaluation_config(const ModelConfig& c) {
  ModelConfig e = c;
  if (c.defects.gqa_mismatch) {
    e.defects.gqa_mismatch = false;
    e.gqa_map = GqaMap::Block;
  }
  return e;
}

namespace {

/// Another run's checkpoint, read for use under `o`'s model (`what` names the use in errors): refused when its
/// parameter count is not this config's, when it was trained on another tokenizer than `data`'s, or when
/// `data` has no validation window to use.
Checkpoint load_foreign_checkpoint(const TrainOptions& o, const TrainData& data, const std::filesystem::path& checkpoint,
                                   const std::string& what) {
  Checkpoint ck = load_checkpoint(checkpoint);
  const std::size_t expected = param_layout(o.config).total;
  if (ck.master.size() != expected)
    throw std::runtime_error("checkpoint " + checkpoint.string() + " holds " + std::to_string(ck.master.size()) +
                             " parameters; the model of this config has " + std::to_string(expected));
  if (data.val.batches.empty()) throw std::runtime_error(what + " needs a non-empty validation split");
  const nlohmann::json& id = ck.meta.at("identity");
  // The same parameter count is not the same model: another head split, width/hidden trade or residual rule
  // reads the same numbers as other weights. What may differ is how the model is used: precision, defects,
  // GQA map, context and batch.
  if (id.contains("config")) {
    const nlohmann::json now = config_json(o.config);
    const nlohmann::json& was = id.at("config");
    for (const char* key : {"d", "layers", "heads", "kv_heads", "hidden", "vocab", "tokenizer", "tokenizer_vocab",
                            "tie_embeddings", "compact_vocab", "norm_eps", "rope_base"})
      if (was.contains(key) && was.at(key) != now.at(key))
        throw std::runtime_error("checkpoint " + checkpoint.string() + " is of another model: config." + key +
                                 " " + was.at(key).dump() + ", this command " + now.at(key).dump() +
                                 " (valid: the checkpoint's model, under any precision, defects or --gqa-map)");
  }
  if (id.contains("config")) {  // "ffn" is named only when it is not swiglu (config_json)
    const nlohmann::json& was = id.at("config");
    const std::string was_ffn = was.contains("ffn") ? was.at("ffn").get<std::string>() : "swiglu";
    const std::string now_ffn(name_of(o.config.ffn));
    if (was_ffn != now_ffn)
      throw std::runtime_error("checkpoint " + checkpoint.string() + " is of another model: config.ffn \"" + was_ffn +
                               "\", this command \"" + now_ffn + "\" (valid: the checkpoint's --ffn)");
  }
  if (id.contains("residual_scale") && id.at("residual_scale") != std::string(name_of(o.residual)))
    throw std::runtime_error("checkpoint " + checkpoint.string() + " is of another model: residual_scale " +
                             id.at("residual_scale").dump() + ", this command \"" + std::string(name_of(o.residual)) +
                             "\" (valid: the checkpoint's --residual-scale)");
  if (id.contains("tokenizer") && id.at("tokenizer") != data.tokenizer)
    throw std::runtime_error("checkpoint " + checkpoint.string() + " was trained on tokenizer " +
                             id.at("tokenizer").get<std::string>() + ", this run uses " + data.tokenizer);
  return ck;
}

/// What a result computed from another run's checkpoint records about it and about this command.
void describe_checkpoint(nlohmann::json& r, const SessionSpec& spec, const TrainData& data,
                         const std::filesystem::path& checkpoint, const Checkpoint& ck) {
  const TrainOptions& o = spec.options;
  const nlohmann::json& id = ck.meta.at("identity");
  r["policy"] = spec.policy.canonical();
  r["defects"] = defects_text(o.config.defects);
  r["seed"] = o.seed;
  r["checkpoint"] = checkpoint.string();
  r["checkpoint_step"] = ck.meta.at("step");
  r["checkpoint_policy"] = id.contains("policy") ? id.at("policy") : nlohmann::json();
  r["checkpoint_seed"] = id.contains("seed") ? id.at("seed") : nlohmann::json();
  r["checkpoint_config"] = id.contains("config") ? id.at("config") : nlohmann::json();
  r["weights_sha256"] = weights_sha256(ck.master);
  r["config"] = config_json(o.config);  // the model the weights were used as (issue 43)
  r["residual_scale"] = std::string(name_of(o.residual));
  r["data_source"] = data.source;
  r["tokenizer"] = data.tokenizer;
  r["eval_tokens"] = spec.eval_tokens;
}

/// The MPFR shadow's records of one shadowed forward+backward as telemetry rows (op, pass, tensor, metric
/// shadow_* for the local error, global_* for the error against the fp64 reference), tagged with `step`.
void log_shadow(const ops::Tape& tape, std::int64_t step, RunLog& log) {
  for (const ops::OpRecord& r : tape.records()) {
    const auto op = ops::name_of(r.op), pass = ops::name_of(r.pass);
    const std::string kind = r.kind == ops::RecordKind::Global ? "global_" : "shadow_";
    auto put = [&](const char* metric, double v) { log.telemetry(step, r.layer, op, pass, r.tensor, kind + metric, v); };
    put("median_ulp", r.error.median_ulp);
    put("p95_ulp", r.error.p95_ulp);
    put("max_ulp", r.error.max_ulp);
    put("norm_rel", r.error.norm_rel);
    put("signed_rel", r.error.signed_rel);
    put("underflow", static_cast<double>(r.error.underflow));
    if (r.range.inf + r.range.nan > 0) put("nonfinite", static_cast<double>(r.range.inf + r.range.nan));
    if (r.acc) {  // GEMMs with quantized operands: against the product of those operands (ops/quant_shadow.hpp)
      put("acc_norm_rel", r.acc->error.norm_rel);
      put("acc_signed_rel", r.acc->error.signed_rel);
      put("acc_max_ulp", r.acc->error.max_ulp);
      put("acc_units", static_cast<double>(r.acc->units));
      put("acc_unit_median", r.acc->unit_median);
      put("acc_unit_p95", r.acc->unit_p95);
      put("acc_unit_max", r.acc->unit_max);
    }
  }
}

}  // namespace

nlohmann::json evaluate_checkpoint(const SessionSpec& spec, const TrainData& data,
                                   const std::filesystem::path& checkpoint) {
  const TrainOptions& o = spec.options;
  const Checkpoint ck = load_foreign_checkpoint(o, data, checkpoint, "evaluating a checkpoint");
  Transformer model(o.config, o.residual, spec.policy, o.seed, spec.exec);
  model.weights_changed();
  // Delayed fp8 scaling casts with the scales the checkpoint's run had reached (its amax histories), as the
  // trainer's own evaluation of those weights does; evaluation records no amax.
  const std::set<std::string> fp8_keys = load_fp8_state_for_evaluation(ck.meta, *model.fp8_state(), checkpoint);
  const EvalLoss val = evaluate_loss(model, data.val, ck.master);
  check_fp8_state_covered(*model.fp8_state(), fp8_keys, checkpoint);
  nlohmann::json r = provenance("roundoff train --eval-checkpoint");
  r["val_loss"] = val.loss;
  r["val_bpb"] = val.bpb;
  r["val_tokens"] = data.val.tokens;
  r["val_bytes"] = data.val.bytes;
  describe_checkpoint(r, spec, data, checkpoint, ck);
  if (!o.out.empty()) {
    const OutDirLock lock(o.out);
    write_json_atomic(o.out / "eval.json", r);
  }
  return r;
}

nlohmann::json shadow_checkpoint(const SessionSpec& spec, const TrainData& data,
                                 const std::filesystem::path& checkpoint) {
  const TrainOptions& o = spec.options;
  std::optional<OutDirLock> lock;
  if (!o.out.empty()) {
    lock.emplace(o.out);
    // Its telemetry.csv would replace a training run's own (steps 0..N) with the shadow rows.
    for (const char* own : {"summary.json", "checkpoint.bin", "curves.csv"})
      if (std::filesystem::exists(o.out / own))
        throw std::runtime_error("--shadow-checkpoint writes telemetry.csv and shadow.json, but --out " +
                                 o.out.string() + " holds a training run (" + own +
                                 "); choose an --out of its own (empty, or an earlier --shadow-checkpoint's)");
  }
  const Checkpoint ck = load_foreign_checkpoint(o, data, checkpoint, "shadowing a checkpoint");
  const std::int64_t step = ck.meta.at("step").get<std::int64_t>();
  const double loss_scale = ck.meta.at("loss_scale_value").get<double>();
  Transformer own(o.config, o.residual, spec.policy, o.seed, spec.exec);
  Transformer reference(o.config, o.residual, ops::Policy::preset("fp64"), o.seed, spec.exec);
  own.weights_changed();
  // The scales a run that shadows at this step casts with: the checkpoint's (see evaluate_checkpoint).
  const std::set<std::string> fp8_keys = load_fp8_state_for_evaluation(ck.meta, *own.fp8_state(), checkpoint);
  ops::Tape tape;
  own.shadow(step, data.val.batches.front(), ck.master, loss_scale, tape, spec.shadow_units, &reference);
  check_fp8_state_covered(*own.fp8_state(), fp8_keys, checkpoint);
  RunLog log;
  log_shadow(tape, step, log);
  nlohmann::json r = provenance("roundoff train --shadow-checkpoint");
  r["step"] = step;
  r["loss_scale"] = loss_scale;
  r["shadow_units"] = spec.shadow_units;
  r["records"] = tape.records().size();
  describe_checkpoint(r, spec, data, checkpoint, ck);
  if (!o.out.empty()) {
    write_file_atomic(o.out / "telemetry.csv", log.telemetry_csv());
    write_json_atomic(o.out / "shadow.json", r);
  }
  return r;
}

nlohmann::json run_session(SessionSpec spec, const TrainData& data, std::ostream* progress) {
  TrainOptions& o = spec.options;
  o.policy = spec.policy.canonical();
  o.update_format = update_format(spec.policy.storage_for(ops::TensorRole::Gradient));
  o.kernel_isa = spec.exec.kernels.isa();
  std::optional<OutDirLock> lock;  // held until the results are written: one writer per results directory
  if (!o.out.empty()) lock.emplace(o.out);
  Transformer own(o.config, o.residual, spec.policy, o.seed, spec.exec);
  // The fp32 twin, unless the own model already is it (fp32 policy, evaluation config = training config):
  // then the trainer evaluates and takes fp32 gradients from the own model (Trainer's constructor).
  const ops::Policy fp32_policy = ops::Policy::preset("fp32");
  std::optional<Transformer> twin;
  if (spec.policy.canonical() != fp32_policy.canonical() || !(evaluation_config(o.config) == o.config))
    twin.emplace(evaluation_config(o.config), o.residual, fp32_policy, o.seed, spec.exec);
  Transformer& fp32 = twin ? *twin : own;
  std::optional<Transformer> reference;  // the fp64 model of the global error, only when attributing
  ShadowHook hook;
  if (o.shadow_every > 0) {
    reference.emplace(o.config, o.residual, ops::Policy::preset("fp64"), o.seed, spec.exec);
    if (data.val.batches.empty()) throw std::runtime_error("--shadow-every needs a non-empty validation split");
    const Batch probe = data.val.batches.front();  // the fixed probe batch: the first B val windows
    const std::int64_t units = spec.shadow_units;
    hook = [&own, &reference, probe, units](std::int64_t step, std::span<const double> master, double loss_scale,
                                           RunLog& log) {
      ops::Tape tape;
      own.shadow(step, probe, master, loss_scale, tape, units, &*reference);
      log_shadow(tape, step, log);
    };
  }
  Trainer trainer(o, own, fp32, data, progress, hook);
  ops::Profile profile;
  if (spec.profile) trainer.set_profile(&profile);
  nlohmann::json summary = trainer.run();
  if (spec.profile) {
    if (progress != nullptr) profile.print(*progress);
    if (!o.out.empty()) {
      std::ostringstream csv;
      profile.write_csv(csv);
      write_file_atomic(o.out / "profile.csv", csv.str());
    }
  }
  return summary;
}

}  // namespace roundoff::studies::train
