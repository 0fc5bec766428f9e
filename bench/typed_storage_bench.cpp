// Typed storage (issue 45 step 1, docs/design.md "Typed storage"): the elementwise ops' span bodies on binary64
// tensors against the same bodies on tensors in binary32 storage (same values, bit for bit:
// tests/ops/typed_storage_test.cpp), at W512's feed-forward shape (512 tokens × 1408), under the fp32 and ane-fp16
// presets; native baseline in the same run: a plain float SiLU loop (x / (1 + e^-x), libm, no emulation).
//
//   build/bench/typed_storage_bench --benchmark_min_time=0.2 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/activation.hpp"
#include "ops/policy.hpp"

namespace {

using namespace roundoff::ops;

constexpr RowShape kShape{512, 1408};
constexpr auto kN = static_cast<std::size_t>(kShape.rows * kShape.cols);

std::vector<double> normal(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(kN);
  for (double& x : v) x = static_cast<float>(d(rng));  // binary32 values (and fp16 after the entry cast)
  return v;
}

Ctx<Emulated> ctx_of(const char* policy, OpKind op, Pass pass) {
  return Ctx<Emulated>(Policy::preset(policy).at(op, pass));
}

template <class T>
void silu_fwd(benchmark::State& st, const char* policy) {
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Silu, Pass::Forward);
  const std::vector<double> xd = normal(1);
  const std::vector<T> x(xd.begin(), xd.end());
  std::vector<T> y(kN);
  for (auto _ : st) {
    silu_forward(std::span<T>(y), std::span<const T>(x), kShape, ctx);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}

template <class T>
void swiglu_fwd(benchmark::State& st, const char* policy) {
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::SwiGlu, Pass::Forward);
  const std::vector<double> ad = normal(2), ud = normal(3);
  const std::vector<T> a(ad.begin(), ad.end()), u(ud.begin(), ud.end());
  std::vector<T> h(kN);
  for (auto _ : st) {
    swiglu_forward(std::span<T>(h), std::span<const T>(a), std::span<const T>(u), kShape, ctx);
    benchmark::DoNotOptimize(h.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}

template <class T>
void silu_bwd(benchmark::State& st, const char* policy) {
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Silu, Pass::BackwardData);
  const std::vector<double> xd = normal(4), dyd = normal(5);
  const std::vector<T> x(xd.begin(), xd.end()), dy(dyd.begin(), dyd.end());
  std::vector<T> dx(kN);
  for (auto _ : st) {
    silu_backward_data(std::span<T>(dx), std::span<const T>(dy), std::span<const T>(x), kShape, ctx);
    benchmark::DoNotOptimize(dx.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}

void native_silu(benchmark::State& st) {
  const std::vector<double> xd = normal(1);
  const std::vector<float> x(xd.begin(), xd.end());
  std::vector<float> y(kN);
  for (auto _ : st) {
    for (std::size_t i = 0; i < kN; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}

/// One entry cast (store_array of values already in the storage format: the identity, as a pass) row by row, against
/// a copy of the same rows: what an op pays per input tensor whose format it cannot take on trust.
template <class T>
void entry_cast(benchmark::State& st, const char* policy) {
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::SwiGlu, Pass::Forward);
  const std::vector<double> xd = normal(6);
  const std::vector<T> x(xd.begin(), xd.end());
  std::vector<double> xs(static_cast<std::size_t>(kShape.cols));
  const auto n = static_cast<std::size_t>(kShape.cols);
  for (auto _ : st) {
    for (std::size_t r = 0; r < static_cast<std::size_t>(kShape.rows); ++r)
      ctx.store_array(std::span<const T>(x).subspan(r * n, n), std::span<double>(xs), [](std::size_t i) {
        return key(Tensor::X, i, 0);
      });
    benchmark::DoNotOptimize(xs.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}
void row_copy(benchmark::State& st) {
  const std::vector<double> x = normal(6);
  std::vector<double> xs(static_cast<std::size_t>(kShape.cols));
  const auto n = static_cast<std::size_t>(kShape.cols);
  for (auto _ : st) {
    for (std::size_t r = 0; r < static_cast<std::size_t>(kShape.rows); ++r)
      std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(r * n), n, xs.begin());
    benchmark::DoNotOptimize(xs.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(kN));
}
void entry_cast_b64(benchmark::State& st, const char* p) { entry_cast<double>(st, p); }
void entry_cast_b32(benchmark::State& st, const char* p) { entry_cast<float>(st, p); }

void silu_fwd_b64(benchmark::State& st, const char* p) { silu_fwd<double>(st, p); }
void silu_fwd_b32(benchmark::State& st, const char* p) { silu_fwd<float>(st, p); }
void swiglu_fwd_b64(benchmark::State& st, const char* p) { swiglu_fwd<double>(st, p); }
void swiglu_fwd_b32(benchmark::State& st, const char* p) { swiglu_fwd<float>(st, p); }
void silu_bwd_b64(benchmark::State& st, const char* p) { silu_bwd<double>(st, p); }
void silu_bwd_b32(benchmark::State& st, const char* p) { silu_bwd<float>(st, p); }

}  // namespace

BENCHMARK(native_silu)->Name("typed/native-float-silu");
BENCHMARK(row_copy)->Name("typed/row-copy-binary64");
BENCHMARK_CAPTURE(entry_cast_b64, fp32, "fp32")->Name("typed/entry-cast/fp32/binary64");
BENCHMARK_CAPTURE(entry_cast_b32, fp32, "fp32")->Name("typed/entry-cast/fp32/binary32");
BENCHMARK_CAPTURE(entry_cast_b64, fp16, "ane-fp16")->Name("typed/entry-cast/ane-fp16/binary64");
BENCHMARK_CAPTURE(silu_fwd_b64, fp32, "fp32")->Name("typed/silu-fwd/fp32/binary64");
BENCHMARK_CAPTURE(silu_fwd_b32, fp32, "fp32")->Name("typed/silu-fwd/fp32/binary32");
BENCHMARK_CAPTURE(silu_fwd_b64, fp16, "ane-fp16")->Name("typed/silu-fwd/ane-fp16/binary64");
BENCHMARK_CAPTURE(silu_fwd_b32, fp16, "ane-fp16")->Name("typed/silu-fwd/ane-fp16/binary32");
BENCHMARK_CAPTURE(swiglu_fwd_b64, fp32, "fp32")->Name("typed/swiglu-fwd/fp32/binary64");
BENCHMARK_CAPTURE(swiglu_fwd_b32, fp32, "fp32")->Name("typed/swiglu-fwd/fp32/binary32");
BENCHMARK_CAPTURE(silu_bwd_b64, fp32, "fp32")->Name("typed/silu-bwd/fp32/binary64");
BENCHMARK_CAPTURE(silu_bwd_b32, fp32, "fp32")->Name("typed/silu-bwd/fp32/binary32");
BENCHMARK_MAIN();
