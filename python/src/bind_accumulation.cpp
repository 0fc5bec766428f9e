// Accumulations (how sums, dot products and GEMMs are formed) and the reductions under them.
#include <string>

#include "python/src/bind.hpp"

namespace roundoff::python {

using namespace numerics;

namespace {

/// (rows, cols, ld) of a stored 2-D operand read as the logical matrix (transposed when `trans`).
struct Operand {
  std::size_t rows, cols, ld;
};
Operand operand(const F64& s, bool trans, const char* name) {
  if (s.ndim() != 2) throw std::invalid_argument(std::string("gemm: ") + name + " must be 2-D");
  const auto r = static_cast<std::size_t>(s.shape(0)), c = static_cast<std::size_t>(s.shape(1));
  return trans ? Operand{c, r, c} : Operand{r, c, c};
}

}  // namespace

void bind_accumulation(py::module_& m) {
  py::class_<Accumulation>(m, "Accumulation")
      .def(py::init([](const std::string& spec) { return parse_accumulation(spec); }), py::arg("spec"))
      .def_property_readonly("canonical", [](const Accumulation& a) { return canonical(a); })
      .def_property_readonly("spec", [](const Accumulation& a) { return spec_text(a); })
      .def_property_readonly("format", [](const Accumulation& a) { return a.format; })
      .def_property_readonly("rounding", [](const Accumulation& a) { return std::string(name_of(a.rounding)); })
      .def_property_readonly("fused", [](const Accumulation& a) { return a.fused; })
      .def_property_readonly("product_format", [](const Accumulation& a) { return a.product_format; })
      .def_property_readonly("order", [](const Accumulation& a) { return std::string(name_of(a.order)); })
      .def_property_readonly("block", [](const Accumulation& a) { return a.block; })
      .def_property_readonly("outer_format", [](const Accumulation& a) { return a.outer_format; })
      .def_property_readonly("promote_every", [](const Accumulation& a) { return a.promote_every; })
      .def_property_readonly("promote_format", [](const Accumulation& a) { return a.promote_format; })
      .def_property_readonly("adder_group", [](const Accumulation& a) { return a.adder.group; })
      .def_property_readonly("tile_size", [](const Accumulation& a) { return a.tile.size; })
      .def_property_readonly("splitk", [](const Accumulation& a) { return a.splitk.count; })
      .def_property_readonly("splitk_granule", [](const Accumulation& a) { return a.splitk.granule; })
      .def_property_readonly("flush",
                             [](const Accumulation& a) {
                               // The flush= value of the spec: none, tile, step[:FORMAT], tile+step[:FORMAT].
                               const AccumFlush& f = a.flush;
                               std::string s = f.tile && f.step ? "tile+step" : f.tile ? "tile" : f.step ? "step" : "none";
                               if (f.step_format) s += ":" + name_of(*f.step_format);
                               return s;
                             })
      .def_property_readonly("result_format", [](const Accumulation& a) { return result_format(a); })
      .def("__repr__", [](const Accumulation& a) { return "Accumulation('" + canonical(a) + "')"; })
      .def("__eq__", [](const Accumulation& a, const Accumulation& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Accumulation& a) { return py::hash(py::str(spec_text(a))); })
      .def(py::pickle([](const Accumulation& a) { return py::make_tuple(spec_text(a)); },
                      [](const py::tuple& t) { return parse_accumulation(t[0].cast<std::string>()); }));
  m.def("accumulation_names", [] { return preset_accumulation_names(); });

  m.def("sum",
        [](const Accumulation& a, const F64& x, std::uint64_t seed, std::uint64_t stream) {
          check_valid(a);
          AccumStats st;
          double r = 0;
          const std::span<const double> xs(x.data(), static_cast<std::size_t>(x.size()));
          {
            py::gil_scoped_release nogil;
            r = numerics::sum(a, xs, {seed, stream}, &st);
          }
          return py::make_tuple(r, st.overflows);
        },
        py::arg("accumulation"), py::arg("x"), py::arg("seed"), py::arg("stream"));
  m.def("dot",
        [](const Accumulation& a, const F64& x, const F64& y, std::uint64_t seed, std::uint64_t stream) {
          check_valid(a);
          if (x.size() != y.size())
            throw std::invalid_argument("dot: x has " + std::to_string(x.size()) + " elements, y has " +
                                        std::to_string(y.size()));
          AccumStats st;
          double r = 0;
          {
            py::gil_scoped_release nogil;
            r = numerics::dot(a, x.data(), 1, y.data(), 1, static_cast<std::size_t>(x.size()), {seed, stream}, &st);
          }
          return py::make_tuple(r, st.overflows);
        },
        py::arg("accumulation"), py::arg("x"), py::arg("y"), py::arg("seed"), py::arg("stream"));
  m.def("gemm",
        [](const Accumulation& a, const F64& as, bool at, const F64& bs, bool bt, const std::optional<F64>& c,
           std::uint64_t seed, std::uint64_t stream, int threads, std::optional<F64> out_arg) {
          check_valid(a);
          const Operand A = operand(as, at, "a"), B = operand(bs, bt, "b");
          if (A.cols != B.rows)
            throw std::invalid_argument("gemm: a is " + std::to_string(A.rows) + "x" + std::to_string(A.cols) +
                                        " and b is " + std::to_string(B.rows) + "x" + std::to_string(B.cols) +
                                        ": inner dimensions differ");
          const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(A.rows), static_cast<py::ssize_t>(B.cols)};
          F64 out = out_arg ? *out_arg : F64(shape);
          if (out.ndim() != 2 || out.shape(0) != shape[0] || out.shape(1) != shape[1])
            throw std::invalid_argument("gemm: out must be " + std::to_string(A.rows) + "x" + std::to_string(B.cols));
          double* C = out.mutable_data();
          if (c) {
            if (c->ndim() != 2 || static_cast<std::size_t>(c->shape(0)) != A.rows ||
                static_cast<std::size_t>(c->shape(1)) != B.cols)
              throw std::invalid_argument("gemm: c must be " + std::to_string(A.rows) + "x" + std::to_string(B.cols));
            if (c->data() != C) std::copy(c->data(), c->data() + c->size(), C);  // out may be c itself
          }
          AccumStats st;
          {
            py::gil_scoped_release nogil;
            numerics::gemm(a, A.rows, B.cols, A.cols, ConstMatrix{as.data(), A.ld, at}, ConstMatrix{bs.data(), B.ld, bt},
                           C, B.cols, c.has_value(), {seed, stream}, &st, threads);
          }
          return py::make_tuple(out, st.overflows);
        },
        py::arg("accumulation"), py::arg("a"), py::arg("a_transposed"), py::arg("b"), py::arg("b_transposed"),
        py::arg("c"), py::arg("seed"), py::arg("stream"), py::arg("threads"), py::arg("out").noconvert() = py::none());
}

}  // namespace roundoff::python
