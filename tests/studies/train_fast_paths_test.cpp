// Whole training steps on the fast paths (ops::ExecOptions::fast_paths on, the default) against the per-element
// oracle (false): the same master weights after N steps, bit for bit, for every preset but fp64 and for stochastic
// rounding, on a ragged shape (T = 37 crosses the attention's 32-row GEMM bands; hs = 10).
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
  policies.push_back("ane-fp16,all.rounding=stochastic");
  policies.push_back("pure-bf16,all.rounding=stochastic");
  for (const std::string& p : policies)
    EXPECT_EQ(sha_after(c, p, true, "fast_on"), sha_after(c, p, false, "fast_off")) << p;
}

}  // namespace
}  // namespace roundoff::studies::train
