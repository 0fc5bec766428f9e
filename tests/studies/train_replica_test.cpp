// The AutoANE replica's switches (issue 10): grouped-query attention and its head maps, tied embeddings, the two
// code defects, gradient accumulation and the AutoANE recipe, and the refusals of bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/policy.hpp"
#include "studies/train/model.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/rmsnorm_defect.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/native_model.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using testing::excerpt_data;
using testing::fresh_dir;
using testing::small_config;

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// Count of elements of [off, off+n) whose bits differ.
std::size_t differing(std::span<const double> a, std::span<const double> b, std::size_t off, std::size_t n) {
  std::size_t k = 0;
  for (std::size_t i = off; i < off + n; ++i) k += !same_bits(a[i], b[i]);
  return k;
}

/// d 24, 2 layers, 4 query heads (hs 6) on `kv` K/V heads.
ModelConfig gqa_config(int kv, GqaMap map) {
  ModelConfig c = small_config(24, 6, 2);
  c.heads = 4;
  c.kv_heads = kv;
  c.gqa_map = map;
  return c;
}

struct Pass {
  double loss;
  std::vector<double> grads;
};

Pass run_pass(const ModelConfig& c, const std::string& policy, std::span<const double> w, const Batch& b,
              ResidualScale rs = ResidualScale::None) {
  omp_set_num_threads(1);
  Transformer m(c, rs, ops::Policy::preset(policy), 1);
  Pass p{0, std::vector<double>(w.size())};
  StepTelemetry tel;
  p.loss = m.loss_and_grad(b, w, 1.0, p.grads, tel);
  return p;
}

std::vector<double> weights(const ModelConfig& c, std::uint64_t seed = 5) {
  Recipe r;
  r.init_std = 0.2;
  return init_params(c, r, residual_rule(ResidualScale::None, c.layers), seed);
}

TEST(Replica, HeadMaps) {
  // 16 query heads on 4 KV heads: block ⌊h/4⌋, cyclic h mod 4 (AUTOANE_FACTS §3.1).
  for (int h = 0; h < 16; ++h) {
    EXPECT_EQ(kv_head_of(GqaMap::Block, h, 16, 4), h / 4);
    EXPECT_EQ(kv_head_of(GqaMap::Cyclic, h, 16, 4), h % 4);
  }
}

/// A GQA model is the multi-head model whose K/V projections of query head h are copies of KV head map(h):
/// the same loss (fp32, bit for bit: the tile is a copy, every op sees the same values), and each KV head's
/// weight gradient is the sum of its query heads' gradients (fp64, to rounding).
TEST(Replica, GqaEqualsMultiHeadWithCopiedKvProjections) {
  for (const GqaMap map : {GqaMap::Block, GqaMap::Cyclic}) {
    const ModelConfig g = gqa_config(2, map);
    ModelConfig mha = g;
    mha.kv_heads = 0;
    const std::vector<double> wg = weights(g);
    const ParamLayout lg = param_layout(g), lm = param_layout(mha);
    std::vector<double> wm(lm.total);
    const int hs = g.head_size(), C = g.d;
    for (const ParamTensor t : kAllParamTensors) {
      if (t == ParamTensor::Wk || t == ParamTensor::Wv) {
        for (int l = 0; l < g.layers; ++l)
          for (int h = 0; h < g.heads; ++h)
            for (int r = 0; r < hs; ++r)
              for (int i = 0; i < C; ++i)
                wm[lm.offset_of(t) + ((static_cast<std::size_t>(l) * g.heads + h) * hs + r) * C + i] =
                    wg[lg.offset_of(t) +
                       ((static_cast<std::size_t>(l) * g.kv_count() + kv_head_of(map, h, g.heads, g.kv_count())) * hs +
                        r) * C + i];
      } else {
        std::copy_n(wg.begin() + static_cast<std::ptrdiff_t>(lg.offset_of(t)), lg.size_of(t),
                    wm.begin() + static_cast<std::ptrdiff_t>(lm.offset_of(t)));
      }
    }
    const Batch b = train_batch(excerpt_data(g).train, g.seq, g.batch, 9, 0);
    EXPECT_TRUE(same_bits(run_pass(g, "fp32", wg, b).loss, run_pass(mha, "fp32", wm, b).loss)) << name_of(map);
    const Pass pg = run_pass(g, "fp64", wg, b), pm = run_pass(mha, "fp64", wm, b);
    for (const ParamTensor t : {ParamTensor::Wk, ParamTensor::Wv})
      for (int l = 0; l < g.layers; ++l)
        for (int j = 0; j < g.kv_count(); ++j)
          for (int r = 0; r < hs; ++r)
            for (int i = 0; i < C; ++i) {
              double sum = 0;
              for (int h = 0; h < g.heads; ++h)
                if (kv_head_of(map, h, g.heads, g.kv_count()) == j)
                  sum += pm.grads[lm.offset_of(t) + ((static_cast<std::size_t>(l) * g.heads + h) * hs + r) * C + i];
              const double got =
                  pg.grads[lg.offset_of(t) + ((static_cast<std::size_t>(l) * g.kv_count() + j) * hs + r) * C + i];
              ASSERT_NEAR(got, sum, 1e-12 * (1 + std::abs(sum))) << name_of(map) << " " << name_of(t);
            }
  }
}

