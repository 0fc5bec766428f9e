// GEMM benchmarks: gemm/<variant>/<n>, square n×n×n, rate counter FLOPS = 2n³ per iteration.
//
// Baseline gemm/eigen-fp32/<n>: Eigen::MatrixXf product, one thread, compiled for AVX-512 (the fp32 speed this
// core actually has; the project's portable -O2 flags would give Eigen only SSE2 and flatter every ratio).
// The Eigen code below is compiled with a target pragma and runs only when the CPU has AVX-512; everything else
// goes through the public numerics::gemm, which picks its kernel at run time. Baseline
// gemm/eigen-fp32-avx2/<n>: the same product compiled for AVX2 + FMA (bench/eigen_avx2_baseline.cpp), the native
// baseline on CPUs without AVX-512 and the like-for-like one for the -avx2 variants.
//
// Variants (inputs are fp16 or bf16 values held in doubles, as numerics::gemm takes them; packing is timed):
//   fp16-seq, bf16-seq          fp16 / bf16 inputs, fused sequential accumulation in the same format
//   fp16-seq-rto                fp16-seq restricted to the AVX-512F round-to-odd kernel (CPUs without AVX512-FP16)
//   fp16-in-fp32-seq, bf16-in-fp32-seq   fp32 sequential accumulation
//   fp16-in-fp32-seq-avx2, fp16-seq-avx2, bf16-seq-avx2, ane-tile4-avx2   restricted to the AVX2 + FMA tier
//                               (CPUs without AVX-512; fp16/bf16 accumulators by round-to-odd from TwoSum)
//   fp16-splitk32-fp32          blocks of 32 summed in fp16, block sums combined in fp32
//   ane-tile4                   the ane-guide's accumulator: exact tiles of 4 products rounded toward zero to
//                               fp16, summed in fp32
//   ane-tile4-ftz, ane-tile4-ftz-avx2   the same with the M1's subnormal flush of tile values (flush=tile)
//   generic                     fp16-pairwise, which no kernel handles (the any-format any-order path)
//   generic-fp16-seq            fp16-seq with the kernels switched off
//   generic-ane-tile4           ane-tile4 with the kernels switched off
//   <variant>-1t, <variant>-2t  n = 512 on 1 and 2 threads, wall-clock time (rows split; results identical)
//   <variant>/classifier-256x1024x16893   E11's classifier shape (M = 256 tokens, K = 1024, N = 16893)
//   fp16-in-fp32-seq/classifier-bwd-data-256x16893x1024, …/classifier-bwd-weight-16893x256x1024   its backward shapes
//   tc-h100, tc-h100-bf16, tc-h100-tf32, tc-h100-f16acc, tc-h100-fp8, tc-h100-fp8-e5m2, tc-h100-fp8-promote128
//   (promote=128:fp32), tc-v100, tc-a100   the multi-term adder presets on inputs of their format
//                               (numerics/adder_kernels.hpp), n = 512, with -avx2 for the AVX2 tier;
//                               generic-<preset>/128: the same with the kernels off (the path before the kernels)
// GCC 12's AVX-512 intrinsics (inlined into Eigen) trip -Wmaybe-uninitialized on _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "bench/eigen_avx2_baseline.hpp"
#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"

// ---- Eigen baseline, compiled for AVX-512 + FMA. Eigen picks its SIMD from these macros, which a target pragma
// does not define, so they are set by hand for this block only.
#pragma GCC push_options
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define __AVX512F__ 1
#define __AVX512DQ__ 1
#define __AVX512BW__ 1
#define __AVX512VL__ 1
#include <Eigen/Core>

