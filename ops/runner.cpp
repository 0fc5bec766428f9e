#include "ops/runner.hpp"

#include <algorithm>
#include <bit>

#include "numerics/binary32_values.hpp"

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/matmul.hpp"
#include "ops/quant_shadow.hpp"
#include "ops/online_attention.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"

namespace roundoff::ops {

using RefOuts = std::vector<std::vector<Ref>>;

std::vector<std::int64_t> spaced_units(std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> u;
  if (k <= 0 || k >= n) {
    for (std::int64_t i = 0; i < n; ++i) u.push_back(i);
    return u;
  }
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int64_t lo = i * n / k, hi = (i + 1) * n / k;  // stratum i: [lo, hi), non-empty as k < n
    const auto h = numerics::mix64(static_cast<std::uint64_t>(n) * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i));
    u.push_back(lo + static_cast<std::int64_t>(h % static_cast<std::uint64_t>(hi - lo)));
  }
  return u;
}

namespace {


std::vector<std::size_t> elements_of(const Runner::UnitMap& m, std::span<const std::int64_t> sel) {
  std::vector<std::size_t> e;
  for (std::int64_t u : sel) {
    switch (m.kind) {
      case Runner::UnitMap::Kind::Rows:
        for (std::int64_t i = 0; i < m.width; ++i) e.push_back(static_cast<std::size_t>(u * m.width + i));
        break;
      case Runner::UnitMap::Kind::Columns:
        for (std::int64_t r = 0; r < m.rows; ++r) e.push_back(static_cast<std::size_t>(r * m.width + u));
        break;
      case Runner::UnitMap::Kind::Heads: {
        const AttnShape& s = m.attn;
        const std::int64_t b = u / s.NH, h = u % s.NH;
        for (std::int64_t t = 0; t < s.T; ++t)
          for (std::int64_t d = 0; d < s.hs; ++d)
            e.push_back(static_cast<std::size_t>((b * s.T + t) * s.C() + h * s.hs + d));
        break;
      }
    }
  }
  return e;
}

using K = Runner::UnitMap::Kind;
Runner::UnitMap rows(std::int64_t width) { return {K::Rows, width, 0, {}}; }
Runner::UnitMap heads(const AttnShape& s) { return {K::Heads, 1, 0, s}; }

using Outputs = std::initializer_list<Runner::Output>;

/// "matmul layer 2 w2" (op, layer when inside a block, tensor) for errors of an op call.
std::string site_text(const Site& s) {
  std::string t(name_of(s.op));
  if (s.layer >= 0) t += " layer " + std::to_string(s.layer);
  if (!s.tensor.empty()) t += " " + std::string(s.tensor);
  return t;
}

/// Index of the output whose storage is y (the op function's output argument), for the reference call.
std::size_t output_index(Outputs outs, const void* y, std::size_t size) {
  std::size_t i = 0;
  for (const Runner::Output& o : outs) {
    if (o.data.data() == y && o.data.size() == size) return i;
    ++i;
  }
  throw std::logic_error("Runner: an op call writes a span that is not among its declared outputs");
}

/// The other-width copies of a mixed-width call's tensors at the width T the call runs at (binary64 copies of its
/// binary32 tensors, or binary32 copies of its binary64 ones), one per tensor, keyed by its first element so that
/// an input aliasing an output reads the output's copy. Every conversion is exact (Runner::run checks that first).
template <class T>
struct Copies {
  std::vector<std::pair<const void*, std::vector<T>>> copies;

  template <class V>
  std::span<T> of(const V& v) {
    for (auto& [k, c] : copies)
      if (k == v.data() && c.size() == v.size()) return c;
    std::vector<T> c(v.size());
    v.visit([&](auto src) {
      using S = std::remove_const_t<typename decltype(src)::element_type>;
      if constexpr (std::is_same_v<S, T>) std::copy(src.begin(), src.end(), c.begin());  // not a mixed call's
      else if constexpr (std::is_same_v<T, double>) numerics::widen_binary32(src, c);
      else numerics::narrow_to_binary32(src, c);
    });
    copies.emplace_back(v.data(), std::move(c));
    return copies.back().second;
  }
  /// The copy of v, if the call made one.
  const std::vector<T>* find(const Values& v) const {
    for (const auto& [k, c] : copies)
      if (k == v.data() && c.size() == v.size()) return &c;
    return nullptr;
  }
};

/// The emulated call's arguments: the caller's spans as they are, every unit. T: the width the call runs at; a
/// Values / CValues of the other width (a mixed-width call) is read and written through `copies`, the outputs
/// converted back by Runner::run.
template <class T>
struct EmulatedArgs {
  Copies<T>* copies = nullptr;

