#pragma once
/// \file eigen_avx2_baseline.hpp
/// gemm_bench's Eigen fp32 baseline compiled for AVX2 + FMA (bench/eigen_avx2_baseline.cpp), for CPUs without
/// AVX-512 and for comparing the AVX2 kernel tier with Eigen on the same instruction set. Call only when the CPU
/// has AVX2 and FMA (eigen_avx2_supported).
#include <string>

namespace roundoff::bench {

/// C = A·B for n×n Eigen::MatrixXf operands of uniform random values, one thread.
class EigenAvx2Gemm {
 public:
  explicit EigenAvx2Gemm(int n);
  ~EigenAvx2Gemm();
  EigenAvx2Gemm(const EigenAvx2Gemm&) = delete;
  EigenAvx2Gemm& operator=(const EigenAvx2Gemm&) = delete;
  void run();
  /// A pointer into C, for benchmark::DoNotOptimize.
  const float* result() const;

 private:
  struct Impl;
  Impl* impl_;
};

/// True when the running CPU has AVX2 and FMA.
bool eigen_avx2_supported();
/// Eigen::SimdInstructionSetsInUse() of this build of Eigen.
std::string eigen_avx2_simd();

}  // namespace roundoff::bench
