// Training-step time: step/<config>/<policy>/threads:<n> for T0 and T1 under fp32 and ane-fp16, on 1 and 2
// OpenMP threads (threads split independent outputs only, so the bits do not depend on n).
// One iteration = one full optimisation step (forward, backward, unscale, clip, AdamW) on the committed
// excerpt; no evaluation, telemetry or checkpoints.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <memory>
#include <string>

#include "ops/policy.hpp"
#include "studies/data/corpus.hpp"
#include "studies/train/model.hpp"
#include "studies/train/session.hpp"
#include "studies/train/trainer.hpp"

namespace tr = roundoff::studies::train;

namespace {

void step_bench(benchmark::State& state, const std::string& config, const std::string& policy) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  const tr::ModelConfig c = tr::config_by_name(config);
  const tr::TrainData data = tr::load_train_data(c, roundoff::studies::data::excerpt_dir(), 1024);
  tr::TrainOptions o;
  o.config = c;
  o.steps = 1'000'000;
  o.telemetry_every = 0;
  o.progress_every = 0;
  const auto p = roundoff::ops::Policy::preset(policy);
  o.policy = p.canonical();
  o.loss_scale = tr::resolve_loss_scale("auto", p);
  tr::Transformer own(c, o.residual, p, o.seed), fp32(c, o.residual, roundoff::ops::Policy::preset("fp32"), o.seed);
  tr::Trainer trainer(o, own, fp32, data, nullptr);
  trainer.start();
  for (auto _ : state) trainer.step();
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(c.batch * c.seq), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(step_bench, T0_fp32, std::string("T0"), std::string("fp32"))
    ->Name("step/T0/fp32")
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK_CAPTURE(step_bench, T0_ane, std::string("T0"), std::string("ane-fp16"))
    ->Name("step/T0/ane-fp16")
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK_CAPTURE(step_bench, T1_fp32, std::string("T1"), std::string("fp32"))
    ->Name("step/T1/fp32")
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK_CAPTURE(step_bench, T1_ane, std::string("T1"), std::string("ane-fp16"))
    ->Name("step/T1/ane-fp16")
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

BENCHMARK_MAIN();
