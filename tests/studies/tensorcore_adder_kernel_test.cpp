// The H100 mma.sync and H200 wgmma fixtures through the multi-term adder's SIMD kernels (numerics/adder_kernels.hpp):
// every tile with finite operands must be taken by numerics::kernels::gemm_fast, and the tiles of the special-value
// class where at most half the outputs read an inf or NaN too (those outputs recomputed by the generic path inside
// it), with the generic path's bits. tensorcore_h100_test scores the same tiles against
// the hardware with the kernels on, so together they check the kernels' bits against the GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "studies/common/provenance.hpp"
#include "studies/tensorcore/tc_fit.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::tensorcore {
namespace {

using numerics::ConstMatrix;

struct Tally {
  int tiles = 0, finite = 0, taken = 0, differ = 0;
};

bool all_finite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

void check_tile(const numerics::Accumulation& a, std::size_t M, std::size_t N, std::size_t K,
                const std::vector<double>& A, const std::vector<double>& B, const std::vector<double>& C, Tally& t) {
  ++t.tiles;
  t.finite += all_finite(A) && all_finite(B) && all_finite(C);
  std::vector<double> fast = C, slow = C;
  if (!numerics::kernels::gemm_fast(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, fast.data(), N,
                                    true, nullptr, 1))
    return;
  ++t.taken;
  numerics::gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, slow.data(), N, true, {}, nullptr, 1,
                 test::kernels_off());
  for (std::size_t i = 0; i < fast.size(); ++i)
    if (std::bit_cast<std::uint64_t>(fast[i]) != std::bit_cast<std::uint64_t>(slow[i])) {
      ++t.differ;
      break;
    }
}

TEST(TensorCoreAdderKernels, FixturesRunThroughTheKernels) {
  if (numerics::kernels::kernel_name(numerics::parse_accumulation("tc-h100")) == nullptr)
    GTEST_SKIP() << "no SIMD tier on this CPU";
  const std::string dir(studies::source_dir());
  const std::pair<const char*, const char*> mma[] = {
      {"f16-f32", "tc-h100"}, {"bf16-f32", "tc-h100-bf16"}, {"tf32-f32", "tc-h100-tf32"}, {"f16-f16", "tc-h100-f16acc"}};
  for (const auto& [shape, preset] : mma) {
    const ProbeDump d = read_probe(dir + "/notebooks-data/tensorcore-h100/tc-" + shape + ".bin");
    check_operands(d);
    const Geometry g = geometry(d.shape);
    const auto M = static_cast<std::size_t>(g.m), N = static_cast<std::size_t>(g.n), K = static_cast<std::size_t>(g.k);
    std::vector<double> A(M * K), B(K * N), C(M * N);
    Tally t;
    for (std::uint32_t i = 0; i < d.tiles; ++i) {
      const Tile tile = make_tile(d.shape, d.seed, i);
      for (std::size_t e = 0; e < A.size(); ++e) A[e] = decode(g.in, tile.a[e]);
      for (std::size_t e = 0; e < B.size(); ++e) B[e] = decode(g.in, tile.b[e]);
      for (std::size_t e = 0; e < C.size(); ++e) C[e] = decode(g.acc, tile.c[e]);
      check_tile(numerics::parse_accumulation(preset), M, N, K, A, B, C, t);
    }
    std::cout << shape << " under " << preset << ": " << t.taken << " of " << t.tiles << " tiles through the kernel ("
              << t.finite << " with finite operands only)\n";
    EXPECT_GT(t.finite, t.tiles / 2) << shape;
    EXPECT_GE(t.taken, t.finite) << shape << " under " << preset;
    EXPECT_EQ(t.differ, 0) << shape << " under " << preset;
  }
  const std::pair<const char*, const char*> wg[] = {
      {"wg-f16-k64-imp0", "tc-h100"},           {"wg-bf16-k64-imp0", "tc-h100-bf16"},
      {"wg-f16-k64-imp0-acc16", "tc-h100-f16acc"}, {"wg-tf32-k32-imp0", "tc-h100-tf32"},
      {"wg-e4m3-k32-imp32", "tc-h100-fp8,promote=32:fp32"}, {"wg-e4m3-k128-imp128", "tc-h100-fp8,promote=128:fp32"},
      {"wg-e5m2-k128-imp128", "tc-h100-fp8-e5m2,promote=128:fp32"}, {"wg-e4m3-k128-imp0", "tc-h100-fp8"}};
  for (const auto& [name, preset] : wg) {
    const WgmmaDump d = read_wgmma(dir + "/notebooks-data/tensorcore-h200-wgmma/" + name + ".bin");
    const auto K = static_cast<std::size_t>(d.k);
    std::vector<double> A(64 * K), B(K * 64), C(64 * 64);
    Tally t;
    for (std::uint32_t i = 0; i < d.tiles; ++i) {
      for (std::size_t e = 0; e < A.size(); ++e) A[e] = decode(d.in, d.a[i * 64 * K + e]);
      for (std::size_t e = 0; e < B.size(); ++e) B[e] = decode(d.in, d.b[i * 64 * K + e]);
      for (std::size_t e = 0; e < C.size(); ++e) C[e] = decode(d.acc, d.c[i * 64 * 64 + e]);
      check_tile(numerics::parse_accumulation(preset), 64, 64, K, A, B, C, t);
    }
    std::cout << name << " under " << preset << ": " << t.taken << " of " << t.tiles << " tiles through the kernel ("
              << t.finite << " with finite operands only)\n";
    EXPECT_GT(t.finite, 0) << name;
    EXPECT_GE(t.taken, t.finite) << name << " under " << preset;
    EXPECT_EQ(t.differ, 0) << name << " under " << preset;
  }
}

}  // namespace
}  // namespace roundoff::tensorcore
