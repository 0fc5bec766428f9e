// Training-step time: step/<config>/<policy>[/oracle]/threads:<n> for T0, T1 and W512 (d 512, 4 layers,
// 8 heads, seq 128, batch 4, BPE-1024) under fp32, ane-fp16, ane-guide and ane-guide with flush to zero
// (all.ftz=out,all.daz=on: the cost of the flush passes), on 1 and 2 OpenMP threads (threads split
// independent outputs only, so the bits do not depend on n). `/oracle` runs the same step with the ops' fast
// paths off (ops::ExecOptions::fast_paths off: the per-element definitions), so the speed-up of the fast paths is a
// ratio measured in the same run. One iteration = one full optimisation step (forward, backward, unscale,
// clip, AdamW) on the committed excerpt; no evaluation, telemetry or checkpoints.
//
//   build/bench/train_bench --benchmark_filter='step/T1/' [--profile]
//
// --profile (this program's own flag): after each benchmark, print its per-(op, pass) table (ops::Profile).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "ops/backend.hpp"
#include "ops/policy.hpp"
#include "ops/profile.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "studies/train/trainer.hpp"

namespace tr = roundoff::studies::train;

namespace {

bool g_profile = false;

tr::ModelConfig config_named(const std::string& name) {
  if (name != "W512") return tr::config_by_name(name);
  tr::ModelConfig c = tr::config_by_name("custom");
  c.d = 512;
  c.layers = 4;
  c.heads = 8;
  c.seq = 128;
  c.batch = 4;
  c.hidden = tr::swiglu_hidden(512);
  c.tokenizer = tr::TokenizerKind::Bpe;
  c.vocab = 1024;
  c.validate();
  return c;
}

void step_bench(benchmark::State& state, const std::string& name, const std::string& config, const std::string& policy,
                bool oracle) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  const tr::ModelConfig c = config_named(config);
  const tr::TrainData data = tr::load_train_data(c, roundoff::studies::data::excerpt_dir(), 1024);
  tr::TrainOptions o;
  o.config = c;
  o.steps = 1'000'000;
  o.telemetry_every = 0;
  o.progress_every = 0;
  const auto p = roundoff::ops::load_policy(policy);
  o.policy = p.canonical();
  o.loss_scale = tr::resolve_loss_scale("auto", p);
  roundoff::ops::ExecOptions exec;
  exec.fast_paths = !oracle;
  tr::Transformer own(c, o.residual, p, o.seed, exec),
      fp32(c, o.residual, roundoff::ops::Policy::preset("fp32"), o.seed, exec);
  tr::Trainer trainer(o, own, fp32, data, nullptr);
  roundoff::ops::Profile profile;
  if (g_profile) trainer.set_profile(&profile);
  trainer.start();
  for (auto _ : state) trainer.step();
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(c.batch * c.seq), benchmark::Counter::kIsIterationInvariantRate);
  if (g_profile) {
    std::cout << name << "/threads:" << state.range(0) << "\n";
    profile.print(std::cout);
  }
}

void register_all() {
  for (const char* config : {"T0", "T1", "W512"})
    for (const char* policy : {"fp32", "ane-fp16", "ane-guide", "ane-guide,all.ftz=out,all.daz=on"})
      for (bool oracle : {false, true}) {
        const std::string name = std::string("step/") + config + "/" + policy + (oracle ? "/oracle" : "");
        auto* b = benchmark::RegisterBenchmark(name.c_str(), step_bench, name, std::string(config),
                                               std::string(policy), oracle);
        b->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
        if (std::string(config) == "W512") {
          b->Iterations(2);
        } else {
          b->Arg(2)->MinTime(2.0);
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  int n = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0) {
      g_profile = true;
    } else {
      argv[n++] = argv[i];
    }
  }
  argc = n;
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
