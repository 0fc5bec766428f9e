// Explicit instantiations: each op compiles once per backend.
#include "ops/rmsnorm.hpp"

namespace roundoff::ops {
ROUNDOFF_RMSNORM_DECL(, Emulated)
ROUNDOFF_RMSNORM_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void rmsnorm_forward(std::span<float> y, std::span<float> rstd, std::span<const float> x, std::span<const float> w,
                     RowShape s, double eps, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  rmsnorm_forward_io<Emulated, float>(y, rstd, x, w, s, eps, ctx, sel);
}
void rmsnorm_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x,
                           std::span<const float> w, std::span<const float> rstd, RowShape s, const Ctx<Emulated>& ctx,
                           Select sel) {
  ctx.require_binary32_storage();
  rmsnorm_backward_data_io<Emulated, float>(dx, dy, x, w, rstd, s, ctx, sel);
}
void rmsnorm_backward_weight(std::span<float> dw, std::span<const float> dy, std::span<const float> x,
                             std::span<const float> rstd, RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  rmsnorm_backward_weight_io<Emulated, float>(dw, dy, x, rstd, s, ctx, sel);
}
}  // namespace roundoff::ops
