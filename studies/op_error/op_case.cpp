#include "studies/op_error/op_case.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <stdexcept>

#include "numerics/round.hpp"
#include "ops/rope.hpp"
#include "ops/runner.hpp"

namespace roundoff::studies::op_error {

using ops::OpKind;
using ops::Pass;
using Vec = std::vector<double>;

namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }
std::span<const double> S(const Vec& v) { return v; }

/// n draws of mean + N(0, sigma²) in binary64.
Vec normal(std::int64_t n, double sigma, std::mt19937_64& rng, double mean = 0.0) {
  std::normal_distribution<double> d(mean, sigma);
  Vec v(sz(n));
  for (double& x : v) x = d(rng);
  return v;
}

/// v rounded (nearest-even) to the storage format of (op, pass): the values that pass reads.
Vec R(const Vec& v, const ops::Policy& p, OpKind op, Pass pass) {
  const numerics::RoundingPlan plan(p.at(op, pass).storage);
  Vec r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = numerics::round_to(plan, numerics::Rounding::NearestEven, v[i]);
  return r;
}

Vec zeros(std::int64_t n) { return Vec(sz(n), 0.0); }

/// Units so that one shadowed call costs about `budget` Reference multiply-adds at `per_unit` each.
std::int64_t units_for(double budget, double per_unit, std::int64_t n_units) {
  const auto k = static_cast<std::int64_t>(std::max(1.0, std::floor(budget / std::max(1.0, per_unit))));
  return k >= n_units ? 0 : k;
}

void shadow(ops::Runner& run, ops::Tape* tape, std::int64_t units) {
  ops::Sampling s;
  s.every = 1;
  s.units = units;
  run.enable_shadow(tape, s);
}

/// Causal softmax rows of logits (T × T, row-major) in binary64: the attention weights an op downstream reads.
Vec softmax_rows(const Vec& logits, std::int64_t heads, std::int64_t T) {
  Vec att(logits.size(), 0.0);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t t = 0; t < T; ++t) {
      const std::size_t row = sz((h * T + t) * T);
      double m = -INFINITY, z = 0;
      for (std::int64_t j = 0; j <= t; ++j) m = std::max(m, logits[row + sz(j)]);
      for (std::int64_t j = 0; j <= t; ++j) z += std::exp(logits[row + sz(j)] - m);
      for (std::int64_t j = 0; j <= t; ++j) att[row + sz(j)] = std::exp(logits[row + sz(j)] - m) / z;
    }
  return att;
}

}  // namespace

std::string OpShape::text() const {
  std::string s;
  for (const auto& [k, v] : dims) s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s;
}

OpShape default_shape(OpKind op) {
  const std::int64_t T = 256, d = 1024, hidden = 2816, heads = 16, hs = 64, vocab = 16893;
  switch (op) {
    case OpKind::Embedding: return {{{"tokens", T}, {"d", d}, {"vocab", vocab}}};
    case OpKind::RmsNorm: return {{{"tokens", T}, {"d", d}}};
    case OpKind::Matmul: return {{{"tokens", T}, {"in", d}, {"out", d}}};
    case OpKind::RopeAngles: return {{{"T", T}, {"hs", hs}}};
    case OpKind::RopeRotate:
    case OpKind::AttnScores:
    case OpKind::Softmax:
    case OpKind::AttnValues: return {{{"heads", heads}, {"T", T}, {"hs", hs}}};
    case OpKind::Silu:
    case OpKind::SwiGlu:
    case OpKind::Gelu: return {{{"tokens", T}, {"d", hidden}}};
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn: return {{{"tokens", T}, {"d", d}}};
    case OpKind::Classifier: return {{{"tokens", T}, {"in", d}, {"out", vocab}}};
    case OpKind::CrossEntropy: return {{{"tokens", T}, {"vocab", vocab}}};
    case OpKind::AdamW: return {{{"params", d * d}}};
  }
  return {};
}

