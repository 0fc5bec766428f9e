#pragma once
/// \file bind.hpp
/// What the binding files share: array types, shape checks, and the parsing of the typed values that cross
/// the Python boundary as strings (formats, rounding modes, accumulations, policies).
///
/// Contract of every binding: arrays arrive as C-contiguous float64 (float32 where stated) — the Python layer
/// (python/roundoff/*.py) converts, checks dtypes and names the argument in its messages; the binding checks
/// sizes again, since a wrong size here would read out of bounds. The GIL is released around every kernel.
/// C++ exceptions become Python exceptions by pybind11's translation: std::invalid_argument → ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "numerics/accumulate.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/rounding.hpp"
#include "ops/probe.hpp"

namespace roundoff::python {

namespace py = pybind11;

using F64 = py::array_t<double, py::array::c_style>;
using F32 = py::array_t<float, py::array::c_style>;
using I32 = py::array_t<std::int32_t, py::array::c_style>;

/// A new float64 array of the given shape.
inline F64 new_like(const py::array& a) {
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
  return F64(shape);
}

/// Throws ValueError "NAME has N elements; expected M (WHAT)" unless a has exactly n elements.
inline void need_size(const py::array& a, std::int64_t n, const char* name, const char* what) {
  if (a.size() != n)
    throw std::invalid_argument(std::string(name) + " has " + std::to_string(a.size()) + " elements; expected " +
                                std::to_string(n) + " " + what);
}

void bind_formats(py::module_& m);
void bind_accumulation(py::module_& m);
void bind_policy(py::module_& m);
void bind_runner(py::module_& m);
void bind_blocks(py::module_& m);

/// One tape record as a dict (the columns of ops::Tape::write_csv).
py::dict record_dict(const ops::OpRecord& r);

}  // namespace roundoff::python