  std::span<T> out(Values y) const {
    if (y.binary32() != std::is_same_v<T, float>) return copies->of(y);
    return y.as<T>();
  }
  std::span<const T> in(CValues x) const {
    if (x.binary32() != std::is_same_v<T, float>) return copies->of(x);
    return x.as<T>();
  }
  /// GEMM weights at their own width, whatever the call's (the binary32 body reads binary32 weights in place, the
  /// binary64 body widens them; ops/matmul.hpp): f(the weights' span).
  template <class F>
  static void weights(CValues w, F&& f) {
    w.visit(f);
  }
  /// A GEMM's weight gradient at its own width, whatever the call's: f(dW's span).
  template <class F>
  static void weight_grad(Values dw, F&& f) {
    dw.visit(f);
  }
  /// Binary64 at every width (weight gradients, the losses).
  static std::span<double> out(std::span<double> y) { return y; }
  static std::span<const double> in(std::span<const double> x) { return x; }
  static std::span<double> optional(std::span<double> x) { return x; }
  static Select sel() { return {}; }
  /// A second context of the call (the online attention's softmax entry): the emulated one, as given.
  static const Ctx<Emulated>& context(const Ctx<Emulated>& emulated, const OpPrecision&) { return emulated; }
};

/// Whether every element of x is a binary32 value, bit for bit (NaN payloads included).
bool binary32_exact(std::span<const double> x) {
  return std::all_of(x.begin(), x.end(), [](double v) {
    return std::bit_cast<std::uint64_t>(static_cast<double>(static_cast<float>(v))) == std::bit_cast<std::uint64_t>(v);
  });
}

/// The shadow's Reference call's arguments: the reference outputs (snapshots of the outputs taken before the
/// emulated call, so add-into gradients start from the same values), the inputs lifted to Ref (as |x| for
/// the Σ|a||b| rerun of dot outputs), the sampled units. An input that is also an output (in-place updates:
/// rope's y = x, the residual stream's out = x) is read from the output's snapshot, i.e. its value before
/// the emulated call.
struct ReferenceArgs {
  Outputs outs;
  RefOuts& o;       ///< reference outputs of this rerun
  RefOuts& before;  ///< outputs before the emulated call, kept for inputs that alias an output
  bool magnitude;   ///< the |inputs| rerun
  Select units;

  std::span<Ref> out(Values y) const { return o[output_index(outs, y.data(), y.size())]; }
  std::span<Ref> out(std::span<double> y) const { return out(Values(y)); }
  std::vector<Ref> in(CValues x) const {
    std::size_t i = 0;
    for (const Runner::Output& out : outs) {
      if (out.data.data() == x.data() && !x.empty()) {
        // The first rerun reads o[i] before the op writes it (arguments are evaluated before the call).
        if (!magnitude) before[i] = o[i];
        return magnitude ? magnitudes(before[i]) : before[i];
      }
      ++i;
    }
    std::vector<Ref> r(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) r[k] = magnitude ? std::fabs(x[k]) : x[k];
    return r;
  }
  std::vector<Ref> in(std::span<const double> x) const { return in(CValues(x)); }
  template <class F>
  void weights(CValues w, F&& f) const {
    f(in(w));
  }
  template <class F>
  void weight_grad(Values dw, F&& f) const {
    f(out(dw));
  }
  static std::span<Ref> optional(std::span<double>) { return {}; }
  Select sel() const { return units; }
  static Ctx<Reference> context(const Ctx<Emulated>& emulated, const OpPrecision& prec) {
    return Ctx<Reference>(prec, {}, emulated.exec());
  }

 private:
  static std::vector<Ref> magnitudes(std::vector<Ref> v) {
    for (Ref& r : v) r = boost::multiprecision::abs(r);
    return v;
  }
};

/// A binary64 view of v: v itself, or a widened copy held here.
class Wide {
 public:
  explicit Wide(CValues v) {
    if (v.binary32()) {
      copy_ = v.widened();
      view_ = copy_;
    } else {
      view_ = v.f64();
    }
  }
  std::span<const double> span() const { return view_; }

 private:
  std::vector<double> copy_;
  std::span<const double> view_;
};

std::vector<Ref> lift(CValues v) {
  std::vector<Ref> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = v[i];
  return r;
}

}  // namespace

Runner::Runner(const Policy& policy, std::uint64_t seed, const ExecOptions& exec)
    : policy_(policy), seed_(seed), fp8_(policy.fp8_scaling()),
      pack_cache_(std::make_unique<numerics::kernels::PackCache>(exec.pack_cache_bytes)) {
  set_exec(exec);
}

