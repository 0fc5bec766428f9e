// The AVX2 + FMA tier of the row_reduce lane kernels: 4 binary64 lanes per vector, 16 reductions per block.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/row_reduce_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ROUNDOFF_ROW_NS avx2
#define ROUNDOFF_ROW_W 4
#define ROUNDOFF_ROW_FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#include "numerics/row_reduce_lanes.inc"
#pragma GCC pop_options
