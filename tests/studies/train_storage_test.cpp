// Binary32 storage of the master weights and the gradients (studies/train/param_store.hpp): which policies choose
// it, and that training through it gives the bits, curves, telemetry and checkpoint bytes of binary64 storage.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "ops/policy.hpp"
#include "studies/train/model.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using testing::synthetic_data;

using ops::OpKind;
using ops::Pass;
using ops::TensorRole;

/// The storage kinds the trainer's masters and gradients must have under `p`, computed here from the formats
/// (independently of the model): binary32 only when every format that stores into them fits binary32. The masters,
/// when the weights format holds every master value (no working copy: the ops read the masters themselves), are
/// binary32 only when the ops read binary32 weights: every activation entry's storage and the weights format fit
/// binary32 and no weight-reading GEMM entry quantizes.
bool binary32_weights(const ops::Policy& p) {
  for (const OpKind op : ops::kAllOps)
    for (const Pass pass : ops::kAllPasses)
      if (!numerics::fits_binary32(p.at(op, pass).storage)) return false;
  for (const OpKind op : {OpKind::Matmul, OpKind::Classifier})
    for (const Pass pass : {Pass::Forward, Pass::BackwardData})
      if (p.at(op, pass).quant.active()) return false;
  return numerics::fits_binary32(p.storage_for(TensorRole::Weight));
}
StorageKind expected_master(const ops::Policy& p) {
  const numerics::Format& m = p.storage_for(TensorRole::MasterWeight);
  const numerics::Format& w = p.storage_for(TensorRole::Weight);
  const int least_m = m.emin - (m.subnormals ? m.precision - 1 : 0), least_w = w.emin - (w.subnormals ? w.precision - 1 : 0);
  const bool copy = w.precision < m.precision || w.emax < m.emax || w.emin > m.emin || least_w > least_m;
  if (copy) return storage_kind_for(m);
  return binary32_weights(p) ? storage_kind_for(m) : StorageKind::Binary64;
}
StorageKind expected_grads(const ops::Policy& p) {
  const numerics::Format& gf = p.storage_for(TensorRole::Gradient);
  for (const numerics::Format& f :
       {p.at(OpKind::Matmul, Pass::BackwardWeight).storage, p.at(OpKind::Classifier, Pass::BackwardWeight).storage,
        p.at(OpKind::RmsNorm, Pass::BackwardWeight).storage, p.at(OpKind::Embedding, Pass::BackwardWeight).storage, gf,
        update_format(gf)})
    if (storage_kind_for(f) == StorageKind::Binary64) return StorageKind::Binary64;
  return StorageKind::Binary32;
}

TEST(TrainStorage, PresetsChooseMasterAndGradientStorage) {
  const ModelConfig c = config_by_name("T0");
  for (const std::string& name : ops::Policy::preset_names()) {
    const Transformer model(c, ResidualScale::None, ops::Policy::preset(name), 1);
    EXPECT_EQ(model.master_storage(), expected_master(model.policy())) << name;
    EXPECT_EQ(model.grads_storage(), expected_grads(model.policy())) << name;
  }
  for (const char* name : {"fp32", "ane-fp16", "ane-guide", "pure-bf16", "pure-fp16"}) {
    const Transformer model(c, ResidualScale::None, ops::Policy::preset(name), 1);
    EXPECT_EQ(model.grads_storage(), StorageKind::Binary32) << name;
    // fp32 weights read the fp32 masters directly (binary32, no copy); bf16 and fp16 weights are a copy anyway.
    EXPECT_EQ(model.master_storage(), StorageKind::Binary32) << name;
  }
  // fp64 trains on binary64 masters and gradients end to end: both stay binary64.
  const Transformer fp64(c, ResidualScale::None, ops::Policy::preset("fp64"), 1);
  EXPECT_EQ(fp64.master_storage(), StorageKind::Binary64);
  EXPECT_EQ(fp64.grads_storage(), StorageKind::Binary64);
}

