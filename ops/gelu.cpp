// Explicit instantiations: each op compiles once per backend.
#include "ops/gelu.hpp"

namespace roundoff::ops {

std::string_view name_of(GeluForm f) {
  switch (f) {
    case GeluForm::Erf: return "erf";
    case GeluForm::Tanh: return "tanh";
  }
  return "";
}

ROUNDOFF_GELU_DECL(, Emulated)
ROUNDOFF_GELU_DECL(, Reference)
}  // namespace roundoff::ops
