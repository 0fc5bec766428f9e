// The ops-based Transformer: fp64 gradient check (finite differences and the native twin), one fp32-policy
// step (loss, every gradient element, master weights and moments after AdamW) equal bit for bit to the plain
// float implementation tests/studies/native_model.hpp, thread-count determinism, resume under stochastic
// rounding, an injected overflow, and a smoke run per policy that must lower the loss.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <string>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/native_model.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using testing::excerpt_data;
using testing::fresh_dir;
using testing::small_config;

/// small_config(16, 4, 2) with 4 query heads sharing 2 K/V heads under `map`, embeddings tied.
ModelConfig gqa_tied_config(GqaMap map) {
  ModelConfig c = small_config(16, 4, 2);
  c.heads = 4;
  c.kv_heads = 2;
  c.gqa_map = map;
  c.tie_embeddings = true;
  return c;
}

void gradient_check(ResidualScale rs, const ModelConfig& c = small_config(8, 4, 2)) {
  omp_set_num_threads(1);
  Transformer model(c, rs, ops::Policy::preset("fp64"), 1);
  testing::NativeModel<double> twin(c, rs);
  Recipe r;
  r.init_std = 0.2;
  std::vector<double> w = init_params(c, r, residual_rule(rs, c.layers), 5);
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);
  std::vector<double> g(w.size()), g_twin(w.size());
  StepTelemetry tel, tel2;
  const double loss = model.loss_and_grad(b, w, 1.0, g, tel);
  const double loss_twin = twin.loss_and_grad(b, w, 1.0, g_twin, tel2);
  EXPECT_NEAR(loss, loss_twin, 1e-12 * loss);
  double gmax = 0;
  for (const double x : g_twin) gmax = std::max(gmax, std::abs(x));
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], g_twin[i], 1e-10 * gmax) << "element " << i << " (" << name_of(rs) << ")";
  const ParamLayout lay = param_layout(c);
  const double n_tok = static_cast<double>(b.batch * b.seq);
  for (const ParamTensor t : kAllParamTensors) {
    if (lay.size_of(t) == 0) continue;  // the classifier of tied embeddings
    for (std::size_t j = 0; j < 3; ++j) {
      const std::size_t k = t == ParamTensor::Embedding
                                ? lay.offset_of(t) + static_cast<std::size_t>(b.inputs[j % b.inputs.size()] * c.d) + j % c.d
                                : lay.offset_of(t) + (j * 7919) % lay.size_of(t);
      const double h = 1e-5, w0 = w[k];
      w[k] = w0 + h;
      const double up = model.total_loss(b, w) / n_tok;
      w[k] = w0 - h;
      const double down = model.total_loss(b, w) / n_tok;
      w[k] = w0;
      // Central difference: truncation h²·|f'''|/6 and cancellation ~1e-16/h, both ≪ 1e-7.
      EXPECT_NEAR((up - down) / (2 * h), g[k], 1e-7) << name_of(t) << " element " << k;
    }
  }
}

TEST(TrainModel, Fp64GradientMatchesFiniteDifferencesAndNativeTwin) { gradient_check(ResidualScale::None); }
TEST(TrainModel, Fp64GradientDeepNorm) { gradient_check(ResidualScale::DeepNorm); }
TEST(TrainModel, Fp64GradientGqaBlockTied) { gradient_check(ResidualScale::InvSqrt2L, gqa_tied_config(GqaMap::Block)); }
TEST(TrainModel, Fp64GradientGqaCyclicTied) { gradient_check(ResidualScale::None, gqa_tied_config(GqaMap::Cyclic)); }

/// Elements of `a` and `b` whose bit patterns differ; `what` names the first one.
std::size_t bit_mismatches(std::span<const double> a, std::span<const double> b, std::string& what) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i]) && n++ == 0) {
      std::ostringstream os;
      os << "first at element " << i << ": " << std::hexfloat << a[i] << " vs " << b[i];
      what = os.str();
    }
  return n;
}