void Runner::set_exec(const ExecOptions& exec) {
  exec_ = exec;
  if (exec_.pack_cache == nullptr) {
    exec_.pack_cache = pack_cache_.get();
    if (pack_cache_->capacity() != exec_.pack_cache_bytes) pack_cache_->set_capacity(exec_.pack_cache_bytes);
  }
  ctx_.clear();
  ctx_.reserve(kOpCount * kPassCount);
  ctx_kept_.clear();
  ctx_kept_.reserve(kOpCount * kPassCount);
  for (OpKind k : kAllOps)
    for (Pass p : kAllPasses) {
      ctx_.emplace_back(policy_.at(k, p), numerics::StochasticBits{}, exec_);
      OpPrecision kept = policy_.at(k, p);
      kept.quant = GemmQuant{};
      ctx_kept_.emplace_back(kept, numerics::StochasticBits{}, exec_);
    }
}

void Runner::set_step(std::int64_t step) {
  step_ = step;
  call_ = 0;
}

void Runner::enable_shadow(Tape* tape, const Sampling& sampling) {
  tape_ = tape;
  sampling_ = sampling;
}

const Ctx<Emulated>& Runner::context(OpKind op, Pass pass) { return context(op, pass, -1); }

const Ctx<Emulated>& Runner::context(OpKind op, Pass pass, int layer) {
  const bool kept = policy_.block_keep().keeps(layer, layers_);
  Ctx<Emulated>& c = (kept ? ctx_kept_ : ctx_)[index_of(op) * kPassCount + index_of(pass)];
  c.set_bits({seed_, numerics::mix64((static_cast<std::uint64_t>(step_) << 24) ^ call_++)});
  return c;
}

Runner::Width Runner::width_of(Outputs outs, std::initializer_list<CValues> typed, const OpPrecision& prec) {
  std::size_t n32 = 0, n64 = 0;
  for (const CValues& v : typed) (v.binary32() ? n32 : n64) += v.size();
  const bool any32 = std::ranges::any_of(typed, [](const CValues& v) { return v.binary32(); });
  const bool any64 = std::ranges::any_of(typed, [](const CValues& v) { return !v.binary32(); });
  if (!any32) return Width::Binary64;
  if (!any64) return Width::Binary32;
  // Mixed: convert the fewer elements. Narrowing is exact only when every binary64 value is a binary32 value and
  // every binary64 output's storage fits binary32 (the binary32 body stores values of it).
  if (n64 >= n32) return Width::Widened;
  for (const Output& o : outs) {
    const numerics::Format& f = o.format != nullptr ? *o.format : prec.storage;
    const bool typed_out = std::ranges::any_of(typed, [&](const CValues& v) { return v.data() == o.data.data(); });
    if (typed_out && !o.data.binary32() && !numerics::fits_binary32(f)) return Width::Widened;
  }
  for (const CValues& v : typed)
    if (!v.binary32() && !binary32_exact(v.f64())) return Width::Widened;
  return Width::Narrowed;
}

