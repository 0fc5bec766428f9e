// Global error of the trainer's model: every forward activation and weight gradient against a full fp64 run.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

ModelConfig tiny() { return testing::small_config(16, 8, 2); }

std::vector<ops::OpRecord> global_records(const std::string& policy, ResidualScale rs) {
  omp_set_num_threads(1);
  const ModelConfig c = tiny();
  const TrainData& data = testing::excerpt_data(c);
  Transformer own(c, rs, ops::load_policy(policy), 7), ref(c, rs, ops::Policy::preset("fp64"), 7);
  const std::vector<double> w = init_params(c, Recipe{}, residual_rule(rs, c.layers), 7);
  ops::Tape tape;
  own.global_error(4, data.val.batches.front(), w, 1024.0, ref, tape);
  return tape.records();
}

TEST(TrainGlobalError, ShadowPassRecordsTheSameGlobalErrorAsItsOwnPass) {
  // The trainer's attribution step runs the MPFR shadow and the global error on one forward+backward.
  omp_set_num_threads(1);
  const ModelConfig c = tiny();
  const TrainData& data = testing::excerpt_data(c);
  Transformer own(c, ResidualScale::None, ops::load_policy("ane-fp16,all.rounding=stochastic"), 7),
      ref(c, ResidualScale::None, ops::Policy::preset("fp64"), 7);
  const std::vector<double> w = init_params(c, Recipe{}, residual_rule(ResidualScale::None, c.layers), 7);
  ops::Tape with_shadow, alone;
  own.shadow(4, data.val.batches.front(), w, 1024.0, with_shadow, 2, &ref);
  own.global_error(4, data.val.batches.front(), w, 1024.0, ref, alone);
  std::vector<ops::OpRecord> global;
  for (const ops::OpRecord& r : with_shadow.records())
    if (r.kind == ops::RecordKind::Global) global.push_back(r);
  ASSERT_EQ(global.size(), alone.records().size());
  for (std::size_t i = 0; i < global.size(); ++i) {
    EXPECT_EQ(global[i].tensor, alone.records()[i].tensor);
    EXPECT_EQ(global[i].error.norm_rel, alone.records()[i].error.norm_rel) << global[i].tensor;
    EXPECT_EQ(global[i].error.max_ulp, alone.records()[i].error.max_ulp) << global[i].tensor;
  }
}

TEST(TrainGlobalError, Fp64ModelAgainstItselfIsExact) {
  for (const ResidualScale rs : {ResidualScale::None, ResidualScale::DeepNorm}) {
    const auto recs = global_records("fp64", rs);
    ASSERT_FALSE(recs.empty());
    for (const ops::OpRecord& r : recs) {
      EXPECT_EQ(r.kind, ops::RecordKind::Global);
      EXPECT_EQ(r.error.max_ulp, 0.0) << ops::name_of(r.op) << " " << r.tensor << " layer " << r.layer;
      EXPECT_EQ(r.step, 4);
    }
  }
}

TEST(TrainGlobalError, EverySiteAndGradientIsRecordedUnderAneFp16) {
  const auto recs = global_records("ane-fp16", ResidualScale::None);
  // Pre-Norm: 18 activations per layer (no post-norms), lnf, logits, loss; gradients: 9 per layer + 3.
  const ModelConfig c = tiny();
  std::int64_t fwd = 0, wgrad = 0;
  std::set<std::string> names;
  for (const ops::OpRecord& r : recs) {
    if (r.pass == ops::Pass::Forward) ++fwd;
    if (r.pass == ops::Pass::BackwardWeight) ++wgrad;
    names.insert(std::string(ops::name_of(r.op)) + "." + r.tensor);
    EXPECT_TRUE(std::isfinite(r.error.norm_rel)) << r.tensor;
  }
  EXPECT_EQ(fwd, 18 * c.layers + 3);
  EXPECT_EQ(wgrad, 9 * c.layers + 3);
  // fp16 storage of activations: every forward output after the embedding carries error, which cannot vanish
  // by accident on all of them; the loss differs from the fp64 loss.
  std::map<std::string, double> err;
  for (const ops::OpRecord& r : recs) err[std::string(ops::name_of(r.op)) + "." + r.tensor] += r.error.norm_rel;
  EXPECT_GT(err["cross-entropy.loss"], 0.0);
  EXPECT_GT(err["matmul.w2"], 0.0);
  EXPECT_GT(err["matmul.wq"], 0.0);  // a weight gradient
  EXPECT_TRUE(names.count("softmax.att") == 1 && names.count("classifier.wcls") == 1);
}

// The model's list of saved activations (record_global) names each tensor by the op that produced it: a global
// record (op, layer, tensor) of a block's forward needs a local record of the same op, layer and tensor (or
// "tensor.output") from the shadow of the same pass, and every op that ran forward in a block has at least one
// global record there. Walks every feed-forward (SwiGLU, GELU erf and tanh) and both residual rules, so that a
// new op the model calls (GELU: z = gelu(g), no W3, no SiLU) fails here until the list names it.
TEST(TrainGlobalError, EachSavedActivationIsNamedByTheOpThatProducedIt) {
  omp_set_num_threads(1);
  for (const Ffn ffn : {Ffn::SwiGlu, Ffn::Gelu, Ffn::GeluTanh})
    for (const ResidualScale rs : {ResidualScale::None, ResidualScale::DeepNorm}) {
      ModelConfig c = tiny();
      c.ffn = ffn;
      const TrainData& data = testing::excerpt_data(c);
      Transformer own(c, rs, ops::Policy::preset("ane-fp16"), 7), ref(c, rs, ops::Policy::preset("fp64"), 7);
      const std::vector<double> w = init_params(c, Recipe{}, residual_rule(rs, c.layers), 7);
      ops::Tape tape;
      own.shadow(4, data.val.batches.front(), w, 1024.0, tape, 1, &ref);
      std::set<std::tuple<int, ops::OpKind, std::string>> local;
      std::set<std::pair<int, ops::OpKind>> ran, recorded;
      for (const ops::OpRecord& r : tape.records())
        if (r.kind == ops::RecordKind::Local && r.pass == ops::Pass::Forward && r.layer >= 0) {
          local.insert({r.layer, r.op, r.tensor.substr(0, r.tensor.find('.'))});
          ran.insert({r.layer, r.op});
        }
      const std::string what = std::string(name_of(ffn)) + (rs == ResidualScale::None ? " pre-norm" : " deepnorm");
      for (const ops::OpRecord& r : tape.records())
        if (r.kind == ops::RecordKind::Global && r.pass == ops::Pass::Forward && r.layer >= 0) {
          EXPECT_TRUE(local.count({r.layer, r.op, r.tensor}) == 1)
              << what << ": global record " << ops::name_of(r.op) << "." << r.tensor << " [layer " << r.layer
              << "] names no op call of the forward";
          recorded.insert({r.layer, r.op});
        }
      for (const auto& [layer, op] : ran)
        EXPECT_TRUE(recorded.count({layer, op}) == 1)
            << what << ": " << ops::name_of(op) << " ran in layer " << layer << " but no saved activation names it";
    }
}

}  // namespace
}  // namespace roundoff::studies::train
