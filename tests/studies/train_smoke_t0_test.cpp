// The smoke run: T0 (d 64, 2 layers, 4 heads, seq 64, batch 4, bytes) for 200 steps on the committed
// excerpt under each of fp32, ane-fp16, ane-fp16-acc32, ane-matmul-only and amp-bf16 must reach what a working
// model reaches, without a non-finite value (every one of these policies keeps fp32 islands: RMSNorm,
// classifier, cross-entropy, AdamW), with its attention and feed-forward weights still learning. One test per
// policy so ctest can run them in parallel; about 1.5 minutes each on one core.
//
// The threshold (issue 11: "< ln 256 − 1 ≈ 4.55 nats" was passed by a unigram model). On the 1024 validation
// tokens evaluated here, a byte-unigram model fitted to the train split (add-one smoothed) scores 3.03 nats
// and a bigram 2.50; T0 under fp32 with this recipe (seed 3) measured 2.448 nats at step 200. The bar is
// 2.75 nats: 0.28 below the unigram, 0.30 above what fp32 reaches, so a working model under any of these
// policies clears it (their gaps to fp32 are ~1e-4 nats) and a model that only learned byte frequencies —
// e.g. one whose attention and FFN never train — does not.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <vector>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/checkpoint.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

/// Attention (Wq, Wk, Wv, Wo) and feed-forward (W1, W3, W2) weights moved away from their init and still get
/// a real gradient at the trained weights: in every layer, each tensor's gradient is non-zero in at least 90 %
/// of its elements and its norm is at least 1e-3 of the whole gradient's (a dead attention — e.g. softmax
/// saturated to one-hot, or a stalled branch — shows as a gradient orders of magnitude below that).
void expect_alive(const std::string& policy, const std::filesystem::path& dir) {
  const ModelConfig c = t0_config();
  const Checkpoint ck = load_checkpoint(dir / "checkpoint.bin");
  const std::vector<double> init = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 3);
  Transformer model(c, ResidualScale::None, ops::load_policy(policy), 3);
  const Batch b = train_batch(testing::excerpt_data(c).train, c.seq, c.batch, 3, 200);
  std::vector<double> g(ck.master.size());
  StepTelemetry tel;
  (void)model.loss_and_grad(b, ck.master, 1.0, g, tel);
  double total = 0;
  for (const double v : g) total += v * v;
  total = std::sqrt(total);
  const ParamLayout lay = param_layout(c);
  for (const ParamTensor t : {ParamTensor::Wq, ParamTensor::Wk, ParamTensor::Wv, ParamTensor::Wo, ParamTensor::W1,
                              ParamTensor::W3, ParamTensor::W2}) {
    const std::size_t per_layer = lay.size_of(t) / static_cast<std::size_t>(c.layers);
    for (int l = 0; l < c.layers; ++l) {
      const std::size_t off = lay.offset_of(t) + static_cast<std::size_t>(l) * per_layer;
      double norm = 0, moved = 0;
      std::size_t nonzero = 0;
      for (std::size_t k = off; k < off + per_layer; ++k) {
        norm += g[k] * g[k];
        nonzero += g[k] != 0;
        moved = std::max(moved, std::fabs(ck.master[k] - init[k]));
      }
      const std::string what = policy + " " + std::string(name_of(t)) + "[layer " + std::to_string(l) + "]";
      EXPECT_GE(static_cast<double>(nonzero), 0.9 * static_cast<double>(per_layer)) << what;
      EXPECT_GE(std::sqrt(norm), 1e-3 * total) << what;
      EXPECT_GT(moved, 1e-3) << what << " did not move from its init";
    }
  }
}

void smoke_t0(const std::string& policy) {
  const auto dir = testing::fresh_dir("smoke_t0_" + policy);
  const nlohmann::json s = testing::train_run(t0_config(), policy, dir, 200, [](TrainOptions& o) {
    o.recipe.warmup = 20;
    o.telemetry_every = 0;
  });
  EXPECT_LT(s["val_loss_fp32"].get<double>(), 2.75) << policy;
  EXPECT_TRUE(std::isfinite(s["val_loss_own"].get<double>())) << policy;
  EXPECT_TRUE(s["first_nonfinite_step"].is_null()) << policy << ": " << s["first_nonfinite_op"];
  EXPECT_EQ(s["steps_completed"], 200) << policy;
  expect_alive(policy, dir);
  std::filesystem::remove_all(dir);
}

TEST(TrainSmokeT0, Fp32) { smoke_t0("fp32"); }
TEST(TrainSmokeT0, AneFp16) { smoke_t0("ane-fp16"); }
TEST(TrainSmokeT0, AneFp16Acc32) { smoke_t0("ane-fp16-acc32"); }
TEST(TrainSmokeT0, AneMatmulOnly) { smoke_t0("ane-matmul-only"); }
TEST(TrainSmokeT0, AmpBf16) { smoke_t0("amp-bf16"); }

}  // namespace
}  // namespace roundoff::studies::train