TEST(TrainStorage, AWiderFormatKeepsBinary64) {
  const ModelConfig c = config_by_name("T0");
  struct Case {
    const char* spec;
    StorageKind master, grads;
  };
  const auto b32 = StorageKind::Binary32, b64 = StorageKind::Binary64;
  for (const Case& k : std::array<Case, 12>{{
           {"fp32,weights=bf16", b32, b32},                     // a bf16 copy of binary32 masters
           {"pure-bf16,master=fp64", b64, b32},                 // masters wider than binary32
           {"pure-fp16,master=p25:emin-126:emax127", b64, b32},  // one bit more than binary32
           {"ane-fp16,master=fp64", b64, b32},
           {"fp32,grads=fp64", b32, b64},                       // and the update format with it
           {"pure-bf16,grads=p24:emin-126:emax128", b32, b64},  // one binade more
           {"pure-bf16,matmul.bwd-weight.storage=fp64", b32, b64},  // dW stored wider before the gradient rounding
           {"fp32,classifier.bwd-weight.storage=fp64", b64, b64},
           {"fp32,rmsnorm.bwd-weight.storage=fp64", b64, b64},
           {"fp32,embedding.bwd-weight.storage=fp64", b64, b64},
           {"fp64,master=fp32,grads=fp32,all.bwd-weight.storage=fp32", b64, b32},  // fp64 weights read the masters
           {"fp64,weights=bf16,master=fp32,grads=fp32,all.bwd-weight.storage=fp32", b32, b32},
       }}) {
    const Transformer model(c, ResidualScale::None, ops::Policy::parse(k.spec), 1);
    EXPECT_EQ(model.master_storage(), k.master) << k.spec;
    EXPECT_EQ(model.grads_storage(), k.grads) << k.spec;
  }
}

/// Runs `inner` but reports the storage kinds it is given: Binary64 gives the trainer's storage before binary32
/// masters and gradients (the Model defaults then run inner's span versions on binary64 stores, the code path of
/// that trainer); Binary32 forces binary32 stores on any policy.
class StorageAs final : public Model {
 public:
  StorageAs(Transformer& inner, StorageKind master, StorageKind grads) : m_(inner), master_(master), grads_(grads) {}
  double total_loss(const Batch& b, std::span<const double> w) override { return m_.total_loss(b, w); }
  double loss_and_grad(const Batch& b, std::span<const double> w, double s, std::span<double> g,
                       StepTelemetry& t) override {
    return m_.loss_and_grad(b, w, s, g, t);
  }
  double loss_and_grad_accumulate(const Batch& b, std::span<const double> w, double s, std::span<double> g,
                                  std::span<double> total, bool first, StepTelemetry& t) override {
    return m_.loss_and_grad_accumulate(b, w, s, g, total, first, t);
  }
  void update_tensor(ParamTensor tensor, std::span<double> w, ParamStore& m, ParamStore& v, std::span<const double> g,
                     const Recipe& r, double lr, std::int64_t t, double coef) override {
    m_.update_tensor(tensor, w, m, v, g, r, lr, t, coef);
  }
  StorageKind moments_storage() const override { return m_.moments_storage(); }
  StorageKind master_storage() const override { return master_; }
  StorageKind grads_storage() const override { return grads_; }
  ops::Fp8ScalingState* fp8_state() override { return m_.fp8_state(); }
  void set_profile(ops::Profile* p) override { m_.set_profile(p); }
  void weights_changed() override { m_.weights_changed(); }
  void release_weights() override { m_.release_weights(); }
  void drop_derived() override { m_.drop_derived(); }

 private:
  Transformer& m_;
  StorageKind master_, grads_;
};

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// What a run leaves: its weights' digest and its files.
struct RunResult {
  std::string sha, checkpoint, curves, telemetry, events;
};

enum class Force { None, Binary64, Binary32 };

