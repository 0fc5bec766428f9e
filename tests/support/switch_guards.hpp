#pragma once
/// \file switch_guards.hpp
/// Scoped settings of the process-wide switches tests flip (the ops fast paths, the GEMM kernels): the previous
/// value comes back however the scope ends, so a failed ASSERT (which returns early) cannot leave the next test
/// in this process running on the oracle path, or without kernels, unnoticed.
#include "numerics/gemm_kernels.hpp"
#include "ops/backend.hpp"

namespace roundoff::test {

class FastPathsGuard {
 public:
  explicit FastPathsGuard(bool on) : was_(ops::fast_paths()) { ops::set_fast_paths(on); }
  ~FastPathsGuard() { ops::set_fast_paths(was_); }
  FastPathsGuard(const FastPathsGuard&) = delete;
  FastPathsGuard& operator=(const FastPathsGuard&) = delete;

 private:
  bool was_;
};

class KernelsGuard {
 public:
  explicit KernelsGuard(bool on) : was_(numerics::kernels::enabled()) { numerics::kernels::set_enabled(on); }
  ~KernelsGuard() { numerics::kernels::set_enabled(was_); }
  KernelsGuard(const KernelsGuard&) = delete;
  KernelsGuard& operator=(const KernelsGuard&) = delete;

 private:
  bool was_;
};

}  // namespace roundoff::test
