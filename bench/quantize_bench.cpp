// Block-scaled quantization throughput (numerics::quantize, one thread), values per second:
//   quantize/<format>/<tier>/<double|float>/<n>   tier: avx512, avx2 (the SIMD kernels, numerics/block_kernels.hpp,
//                                                  forced through KernelOptions) or generic (the per-element
//                                                  definition, isa_limit = None; 10^6 values: it runs at ~1 M/s);
//   quantize_into/<format>/<tier>/<double|float>/<n>  the same into preallocated codes and scales (the kernels'
//                                                  speed: a fresh 10 MB result costs page faults and a memset);
//   dequantize/<format>/<tier>/<n>                the codes back to fp32 values (table path or generic);
//   dequantize_into/<format>/<tier>/<n>           the same into a preallocated float64 array;
//   baseline/absmax/<double|float>/<n>            native: max |x| over the input (reads the bytes quantize reads);
//   baseline/absmax-store/<double|float>/<n>      native: the same plus one byte stored per value (the bytes
//                                                  quantize moves, without its allocation);
//   baseline/memcpy/<double|float>/<n>            native: memcpy of the input into a preallocated buffer.
// n = 10^7 by default (80 MB of doubles: memory, not cache). Inputs N(0, 1) with a per-block scale 2^U(-8, 8).
// Rates are over the benchmark thread's CPU time (Google Benchmark's default), so the two training runs that share
// the cores slow the figures only through the memory system; use --benchmark_repetitions and read the best.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "numerics/block_format.hpp"

using namespace roundoff::numerics;
using roundoff::numerics::kernels::Isa;

namespace {

constexpr std::size_t kN = 10'000'000;

template <class T>
const std::vector<T>& inputs(std::size_t n) {
  static std::vector<T> x;
  if (x.size() != n) {
    std::mt19937_64 rng(2026);
    std::normal_distribution<double> g(0.0, 1.0);
    std::uniform_real_distribution<double> e(-8.0, 8.0);
    x.resize(n);
    double s = 1;
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 32 == 0) s = std::exp2(std::round(e(rng)));
      x[i] = static_cast<T>(g(rng) * s);
    }
  }
  return x;
}

KernelOptions tier(Isa isa) { return KernelOptions{true, isa}; }

/// Columns of the benchmark's matrix: 500 rows of 20000 (1-D blocks); 16×16 tiles: 2432 rows of 4096 (9,961,472
/// values, the nearest size below 10^7 that splits into tiles; the generic runs: 240 rows).
std::size_t columns(const BlockFormat& b) { return b.block_rows > 1 ? 4096 : 20000; }
std::size_t values(const BlockFormat& b, std::size_t n) { return b.block_rows > 1 ? n / 4096 / 16 * 16 * 4096 : n; }

template <class T>
void bench_quantize(benchmark::State& state, const std::string& name, Isa isa, std::size_t n) {
  const BlockFormat b = parse_block_format(name);
  n = values(b, n);
  const std::vector<T>& x = inputs<T>(n);
  for (auto _ : state) {
    BlockCodes q = quantize(b, std::span<const T>(x), columns(b), tier(isa));
    benchmark::DoNotOptimize(q.codes.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

template <class T>
void bench_quantize_into(benchmark::State& state, const std::string& name, Isa isa, std::size_t n) {
  const BlockFormat b = parse_block_format(name);
  n = values(b, n);
  const std::vector<T>& x = inputs<T>(n);
  std::vector<std::uint8_t> codes(n);
  std::vector<std::uint32_t> scales(n / static_cast<std::size_t>(b.block_size * b.block_rows));
  for (auto _ : state) {
    const float ts = quantize_into(b, std::span<const T>(x), columns(b), codes, scales, tier(isa));
    benchmark::DoNotOptimize(ts);
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void bench_dequantize(benchmark::State& state, const std::string& name, Isa isa, std::size_t n) {
  const BlockFormat b = parse_block_format(name);
  n = values(b, n);
  const BlockCodes q = quantize(b, std::span<const double>(inputs<double>(n)), columns(b));
  for (auto _ : state) {
    std::vector<double> v = dequantize(b, q.codes, q.scales, q.tensor_scale, formats::fp32, {}, columns(b), tier(isa));
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void bench_dequantize_into(benchmark::State& state, const std::string& name, Isa isa, std::size_t n) {
  const BlockFormat b = parse_block_format(name);
  n = values(b, n);
  const BlockCodes q = quantize(b, std::span<const double>(inputs<double>(n)), columns(b));
  std::vector<double> v(n);
  for (auto _ : state) {
    dequantize_into(b, q.codes, q.scales, q.tensor_scale, formats::fp32, v, {}, columns(b), tier(isa));
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

/// max |x| (and, with `store`, one byte per value) in 64-byte vectors with 4 independent accumulators: the loop
/// GCC cannot vectorize itself without -ffast-math, written so that it runs at the memory system's speed.
/// The AVX-512 build runs on AVX-512 CPUs, the portable one (the same source, SSE2 code) elsewhere.
template <class T>
__attribute__((always_inline)) inline void absmax_loop(benchmark::State& state, bool store) {
  typedef T V __attribute__((vector_size(64)));
  typedef std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t> U;
  typedef U VU __attribute__((vector_size(64)));
  constexpr std::size_t L = 64 / sizeof(T);
  typedef std::uint8_t VB __attribute__((vector_size(L)));
  const std::vector<T>& x = inputs<T>(kN);
  std::vector<std::uint8_t> out(store ? kN : 0);
  const VU mask = VU{} + (~U{0} >> 1);
  for (auto _ : state) {
    V m[4] = {};
    std::size_t i = 0;
    for (; i + 4 * L <= kN; i += 4 * L)
      for (std::size_t u = 0; u < 4; ++u) {
        V v;
        std::memcpy(&v, x.data() + i + u * L, sizeof v);
        const V a = (V)((VU)v & mask);
        m[u] = a > m[u] ? a : m[u];
        if (store) {
          const VB b = __builtin_convertvector((VU)a >> (sizeof(T) * 8 - 9), VB);
          std::memcpy(out.data() + i + u * L, &b, sizeof b);
        }
      }
    T r = 0;
    for (const V& v : m)
      for (std::size_t l = 0; l < L; ++l) r = v[l] > r ? v[l] : r;
    for (; i < kN; ++i) r = std::max(r, std::fabs(x[i]));
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kN));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * (sizeof(T) + (store ? 1 : 0))));
}
template <class T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void absmax_avx512(benchmark::State& state, bool store) {
  absmax_loop<T>(state, store);
}
template <class T>
void absmax_portable(benchmark::State& state, bool store) {
  absmax_loop<T>(state, store);
}
template <class T>
void baseline_absmax(benchmark::State& state, bool store) {
  if (kernels::detected_isa() >= Isa::Avx512) absmax_avx512<T>(state, store);
  else absmax_portable<T>(state, store);
}

template <class T>
void baseline_memcpy(benchmark::State& state) {
  const std::vector<T>& x = inputs<T>(kN);
  std::vector<T> y(kN);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), kN * sizeof(T));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kN));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * 2 * sizeof(T)));
}

