// Formats, rounding modes, array rounding, elementwise correctly rounded arithmetic, encodings.
#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "numerics/arith.hpp"
#include "python/src/bind.hpp"

namespace roundoff::python {

using namespace numerics;

namespace {

/// Index of the first element of x (n values) that is not a value of the plan's format, or -1.
std::int64_t first_not_representable(const RoundingPlan& plan, const double* x, std::size_t n) {
  // Chunks are screened by a branch-free bit test that accepts zeros and the format's normal values (|x| in
  // [2^emin, max_finite] with the significand bits below the format's last place zero); a chunk holding
  // anything else (a subnormal of the format, inf, NaN, a non-value) is checked element by element with
  // is_representable, the definition.
  const Format& f = plan.format;
  const std::uint64_t low = (std::uint64_t{1} << (53 - f.precision)) - 1;
  const double lo = plan.min_normal, hi = plan.max_finite;
  constexpr std::size_t kChunk = 1024;
  for (std::size_t c = 0; c < n; c += kChunk) {
    const std::size_t m = std::min(kChunk, n - c);
    unsigned bad = 0;
#pragma omp simd reduction(+ : bad)
    for (std::size_t i = 0; i < m; ++i) {
      const double v = x[c + i], a = std::fabs(v);
      const bool normal = a >= lo && a <= hi && (std::bit_cast<std::uint64_t>(v) & low) == 0;
      bad += static_cast<unsigned>(!(normal || v == 0));
    }
    if (bad == 0) continue;
    for (std::size_t i = 0; i < m; ++i)
      if (!is_representable(plan, x[c + i])) return static_cast<std::int64_t>(c + i);
  }
  return -1;
}

Specials parse_specials(const std::string& s) {
  if (s == "ieee") return Specials::Ieee;
  if (s == "nan-only") return Specials::NanOnly;
  if (s == "none") return Specials::None;
  throw std::invalid_argument("specials '" + s + "' is not one of: ieee, nan-only, none");
}
const char* specials_name(Specials s) {
  switch (s) {
    case Specials::Ieee: return "ieee";
    case Specials::NanOnly: return "nan-only";
    case Specials::None: return "none";
  }
  return "?";
}

/// The operations of arith(), by name, on one element.
enum class ArithOp : std::uint8_t { Add, Sub, Mul, Div, Fma, Sqrt, Unary };
struct OpSpec {
  ArithOp op;
  Elementary f = Elementary::Exp;
  int arity;
};
OpSpec parse_op(const std::string& name) {
  if (name == "add") return {ArithOp::Add, Elementary::Exp, 2};
  if (name == "sub") return {ArithOp::Sub, Elementary::Exp, 2};
  if (name == "mul") return {ArithOp::Mul, Elementary::Exp, 2};
  if (name == "div") return {ArithOp::Div, Elementary::Exp, 2};
  if (name == "fma") return {ArithOp::Fma, Elementary::Exp, 3};
  if (name == "sqrt") return {ArithOp::Sqrt, Elementary::Exp, 1};
  for (Elementary f : kAllElementary)
    if (name == name_of(f)) return {ArithOp::Unary, f, 1};
  std::string valid = "add, sub, mul, div, fma, sqrt";
  for (Elementary f : kAllElementary) valid += std::string(", ") + name_of(f);
  throw std::invalid_argument("arith: unknown operation '" + name + "'; valid: " + valid);
}

double apply(const RoundingPlan& p, Rounding m, const OpSpec& op, double x, double y, double z, std::uint64_t d) {
  switch (op.op) {
    case ArithOp::Add: return add(p, m, x, y, d);
    case ArithOp::Sub: return sub(p, m, x, y, d);
    case ArithOp::Mul: return mul(p, m, x, y, d);
    case ArithOp::Div: return div(p, m, x, y, d);
    case ArithOp::Fma: return numerics::fma(p, m, x, y, z, d);
    case ArithOp::Sqrt: return numerics::sqrt(p, m, x, d);
    case ArithOp::Unary: return elementary(p, m, op.f, x, d);
  }
  return std::nan("");
}

/// round_array over a whole array of T (double or float) into a new array or the caller's `out`.
template <class T>
py::array_t<T, py::array::c_style> round_into(const py::array_t<T, py::array::c_style>& x, const Format& f,
                                             const std::string& mode, std::uint64_t seed, std::uint64_t stream,
                                             std::uint64_t first,
                                             std::optional<py::array_t<T, py::array::c_style>> out_arg) {
  const RoundingPlan plan(f);
  const Rounding r = parse_rounding(mode);
  py::array_t<T, py::array::c_style> out =
      out_arg ? *out_arg : py::array_t<T, py::array::c_style>(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
  need_size(out, x.size(), "out", "(the size of x)");
  const auto n = static_cast<std::size_t>(x.size());
  const T* src = x.data();
  T* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    round_array(plan, r, std::span<const T>(src, n), std::span<T>(dst, n), {seed, stream}, first);
  }
  return out;
}

}  // namespace

void bind_formats(py::module_& m) {
  py::class_<Format>(m, "Format")
      .def(py::init([](const std::string& name) { return parse_format(name); }), py::arg("name"))
      .def(py::init([](int p, int emin, int emax, bool subnormals, const std::string& specials, bool saturate) {
             Format f{p, emin, emax, subnormals, parse_specials(specials), saturate};
             check_valid(f);
             return f;
           }),
           py::arg("p"), py::arg("emin"), py::arg("emax"), py::arg("subnormals") = true,
           py::arg("specials") = "ieee", py::arg("saturate") = false)
      .def_property_readonly("name", [](const Format& f) { return name_of(f); })
      .def_property_readonly("p", [](const Format& f) { return f.precision; })
      .def_property_readonly("emin", [](const Format& f) { return f.emin; })
      .def_property_readonly("emax", [](const Format& f) { return f.emax; })
      .def_property_readonly("subnormals", [](const Format& f) { return f.subnormals; })
      .def_property_readonly("specials", [](const Format& f) { return specials_name(f.specials); })
      .def_property_readonly("saturate", [](const Format& f) { return f.saturate; })
      .def_property_readonly("max_finite", [](const Format& f) { return max_finite(f); })
      .def_property_readonly("min_normal", [](const Format& f) { return min_normal(f); })
      .def_property_readonly("min_positive", [](const Format& f) { return min_positive(f); })
      .def_property_readonly("unit_roundoff", [](const Format& f) { return unit_roundoff(f); })
      .def_property_readonly("encoding",
                             [](const Format& f) -> py::object {
                               const auto e = encoding_of(f);
                               if (!e) return py::none();
                               return py::make_tuple(e->exponent_bits, e->fraction_bits, e->bias);
                             })
      .def("__repr__", [](const Format& f) { return "Format('" + name_of(f) + "')"; })
      .def("ulp", [](const Format& f, double x) { return numerics::ulp(f, x); }, py::arg("x"))
      .def("__eq__", [](const Format& a, const Format& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Format& f) { return py::hash(py::str(name_of(f))); })
      .def(py::pickle([](const Format& f) { return py::make_tuple(name_of(f)); },
                      [](const py::tuple& t) { return parse_format(t[0].cast<std::string>()); }));

  m.def("format_names", [] { return preset_format_names(); });
  m.def("rounding_names", [] {
    std::vector<std::string> v;
    for (Rounding r : kAllRoundings) v.emplace_back(name_of(r));
    return v;
  });
  m.def("parse_rounding", [](const std::string& s) { return std::string(name_of(parse_rounding(s))); });
  m.def("draw", [](std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
    return StochasticBits{seed, stream}.draw(index);
  });

  m.def("round_f64", &round_into<double>, py::arg("x"), py::arg("format"), py::arg("mode"), py::arg("seed"),
        py::arg("stream"), py::arg("first_index"), py::arg("out").noconvert() = py::none());
  m.def("round_f32", &round_into<float>, py::arg("x"), py::arg("format"), py::arg("mode"), py::arg("seed"),
        py::arg("stream"), py::arg("first_index"), py::arg("out").noconvert() = py::none());

  m.def("arith",
        [](const std::string& op_name, const Format& f, const std::string& mode, const F64& x,
           const std::optional<F64>& y, const std::optional<F64>& z, std::uint64_t seed, std::uint64_t stream) {
          const OpSpec op = parse_op(op_name);
          const int given = 1 + (y ? 1 : 0) + (z ? 1 : 0);
          if (given != op.arity)
            throw std::invalid_argument("arith: " + op_name + " takes " + std::to_string(op.arity) + " operand" +
                                        (op.arity > 1 ? "s" : "") + ", got " + std::to_string(given));
          if ((y && y->size() != x.size()) || (z && z->size() != x.size()))
            throw std::invalid_argument("arith: operands of different sizes (broadcast them first)");
          const RoundingPlan plan(f);
          const Rounding r = parse_rounding(mode);
          const StochasticBits bits{seed, stream};
          F64 out = new_like(x);
          const auto n = static_cast<std::size_t>(x.size());
          const double* a = x.data();
          const double* b = y ? y->data() : nullptr;
          const double* c = z ? z->data() : nullptr;
          double* dst = out.mutable_data();
          {
            py::gil_scoped_release nogil;
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint64_t d = r == Rounding::Stochastic ? bits.draw(i) : 0;
              dst[i] = apply(plan, r, op, a[i], b ? b[i] : 0.0, c ? c[i] : 0.0, d);
            }
          }
          return out;
        },
        py::arg("op"), py::arg("format"), py::arg("mode"), py::arg("x"), py::arg("y"), py::arg("z"), py::arg("seed"),
        py::arg("stream"));

