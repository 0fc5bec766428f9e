#include "ops/runner.hpp"

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/matmul.hpp"
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

/// Inputs lifted to Ref, as absolute values for the Σ|a||b| rerun.
std::vector<Ref> L(std::span<const double> x, bool abs) {
  std::vector<Ref> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = abs ? std::fabs(x[i]) : x[i];
  return r;
}

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

}  // namespace

Runner::Runner(const Policy& policy, std::uint64_t seed) : policy_(policy), seed_(seed) {
  ctx_.reserve(kOpCount * kPassCount);
  for (OpKind k : kAllOps)
    for (Pass p : kAllPasses) ctx_.emplace_back(policy_.at(k, p));
}

void Runner::set_step(std::int64_t step) {
  step_ = step;
  call_ = 0;
}

void Runner::enable_shadow(Tape* tape, const Sampling& sampling) {
  tape_ = tape;
  sampling_ = sampling;
}

const Ctx<Emulated>& Runner::context(OpKind op, Pass pass) {
  Ctx<Emulated>& c = ctx_[index_of(op) * kPassCount + index_of(pass)];
  c.set_bits({seed_, numerics::mix64((static_cast<std::uint64_t>(step_) << 24) ^ call_++)});
  return c;
}

template <class EmuFn, class RefFn>
void Runner::run(Site s, Pass pass, std::int64_t n_units, std::initializer_list<Output> outs, EmuFn&& emu,
                 RefFn&& ref) {
  const std::size_t idx = index_of(s.op) * kPassCount + index_of(pass);
  const Ctx<Emulated>& c = context(s.op, pass);
  const std::int64_t n = calls_[idx]++;
  const bool shadow = tape_ != nullptr && sampling_.ops[index_of(s.op)] && sampling_.every > 0 &&
                      n % sampling_.every == 0;
  RefOuts refs, absr;
  if (shadow)
    for (const Output& o : outs) refs.push_back(lift(o.data));
  if (profile_ != nullptr) {
    const auto t0 = Profile::Clock::now();
    emu(c);
    profile_->add(s.op, pass, seconds_since(t0));
  } else {
    emu(c);
  }
  if (!shadow) return;
  const std::vector<std::int64_t> sel = spaced_units(n_units, sampling_.units);
  const OpPrecision& prec = policy_.at(s.op, pass);
  const Ctx<Reference> rc(prec);
  ref(rc, Select(sel), refs, false);
  bool any_dot = false;
  for (const Output& o : outs) any_dot = any_dot || o.dot;
  if (any_dot) {
    for (const Output& o : outs) absr.emplace_back(o.data.size(), Ref(0));
    ref(rc, Select(sel), absr, true);
  }
  std::size_t i = 0;
  for (const Output& o : outs) {
    const numerics::Format& f = o.format != nullptr ? *o.format : prec.storage;
    const std::vector<std::size_t> el = elements_of(o.map, sel);
    OpRecord r;
    r.step = step_;
    r.layer = s.layer;
    r.op = s.op;
    r.pass = pass;
    r.tensor = s.tensor.empty() ? std::string(o.name)
               : outs.size() == 1 ? std::string(s.tensor)
                                  : std::string(s.tensor) + "." + std::string(o.name);
    r.kind = RecordKind::Local;
    r.error = compare(o.data, refs[i], f, el, o.dot ? std::span<const Ref>(absr[i]) : std::span<const Ref>(),
                      numerics::unit_roundoff(prec.accumulate.format));
    r.range = range_events(o.data, f);
    tape_->add(std::move(r));
    ++i;
  }
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

// ---- one wrapper per op: emulated call, and the same call on the Reference backend ---------------------------

using RC = Ctx<Reference>;

void Runner::embedding_forward(Site s, Span out, Tokens tokens, CSpan wte, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"out", out, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::embedding_forward<Emulated>(out, tokens, wte, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::embedding_forward<Reference>(o[0], tokens, L(wte, abs), sh, c, sel);
      });
}