template <class Call>
void Runner::run(Site s, Pass pass, std::int64_t n_units, Outputs outs, std::initializer_list<CValues> typed,
                 Call&& call, const AccReference& acc) {
  const std::size_t idx = index_of(s.op) * kPassCount + index_of(pass);
  const OpPrecision& prec = policy_.at(s.op, pass);
  // A binary32 output holds values of its storage format exactly only when that format fits binary32.
  for (const Output& o : outs) {
    const numerics::Format& f = o.format != nullptr ? *o.format : prec.storage;
    if (o.data.binary32() && !numerics::fits_binary32(f))
      throw std::logic_error(site_text(s) + " (" + std::string(name_of(pass)) + "): output " + std::string(o.name) +
                             " is a binary32 tensor but its storage format " + numerics::name_of(f) +
                             " does not fit binary32 (use binary64 tensors)");
  }
  const Ctx<Emulated>& c = context(s.op, pass, s.layer);
  const std::int64_t n = calls_[idx]++;
  const bool shadow = tape_ != nullptr && sampling_.ops[index_of(s.op)] && sampling_.every > 0 &&
                      n % sampling_.every == 0;
  RefOuts refs, absr, before(outs.size());
  if (shadow)
    for (const Output& o : outs) refs.push_back(lift(o.data));
  const Width width = width_of(outs, typed, prec);
  ++widths_[static_cast<std::size_t>(width)];
  const auto emulated = [&] {
    switch (width) {
      case Width::Binary64: {
        EmulatedArgs<double> io;
        return call(c, io);
      }
      case Width::Binary32: {
        EmulatedArgs<float> io;
        return call(c, io);
      }
      case Width::Widened: {
        Copies<double> copies;
        EmulatedArgs<double> io{&copies};
        call(c, io);
        for (const Output& o : outs)
          if (const auto* w = o.data.binary32() ? copies.find(o.data) : nullptr)
            numerics::narrow_to_binary32(std::span<const double>(*w), o.data.f32());
        return;
      }
      case Width::Narrowed: {
        Copies<float> copies;
        EmulatedArgs<float> io{&copies};
        call(c, io);
        for (const Output& o : outs)
          if (const auto* f = o.data.binary32() ? nullptr : copies.find(o.data))
            numerics::widen_binary32(std::span<const float>(*f), o.data.f64());
        return;
      }
    }
  };
  if (profile_ != nullptr) {
    const auto t0 = Profile::Clock::now();
    emulated();
    profile_->add(s.op, pass, seconds_since(t0));
  } else {
    emulated();
  }
  if (shadow) {
    const std::vector<std::int64_t> sel = spaced_units(n_units, sampling_.units);
    // The quantized operands' product first, while refs still holds every output's value before the call.
    std::optional<std::vector<Ref>> acc_ref;
    if (acc) acc_ref = acc(c, sel, refs.front());
    const Ctx<Reference> rc(prec, {}, c.exec());
    ReferenceArgs reference{outs, refs, before, false, Select(sel)};
    call(rc, reference);
    bool any_dot = false;
    for (const Output& o : outs) any_dot = any_dot || o.dot;
    if (any_dot) {
      for (const Output& o : outs) absr.emplace_back(o.data.size(), Ref(0));
      ReferenceArgs magnitudes{outs, absr, before, true, Select(sel)};
      call(rc, magnitudes);
    }
    std::size_t i = 0;
    for (const Output& o : outs) {
      const numerics::Format& f = o.format != nullptr ? *o.format : prec.storage;
      const std::vector<std::size_t> el = elements_of(o.map, sel);
      const Wide y(o.data);
      OpRecord r;
      r.step = step_;
      r.layer = s.layer;
      r.op = s.op;
      r.pass = pass;
      r.tensor = s.tensor.empty() ? std::string(o.name)
                 : outs.size() == 1 ? std::string(s.tensor)
                                    : std::string(s.tensor) + "." + std::string(o.name);
      r.kind = RecordKind::Local;
      r.error = compare(y.span(), refs[i], f, el, o.dot ? std::span<const Ref>(absr[i]) : std::span<const Ref>(),
                        numerics::unit_roundoff(prec.accumulate.format));
      r.range = range_events(y.span(), f);
      if (i == 0 && acc_ref) {
        std::vector<double> ys(el.size());
        for (std::size_t e = 0; e < el.size(); ++e) ys[e] = o.data[el[e]];
        r.acc = compare_units(ys, *acc_ref, el.size() / std::max<std::size_t>(sel.size(), 1), f);
      }
      tape_->add(std::move(r));
      ++i;
    }
  }
  if (!observer_ || s.observe == Observe::Off) return;
  std::size_t watched = 0;
  for (const Output& o : outs) watched += o.watched ? 1 : 0;
  for (const Output& o : outs)
    if (o.watched)
      observer_({s.op, pass, s.layer, s.tensor.empty() || watched > 1 ? o.name : s.tensor, o.data,
                 o.format != nullptr ? *o.format : prec.storage});
}

Observer Runner::set_observer(Observer observer) {
  std::swap(observer_, observer);
  return observer;
}

void Runner::record_global(Site s, Pass pass, CSpan emulated, std::span<const Ref> reference) {
  if (tape_ == nullptr) return;
  const numerics::Format& f = policy_.at(s.op, pass).storage;
  tape_->add({step_, s.layer, s.op, pass, std::string(s.tensor), RecordKind::Global,
              compare(emulated, reference, f), range_events(emulated, f)});
}

void Runner::record_global(Site s, Pass pass, CSpan emulated, CSpan reference) {
  if (tape_ == nullptr) return;
  const numerics::Format& f = policy_.at(s.op, pass).storage;
  tape_->add({step_, s.layer, s.op, pass, std::string(s.tensor), RecordKind::Global,
              compare(emulated, reference, f), range_events(emulated, f)});
}

// ---- one call per (op, pass): `call(ctx, io)` runs on the emulated and on the Reference backend -------------

