// Explicit instantiations: each op compiles once per backend.
#include "ops/cross_entropy.hpp"

namespace roundoff::ops {
ROUNDOFF_CROSS_ENTROPY_DECL(, Emulated)
ROUNDOFF_CROSS_ENTROPY_DECL(, Reference)
}  // namespace roundoff::ops