/// `steps` updates of `policy` on c (accum `accum`, telemetry and evaluation every 2 updates), the own model as it
/// is or with its storage forced; stop_after > 0 stops there and resumes.
RunResult train(const ModelConfig& c, const std::string& policy, int accum, Force force, const std::string& name,
                std::int64_t stop_after = 0,
                std::size_t pack_cache_bytes = numerics::kernels::PackCache::kDefaultCapacity) {
  omp_set_num_threads(1);
  const ops::Policy p = ops::Policy::parse(policy);
  const TrainData data = synthetic_data(c);
  TrainOptions o;
  o.config = c;
  o.recipe.lr = 3e-3;
  o.recipe.warmup = 2;
  o.recipe.accum = accum;
  o.policy = p.canonical();
  o.update_format = update_format(p.storage_for(TensorRole::Gradient));
  o.steps = 5;
  o.seed = 7;
  o.eval_every = 2;
  o.telemetry_every = 2;
  o.progress_every = 0;
  o.loss_scale = LossScaleSpec::parse("dynamic:1024,2,0.5,4");
  o.out = testing::fresh_dir("storage_" + name);
  const auto run = [&](std::int64_t stop, bool resume) {
    o.stop_after = stop;
    o.resume = resume;
    ops::ExecOptions exec;
    exec.pack_cache_bytes = pack_cache_bytes;
    Transformer own(c, ResidualScale::None, p, o.seed, exec),
        twin(c, ResidualScale::None, ops::Policy::preset("fp32"), o.seed, exec);
    const StorageKind kind = force == Force::Binary32 ? StorageKind::Binary32 : StorageKind::Binary64;
    StorageAs forced(own, kind, kind);
    Model& m = force == Force::None ? static_cast<Model&>(own) : forced;
    Trainer t(o, m, twin, data, nullptr);
    (void)t.run();
    return t.weights_sha256();
  };
  RunResult r;
  if (stop_after > 0) (void)run(stop_after, false);
  r.sha = run(0, stop_after > 0);
  r.checkpoint = file_text(o.out / "checkpoint.bin");
  r.curves = file_text(o.out / "curves.csv");
  r.telemetry = file_text(o.out / "telemetry.csv");
  r.events = file_text(o.out / "events.csv");
  std::filesystem::remove_all(o.out);
  return r;
}

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  EXPECT_EQ(a.sha, b.sha) << what;
  EXPECT_TRUE(a.checkpoint == b.checkpoint) << what << ": checkpoint bytes differ";
  EXPECT_EQ(a.curves, b.curves) << what;
  EXPECT_EQ(a.telemetry, b.telemetry) << what;
  EXPECT_EQ(a.events, b.events) << what;
}

/// Binary32 masters and gradients against the binary64 storage of the same runs: every policy that fits binary32,
/// tied and untied embeddings, one micro-step and accumulated updates (the fused accumulation, and at the detailed
/// steps the separate one with the underflow telemetry's fp32 pass), evaluations and the stagnation telemetry.
TEST(TrainStorage, Binary32MastersAndGradientsGiveTheBinary64Bits) {
  ModelConfig c = testing::small_config(16, 8, 2);
  for (const bool tied : {false, true}) {
    c.tie_embeddings = tied;
    for (const char* policy : {"fp32", "ane-fp16", "ane-guide", "pure-bf16", "pure-fp16", "fp32,weights=bf16",
                               "pure-bf16,all.rounding=stochastic", "ane-guide,all.ftz=all"}) {
      const Transformer probe(c, ResidualScale::None, ops::Policy::parse(policy), 1);
      ASSERT_EQ(probe.grads_storage(), StorageKind::Binary32) << policy;
      if (std::string(policy).find("bf16") != std::string::npos || std::string(policy).starts_with("pure-")) {
        ASSERT_EQ(probe.master_storage(), StorageKind::Binary32) << policy;
      }
      for (const int accum : {1, 3}) {
        const std::string what = std::string(policy) + (tied ? " tied" : " untied") + " accum " + std::to_string(accum);
        const RunResult b32 = train(c, policy, accum, Force::None, "b32");
        const RunResult b64 = train(c, policy, accum, Force::Binary64, "b64");
        expect_same(b32, b64, what);
      }
    }
  }
}

/// With binary32 storage, 2 updates, a checkpoint and a resume give the uninterrupted run's bits and files.
TEST(TrainStorage, ResumeThroughBinary32StorageEqualsUninterrupted) {
  ModelConfig c = testing::small_config(16, 8, 2);
  c.tie_embeddings = true;
  for (const char* policy : {"ane-fp16", "pure-bf16,all.rounding=stochastic", "fp32,weights=bf16"}) {
    const RunResult whole = train(c, policy, 2, Force::None, "whole");
    const RunResult parts = train(c, policy, 2, Force::None, "parts", 2);
    EXPECT_EQ(whole.sha, parts.sha) << policy;
    EXPECT_EQ(whole.curves, parts.curves) << policy;
  }
}

