// The AVX2 + FMA tier of the double-double exp and sigmoid lanes: 4 binary64 lanes per vector.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/double_double.hpp"
#include "numerics/elementary_dd_lanes.hpp"
#include "numerics/elementary_dd_tables.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ROUNDOFF_DD_NS avx2
#define ROUNDOFF_DD_FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#define ROUNDOFF_DD_W 4
#include "numerics/elementary_dd_lanes.inc"
#pragma GCC pop_options
