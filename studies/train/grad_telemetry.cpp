// Element counts of the gradient telemetry.
#include "studies/train/grad_telemetry.hpp"

#include <cstddef>

namespace roundoff::studies::train {

MaskedCount count_underflow(std::span<const double> own, std::span<const double> ref) {
  std::int64_t selected = 0, hits = 0;
  const std::size_t n = ref.size();
  for (std::size_t k = 0; k < n; ++k) {
    const bool nonzero = ref[k] != 0.0;
    selected += nonzero;
    hits += nonzero & (own[k] == 0.0);
  }
  return {selected, hits};
}

MaskedCount count_stagnation(std::span<const double> g, std::span<const double> after,
                             std::span<const double> before) {
  std::int64_t selected = 0, hits = 0;
  const std::size_t n = g.size();
  for (std::size_t k = 0; k < n; ++k) {
    const bool pushed = g[k] != 0.0;
    selected += pushed;
    hits += pushed & (after[k] == before[k]);
  }
  return {selected, hits};
}

}  // namespace roundoff::studies::train
