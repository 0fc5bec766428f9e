// The AVX2 tier of the MX and NVFP4 quantization kernels: 4 binary64 lanes per vector.

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "numerics/block_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ROUNDOFF_BLOCK_NS avx2
#define ROUNDOFF_BLOCK_W 4
#define ROUNDOFF_BLOCK_ROUND(v, imm) _mm256_round_pd((__m256d)(v), (imm) | _MM_FROUND_NO_EXC)
#define ROUNDOFF_BLOCK_ROUND_F(v, imm) _mm256_round_ps((__m256)(v), (imm) | _MM_FROUND_NO_EXC)
#include "numerics/block_lanes.inc"
#pragma GCC pop_options