/// Tied embeddings: the loss of the untied model whose classifier equals the embedding (fp32, bit for bit),
/// and the tied embedding gradient is the sum of the untied model's two (fp64, to rounding).
TEST(Replica, TiedEmbeddingsSumBothGradients) {
  ModelConfig tied = small_config(16, 6, 2);
  tied.tie_embeddings = true;
  ModelConfig untied = tied;
  untied.tie_embeddings = false;
  const std::vector<double> wt = weights(tied);
  const ParamLayout lt = param_layout(tied), lu = param_layout(untied);
  EXPECT_EQ(lt.size_of(ParamTensor::Classifier), 0u);
  EXPECT_EQ(lu.total, lt.total + lu.size_of(ParamTensor::Embedding));
  std::vector<double> wu(lu.total);
  std::copy(wt.begin(), wt.end(), wu.begin());  // the classifier is the last tensor
  std::copy_n(wt.begin(), lt.size_of(ParamTensor::Embedding),
              wu.begin() + static_cast<std::ptrdiff_t>(lu.offset_of(ParamTensor::Classifier)));
  const Batch b = train_batch(excerpt_data(tied).train, tied.seq, tied.batch, 9, 0);
  EXPECT_TRUE(same_bits(run_pass(tied, "fp32", wt, b).loss, run_pass(untied, "fp32", wu, b).loss));
  const Pass pt = run_pass(tied, "fp64", wt, b), pu = run_pass(untied, "fp64", wu, b);
  for (std::size_t i = 0; i < lt.size_of(ParamTensor::Embedding); ++i) {
    const double sum = pu.grads[i] + pu.grads[lu.offset_of(ParamTensor::Classifier) + i];
    ASSERT_NEAR(pt.grads[i], sum, 1e-12 * (1 + std::abs(sum))) << "wte element " << i;
  }
}