OpShape block_shape(OpKind op, std::int64_t d) {
  const std::string D = std::to_string(d), H = std::to_string(d * 11 / 4);
  switch (op) {
    case OpKind::RmsNorm:
    case OpKind::ResidualFfn: return parse_shape(op, "tokens=64,d=" + D);
    case OpKind::Matmul: return parse_shape(op, "tokens=64,in=" + D + ",out=" + D);
    case OpKind::Softmax:
    case OpKind::AttnScores:
    case OpKind::AttnValues:
    case OpKind::RopeRotate: return parse_shape(op, "heads=4,T=64,hs=" + std::to_string(d / 4));
    case OpKind::Silu:
    case OpKind::SwiGlu:
    case OpKind::Gelu: return parse_shape(op, "tokens=64,d=" + H);
    case OpKind::Embedding:
    case OpKind::RopeAngles:
    case OpKind::ResidualAttn:
    case OpKind::Classifier:
    case OpKind::CrossEntropy:
    case OpKind::AdamW: return default_shape(op);
  }
  return default_shape(op);
}

OpShape parse_shape(OpKind op, const std::string& spec) {
  OpShape s = default_shape(op);
  std::string keys;
  for (const auto& [k, v] : s.dims) keys += (keys.empty() ? "" : ", ") + k;
  std::size_t pos = 0;
  std::map<std::string, std::string> given;  // a key given twice is refused, not "last one wins"
  while (pos < spec.size()) {
    std::size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string tok = spec.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = tok.find('=');
    const std::string key = tok.substr(0, eq);
    if (eq == std::string::npos || !s.dims.contains(key))
      throw std::invalid_argument("bad shape token '" + tok + "' for op " + std::string(ops::name_of(op)) +
                                  ": expected KEY=N with KEY one of " + keys);
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(tok.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != tok.size() - eq - 1 || v <= 0)
      throw std::invalid_argument("bad shape value in '" + tok + "': expected a positive integer");
    if (const auto it = given.find(key); it != given.end())
      throw std::invalid_argument("shape key '" + key + "' given twice ('" + it->second + "' and '" + tok +
                                  "'); give each of " + keys + " at most once");
    given[key] = tok;
    s.dims[key] = v;
  }
  if (op == OpKind::RopeAngles || op == OpKind::RopeRotate || op == OpKind::AttnScores || op == OpKind::Softmax ||
      op == OpKind::AttnValues)
    if (s.at("hs") % 2 != 0) throw std::invalid_argument("bad shape: hs must be even for " + std::string(ops::name_of(op)));
  return s;
}

OpKind parse_op(const std::string& name) {
  if (auto k = ops::find_op(name)) return *k;
  throw std::invalid_argument("unknown op '" + name + "'; valid ops: " + std::string(ops::op_names_list()));
}

ScaleKind scale_kind_of(OpKind op) {
  switch (op) {
    case OpKind::AttnScores:
    case OpKind::Softmax:
    case OpKind::AttnValues: return ScaleKind::Logit;
    case OpKind::Embedding:
    case OpKind::RmsNorm:
    case OpKind::Matmul:
    case OpKind::RopeAngles:
    case OpKind::RopeRotate:
    case OpKind::Silu:
    case OpKind::SwiGlu:
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn:
    case OpKind::Classifier:
    case OpKind::CrossEntropy:
    case OpKind::AdamW:
    case OpKind::Gelu: return ScaleKind::Activation;
  }
  return ScaleKind::Activation;
}

std::string_view name_of(ScaleKind k) {
  switch (k) {
    case ScaleKind::Activation: return "activation-sigma";
    case ScaleKind::Logit: return "logit-std";
  }
  return "";
}

std::string precision_key(const ops::Policy& policy, OpKind op) {
  std::string key(ops::name_of(op));
  for (Pass p : ops::kAllPasses) key += "|" + ops::to_string(policy.at(op, p));
  if (op == OpKind::AdamW)
    for (ops::TensorRole r : ops::kAllRoles) key += "|" + numerics::name_of(policy.storage_for(r));
  return key;
}