/// Issue 5: a training step under the `fp32` policy equals the straightforward float implementation
/// (testing::NativeModel<float>, which follows each op's rounding contract in plain float arithmetic) bit for
/// bit: the mean loss, every weight gradient and, after one AdamW update, every master weight and moment.
/// d = 12 with 2 heads gives hs = 6, so the attention scale 1/√6 is a rounded constant.
void fp32_step_check(ResidualScale rs, const ModelConfig& c = small_config(12, 5, 2)) {
  Transformer model(c, rs, ops::Policy::preset("fp32"), 1);
  testing::NativeModel<float> twin(c, rs);
  Recipe r;
  r.init_std = 0.2;
  const std::vector<double> w = init_params(c, r, residual_rule(rs, c.layers), 5);  // fp32 values
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);
  std::vector<double> g(w.size()), g_twin(w.size());
  StepTelemetry tel, tel2;
  const double loss = model.loss_and_grad(b, w, 1.0, g, tel);
  const double loss_twin = twin.loss_and_grad(b, w, 1.0, g_twin, tel2);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(loss), std::bit_cast<std::uint64_t>(loss_twin))
      << std::hexfloat << loss << " vs " << loss_twin << " (" << name_of(rs) << ")";
  const ParamLayout lay = param_layout(c);
  std::size_t nonzero = 0;
  for (const ParamTensor t : kAllParamTensors) {
    const std::size_t off = lay.offset_of(t), n = lay.size_of(t);
    std::string what;
    EXPECT_EQ(bit_mismatches(std::span(g).subspan(off, n), std::span(g_twin).subspan(off, n), what), 0u)
        << "gradient of " << name_of(t) << " (" << name_of(rs) << "), " << what;
    for (std::size_t k = off; k < off + n; ++k) nonzero += g[k] != 0.0;
  }
  EXPECT_GT(nonzero, w.size() / 2) << name_of(rs);
  std::vector<double> wm = w, wt = w;
  ParamStore ms(model.moments_storage(), w.size()), vs(model.moments_storage(), w.size());
  ParamStore mts(twin.moments_storage(), w.size()), vts(twin.moments_storage(), w.size());
  const double lr = 1e-3, coef = 0.75;
  model.apply_update(wm, ms, vs, g, r, lr, 1, coef);
  twin.apply_update(wt, mts, vts, g_twin, r, lr, 1, coef);
  const std::vector<double> m = ms.to_binary64(), v = vs.to_binary64(), mt = mts.to_binary64(),
                            vt = vts.to_binary64();
  for (const ParamTensor t : kAllParamTensors) {
    const std::size_t off = lay.offset_of(t), n = lay.size_of(t);
    std::string what;
    EXPECT_EQ(bit_mismatches(std::span(wm).subspan(off, n), std::span(wt).subspan(off, n), what), 0u)
        << "master weights of " << name_of(t) << " (" << name_of(rs) << "), " << what;
    EXPECT_EQ(bit_mismatches(std::span(m).subspan(off, n), std::span(mt).subspan(off, n), what), 0u)
        << "AdamW m of " << name_of(t) << " (" << name_of(rs) << "), " << what;
    EXPECT_EQ(bit_mismatches(std::span(v).subspan(off, n), std::span(vt).subspan(off, n), what), 0u)
        << "AdamW v of " << name_of(t) << " (" << name_of(rs) << "), " << what;
  }
}

TEST(TrainModel, Fp32PolicyStepEqualsPlainFloatModelBitForBit) {
  for (const ResidualScale rs : {ResidualScale::None, ResidualScale::InvSqrt2L, ResidualScale::DeepNorm})
    fp32_step_check(rs);
}

/// The same with grouped-query attention (d 24, 4 query heads of size 6 on 2 K/V heads, both maps) and tied
/// embeddings.
TEST(TrainModel, Fp32PolicyStepEqualsPlainFloatModelGqaTied) {
  for (const GqaMap map : {GqaMap::Block, GqaMap::Cyclic}) {
    ModelConfig c = small_config(24, 5, 2);
    c.heads = 4;
    c.kv_heads = 2;
    c.gqa_map = map;
    c.tie_embeddings = true;
    fp32_step_check(ResidualScale::InvSqrt2L, c);
  }
}

/// The forward writes its outputs into buffers kept from the previous call without zeroing them first
/// (Transformer::output: every forward op writes each element of its outputs). A model that first ran a
/// batch of another shape (more windows, shorter: every buffer larger, its elements at other positions), so
/// that its buffers hold that batch's values, gives the bits of a fresh model (all buffers zero): loss and
/// every gradient element, for both attention orders, post-norm (DeepNorm), GQA with tied embeddings, and
/// stochastic rounding. An op that left an output element unwritten would read the other batch's value
/// there and zero here (checked: keeping the last element of v unwritten fails it).
TEST(TrainModel, BuffersReusedAcrossBatchesGiveAFreshModelsBits) {
  omp_set_num_threads(1);
  const ModelConfig plain = small_config(16, 8, 2), gqa = gqa_tied_config(GqaMap::Cyclic);
  struct Case {
    const ModelConfig* c;
    ResidualScale rs;
    const char* policy;
  };
  for (const Case& k : {Case{&plain, ResidualScale::None, "ane-guide"}, Case{&plain, ResidualScale::DeepNorm, "fp32"},
                        Case{&gqa, ResidualScale::InvSqrt2L, "pure-bf16,all.rounding=stochastic"},
                        Case{&gqa, ResidualScale::None, "ane-fp16,attention=online"}}) {
    const ModelConfig& c = *k.c;
    const ops::Policy p = ops::load_policy(k.policy);
    Recipe r;
    r.init_std = 0.2;
    const std::vector<double> w = init_params(c, r, residual_rule(k.rs, c.layers), 5);
    const TrainData& data = excerpt_data(c);
    const Batch first = train_batch(data.train, c.seq - 1, 2 * c.batch, 9, 0),
                second = train_batch(data.train, c.seq, c.batch, 9, 1);
    Transformer used(c, k.rs, p, 1), fresh(c, k.rs, p, 1);
    std::vector<double> g_first(w.size()), g_used(w.size()), g_fresh(w.size());
    StepTelemetry t0, t1, t2;
    t1.step = t2.step = 1;
    used.loss_and_grad(first, w, 256.0, g_first, t0);
    const double loss_used = used.loss_and_grad(second, w, 256.0, g_used, t1);
    const double loss_fresh = fresh.loss_and_grad(second, w, 256.0, g_fresh, t2);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(loss_used), std::bit_cast<std::uint64_t>(loss_fresh)) << k.policy;
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint64_t>(g_used[i]), std::bit_cast<std::uint64_t>(g_fresh[i]))
          << k.policy << ", gradient element " << i;
  }
}

