// Evaluation and telemetry on the fast paths against what they replaced, bit for bit:
// - the gradient telemetry's branch-free counts against the per-element branching loops the trainer ran before;
// - a run whose own model is also its fp32 model (fp32 policy: one model, no twin; the own-precision evaluation
//   and the underflow telemetry's fp32 gradients are taken from it) against the same run with a separate fp32
//   twin: the same curves, telemetry, weights and summary.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "studies/train/grad_telemetry.hpp"
#include "studies/train/model.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

// The trainer's loops before the branch-free counts (the oracle).
MaskedCount underflow_oracle(std::span<const double> own, std::span<const double> ref) {
  MaskedCount c;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    if (ref[k] == 0) continue;
    ++c.selected;
    if (own[k] == 0) ++c.hits;
  }
  return c;
}

MaskedCount stagnation_oracle(std::span<const double> g, std::span<const double> after,
                              std::span<const double> before) {
  MaskedCount c;
  for (std::size_t k = 0; k < g.size(); ++k) {
    if (g[k] == 0) continue;
    ++c.selected;
    if (after[k] == before[k]) ++c.hits;
  }
  return c;
}

/// n values drawn from the cases the counts must tell apart: +0, −0, NaN, ±inf, subnormals and normals of
/// either sign.
std::vector<double> special_mix(std::size_t n, std::mt19937_64& rng) {
  const double kCases[] = {0.0, -0.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), 4.9e-324, -1e-310, 1.0, -2.5, 3e38};
  std::uniform_int_distribution<std::size_t> pick(0, std::size(kCases) - 1);
  std::vector<double> v(n);
  for (double& x : v) x = kCases[pick(rng)];
  return v;
}

TEST(GradTelemetry, CountsEqualTheBranchingLoops) {
  std::mt19937_64 rng(7);
  for (const std::size_t n : {0u, 1u, 7u, 64u, 1001u, 65536u}) {
    const std::vector<double> a = special_mix(n, rng), b = special_mix(n, rng), c = special_mix(n, rng);
    const MaskedCount u = count_underflow(a, b), uo = underflow_oracle(a, b);
    EXPECT_EQ(u.selected, uo.selected) << n;
    EXPECT_EQ(u.hits, uo.hits) << n;
    // after = before on about a third of the elements (the weights an update did not move), NaN included.
    std::vector<double> after = b;
    for (std::size_t k = 0; k < n; k += 3) after[k] = c[k];
    const MaskedCount s = count_stagnation(a, after, c), so = stagnation_oracle(a, after, c);
    EXPECT_EQ(s.selected, so.selected) << n;
    EXPECT_EQ(s.hits, so.hits) << n;
    if (n >= 1001) {
      EXPECT_GT(uo.hits, 0);  // the mix exercises every branch
      EXPECT_LT(uo.hits, uo.selected);
      EXPECT_GT(so.hits, 0);
      EXPECT_LT(so.hits, so.selected);
    }
  }
}

struct RunResult {
  std::string curves, telemetry, sha;
  nlohmann::json summary;
};

/// An fp32 run of `c` on the excerpt; `shared`: the own model is also the fp32 model.
RunResult fp32_run(const ModelConfig& c, bool shared, const std::string& loss_scale, int accum) {
  omp_set_num_threads(1);
  const ops::Policy p = ops::Policy::preset("fp32");
  TrainOptions o;
  o.config = c;
  o.steps = 4;
  o.recipe.lr = 3e-3;
  o.recipe.accum = accum;
  o.policy = p.canonical();
  o.progress_every = 0;
  o.telemetry_every = 1;
  o.eval_every = 2;
  o.loss_scale = resolve_loss_scale(loss_scale, p);
  Transformer own(c, o.residual, p, o.seed), twin(c, o.residual, p, o.seed);
  Trainer t(o, own, shared ? own : twin, testing::excerpt_data(c), nullptr);
  RunResult r;
  r.summary = t.run();
  r.curves = t.log().curves_csv();
  r.telemetry = t.log().telemetry_csv();
  r.sha = t.weights_sha256();
  return r;
}

TEST(TrainEvalFast, OwnModelAsFp32ModelGivesTheTwinsBits) {
  const ModelConfig c = testing::small_config(16, 16, 2);
  for (const auto& [scale, accum] : {std::pair<std::string, int>{"none", 1}, {"none", 2}, {"static:256", 1},
                                     {"dynamic", 2}}) {
    const RunResult one = fp32_run(c, true, scale, accum), two = fp32_run(c, false, scale, accum);
    const std::string what = scale + " accum " + std::to_string(accum);
    EXPECT_EQ(one.sha, two.sha) << what;
    EXPECT_EQ(one.curves, two.curves) << what;
    EXPECT_EQ(one.telemetry, two.telemetry) << what;
    EXPECT_NE(one.telemetry.find("underflow_fraction"), std::string::npos) << what;
    EXPECT_NE(one.curves.find("val_loss_own"), std::string::npos) << what;
    for (const char* key : {"val_loss_fp32", "val_loss_own", "val_bpb_own", "test_loss_fp32"})
      EXPECT_EQ(one.summary.at(key).get<double>(), two.summary.at(key).get<double>()) << what << " " << key;
  }
}

}  // namespace
}  // namespace roundoff::studies::train