void Runner::embedding_forward(Site s, Values out, Tokens tokens, CValues wte, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"out", out, rows(sh.cols)}}, {out, wte}, [&](const auto& c, auto& io) {
    ops::embedding_forward(io.out(out), tokens, io.in(wte), sh, c, io.sel());
  });
}

void Runner::embedding_backward_weight(Site s, Values dwte, CValues dout, Tokens tokens, RowShape sh) {
  const UnitMap cols{K::Columns, sh.cols, static_cast<std::int64_t>(dwte.size()) / sh.cols, {}};
  run(s, Pass::BackwardWeight, sh.cols, {{"dwte", dwte, cols}}, {dwte, dout}, [&](const auto& c, auto& io) {
    ops::embedding_backward_weight(io.out(dwte), io.in(dout), tokens, sh, c, io.sel());
  });
}

void Runner::rmsnorm_forward(Site s, Values y, Values rstd, CValues x, CValues w, RowShape sh, double eps) {
  run(s, Pass::Forward, sh.rows,
      {{"y", y, rows(sh.cols)}, {.name = "rstd", .data = rstd, .map = rows(1), .watched = false}}, {y, rstd, x, w},
      [&](const auto& c, auto& io) {
        ops::rmsnorm_forward(io.out(y), io.out(rstd), io.in(x), io.in(w), sh, eps, c, io.sel());
      });
}

void Runner::rmsnorm_backward_data(Site s, Values dx, CValues dy, CValues x, CValues w, CValues rstd, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}}, {dx, dy, x, w, rstd}, [&](const auto& c, auto& io) {
    ops::rmsnorm_backward_data(io.out(dx), io.in(dy), io.in(x), io.in(w), io.in(rstd), sh, c, io.sel());
  });
}

void Runner::rmsnorm_backward_weight(Site s, Values dw, CValues dy, CValues x, CValues rstd, RowShape sh) {
  run(s, Pass::BackwardWeight, sh.cols, {{"dw", dw, rows(1), true}}, {dw, dy, x, rstd}, [&](const auto& c, auto& io) {
    ops::rmsnorm_backward_weight(io.out(dw), io.in(dy), io.in(x), io.in(rstd), sh, c, io.sel());
  });
}

const Fp8Slots* Runner::fp8_slots(const Site& s, Pass pass) {
  const OpPrecision& e = policy_.at(s.op, pass);
  const bool counting = fp8_count_ && fp8_record_;
  const bool any_fp8 = std::ranges::any_of(kAllGemmRoles, [&](GemmRole r) { return e.quant.fp8_of(r).on(); });
  // Without per-tensor fp8 a call needs no slots, except to count its block casts (the slots' other fields are
  // read by per-tensor casts only, so handing them to a block-only call changes no bit).
  if (!(e.quant.per_tensor_fp8() || (counting && any_fp8)) || policy_.block_keep().keeps(s.layer, layers_))
    return nullptr;
  const std::string base = "L" + std::to_string(s.layer) + "." + std::string(name_of(s.op)) + "." +
                           std::string(s.module.empty() ? s.tensor : s.module) + ".";
  slots_ = Fp8Slots{};
  slots_.record = fp8_record_;
  slots_.cfg = fp8_.config();
  for (GemmRole r : kAllGemmRoles) {
    const Fp8Operand& f = e.quant.fp8_of(r);
    if (f.on() && f.per_tensor()) slots_.tensor[index_of(r)] = &fp8_.tensor(base + std::string(name_of(r)), f.elem);
    if (f.on() && counting) slots_.counts[index_of(r)] = &fp8_counts_[base + std::string(name_of(r))];
  }
  return &slots_;
}

void Runner::matmul_forward(Site s, Values y, CValues x, CValues w, MatmulShape sh) {
  try {
    const Fp8Slots* fp8 = fp8_slots(s, Pass::Forward);
    run(s, Pass::Forward, sh.n, {{"y", y, rows(sh.out), true}}, {y, x}, [&](const auto& c, auto& io) {
      io.weights(w, [&](auto ws) { ops::matmul_forward(io.out(y), io.in(x), ws, sh, c, io.sel(), fp8); });
    }, [&](const Ctx<Emulated>& c, std::span<const std::int64_t> units, std::span<const Ref> before) {
      return quantized_gemm_reference(c, Pass::Forward, sh, Wide(x).span(), Wide(w).span(), fp8, units, before);
    });
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(site_text(s) + ": " + e.what());
  }
}

