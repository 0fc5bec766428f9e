// The AVX2 + FMA tier of the binary64 GEMM micro-kernel: 4 binary64 lanes per vector, tiles of up to 4 × 8.
#include <immintrin.h>

#include <cstddef>

#include "numerics/gemm_binary64_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ROUNDOFF_F64_NS avx2
#define ROUNDOFF_F64_W 4
#define ROUNDOFF_F64_MR 4
#define ROUNDOFF_F64_FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#include "numerics/gemm_binary64_lanes.inc"
#pragma GCC pop_options
