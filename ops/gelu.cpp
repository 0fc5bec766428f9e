// Explicit instantiations: each op compiles once per backend.
#include "ops/gelu.hpp"

namespace roundoff::ops {

std::string_view name_of(GeluForm f) {
  switch (f) {
    case GeluForm::Erf: return "erf";
    case GeluForm::Tanh: return "tanh";
  }
  return "";
}

ROUNDOFF_GELU_DECL(, Emulated)
ROUNDOFF_GELU_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void gelu_forward(std::span<float> y, std::span<const float> x, RowShape s, GeluForm form, const Ctx<Emulated>& ctx,
                  Select sel) {
  ctx.require_binary32_storage();
  gelu_forward_io<Emulated, float>(y, x, s, form, ctx, sel);
}
void gelu_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> x, RowShape s,
                        GeluForm form, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  gelu_backward_data_io<Emulated, float>(dx, dy, x, s, form, ctx, sel);
}
}  // namespace roundoff::ops
