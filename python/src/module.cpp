// The extension module roundoff._roundoff: the C++ library's public API, one binding file per area.
#include "python/src/bind.hpp"

PYBIND11_MODULE(_roundoff, m) {
  m.doc() = "roundoff's C++ core (formats, rounding, accumulation, policies, ops); use the roundoff package.";
  roundoff::python::bind_formats(m);
  roundoff::python::bind_accumulation(m);
  roundoff::python::bind_policy(m);
  roundoff::python::bind_runner(m);
  roundoff::python::bind_blocks(m);
}
