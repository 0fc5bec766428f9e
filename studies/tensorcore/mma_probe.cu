// Runs the tc_cases.hpp tiles through the GPU's mma.sync instructions and writes D's raw bits, one file per
// shape: tc-<shape>.bin = "RTCPROBE", u32 version 1, u32 shape, u32 tiles, u32 0, u64 seed, u64 operand hash,
// then tiles × 16 × 8 u32 (D row-major per tile; f16 results in the low 16 bits).
// Build (on a GPU machine; not part of the CMake build): nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90
//   -Istudies/tensorcore studies/tensorcore/mma_probe.cu -o mma_probe
// Run: ./mma_probe OUTDIR TILES SEED
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tc_cases.hpp"

namespace tc = roundoff::tensorcore;

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t err_ = (x);                                                                   \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__device__ __forceinline__ unsigned pack16(unsigned lo, unsigned hi) { return (lo & 0xffffu) | (hi << 16); }
__device__ __forceinline__ unsigned pack8(unsigned e0, unsigned e1, unsigned e2, unsigned e3) {
  return (e0 & 0xffu) | ((e1 & 0xffu) << 8) | ((e2 & 0xffu) << 16) | ((e3 & 0xffu) << 24);
}

// One mma.sync with binary32 C and D: PTX is the instruction up to its operands; A in a0..a3, B in b0, b1.
#define MMA_F32(PTX)                                                                              \
  asm volatile(PTX " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"                  \
               : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                                           \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3))

