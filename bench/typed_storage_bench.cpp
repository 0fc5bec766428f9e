// Typed storage (issue 45 step 1, docs/design.md "Typed storage"): ops' span bodies on binary64 tensors against the
// same bodies on tensors in binary32 storage (same values, bit for bit: tests/ops/typed_storage_test.cpp), at W512's
// shapes (the feed-forward's 512 tokens × 1408; RMSNorm 512 × 512; the causal softmax 8 heads × 512²; the up
// projection's GEMM), under the fp32 and ane-fp16 presets; native baseline in the same run: a plain float SiLU loop
// (x / (1 + e^-x), libm, no emulation).
//
//   build/bench/typed_storage_bench --benchmark_min_time=0.2 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "numerics/round.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/rmsnorm.hpp"

namespace {

using namespace roundoff::ops;

constexpr RowShape kShape{512, 1408};
constexpr auto kN = static_cast<std::size_t>(kShape.rows * kShape.cols);

std::vector<double> normal(std::uint64_t seed, std::size_t n = kN) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
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
/// RMSNorm forward at W512's model width: (512 tokens, 512).
template <class T>
void rmsnorm_fwd(benchmark::State& st, const char* policy) {
  constexpr RowShape s{512, 512};
  constexpr auto n = static_cast<std::size_t>(512 * 512);
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::RmsNorm, Pass::Forward);
  const std::vector<double> xd = normal(7, n), wd = normal(8, 512);
  const std::vector<T> x(xd.begin(), xd.end()), w(wd.begin(), wd.end());
  std::vector<T> y(n), r(512);
  for (auto _ : st) {
    rmsnorm_forward(std::span<T>(y), std::span<T>(r), std::span<const T>(x), std::span<const T>(w), s, 1e-5, ctx);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n));
}

/// Causal softmax forward at W512's attention shape: 8 heads, T = 512 (B = 1).
template <class T>
void softmax_fwd(benchmark::State& st, const char* policy) {
  constexpr AttnShape s{1, 8, 512, 64};
  const auto n = static_cast<std::size_t>(s.att_size());
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Softmax, Pass::Forward);
  const std::vector<double> pd = normal(9, n);
  const std::vector<T> pre(pd.begin(), pd.end());
  std::vector<T> att(n);
  for (auto _ : st) {
    softmax_forward(std::span<T>(att), std::span<const T>(pre), s, ctx);
    benchmark::DoNotOptimize(att.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n));
}

/// The feed-forward's up projection, y (512, 1408) = x (512, 512) · W (1408, 512)ᵀ, W binary64 in both forms: the
/// binary32 form widens x and narrows y around the same GEMM (the cost of step 1 before the kernels read binary32).
template <class T>
void matmul_fwd(benchmark::State& st, const char* policy) {
  constexpr MatmulShape s{512, 512, 1408};
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Matmul, Pass::Forward);
  const std::vector<double> xd = normal(10, 512 * 512), w = normal(11, 1408 * 512);
  const std::vector<T> x(xd.begin(), xd.end());
  std::vector<T> y(512 * 1408);
  for (auto _ : st) {
    matmul_forward(std::span<T>(y), std::span<const T>(x), std::span<const double>(w), s, ctx);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * 512 * 1408);
}

/// Its two backward passes: dx (512, 512) += dy (512, 1408) · W (1408, 512), and dW (1408, 512) += dyᵀ · x (dW
/// binary64 in both forms; dx and dW zeroed before each call, outside the timing).
template <class T>
void matmul_bwd_data(benchmark::State& st, const char* policy) {
  constexpr MatmulShape s{512, 512, 1408};
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Matmul, Pass::BackwardData);
  const std::vector<double> dyd = normal(12, 512 * 1408), w = normal(11, 1408 * 512);
  const std::vector<T> dy(dyd.begin(), dyd.end());
  std::vector<T> dx(512 * 512);
  for (auto _ : st) {
    st.PauseTiming();
    std::fill(dx.begin(), dx.end(), T{0});
    st.ResumeTiming();
    matmul_backward_data(std::span<T>(dx), std::span<const T>(dy), std::span<const double>(w), s, ctx);
    benchmark::DoNotOptimize(dx.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * 512 * 1408);
}
template <class T>
void matmul_bwd_weight(benchmark::State& st, const char* policy) {
  constexpr MatmulShape s{512, 512, 1408};
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Matmul, Pass::BackwardWeight);
  const std::vector<double> dyd = normal(12, 512 * 1408), xd = normal(10, 512 * 512);
  const std::vector<T> dy(dyd.begin(), dyd.end()), x(xd.begin(), xd.end());
  std::vector<double> dw(1408 * 512);
  for (auto _ : st) {
    st.PauseTiming();
    std::fill(dw.begin(), dw.end(), 0.0);
    st.ResumeTiming();
    matmul_backward_weight(std::span<double>(dw), std::span<const T>(dy), std::span<const T>(x), s, ctx);
    benchmark::DoNotOptimize(dw.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * 512 * 1408);
}