namespace {

void run_matmul(ops::Runner& run, ops::Tape* tape, const ops::Policy& p, const CaseConfig& c, std::mt19937_64& rng) {
  const OpKind op = c.op;
  const std::int64_t T = c.shape.at("tokens"), in = c.shape.at("in"), out = c.shape.at("out");
  const std::int64_t rows = std::min(T, c.rows);
  const ops::Site site{op, 0, c.tensor};
  const double ws = 1.0 / std::sqrt(static_cast<double>(in));
  {  // forward: y (rows, out') = x W'^T
    const std::int64_t o = std::min<std::int64_t>(out, 256);
    const Vec x = R(normal(rows * in, c.scale, rng), p, op, Pass::Forward);
    const Vec w = R(normal(o * in, ws, rng), p, op, Pass::Forward);
    Vec y = zeros(rows * o);
    shadow(run, tape, units_for(c.ref_budget, static_cast<double>(o * in), rows));
    run.matmul_forward(site, y, S(x), S(w), {rows, in, o});
  }
  {  // backward-data: dx (rows, in') = dy (rows, out) W (out, in')
    const std::int64_t i2 = std::min(in, std::max<std::int64_t>(8, (std::int64_t{1} << 18) / out));
    const Vec dy = R(normal(rows * out, 1.0, rng), p, op, Pass::BackwardData);
    const Vec w = R(normal(out * i2, ws, rng), p, op, Pass::BackwardData);
    Vec dx = zeros(rows * i2);
    shadow(run, tape, units_for(c.ref_budget, static_cast<double>(i2 * out), rows));
    run.matmul_backward_data(site, dx, S(dy), S(w), {rows, i2, out});
  }
  {  // backward-weight: dW (out', in) = dy^T (T, out') x (T, in)
    const std::int64_t o = std::min(out, c.rows);
    const Vec dy = R(normal(T * o, 1.0, rng), p, op, Pass::BackwardWeight);
    const Vec x = R(normal(T * in, c.scale, rng), p, op, Pass::BackwardWeight);
    Vec dw = zeros(o * in);
    shadow(run, tape, units_for(c.ref_budget, static_cast<double>(in * T), o));
    run.matmul_backward_weight(site, dw, S(dy), S(x), {T, in, o});
  }
}

void run_attention(ops::Runner& run, ops::Tape* tape, const ops::Policy& p, const CaseConfig& c,
                   std::mt19937_64& rng) {
  const OpKind op = c.op;
  const std::int64_t T = c.shape.at("T"), hs = c.shape.at("hs");
  const std::int64_t NH = std::max<std::int64_t>(1, std::min(c.shape.at("heads"), c.rows / 16));
  const ops::AttnShape as{1, NH, T, hs};
  const ops::Site site{op, 0, c.tensor};
  const double causal_macs = static_cast<double>(T * (T + 1) / 2 * hs);
  switch (op) {
    case OpKind::AttnScores: {
      const double qs = std::sqrt(c.scale);
      const Vec q = R(normal(as.qkv_size(), qs, rng), p, op, Pass::Forward);
      const Vec k = R(normal(as.qkv_size(), qs, rng), p, op, Pass::Forward);
      Vec pre = zeros(as.att_size());
      shadow(run, tape, units_for(c.ref_budget, causal_macs, NH));
      run.attn_scores_forward(site, pre, S(q), S(k), as);
      const Vec dpre = R(normal(as.att_size(), 1.0, rng), p, op, Pass::BackwardData);
      Vec dq = zeros(as.qkv_size()), dk = zeros(as.qkv_size());
      shadow(run, tape, units_for(c.ref_budget, 2 * causal_macs, NH));
      run.attn_scores_backward_data(site, dq, dk, S(dpre), S(R(q, p, op, Pass::BackwardData)),
                                    S(R(k, p, op, Pass::BackwardData)), as);
      return;
    }
    case OpKind::Softmax: {
      const Vec pre = R(normal(as.att_size(), c.scale, rng), p, op, Pass::Forward);
      Vec att = zeros(as.att_size());
      shadow(run, tape, units_for(c.ref_budget, static_cast<double>(T) * 32.0, NH * T));
      run.softmax_forward(site, att, S(pre), as);
      const Vec datt = R(normal(as.att_size(), 1.0, rng), p, op, Pass::BackwardData);
      Vec dpre = zeros(as.att_size());
      shadow(run, tape, units_for(c.ref_budget, static_cast<double>(T) * 4.0, NH * T));
      run.softmax_backward_data(site, dpre, S(datt), S(R(att, p, op, Pass::BackwardData)), as);
      return;
    }
    case OpKind::AttnValues: {
      const Vec att0 = softmax_rows(normal(as.att_size(), c.scale, rng), NH, T);
      const Vec att = R(att0, p, op, Pass::Forward);
      const Vec v = R(normal(as.qkv_size(), 1.0, rng), p, op, Pass::Forward);
      Vec o = zeros(as.qkv_size());
      shadow(run, tape, units_for(c.ref_budget, causal_macs, NH));
      run.attn_values_forward(site, o, S(att), S(v), as);
      const Vec dout = R(normal(as.qkv_size(), 1.0, rng), p, op, Pass::BackwardData);
      Vec datt = zeros(as.att_size()), dv = zeros(as.qkv_size());
      shadow(run, tape, units_for(c.ref_budget, 2 * causal_macs, NH));
      run.attn_values_backward_data(site, datt, dv, S(dout), S(R(att0, p, op, Pass::BackwardData)),
                                    S(R(v, p, op, Pass::BackwardData)), as);
      return;
    }
    case OpKind::RopeRotate: {
      // Every head of `rows` token rows; the table is the exact one rounded to the rotation's storage.
      const ops::AttnShape full{1, c.shape.at("heads"), T, hs};
      const std::int64_t H = hs / 2;
      Vec ct = zeros(T * H), st = zeros(T * H);
      const ops::Ctx<ops::Emulated> wide(ops::uniform(numerics::formats::fp64));
      ops::rope_angles<ops::Emulated>(ct, st, T, hs, 10000.0, wide);
      const Vec x = R(normal(full.qkv_size(), c.scale, rng), p, op, Pass::Forward);
      Vec y = zeros(full.qkv_size());
      const std::int64_t units = std::min(T, c.rows);
      shadow(run, tape, units);
      run.rope_forward(site, y, S(x), S(R(ct, p, op, Pass::Forward)), S(R(st, p, op, Pass::Forward)), full);
      const Vec dy = R(normal(full.qkv_size(), 1.0, rng), p, op, Pass::BackwardData);
      Vec dx = zeros(full.qkv_size());
      shadow(run, tape, units);
      run.rope_backward_data(site, dx, S(dy), S(R(ct, p, op, Pass::BackwardData)),
                             S(R(st, p, op, Pass::BackwardData)), full);
      return;
    }
    case OpKind::Embedding:
    case OpKind::RmsNorm:
    case OpKind::Matmul:
    case OpKind::RopeAngles:
    case OpKind::Silu:
    case OpKind::SwiGlu:
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn:
    case OpKind::Classifier:
    case OpKind::CrossEntropy:
    case OpKind::AdamW:
    case OpKind::Gelu: throw std::logic_error("run_attention: not an attention op");
  }
}

}  // namespace

