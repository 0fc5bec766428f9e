// Explicit instantiations: each op compiles once per backend.
#include "ops/rmsnorm.hpp"

namespace roundoff::ops {
ROUNDOFF_RMSNORM_DECL(, Emulated)
ROUNDOFF_RMSNORM_DECL(, Reference)
}  // namespace roundoff::ops
