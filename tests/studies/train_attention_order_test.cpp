// The trainer's model under the online attention order (policy attention=online): the forward uses the online
// softmax·V pass, the backward recomputes the weights from the saved log-sum-exp. Under fp64 it must give the
// same loss and gradients as the plain binary64 twin (which materialises the weights) up to rounding-level
// differences; under ane-fp16 it must run, learn, and give different bits from the materialised order.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/native_model.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

ModelConfig small() { return testing::small_config(16, 16, 2); }

const TrainData& data_for(const ModelConfig& c) { return testing::excerpt_data(c); }

TEST(TrainAttentionOrder, OnlineFp64GradientMatchesTheBinary64Twin) {
  omp_set_num_threads(1);
  const ModelConfig c = small();
  Transformer model(c, ResidualScale::None, ops::load_policy("fp64,attention=online"), 1);
  ASSERT_EQ(model.policy().attention_order(), ops::AttentionOrder::Online);
  testing::NativeModel<double> twin(c, ResidualScale::None);
  Recipe r;
  r.init_std = 0.2;  // logits of order 1, so the softmax is far from uniform
  const std::vector<double> w = init_params(c, r, residual_rule(ResidualScale::None, c.layers), 5);
  const Batch b = train_batch(data_for(c).train, c.seq, c.batch, 9, 0);
  std::vector<double> g(w.size()), g_twin(w.size());
  StepTelemetry t1, t2;
  const double loss = model.loss_and_grad(b, w, 1.0, g, t1);
  const double loss_twin = twin.loss_and_grad(b, w, 1.0, g_twin, t2);
  // Both are binary64 evaluations of the same function in different orders: relative differences of a few
  // hundred ulps of binary64 at most for these sizes (sums of ≤ 48 terms, depth ~30 ops), far below 1e-10.
  EXPECT_NEAR(loss, loss_twin, 1e-12 * loss);
  double gmax = 0;
  for (const double x : g_twin) gmax = std::max(gmax, std::abs(x));
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], g_twin[i], 1e-10 * gmax) << "element " << i;
}

nlohmann::json run(const std::string& policy, const std::string& name) {
  return testing::train_run(small(), policy, testing::fresh_dir("attention_order_" + name), 40, [](TrainOptions& o) {
    o.telemetry_every = 0;
  });
}

TEST(TrainAttentionOrder, OnlineAneFp16LearnsAndDiffersFromMaterialised) {
  const auto online = run("ane-fp16,attention=online", "online");
  const auto mat = run("ane-fp16", "materialised");
  EXPECT_EQ(online["policy"], "ane-fp16,attention=online");
  EXPECT_TRUE(online["first_nonfinite_step"].is_null());
  EXPECT_LT(online["val_loss_fp32"].get<double>(), std::log(256.0) - 0.5);
  EXPECT_NE(online["weights_sha256"], mat["weights_sha256"]);
}

}  // namespace
}  // namespace roundoff::studies::train