std::vector<ops::OpRecord> run_case(const ops::Policy& p, const CaseConfig& cfg) {
  CaseConfig c = cfg;
  if (c.tensor.empty()) c.tensor = std::string(ops::name_of(c.op));
  if (c.shape.dims.empty()) c.shape = default_shape(c.op);
  ops::Runner run(p, c.seed);
  ops::Tape tape_records;
  ops::Tape* tape = c.shadow ? &tape_records : nullptr;
  std::mt19937_64 rng(c.seed);
  const OpKind op = c.op;
  const ops::Site site{op, 0, c.tensor};
  switch (op) {
    case OpKind::Embedding: {
      const std::int64_t T = c.shape.at("tokens"), d = c.shape.at("d");
      const std::int64_t V = std::min(c.shape.at("vocab"), T);
      std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(V - 1));
      std::vector<std::int32_t> tokens(sz(T));
      for (auto& t : tokens) t = tok(rng);
      const Vec wte = R(normal(V * d, c.scale, rng), p, op, Pass::Forward);
      Vec out = zeros(T * d);
      shadow(run, tape, std::min(T, c.rows));
      run.embedding_forward(site, out, tokens, S(wte), {T, d});
      const Vec dout = R(normal(T * d, 1.0, rng), p, op, Pass::BackwardWeight);
      Vec dwte = zeros(V * d);
      shadow(run, tape, std::min(d, c.rows));
      run.embedding_backward_weight(site, dwte, S(dout), tokens, {T, d});
      break;
    }
    case OpKind::RmsNorm: {
      const std::int64_t T = c.shape.at("tokens"), d = c.shape.at("d");
      const ops::RowShape rs{T, d};
      const Vec x = R(normal(T * d, c.scale, rng), p, op, Pass::Forward);
      const Vec g = normal(d, 0.1, rng, 1.0);
      Vec y = zeros(T * d), rstd = zeros(T);
      shadow(run, tape, std::min(T, c.rows));
      run.rmsnorm_forward(site, y, rstd, S(x), S(R(g, p, op, Pass::Forward)), rs, 1e-5);
      const Vec dy = normal(T * d, 1.0, rng);
      Vec dx = zeros(T * d), dg = zeros(d);
      const Pass bd = Pass::BackwardData, bw = Pass::BackwardWeight;
      shadow(run, tape, std::min(T, c.rows));
      run.rmsnorm_backward_data(site, dx, S(R(dy, p, op, bd)), S(R(x, p, op, bd)), S(R(g, p, op, bd)),
                                S(R(rstd, p, op, bd)), rs);
      shadow(run, tape, std::min(d, c.rows));
      run.rmsnorm_backward_weight(site, dg, S(R(dy, p, op, bw)), S(R(x, p, op, bw)), S(R(rstd, p, op, bw)), rs);
      break;
    }
    case OpKind::Matmul:
    case OpKind::Classifier: run_matmul(run, tape, p, c, rng); break;
    case OpKind::RopeAngles: {
      const std::int64_t T = c.shape.at("T"), hs = c.shape.at("hs");
      Vec ct = zeros(T * hs / 2), st = zeros(T * hs / 2);
      shadow(run, tape, 0);
      run.rope_angles(site, ct, st, T, hs, 10000.0);
      break;
    }
    case OpKind::RopeRotate:
    case OpKind::AttnScores:
    case OpKind::Softmax:
    case OpKind::AttnValues: run_attention(run, tape, p, c, rng); break;
    case OpKind::Silu:
    case OpKind::SwiGlu: {
      const std::int64_t rows = std::min(c.shape.at("tokens"), c.rows), d = c.shape.at("d");
      const ops::RowShape rs{rows, d};
      const Vec a = normal(rows * d, c.scale, rng), u = normal(rows * d, c.scale, rng);
      const Vec dy = normal(rows * d, 1.0, rng);
      const Pass f = Pass::Forward, bd = Pass::BackwardData;
      Vec y = zeros(rows * d), da = zeros(rows * d), du = zeros(rows * d);
      shadow(run, tape, 0);
      if (op == OpKind::Silu) {
        run.silu_forward(site, y, S(R(a, p, op, f)), rs);
        run.silu_backward_data(site, da, S(R(dy, p, op, bd)), S(R(a, p, op, bd)), rs);
      } else {
        run.swiglu_forward(site, y, S(R(a, p, op, f)), S(R(u, p, op, f)), rs);
        run.swiglu_backward_data(site, da, du, S(R(dy, p, op, bd)), S(R(a, p, op, bd)), S(R(u, p, op, bd)), rs);
      }
      break;
    }
    case OpKind::Gelu: {
      // Both forms on the same draws: the erf form under the case's tensor name, the tanh form under
      // "<tensor>-tanh" (the op-error study's rows tell them apart by tensor).
      const std::int64_t rows = std::min(c.shape.at("tokens"), c.rows), d = c.shape.at("d");
      const ops::RowShape rs{rows, d};
      const Vec x = normal(rows * d, c.scale, rng), dy = normal(rows * d, 1.0, rng);
      const Pass f = Pass::Forward, bd = Pass::BackwardData;
      const std::string tanh_tensor = c.tensor + "-tanh";
      for (const ops::GeluForm form : {ops::GeluForm::Erf, ops::GeluForm::Tanh}) {
        const ops::Site s{op, 0, form == ops::GeluForm::Erf ? std::string_view(c.tensor) : tanh_tensor};
        Vec y = zeros(rows * d), dx = zeros(rows * d);
        shadow(run, tape, 0);
        run.gelu_forward(s, y, S(R(x, p, op, f)), rs, form);
        run.gelu_backward_data(s, dx, S(R(dy, p, op, bd)), S(R(x, p, op, bd)), rs, form);
      }
      break;
    }
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn: {
      const std::int64_t rows = std::min(c.shape.at("tokens"), c.rows), d = c.shape.at("d");
      const ops::RowShape rs{rows, d};
      const double alpha = 0.35355339059327373;  // AutoANE's 1/sqrt(2*4)
      const Vec x = R(normal(rows * d, c.scale, rng), p, op, Pass::Forward);
      const Vec f = R(normal(rows * d, c.scale, rng), p, op, Pass::Forward);
      Vec out = zeros(rows * d), dx = zeros(rows * d), df = zeros(rows * d);
      shadow(run, tape, 0);
      run.residual_forward(site, out, S(x), S(f), alpha, rs);
      run.residual_backward_data(site, dx, df, S(R(normal(rows * d, 1.0, rng), p, op, Pass::BackwardData)), alpha,
                                 rs);
      break;
    }
    case OpKind::CrossEntropy: {
      const std::int64_t rows = std::min(c.shape.at("tokens"), std::max<std::int64_t>(1, c.rows / 4));
      const std::int64_t V = c.shape.at("vocab");
      const ops::RowShape rs{rows, V};
      std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(V - 1));
      std::vector<std::int32_t> targets(sz(rows));
      for (auto& t : targets) t = tok(rng);
      const Vec logits = R(normal(rows * V, c.scale, rng), p, op, Pass::Forward);
      Vec loss = zeros(rows), probs = zeros(rows * V), dl = zeros(rows * V);
      const std::int64_t units = units_for(c.ref_budget / 16.0, static_cast<double>(V), rows);
      shadow(run, tape, units);
      run.cross_entropy_forward(site, loss, probs, S(logits), targets, rs);
      shadow(run, tape, units);
      run.cross_entropy_backward_data(site, dl, S(R(probs, p, op, Pass::BackwardData)), targets,
                                      1.0 / static_cast<double>(rows), rs);
      break;
    }
    case OpKind::AdamW: {
      const std::int64_t n = std::min(c.shape.at("params"), c.rows * 256);
      auto role = [&](const Vec& v, ops::TensorRole r) {
        const numerics::RoundingPlan plan(p.storage_for(r));
        Vec o(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) o[i] = numerics::round_to(plan, numerics::Rounding::NearestEven, v[i]);
        return o;
      };
      Vec w = role(normal(n, 0.02, rng), ops::TensorRole::MasterWeight);
      Vec m = role(normal(n, 1e-3 * c.scale, rng), ops::TensorRole::AdamM);
      Vec v0 = normal(n, 1e-3 * c.scale, rng);
      for (double& x : v0) x = x * x;
      Vec v = role(v0, ops::TensorRole::AdamV);
      const Vec g = R(normal(n, 1e-3 * c.scale, rng), p, op, Pass::Forward);
      Vec wk = zeros(n);
      shadow(run, tape, 0);
      run.adamw_update(site, w, m, v, S(g), wk, ops::AdamWConfig{}, 10);
      break;
    }
  }
  return tape_records.records();
}

}  // namespace roundoff::studies::op_error