// One warp per tile. Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8 / m16n8k32".
template <int S, int K>
__global__ void mma_tiles(const unsigned* A, const unsigned* B, const unsigned* C, unsigned* D, int tiles) {
  const int tile = blockIdx.x;
  if (tile >= tiles) return;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  constexpr int N = 8;
  const unsigned* a = A + static_cast<size_t>(tile) * 16 * K;
  const unsigned* b = B + static_cast<size_t>(tile) * K * N;
  const unsigned* c = C + static_cast<size_t>(tile) * 16 * N;
  unsigned* d = D + static_cast<size_t>(tile) * 16 * N;
  auto at = [&](int r, int col) { return a[r * K + col]; };
  auto bt = [&](int r, int col) { return b[r * N + col]; };
  // C/D (f32): c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
  const float c0 = __uint_as_float(c[g * N + 2 * t]), c1 = __uint_as_float(c[g * N + 2 * t + 1]);
  const float c2 = __uint_as_float(c[(g + 8) * N + 2 * t]), c3 = __uint_as_float(c[(g + 8) * N + 2 * t + 1]);
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  if constexpr (S == 0 || S == 1 || S == 2) {
    const unsigned a0 = pack16(at(g, 2 * t), at(g, 2 * t + 1)), a1 = pack16(at(g + 8, 2 * t), at(g + 8, 2 * t + 1));
    const unsigned a2 = pack16(at(g, 2 * t + 8), at(g, 2 * t + 9));
    const unsigned a3 = pack16(at(g + 8, 2 * t + 8), at(g + 8, 2 * t + 9));
    const unsigned b0 = pack16(bt(2 * t, g), bt(2 * t + 1, g)), b1 = pack16(bt(2 * t + 8, g), bt(2 * t + 9, g));
    if constexpr (S == 0) {
      MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
    } else if constexpr (S == 2) {
      MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    } else {
      // f16 accumulator: c0,c1 packed (row g), c2,c3 packed (row g+8)
      const unsigned ch0 = pack16(c[g * N + 2 * t], c[g * N + 2 * t + 1]);
      const unsigned ch1 = pack16(c[(g + 8) * N + 2 * t], c[(g + 8) * N + 2 * t + 1]);
      unsigned dh0 = 0, dh1 = 0;
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};\n"
          : "=r"(dh0), "=r"(dh1)
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(ch0), "r"(ch1));
      d[g * N + 2 * t] = dh0 & 0xffffu;
      d[g * N + 2 * t + 1] = dh0 >> 16;
      d[(g + 8) * N + 2 * t] = dh1 & 0xffffu;
      d[(g + 8) * N + 2 * t + 1] = dh1 >> 16;
      return;
    }
  } else if constexpr (S == 3) {
    // tf32 m16n8k8: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g)
    const unsigned a0 = at(g, t), a1 = at(g + 8, t), a2 = at(g, t + 4), a3 = at(g + 8, t + 4);
    const unsigned b0 = bt(t, g), b1 = bt(t + 4, g);
    MMA_F32("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
  } else {
    // 8-bit m16n8k32: a0..3 (g, 4t..4t+3), a4..7 (g+8, 4t..), a8..11 (g, 4t+16..), a12..15 (g+8, 4t+16..);
    // b0..3 (4t..4t+3, g), b4..7 (4t+16.., g)
    const unsigned a0 = pack8(at(g, 4 * t), at(g, 4 * t + 1), at(g, 4 * t + 2), at(g, 4 * t + 3));
    const unsigned a1 = pack8(at(g + 8, 4 * t), at(g + 8, 4 * t + 1), at(g + 8, 4 * t + 2), at(g + 8, 4 * t + 3));
    const unsigned a2 = pack8(at(g, 4 * t + 16), at(g, 4 * t + 17), at(g, 4 * t + 18), at(g, 4 * t + 19));
    const unsigned a3 =
        pack8(at(g + 8, 4 * t + 16), at(g + 8, 4 * t + 17), at(g + 8, 4 * t + 18), at(g + 8, 4 * t + 19));
    const unsigned b0 = pack8(bt(4 * t, g), bt(4 * t + 1, g), bt(4 * t + 2, g), bt(4 * t + 3, g));
    const unsigned b1 = pack8(bt(4 * t + 16, g), bt(4 * t + 17, g), bt(4 * t + 18, g), bt(4 * t + 19, g));
    if constexpr (S == 4) {
      MMA_F32("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
    } else {
      MMA_F32("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32");
    }
  }
  d[g * N + 2 * t] = __float_as_uint(d0);
  d[g * N + 2 * t + 1] = __float_as_uint(d1);
  d[(g + 8) * N + 2 * t] = __float_as_uint(d2);
  d[(g + 8) * N + 2 * t + 1] = __float_as_uint(d3);
}

template <int S, int K>
static void launch(const unsigned* A, const unsigned* B, const unsigned* C, unsigned* D, int tiles) {
  mma_tiles<S, K><<<tiles, 32>>>(A, B, C, D, tiles);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: mma_probe OUTDIR TILES SEED\n");
    return 2;
  }
  const std::string out = argv[1];
  const int tiles = std::atoi(argv[2]);
  const unsigned long long seed = std::strtoull(argv[3], nullptr, 0);
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("device %s, cc %d.%d, %d SMs, driver %d, runtime %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, driver, runtime);
  for (int si = 0; si < tc::kShapeCount; ++si) {
    const auto s = static_cast<tc::Shape>(si);
    const tc::Geometry g = tc::geometry(s);
    const size_t na = static_cast<size_t>(g.m) * g.k, nb = static_cast<size_t>(g.k) * g.n;
    const size_t nc = static_cast<size_t>(g.m) * g.n;
    std::vector<unsigned> A(na * tiles), B(nb * tiles), C(nc * tiles), D(nc * tiles);
    for (int t = 0; t < tiles; ++t) {
      const tc::Tile tile = tc::make_tile(s, seed, static_cast<std::uint64_t>(t));
      std::memcpy(&A[na * t], tile.a.data(), na * 4);
      std::memcpy(&B[nb * t], tile.b.data(), nb * 4);
      std::memcpy(&C[nc * t], tile.c.data(), nc * 4);
    }
    unsigned *dA, *dB, *dC, *dD;
    CHECK(cudaMalloc(&dA, A.size() * 4));
    CHECK(cudaMalloc(&dB, B.size() * 4));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    CHECK(cudaMalloc(&dD, D.size() * 4));
    CHECK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    switch (s) {
      case tc::Shape::F16F32: launch<0, 16>(dA, dB, dC, dD, tiles); break;
      case tc::Shape::F16F16: launch<1, 16>(dA, dB, dC, dD, tiles); break;
      case tc::Shape::BF16F32: launch<2, 16>(dA, dB, dC, dD, tiles); break;
      case tc::Shape::TF32F32: launch<3, 8>(dA, dB, dC, dD, tiles); break;
      case tc::Shape::E4M3F32: launch<4, 32>(dA, dB, dC, dD, tiles); break;
      case tc::Shape::E5M2F32: launch<5, 32>(dA, dB, dC, dD, tiles); break;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    CHECK(cudaFree(dD));
    const std::uint64_t hash = tc::operand_hash(s, seed, static_cast<std::uint64_t>(tiles));
    const std::string path = out + "/tc-" + g.name + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
      std::perror(path.c_str());
      return 1;
    }
    const std::uint32_t head[4] = {1u, static_cast<std::uint32_t>(si), static_cast<std::uint32_t>(tiles), 0u};
    const std::uint64_t tail[2] = {seed, hash};
    std::fwrite("RTCPROBE", 1, 8, f);
    std::fwrite(head, 4, 4, f);
    std::fwrite(tail, 8, 2, f);
    std::fwrite(D.data(), 4, D.size(), f);
    std::fclose(f);
    // a quick self-check on the exact-int class: every result is an exact small integer
    long bad = 0, n = 0;
    for (int t = 0; t < tiles; t += 8) {
      const tc::Tile tile = tc::make_tile(s, seed, static_cast<std::uint64_t>(t));
      for (int i = 0; i < g.m; ++i)
        for (int j = 0; j < g.n; ++j) {
          double want = tc::decode(g.acc, tile.c[i * g.n + j]);
          for (int k = 0; k < g.k; ++k)
            want += tc::decode(g.in, tile.a[i * g.k + k]) * tc::decode(g.in, tile.b[k * g.n + j]);
          const double got = tc::decode(g.acc, D[nc * t + i * g.n + j]);
          ++n;
          if (got != want) ++bad;
        }
    }
    std::printf("%s: %d tiles written to %s, operand hash %016llx; exact-int class %ld of %ld wrong\n", g.name,
                tiles, path.c_str(), static_cast<unsigned long long>(hash), bad, n);
  }
  return 0;
}
