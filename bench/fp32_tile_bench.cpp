// The sequential fp32 accumulator's register tile, two shapes timed in alternation within one process (issue 45):
// numerics' AVX-512 tier computes the fp32 GEMM's panels either in 12-row × 32-column micro-tiles (two calls per
// 64-column panel: per term 2 vector loads and 12 broadcasts for 24 FMAs) or in 6-row × 64-column ones
// (tile_rows_fp32_wide: 4 vector loads and 6 broadcasts for the same 24 FMAs). Both are written out here with the
// production layouts (A in panels of 12 rows stored term by term, B in panels of 64 columns, K × 64) at W512's up
// projection (516 × 1408, K = 512), without packing or stores, so that only the loop differs. On hosts whose speed
// drifts by tens of percent within minutes, two binaries or two benchmark rows run one after the other cannot
// resolve a 10 % difference; here every iteration runs both shapes back to back and the counters give each
// shape's median rate over the iterations and the ratio of the medians (wide / narrow: above 1 means the wide
// tile is faster).
//
//   OMP_NUM_THREADS=1 build/bench/fp32_tile_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "numerics/kernel_options.hpp"

namespace {

#define FP32_TILE_TARGET __attribute__((target("avx512f,fma")))

constexpr std::size_t kM = 516, kN = 1408, kK = 512, kPanelRows = 12, kPanel = 64;

/// MR rows × NV·16 columns: A(r, k) = Ap[k·12 + r] (the panel layout), B(k, c) = Bp[k·64 + c], sums in t (ldt 64).
template <std::size_t MR, std::size_t NV>
FP32_TILE_TARGET void tile(const float* Ap, const float* Bp, float* t) {
  __m512 s[MR][NV];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) s[r][v] = _mm512_loadu_ps(t + r * kPanel + 16 * v);
  for (std::size_t k = 0; k < kK; ++k) {
    __m512 b[NV];
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(Bp + k * kPanel + 16 * v);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(Ap[k * kPanelRows + r]);
#pragma GCC unroll 8
      for (std::size_t v = 0; v < NV; ++v) s[r][v] = _mm512_fmadd_ps(a, b[v], s[r][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) _mm512_storeu_ps(t + r * kPanel + 16 * v, s[r][v]);
}

/// Every panel × every micro-tile of one shape (MR rows × NV vectors; 64 / (16·NV) calls per panel and row block).
template <std::size_t MR, std::size_t NV>
double seconds_of(const std::vector<float>& A, const std::vector<float>& B, std::vector<float>& out) {
  alignas(64) float t[kPanelRows * kPanel];
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t p = 0; p < kN / kPanel; ++p)
    for (std::size_t i = 0; i < kM; i += MR) {
      std::fill(std::begin(t), std::end(t), 0.0f);
      const float* a = A.data() + i / kPanelRows * kPanelRows * kK + i % kPanelRows;
      for (std::size_t c = 0; c < kPanel; c += 16 * NV) tile<MR, NV>(a, B.data() + p * kK * kPanel + c, t + c);
      out[p] += t[0];
    }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void interleaved(benchmark::State& st) {
  if (roundoff::numerics::kernels::detected_isa() < roundoff::numerics::kernels::Isa::Avx512) {
    st.SkipWithError("no AVX-512: the tile shapes compared are AVX-512 kernels");
    return;
  }
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> A(kM * kK), B(kN * kK), out(kN / kPanel);
  for (float& x : A) x = d(rng);
  for (float& x : B) x = d(rng);
  std::vector<double> narrow, wide;
  for (auto _ : st) {
    narrow.push_back(seconds_of<12, 2>(A, B, out));
    wide.push_back(seconds_of<6, 4>(A, B, out));
  }
  benchmark::DoNotOptimize(out.data());
  const double flop = 2.0 * kM * kN * kK;
  st.counters["gflops_12x32"] = flop / median(narrow) / 1e9;
  st.counters["gflops_6x64"] = flop / median(wide) / 1e9;
  st.counters["wide_over_narrow"] = median(narrow) / median(wide);
}

}  // namespace

BENCHMARK(interleaved)->Name("fp32-tile/interleaved-12x32-6x64")->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
