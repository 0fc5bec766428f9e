// Explicit instantiations: each op compiles once per backend.
#include "ops/activation.hpp"

namespace roundoff::ops {
ROUNDOFF_ACTIVATION_DECL(, Emulated)
ROUNDOFF_ACTIVATION_DECL(, Reference)
}  // namespace roundoff::ops