void Runner::matmul_backward_data(Site s, Values dx, CValues dy, CValues w, MatmulShape sh) {
  try {
    const Fp8Slots* fp8 = fp8_slots(s, Pass::BackwardData);
    run(s, Pass::BackwardData, sh.n, {{"dx", dx, rows(sh.in), true}}, {dx, dy}, [&](const auto& c, auto& io) {
      io.weights(w, [&](auto ws) { ops::matmul_backward_data(io.out(dx), io.in(dy), ws, sh, c, io.sel(), fp8); });
    }, [&](const Ctx<Emulated>& c, std::span<const std::int64_t> units, std::span<const Ref> before) {
      return quantized_gemm_reference(c, Pass::BackwardData, sh, Wide(dy).span(), Wide(w).span(), fp8, units,
                                      before);
    });
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(site_text(s) + ": " + e.what());
  }
}

void Runner::matmul_backward_weight(Site s, Values dw, CValues dy, CValues x, MatmulShape sh) {
  try {
    const Fp8Slots* fp8 = fp8_slots(s, Pass::BackwardWeight);
    run(s, Pass::BackwardWeight, sh.out, {{"dw", dw, rows(sh.in), true}}, {dy, x}, [&](const auto& c, auto& io) {
      io.weight_grad(dw, [&](auto dws) {
        ops::matmul_backward_weight(dws, io.in(dy), io.in(x), sh, c, io.sel(), fp8);
      });
    }, [&](const Ctx<Emulated>& c, std::span<const std::int64_t> units, std::span<const Ref> before) {
      return quantized_gemm_reference(c, Pass::BackwardWeight, sh, Wide(dy).span(), Wide(x).span(), fp8, units,
                                      before);
    });
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(site_text(s) + ": " + e.what());
  }
}

void Runner::rope_angles(Site s, Span cos_t, Span sin_t, std::int64_t T, std::int64_t hs, double base) {
  run(s, Pass::Forward, T, {{"cos", cos_t, rows(hs / 2)}, {"sin", sin_t, rows(hs / 2)}}, {},
      [&](const auto& c, auto& io) { ops::rope_angles(io.out(cos_t), io.out(sin_t), T, hs, base, c, io.sel()); });
}

void Runner::rope_forward(Site s, Values y, CValues x, CValues cos_t, CValues sin_t, AttnShape sh) {
  // x may alias y: the reference then reads x from y's snapshot before the emulated call (ReferenceArgs::in).
  run(s, Pass::Forward, sh.B * sh.T, {{"y", y, rows(sh.C())}}, {y, x, cos_t, sin_t}, [&](const auto& c, auto& io) {
    ops::rope_forward(io.out(y), io.in(x), io.in(cos_t), io.in(sin_t), sh, c, io.sel());
  });
}

void Runner::rope_backward_data(Site s, Values dx, CValues dy, CValues cos_t, CValues sin_t, AttnShape sh) {
  run(s, Pass::BackwardData, sh.B * sh.T, {{"dx", dx, rows(sh.C())}}, {dx, dy, cos_t, sin_t},
      [&](const auto& c, auto& io) {
    ops::rope_backward_data(io.out(dx), io.in(dy), io.in(cos_t), io.in(sin_t), sh, c, io.sel());
  });
}

void Runner::attn_scores_forward(Site s, Values preatt, CValues q, CValues k, AttnShape sh) {
  run(s, Pass::Forward, sh.heads(), {{"preatt", preatt, rows(sh.T * sh.T), true}}, {preatt, q, k},
      [&](const auto& c, auto& io) {
    ops::attn_scores_forward(io.out(preatt), io.in(q), io.in(k), sh, c, io.sel());
  });
}

void Runner::attn_scores_backward_data(Site s, Values dq, Values dk, CValues dpreatt, CValues q, CValues k,
                                       AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads(), {{"dq", dq, heads(sh), true}, {"dk", dk, heads(sh), true}},
      {dq, dk, dpreatt, q, k},
      [&](const auto& c, auto& io) {
        ops::attn_scores_backward_data(io.out(dq), io.out(dk), io.in(dpreatt), io.in(q), io.in(k), sh, c, io.sel());
      });
}

void Runner::softmax_forward(Site s, Values att, CValues preatt, AttnShape sh) {
  run(s, Pass::Forward, sh.heads() * sh.T, {{"att", att, rows(sh.T)}}, {att, preatt}, [&](const auto& c, auto& io) {
    ops::softmax_forward(io.out(att), io.in(preatt), sh, c, io.sel());
  });
}

void Runner::softmax_backward_data(Site s, Values dpreatt, CValues datt, CValues att, AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads() * sh.T, {{"dpreatt", dpreatt, rows(sh.T)}}, {dpreatt, datt, att},
      [&](const auto& c, auto& io) {
    ops::softmax_backward_data(io.out(dpreatt), io.in(datt), io.in(att), sh, c, io.sel());
  });
}