  m.def("representable",
        [](const F64& x, const Format& f) {
          const RoundingPlan plan(f);
          py::array_t<bool> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
          bool* dst = out.mutable_data();
          const double* src = x.data();
          for (py::ssize_t i = 0; i < x.size(); ++i) dst[i] = is_representable(plan, src[i]);
          return out;
        },
        py::arg("x"), py::arg("format"));
  m.def("first_not_representable",
        [](const F64& x, const Format& f) {
          const RoundingPlan plan(f);
          return first_not_representable(plan, x.data(), static_cast<std::size_t>(x.size()));
        },
        py::arg("x"), py::arg("format"));
  m.def("to_bits",
        [](const F64& x, const Format& f) {
          if (!encoding_of(f)) throw std::invalid_argument("format " + name_of(f) + " has no bit encoding");
          const RoundingPlan plan(f);
          py::array_t<std::uint64_t> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
          std::uint64_t* dst = out.mutable_data();
          const double* src = x.data();
          for (py::ssize_t i = 0; i < x.size(); ++i) {
            if (!is_representable(plan, src[i]))
              throw std::invalid_argument("to_bits: element " + std::to_string(i) + " (" + std::to_string(src[i]) +
                                          ") is not a value of " + name_of(f));
            dst[i] = to_bits(f, src[i]);
          }
          return out;
        },
        py::arg("x"), py::arg("format"));
  m.def("from_bits",
        [](const py::array_t<std::uint64_t, py::array::c_style>& b, const Format& f) {
          const auto enc = encoding_of(f);
          if (!enc) throw std::invalid_argument("format " + name_of(f) + " has no bit encoding");
          const int bits = enc->total_bits();
          F64 out(std::vector<py::ssize_t>(b.shape(), b.shape() + b.ndim()));
          double* dst = out.mutable_data();
          const std::uint64_t* src = b.data();
          for (py::ssize_t i = 0; i < b.size(); ++i) {
            if (bits < 64 && (src[i] >> bits) != 0)
              throw std::invalid_argument("from_bits: element " + std::to_string(i) + " = " + std::to_string(src[i]) +
                                          " has more than the " + std::to_string(bits) + " bits of " + name_of(f));
            dst[i] = from_bits(f, src[i]);
          }
          return out;
        },
        py::arg("bits"), py::arg("format"));
}

}  // namespace roundoff::python
