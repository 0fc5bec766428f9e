// Array rounding throughput: round/<format>/<mode>[-<path>]/<float|double>/<elements>, items per second.
//   - no suffix: round_array (the fast path this CPU dispatches to; see the "round_fast_path" context);
//   - -portable / -f16c / -avx512: that path forced (simd::round_float_with);
//   - -scalar: the generic scalar round_to, one element at a time (what every fast path must equal);
//   - double: round_array on doubles (round_to's fast path on 8 lanes; fp32 nearest-even: the conversions).
// Baseline in the same run: baseline/memcpy/float/<elements> and baseline/copy-loop/float/<elements>.
// Inputs: log-uniform magnitudes over 2^-30..2^30 with random signs (fp16 sees subnormal, normal and
// overflowing values); variants ending in -gauss use N(0, 1) instead. Sizes: 4096 (cache-resident),
// 1<<20 (L2), 1<<24 (memory).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/round_simd.hpp"

using namespace roundoff::numerics;
namespace simd = roundoff::numerics::simd;

namespace {

/// Input distributions: Wide = log-uniform magnitudes over 2^-30..2^30 (fp16 sees subnormal, normal and
/// overflowing values, about 27% below its 2^-14); Gauss = N(0, 1), typical of weights and activations.
enum class Inputs { Wide, Gauss };

template <class T>
std::vector<T> bench_inputs(std::size_t n, Inputs kind) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> exponent(-30.0, 30.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::vector<T> x(n);
  for (T& v : x) {
    v = kind == Inputs::Wide ? static_cast<T>(((rng() & 1) ? -1.0 : 1.0) * std::exp2(exponent(rng)))
                             : static_cast<T>(gauss(rng));
  }
  return x;
}

/// Registers name with body(src, dst) run on n elements of type T.
template <class T, class Body>
void add(const std::string& name, std::size_t n, Body body, Inputs kind = Inputs::Wide) {
  benchmark::RegisterBenchmark(name.c_str(), [n, body, kind](benchmark::State& state) {
    // src and dst in one buffer, dst starting half a page after src modulo 4 KiB: with both at the same
    // offset within a page, every load would be checked against the store 4 KiB away (4K aliasing).
    const std::vector<T> in = bench_inputs<T>(n, kind);
    const std::size_t gap = 2048 / sizeof(T);
    std::vector<T> buffer(2 * n + gap);
    std::copy(in.begin(), in.end(), buffer.begin());
    const std::span<const T> src(buffer.data(), n);
    const std::span<T> dst(buffer.data() + n + gap, n);
    for (auto _ : state) {
      body(src, dst);
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n) * 2 *
                            static_cast<std::int64_t>(sizeof(T)));
  });
}

std::string round_name(const char* format, Rounding mode, const std::string& variant, const char* type,
                       std::size_t n) {
  return std::string("round/") + format + "/" + std::string(name_of(mode)) + variant + "/" + type + "/" +
         std::to_string(n);
}