/// --defect gqa-mismatch does what AutoANE's ANE-full code does: the forward is the cyclic model's (same loss,
/// bit for bit); the gradients of everything above the first attention core (classifier, final norm, the last
/// layer's FFN and Wo — computed before the attention backward runs) are the cyclic model's too; the
/// attention backward is the block model's Jacobian at the cyclic forward's q, k, v and upstream gradient, so
/// the gradients below it match neither model. With kv_heads = heads or 1 the two maps coincide and the
/// defect changes nothing.
TEST(Replica, GqaMismatchDefectRunsTheCyclicForwardAndTheBlockBackward) {
  const ModelConfig cyclic = gqa_config(2, GqaMap::Cyclic);
  ModelConfig block = cyclic, defect = cyclic;
  block.gqa_map = GqaMap::Block;
  defect.gqa_map = GqaMap::Block;  // ignored under the defect
  defect.defects.gqa_mismatch = true;
  const std::vector<double> w = weights(cyclic);
  const ParamLayout lay = param_layout(cyclic);
  const Batch b = train_batch(excerpt_data(cyclic).train, cyclic.seq, cyclic.batch, 9, 0);
  for (const std::string policy : {"fp32", "ane-fp16"}) {
    const Pass pc = run_pass(cyclic, policy, w, b), pb = run_pass(block, policy, w, b), pd = run_pass(defect, policy, w, b);
    EXPECT_TRUE(same_bits(pd.loss, pc.loss)) << policy;
    EXPECT_FALSE(same_bits(pd.loss, pb.loss)) << policy;
    const std::size_t last = static_cast<std::size_t>(cyclic.layers - 1);
    for (const ParamTensor t : {ParamTensor::Classifier, ParamTensor::FinalNorm}) {
      EXPECT_EQ(differing(pd.grads, pc.grads, lay.offset_of(t), lay.size_of(t)), 0u) << policy << " " << name_of(t);
    }
    for (const ParamTensor t : {ParamTensor::W1, ParamTensor::W2, ParamTensor::W3, ParamTensor::FfnNorm, ParamTensor::Wo}) {
      const std::size_t n = lay.layer_size(t);
      EXPECT_EQ(differing(pd.grads, pc.grads, lay.offset_of(t) + last * n, n), 0u) << policy << " " << name_of(t);
    }
    // Query heads 0 and 3 read the same KV head under both maps (0,0,1,1 vs 0,1,0,1), so half of Wq's rows
    // may agree; K and V gradients mix every query head.
    for (const ParamTensor t : {ParamTensor::Wq, ParamTensor::Wk, ParamTensor::Wv}) {
      const std::size_t n = lay.layer_size(t);
      EXPECT_GE(differing(pd.grads, pc.grads, lay.offset_of(t) + last * n, n), n / 2) << policy << " " << name_of(t);
      EXPECT_GE(differing(pd.grads, pb.grads, lay.offset_of(t) + last * n, n), n / 2) << policy << " " << name_of(t);
    }
  }
  for (const int kv : {1, 4}) {
    ModelConfig plain = gqa_config(kv, GqaMap::Block), mismatched = plain;
    mismatched.defects.gqa_mismatch = true;
    const std::vector<double> wk = weights(plain);
    const Pass a = run_pass(plain, "fp32", wk, b), d = run_pass(mismatched, "fp32", wk, b);
    EXPECT_TRUE(same_bits(a.loss, d.loss)) << kv;
    EXPECT_EQ(differing(a.grads, d.grads, 0, a.grads.size()), 0u) << kv;
  }
}

/// When the weights make the two KV heads identical, the cyclic and the block forward coincide, so the
/// defect's recomputed block attention is the forward's own and its gradients are the block model's, bit for
/// bit: the backward the defect runs is exactly the block model's backward, given the same forward.
TEST(Replica, GqaMismatchDefectEqualsBothModelsWhenKvHeadsAreIdentical) {
  ModelConfig cyclic = gqa_config(2, GqaMap::Cyclic);
  ModelConfig block = cyclic, defect = cyclic;
  block.gqa_map = GqaMap::Block;
  defect.defects.gqa_mismatch = true;
  std::vector<double> w = weights(cyclic);
  const ParamLayout lay = param_layout(cyclic);
  const std::size_t hs = static_cast<std::size_t>(cyclic.head_size()), C = static_cast<std::size_t>(cyclic.d);
  for (const ParamTensor t : {ParamTensor::Wk, ParamTensor::Wv})
    for (std::size_t l = 0; l < static_cast<std::size_t>(cyclic.layers); ++l)
      for (std::size_t e = 0; e < hs * C; ++e)  // KV head 1 := KV head 0
        w[lay.offset_of(t) + (l * 2 + 1) * hs * C + e] = w[lay.offset_of(t) + (l * 2) * hs * C + e];
  const Batch b = train_batch(excerpt_data(cyclic).train, cyclic.seq, cyclic.batch, 9, 0);
  const Pass pc = run_pass(cyclic, "fp32", w, b), pb = run_pass(block, "fp32", w, b), pd = run_pass(defect, "fp32", w, b);
  EXPECT_TRUE(same_bits(pc.loss, pb.loss));
  EXPECT_EQ(differing(pd.grads, pb.grads, 0, w.size()), 0u);
}