void Runner::embedding_backward_weight(Site s, Span dwte, CSpan dout, Tokens tokens, RowShape sh) {
  const UnitMap cols{K::Columns, sh.cols, static_cast<std::int64_t>(dwte.size()) / sh.cols, {}};
  run(s, Pass::BackwardWeight, sh.cols, {{"dwte", dwte, cols}},
      [&](const Ctx<Emulated>& c) { ops::embedding_backward_weight<Emulated>(dwte, dout, tokens, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::embedding_backward_weight<Reference>(o[0], L(dout, abs), tokens, sh, c, sel);
      });
}

void Runner::rmsnorm_forward(Site s, Span y, Span rstd, CSpan x, CSpan w, RowShape sh, double eps) {
  run(s, Pass::Forward, sh.rows, {{"y", y, rows(sh.cols)}, {"rstd", rstd, rows(1)}},
      [&](const Ctx<Emulated>& c) { ops::rmsnorm_forward<Emulated>(y, rstd, x, w, sh, eps, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::rmsnorm_forward<Reference>(o[0], o[1], L(x, abs), L(w, abs), sh, eps, c, sel);
      });
}

void Runner::rmsnorm_backward_data(Site s, Span dx, CSpan dy, CSpan x, CSpan w, CSpan rstd, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::rmsnorm_backward_data<Emulated>(dx, dy, x, w, rstd, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::rmsnorm_backward_data<Reference>(o[0], L(dy, abs), L(x, abs), L(w, abs), L(rstd, abs), sh, c, sel);
      });
}

void Runner::rmsnorm_backward_weight(Site s, Span dw, CSpan dy, CSpan x, CSpan rstd, RowShape sh) {
  run(s, Pass::BackwardWeight, sh.cols, {{"dw", dw, rows(1), true}},
      [&](const Ctx<Emulated>& c) { ops::rmsnorm_backward_weight<Emulated>(dw, dy, x, rstd, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::rmsnorm_backward_weight<Reference>(o[0], L(dy, abs), L(x, abs), L(rstd, abs), sh, c, sel);
      });
}

void Runner::matmul_forward(Site s, Span y, CSpan x, CSpan w, MatmulShape sh) {
  run(s, Pass::Forward, sh.n, {{"y", y, rows(sh.out), true}},
      [&](const Ctx<Emulated>& c) { ops::matmul_forward<Emulated>(y, x, w, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::matmul_forward<Reference>(o[0], L(x, abs), L(w, abs), sh, c, sel);
      });
}

void Runner::matmul_backward_data(Site s, Span dx, CSpan dy, CSpan w, MatmulShape sh) {
  run(s, Pass::BackwardData, sh.n, {{"dx", dx, rows(sh.in), true}},
      [&](const Ctx<Emulated>& c) { ops::matmul_backward_data<Emulated>(dx, dy, w, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::matmul_backward_data<Reference>(o[0], L(dy, abs), L(w, abs), sh, c, sel);
      });
}

void Runner::matmul_backward_weight(Site s, Span dw, CSpan dy, CSpan x, MatmulShape sh) {
  run(s, Pass::BackwardWeight, sh.out, {{"dw", dw, rows(sh.in), true}},
      [&](const Ctx<Emulated>& c) { ops::matmul_backward_weight<Emulated>(dw, dy, x, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::matmul_backward_weight<Reference>(o[0], L(dy, abs), L(x, abs), sh, c, sel);
      });
}

void Runner::rope_angles(Site s, Span cos_t, Span sin_t, std::int64_t T, std::int64_t hs, double base) {
  run(s, Pass::Forward, T, {{"cos", cos_t, rows(hs / 2)}, {"sin", sin_t, rows(hs / 2)}},
      [&](const Ctx<Emulated>& c) { ops::rope_angles<Emulated>(cos_t, sin_t, T, hs, base, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool) { ops::rope_angles<Reference>(o[0], o[1], T, hs, base, c, sel); });
}

void Runner::rope_forward(Site s, Span y, CSpan x, CSpan cos_t, CSpan sin_t, AttnShape sh) {
  run(s, Pass::Forward, sh.B * sh.T, {{"y", y, rows(sh.C())}},
      [&](const Ctx<Emulated>& c) { ops::rope_forward<Emulated>(y, x, cos_t, sin_t, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        // x may alias y: the reference reads the input from before the emulated call when they alias.
        const CSpan xin = x.data() == y.data() ? CSpan() : x;
        std::vector<Ref> X = xin.empty() ? o[0] : L(x, abs);
        ops::rope_forward<Reference>(o[0], X, L(cos_t, abs), L(sin_t, abs), sh, c, sel);
      });
}

void Runner::rope_backward_data(Site s, Span dx, CSpan dy, CSpan cos_t, CSpan sin_t, AttnShape sh) {
  run(s, Pass::BackwardData, sh.B * sh.T, {{"dx", dx, rows(sh.C())}},
      [&](const Ctx<Emulated>& c) { ops::rope_backward_data<Emulated>(dx, dy, cos_t, sin_t, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::rope_backward_data<Reference>(o[0], L(dy, abs), L(cos_t, abs), L(sin_t, abs), sh, c, sel);
      });
}

void Runner::attn_scores_forward(Site s, Span preatt, CSpan q, CSpan k, AttnShape sh) {
  run(s, Pass::Forward, sh.heads(), {{"preatt", preatt, rows(sh.T * sh.T), true}},
      [&](const Ctx<Emulated>& c) { ops::attn_scores_forward<Emulated>(preatt, q, k, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::attn_scores_forward<Reference>(o[0], L(q, abs), L(k, abs), sh, c, sel);
      });
}

void Runner::attn_scores_backward_data(Site s, Span dq, Span dk, CSpan dpreatt, CSpan q, CSpan k, AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads(), {{"dq", dq, heads(sh), true}, {"dk", dk, heads(sh), true}},
      [&](const Ctx<Emulated>& c) { ops::attn_scores_backward_data<Emulated>(dq, dk, dpreatt, q, k, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::attn_scores_backward_data<Reference>(o[0], o[1], L(dpreatt, abs), L(q, abs), L(k, abs), sh, c, sel);
      });
}

void Runner::softmax_forward(Site s, Span att, CSpan preatt, AttnShape sh) {
  run(s, Pass::Forward, sh.heads() * sh.T, {{"att", att, rows(sh.T)}},
      [&](const Ctx<Emulated>& c) { ops::softmax_forward<Emulated>(att, preatt, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::softmax_forward<Reference>(o[0], L(preatt, abs), sh, c, sel);
      });
}

void Runner::softmax_backward_data(Site s, Span dpreatt, CSpan datt, CSpan att, AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads() * sh.T, {{"dpreatt", dpreatt, rows(sh.T)}},
      [&](const Ctx<Emulated>& c) { ops::softmax_backward_data<Emulated>(dpreatt, datt, att, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::softmax_backward_data<Reference>(o[0], L(datt, abs), L(att, abs), sh, c, sel);
      });
}

void Runner::attn_values_forward(Site s, Span out, CSpan att, CSpan v, AttnShape sh) {
  run(s, Pass::Forward, sh.heads(), {{"out", out, heads(sh), true}},
      [&](const Ctx<Emulated>& c) { ops::attn_values_forward<Emulated>(out, att, v, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::attn_values_forward<Reference>(o[0], L(att, abs), L(v, abs), sh, c, sel);
      });
}

void Runner::attn_values_backward_data(Site s, Span datt, Span dv, CSpan dout, CSpan att, CSpan v, AttnShape sh) {
  run(s, Pass::BackwardData, sh.heads(), {{"datt", datt, rows(sh.T * sh.T), true}, {"dv", dv, heads(sh), true}},
      [&](const Ctx<Emulated>& c) { ops::attn_values_backward_data<Emulated>(datt, dv, dout, att, v, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::attn_values_backward_data<Reference>(o[0], o[1], L(dout, abs), L(att, abs), L(v, abs), sh, c, sel);
      });
}

void Runner::online_attention_forward(Site s, Span y, Span lse, CSpan preatt, CSpan v, AttnShape sh) {
  const Site site{OpKind::AttnValues, s.layer, s.tensor};
  const Ctx<Emulated>& sm = context(OpKind::Softmax, Pass::Forward);
  const OpPrecision& sm_prec = policy_.at(OpKind::Softmax, Pass::Forward);
  run(site, Pass::Forward, sh.heads(), {{"y", y, heads(sh)}, {"lse", lse, rows(sh.T), false, &sm_prec.storage}},
      [&](const Ctx<Emulated>& c) { ops::online_attention_forward<Emulated>(y, lse, preatt, v, sh, sm, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        const RC rsm(sm_prec);
        ops::online_attention_forward<Reference>(o[0], o[1], L(preatt, abs), L(v, abs), sh, rsm, c, sel);
      });
}

void Runner::softmax_from_lse(Site s, Span att, CSpan preatt, CSpan lse, AttnShape sh) {
  const Site site{OpKind::Softmax, s.layer, s.tensor};
  run(site, Pass::BackwardData, sh.heads() * sh.T, {{"att", att, rows(sh.T)}},
      [&](const Ctx<Emulated>& c) { ops::softmax_from_lse<Emulated>(att, preatt, lse, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::softmax_from_lse<Reference>(o[0], L(preatt, abs), L(lse, abs), sh, c, sel);
      });
}

void Runner::silu_forward(Site s, Span y, CSpan x, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"y", y, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::silu_forward<Emulated>(y, x, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) { ops::silu_forward<Reference>(o[0], L(x, abs), sh, c, sel); });
}

void Runner::silu_backward_data(Site s, Span dx, CSpan dy, CSpan x, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::silu_backward_data<Emulated>(dx, dy, x, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::silu_backward_data<Reference>(o[0], L(dy, abs), L(x, abs), sh, c, sel);
      });
}

void Runner::swiglu_forward(Site s, Span h, CSpan a, CSpan u, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"h", h, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::swiglu_forward<Emulated>(h, a, u, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::swiglu_forward<Reference>(o[0], L(a, abs), L(u, abs), sh, c, sel);
      });
}

void Runner::swiglu_backward_data(Site s, Span da, Span du, CSpan dh, CSpan a, CSpan u, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"da", da, rows(sh.cols)}, {"du", du, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::swiglu_backward_data<Emulated>(da, du, dh, a, u, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::swiglu_backward_data<Reference>(o[0], o[1], L(dh, abs), L(a, abs), L(u, abs), sh, c, sel);
      });
}

void Runner::residual_forward(Site s, Span out, CSpan x, CSpan f, double alpha, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"out", out, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::residual_forward<Emulated>(out, x, f, alpha, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        // out may alias x (in-place stream update): read x from the snapshot taken before the call.
        std::vector<Ref> X = x.data() == out.data() ? o[0] : L(x, abs);
        ops::residual_forward<Reference>(o[0], X, L(f, abs), alpha, sh, c, sel);
      });
}

void Runner::residual_backward_data(Site s, Span dx, Span df, CSpan dout, double alpha, RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dx", dx, rows(sh.cols)}, {"df", df, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::residual_backward_data<Emulated>(dx, df, dout, alpha, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::residual_backward_data<Reference>(o[0], o[1], L(dout, abs), alpha, sh, c, sel);
      });
}

double Runner::cross_entropy_forward(Site s, Span losses, Span probs, CSpan logits, Tokens targets, RowShape sh) {
  run(s, Pass::Forward, sh.rows, {{"loss", losses, rows(1)}, {"probs", probs, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) { ops::cross_entropy_forward<Emulated>(losses, probs, logits, targets, sh, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::cross_entropy_forward<Reference>(o[0], o[1], L(logits, abs), targets, sh, c, sel);
      });
  return mean_loss<double>(losses);
}

void Runner::cross_entropy_backward_data(Site s, Span dlogits, CSpan probs, Tokens targets, double grad_scale,
                                         RowShape sh) {
  run(s, Pass::BackwardData, sh.rows, {{"dlogits", dlogits, rows(sh.cols)}},
      [&](const Ctx<Emulated>& c) {
        ops::cross_entropy_backward_data<Emulated>(dlogits, probs, targets, grad_scale, sh, c);
      },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::cross_entropy_backward_data<Reference>(o[0], L(probs, abs), targets, grad_scale, sh, c, sel);
      });
}

void Runner::adamw_update(Site s, Span w, Span m, Span v, CSpan g, Span weights, const AdamWConfig& cfg,
                          std::int64_t t) {
  const AdamWFormats f(policy_);
  const numerics::Format fm = policy_.storage_for(TensorRole::MasterWeight);
  const numerics::Format fa = policy_.storage_for(TensorRole::AdamM);
  const numerics::Format fv = policy_.storage_for(TensorRole::AdamV);
  const auto n = static_cast<std::int64_t>(w.size());
  run(s, Pass::Forward, n,
      {{"w", w, rows(1), false, &fm}, {"m", m, rows(1), false, &fa}, {"v", v, rows(1), false, &fv}},
      [&](const Ctx<Emulated>& c) { ops::adamw_update<Emulated>(w, m, v, g, weights, cfg, t, f, c); },
      [&](const RC& c, Select sel, RefOuts& o, bool abs) {
        ops::adamw_update<Reference>(o[0], o[1], o[2], L(g, abs), {}, cfg, t, f, c, sel);
      });
}

}  // namespace roundoff::ops
