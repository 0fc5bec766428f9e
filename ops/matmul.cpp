// Explicit instantiations: each op compiles once per backend.
#include "ops/matmul.hpp"

namespace roundoff::ops {
ROUNDOFF_MATMUL_DECL(, Emulated)
ROUNDOFF_MATMUL_DECL(, Reference)
}  // namespace roundoff::ops