nlohmann::json run(const ModelConfig& c, const std::string& policy, const std::filesystem::path& out,
                   std::int64_t steps, const std::function<void(TrainOptions&)>& tweak = {}) {
  return testing::train_run(c, policy, out, steps, tweak);
}

TEST(TrainModel, SameWeightsForOneAndTwoThreads) {
  const ModelConfig c = small_config(16, 16, 2);
  for (const std::string policy : {"ane-fp16,all.rounding=stochastic"}) {
    const auto a = run(c, policy, fresh_dir("t1"), 2);
    const auto b = run(c, policy, fresh_dir("t2"), 2, [](TrainOptions&) { omp_set_num_threads(2); });
    const auto again = run(c, policy, fresh_dir("t3"), 2);
    omp_set_num_threads(1);
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
    EXPECT_EQ(a["weights_sha256"], again["weights_sha256"]) << policy;
    EXPECT_EQ(a["val_loss_own"], b["val_loss_own"]) << policy;
  }
}

TEST(TrainModel, ResumeUnderStochasticRoundingEqualsUninterrupted) {
  const ModelConfig c = small_config(16, 16, 2);
  const std::string policy = "ane-fp16,all.rounding=stochastic";
  const auto a = run(c, policy, fresh_dir("sr_whole"), 6);
  const auto dir = fresh_dir("sr_parts");
  run(c, policy, dir, 6, [](TrainOptions& o) { o.stop_after = 4; });
  const auto b = run(c, policy, dir, 6, [](TrainOptions& o) { o.resume = true; });
  EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]);
}

TEST(TrainModel, InjectedOverflowIsReportedWithStepAndOp) {
  const ModelConfig c = small_config(16, 16, 2);
  const TrainData& data = excerpt_data(c);
  omp_set_num_threads(1);
  const ops::Policy policy = ops::Policy::preset("ane-fp16");
  Transformer own(c, ResidualScale::None, policy, 3), fp32(c, ResidualScale::None, ops::Policy::preset("fp32"), 3);
  own.inject(3, ops::OpKind::Matmul, 1, "w2", 1e9);  // W2 output of layer 1 at step 3: the fp16 FFN add overflows
  TrainOptions o;
  o.config = c;
  o.steps = 6;
  o.recipe.warmup = 2;
  o.progress_every = 0;
  o.loss_scale = LossScaleSpec::parse("static:256");
  o.policy = policy.canonical();
  const auto dir = fresh_dir("inject");
  o.out = dir;
  Trainer t(o, own, fp32, data, nullptr);
  const auto s = t.run();
  EXPECT_EQ(s["first_nonfinite_step"], 3);
  EXPECT_EQ(s["first_nonfinite_op"], "residual-ffn.fwd(x)[layer 1]");
  EXPECT_EQ(s["skipped_steps"], 1);
  std::ifstream events(dir / "events.csv");
  std::stringstream ev;
  ev << events.rdbuf();
  EXPECT_NE(ev.str().find("3,nonfinite,first non-finite value in residual-ffn.fwd(x)[layer 1]"), std::string::npos)
      << ev.str();
  EXPECT_NE(ev.str().find("3,skip,"), std::string::npos) << ev.str();
}

