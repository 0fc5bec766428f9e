#pragma once
/// \file train_test_util.hpp
/// Shared set-up of the trainer tests: a small custom config, the committed excerpt tokenised for it, and a
/// fresh results directory. ctest runs every test in its own process, in parallel, so each test must pass a
/// name of its own to fresh_dir.
#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/config.hpp"
#include "studies/train/session.hpp"

namespace roundoff::studies::train::testing {

/// T0's architecture at width d (2 layers, 2 heads, SwiGLU hidden for d), sequence seq, batch batch.
inline ModelConfig small_config(int d, int seq, int batch) {
  ModelConfig c = t0_config();
  c.name = "custom";
  c.d = d;
  c.layers = 2;
  c.heads = 2;
  c.seq = seq;
  c.batch = batch;
  c.hidden = swiglu_hidden(d);
  return c;
}

/// The committed excerpt for c's tokeniser and window shape, evaluated on its first 1024 val/test tokens.
inline const TrainData& excerpt_data(const ModelConfig& c) {
  static std::map<std::pair<int, int>, TrainData> cache;
  const auto key = std::make_pair(c.seq, c.batch);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, load_train_data(c, data::excerpt_dir(), 1024)).first;
  return it->second;
}

/// A repetitive byte corpus ("the quick brown fox ..." 200 times), tokenised as bytes; val and test are its first
/// 300 bytes in c's window shape, every token weighted 1.
inline TrainData synthetic_data(const ModelConfig& c) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  TrainData d;
  for (const unsigned char ch : text) d.train.push_back(ch);
  const std::vector<std::int32_t> val(d.train.begin(), d.train.begin() + 300);
  auto one = [](std::int32_t) -> std::int64_t { return 1; };
  d.val = make_eval_set(val, c.seq, c.batch, 0, one);
  d.test = make_eval_set(val, c.seq, c.batch, 0, one);
  d.source = "synthetic";
  d.tokenizer = "bytes";
  return d;
}

/// An empty directory under the temp dir, unique to `name`.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("roundoff_train_test_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

/// One training session on the excerpt, one thread: lr 3e-3, warmup steps/10, seed 3, telemetry every 25
/// steps, the policy's own loss-scale suggestion; `tweak` may change any option before the run.
inline nlohmann::json train_run(const ModelConfig& c, const std::string& policy, const std::filesystem::path& out,
                                std::int64_t steps, const std::function<void(TrainOptions&)>& tweak = {},
                                const ops::ExecOptions& exec = {}) {
  omp_set_num_threads(1);
  SessionSpec spec;
  spec.policy = ops::load_policy(policy);
  TrainOptions& o = spec.options;
  o.config = c;
  o.steps = steps;
  o.recipe.lr = 3e-3;
  o.recipe.warmup = std::max<int>(1, static_cast<int>(steps / 10));
  o.seed = 3;
  o.progress_every = 0;
  o.telemetry_every = 25;
  o.out = out;
  o.loss_scale = resolve_loss_scale("auto", spec.policy);
  if (tweak) tweak(o);
  spec.exec = exec;
  return run_session(spec, excerpt_data(c), nullptr);
}

}  // namespace roundoff::studies::train::testing