/// --defect rmsnorm-bwd: the op computes dx = w·r·(dy − x·dot) (checked against that formula in binary64);
/// with every gain 1 it is the correct backward, bit for bit; with gains ≠ 1 only the gradients below the
/// final norm change (the classifier's and the final gain's are computed before any RMSNorm backward-data).
TEST(Replica, RmsNormBackwardDefect) {
  const ops::RowShape sh{3, 5};
  const std::vector<double> x{0.3, -1.2, 0.7, 2.0, -0.1, 1.1, 0.4, -0.6, 0.9, 0.2, -2.0, 0.5, 0.25, 1.5, -0.75};
  const std::vector<double> dy{0.5, 0.1, -0.3, 0.8, -1.0, 0.2, -0.4, 0.6, 0.3, -0.9, 1.2, 0.05, -0.5, 0.7, 0.1};
  const std::vector<double> w{0.5, 1.5, -0.8, 1.2, 2.0};
  std::vector<double> rstd(3), dx(15, 0.0);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < 5; ++i) ss += x[r * 5 + i] * x[r * 5 + i];
    rstd[r] = 1 / std::sqrt(ss / 5 + 1e-5);
  }
  const ops::Ctx<ops::Emulated> ctx(ops::Policy::preset("fp64").at(ops::OpKind::RmsNorm, ops::Pass::BackwardData));
  rmsnorm_backward_data_defect(dx, dy, x, w, rstd, sh, ctx);
  for (int r = 0; r < 3; ++r) {
    double dot = 0;
    for (int i = 0; i < 5; ++i) dot += w[i] * dy[r * 5 + i] * x[r * 5 + i];
    dot *= rstd[r] * rstd[r] / 5;
    for (int i = 0; i < 5; ++i) {
      const double want = w[i] * rstd[r] * (dy[r * 5 + i] - x[r * 5 + i] * dot);
      const double right = rstd[r] * (w[i] * dy[r * 5 + i] - x[r * 5 + i] * dot);
      EXPECT_NEAR(dx[r * 5 + i], want, 1e-14) << r << "," << i;
      EXPECT_GT(std::abs(dx[r * 5 + i] - right), 1e-6) << r << "," << i;
    }
  }

  const ModelConfig c = small_config(16, 6, 2);
  ModelConfig bad = c;
  bad.defects.rmsnorm_bwd = true;
  std::vector<double> wt = weights(c);  // gains 1
  const ParamLayout lay = param_layout(c);
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);
  for (const std::string policy : {"fp32", "ane-fp16"}) {
    const Pass good = run_pass(c, policy, wt, b), defect = run_pass(bad, policy, wt, b);
    EXPECT_EQ(differing(good.grads, defect.grads, 0, wt.size()), 0u) << policy << ": gains 1";
  }
  for (const ParamTensor t : {ParamTensor::AttnNorm, ParamTensor::FfnNorm, ParamTensor::FinalNorm})
    for (std::size_t i = 0; i < lay.size_of(t); ++i) wt[lay.offset_of(t) + i] = 1.0 + 0.125 * static_cast<double>(i % 5);
  for (const std::string policy : {"fp32", "ane-fp16"}) {
    const Pass good = run_pass(c, policy, wt, b), defect = run_pass(bad, policy, wt, b);
    EXPECT_TRUE(same_bits(good.loss, defect.loss)) << policy;
    for (const ParamTensor t : kAllParamTensors) {
      const std::size_t diff = differing(good.grads, defect.grads, lay.offset_of(t), lay.size_of(t));
      if (t == ParamTensor::Classifier || t == ParamTensor::FinalNorm)
        EXPECT_EQ(diff, 0u) << policy << " " << name_of(t);
      else
        EXPECT_GT(diff, 0u) << policy << " " << name_of(t);
    }
  }
}

TEST(Replica, DefectListParsing) {
  EXPECT_FALSE(parse_defects("none").any());
  EXPECT_TRUE(parse_defects("gqa-mismatch").gqa_mismatch);
  const Defects both = parse_defects("gqa-mismatch,rmsnorm-bwd");
  EXPECT_TRUE(both.gqa_mismatch && both.rmsnorm_bwd);
  EXPECT_EQ(defects_text(both), "gqa-mismatch,rmsnorm-bwd");
  try {
    parse_defects("gqa-mismatch,softmax");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'softmax'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gqa-mismatch, rmsnorm-bwd"), std::string::npos);
  }
  ModelConfig c = gqa_config(3, GqaMap::Block);
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-heads must divide --heads"), std::string::npos) << e.what();
  }
}