void register_all() {
  const StochasticBits bits{1, 2};
  const std::size_t sizes[] = {4096, std::size_t{1} << 20, std::size_t{1} << 24};
  struct Named {
    const char* name;
    Format format;
  };
  const Named fmts[] = {{"fp16", formats::fp16}, {"bf16", formats::bf16}};

  for (std::size_t n : sizes) {
    add<float>("baseline/memcpy/float/" + std::to_string(n), n, [](std::span<const float> s, std::span<float> d) {
      std::memcpy(d.data(), s.data(), s.size_bytes());
    });
    add<float>("baseline/copy-loop/float/" + std::to_string(n), n, [](std::span<const float> s, std::span<float> d) {
      for (std::size_t i = 0; i < s.size(); ++i) d[i] = s[i];
    });
    for (const Named& f : fmts) {
      const RoundingPlan plan(f.format);
      for (Rounding mode : {Rounding::NearestEven, Rounding::Stochastic}) {
        add<float>(round_name(f.name, mode, "", "float", n), n,
                   [plan, mode, bits](std::span<const float> s, std::span<float> d) {
                     round_array(plan, mode, s, d, bits, 0);
                   });
        add<float>(round_name(f.name, mode, "-portable", "float", n), n,
                   [plan, mode, bits](std::span<const float> s, std::span<float> d) {
                     simd::round_float_with(simd::Path::Portable, plan, mode, s, d, bits, 0);
                   });
      }
    }
  }
  // Cache-resident only: the directed modes, the forced F16C path, the scalar generic reference, doubles.
  const std::size_t n = 4096;
  for (const Named& f : fmts) {
    const RoundingPlan plan(f.format);
    for (Rounding mode : {Rounding::TowardZero, Rounding::Up, Rounding::Down, Rounding::NearestAway, Rounding::Odd}) {
      add<float>(round_name(f.name, mode, "", "float", n), n,
                 [plan, mode](std::span<const float> s, std::span<float> d) { round_array(plan, mode, s, d); });
    }
    for (Rounding mode : {Rounding::NearestEven, Rounding::Stochastic}) {
      add<float>(round_name(f.name, mode, "-gauss", "float", n), n,
                 [plan, mode, bits](std::span<const float> s, std::span<float> d) {
                   round_array(plan, mode, s, d, bits, 0);
                 }, Inputs::Gauss);
      add<float>(round_name(f.name, mode, "-portable-gauss", "float", n), n,
                 [plan, mode, bits](std::span<const float> s, std::span<float> d) {
                   simd::round_float_with(simd::Path::Portable, plan, mode, s, d, bits, 0);
                 }, Inputs::Gauss);
    }
    if (simd::path_supported(simd::Path::F16c)) {
      add<float>(round_name(f.name, Rounding::NearestEven, "-f16c", "float", n), n,
                 [plan](std::span<const float> s, std::span<float> d) {
                   simd::round_float_with(simd::Path::F16c, plan, Rounding::NearestEven, s, d, {}, 0);
                 });
      for (const Inputs inputs : {Inputs::Wide, Inputs::Gauss})
        add<float>(round_name(f.name, Rounding::Stochastic, inputs == Inputs::Gauss ? "-f16c-gauss" : "-f16c", "float",
                              n),
                   n,
                   [plan, bits](std::span<const float> s, std::span<float> d) {
                     simd::round_float_with(simd::Path::F16c, plan, Rounding::Stochastic, s, d, bits, 0);
                   },
                   inputs);
    }
    for (Rounding mode : {Rounding::NearestEven, Rounding::Stochastic}) {
      add<float>(round_name(f.name, mode, "-scalar", "float", n), n,
                 [plan, mode, bits](std::span<const float> s, std::span<float> d) {
                   for (std::size_t i = 0; i < s.size(); ++i) {
                     const std::uint64_t draw = mode == Rounding::Stochastic ? bits.draw(i) : 0;
                     d[i] = static_cast<float>(round_to(plan, mode, static_cast<double>(s[i]), draw));
                   }
                 });
      for (std::size_t nd : {std::size_t{4096}, std::size_t{1} << 20}) {
        add<double>(round_name(f.name, mode, "", "double", nd), nd,
                    [plan, mode, bits](std::span<const double> s, std::span<double> d) {
                      round_array(plan, mode, s, d, bits, 0);
                    });
      }
    }
  }
  // binary64 → IEEE binary32 under nearest-even (every fp32-policy op's roundings): the conversion path.
  const RoundingPlan fp32(formats::fp32);
  for (std::size_t nd : {std::size_t{4096}, std::size_t{1} << 20})
    add<double>(round_name("fp32", Rounding::NearestEven, "", "double", nd), nd,
                [fp32](std::span<const double> s, std::span<double> d) {
                  round_array(fp32, Rounding::NearestEven, s, d);
                });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("round_fast_path", simd::fast_path_name());
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
