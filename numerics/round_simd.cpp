#include "numerics/round_simd.hpp"

namespace roundoff::numerics::simd {

bool round_float_portable(const RoundingPlan&, Rounding, std::span<const float>, std::span<float>, StochasticBits,
                          std::uint64_t) {
  return false;
}
bool round_float_fast(const RoundingPlan& plan, Rounding mode, std::span<const float> src, std::span<float> dst,
                      StochasticBits bits, std::uint64_t first_index) {
  return round_float_portable(plan, mode, src, dst, bits, first_index);
}
const char* fast_path_name() { return "portable"; }

}  // namespace roundoff::numerics::simd