/// AutoANE's init: uniform with the bounds of its train.m, α = 1/√(2L) on Wo and W2, embedding ±0.02.
TEST(Replica, AutoAneInitBounds) {
  ModelConfig c = gqa_config(2, GqaMap::Block);
  c.tie_embeddings = true;
  Recipe r;
  r.init = InitRule::AutoAne;
  const std::vector<double> w = init_params(c, r, residual_rule(ResidualScale::InvSqrt2L, c.layers), 7);
  const ParamLayout lay = param_layout(c);
  const double alpha = 1 / std::sqrt(2.0 * c.layers);
  auto bound = [&](ParamTensor t) {
    double m = 0;
    for (std::size_t i = 0; i < lay.size_of(t); ++i) m = std::max(m, std::abs(w[lay.offset_of(t) + i]));
    return m;
  };
  const struct {
    ParamTensor t;
    double a;
  } cases[] = {{ParamTensor::Embedding, 0.02},
               {ParamTensor::Wq, 1 / std::sqrt(24.0)},
               {ParamTensor::Wk, 1 / std::sqrt(24.0)},
               {ParamTensor::Wo, alpha / std::sqrt(24.0)},
               {ParamTensor::W1, 1 / std::sqrt(static_cast<double>(c.hidden))},
               {ParamTensor::W2, alpha / std::sqrt(24.0)}};
  for (const auto& k : cases) {
    EXPECT_LE(bound(k.t), k.a) << name_of(k.t);
    EXPECT_GT(bound(k.t), 0.9 * k.a) << name_of(k.t);  // ≥ 200 uniform draws reach 90 % of the bound
  }
  EXPECT_EQ(bound(ParamTensor::FinalNorm), 1.0);
}

/// AutoANE's schedule, in micro-steps, evaluated at the last micro-step of each update.
TEST(Replica, AutoAneScheduleAtUpdateSteps) {
  Recipe r = autoane_recipe();
  EXPECT_DOUBLE_EQ(update_learning_rate(r, 0, 1000), 3e-4 * 10 / 100);      // micro-step 9
  EXPECT_DOUBLE_EQ(update_learning_rate(r, 9, 1000), 3e-4);                 // micro-step 99
  EXPECT_DOUBLE_EQ(learning_rate_autoane(r, 100), 3e-4);                    // cosine starts at the peak
  r.total_steps = 1100;
  EXPECT_NEAR(learning_rate_autoane(r, 600), 3e-5 + 0.5 * 2.7e-4, 1e-15);  // half-way
  EXPECT_NEAR(learning_rate_autoane(r, 1100), 3e-5, 1e-15);
}

/// Accumulated gradients: summed in fp32 in micro-step order, unscaled by fl32(1/(N·S)).
TEST(Replica, AccumulationSumsAndUnscales) {
  std::vector<double> total(3), a{1.0, 0x1p-30, -2.0}, b{0x1p-24, 1.0, 2.0};
  accumulate_gradients(total, a, true);
  accumulate_gradients(total, b, false);
  EXPECT_EQ(total[0], 1.0);  // 1 + 2^-24 rounds to 1 in fp32 (a tie, to even)
  EXPECT_EQ(total[1], 1.0);  // 2^-30 + 1 rounds to 1
  EXPECT_EQ(total[2], 0.0);
  std::vector<double> g{2560.0 * 3};
  EXPECT_TRUE(unscale_gradients(g, 256, 10));
  const float gsc = 1.0f / 2560.0f;
  EXPECT_EQ(g[0], static_cast<double>(7680.0f * gsc));
}

nlohmann::json accum_run(const ModelConfig& c, const std::filesystem::path& out, std::int64_t steps,
                         const std::function<void(TrainOptions&)>& tweak = {}) {
  return testing::train_run(c, "ane-fp16,all.rounding=stochastic", out, steps, [&](TrainOptions& o) {
    o.recipe.accum = 3;
    o.telemetry_every = 1;
    if (tweak) tweak(o);
  });
}

