// Explicit instantiations: each op compiles once per backend.
#include "ops/embedding.hpp"

namespace roundoff::ops {
ROUNDOFF_EMBEDDING_DECL(, Emulated)
ROUNDOFF_EMBEDDING_DECL(, Reference)
}  // namespace roundoff::ops
