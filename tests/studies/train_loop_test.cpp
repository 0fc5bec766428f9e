// The training loop with the native reference model: gradient check, determinism, resume, refusal of
// corrupt or foreign checkpoints, and learning on a tiny synthetic corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "studies/common/provenance.hpp"
#include "studies/train/checkpoint.hpp"
#include "studies/train/trainer.hpp"
#include "tests/studies/native_model.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies::train {
namespace {

using testing::NativeModel;
using testing::synthetic_data;

ModelConfig tiny_config() { return testing::small_config(16, 8, 2); }

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("roundoff_train_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TrainOptions options(const ModelConfig& c, const std::filesystem::path& out, std::int64_t steps) {
  TrainOptions o;
  o.config = c;
  o.recipe.lr = 3e-3;
  o.recipe.warmup = 5;
  o.policy = "native-float";
  o.steps = steps;
  o.seed = 5;
  o.eval_every = 10;
  o.progress_every = 0;
  o.out = out;
  o.loss_scale = LossScaleSpec::parse("dynamic:1024,2,0.5,4");
  return o;
}

void check_gradient(ResidualScale rs) {
  const ModelConfig c = tiny_config();
  NativeModel<double> model(c, rs);
  Recipe r;
  r.init_std = 0.2;  // larger weights: every path carries a gradient well above rounding noise
  std::vector<double> w = init_params(c, r, residual_rule(rs, c.layers), 11);
  const TrainData data = synthetic_data(c);
  const Batch b = train_batch(data.train, c.seq, c.batch, 3, 0);
  std::vector<double> g(w.size());
  StepTelemetry tel;
  model.loss_and_grad(b, w, 1.0, g, tel);
  const ParamLayout lay = param_layout(c);
  const double n_tok = static_cast<double>(b.batch * b.seq);
  for (const ParamTensor t : kAllParamTensors) {
    double max_err = 0, max_g = 0;
    for (std::size_t j = 0; j < std::min<std::size_t>(lay.size_of(t), 24); ++j) {
      // Embedding rows of tokens absent from the batch have no gradient: sample rows that occur.
      const std::size_t k = t == ParamTensor::Embedding
                                ? lay.offset_of(t) + static_cast<std::size_t>(b.inputs[j % b.inputs.size()] * c.d) + j % c.d
                                : lay.offset_of(t) + (j * 7919) % lay.size_of(t);
      const double h = 1e-5, w0 = w[k];
      w[k] = w0 + h;
      const double up = model.total_loss(b, w) / n_tok;
      w[k] = w0 - h;
      const double down = model.total_loss(b, w) / n_tok;
      w[k] = w0;
      const double fd = (up - down) / (2 * h);
      max_err = std::max(max_err, std::abs(fd - g[k]));
      max_g = std::max(max_g, std::abs(g[k]));
    }
    // Central differences: truncation O(h²·f''') ≈ 1e-10 and cancellation ≈ 1e-16/1e-5 — far below 1e-6.
    EXPECT_LT(max_err, 1e-6 * std::max(1.0, max_g)) << name_of(t) << " (" << name_of(rs) << ")";
    EXPECT_GT(max_g, 1e-6) << name_of(t) << " has no gradient";
  }
}

TEST(TrainNativeModel, GradientMatchesFiniteDifferences) { check_gradient(ResidualScale::None); }
TEST(TrainNativeModel, GradientMatchesFiniteDifferencesScaled) { check_gradient(ResidualScale::InvSqrt2L); }
TEST(TrainNativeModel, GradientMatchesFiniteDifferencesDeepNorm) { check_gradient(ResidualScale::DeepNorm); }

nlohmann::json run_native(const TrainOptions& o, const TrainData& data) {
  NativeModel<float> own(o.config, o.residual), fp32(o.config, o.residual);
  Trainer t(o, own, fp32, data, nullptr);
  return t.run();
}

TEST(TrainLoop, LearnsAndIsDeterministic) {
  const ModelConfig c = tiny_config();
  const TrainData data = synthetic_data(c);
  const auto dir1 = fresh_dir("det1"), dir2 = fresh_dir("det2");
  const auto a = run_native(options(c, dir1, 60), data);
  const auto b = run_native(options(c, dir2, 60), data);
  EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]);
  EXPECT_EQ(a["val_loss_fp32"], b["val_loss_fp32"]);
  EXPECT_LT(a["val_loss_fp32"].get<double>(), std::log(256.0) - 1.0);
  EXPECT_TRUE(a["first_nonfinite_step"].is_null());
  for (const char* key : {"steps", "seed", "policy", "val_loss_fp32", "val_loss_own", "val_bpb_fp32", "weights_sha256",
                          "skipped_steps", "first_nonfinite_step", "git_revision", "build_flags"})
    EXPECT_TRUE(a.contains(key)) << key;
  for (const char* file : {"summary.json", "curves.csv", "telemetry.csv", "events.csv", "checkpoint.bin"})
    EXPECT_TRUE(std::filesystem::exists(dir1 / file)) << file;
  std::ifstream curves(dir1 / "curves.csv");
  std::string header;
  std::getline(curves, header);
  EXPECT_EQ(header, "step,metric,value");
  // The dynamic scaler (interval 4) grew: every change is logged as an event.
  std::ifstream events(dir1 / "events.csv");
  std::stringstream ev;
  ev << events.rdbuf();
  EXPECT_NE(ev.str().find("loss_scale,growth 1024 -> 2048"), std::string::npos) << ev.str();
  std::filesystem::remove_all(dir1);
  std::filesystem::remove_all(dir2);
}