/// The three passes as a training step runs them (every tensor in binary32 storage, W and dW included: the
/// trainer's working weights and gradients under a policy whose formats fit binary32), at the up projection's shape,
/// with training's magnitudes: x ~ N(0, 1), W ~ N(0, 0.02), dy a loss-scaled gradient ~ N(0, 0.03), every value
/// rounded to the policy's storage format. Compare the three rows of one policy: the same 2·512·512·1408 flops each.
std::vector<float> stored(std::uint64_t seed, std::size_t n, double sd, const char* policy) {
  const roundoff::numerics::RoundingPlan plan(Policy::preset(policy).at(OpKind::Matmul, Pass::Forward).storage);
  std::vector<double> v = normal(seed, n);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(
        roundoff::numerics::round_to(plan, roundoff::numerics::Rounding::NearestEven, sd * v[i]));
  return out;
}
/// One pass of the up projection, y (512, 1408) = x (512, 512) · W (1408, 512)ᵀ: Forward writes y; BackwardData
/// adds dy · W into dx (512, 512); BackwardWeight adds dyᵀ · x into dW (1408, 512); the output zeroed before each
/// call, outside the timing.
void train_pass(benchmark::State& st, const char* policy, Pass pass) {
  constexpr MatmulShape s{512, 512, 1408};
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Matmul, pass);
  const std::vector<float> x = stored(10, 512 * 512, 1.0, policy), w = stored(11, 1408 * 512, 0.02, policy),
                           dy = stored(12, 512 * 1408, 0.03, policy);
  std::vector<float> out(pass == Pass::BackwardData ? 512 * 512 : 512 * 1408);
  for (auto _ : st) {
    st.PauseTiming();
    std::fill(out.begin(), out.end(), 0.0f);
    st.ResumeTiming();
    const std::span<float> o(out);
    switch (pass) {
      case Pass::Forward: matmul_forward(o, std::span<const float>(x), std::span<const float>(w), s, ctx); break;
      case Pass::BackwardData:
        matmul_backward_data(o, std::span<const float>(dy), std::span<const float>(w), s, ctx);
        break;
      case Pass::BackwardWeight:
        matmul_backward_weight(o, std::span<const float>(dy), std::span<const float>(x), s, ctx);
        break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * 512 * 1408);
}
void train_fwd(benchmark::State& st, const char* policy) { train_pass(st, policy, Pass::Forward); }
void train_bwd_data(benchmark::State& st, const char* policy) { train_pass(st, policy, Pass::BackwardData); }
void train_bwd_weight(benchmark::State& st, const char* policy) { train_pass(st, policy, Pass::BackwardWeight); }

/// Causal softmax forward as W512 trains it (4 sequences of 128 tokens, 8 heads), scores in binary32 storage
/// holding values of the policy's storage format (scaled scores of training's size, N(0, 2)).
void train_softmax_fwd(benchmark::State& st, const char* policy) {
  constexpr AttnShape s{4, 8, 128, 64};
  const auto n = static_cast<std::size_t>(s.att_size());
  const Ctx<Emulated> ctx = ctx_of(policy, OpKind::Softmax, Pass::Forward);
  const std::vector<float> pre = stored(9, n, 2.0, policy);
  std::vector<float> att(n);
  for (auto _ : st) {
    softmax_forward(std::span<float>(att), std::span<const float>(pre), s, ctx);
    benchmark::DoNotOptimize(att.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n));
}

void entry_cast_b64(benchmark::State& st, const char* p) { entry_cast<double>(st, p); }
void entry_cast_b32(benchmark::State& st, const char* p) { entry_cast<float>(st, p); }

