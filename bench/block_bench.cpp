// Transformer-block benchmarks.
//
//   block/<policy>/<d>          forward + backward of one Pre-RMSNorm SwiGLU block (ops::run_block) at d = 128,
//                               4 heads of 32, T = 64, batch 4, hidden 352, under the policy, shadow off.
//                               Target (issue 4): block/ane-fp16/128 ≤ 4 × block/fp32/128 in the same run.
//   shadow/<op>/<on|off>/<d>    one op forward + backward through the study's op case (studies/op_error) at
//                               d-sized shapes under ane-fp16, with the MPFR shadow on every call (all units)
//                               or off; the difference is the shadow's cost for that op. Counter `records`.
//
//   op/<policy>/<op>/<d>        the same op case with the shadow off under fp32 or ane-fp16: which op dominates.
//
// Runs single-threaded unless OMP_NUM_THREADS says otherwise; compare ratios within one run only.
#include <benchmark/benchmark.h>

#include <string>

#include "ops/demo.hpp"
#include "ops/policy.hpp"
#include "ops/runner.hpp"
#include "studies/op_error/op_case.hpp"

namespace {

using roundoff::ops::OpKind;

void block(benchmark::State& state, const std::string& policy, std::int64_t d) {
  const roundoff::ops::Policy pol = roundoff::ops::Policy::parse(policy);
  roundoff::ops::BlockConfig cfg;
  cfg.B = 4;
  cfg.T = 64;
  cfg.C = d;
  cfg.NH = 4;
  cfg.hidden = 352 * d / 128;
  roundoff::ops::Runner run(pol, 1);
  for (auto _ : state) {
    auto r = roundoff::ops::run_block(run, cfg);
    benchmark::DoNotOptimize(r.out.data());
  }
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(cfg.B * cfg.T) * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

void shadow(benchmark::State& state, OpKind op, bool on, std::int64_t d, const std::string& policy = "ane-fp16") {
  namespace oe = roundoff::studies::op_error;
  const roundoff::ops::Policy pol = roundoff::ops::Policy::parse(policy);
  oe::CaseConfig c;
  c.op = op;
  c.shape = oe::block_shape(op, d);
  c.rows = 16;
  c.ref_budget = 1e12;  // every computed unit shadowed
  c.shadow = on;
  std::size_t records = 0;
  for (auto _ : state) records = oe::run_case(pol, c).size();
  state.counters["records"] = static_cast<double>(records);
}

int register_all() {
  for (const char* p : {"fp32", "ane-fp16"})
    benchmark::RegisterBenchmark((std::string("block/") + p + "/128").c_str(),
                                 [p](benchmark::State& s) { block(s, p, 128); })
        ->Unit(benchmark::kMillisecond);
  for (OpKind op : {OpKind::RmsNorm, OpKind::Matmul, OpKind::RopeRotate, OpKind::AttnScores, OpKind::Softmax,
                    OpKind::AttnValues, OpKind::Silu, OpKind::SwiGlu, OpKind::ResidualFfn})
    for (bool on : {false, true})
      benchmark::RegisterBenchmark(
          ("shadow/" + std::string(roundoff::ops::name_of(op)) + (on ? "/on" : "/off") + "/128").c_str(),
          [op, on](benchmark::State& s) { shadow(s, op, on, 128); })
          ->Unit(benchmark::kMillisecond);
  for (OpKind op : {OpKind::RmsNorm, OpKind::Matmul, OpKind::RopeRotate, OpKind::AttnScores, OpKind::Softmax,
                    OpKind::AttnValues, OpKind::Silu, OpKind::SwiGlu, OpKind::ResidualFfn})
    for (const char* p : {"fp32", "ane-fp16"})
      benchmark::RegisterBenchmark(("op/" + std::string(p) + "/" + std::string(roundoff::ops::name_of(op)) + "/128").c_str(),
                                   [op, p](benchmark::State& s) { shadow(s, op, false, 128, p); })
          ->Unit(benchmark::kMillisecond);
  return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