/// The fp64 gradient check with accumulation: two micro-batches' gradients of a GQA model with tied embeddings,
/// summed by accumulate_gradients (fp32), against central differences of the summed mean losses. Tolerance:
/// the differences' own error (≪ 1e-7, as in TrainModel's check) plus the fp32 rounding of the sum, u·|g|.
TEST(Replica, Fp64GradientWithAccumulationMatchesFiniteDifferences) {
  omp_set_num_threads(1);
  ModelConfig c = small_config(16, 4, 2);
  c.heads = 4;
  c.kv_heads = 2;
  c.gqa_map = GqaMap::Cyclic;
  c.tie_embeddings = true;
  Transformer model(c, ResidualScale::InvSqrt2L, ops::Policy::preset("fp64"), 1);
  std::vector<double> w = weights(c);
  const Batch b0 = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0),
              b1 = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 1);
  std::vector<double> g(w.size()), micro(w.size());
  StepTelemetry tel;
  model.loss_and_grad(b0, w, 1.0, micro, tel);
  accumulate_gradients(g, micro, true);
  model.loss_and_grad(b1, w, 1.0, micro, tel);
  accumulate_gradients(g, micro, false);
  const double n_tok = static_cast<double>(c.seq * c.batch);
  auto loss = [&] { return (model.total_loss(b0, w) + model.total_loss(b1, w)) / n_tok; };
  const ParamLayout lay = param_layout(c);
  for (const ParamTensor t : kAllParamTensors) {
    if (lay.size_of(t) == 0) continue;
    for (std::size_t j = 0; j < 2; ++j) {
      const std::size_t k = t == ParamTensor::Embedding
                                ? lay.offset_of(t) + static_cast<std::size_t>(b1.inputs[j] * c.d) + j
                                : lay.offset_of(t) + (j * 7919) % lay.size_of(t);
      const double h = 1e-5, w0 = w[k];
      w[k] = w0 + h;
      const double up = loss();
      w[k] = w0 - h;
      const double down = loss();
      w[k] = w0;
      EXPECT_NEAR((up - down) / (2 * h), g[k], 1e-7 + 0x1p-24 * std::abs(g[k])) << name_of(t) << " element " << k;
    }
  }
}

TEST(Replica, RefusesAccumZeroAndUsesTheBlockModelForEvaluationUnderTheMismatch) {
  ModelConfig c = gqa_config(2, GqaMap::Cyclic);
  c.defects.gqa_mismatch = true;
  const ModelConfig e = evaluation_config(c);
  EXPECT_FALSE(e.defects.gqa_mismatch);
  EXPECT_EQ(e.gqa_map, GqaMap::Block);
  Transformer own(c, ResidualScale::None, ops::Policy::preset("fp32"), 1), eval(e, ResidualScale::None,
                                                                                 ops::Policy::preset("fp32"), 1);
  TrainOptions o;
  o.config = c;
  o.recipe.accum = 0;
  try {
    Trainer t(o, own, eval, excerpt_data(c), nullptr);
    FAIL();
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("--accum must be >= 1"), std::string::npos) << ex.what();
  }
}

/// With accumulation: the same weights for one and two threads, and a resumed run equals an uninterrupted one.
TEST(Replica, AccumulationIsDeterministicAcrossThreadsAndResume) {
  ModelConfig c = gqa_config(2, GqaMap::Cyclic);
  c.seq = 8;
  c.tie_embeddings = true;
  const auto a = accum_run(c, fresh_dir("acc1"), 2);
  const auto b = accum_run(c, fresh_dir("acc2"), 2, [](TrainOptions&) { omp_set_num_threads(2); });
  omp_set_num_threads(1);
  EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]);
  const auto dir = fresh_dir("acc_parts");
  accum_run(c, dir, 2, [](TrainOptions& o) { o.stop_after = 1; });
  const auto r = accum_run(c, dir, 2, [](TrainOptions& o) { o.resume = true; });
  EXPECT_EQ(a["weights_sha256"], r["weights_sha256"]);
  EXPECT_EQ(a["autoane_train_loss"], r["autoane_train_loss"]);
  EXPECT_EQ(a["micro_steps_completed"], 6);
  EXPECT_EQ(a["autoane_train_loss_window"], 6);
  EXPECT_EQ(a["steps_count"], "updates");
}

