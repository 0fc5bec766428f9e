// Owning tensors (ops/values.hpp): the parts that need OpenMP.
#include "ops/values.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace roundoff::ops {
namespace {

/// v = +0, in chunks of 2^16 elements split over the threads when v holds more than two of them and the caller is
/// outside a parallel region (a backward pass zeroes ≈ 100 MB of gradient buffers per W512 step).
template <class T>
void zero_fill(std::vector<T>& v) {
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  const std::size_t n = v.size();
  const auto chunks = static_cast<std::int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 2 && !omp_in_parallel())
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kChunk;
    const auto first = v.begin() + static_cast<std::ptrdiff_t>(b);
    std::fill(first, first + static_cast<std::ptrdiff_t>(std::min(kChunk, n - b)), T{0});
  }
}

}  // namespace

void Buffer::zero() {
  if (binary32_) zero_fill(f_);
  else zero_fill(d_);
}

}  // namespace roundoff::ops
