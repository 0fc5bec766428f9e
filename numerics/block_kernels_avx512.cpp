// The AVX-512 tier of the MX and NVFP4 quantization kernels: 8 binary64 lanes per vector.
// GCC 12's AVX-512 intrinsics: -Wmaybe-uninitialized false positive of the header (as in gemm_kernels.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#define ROUNDOFF_BLOCK_NS avx512
#define ROUNDOFF_BLOCK_W 8
#define ROUNDOFF_BLOCK_ROUND(v, imm) _mm512_roundscale_pd((__m512d)(v), (imm) | _MM_FROUND_NO_EXC)
#define ROUNDOFF_BLOCK_ROUND_F(v, imm) _mm512_roundscale_ps((__m512)(v), (imm) | _MM_FROUND_NO_EXC)
#include "numerics/block_lanes.inc"
#pragma GCC pop_options
