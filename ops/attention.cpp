// Explicit instantiations: each op compiles once per backend.
#include "ops/attention.hpp"

namespace roundoff::ops {
ROUNDOFF_ATTENTION_DECL(, Emulated)
ROUNDOFF_ATTENTION_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void attn_scores_forward(std::span<float> preatt, std::span<const float> q, std::span<const float> k, AttnShape s,
                         const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  attn_scores_forward_io<Emulated, float>(preatt, q, k, s, ctx, sel);
}
void attn_scores_backward_data(std::span<float> dq, std::span<float> dk, std::span<const float> dpreatt,
                               std::span<const float> q, std::span<const float> k, AttnShape s,
                               const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  attn_scores_backward_data_io<Emulated, float>(dq, dk, dpreatt, q, k, s, ctx, sel);
}
void attn_values_forward(std::span<float> out, std::span<const float> att, std::span<const float> v, AttnShape s,
                         const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  attn_values_forward_io<Emulated, float>(out, att, v, s, ctx, sel);
}
void attn_values_backward_data(std::span<float> datt, std::span<float> dv, std::span<const float> dout,
                               std::span<const float> att, std::span<const float> v, AttnShape s,
                               const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  attn_values_backward_data_io<Emulated, float>(datt, dv, dout, att, v, s, ctx, sel);
}

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