// The trainer's own pass runs without the per-op output scans and names the op by running a non-finite step again
// (Trainer::name_first_nonfinite). With two micro-steps per update the injection at micro-step 3 is update 1's
// second: the replay must reach it, with the gradients of the binary32 store (ane-fp16: a store of its own) and of
// the binary64 one (fp64: the micro-step store), and name the op the model names with its scans on; under fp8
// delayed scaling it must run each micro-step from the scaling state that micro-step ran from.
TEST(TrainModel, InjectedOverflowInALaterMicroStepIsNamedByTheReplay) {
  const ModelConfig c = small_config(16, 16, 2);
  const TrainData& data = excerpt_data(c);
  omp_set_num_threads(1);
  // te-fp8-delayed: the delayed-scaling histories move with every training pass, so the replay must start each
  // micro-step from the state it ran from (the trainer checks each replayed loss against the micro-step's).
  // ane-fp16 once more without loss scaling: the update is applied (the masters become non-finite), so the replay
  // takes a store of its own instead of the update's gradients.
  for (const char* preset : {"ane-fp16", "fp64", "te-fp8-delayed", "ane-fp16 unscaled"}) {
    const bool unscaled = std::string(preset) == "ane-fp16 unscaled";
    const bool fp16 = std::string(preset) == "ane-fp16" || unscaled;
    const ops::Policy policy = ops::Policy::preset(unscaled ? "ane-fp16" : preset);
    const double factor = fp16 ? 1e9 : std::numeric_limits<double>::infinity();
    const std::string site = fp16 ? "residual-ffn.fwd(x)[layer 1]" : "matmul.fwd(w2)[layer 1]";
    Transformer own(c, ResidualScale::None, policy, 3), fp32(c, ResidualScale::None, ops::Policy::preset("fp32"), 3);
    own.inject(3, ops::OpKind::Matmul, 1, "w2", factor);
    TrainOptions o;
    o.config = c;
    o.steps = 3;
    o.recipe.warmup = 1;
    o.recipe.accum = 2;
    o.progress_every = 0;
    o.loss_scale = LossScaleSpec::parse(unscaled ? "none" : "static:256");
    o.policy = policy.canonical();
    const auto dir = fresh_dir(std::string("inject-accum-") + (unscaled ? "unscaled" : preset));
    o.out = dir;
    Trainer t(o, own, fp32, data, nullptr);
    nlohmann::json s;
    ASSERT_NO_THROW(s = t.run()) << preset;
    EXPECT_EQ(s["first_nonfinite_step"], 1) << preset;
    EXPECT_EQ(s["first_nonfinite_op"], site) << preset;
    EXPECT_EQ(s["skipped_steps"], unscaled ? 0 : 1) << preset;
    EXPECT_EQ(s["diverged"], unscaled) << preset;
    std::ifstream events(dir / "events.csv");
    std::stringstream ev;
    ev << events.rdbuf();
    EXPECT_NE(ev.str().find("1,nonfinite,first non-finite value in " + site), std::string::npos)
        << preset << ": " << ev.str();
    if (!unscaled) {
      EXPECT_NE(ev.str().find("1,skip,non-finite gradients at loss scale 256 (first in " + site + ")"),
                std::string::npos)
          << preset << ": " << ev.str();
    }
  }
}

TEST(TrainModel, TelemetryIsRecorded) {
  const ModelConfig c = small_config(16, 16, 2);
  const auto dir = fresh_dir("telemetry");
  run(c, "ane-fp16", dir, 2, [](TrainOptions& o) {
    o.telemetry_every = 1;
    o.shadow_every = 1;
  });
  std::ifstream in(dir / "telemetry.csv");
  std::stringstream s;
  s << in.rdbuf();
  for (const char* needle : {",swamping_ratio,", ",max_logit,", "stream,fwd,x,max_abs", ",underflow_fraction,",
                             ",stagnation_fraction,", ",shadow_max_ulp,", ",global_norm_rel,", "softmax,fwd,att,"})
    EXPECT_NE(s.str().find(needle), std::string::npos) << needle;
}

/// Each policy lowers the validation loss by at least 1 nat from the uniform ln 256 within `steps`.
void smoke(const ModelConfig& c, std::int64_t steps) {
  for (const std::string policy : {"fp32", "ane-fp16", "ane-fp16-acc32", "ane-matmul-only", "amp-bf16"}) {
    const auto s = run(c, policy, fresh_dir("smoke"), steps, [](TrainOptions& o) { o.telemetry_every = 0; });
    const double start = std::log(256.0);
    EXPECT_LT(s["val_loss_fp32"].get<double>(), start - 1.0) << policy;
    EXPECT_TRUE(std::isfinite(s["val_loss_own"].get<double>())) << policy;
    EXPECT_TRUE(s["first_nonfinite_step"].is_null()) << policy;
  }
}

TEST(TrainSmoke, EveryPolicyLowersTheLoss) { smoke(small_config(16, 16, 2), 80); }

}  // namespace
}  // namespace roundoff::studies::train
