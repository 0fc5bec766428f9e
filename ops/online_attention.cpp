// Explicit instantiations: each op compiles once per backend.
#include "ops/online_attention.hpp"

namespace roundoff::ops {
ROUNDOFF_ONLINE_ATTENTION_DECL(, Emulated)
ROUNDOFF_ONLINE_ATTENTION_DECL(, Reference)
}  // namespace roundoff::ops