namespace {
struct EigenGemm {
  Eigen::MatrixXf a, b, c;
  explicit EigenGemm(int n) : a(Eigen::MatrixXf::Random(n, n)), b(Eigen::MatrixXf::Random(n, n)), c(n, n) {
    Eigen::setNbThreads(1);
  }
  __attribute__((noinline)) void run() { c.noalias() = a * b; }
  float probe() const { return c(0, 0); }
};
std::string eigen_simd() { return Eigen::SimdInstructionSetsInUse(); }
__attribute__((noinline)) EigenGemm* make_eigen(int n) { return new EigenGemm(n); }
__attribute__((noinline)) void destroy_eigen(EigenGemm* e) { delete e; }
__attribute__((noinline)) void run_eigen(EigenGemm* e) { e->run(); }
}  // namespace
#undef __SSE3__
#undef __SSSE3__
#undef __SSE4_1__
#undef __SSE4_2__
#undef __AVX__
#undef __AVX2__
#undef __FMA__
#undef __F16C__
#undef __AVX512F__
#undef __AVX512DQ__
#undef __AVX512BW__
#undef __AVX512VL__
#pragma GCC pop_options

namespace {

using namespace roundoff::numerics;

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

double cpu_seconds(int who) {
  rusage r{};
  getrusage(who, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

void set_flops(benchmark::State& state, std::size_t M, std::size_t N, std::size_t K) {
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}
void set_flops(benchmark::State& state, int n) {
  const auto nz = static_cast<std::size_t>(n);
  set_flops(state, nz, nz, nz);
}

void bench_eigen(benchmark::State& state, int n) {
  if (!cpu_has_avx512()) {
    state.SkipWithError("the Eigen baseline is built for AVX-512; this CPU lacks it");
    return;
  }
  EigenGemm* e = make_eigen(n);
  for (auto _ : state) {
    run_eigen(e);
    benchmark::DoNotOptimize(e->c.data());
  }
  set_flops(state, n);
  state.SetLabel(eigen_simd());
  destroy_eigen(e);
}

void bench_eigen_avx2(benchmark::State& state, int n) {
  if (!roundoff::bench::eigen_avx2_supported()) {
    state.SkipWithError("the AVX2 Eigen baseline needs AVX2 and FMA; this CPU lacks them");
    return;
  }
  roundoff::bench::EigenAvx2Gemm e(n);
  for (auto _ : state) {
    e.run();
    benchmark::DoNotOptimize(e.result());
  }
  set_flops(state, n);
  state.SetLabel(roundoff::bench::eigen_avx2_simd());
}

std::vector<double> random_matrix(const Format& f, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gauss(0.0, 1.0);
  const RoundingPlan plan(f);
  std::vector<double> m(rows * cols);
  for (double& x : m) x = round_to(plan, Rounding::NearestEven, gauss(rng));
  return m;
}

Accumulation make_acc(const Format& f, Order order = Order::Sequential, int block = 0) {
  Accumulation a;
  a.format = f;
  a.order = order;
  a.block = block;
  return a;
}

struct Variant {
  std::string name;
  Accumulation acc;
  Format inputs;
  kernels::Isa isa_limit = kernels::Isa::Avx512Fp16;
  bool kernels_on = true;
};

/// C(M×N) = A(M×K)·B(K×N) under the variant.
void bench_shape(benchmark::State& state, const Variant& v, std::size_t M, std::size_t N, std::size_t K,
                 int threads) {
  const auto A = random_matrix(v.inputs, M, K, 1), B = random_matrix(v.inputs, K, N, 2);
  std::vector<double> C(M * N);
  const KernelOptions opts{v.kernels_on, v.isa_limit};
  const char* kernel = v.kernels_on ? kernels::kernel_name(v.acc, opts) : nullptr;
  const double self0 = cpu_seconds(RUSAGE_SELF), main0 = cpu_seconds(RUSAGE_THREAD);
  for (auto _ : state) {
    gemm(v.acc, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, false, {}, nullptr, threads,
         opts);
    benchmark::DoNotOptimize(C.data());
  }
  if (threads > 1) {
    // CPU time of the benchmark thread and of all other threads, per call: with OMP_WAIT_POLICY=passive their
    // maximum is what a call would take on idle cores (a proxy when the machine is shared; see docs).
    const double main_cpu = cpu_seconds(RUSAGE_THREAD) - main0, all_cpu = cpu_seconds(RUSAGE_SELF) - self0;
    state.counters["cpu_main_ms"] = benchmark::Counter(1e3 * main_cpu, benchmark::Counter::kAvgIterations);
    state.counters["cpu_others_ms"] = benchmark::Counter(1e3 * (all_cpu - main_cpu), benchmark::Counter::kAvgIterations);
  }
  set_flops(state, M, N, K);
  state.SetLabel(std::string("kernel=") + (kernel ? kernel : "generic") + " threads=" + std::to_string(threads));
}

void bench_variant(benchmark::State& state, const Variant& v, int n, int threads) {
  const auto nz = static_cast<std::size_t>(n);
  bench_shape(state, v, nz, nz, nz, threads);
}

void register_all() {
  for (const int n : {256, 512})
    benchmark::RegisterBenchmark(("gemm/eigen-fp32/" + std::to_string(n)).c_str(),
                                 [n](benchmark::State& s) { bench_eigen(s, n); })
        ->Unit(benchmark::kMillisecond);
  for (const int n : {256, 512})
    benchmark::RegisterBenchmark(("gemm/eigen-fp32-avx2/" + std::to_string(n)).c_str(),
                                 [n](benchmark::State& s) { bench_eigen_avx2(s, n); })
        ->Unit(benchmark::kMillisecond);
  const std::vector<Variant> fast = {
      {"fp16-seq", make_acc(formats::fp16), formats::fp16},
      {"fp16-seq-rto", make_acc(formats::fp16), formats::fp16, kernels::Isa::Avx512},
      {"fp16-seq-avx2", make_acc(formats::fp16), formats::fp16, kernels::Isa::Avx2},
      {"bf16-seq-avx2", make_acc(formats::bf16), formats::bf16, kernels::Isa::Avx2},
      {"bf16-seq", make_acc(formats::bf16), formats::bf16},
      {"fp16-in-fp32-seq", make_acc(formats::fp32), formats::fp16},
      {"fp16-in-fp32-seq-avx2", make_acc(formats::fp32), formats::fp16, kernels::Isa::Avx2},
      {"bf16-in-fp32-seq", make_acc(formats::fp32), formats::bf16},
      {"fp16-splitk32-fp32", make_acc(formats::fp16, Order::Blocked, 32), formats::fp16},
      {"ane-tile4", parse_accumulation("ane-tile4"), formats::fp16},
      {"ane-tile4-avx2", parse_accumulation("ane-tile4"), formats::fp16, kernels::Isa::Avx2},
      {"ane-tile4-ftz", parse_accumulation("ane-tile4-ftz"), formats::fp16},
      {"ane-tile4-ftz-avx2", parse_accumulation("ane-tile4-ftz"), formats::fp16, kernels::Isa::Avx2},
  };
  // Single-thread figures use the thread's CPU time, like the Eigen baseline (robust on a shared machine).
  // The thread-scaling pair -1t/-2t uses wall time, the only fair clock for a multi-threaded run.
  for (const auto& v : fast)
    for (const int n : {256, 512}) {
      benchmark::RegisterBenchmark(("gemm/" + v.name + "/" + std::to_string(n)).c_str(),
                                   [v, n](benchmark::State& s) { bench_variant(s, v, n, 1); })
          ->Unit(benchmark::kMillisecond);
      if (n != 512) continue;
      for (const int threads : {1, 2})
        benchmark::RegisterBenchmark(("gemm/" + v.name + "-" + std::to_string(threads) + "t/" + std::to_string(n)).c_str(),
                                     [v, n, threads](benchmark::State& s) { bench_variant(s, v, n, threads); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
  // E11's classifier forward: 256 tokens × d 1024 times 1024 × 16893 (vocabulary); 69 MB of packed B per call.
  for (const auto& v : fast) {
    if (v.name != "fp16-seq" && v.name != "fp16-in-fp32-seq" && v.name != "ane-tile4") continue;
    benchmark::RegisterBenchmark(("gemm/" + v.name + "/classifier-256x1024x16893").c_str(),
                                 [v](benchmark::State& s) { bench_shape(s, v, 256, 16893, 1024, 1); })
        ->Unit(benchmark::kMillisecond);
  }
  // Its two backward GEMMs (fp32 accumulation under every ANE preset): bwd-data dX (256 × 1024) = dlogits ·
  // W, K = 16893; bwd-weight dW (16893 × 1024) = dlogitsᵀ · X, K = 256 (the operands here are untransposed).
  for (const auto& v : fast) {
    if (v.name != "fp16-in-fp32-seq") continue;
    benchmark::RegisterBenchmark(("gemm/" + v.name + "/classifier-bwd-data-256x16893x1024").c_str(),
                                 [v](benchmark::State& s) { bench_shape(s, v, 256, 1024, 16893, 1); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("gemm/" + v.name + "/classifier-bwd-weight-16893x256x1024").c_str(),
                                 [v](benchmark::State& s) { bench_shape(s, v, 16893, 1024, 256, 1); })
        ->Unit(benchmark::kMillisecond);
  }
  // The multi-term adder (tensor-core models): numerics/adder_kernels.hpp, each preset on inputs of its format, on
  // the AVX-512 tier and (-avx2) the AVX2 tier; generic-<preset>/128 in `slow` below is the path without kernels.
  struct AdderCase {
    const char* name;
    Format inputs;
  };
  const AdderCase adder_cases[] = {{"tc-h100", formats::fp16},        {"tc-h100-bf16", formats::bf16},
                                   {"tc-h100-tf32", formats::tf32},   {"tc-h100-f16acc", formats::fp16},
                                   {"tc-h100-fp8", formats::e4m3},    {"tc-h100-fp8-e5m2", formats::e5m2},
                                   {"tc-h100-fp8,promote=128:fp32", formats::e4m3}, {"tc-v100", formats::fp16},
                                   {"tc-a100", formats::fp16}};
  const auto bench_name = [](std::string s) {  // "tc-h100-fp8,promote=128:fp32" -> "tc-h100-fp8-promote128"
    if (const auto c = s.find(",promote="); c != std::string::npos)
      s = s.substr(0, c) + "-promote" + s.substr(c + 9, s.find(':', c) - c - 9);
    return s;
  };
  for (const AdderCase& ac : adder_cases)
    for (const kernels::Isa isa : {kernels::Isa::Avx512Fp16, kernels::Isa::Avx2}) {
      const Variant v{bench_name(ac.name) + (isa == kernels::Isa::Avx2 ? "-avx2" : ""), parse_accumulation(ac.name),
                      ac.inputs, isa};
      benchmark::RegisterBenchmark(("gemm/" + v.name + "/512").c_str(),
                                   [v](benchmark::State& s) { bench_variant(s, v, 512, 1); })
          ->Unit(benchmark::kMillisecond);
    }
  for (const AdderCase& ac : adder_cases) {
    const Variant v{"generic-" + bench_name(ac.name), parse_accumulation(ac.name), ac.inputs,
                    kernels::Isa::Avx512Fp16, false};
    benchmark::RegisterBenchmark(("gemm/" + v.name + "/128").c_str(),
                                 [v](benchmark::State& s) { bench_variant(s, v, 128, 1); })
        ->Unit(benchmark::kMillisecond);
  }
  const std::vector<Variant> slow = {
      {"generic", make_acc(formats::fp16, Order::Pairwise), formats::fp16},
      {"generic-fp16-seq", make_acc(formats::fp16), formats::fp16, kernels::Isa::Avx512Fp16, false},
      {"generic-ane-tile4", parse_accumulation("ane-tile4"), formats::fp16, kernels::Isa::Avx512Fp16, false},
  };
  for (const auto& v : slow)
    for (const int n : {64, 128})
      benchmark::RegisterBenchmark(("gemm/" + v.name + "/" + std::to_string(n)).c_str(),
                                   [v, n](benchmark::State& s) { bench_variant(s, v, n, 1); })
          ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
