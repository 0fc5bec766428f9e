// Explicit instantiations: each op compiles once per backend.
#include "ops/activation.hpp"

namespace roundoff::ops {
ROUNDOFF_ACTIVATION_DECL(, Emulated)
ROUNDOFF_ACTIVATION_DECL(, Reference)

// The binary32 forms check the precondition before the rows run (a throw inside their parallel region would end the
// process instead of reaching the caller).
void silu_forward(std::span<float> y, std::span<const float> x, RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  silu_forward_io<Emulated, float>(y, x, s, ctx, sel);
}
void silu_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x, RowShape s,
                        const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  silu_backward_data_io<Emulated, float>(dx, dy, x, s, ctx, sel);
}
void swiglu_forward(std::span<float> h, std::span<const float> a, std::span<const float> u, RowShape s,
                    const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  swiglu_forward_io<Emulated, float>(h, a, u, s, ctx, sel);
}
void swiglu_backward_data(std::span<float> da, std::span<float> du, std::span<const float> dh, std::span<const float> a,
                          std::span<const float> u, RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  swiglu_backward_data_io<Emulated, float>(da, du, dh, a, u, s, ctx, sel);
}
}  // namespace roundoff::ops
