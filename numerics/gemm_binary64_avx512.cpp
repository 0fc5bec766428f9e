// The AVX-512 tier of the binary64 GEMM micro-kernel: 8 binary64 lanes per vector, tiles of up to 8 × 16.
#include <immintrin.h>

#include <cstddef>

#include "numerics/gemm_binary64_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#define ROUNDOFF_F64_NS avx512
#define ROUNDOFF_F64_W 8
#define ROUNDOFF_F64_MR 8
#define ROUNDOFF_F64_FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#include "numerics/gemm_binary64_lanes.inc"
#pragma GCC pop_options
