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
  const auto dir = testing::fresh_dir("smoke_t0_" + policy);
  const nlohmann::json s = testing::train_run(t0_config(), policy, dir, 200, [](TrainOptions& o) {
    o.recipe.warmup = 20;
    o.telemetry_every = 0;
  });
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
