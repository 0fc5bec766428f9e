// The AVX2 tier of the multi-term adder's lane kernels: 4 binary64 lanes per vector, up to 2 rows per call.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/adder_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ROUNDOFF_ADDER_NS avx2
#define ROUNDOFF_ADDER_W 4
#define ROUNDOFF_ADDER_TRUNC(v) _mm256_round_pd((__m256d)(v), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define ROUNDOFF_ADDER_RINT(v) _mm256_round_pd((__m256d)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#include "numerics/adder_lanes.inc"
#pragma GCC pop_options
