// Explicit instantiations: each op compiles once per backend.
#include "ops/attention.hpp"

namespace roundoff::ops {
ROUNDOFF_ATTENTION_DECL(, Emulated)
ROUNDOFF_ATTENTION_DECL(, Reference)
}  // namespace roundoff::ops