/// The underflow telemetry of an accumulated update compares the fp32 pass with the gradients of the same
/// micro-step. Under the fp32 policy at loss scale 1 these are the same gradients, so no tensor loses any:
/// every underflow_fraction is 0. (Comparing with the update's gradient buffer instead, which holds the
/// previous update's unscaled sum — zeros at step 0 — gives 1 at step 0.)
TEST(Replica, UnderflowTelemetryWithAccumulationReadsTheMicroStepGradients) {
  ModelConfig c = small_config(16, 6, 2);
  const auto dir = fresh_dir("underflow_accum");
  testing::train_run(c, "fp32", dir, 2, [](TrainOptions& o) {
    o.recipe.accum = 2;
    o.telemetry_every = 1;
    o.loss_scale = LossScaleSpec::parse("static:1");
  });
  std::ifstream in(dir / "telemetry.csv");
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(",underflow_fraction,") == std::string::npos) continue;
    ++rows;
    EXPECT_EQ(std::stod(line.substr(line.rfind(',') + 1)), 0.0) << line;
  }
  const ParamLayout lay = param_layout(c);
  const auto tensors = std::count_if(kAllParamTensors.begin(), kAllParamTensors.end(),
                                     [&](ParamTensor t) { return lay.size_of(t) > 0; });
  EXPECT_EQ(rows, 2 * tensors) << "one row per tensor and step";
  std::filesystem::remove_all(dir);
}

/// Model::weights_changed: the working copy is derived once per version. Weights changed behind an unchanged
/// version are not seen (the caller broke its promise: this shows the copy is reused); a new version sees them
/// and gives the bits of a model that never cached; after release_weights every call derives.
TEST(Replica, WeightsVersionReusesTheWorkingCopyUntilItChanges) {
  omp_set_num_threads(1);
  const ModelConfig c = small_config(16, 6, 2);
  // A policy whose weights role rounds the fp32 masters (a copy exists; an fp32 role reads the masters).
  const ops::Policy policy = ops::Policy::preset("pure-fp16");
  ASSERT_EQ(policy.storage_for(ops::TensorRole::Weight), numerics::formats::fp16);
  const Batch b = train_batch(excerpt_data(c).train, c.seq, c.batch, 9, 0);
  std::vector<double> w = weights(c), other = weights(c, 6);
  Transformer cached(c, ResidualScale::None, policy, 1), fresh(c, ResidualScale::None, policy, 1);
  cached.weights_changed();
  const double first = cached.total_loss(b, w);
  std::vector<double> original = w;
  w = other;  // same buffer, new values, same version
  EXPECT_EQ(cached.total_loss(b, w), first);
  cached.weights_changed();
  EXPECT_EQ(cached.total_loss(b, w), fresh.total_loss(b, other));
  cached.release_weights();
  w = original;
  EXPECT_EQ(cached.total_loss(b, w), first);
  w = other;
  EXPECT_EQ(cached.total_loss(b, w), fresh.total_loss(b, other));
  EXPECT_NE(first, fresh.total_loss(b, other)) << "the two weight sets must give different losses";
}

/// The trainer with accumulation under the fp32 policy equals the same trainer driving the plain-float twin.
TEST(Replica, AccumulatedFp32RunEqualsPlainFloatTwin) {
  omp_set_num_threads(1);
  ModelConfig c = gqa_config(2, GqaMap::Block);
  c.seq = 8;
  c.tie_embeddings = true;
  const TrainData& data = excerpt_data(c);
  TrainOptions o;
  o.config = c;
  o.steps = 3;
  o.recipe = autoane_recipe();
  o.recipe.lr = 3e-3;
  o.recipe.accum = 2;
  o.recipe.warmup = 2;
  o.recipe.total_steps = 6;
  o.residual = ResidualScale::InvSqrt2L;
  o.loss_scale = LossScaleSpec::parse("static:256");
  o.progress_every = 0;
  o.telemetry_every = 0;
  Transformer own(c, o.residual, ops::Policy::preset("fp32"), 1), eval(c, o.residual, ops::Policy::preset("fp32"), 1);
  testing::NativeModel<float> twin(c, o.residual), twin_eval(c, o.residual);
  Trainer t1(o, own, eval, data, nullptr), t2(o, twin, twin_eval, data, nullptr);
  t1.start();
  t2.start();
  while (!t1.done()) t1.step();
  while (!t2.done()) t2.step();
  EXPECT_EQ(t1.weights_sha256(), t2.weights_sha256());
  EXPECT_TRUE(same_bits(t1.autoane_metric(), t2.autoane_metric()));
}

}  // namespace
}  // namespace roundoff::studies::train
