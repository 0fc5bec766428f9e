// Attention products (ops/attention.hpp) one op and pass at a time, on the Emulated backend, shadow off.
//
//   attn/<policy>/<shape>/<op-pass>   attn-scores fwd / bwd-data and attn-values fwd / bwd-data on random
//                                     storage-format inputs; <shape> is T1 (B 4, NH 4, T 64, hs 32: one layer
//                                     of the T1 config) or A512 (B 1, NH 8, T 128, hs 64). Counter `gflops`:
//                                     2·(multiply-adds of the causal products) per second.
//
// Runs single-threaded unless OMP_NUM_THREADS says otherwise; compare within one run only.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "ops/attention.hpp"
#include "ops/policy.hpp"

namespace {

using roundoff::ops::AttnShape;
using roundoff::ops::Ctx;
using roundoff::ops::Emulated;
using roundoff::ops::OpKind;
using roundoff::ops::Pass;

enum class Which { ScoresFwd, ScoresBwd, ValuesFwd, ValuesBwd };

std::vector<double> randoms(std::size_t n, const Ctx<Emulated>& c, std::uint64_t seed, double scale) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<double> x(n), r(n);
  for (double& v : x) v = nd(g);
  c.in_array(x, r, roundoff::ops::Tensor::X);
  return r;
}

void attn(benchmark::State& state, const std::string& policy, AttnShape s, Which w) {
  const roundoff::ops::Policy pol = roundoff::ops::load_policy(policy);
  const bool scores = w == Which::ScoresFwd || w == Which::ScoresBwd;
  const bool fwd = w == Which::ScoresFwd || w == Which::ValuesFwd;
  const Ctx<Emulated> c(pol.at(scores ? OpKind::AttnScores : OpKind::AttnValues,
                               fwd ? Pass::Forward : Pass::BackwardData),
                        {1, 2});
  const auto qkv = static_cast<std::size_t>(s.qkv_size()), att = static_cast<std::size_t>(s.att_size());
  const auto a = randoms(qkv, c, 1, 1.0), b = randoms(qkv, c, 2, 1.0), g = randoms(qkv, c, 3, 0.01);
  auto p = randoms(att, c, 4, 0.02);
  std::vector<double> o1(qkv, 0.0), o2(qkv, 0.0), oa(att, 0.0);
  for (auto _ : state) {
    switch (w) {
      case Which::ScoresFwd: roundoff::ops::attn_scores_forward<Emulated>(oa, a, b, s, c); break;
      case Which::ScoresBwd: roundoff::ops::attn_scores_backward_data<Emulated>(o1, o2, p, a, b, s, c); break;
      case Which::ValuesFwd: roundoff::ops::attn_values_forward<Emulated>(o1, p, b, s, c); break;
      case Which::ValuesBwd: roundoff::ops::attn_values_backward_data<Emulated>(oa, o2, g, p, b, s, c); break;
    }
    benchmark::ClobberMemory();
  }
  // causal multiply-adds: T(T+1)/2 per head and hs, once forward, twice backward
  const double macs = static_cast<double>(s.heads() * s.T * (s.T + 1) / 2 * s.hs) * (fwd ? 1.0 : 2.0);
  state.counters["gflops"] =
      benchmark::Counter(2e-9 * macs * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

int register_all() {
  const std::pair<const char*, AttnShape> shapes[] = {{"T1", {4, 4, 64, 32}}, {"A512", {1, 8, 128, 64}}};
  const std::pair<const char*, Which> ops[] = {{"scores-fwd", Which::ScoresFwd},
                                               {"scores-bwd", Which::ScoresBwd},
                                               {"values-fwd", Which::ValuesFwd},
                                               {"values-bwd", Which::ValuesBwd}};
  for (const char* p : {"fp32", "ane-fp16", "ane-guide", "amp-bf16"})
    for (const auto& [sn, s] : shapes)
      for (const auto& [on, w] : ops)
        benchmark::RegisterBenchmark((std::string("attn/") + p + "/" + sn + "/" + on).c_str(),
                                     [p, s, w](benchmark::State& st) { attn(st, p, s, w); })
            ->Unit(benchmark::kMillisecond);
  return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