TEST(TrainLoop, ResumeEqualsUninterrupted) {
  const ModelConfig c = tiny_config();
  const TrainData data = synthetic_data(c);
  const auto whole = fresh_dir("whole"), parts = fresh_dir("parts");
  const auto a = run_native(options(c, whole, 40), data);
  TrainOptions o = options(c, parts, 40);
  o.stop_after = 17;  // stops mid-way between evaluations, leaving a checkpoint
  const auto partial = run_native(o, data);
  EXPECT_FALSE(partial["complete"].get<bool>());
  EXPECT_EQ(partial["steps_completed"], 17);
  o.stop_after = 0;
  EXPECT_THROW(run_native(o, data), std::runtime_error);  // checkpoint exists and --resume is off
  o.resume = true;
  const auto b = run_native(o, data);
  EXPECT_EQ(a["weights_sha256"], b["weights_sha256"]);
  EXPECT_EQ(a["val_loss_own"], b["val_loss_own"]);
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  EXPECT_EQ(read(whole / "curves.csv"), read(parts / "curves.csv"));
  EXPECT_EQ(read(whole / "events.csv"), read(parts / "events.csv"));
  // Provenance per invocation: the uninterrupted run is one segment, the resumed one two.
  auto expect_segment = [](const nlohmann::json& seg, std::int64_t first, std::int64_t last) {
    EXPECT_EQ(seg.at("first_update"), first);
    EXPECT_EQ(seg.at("last_update"), last);
    EXPECT_EQ(seg.at("git_revision"), std::string(git_revision()));
    EXPECT_EQ(seg.at("build_flags"), std::string(build_flags()));
  };
  ASSERT_EQ(a["segments"].size(), 1u) << a["segments"];
  expect_segment(a["segments"][0], 0, 40);
  ASSERT_EQ(b["segments"].size(), 2u) << b["segments"];
  expect_segment(b["segments"][0], 0, 17);
  expect_segment(b["segments"][1], 17, 40);
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(parts);
}

TEST(TrainLoop, ResumeOfACheckpointWithoutSegmentsMarksItsUpdatesUnknown) {
  const ModelConfig c = tiny_config();
  const TrainData data = synthetic_data(c);
  const auto dir = fresh_dir("legacy");
  TrainOptions o = options(c, dir, 20);
  o.stop_after = 7;
  run_native(o, data);
  // A checkpoint as binaries before segment provenance wrote it.
  Checkpoint ck = load_checkpoint(dir / "checkpoint.bin");
  ASSERT_TRUE(ck.meta.contains("segments"));
  ck.meta.erase("segments");
  save_checkpoint(dir / "checkpoint.bin", ck);
  o.stop_after = 0;
  o.resume = true;
  const auto s = run_native(o, data);
  ASSERT_EQ(s["segments"].size(), 2u) << s["segments"];
  EXPECT_EQ(s["segments"][0]["first_update"], 0);
  EXPECT_EQ(s["segments"][0]["last_update"], 7);
  EXPECT_TRUE(s["segments"][0]["git_revision"].is_null());
  EXPECT_EQ(s["segments"][1]["first_update"], 7);
  EXPECT_EQ(s["segments"][1]["last_update"], 20);
  EXPECT_EQ(s["segments"][1]["git_revision"], std::string(git_revision()));
  std::filesystem::remove_all(dir);
}

TEST(TrainLoop, CorruptOrForeignCheckpointIsRefusedAndKept) {
  const ModelConfig c = tiny_config();
  const TrainData data = synthetic_data(c);
  const auto dir = fresh_dir("corrupt");
  TrainOptions o = options(c, dir, 20);
  o.stop_after = 5;
  run_native(o, data);
  const auto ckpt = dir / "checkpoint.bin";
  std::string bytes;
  {
    std::ifstream in(ckpt, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  {
    std::ofstream out(ckpt, std::ios::binary);
    out << bytes;
  }
  o.stop_after = 0;
  o.resume = true;
  EXPECT_THROW(run_native(o, data), std::runtime_error);
  std::string after;
  {
    std::ifstream in(ckpt, std::ios::binary);
    after.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(after, bytes);  // never overwritten
  // A valid checkpoint of a different run (other seed) is refused too.
  const auto dir2 = fresh_dir("foreign");
  TrainOptions p = options(c, dir2, 20);
  p.stop_after = 3;
  run_native(p, data);
  p.seed = 6;
  p.stop_after = 0;
  p.resume = true;
  EXPECT_THROW(run_native(p, data), std::runtime_error);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

}  // namespace
}  // namespace roundoff::studies::train
