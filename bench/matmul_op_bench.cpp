// Linear-projection op benchmarks: the whole op call (input casts, GEMM, output rounding), as a training step's
// profile times it, against the GEMM kernel alone on the same operands.
//
//   op/<preset>/<kind>/<pass>/<shape>    ops::matmul_forward / matmul_backward_data / matmul_backward_weight under
//                                        the preset's (kind, pass) precision; kind matmul or classifier.
//   kernel/<preset>/<kind>/<pass>/<shape> numerics::gemm alone on the already cast operands (what the op can reach).
//   kernel-avx2/<preset>/<kind>/<pass>/<shape>  the same with the kernels limited to the AVX2 tier (what an
//                                        AVX2-only CPU runs; issue 45's AVX2 row timed on an AVX-512 host).
// Shapes (tokens n × in → out): a512-cls 128×512→16893 (A512's classifier), a512-proj 128×512→1408 (its W1/W3),
// e11-cls 256×1024→16893, e11-proj 256×1024→2816. Inputs are random values of the op's storage format, dy scaled
// as a loss-scaled gradient. Counter FLOPS = 2·n·in·out per iteration. One thread unless OMP_NUM_THREADS says
// otherwise; compare op against kernel within one run.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/round.hpp"
#include "ops/backend.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"

namespace {

using roundoff::ops::Ctx;
using roundoff::ops::Emulated;
using roundoff::ops::MatmulShape;
using roundoff::ops::OpKind;
using roundoff::ops::OpPrecision;
using roundoff::ops::Pass;

struct Shape {
  const char* name;
  MatmulShape s;
};

std::vector<double> random_values(std::size_t n, double scale, const OpPrecision& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  const roundoff::numerics::RoundingPlan plan(p.storage);
  std::vector<double> v(n);
  for (double& x : v) x = roundoff::numerics::round_to(plan, roundoff::numerics::Rounding::NearestEven, dist(rng));
  return v;
}

/// Operands of one (pass, shape): a (the op's first input), b (the second), out (the output / gradient).
struct Operands {
  std::vector<double> a, b, out;
  Operands(Pass pass, MatmulShape s, const OpPrecision& p) {
    const auto n = static_cast<std::size_t>(s.n), in = static_cast<std::size_t>(s.in),
               o = static_cast<std::size_t>(s.out);
    switch (pass) {
      case Pass::Forward:  // x (n, in), W (out, in) -> y (n, out)
        a = random_values(n * in, 1.0, p, 1);
        b = random_values(o * in, 0.02, p, 2);
        out.assign(n * o, 0.0);
        break;
      case Pass::BackwardData:  // dy (n, out), W (out, in) -> dx (n, in)
        a = random_values(n * o, 0.01, p, 3);
        b = random_values(o * in, 0.02, p, 2);
        out.assign(n * in, 0.0);
        break;
      case Pass::BackwardWeight:  // dy (n, out), x (n, in) -> dW (out, in)
        a = random_values(n * o, 0.01, p, 3);
        b = random_values(n * in, 1.0, p, 1);
        out.assign(o * in, 0.0);
        break;
    }
  }
};

/// The operands of the latest (preset, kind, pass, shape), kept across the repeated calls Google Benchmark makes
/// while it sizes the iteration count (their setup would otherwise dominate a profile of the benchmark).
Operands& operands_for(const std::string& preset, OpKind kind, Pass pass, MatmulShape s, const OpPrecision& p) {
  static std::string cached;
  static std::unique_ptr<Operands> ops;
  const std::string id = preset + "/" + std::string(roundoff::ops::name_of(kind)) + "/" +
                         std::to_string(static_cast<int>(pass)) + "/" + std::to_string(s.n) + "x" +
                         std::to_string(s.in) + "x" + std::to_string(s.out);
  if (!ops || id != cached) {
    ops.reset();
    ops = std::make_unique<Operands>(pass, s, p);
    cached = id;
  }
  return *ops;
}

void set_flops(benchmark::State& state, MatmulShape s) {
  state.counters["FLOPS"] = benchmark::Counter(2.0 * static_cast<double>(s.n * s.in * s.out) *
                                                   static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

void bench_op(benchmark::State& state, const std::string& preset, OpKind kind, Pass pass, MatmulShape s) {
  const OpPrecision p = roundoff::ops::Policy::preset(preset).at(kind, pass);
  const Ctx<Emulated> ctx(p);
  Operands& d = operands_for(preset, kind, pass, s, p);
  for (auto _ : state) {
    switch (pass) {
      case Pass::Forward: roundoff::ops::matmul_forward<Emulated>(d.out, d.a, d.b, s, ctx); break;
      case Pass::BackwardData: roundoff::ops::matmul_backward_data<Emulated>(d.out, d.a, d.b, s, ctx); break;
      case Pass::BackwardWeight: roundoff::ops::matmul_backward_weight<Emulated>(d.out, d.a, d.b, s, ctx); break;
    }
    benchmark::DoNotOptimize(d.out.data());
  }
  set_flops(state, s);
}

void bench_kernel(benchmark::State& state, const std::string& preset, OpKind kind, Pass pass, MatmulShape s,
                  roundoff::numerics::kernels::Isa isa) {
  using roundoff::numerics::ConstMatrix;
  roundoff::numerics::KernelOptions opts;
  opts.isa_limit = isa;
  const OpPrecision p = roundoff::ops::Policy::preset(preset).at(kind, pass);
  Operands& d = operands_for(preset, kind, pass, s, p);
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  for (auto _ : state) {
    switch (pass) {
      case Pass::Forward:
        roundoff::numerics::gemm(p.accumulate, N, O, I, ConstMatrix{d.a.data(), I}, ConstMatrix{d.b.data(), I, true},
                                 d.out.data(), O, false, {}, nullptr, 0, opts);
        break;
      case Pass::BackwardData:
        roundoff::numerics::gemm(p.accumulate, N, I, O, ConstMatrix{d.a.data(), O}, ConstMatrix{d.b.data(), I},
                                 d.out.data(), I, true, {}, nullptr, 0, opts);
        break;
      case Pass::BackwardWeight:
        roundoff::numerics::gemm(p.accumulate, O, I, N, ConstMatrix{d.a.data(), O, true}, ConstMatrix{d.b.data(), I},
                                 d.out.data(), I, true, {}, nullptr, 0, opts);
        break;
    }
    benchmark::DoNotOptimize(d.out.data());
  }
  set_flops(state, s);
}

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::Forward: return "fwd";
    case Pass::BackwardData: return "bwd-data";
    case Pass::BackwardWeight: return "bwd-weight";
  }
  return "";
}

void register_all() {
  const Shape shapes[] = {{"a512-cls", {128, 512, 16893}},
                          {"a512-proj", {128, 512, 1408}},
                          {"e11-cls", {256, 1024, 16893}},
                          {"e11-proj", {256, 1024, 2816}}};
  for (const char* preset : {"fp32", "ane-fp16", "ane-fp16-acc32", "ane-guide", "amp-bf16", "pure-bf16"})
    for (const Shape& sh : shapes) {
      const OpKind kind = std::string(sh.name).ends_with("cls") ? OpKind::Classifier : OpKind::Matmul;
      const char* kname = kind == OpKind::Classifier ? "classifier" : "matmul";
      for (Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeight}) {
        const std::string tail = std::string(preset) + "/" + kname + "/" + pass_name(pass) + "/" + sh.name;
        benchmark::RegisterBenchmark(("op/" + tail).c_str(), bench_op, preset, kind, pass, sh.s)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        using roundoff::numerics::kernels::Isa;
        benchmark::RegisterBenchmark(("kernel/" + tail).c_str(), bench_kernel, preset, kind, pass, sh.s,
                                     Isa::Avx512Fp16)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("kernel-avx2/" + tail).c_str(), bench_kernel, preset, kind, pass, sh.s, Isa::Avx2)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
