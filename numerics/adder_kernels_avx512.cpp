// The AVX-512 tier of the multi-term adder's lane kernels: 8 binary64 lanes per vector, up to 4 rows per call.
// GCC 12's AVX-512 intrinsics build their pass-through operands from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined (a known false positive of the header, as in gemm_kernels.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/adder_lanes.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#define ROUNDOFF_ADDER_NS avx512
#define ROUNDOFF_ADDER_W 8
#define ROUNDOFF_ADDER_TRUNC(v) _mm512_roundscale_pd((__m512d)(v), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define ROUNDOFF_ADDER_RINT(v) _mm512_roundscale_pd((__m512d)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#include "numerics/adder_lanes.inc"
#pragma GCC pop_options