const char* tier_name(Isa i) { return i == Isa::None ? "generic" : kernels::name_of(i); }

void register_all() {
  const char* formats[] = {"mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e3m2", "mxfp6-e2m3", "mxfp4",
                           "mxint8",     "mxfp4:nv-ceil", "mxfp4:mlx-round", "nvfp4", "nvfp4-16x16"};
  for (const char* f : formats)
    for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::None}) {
      if (isa != Isa::None && kernels::detected_isa() < isa) continue;
      const std::size_t n = values(parse_block_format(f), isa == Isa::None ? 1'000'000 : kN);
      const std::string base = std::string("quantize/") + f + "/" + tier_name(isa);
      benchmark::RegisterBenchmark((base + "/double/" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { bench_quantize<double>(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
      if (isa == Isa::None) continue;
      benchmark::RegisterBenchmark((base + "/float/" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { bench_quantize<float>(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
      const std::string into = std::string("quantize_into/") + f + "/" + tier_name(isa);
      benchmark::RegisterBenchmark((into + "/double/" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { bench_quantize_into<double>(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark((into + "/float/" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { bench_quantize_into<float>(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
    }
  for (const char* f : {"mxfp4", "mxfp8-e4m3", "nvfp4"})
    for (Isa isa : {Isa::Avx512, Isa::None}) {
      const std::size_t n = isa == Isa::None ? 1'000'000 : kN;
      benchmark::RegisterBenchmark(
          (std::string("dequantize/") + f + "/" + (isa == Isa::None ? "generic" : "table") + "/" + std::to_string(n)).c_str(),
          [=](benchmark::State& s) { bench_dequantize(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(
          (std::string("dequantize_into/") + f + "/" + (isa == Isa::None ? "generic" : "table") + "/" + std::to_string(n)).c_str(),
          [=](benchmark::State& s) { bench_dequantize_into(s, f, isa, n); })
          ->Unit(benchmark::kMillisecond);
    }
  const std::string n = std::to_string(kN);
  benchmark::RegisterBenchmark(("baseline/absmax/double/" + n).c_str(), [](benchmark::State& s) { baseline_absmax<double>(s, false); })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("baseline/absmax/float/" + n).c_str(), [](benchmark::State& s) { baseline_absmax<float>(s, false); })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("baseline/absmax-store/double/" + n).c_str(), [](benchmark::State& s) { baseline_absmax<double>(s, true); })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("baseline/absmax-store/float/" + n).c_str(), [](benchmark::State& s) { baseline_absmax<float>(s, true); })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("baseline/memcpy/double/" + n).c_str(), baseline_memcpy<double>)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("baseline/memcpy/float/" + n).c_str(), baseline_memcpy<float>)->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("block_kernels", kernels::name_of(kernels::detected_isa()));
  // The CPU as /proc/cpuinfo names it (lscpu's model name, family and model), recorded with the figures.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, cpu;
  while (std::getline(cpuinfo, line) && line.find_first_not_of(" \t") != std::string::npos) {
    for (const char* key : {"model name", "cpu family", "model\t"})
      if (line.rfind(key, 0) == 0) cpu += (cpu.empty() ? "" : "; ") + line;
  }
  benchmark::AddCustomContext("cpu", cpu.empty() ? "unknown" : cpu);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
