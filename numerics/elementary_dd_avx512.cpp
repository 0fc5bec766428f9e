// The AVX-512 tier of the double-double exp and sigmoid lanes: 8 binary64 lanes per vector.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/double_double.hpp"
#include "numerics/elementary_dd_lanes.hpp"
#include "numerics/elementary_dd_tables.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#define ROUNDOFF_DD_NS avx512
#define ROUNDOFF_DD_FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#define ROUNDOFF_DD_W 8
#include "numerics/elementary_dd_lanes.inc"
#pragma GCC pop_options
