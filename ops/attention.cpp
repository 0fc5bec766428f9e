// Explicit instantiations: each op compiles once per backend.
#include "ops/attention.hpp"

namespace roundoff::ops {
ROUNDOFF_ATTENTION_DECL(, Emulated)
ROUNDOFF_ATTENTION_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void softmax_forward(std::span<float> att, std::span<const float> preatt, AttnShape s, const Ctx<Emulated>& ctx,
                     Select sel) {
  ctx.require_binary32_storage();
  softmax_forward_io<Emulated, float>(att, preatt, s, ctx, sel);
}
void softmax_backward_data(std::span<float> dpreatt, std::span<const float> datt, std::span<const float> att,
                           AttnShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  softmax_backward_data_io<Emulated, float>(dpreatt, datt, att, s, ctx, sel);
}
}  // namespace roundoff::ops
