// Explicit instantiations: each op compiles once per backend.
#include "ops/online_attention.hpp"

namespace roundoff::ops {
ROUNDOFF_ONLINE_ATTENTION_DECL(, Emulated)
ROUNDOFF_ONLINE_ATTENTION_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void online_attention_forward(std::span<float> y, std::span<float> lse, std::span<const float> preatt,
                              std::span<const float> v, AttnShape s, const Ctx<Emulated>& sm, const Ctx<Emulated>& av,
                              Select sel) {
  sm.require_binary32_storage();
  av.require_binary32_storage();
  online_attention_forward_io<Emulated, float>(y, lse, preatt, v, s, sm, av, sel);
}
void softmax_from_lse(std::span<float> att, std::span<const float> preatt, std::span<const float> lse, AttnShape s,
                      const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  softmax_from_lse_io<Emulated, float>(att, preatt, lse, s, ctx, sel);
}
}  // namespace roundoff::ops
