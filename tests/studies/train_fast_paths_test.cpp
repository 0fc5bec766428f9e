// Whole training steps on the fast paths (ops::ExecOptions::fast_paths on, the default) against the per-element
// oracle (false): the same master weights after N steps, bit for bit, for every preset but fp64 and for stochastic
// rounding, on a ragged shape (the block presets on a shape their blocks divide) (T = 37 crosses the attention's 32-row GEMM bands; hs = 10).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/backend.hpp"
#include "ops/policy.hpp"
#include "tests/studies/train_test_util.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::studies::train {
namespace {

std::string sha_after(const ModelConfig& c, const std::string& policy, bool fast, const std::string& name) {
  const nlohmann::json s = testing::train_run(
      c, policy, testing::fresh_dir(name), 3, [](TrainOptions& o) { o.telemetry_every = 2; },
      ::roundoff::test::exec_for(fast));
  // Equal hashes of weights that went non-finite would compare a divergence, not the arithmetic.
  EXPECT_FALSE(s["diverged"].get<bool>()) << policy << (fast ? " fast" : " oracle");
  return s["weights_sha256"].get<std::string>();
}

TEST(TrainFastPaths, WeightsEqualThePerElementOracleAfterThreeSteps) {
  const ModelConfig c = testing::small_config(20, 37, 2);
  std::vector<std::string> policies = ops::Policy::preset_names();
  // fp64 runs every elementwise op through MPFR (seconds per step); its attention GEMMs take the generic path,
  // covered op by op in tests/ops/attention_gemm_test.cpp.
  policies.erase(std::remove(policies.begin(), policies.end(), "fp64"), policies.end());
  // The block presets need contraction axes that are multiples of their blocks: the test below.
  policies.erase(std::remove_if(policies.begin(), policies.end(),
                                [](const std::string& p) {
                                  const ops::Policy pol = ops::Policy::preset(p);
                                  for (ops::OpKind k : ops::kAllOps)
                                    for (ops::Pass ps : ops::kAllPasses)
                                      if (pol.at(k, ps).quant.active()) return true;
                                  return false;
                                }),
                 policies.end());
  policies.push_back("ane-fp16,all.rounding=stochastic");
  policies.push_back("pure-bf16,all.rounding=stochastic");
  for (const std::string& p : policies)
    EXPECT_EQ(sha_after(c, p, true, "fast_on"), sha_after(c, p, false, "fast_off")) << p;
}

TEST(TrainFastPaths, BlockPresetsWeightsEqualTheOracleAfterThreeSteps) {
  // d = 32 (hidden 96), 2 blocks, 64 tokens: every contraction axis a multiple of 32 and of the RHT's 16, every
  // weight a grid of 16×16 tiles. Block quantization (ops/gemm_quant.hpp) runs the same code on both arms; the GEMM
  // of the decoded operands takes the kernels or the generic path, and stochastic gradients draw the same keys.
  const ModelConfig c = testing::small_config(32, 32, 2);
  // Directories of their own: ctest runs this test beside the one above.
  for (const char* p : {"mxfp8", "mxfp6", "mxfp4", "nvfp4", "nvfp4,block-keep=1:0", "int4-g32", "nf4"})
    EXPECT_EQ(sha_after(c, p, true, "block_fast_on"), sha_after(c, p, false, "block_fast_off")) << p;
}

}  // namespace
}  // namespace roundoff::studies::train
