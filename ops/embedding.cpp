// Explicit instantiations: each op compiles once per backend.
#include "ops/embedding.hpp"

namespace roundoff::ops {
ROUNDOFF_EMBEDDING_DECL(, Emulated)
ROUNDOFF_EMBEDDING_DECL(, Reference)

// Binary32 forms: the precondition checked before the rows run.
void embedding_forward(std::span<float> out, std::span<const std::int32_t> tokens, std::span<const float> wte,
                       RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  embedding_forward_io<Emulated, float>(out, tokens, wte, s, ctx, sel);
}
void embedding_backward_weight(std::span<float> dwte, std::span<const float> dout, std::span<const std::int32_t> tokens,
                               RowShape s, const Ctx<Emulated>& ctx, Select sel) {
  ctx.require_binary32_storage();
  embedding_backward_weight_io<Emulated, float>(dwte, dout, tokens, s, ctx, sel);
}
}  // namespace roundoff::ops
