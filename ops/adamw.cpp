// Explicit instantiations: each op compiles once per backend.
#include "ops/adamw.hpp"

namespace roundoff::ops {
ROUNDOFF_ADAMW_DECL(, Emulated)
ROUNDOFF_ADAMW_DECL(, Reference)
}  // namespace roundoff::ops