void silu_fwd_b64(benchmark::State& st, const char* p) { silu_fwd<double>(st, p); }
void silu_fwd_b32(benchmark::State& st, const char* p) { silu_fwd<float>(st, p); }
void swiglu_fwd_b64(benchmark::State& st, const char* p) { swiglu_fwd<double>(st, p); }
void swiglu_fwd_b32(benchmark::State& st, const char* p) { swiglu_fwd<float>(st, p); }
void silu_bwd_b64(benchmark::State& st, const char* p) { silu_bwd<double>(st, p); }
void silu_bwd_b32(benchmark::State& st, const char* p) { silu_bwd<float>(st, p); }
void rmsnorm_fwd_b64(benchmark::State& st, const char* p) { rmsnorm_fwd<double>(st, p); }
void rmsnorm_fwd_b32(benchmark::State& st, const char* p) { rmsnorm_fwd<float>(st, p); }
void softmax_fwd_b64(benchmark::State& st, const char* p) { softmax_fwd<double>(st, p); }
void softmax_fwd_b32(benchmark::State& st, const char* p) { softmax_fwd<float>(st, p); }
void matmul_fwd_b64(benchmark::State& st, const char* p) { matmul_fwd<double>(st, p); }
void matmul_fwd_b32(benchmark::State& st, const char* p) { matmul_fwd<float>(st, p); }
void matmul_bwd_data_b64(benchmark::State& st, const char* p) { matmul_bwd_data<double>(st, p); }
void matmul_bwd_data_b32(benchmark::State& st, const char* p) { matmul_bwd_data<float>(st, p); }
void matmul_bwd_weight_b64(benchmark::State& st, const char* p) { matmul_bwd_weight<double>(st, p); }
void matmul_bwd_weight_b32(benchmark::State& st, const char* p) { matmul_bwd_weight<float>(st, p); }

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
BENCHMARK_CAPTURE(rmsnorm_fwd_b64, fp32, "fp32")->Name("typed/rmsnorm-fwd/fp32/binary64");
BENCHMARK_CAPTURE(rmsnorm_fwd_b32, fp32, "fp32")->Name("typed/rmsnorm-fwd/fp32/binary32");
BENCHMARK_CAPTURE(softmax_fwd_b64, fp32, "fp32")->Name("typed/softmax-fwd/fp32/binary64");
BENCHMARK_CAPTURE(softmax_fwd_b32, fp32, "fp32")->Name("typed/softmax-fwd/fp32/binary32");
BENCHMARK_CAPTURE(matmul_fwd_b64, fp32, "fp32")->Name("typed/matmul-fwd/fp32/binary64");
BENCHMARK_CAPTURE(matmul_fwd_b32, fp32, "fp32")->Name("typed/matmul-fwd/fp32/binary32");
BENCHMARK_CAPTURE(matmul_fwd_b64, fp16, "ane-fp16")->Name("typed/matmul-fwd/ane-fp16/binary64");
BENCHMARK_CAPTURE(matmul_fwd_b32, fp16, "ane-fp16")->Name("typed/matmul-fwd/ane-fp16/binary32");
BENCHMARK_CAPTURE(matmul_bwd_data_b64, fp32, "fp32")->Name("typed/matmul-bwd-data/fp32/binary64");
BENCHMARK_CAPTURE(matmul_bwd_data_b32, fp32, "fp32")->Name("typed/matmul-bwd-data/fp32/binary32");
BENCHMARK_CAPTURE(matmul_bwd_weight_b64, fp32, "fp32")->Name("typed/matmul-bwd-weight/fp32/binary64");
BENCHMARK_CAPTURE(matmul_bwd_weight_b32, fp32, "fp32")->Name("typed/matmul-bwd-weight/fp32/binary32");
BENCHMARK_CAPTURE(train_fwd, fp16, "ane-fp16")->Name("typed/train-matmul-fwd/ane-fp16");
BENCHMARK_CAPTURE(train_bwd_data, fp16, "ane-fp16")->Name("typed/train-matmul-bwd-data/ane-fp16");
BENCHMARK_CAPTURE(train_bwd_weight, fp16, "ane-fp16")->Name("typed/train-matmul-bwd-weight/ane-fp16");
BENCHMARK_CAPTURE(train_fwd, fp32, "fp32")->Name("typed/train-matmul-fwd/fp32");
BENCHMARK_CAPTURE(train_bwd_data, fp32, "fp32")->Name("typed/train-matmul-bwd-data/fp32");
BENCHMARK_CAPTURE(train_bwd_weight, fp32, "fp32")->Name("typed/train-matmul-bwd-weight/fp32");
BENCHMARK_CAPTURE(train_softmax_fwd, fp16, "ane-fp16")->Name("typed/train-softmax-fwd/ane-fp16");
BENCHMARK_CAPTURE(train_softmax_fwd, fp32, "fp32")->Name("typed/train-softmax-fwd/fp32");
BENCHMARK_MAIN();