void Runner::attn_values_forward(Site s, Values out, CValues att, CValues v, AttnShape sh) {
  run(s, Pass::Forward, sh.heads(), {{"out", out, heads(sh), true}}, {out, att, v}, [&](const auto& c, auto& io) {
    ops::attn_values_forward(io.out(out), io.in(att), io.in(v), sh, c, io.sel());
  });
}

void Runner::attn_values_backward_data(Site s, Values datt, Values dv, CValues dout, CValues att, CValues v,
                                       AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads(), {{"datt", datt, rows(sh.T * sh.T), true}, {"dv", dv, heads(sh), true}},
      {datt, dv, dout, att, v},
      [&](const auto& c, auto& io) {
        ops::attn_values_backward_data(io.out(datt), io.out(dv), io.in(dout), io.in(att), io.in(v), sh, c, io.sel());
      });
}

void Runner::online_attention_forward(Site s, Values y, Values lse, CValues preatt, CValues v, AttnShape sh) {
  const Site site{OpKind::AttnValues, s.layer, s.tensor, s.observe};
  const Ctx<Emulated>& sm = context(OpKind::Softmax, Pass::Forward);
  const OpPrecision& sm_prec = policy_.at(OpKind::Softmax, Pass::Forward);
  run(site, Pass::Forward, sh.heads(),
      {{"y", y, heads(sh)}, {.name = "lse", .data = lse, .map = rows(sh.T), .format = &sm_prec.storage}},
      {y, lse, preatt, v},
      [&](const auto& c, auto& io) {
        ops::online_attention_forward(io.out(y), io.out(lse), io.in(preatt), io.in(v), sh, io.context(sm, sm_prec), c,
                                      io.sel());
      });
}

void Runner::softmax_from_lse(Site s, Values att, CValues preatt, CValues lse, AttnShape sh) {
  const Site site{OpKind::Softmax, s.layer, s.tensor, s.observe};
  run(site, Pass::BackwardData, sh.heads() * sh.T, {{"att", att, rows(sh.T)}}, {att, preatt, lse},
      [&](const auto& c, auto& io) {
    ops::softmax_from_lse(io.out(att), io.in(preatt), io.in(lse), sh, c, io.sel());
  });
}

void Runner::gelu_forward(Site s, Values y, CValues x, RowShape sh, GeluForm form) {
  run(s, Pass::Forward, sh.rows, {{"y", y, rows(sh.cols)}}, {y, x},
      [&](const auto& c, auto& io) { ops::gelu_forward(io.out(y), io.in(x), sh, form, c, io.sel()); });
}

void Runner::gelu_backward_data(Site s, Values dx, CValues dy, CValues x, RowShape sh, GeluForm form) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}}, {dx, dy, x}, [&](const auto& c, auto& io) {
    ops::gelu_backward_data(io.out(dx), io.in(dy), io.in(x), sh, form, c, io.sel());
  });
}

void Runner::silu_forward(Site s, Values y, CValues x, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"y", y, rows(sh.cols)}}, {y, x},
      [&](const auto& c, auto& io) { ops::silu_forward(io.out(y), io.in(x), sh, c, io.sel()); });
}

void Runner::silu_backward_data(Site s, Values dx, CValues dy, CValues x, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}}, {dx, dy, x}, [&](const auto& c, auto& io) {
    ops::silu_backward_data(io.out(dx), io.in(dy), io.in(x), sh, c, io.sel());
  });
}

void Runner::swiglu_forward(Site s, Values h, CValues a, CValues u, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"h", h, rows(sh.cols)}}, {h, a, u},
      [&](const auto& c, auto& io) { ops::swiglu_forward(io.out(h), io.in(a), io.in(u), sh, c, io.sel()); });
}

void Runner::swiglu_backward_data(Site s, Values da, Values du, CValues dh, CValues a, CValues u, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"da", da, rows(sh.cols)}, {"du", du, rows(sh.cols)}}, {da, du, dh, a, u},
      [&](const auto& c, auto& io) {
        ops::swiglu_backward_data(io.out(da), io.out(du), io.in(dh), io.in(a), io.in(u), sh, c, io.sel());
      });
}

void Runner::residual_forward(Site s, Values out, CValues x, CValues f, double alpha, RowShape sh) {
  // out may alias x (in-place stream update): the reference then reads x from out's snapshot.
  run(s, Pass::Forward, sh.rows, {{"out", out, rows(sh.cols)}}, {out, x, f}, [&](const auto& c, auto& io) {
    ops::residual_forward(io.out(out), io.in(x), io.in(f), alpha, sh, c, io.sel());
  });
}

