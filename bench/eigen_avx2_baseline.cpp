// gemm_bench's Eigen fp32 baseline for AVX2 + FMA (header: bench/eigen_avx2_baseline.hpp).
//
// One definition rule: gemm_bench.cpp compiles Eigen for AVX-512. Template instantiations of the same names
// compiled for two instruction sets would be merged by the linker into one, which could then run AVX-512 code on
// an AVX2 CPU. Here Eigen's namespace is renamed (the macro below), so none of its instantiations share a name
// with gemm_bench.cpp's; and every standard header Eigen includes is included first, before the target pragma,
// so the standard library's inline functions keep the portable code.
#include "bench/eigen_avx2_baseline.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <iosfwd>
#include <iostream>
#include <limits>
#include <new>
#include <omp.h>
#include <sstream>
#include <string>
#include <type_traits>

#pragma GCC push_options
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,avx,avx2,fma,f16c")
#define __SSE3__ 1
#define __SSSE3__ 1
#define __SSE4_1__ 1
#define __SSE4_2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __F16C__ 1
#define Eigen roundoff_eigen_avx2
#include <Eigen/Core>

namespace roundoff::bench {

struct EigenAvx2Gemm::Impl {
  Eigen::MatrixXf a, b, c;
};

EigenAvx2Gemm::EigenAvx2Gemm(int n)
    : impl_(new Impl{Eigen::MatrixXf::Random(n, n), Eigen::MatrixXf::Random(n, n), Eigen::MatrixXf(n, n)}) {
  Eigen::setNbThreads(1);
}
EigenAvx2Gemm::~EigenAvx2Gemm() { delete impl_; }
void EigenAvx2Gemm::run() { impl_->c.noalias() = impl_->a * impl_->b; }
const float* EigenAvx2Gemm::result() const { return impl_->c.data(); }
std::string eigen_avx2_simd() { return Eigen::SimdInstructionSetsInUse(); }

}  // namespace roundoff::bench

#undef Eigen
#undef __SSE3__
#undef __SSSE3__
#undef __SSE4_1__
#undef __SSE4_2__
#undef __AVX__
#undef __AVX2__
#undef __FMA__
#undef __F16C__
#pragma GCC pop_options

namespace roundoff::bench {
bool eigen_avx2_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
}  // namespace roundoff::bench