/// An accumulated update's micro-steps summed straight into a binary32 total (no micro-step store: the trainer's
/// path since 2026-11-30) against the same micro-steps through a binary32 micro-step store and finish_gradients:
/// the same total bit for bit, the same losses, and the same first non-finite tensor named when a loss scale
/// overflows the gradients (fp32 ops with fp16 gradients at 2^30: the ops' outputs stay finite, the rounding to the
/// gradient role overflows in several tensors; the first in kAllParamTensors order is named, whatever order the
/// backward finishes them in).
TEST(TrainStorage, DirectAccumulationEqualsTheMicroStepStore) {
  ModelConfig c = testing::small_config(16, 8, 2);
  const TrainData data = synthetic_data(c);
  for (const bool tied : {true, false}) {
    c.tie_embeddings = tied;
    for (const char* policy : {"ane-fp16", "pure-bf16,all.rounding=stochastic", "fp32,grads=fp16"}) {
      for (const double scale : {1024.0, 0x1p30}) {
        const ops::Policy p = ops::Policy::parse(policy);
        Transformer direct(c, ResidualScale::None, p, 3), stored(c, ResidualScale::None, p, 3);
        ASSERT_EQ(direct.grads_storage(), StorageKind::Binary32) << policy;
        const std::vector<double> init = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 3);
        ParamStore master(direct.master_storage(), init.size());
        master.write(0, init);
        ParamStore total_d(StorageKind::Binary32, init.size()), total_s(StorageKind::Binary32, init.size());
        ParamStore micro(StorageKind::Binary32, init.size()), none;
        for (int j = 0; j < 3; ++j) {
          const Batch b = train_batch(data.train, c.seq, c.batch, 5, j);
          StepTelemetry td, ts;
          td.step = ts.step = j;
          const double ld = direct.loss_and_grad_accumulate_stored(b, master, scale, none, total_d, j == 0, td);
          const double ls = stored.loss_and_grad_accumulate_stored(b, master, scale, micro, total_s, j == 0, ts);
          const std::string what = std::string(policy) + (tied ? " tied" : " untied") + " scale " +
                                   std::to_string(scale) + " micro-step " + std::to_string(j);
          EXPECT_EQ(ld, ls) << what;
          EXPECT_EQ(td.first_nonfinite_op, ts.first_nonfinite_op) << what;
          if (scale > 1e6 && std::string(policy) == "fp32,grads=fp16") {
            EXPECT_TRUE(td.first_nonfinite_op.starts_with("grads-role rounding(")) << what << ": "
                                                                                   << td.first_nonfinite_op;
          }
          const std::span<const float> a = std::as_const(total_d).binary32(), e = std::as_const(total_s).binary32();
          ASSERT_EQ(a.size(), e.size());
          std::size_t differ = 0;
          for (std::size_t i = 0; i < a.size(); ++i)
            differ += std::memcmp(&a[i], &e[i], sizeof(float)) != 0;
          EXPECT_EQ(differ, 0u) << what;
        }
      }
    }
  }
}

/// The pack cache's capacity (--pack-cache-mib) trades memory for repacking only: none, a few panels (some
/// packs cached, the rest packed afresh at every micro-step) and the default give the same run.
TEST(TrainStorage, PackCacheCapacityChangesNoBit) {
  ModelConfig c = testing::small_config(16, 8, 2);
  c.tie_embeddings = true;
  for (const char* policy : {"fp32", "ane-fp16"}) {
    const RunResult whole = train(c, policy, 3, Force::None, "cache_default");
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{4096}}) {
      const RunResult capped = train(c, policy, 3, Force::None, "cache_" + std::to_string(bytes), 0, bytes);
      expect_same(whole, capped, std::string(policy) + " pack cache " + std::to_string(bytes) + " bytes");
    }
  }
}

/// fp64 needs binary64 masters and gradients: forced into binary32 storage, its first gradient that is no binary32
/// value is refused (the stores never round), so the choice above is what keeps its bits.
TEST(TrainStorage, Fp64ForcedIntoBinary32IsRefused) {
  const ModelConfig c = testing::small_config(16, 8, 2);
  EXPECT_THROW((void)train(c, "fp64", 1, Force::Binary32, "forced"), std::invalid_argument);
  // Its own choice, binary64, trains.
  EXPECT_NO_THROW((void)train(c, "fp64", 1, Force::None, "fp64"));
}

}  // namespace
}  // namespace roundoff::studies::train
