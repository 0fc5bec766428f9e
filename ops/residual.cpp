// Explicit instantiations: each op compiles once per backend.
#include "ops/residual.hpp"

namespace roundoff::ops {
ROUNDOFF_RESIDUAL_DECL(, Emulated)
ROUNDOFF_RESIDUAL_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void residual_forward(std::span<float> out, std::span<const float> x, std::span<const float> f, double alpha,
                      RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  residual_forward_io<Emulated, float>(out, x, f, alpha, s, ctx, sel);
}
void residual_backward_data(std::span<float> dx, std::span<float> df, std::span<const float> dout, double alpha,
                            RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  residual_backward_data_io<Emulated, float>(dx, df, dout, alpha, s, ctx, sel);
}
}  // namespace roundoff::ops
