// Precision policies (their canonical text and table) and the per-op error study's cases.
#include <string>

#include "ops/policy.hpp"
#include "ops/probe.hpp"
#include "python/src/bind.hpp"
#include "studies/op_error/op_case.hpp"

namespace roundoff::python {

using namespace ops;

py::dict record_dict(const OpRecord& r) {
  py::dict d;
  d["step"] = r.step;
  d["layer"] = r.layer;
  d["op"] = std::string(name_of(r.op));
  d["pass"] = std::string(name_of(r.pass));
  d["tensor"] = r.tensor;
  d["kind"] = std::string(name_of(r.kind));
  d["count"] = r.error.count;
  d["median_ulp"] = r.error.median_ulp;
  d["p95_ulp"] = r.error.p95_ulp;
  d["max_ulp"] = r.error.max_ulp;
  d["above_1ulp"] = r.error.above_1ulp;
  d["max_rel"] = r.error.max_rel;
  d["norm_rel"] = r.error.norm_rel;
  d["signed_rel"] = r.error.signed_rel;
  d["dot_ratio"] = r.error.dot_ratio;
  d["underflow"] = r.error.underflow;
  d["elements"] = r.range.elements;
  d["inf"] = r.range.inf;
  d["nan"] = r.range.nan;
  d["subnormal"] = r.range.subnormal;
  d["zero"] = r.range.zero;
  d["max_abs"] = r.range.max_abs;
  if (r.acc) {  // GEMMs with quantized operands: the error against the product of the operands they consumed
    py::dict a;
    a["count"] = r.acc->error.count;
    a["median_ulp"] = r.acc->error.median_ulp;
    a["p95_ulp"] = r.acc->error.p95_ulp;
    a["max_ulp"] = r.acc->error.max_ulp;
    a["max_rel"] = r.acc->error.max_rel;
    a["norm_rel"] = r.acc->error.norm_rel;
    a["signed_rel"] = r.acc->error.signed_rel;
    a["units"] = r.acc->units;
    a["unit_median"] = r.acc->unit_median;
    a["unit_p95"] = r.acc->unit_p95;
    a["unit_max"] = r.acc->unit_max;
    d["acc"] = a;
  } else {
    d["acc"] = py::none();
  }
  return d;
}

namespace {

py::dict entry_dict(OpKind k, Pass p, const OpPrecision& e) {
  py::dict d;
  d["op"] = std::string(name_of(k));
  d["pass"] = std::string(name_of(p));
  d["storage"] = e.storage;
  d["compute"] = e.compute;
  d["rounding"] = std::string(numerics::name_of(e.rounding));
  d["accumulation"] = e.accumulate;
  d["text"] = to_string(e);
  d["extras"] = extras_text(e);
  d["ftz"] = std::string(name_of(e.ftz));
  d["daz"] = std::string(name_of(e.daz));
  return d;
}

OpKind op_of(const std::string& name) {
  if (auto k = find_op(name)) return *k;
  throw std::invalid_argument("unknown op '" + name + "'; valid: " + std::string(op_names_list()));
}
Pass pass_of(const std::string& name) {
  if (auto p = find_pass(name)) return *p;
  throw std::invalid_argument("unknown pass '" + name + "'; valid: fwd, bwd-data, bwd-weight");
}

}  // namespace

void bind_policy(py::module_& m) {
  py::class_<Policy>(m, "Policy")
      .def(py::init([](const std::string& spec) { return Policy::parse(spec); }), py::arg("spec"))
      .def_property_readonly("canonical", &Policy::canonical)
      .def_property_readonly("loss_scale", &Policy::loss_scale)
      .def_property_readonly("attention", [](const Policy& p) { return std::string(name_of(p.attention_order())); })
      .def("entry",
           [](const Policy& p, const std::string& op, const std::string& pass) {
             const OpKind k = op_of(op);
             const Pass ps = pass_of(pass);
             return entry_dict(k, ps, p.at(k, ps));
           },
           py::arg("op"), py::arg("pass_") = "fwd")
      .def("table",
           [](const Policy& p) {
             py::list rows;
             for (OpKind k : kAllOps)
               for (Pass ps : kAllPasses) rows.append(entry_dict(k, ps, p.at(k, ps)));
             return rows;
           })
      .def("roles",
           [](const Policy& p) {
             py::dict d;
             for (TensorRole r : kAllRoles) d[py::str(std::string(name_of(r)))] = p.storage_for(r);
             return d;
           })
      .def("__repr__", [](const Policy& p) { return "Policy('" + p.canonical() + "')"; })
      .def("__eq__", [](const Policy& a, const Policy& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Policy& p) { return py::hash(py::str(p.canonical())); })
      .def(py::pickle([](const Policy& p) { return py::make_tuple(p.canonical()); },
                      [](const py::tuple& t) { return Policy::parse(t[0].cast<std::string>()); }));
  m.def("policy_names", [] { return Policy::preset_names(); });
  m.def("op_names", [] {
    std::vector<std::string> v;
    for (OpKind k : kAllOps) v.emplace_back(name_of(k));
    return v;
  });

  m.def("op_error",
        [](const std::string& op, const Policy& policy, const std::string& shape, std::int64_t rows, double scale,
           std::uint64_t seed, double ref_budget) {
          studies::op_error::CaseConfig cfg;
          cfg.op = studies::op_error::parse_op(op);
          cfg.shape = shape.empty() ? studies::op_error::default_shape(cfg.op)
                                    : studies::op_error::parse_shape(cfg.op, shape);
          if (rows < 1) throw std::invalid_argument("op_error: rows must be >= 1, got " + std::to_string(rows));
          if (!(scale > 0)) throw std::invalid_argument("op_error: scale must be > 0");
          cfg.rows = rows;
          cfg.scale = scale;
          cfg.seed = seed;
          cfg.ref_budget = ref_budget;
          std::vector<OpRecord> recs;
          {
            py::gil_scoped_release nogil;
            recs = studies::op_error::run_case(policy, cfg);
          }
          py::list out;
          for (const auto& r : recs) {
            py::dict d = record_dict(r);
            d["shape"] = cfg.shape.text();
            out.append(d);
          }
          return out;
        },
        py::arg("op"), py::arg("policy"), py::arg("shape"), py::arg("rows"), py::arg("scale"), py::arg("seed"),
        py::arg("ref_budget"));
}

}  // namespace roundoff::python
