#include "ops/backend.hpp"

#include <omp.h>

#include <atomic>

namespace roundoff::ops {

namespace {
std::atomic<bool> g_fast_paths{true};
}  // namespace

void set_fast_paths(bool on) { g_fast_paths.store(on, std::memory_order_relaxed); }
bool fast_paths() { return g_fast_paths.load(std::memory_order_relaxed); }

double Ctx<Emulated>::sum(const double* x, std::ptrdiff_t inc, std::size_t n, std::uint64_t r) const {
  double s = 0;
  if (inc == 1) {
    s = numerics::sum(prec_.accumulate, std::span<const double>(x, n), sub_stream(bits_, r));
  } else {
    thread_local std::vector<double> buf;
    buf.resize(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = x[static_cast<std::ptrdiff_t>(i) * inc];
    s = numerics::sum(prec_.accumulate, std::span<const double>(buf.data(), n), sub_stream(bits_, r));
  }
  return to_compute(s, r * kSlots + (kSlots - 1));
}

double Ctx<Emulated>::dot(const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy, std::size_t n,
                          std::uint64_t r) const {
  return dot_result(numerics::dot(prec_.accumulate, x, incx, y, incy, n, sub_stream(bits_, r)), r);
}

void Ctx<Emulated>::gemm(std::size_t M, std::size_t N, std::size_t K, numerics::ConstMatrix A, numerics::ConstMatrix B,
                         double* C, std::size_t ldc, bool accumulate, std::uint64_t r) const {
  numerics::gemm(prec_.accumulate, M, N, K, A, B, C, ldc, accumulate, sub_stream(bits_, r), nullptr,
                 omp_in_parallel() ? 1 : 0);
}

void Ctx<Emulated>::in_array(std::span<const double> src, std::span<double> dst, std::uint64_t first_key) const {
  if (mode_ == numerics::Rounding::Stochastic) {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = in(src[i], first_key + i * kSlots + (kSlots - 2));
  } else {
    numerics::round_array(storage_, mode_, src, dst);
    if (prec_.nan == NanRule::AneInf)
      for (double& v : dst) v = nan_rule(v);
  }
}

std::vector<Ref> lift(std::span<const double> x) {
  std::vector<Ref> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = x[i];
  return r;
}

}  // namespace roundoff::ops
