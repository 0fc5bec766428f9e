// Owning tensors (ops/values.hpp): the parts that need the thread helpers of ops/backend.hpp.
#include "ops/values.hpp"

#include <algorithm>

#include "ops/backend.hpp"

namespace roundoff::ops {

// +0 in ranges split over the threads (for_ranges; elementwise): a backward pass zeroes ≈ 100 MB of gradient
// buffers per W512 step.
void Buffer::zero() {
  const auto fill = [](auto& v) {
    for_ranges(v.size(), [&](std::size_t b, std::size_t e) {
      std::fill(v.begin() + static_cast<std::ptrdiff_t>(b), v.begin() + static_cast<std::ptrdiff_t>(e), 0);
    });
  };
  if (binary32_) fill(f_);
  else fill(d_);
}

}  // namespace roundoff::ops
