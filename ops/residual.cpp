// Explicit instantiations: each op compiles once per backend.
#include "ops/residual.hpp"

namespace roundoff::ops {
ROUNDOFF_RESIDUAL_DECL(, Emulated)
ROUNDOFF_RESIDUAL_DECL(, Reference)
}  // namespace roundoff::ops
