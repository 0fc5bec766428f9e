// ops::Runner on a user's arrays: every op forward and backward under a Policy, with the MPFR shadow's error
// records when shadowing is on. Backward calls return fresh gradients (the C++ ops add into a zeroed buffer).
#include <map>
#include <memory>
#include <string>

#include "ops/fp8_scaling.hpp"
#include "ops/runner.hpp"
#include "python/src/bind.hpp"

namespace roundoff::python {

using namespace ops;

namespace {

struct PyRunner {
  PyRunner(const Policy& p, std::uint64_t seed) : runner(p, seed) {}
  Runner runner;
  Tape tape;
};

std::span<double> sp(F64& a) { return {a.mutable_data(), static_cast<std::size_t>(a.size())}; }
std::span<const double> cs(const F64& a) { return {a.data(), static_cast<std::size_t>(a.size())}; }
F64 zeros(std::vector<py::ssize_t> shape) {
  F64 a(shape);
  std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.0);
  return a;
}
std::vector<py::ssize_t> shape_of(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

/// (rows, cols) of a row-wise tensor: cols = the last dimension.
RowShape rows_of(const F64& x, const char* name) {
  if (x.ndim() < 1 || x.shape(x.ndim() - 1) == 0)
    throw std::invalid_argument(std::string(name) + " must have at least one dimension and a non-empty last one");
  const std::int64_t cols = x.shape(x.ndim() - 1);
  return {x.size() / cols, cols};
}
/// (n, in) of a matrix: the last dimension and the product of the others.
MatmulShape mm_of(const F64& x, const F64& w, const char* xn) {
  if (w.ndim() != 2) throw std::invalid_argument("w must be 2-D (out, in)");
  const RowShape r = rows_of(x, xn);
  return {r.rows, r.cols, w.shape(0)};
}
/// AttnShape from a (B, T, NH·hs) tensor and NH.
AttnShape attn_of(const F64& q, std::int64_t nh, const char* name) {
  if (q.ndim() != 3) throw std::invalid_argument(std::string(name) + " must be 3-D (B, T, NH*hs)");
  if (nh < 1 || q.shape(2) % nh != 0)
    throw std::invalid_argument("heads = " + std::to_string(nh) + " does not divide the channel count " +
                                std::to_string(q.shape(2)) + " of " + name);
  return {q.shape(0), nh, q.shape(1), q.shape(2) / nh};
}
/// AttnShape from a (B, NH, T, T) tensor and hs.
AttnShape attn_of_scores(const F64& a, std::int64_t hs, const char* name) {
  if (a.ndim() != 4 || a.shape(2) != a.shape(3))
    throw std::invalid_argument(std::string(name) + " must be 4-D (B, NH, T, T)");
  return {a.shape(0), a.shape(1), a.shape(2), hs};
}
void same(const F64& a, const F64& b, const char* an, const char* bn) {
  if (shape_of(a) != shape_of(b))
    throw std::invalid_argument(std::string(an) + " and " + bn + " must have the same shape");
}
OpKind residual_kind(const std::string& which) {
  if (which == "attn") return OpKind::ResidualAttn;
  if (which == "ffn") return OpKind::ResidualFfn;
  throw std::invalid_argument("residual: which='" + which + "' is not one of: attn, ffn");
}
OpKind matmul_kind(const std::string& op) {
  if (op == "matmul") return OpKind::Matmul;
  if (op == "classifier") return OpKind::Classifier;
  throw std::invalid_argument("matmul: op='" + op + "' is not one of: matmul, classifier");
}

/// The Site of a GEMM call from Python: `name` and `layer` key its per-tensor fp8 state ("L<layer>.<op>.<name>.<role>",
/// ops/runner.hpp), as the trainer's module and layer do; the tensor name of its records stays empty.
Site gemm_site(const std::string& op, std::int64_t layer, const std::string& name) {
  if (name.empty()) throw std::invalid_argument("matmul: name must not be empty (it keys the layer's fp8 amax history)");
  if (layer < -1 || layer > 1000000) throw std::invalid_argument("matmul: layer must be -1 (none) or in 0..1000000");
  return Site{matmul_kind(op), static_cast<int>(layer), "", Observe::Outputs, name};
}

/// One tensor's delayed-scaling state as a dict: elem, scale, scale_inv (binary32 values as Python floats), history
/// (float32 array, history[0] the amax being recorded this step).
py::dict tensor_state_dict(const Fp8TensorState& t) {
  py::dict d;
  d["elem"] = std::string(name_of(t.elem));
  d["scale"] = static_cast<double>(t.scale);
  d["scale_inv"] = static_cast<double>(scale_inverse(t.scale));
  F32 h({static_cast<py::ssize_t>(t.history.size())});
  std::copy(t.history.begin(), t.history.end(), h.mutable_data());
  d["history"] = h;
  return d;
}

Fp8TensorState tensor_state_of(const std::string& key, const py::dict& d) {
  for (const char* k : {"elem", "scale", "history"})
    if (!d.contains(k))
      throw std::invalid_argument("set_fp8_state: tensor '" + key + "' has no '" + k +
                                  "' (valid: a dict of fp8_state(): elem, scale, history)");
  const Fp8Operand o = parse_fp8_operand(d["elem"].cast<std::string>());
  if (!o.on() || !o.per_tensor())
    throw std::invalid_argument("set_fp8_state: tensor '" + key + "' has elem '" + to_string(o) +
                                "' (valid: e4m3, e5m2)");
  Fp8TensorState t;
  t.elem = o.elem;
  t.scale = d["scale"].cast<float>();
  const F32 h = py::cast<F32>(d["history"]);
  t.history.assign(h.data(), h.data() + h.size());
  return t;
}

}  // namespace

void bind_runner(py::module_& m) {
  using R = PyRunner;
  py::class_<PyRunner>(m, "Runner")
      .def(py::init([](const Policy& p, std::uint64_t seed, bool shadow, std::int64_t every, std::int64_t units) {
             auto r = std::make_unique<PyRunner>(p, seed);
             if (every < 0 || units < 0) throw std::invalid_argument("Runner: every and units must be >= 0");
             if (shadow) {
               Sampling s;
               s.every = every;
               s.units = units;
               r->runner.enable_shadow(&r->tape, s);
             }
             return r;
           }),
           py::arg("policy"), py::arg("seed"), py::arg("shadow"), py::arg("every"), py::arg("units"))
      .def_property("step", [](const R& r) { return r.runner.step(); },
                    [](R& r, std::int64_t s) { r.runner.set_step(s); })
      .def_property_readonly("policy", [](const R& r) { return r.runner.policy(); })
      .def("records",
           [](const R& r) {
             py::list out;
             for (const auto& rec : r.tape.records()) out.append(record_dict(rec));
             return out;
           })
      .def("clear_records", [](R& r) { r.tape.clear(); })
      // ---- delayed fp8 scaling (ops/fp8_scaling.hpp): the trainer's per-step protocol, Transformer::loss_and_grad
      .def_property("record_amax", [](const R& r) { return r.runner.fp8_recording(); },
                    [](R& r, bool on) { r.runner.set_fp8_recording(on); })
      .def("update_scales", [](R& r) { r.runner.fp8_update(); })
      .def_property_readonly("fp8_scaling", [](const R& r) { return to_string(r.runner.fp8_state().config()); })
      .def("fp8_state",
           [](const R& r) {
             py::dict out;
             for (const auto& [key, t] : r.runner.fp8_state().tensors()) out[py::str(key)] = tensor_state_dict(t);
             return out;
           })
      .def("set_fp8_state",
           [](R& r, const py::dict& tensors) {
             std::map<std::string, Fp8TensorState> t;
             for (const auto& [k, v] : tensors) {
               const std::string key = k.cast<std::string>();
               if (!py::isinstance<py::dict>(v))
                 throw std::invalid_argument("set_fp8_state: tensor '" + key + "' must be a dict (elem, scale, history)");
               t.emplace(key, tensor_state_of(key, v.cast<py::dict>()));
             }
             r.runner.fp8_state().assign(std::move(t));
           },
           py::arg("tensors"))
      // ---- projections ----
      .def("matmul_forward",
           [](R& r, const F64& x, const F64& w, const std::string& op, const std::string& name, std::int64_t layer) {
             const Site site = gemm_site(op, layer, name);
             const MatmulShape s = mm_of(x, w, "x");
             need_size(w, s.out * s.in, "w", "(out, in)");
             auto shape = shape_of(x);
             shape.back() = s.out;
             F64 y = zeros(shape);
             py::gil_scoped_release g;
             r.runner.matmul_forward(site, sp(y), cs(x), cs(w), s);
             return y;
           },
           py::arg("x"), py::arg("w"), py::arg("op"), py::arg("name"), py::arg("layer"))
      .def("matmul_backward_data",
           [](R& r, const F64& dy, const F64& w, const std::string& op, const std::string& name, std::int64_t layer) {
             const Site site = gemm_site(op, layer, name);
             if (w.ndim() != 2) throw std::invalid_argument("w must be 2-D (out, in)");
             const RowShape d = rows_of(dy, "dy");
             if (d.cols != w.shape(0)) throw std::invalid_argument("dy's last dimension must equal w's rows (out)");
             const MatmulShape s{d.rows, w.shape(1), w.shape(0)};
             auto shape = shape_of(dy);
             shape.back() = s.in;
             F64 dx = zeros(shape);
             py::gil_scoped_release g;
             r.runner.matmul_backward_data(site, sp(dx), cs(dy), cs(w), s);
             return dx;
           },
           py::arg("dy"), py::arg("w"), py::arg("op"), py::arg("name"), py::arg("layer"))
      .def("matmul_backward_weight",
           [](R& r, const F64& dy, const F64& x, const std::string& op, const std::string& name, std::int64_t layer) {
             const Site site = gemm_site(op, layer, name);
             const RowShape d = rows_of(dy, "dy"), xs = rows_of(x, "x");
             if (d.rows != xs.rows) throw std::invalid_argument("dy and x must have the same number of rows");
             const MatmulShape s{d.rows, xs.cols, d.cols};
             F64 dw = zeros({static_cast<py::ssize_t>(s.out), static_cast<py::ssize_t>(s.in)});
             py::gil_scoped_release g;
             r.runner.matmul_backward_weight(site, sp(dw), cs(dy), cs(x), s);
             return dw;
           },
           py::arg("dy"), py::arg("x"), py::arg("op"), py::arg("name"), py::arg("layer"))
      // ---- RMSNorm ----
      .def("rmsnorm_forward",
           [](R& r, const F64& x, const F64& w, double eps) {
             const RowShape s = rows_of(x, "x");
             need_size(w, s.cols, "w", "(cols)");
             F64 y = zeros(shape_of(x)), rstd = zeros({static_cast<py::ssize_t>(s.rows)});
             {
               py::gil_scoped_release g;
               r.runner.rmsnorm_forward({OpKind::RmsNorm}, sp(y), sp(rstd), cs(x), cs(w), s, eps);
             }
             return py::make_tuple(y, rstd);
           },
           py::arg("x"), py::arg("w"), py::arg("eps"))
      .def("rmsnorm_backward_data",
           [](R& r, const F64& dy, const F64& x, const F64& w, const F64& rstd) {
             same(dy, x, "dy", "x");
             const RowShape s = rows_of(x, "x");
             need_size(w, s.cols, "w", "(cols)");
             need_size(rstd, s.rows, "rstd", "(rows)");
             F64 dx = zeros(shape_of(x));
             py::gil_scoped_release g;
             r.runner.rmsnorm_backward_data({OpKind::RmsNorm}, sp(dx), cs(dy), cs(x), cs(w), cs(rstd), s);
             return dx;
           },
           py::arg("dy"), py::arg("x"), py::arg("w"), py::arg("rstd"))
      .def("rmsnorm_backward_weight",
           [](R& r, const F64& dy, const F64& x, const F64& rstd) {
             same(dy, x, "dy", "x");
             const RowShape s = rows_of(x, "x");
             need_size(rstd, s.rows, "rstd", "(rows)");
             F64 dw = zeros({static_cast<py::ssize_t>(s.cols)});
             py::gil_scoped_release g;
             r.runner.rmsnorm_backward_weight({OpKind::RmsNorm}, sp(dw), cs(dy), cs(x), cs(rstd), s);
             return dw;
           },
           py::arg("dy"), py::arg("x"), py::arg("rstd"))
      // ---- attention ----
      .def("attn_scores_forward",
           [](R& r, const F64& q, const F64& k, std::int64_t heads) {
             same(q, k, "q", "k");
             const AttnShape s = attn_of(q, heads, "q");
             F64 pre = zeros({static_cast<py::ssize_t>(s.B), static_cast<py::ssize_t>(s.NH),
                              static_cast<py::ssize_t>(s.T), static_cast<py::ssize_t>(s.T)});
             py::gil_scoped_release g;
             r.runner.attn_scores_forward({OpKind::AttnScores}, sp(pre), cs(q), cs(k), s);
             return pre;
           },
           py::arg("q"), py::arg("k"), py::arg("heads"))
      .def("attn_scores_backward_data",
           [](R& r, const F64& dpre, const F64& q, const F64& k) {
             same(q, k, "q", "k");
             if (dpre.ndim() != 4) throw std::invalid_argument("dpreatt must be 4-D (B, NH, T, T)");
             const AttnShape s = attn_of(q, dpre.shape(1), "q");
             need_size(dpre, s.att_size(), "dpreatt", "(B, NH, T, T)");
             F64 dq = zeros(shape_of(q)), dk = zeros(shape_of(k));
             {
               py::gil_scoped_release g;
               r.runner.attn_scores_backward_data({OpKind::AttnScores}, sp(dq), sp(dk), cs(dpre), cs(q), cs(k), s);
             }
             return py::make_tuple(dq, dk);
           },
           py::arg("dpreatt"), py::arg("q"), py::arg("k"))
      .def("softmax_forward",
           [](R& r, const F64& pre) {
             const AttnShape s = attn_of_scores(pre, 1, "preatt");
             F64 att = zeros(shape_of(pre));
             py::gil_scoped_release g;
             r.runner.softmax_forward({OpKind::Softmax}, sp(att), cs(pre), s);
             return att;
           },
           py::arg("preatt"))
      .def("softmax_backward_data",
           [](R& r, const F64& datt, const F64& att) {
             same(datt, att, "datt", "att");
             const AttnShape s = attn_of_scores(att, 1, "att");
             F64 dpre = zeros(shape_of(att));
             py::gil_scoped_release g;
             r.runner.softmax_backward_data({OpKind::Softmax}, sp(dpre), cs(datt), cs(att), s);
             return dpre;
           },
           py::arg("datt"), py::arg("att"))
      .def("attn_values_forward",
           [](R& r, const F64& att, const F64& v) {
             if (att.ndim() != 4) throw std::invalid_argument("att must be 4-D (B, NH, T, T)");
             const AttnShape s = attn_of(v, att.shape(1), "v");
             need_size(att, s.att_size(), "att", "(B, NH, T, T) matching v");
             F64 out = zeros(shape_of(v));
             py::gil_scoped_release g;
             r.runner.attn_values_forward({OpKind::AttnValues}, sp(out), cs(att), cs(v), s);
             return out;
           },
           py::arg("att"), py::arg("v"))
      .def("attn_values_backward_data",
           [](R& r, const F64& dout, const F64& att, const F64& v) {
             same(dout, v, "dout", "v");
             if (att.ndim() != 4) throw std::invalid_argument("att must be 4-D (B, NH, T, T)");
             const AttnShape s = attn_of(v, att.shape(1), "v");
             need_size(att, s.att_size(), "att", "(B, NH, T, T) matching v");
             F64 datt = zeros(shape_of(att)), dv = zeros(shape_of(v));
             {
               py::gil_scoped_release g;
               r.runner.attn_values_backward_data({OpKind::AttnValues}, sp(datt), sp(dv), cs(dout), cs(att), cs(v), s);
             }
             return py::make_tuple(datt, dv);
           },
           py::arg("dout"), py::arg("att"), py::arg("v"))
      // ---- elementwise ----
      .def("silu_forward",
           [](R& r, const F64& x) {
             const RowShape s = rows_of(x, "x");
             F64 y = zeros(shape_of(x));
             py::gil_scoped_release g;
             r.runner.silu_forward({OpKind::Silu}, sp(y), cs(x), s);
             return y;
           },
           py::arg("x"))
      .def("silu_backward_data",
           [](R& r, const F64& dy, const F64& x) {
             same(dy, x, "dy", "x");
             const RowShape s = rows_of(x, "x");
             F64 dx = zeros(shape_of(x));
             py::gil_scoped_release g;
             r.runner.silu_backward_data({OpKind::Silu}, sp(dx), cs(dy), cs(x), s);
             return dx;
           },
           py::arg("dy"), py::arg("x"))
      .def("swiglu_forward",
           [](R& r, const F64& a, const F64& u) {
             same(a, u, "a", "u");
             const RowShape s = rows_of(a, "a");
             F64 h = zeros(shape_of(a));
             py::gil_scoped_release g;
             r.runner.swiglu_forward({OpKind::SwiGlu}, sp(h), cs(a), cs(u), s);
             return h;
           },
           py::arg("a"), py::arg("u"))
      .def("swiglu_backward_data",
           [](R& r, const F64& dh, const F64& a, const F64& u) {
             same(a, u, "a", "u");
             same(dh, a, "dh", "a");
             const RowShape s = rows_of(a, "a");
             F64 da = zeros(shape_of(a)), du = zeros(shape_of(a));
             {
               py::gil_scoped_release g;
               r.runner.swiglu_backward_data({OpKind::SwiGlu}, sp(da), sp(du), cs(dh), cs(a), cs(u), s);
             }
             return py::make_tuple(da, du);
           },
           py::arg("dh"), py::arg("a"), py::arg("u"))
      .def("residual_forward",
           [](R& r, const F64& x, const F64& f, double alpha, const std::string& which) {
             same(x, f, "x", "f");
             const RowShape s = rows_of(x, "x");
             const OpKind k = residual_kind(which);
             F64 out = zeros(shape_of(x));
             py::gil_scoped_release g;
             r.runner.residual_forward({k}, sp(out), cs(x), cs(f), alpha, s);
             return out;
           },
           py::arg("x"), py::arg("f"), py::arg("alpha"), py::arg("which"))
      .def("residual_backward_data",
           [](R& r, const F64& dout, double alpha, const std::string& which) {
             const RowShape s = rows_of(dout, "dout");
             const OpKind k = residual_kind(which);
             F64 dx = zeros(shape_of(dout)), df = zeros(shape_of(dout));
             {
               py::gil_scoped_release g;
               r.runner.residual_backward_data({k}, sp(dx), sp(df), cs(dout), alpha, s);
             }
             return py::make_tuple(dx, df);
           },
           py::arg("dout"), py::arg("alpha"), py::arg("which"))
      // ---- loss ----
      .def("cross_entropy_forward",
           [](R& r, const F64& logits, const I32& targets) {
             if (logits.ndim() != 2) throw std::invalid_argument("logits must be 2-D (N, V)");
             const RowShape s{logits.shape(0), logits.shape(1)};
             need_size(targets, s.rows, "targets", "(N)");
             const std::int32_t* t = targets.data();
             for (py::ssize_t i = 0; i < targets.size(); ++i)
               if (t[i] < 0 || t[i] >= s.cols)
                 throw std::invalid_argument("targets[" + std::to_string(i) + "] = " + std::to_string(t[i]) +
                                             " is outside [0, " + std::to_string(s.cols) + ")");
             F64 losses = zeros({static_cast<py::ssize_t>(s.rows)}), probs = zeros(shape_of(logits));
             double mean = 0;
             {
               py::gil_scoped_release g;
               mean = r.runner.cross_entropy_forward({OpKind::CrossEntropy}, sp(losses), sp(probs), cs(logits),
                                                     {t, static_cast<std::size_t>(targets.size())}, s);
             }
             return py::make_tuple(mean, losses, probs);
           },
           py::arg("logits"), py::arg("targets"))
      .def("cross_entropy_backward_data",
           [](R& r, const F64& probs, const I32& targets, double grad_scale) {
             if (probs.ndim() != 2) throw std::invalid_argument("probs must be 2-D (N, V)");
             const RowShape s{probs.shape(0), probs.shape(1)};
             need_size(targets, s.rows, "targets", "(N)");
             const std::int32_t* t = targets.data();
             for (py::ssize_t i = 0; i < targets.size(); ++i)
               if (t[i] < 0 || t[i] >= s.cols)
                 throw std::invalid_argument("targets[" + std::to_string(i) + "] is outside [0, " +
                                             std::to_string(s.cols) + ")");
             F64 dl = zeros(shape_of(probs));
             py::gil_scoped_release g;
             r.runner.cross_entropy_backward_data({OpKind::CrossEntropy}, sp(dl), cs(probs),
                                                  {t, static_cast<std::size_t>(targets.size())}, grad_scale, s);
             return dl;
           },
           py::arg("probs"), py::arg("targets"), py::arg("grad_scale"));
}

}  // namespace roundoff::python
