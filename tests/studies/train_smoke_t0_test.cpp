// The smoke run: T0 (d 64, 2 layers, 4 heads, seq 64, batch 4, bytes) for 200 steps on the committed
// excerpt under each of fp32, ane-fp16, ane-fp16-acc32, ane-matmul-only and amp-bf16 must lower the fp32
// validation loss by at least 1 nat from the uniform ln 256 without a non-finite value (every one of these
// policies keeps fp32 islands: RMSNorm, classifier, cross-entropy, AdamW). One test per policy so ctest can
// run them in parallel; about 1.5 minutes each on one core.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

void smoke_t0(const std::string& policy) {
  omp_set_num_threads(1);
  const ModelConfig c = t0_config();
  const TrainData data = load_train_data(c, data::excerpt_dir(), 1024);
  SessionSpec spec;
  spec.policy = ops::load_policy(policy);
  TrainOptions& o = spec.options;
  o.config = c;
  o.steps = 200;
  o.recipe.lr = 3e-3;
  o.recipe.warmup = 20;
  o.seed = 3;
  o.progress_every = 0;
  o.telemetry_every = 0;
  const auto dir = testing::fresh_dir("smoke_t0_" + policy);
  o.out = dir;
  o.loss_scale = resolve_loss_scale("auto", spec.policy);
  const nlohmann::json s = run_session(spec, data, nullptr);
  const double start = std::log(256.0);
  EXPECT_LT(s["val_loss_fp32"].get<double>(), start - 1.0) << policy;
  EXPECT_TRUE(std::isfinite(s["val_loss_own"].get<double>())) << policy;
  EXPECT_TRUE(s["first_nonfinite_step"].is_null()) << policy << ": " << s["first_nonfinite_op"];
  EXPECT_EQ(s["steps_completed"], 200) << policy;
  std::filesystem::remove_all(dir);
}

TEST(TrainSmokeT0, Fp32) { smoke_t0("fp32"); }
TEST(TrainSmokeT0, AneFp16) { smoke_t0("ane-fp16"); }
TEST(TrainSmokeT0, AneFp16Acc32) { smoke_t0("ane-fp16-acc32"); }
TEST(TrainSmokeT0, AneMatmulOnly) { smoke_t0("ane-matmul-only"); }
TEST(TrainSmokeT0, AmpBf16) { smoke_t0("amp-bf16"); }

}  // namespace
}  // namespace roundoff::studies::train