void Runner::residual_backward_data(Site s, Values dx, Values df, CValues dout, double alpha, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}, {"df", df, rows(sh.cols)}}, {dx, df, dout},
      [&](const auto& c, auto& io) {
        ops::residual_backward_data(io.out(dx), io.out(df), io.in(dout), alpha, sh, c, io.sel());
      });
}

double Runner::cross_entropy_forward(Site s, Span losses, Values probs, CValues logits, Tokens targets,
                                     RowShape sh) {
  run(s, Pass::Forward, sh.rows,
      {{"loss", losses, rows(1)}, {.name = "probs", .data = probs, .map = rows(sh.cols), .watched = false}},
      {probs, logits},
      [&](const auto& c, auto& io) {
        ops::cross_entropy_forward(io.out(losses), io.out(probs), io.in(logits), targets, sh, c, io.sel());
      });
  return mean_loss<double>(losses);
}

void Runner::cross_entropy_backward_data(Site s, Values dlogits, CValues probs, Tokens targets,
                                         double grad_scale, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dlogits", dlogits, rows(sh.cols)}}, {dlogits, probs},
      [&](const auto& c, auto& io) {
    ops::cross_entropy_backward_data(io.out(dlogits), io.in(probs), targets, grad_scale, sh, c, io.sel());
  });
}

void Runner::adamw_update(Site s, Span w, Span m, Span v, CSpan g, Span weights, const AdamWConfig& cfg,
                          std::int64_t t) {
  const AdamWFormats f(policy_);
  const numerics::Format fm = policy_.storage_for(TensorRole::MasterWeight);
  const numerics::Format fa = policy_.storage_for(TensorRole::AdamM);
  const numerics::Format fv = policy_.storage_for(TensorRole::AdamV);
  const auto n = static_cast<std::int64_t>(w.size());
  // The working weights (an optional extra output) are not part of the reference call.
  run(s, Pass::Forward, n,
      {{"w", w, rows(1), false, &fm}, {"m", m, rows(1), false, &fa}, {"v", v, rows(1), false, &fv}}, {},
      [&](const auto& c, auto& io) {
        ops::adamw_update(io.out(w), io.out(m), io.out(v), io.in(g), io.optional(weights), cfg, t, f, c, io.sel());
      });
}

void Runner::adamw_update(Site s, Span w, std::span<float> m, std::span<float> v, CValues g, Span weights,
                          const AdamWConfig& cfg, std::int64_t t) {
  adamw_binary32_moments(s, w, m, v, g, weights, cfg, t);
}

void Runner::adamw_update(Site s, std::span<float> w, std::span<float> m, std::span<float> v, CValues g,
                          const AdamWConfig& cfg, std::int64_t t) {
  adamw_binary32_moments(s, w, m, v, g, {}, cfg, t);
}

template <class W>
void Runner::adamw_binary32_moments(Site s, std::span<W> w, std::span<float> m, std::span<float> v, CValues g,
                                    Span weights, const AdamWConfig& cfg, std::int64_t t) {
  const AdamWFormats f(policy_);
  const numerics::Format fm = policy_.storage_for(TensorRole::MasterWeight);
  const auto n = static_cast<std::int64_t>(w.size());
  // With the shadow on, the moments before the update (the reference runs after the emulated call), widened.
  std::vector<Ref> m_before, v_before;
  if (tape_ != nullptr) {
    m_before.assign(m.begin(), m.end());
    v_before.assign(v.begin(), v.end());
  }
  // A binary32 w is a binary32 output (run() refuses it unless the master format fits binary32). The call lists no
  // typed arguments, so the emulated body updates the spans themselves.
  run(s, Pass::Forward, n, {{"w", Values(w), rows(1), false, &fm}}, {}, [&](const auto& c, auto& io) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(c)>, Ctx<Emulated>>) {
      g.visit([&](auto gs) {  // the gradients at their own width
        if constexpr (std::is_same_v<W, float>) ops::adamw_update(w, m, v, gs, cfg, t, f, c, io.sel());
        else ops::adamw_update(w, m, v, gs, io.optional(weights), cfg, t, f, c, io.sel());
      });
    } else {
      std::vector<Ref> mr = m_before, vr = v_before;
      ops::adamw_update(io.out(Values(w)), std::span<Ref>(mr), std::span<Ref>(vr), io.in(g), io.optional(weights),
                        cfg, t, f, c, io.sel());
    }
  });
}

}  // namespace roundoff::ops
