// Explicit instantiations: each op compiles once per backend.
#include "ops/cross_entropy.hpp"

namespace roundoff::ops {
ROUNDOFF_CROSS_ENTROPY_DECL(, Emulated)
ROUNDOFF_CROSS_ENTROPY_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void cross_entropy_forward(std::span<double> losses, std::span<float> probs, std::span<const float> logits,
                           std::span<const std::int32_t> targets, RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  cross_entropy_forward_io<Emulated, float>(losses, probs, logits, targets, s, ctx, sel);
}
void cross_entropy_backward_data(std::span<float> dlogits, std::span<const float> probs,
                                 std::span<const std::int32_t> targets, double grad_scale, RowShape s,
                                 const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  cross_entropy_backward_data_io<Emulated, float>(dlogits, probs, targets, grad_scale, s, ctx, sel);
}
}  // namespace roundoff::ops
