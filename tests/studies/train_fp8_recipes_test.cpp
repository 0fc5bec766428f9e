// The fp8 training recipes (issue 44, ops/fp8_scaling.hpp) in the trainer: the same weights for one and two threads,
// and a run killed after 4 of 6 steps and resumed from its checkpoint (which carries the delayed-scaling amax
// histories) equal to the uninterrupted run. Each run in a directory of its own (ctest runs tests in parallel).
#include <gtest/gtest.h>
#include <omp.h>

#include <fstream>
#include <string>

#include "studies/train/checkpoint.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using testing::fresh_dir;
using testing::small_config;

/// deepseek-fp8 with 16-wide blocks and promotion every 16 products (small_config(32, ...) has no dimension of 128):
/// the exact per-block GEMM model.
const std::string kDeepseekSmall =
    "deepseek-fp8,matmul.fp8-x=e4m3:1x16,matmul.fp8-w=e4m3:16x16,matmul.fp8-dy=e4m3:1x16,"
    "matmul.acc=[tc-h100-fp8,promote=16:fp32]";


TEST(TrainFp8Recipes, SameWeightsForOneAndTwoThreads) {
  const ModelConfig c = small_config(32, 16, 2);
  // The per-tensor state (delayed) and the exact per-block GEMM; two steps (two threads spin on a loaded machine).
  for (const std::string& policy : {std::string("te-fp8-delayed,fp8-scaling=delayed:4:max:0"), kDeepseekSmall}) {
    const auto a = testing::train_run(c, policy, fresh_dir("fp8_threads_1"), 2);
    const auto b = testing::train_run(c, policy, fresh_dir("fp8_threads_2"), 2,
                                      [](TrainOptions&) { omp_set_num_threads(2); });
    omp_set_num_threads(1);
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
    EXPECT_EQ(a["val_loss_own"], b["val_loss_own"]) << policy;
  }
}

TEST(TrainFp8Recipes, ResumeWithTheAmaxHistoryEqualsUninterrupted) {
  const ModelConfig c = small_config(32, 16, 2);
  // H = 3 (shorter than the run: the window slides) and TE's default 1024 (longer than the run).
  for (const std::string& policy : {std::string("te-fp8-delayed,fp8-scaling=delayed:3:max:1"),
                                   std::string("te-fp8-delayed")}) {
    const auto a = testing::train_run(c, policy, fresh_dir("fp8_resume_whole"), 6);
    const auto dir = fresh_dir("fp8_resume_parts");
    testing::train_run(c, policy, dir, 6, [](TrainOptions& o) { o.stop_after = 4; });
    // The checkpoint after step 4 holds a history per tensor, with scales that are no longer the initial 1.
    const Checkpoint ck = load_checkpoint(dir / "checkpoint.bin");
    ASSERT_TRUE(ck.meta.contains("fp8_scaling")) << policy;
    const auto& tensors = ck.meta.at("fp8_scaling").at("tensors");
    EXPECT_EQ(tensors.size(), 2u * 7u * 3u);  // 2 layers × Q K V O W1 W3 W2 × x, w, dy
    EXPECT_NE(tensors.at("L0.matmul.q.x").at("scale").get<std::uint32_t>(), 0x3f800000u);
    const auto b = testing::train_run(c, policy, dir, 6, [](TrainOptions& o) { o.resume = true; });
    EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]) << policy;
  }
  // Delayed and current scaling train differently (the state matters: a resume that lost it would differ too).
  const auto d = testing::train_run(c, "te-fp8-delayed", fresh_dir("fp8_resume_delayed"), 3);
  const auto cur = testing::train_run(c, "te-fp8-current", fresh_dir("fp8_resume_current"), 3);
  EXPECT_NE(d["weights_sha256"], cur["weights_sha256"]);
}

}  // namespace
}  // namespace roundoff::studies::train
