// The AVX-512 tier of the row_reduce lane kernels: 8 binary64 lanes per vector, 32 reductions per block.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/row_reduce_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#define ROUNDOFF_ROW_NS avx512
#define ROUNDOFF_ROW_W 8
#define ROUNDOFF_ROW_FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#include "numerics/row_reduce_lanes.inc"
#pragma GCC pop_options
