// The transformer forward and backward passes over ops::Runner.
#include "studies/train/model.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include "numerics/round.hpp"
#include "numerics/binary32_values.hpp"
#include "numerics/round_span.hpp"
#include "numerics/gemm_kernels.hpp"
#include "ops/gqa.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/rmsnorm_defect.hpp"

namespace roundoff::studies::train {

using ops::OpKind;
using ops::Pass;

namespace {

/// The telemetry rows of a step's fp8 cast counts (ops::Runner::fp8_counts, keyed "L<layer>.<op>.<module>.<role>"):
/// per tensor `fp8_saturated_share` and `fp8_underflow_share` (of the elements cast, over every cast of the tensor
/// in the step: x and W are cast in two passes each, dy in two, with the same scale under delayed scaling), under
/// op <op>, tensor "<module>.<role>" and the pass that casts the tensor first (x, w: fwd; dy: bwd-data).
void log_fp8_cast_shares(RunLog& log, std::int64_t step, const std::map<std::string, ops::Fp8CastCounts>& counts) {
  for (const auto& [key, c] : counts) {
    if (c.elements == 0) continue;
    const std::size_t a = key.find('.'), b = key.find('.', a + 1), r = key.rfind('.');
    const int layer = std::stoi(key.substr(1, a - 1));
    const std::string op = key.substr(a + 1, b - a - 1), tensor = key.substr(b + 1), role = key.substr(r + 1);
    const std::string_view pass = name_of(role == "dy" ? ops::Pass::BackwardData : ops::Pass::Forward);
    const auto n = static_cast<double>(c.elements);
    log.telemetry(step, layer, op, pass, tensor, "fp8_saturated_share", static_cast<double>(c.saturated) / n);
    log.telemetry(step, layer, op, pass, tensor, "fp8_underflow_share", static_cast<double>(c.underflowed) / n);
  }
}

/// The GELU form of a GELU feed-forward (--ffn gelu | gelu-tanh); none for SwiGLU.
std::optional<ops::GeluForm> gelu_form(Ffn f) {
  switch (f) {
    case Ffn::SwiGlu: return std::nullopt;
    case Ffn::Gelu: return ops::GeluForm::Erf;
    case Ffn::GeluTanh: return ops::GeluForm::Tanh;
  }
  return std::nullopt;
}

using Span = std::span<double>;
using CSpan = std::span<const double>;

std::vector<double> wide(ops::CValues v) { return v.widened(); }

/// y ← v (the same size); exact: v holds values of y's width (binary32 values when y is binary32).
void store(ops::Values y, std::span<const double> v) {
  y.visit([&](auto d) {
    using T = typename decltype(d)::value_type;
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = static_cast<T>(v[i]);
  });
}

/// full (rows, NH·hs) ← kv (rows, NKV·hs) tiled to the query heads by head_map (exact copies, one width).
void tile(ops::Buffer& full, const ops::Buffer& kv, std::span<const int> head_map, std::int64_t kv_heads,
          std::int64_t hs) {
  ops::Values(full).visit([&](auto f) {
    using T = typename decltype(f)::value_type;
    ops::kv_tile<T>(f, ops::CValues(kv).as<T>(), head_map, kv_heads, hs);
  });
}

/// y ← x, two tensors of one width (a Buffer's copy: the residual stream into a block's saved input, h = x).
void copy_into(ops::Values y, ops::CValues x) {
  y.visit([&](auto d) {
    const auto src = x.as<typename decltype(d)::value_type>();
    std::copy(src.begin(), src.end(), d.begin());
  });
}

template <class T>
double rms(std::span<const T> x) {
  double s = 0;
  for (const double v : x) s += v * v;
  return x.empty() ? 0.0 : std::sqrt(s / static_cast<double>(x.size()));
}

/// True when every element of x is finite (numerics::all_finite; ranges split over the threads when x spans
/// several, a logical and needs no order).
template <class T>
bool all_finite(std::span<const T> x) {
  constexpr std::size_t kChunk = std::size_t{1} << 15;
  if (x.size() <= 2 * kChunk) return numerics::all_finite(x);
  bool ok = true;
  const auto ranges = static_cast<std::int64_t>((x.size() + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (std::int64_t r = 0; r < ranges; ++r) {
    const std::size_t b = static_cast<std::size_t>(r) * kChunk, e = std::min(x.size(), b + kChunk);
    ok = ok && numerics::all_finite(x.subspan(b, e - b));
  }
  return ok;
}

template <class T>
double max_abs(std::span<const T> x) {
  double m = 0;
  for (const double v : x) m = std::max(m, std::fabs(v));
  return m;
}
double max_abs(ops::CValues x) {
  return x.visit([](auto d) { return max_abs<typename decltype(d)::value_type>(d); });
}
double rms(ops::CValues x) {
  return x.visit([](auto d) { return rms<typename decltype(d)::value_type>(d); });
}

/// Profile phases of the output scans (Transformer::set_profile).
constexpr const char* kOutputChecks = "model: output checks";
constexpr const char* kRangeTelemetry = "model: range telemetry";
/// Profile phases of the model's work outside the Runner's ops (Transformer::set_profile).
constexpr const char* kKvReduce = "model: gqa kv reduce";
constexpr const char* kGradRounding = "model: gradient rounding";
constexpr const char* kGradRoundingAccumulate = "model: gradient rounding + accumulate";
constexpr const char* kGradZeroing = "model: gradient zeroing";
constexpr const char* kBufferGrowth = "model: buffer growth";

/// Binary32 gradients are finished in pieces of this many values (binary64 copies on the stack).
constexpr std::size_t kGradPiece = kAccumulatePiece;

/// One piece of a micro-step's gradients, `part` (binary64 values), finished into the binary32 total `total`
/// (part.size() ≤ kGradPiece elements): rounded to the gradient role `plan` (when `round`), scanned, then
/// summed by accumulate_and_clear (first: total = part) and stored back narrowed (exact: fp32 sums); part is left
/// +0. Returns false when the rounded part holds a non-finite value. finish_gradients and finish_slice both finish
/// through it, so an accumulated update has the same bits with or without a micro-step store.
/// Its callers first try accumulate_and_clear_binary32 on the binary32 piece (the same bits where it applies).
bool finish_piece(const numerics::RoundingPlan& plan, bool round, std::span<double> part, std::span<float> total,
                  bool first) {
  bool ok = true;
  if (round) {
    numerics::round_array(plan, numerics::Rounding::NearestEven, part, part);
    ok = numerics::all_finite(part);
  }
  std::array<double, kGradPiece> tp;
  const std::span<double> t(tp.data(), part.size());
  for (std::size_t i = 0; i < part.size(); ++i) t[i] = static_cast<double>(total[i]);
  accumulate_and_clear(t, part, first);
  for (std::size_t i = 0; i < part.size(); ++i) total[i] = static_cast<float>(t[i]);  // fp32 sums: exact
  return ok;
}

/// Installs an observer on the Runner for one pass; the previous one comes back when the pass ends.
class ObserverScope {
 public:
  ObserverScope(ops::Runner& runner, ops::Observer observer)
      : runner_(runner), previous_(runner.set_observer(std::move(observer))) {}
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;
  ~ObserverScope() { runner_.set_observer(std::move(previous_)); }

 private:
  ops::Runner& runner_;
  ops::Observer previous_;
};

std::string site_name(OpKind op, Pass pass, int layer, std::string_view tensor) {
  std::string s =
      std::string(ops::name_of(op)) + "." + std::string(ops::name_of(pass)) + "(" + std::string(tensor) + ")";
  if (layer >= 0) s += "[layer " + std::to_string(layer) + "]";
  return s;
}

}  // namespace

Transformer::Transformer(const ModelConfig& c, ResidualScale residual, const ops::Policy& policy, std::uint64_t seed,
                         const ops::ExecOptions& exec)
    : c_(c), rule_(residual_rule(residual, c.layers)), lay_(param_layout(c)), runner_(policy, seed, exec) {
  c_.validate();
  act32_ = true;
  for (const OpKind op : ops::kAllOps)
    for (const Pass pass : ops::kAllPasses) act32_ = act32_ && numerics::fits_binary32(policy.at(op, pass).storage);
  weights32_ = act32_ && numerics::fits_binary32(policy.storage_for(ops::TensorRole::Weight));
  for (const OpKind op : {OpKind::Matmul, OpKind::Classifier})
    for (const Pass pass : {Pass::Forward, Pass::BackwardData})
      weights32_ = weights32_ && !policy.at(op, pass).quant.active();
  runner_.set_layer_count(c_.layers);  // the policy's block-keep=F:L counts the last blocks from here
  const GqaMap fwd = c_.defects.gqa_mismatch ? GqaMap::Cyclic : c_.gqa_map;
  const GqaMap bwd = c_.defects.gqa_mismatch ? GqaMap::Block : c_.gqa_map;
  for (int h = 0; h < c_.heads; ++h) {
    fwd_map_.push_back(kv_head_of(fwd, h, c_.heads, c_.kv_count()));
    bwd_map_.push_back(kv_head_of(bwd, h, c_.heads, c_.kv_count()));
  }
}

void Transformer::norm_backward_data(ops::Site s, ops::Values dx, ops::CValues dy, ops::CValues x, ops::CValues w,
                                     ops::CValues rstd, ops::RowShape sh) {
  // Unobserved either way: the defect bypasses the Runner, so the callers check dx themselves.
  if (c_.defects.rmsnorm_bwd) {
    // The defect's body is binary64: binary32 tensors through widened copies, dx (added into) narrowed back exactly
    // (values of the entry's storage, which fits binary32 when the activations are binary32).
    std::vector<double> dx64 = ops::CValues(dx).widened();
    rmsnorm_backward_data_defect(dx64, wide(dy), wide(x), wide(w), wide(rstd), sh,
                                 runner_.context(OpKind::RmsNorm, Pass::BackwardData));
    store(dx, dx64);
  } else {
    runner_.rmsnorm_backward_data({s.op, s.layer, s.tensor, ops::Observe::Off}, dx, dy, x, w, rstd, sh);
  }
}

Transformer::Dims Transformer::dims_of(const Batch& bt) const {
  const std::int64_t B = bt.batch, T = bt.seq, hs = c_.head_size(), NKV = c_.kv_count();
  return {B, T, c_.d, c_.hidden, B * T, c_.vocab, c_.heads, hs, NKV, NKV * hs};
}

void Transformer::allocate_forward(const Dims& d) {
  if (d.B == fwd_B_ && d.T == fwd_T_) return;
  fwd_B_ = d.B;
  fwd_T_ = d.T;
  ops::timed_phase(profile_, kBufferGrowth, [&] {
    const auto NC = static_cast<std::size_t>(d.N * d.C), NH = static_cast<std::size_t>(d.N * d.H),
               NKVD = static_cast<std::size_t>(d.N * d.KVD), N = static_cast<std::size_t>(d.N),
               att = static_cast<std::size_t>(d.attn().att_size());
    const bool pre = !rule_.post_norm, post = rule_.post_norm, swiglu = !gelu_form(c_.ffn).has_value();
    const bool online = runner_.policy().attention_order() == ops::AttentionOrder::Online;
    // Unused tensors of the variant stay empty (their sizes 0).
    auto size = [this](ops::Buffer& v, std::size_t n, bool used = true) { v.resize(used ? n : v.size(), act32_); };
    acts_.resize(static_cast<std::size_t>(c_.layers));
    for (LayerActs& L : acts_) {
      size(L.x_in, NC), size(L.h1, NC), size(L.r1, N, pre);
      size(L.q, NC), size(L.k, NKVD), size(L.v, NKVD), size(L.qr, NC), size(L.kr, NKVD);
      size(L.kt, NC, d.gqa()), size(L.vt, NC, d.gqa());
      size(L.preatt, att), size(L.att, att), size(L.lse, static_cast<std::size_t>(d.B * d.NH * d.T), online);
      size(L.y, NC), size(L.o, NC), size(L.pre1, NC), size(L.rp1, N, post), size(L.x_mid, NC);
      size(L.h2, NC), size(L.r2, N, pre), size(L.g, NH), size(L.u, NH, swiglu), size(L.a, NH, swiglu);
      size(L.z, NH), size(L.f, NC), size(L.pre2, NC), size(L.rp2, N, post);
    }
    size(x_, NC), size(x_final_, NC), size(xf_, NC), size(rf_, N);
    size(logits_, static_cast<std::size_t>(d.N * d.V)), size(probs_, static_cast<std::size_t>(d.N * d.V));
    losses_.resize(N);
  });
}

void Transformer::allocate_backward(const Dims& d) {
  if (d.B == bwd_B_ && d.T == bwd_T_) return;
  bwd_B_ = d.B;
  bwd_T_ = d.T;
  ops::timed_phase(profile_, kBufferGrowth, [&] {
    const auto NC = static_cast<std::size_t>(d.N * d.C), NH = static_cast<std::size_t>(d.N * d.H),
               NKVD = static_cast<std::size_t>(d.N * d.KVD), att = static_cast<std::size_t>(d.attn().att_size());
    const bool post = rule_.post_norm, swiglu = !gelu_form(c_.ffn).has_value();
    const bool remap = d.gqa() && bwd_map_ != fwd_map_;
    BackwardBuffers& b = bw_;
    auto size = [this](ops::Buffer& v, std::size_t n, bool used = true) { v.resize(used ? n : v.size(), act32_); };
    size(b.dlogits, static_cast<std::size_t>(d.N * d.V));
    for (auto* v : {&b.dxf, &b.dx, &b.dxi, &b.dxm, &b.df, &b.dh2, &b.dout, &b.dy, &b.dvt, &b.dqr, &b.dkrt, &b.dq,
                    &b.dh1})
      size(*v, NC);
    for (auto* v : {&b.scratch, &b.dpre2, &b.dpre1}) size(*v, NC, post);
    size(b.dz, NH), size(b.dg, NH), size(b.da, NH, swiglu), size(b.du, NH, swiglu);
    size(b.datt, att), size(b.dpreatt, att), size(b.dk, NKVD);
    size(b.dkr_kv, NKVD, d.gqa()), size(b.dv_kv, NKVD, d.gqa());
    size(b.kt_b, NC, remap), size(b.vt_b, NC, remap), size(b.pre_b, att, remap), size(b.att_b, att, remap);
  });
}

ops::Values Transformer::zeros(ops::Buffer& v) {
  v.zero();
  return v;
}

void Transformer::inject(std::int64_t step, OpKind op, int layer, std::string tensor, double factor) {
  inject_step_ = step;
  inject_tensor_ = std::move(tensor);
  inject_op_ = op;
  inject_layer_ = layer;
  inject_factor_ = factor;
}

void Transformer::observe(StepTelemetry* tel, const ops::Observation& o) {
  if (o.pass == Pass::Forward && current_step_ == inject_step_ && o.op == inject_op_ && o.layer == inject_layer_ &&
      o.tensor == inject_tensor_)
    o.data.visit([&](auto d) {
      for (auto& v : d) v = static_cast<std::remove_reference_t<decltype(v)>>(v * inject_factor_);
    });
  check(tel, o.op, o.pass, o.layer, o.tensor, o.data);
  op_statistics(tel, o);
}

void Transformer::op_statistics(StepTelemetry* tel, const ops::Observation& o) {
  if (tel == nullptr || !tel->detailed || tel->log == nullptr || o.pass != Pass::Forward) return;
  const auto log = [&](std::string_view op, std::string_view name, double value) {
    ops::timed_phase(profile_, kRangeTelemetry,
                     [&] { tel->log->telemetry(tel->step, o.layer, op, "fwd", o.tensor, name, value); });
  };
  if (o.op == OpKind::AttnScores) {
    log("attn-scores", "max_logit", max_abs(o.data));
  } else if (o.op == OpKind::ResidualAttn) {
    const LayerActs& L = acts_[static_cast<std::size_t>(o.layer)];  // pre1 = x_in + β·o
    log("residual-attn", "swamping_ratio", rms(L.x_in) / (std::fabs(rule_.branch) * rms(L.o)));
  } else if (o.op == OpKind::ResidualFfn) {
    const LayerActs& L = acts_[static_cast<std::size_t>(o.layer)];  // pre2 = x_mid + β·f
    log("residual-ffn", "swamping_ratio", rms(L.x_mid) / (std::fabs(rule_.branch) * rms(L.f)));
  } else if (o.op == OpKind::Classifier) {
    log("classifier", "max_abs", max_abs(o.data));
  }
}

void Transformer::stream_statistics(StepTelemetry* tel, int layer, ops::CValues x) {
  if (tel == nullptr || !tel->detailed || tel->log == nullptr) return;
  ops::timed_phase(profile_, kRangeTelemetry, [&] {
    tel->log->telemetry(tel->step, layer, "stream", "fwd", "x", "max_abs", max_abs(x));
    tel->log->telemetry(tel->step, layer, "stream", "fwd", "x", "rms", rms(x));
  });
}

void Transformer::check(StepTelemetry* tel, OpKind op, Pass pass, int layer, std::string_view tensor,
                        ops::CValues y) {
  if (tel == nullptr) return;
  if (tel->check_outputs && tel->first_nonfinite_op.empty())
    ops::timed_phase(profile_, kOutputChecks, [&] {
      if (!y.visit([](auto d) { return all_finite(d); })) tel->first_nonfinite_op = site_name(op, pass, layer, tensor);
    });
  if (!tel->detailed || tel->log == nullptr) return;
  ops::timed_phase(profile_, kRangeTelemetry, [&] {
    const numerics::Format& storage = runner_.policy().at(op, pass).storage;
    const ops::RangeEvents ev = y.visit([&](auto d) { return ops::range_events(d, storage); });
    const auto on = ops::name_of(op), pn = ops::name_of(pass);
    tel->log->telemetry(tel->step, layer, on, pn, tensor, "inf", static_cast<double>(ev.inf));
    tel->log->telemetry(tel->step, layer, on, pn, tensor, "nan", static_cast<double>(ev.nan));
    tel->log->telemetry(tel->step, layer, on, pn, tensor, "subnormal", static_cast<double>(ev.subnormal));
    tel->log->telemetry(tel->step, layer, on, pn, tensor, "zero_fraction",
                        static_cast<double>(ev.zero) / static_cast<double>(std::max<std::int64_t>(ev.elements, 1)));
    tel->log->telemetry(tel->step, layer, on, pn, tensor, "max_abs", ev.max_abs);
  });
}

void Transformer::check_norm(StepTelemetry* tel, int layer, std::string_view tensor, ops::CValues x,
                             ops::CValues rstd, std::int64_t cols) {
  if (tel == nullptr) return;
  std::int64_t collapsed = 0;
  ops::timed_phase(profile_, kOutputChecks, [&] {
    const auto C = static_cast<std::size_t>(cols);
    for (std::size_t r = 0; r < rstd.size(); ++r) {
      if (rstd[r] != 0.0) continue;
      bool nonzero = false;
      for (std::size_t i = r * C; i < (r + 1) * C && !nonzero; ++i) nonzero = x[i] != 0.0;
      if (nonzero) ++collapsed;
    }
  });
  if (collapsed > 0 && tel->first_collapsed_norm.empty())
    tel->first_collapsed_norm = site_name(OpKind::RmsNorm, Pass::Forward, layer, tensor);
  if (tel->detailed && tel->log != nullptr)
    tel->log->telemetry(tel->step, layer, "rmsnorm", "fwd", tensor, "collapsed_rows", static_cast<double>(collapsed));
}

void Transformer::forward(const Batch& bt, ops::CValues weights, StepTelemetry* tel) {
  const Dims d = dims_of(bt);
  allocate_forward(d);
  const std::int64_t N = d.N, C = d.C, H = d.H, V = d.V, KVD = d.KVD;
  const WeightViews p(weights, lay_);
  const ops::CValues wcls = c_.tie_embeddings ? p.wte : p.wcls;
  const ops::RowShape rows = d.rows();
  const ops::AttnShape ash = d.attn(), kv_ash = d.kv_attn();
  // Every op output below goes through observe(): the injection hook, the non-finite scan, and at detailed steps
  // the range events and the op's own statistics (op_statistics).
  const ObserverScope watch(runner_, [this, tel](const ops::Observation& o) { observe(tel, o); });

  cos_.assign(static_cast<std::size_t>(d.T * d.hs / 2), 0.0);
  sin_.assign(cos_.size(), 0.0);
  // cos θ, sin θ (T, hs/2), θ = t·base^(−2i/hs)
  runner_.rope_angles({OpKind::RopeAngles, -1, "rope"}, cos_, sin_, d.T, d.hs, c_.rope_base);
  ops::Buffer& x = x_;
  // x (N, C) = wte[inputs]
  runner_.embedding_forward({OpKind::Embedding, -1, "x0"}, x, bt.inputs, p.wte, rows);

  for (int l = 0; l < c_.layers; ++l) {
    LayerActs& L = acts_[static_cast<std::size_t>(l)];
    const BlockWeights w = block_weights(p, l);
    copy_into(L.x_in, x);
    // --- attention ---
    // h1 (N, C) = rmsnorm(x_in) ⊙ ln1w, r1 (N) = rstd
    norm_in(tel, {OpKind::RmsNorm, l, "ln1"}, L.h1, L.r1, L.x_in, w.ln1w, rows);
    // q (N, C), k and v (N, KVD) = h1 · Wᵀ
    runner_.matmul_forward({OpKind::Matmul, l, "q"}, L.q, L.h1, w.wq, {N, C, C});
    runner_.matmul_forward({OpKind::Matmul, l, "k"}, L.k, L.h1, w.wk, {N, C, KVD});
    runner_.matmul_forward({OpKind::Matmul, l, "v"}, L.v, L.h1, w.wv, {N, C, KVD});
    // qr (B, T, NH·hs), kr (B, T, NKV·hs): q and k rotated by position
    runner_.rope_forward({OpKind::RopeRotate, l, "q"}, L.qr, L.q, cos_, sin_, ash);
    runner_.rope_forward({OpKind::RopeRotate, l, "k"}, L.kr, L.k, cos_, sin_, kv_ash);
    // kt, vt (B, T, NH·hs): the K and V each query head reads
    const ops::CValues kt = kv_for_heads(L.kt, L.kr, d), vt = kv_for_heads(L.vt, L.v, d);
    // preatt (B, NH, T, T) = qr·ktᵀ/√hs, causal
    runner_.attn_scores_forward({OpKind::AttnScores, l, "scores"}, L.preatt, L.qr, kt, ash);
    // att (B, NH, T, T) = softmax(preatt) by row; y (N, C) = att·vt per head
    attention_forward(tel, l, L, vt, ash);
    // o (N, C) = y · Woᵀ; pre1 (N, C) = x_in + β·o
    runner_.matmul_forward({OpKind::Matmul, l, "o"}, L.o, L.y, w.wo, {N, C, C});
    runner_.residual_forward({OpKind::ResidualAttn, l, "x"}, L.pre1, L.x_in, L.o, rule_.branch, rows);
    // x_mid (N, C) = pre1
    norm_out(tel, {OpKind::RmsNorm, l, "post1"}, L.x_mid, L.rp1, L.pre1, w.ln1w, rows);
    // --- feed-forward ---
    // h2 (N, C) = rmsnorm(x_mid) ⊙ ln2w, r2 (N)
    norm_in(tel, {OpKind::RmsNorm, l, "ln2"}, L.h2, L.r2, L.x_mid, w.ln2w, rows);
    // z (N, H) = silu(h2 · W1ᵀ) ⊙ (h2 · W3ᵀ)
    ffn_forward(l, L, w, d);
    // f (N, C) = z · W2ᵀ; pre2 (N, C) = x_mid + β·f
    runner_.matmul_forward({OpKind::Matmul, l, "w2"}, L.f, L.z, w.w2, {N, H, C});
    runner_.residual_forward({OpKind::ResidualFfn, l, "x"}, L.pre2, L.x_mid, L.f, rule_.branch, rows);
    // x (N, C) = pre2
    norm_out(tel, {OpKind::RmsNorm, l, "post2"}, x, L.rp2, L.pre2, w.ln2w, rows);
    stream_statistics(tel, l, x);
  }
  // --- head ---
  copy_into(x_final_, x);
  // xf (N, C) = rmsnorm(x_final) ⊙ lnfw, rf (N)
  norm(tel, {OpKind::RmsNorm, -1, "lnf"}, xf_, rf_, x_final_, p.lnfw, rows, c_.norm_eps);
  // logits (N, V) = xf · Wclsᵀ
  runner_.matmul_forward({OpKind::Classifier, -1, "logits"}, logits_, xf_, wcls, {N, C, V});
  // losses (N) = −log softmax(logits)[target], probs (N, V); the mean loss in binary64
  mean_loss_ = runner_.cross_entropy_forward({OpKind::CrossEntropy, -1, "loss"}, losses_, probs_, logits_, bt.targets,
                                             {N, V});
}

void Transformer::norm(StepTelemetry* tel, ops::Site s, ops::Values y, ops::Values rstd, ops::CValues x, ops::CValues w,
                       ops::RowShape rows, double eps) {
  runner_.rmsnorm_forward(s, y, rstd, x, w, rows, eps);
  check_norm(tel, s.layer, s.tensor, x, rstd, rows.cols);
}

void Transformer::norm_in(StepTelemetry* tel, ops::Site s, ops::Values h, ops::Values rstd, ops::CValues x,
                          ops::CValues w, ops::RowShape rows) {
  if (rule_.post_norm) copy_into(h, x);  // Post-Norm (DeepNorm): h = x
  else norm(tel, s, h, rstd, x, w, rows, c_.norm_eps);
}

void Transformer::norm_out(StepTelemetry* tel, ops::Site s, ops::Values y, ops::Values rstd, ops::CValues pre,
                           ops::CValues w, ops::RowShape rows) {
  if (rule_.post_norm) norm(tel, s, y, rstd, pre, w, rows, c_.norm_eps * rule_.post_norm_eps_factor);
  else copy_into(y, pre);  // Pre-Norm: y = pre
}

ops::CValues Transformer::kv_for_heads(ops::Buffer& tiled, const ops::Buffer& kv, const Dims& d) {
  if (!d.gqa()) return kv;
  tile(tiled, kv, fwd_map_, d.NKV, d.hs);  // exact copies by the forward head map
  return tiled;
}

void Transformer::attention_forward(StepTelemetry* tel, int l, LayerActs& L, ops::CValues vt, ops::AttnShape ash) {
  switch (runner_.policy().attention_order()) {
    case ops::AttentionOrder::Materialised:
      // att (B, NH, T, T) = softmax(preatt) by row; y (N, C) = att·vt per head
      runner_.softmax_forward({OpKind::Softmax, l, "att"}, L.att, L.preatt, ash);
      runner_.attn_values_forward({OpKind::AttnValues, l, "y"}, L.y, L.att, vt, ash);
      return;
    case ops::AttentionOrder::Online:
      // y (N, C) and lse (B, NH, T) in one pass over each row; att is recomputed from lse in the backward pass.
      // Checked by hand: lse under the softmax entry first, then y.
      runner_.online_attention_forward({OpKind::AttnValues, l, "y", ops::Observe::Off}, L.y, L.lse, L.preatt, vt, ash);
      check(tel, OpKind::Softmax, Pass::Forward, l, "lse", L.lse);
      check(tel, OpKind::AttnValues, Pass::Forward, l, "y", L.y);
      return;
  }
}

void Transformer::ffn_forward(int l, LayerActs& L, const BlockWeights& w, const Dims& d) {
  const ops::MatmulShape up{d.N, d.C, d.H};
  const ops::RowShape hid = d.hidden();
  switch (c_.ffn) {
    case Ffn::SwiGlu:
      // g, u (N, H) = h2 · W1ᵀ, h2 · W3ᵀ; a = silu(g); z = a ⊙ u
      runner_.matmul_forward({OpKind::Matmul, l, "w1"}, L.g, L.h2, w.w1, up);
      runner_.matmul_forward({OpKind::Matmul, l, "w3"}, L.u, L.h2, w.w3, up);
      runner_.silu_forward({OpKind::Silu, l, "silu"}, L.a, L.g, hid);
      runner_.swiglu_forward({OpKind::SwiGlu, l, "z"}, L.z, L.a, L.u, hid);
      return;
    case Ffn::Gelu:
    case Ffn::GeluTanh:
      // g (N, H) = h2 · W1ᵀ; z = gelu(g), erf or tanh form
      runner_.matmul_forward({OpKind::Matmul, l, "w1"}, L.g, L.h2, w.w1, up);
      runner_.gelu_forward({OpKind::Gelu, l, "z"}, L.z, L.g, hid, *gelu_form(c_.ffn));
      return;
  }
}

Transformer::Slot Transformer::grad_slot(ParamTensor t, int l) const {
  const std::size_t n = lay_.layer_size(t);
  return {lay_.offset_of(t) + n * static_cast<std::size_t>(l), n};
}

template <class F>
void Transformer::with_grad(const GradOut& g, Slot at, F&& op, bool last) {
  if (g.direct != nullptr) {
    DirectSink& d = *g.direct;
    const bool continued = d.pending_off == at.off;
    std::vector<float>& buf = continued ? d.pending : *g.scratch;
    if (!continued) buf.assign(at.n, 0.0f);
    const std::span<float> dw(buf.data(), at.n);
    op(ops::Values(dw));
    if (!last) {
      // The slice waits in `pending` (taking the scratch's buffer); the scratch serves the next slices meanwhile.
      if (!continued) std::swap(d.pending, buf);
      d.pending_off = at.off;
      return;
    }
    finish_slice(d, at, dw);
    if (continued) {  // the kept scratch takes its (larger) buffer back; the one it used meanwhile is freed
      std::swap(*g.scratch, d.pending);
      std::vector<float>().swap(d.pending);
      d.pending_off = static_cast<std::size_t>(-1);
    }
    return;
  }
  if (g.store == nullptr) return op(ops::Values(g.binary64.subspan(at.off, at.n)));
  op(ops::Values(g.store->binary32().subspan(at.off, at.n)));  // grad_out: a store is binary32
}

void Transformer::backward(const Batch& bt, ops::CValues weights, double loss_scale, std::span<double> grads,
                           StepTelemetry* tel, GradSink sink) {
  backward(bt, weights, loss_scale, GradOut{grads}, tel, sink);
}

Transformer::GradOut Transformer::grad_out(ParamStore& grads) {
  if (grads.kind() == StorageKind::Binary64) return GradOut{grads.binary64()};
  return GradOut{{}, &grads, nullptr};
}

void Transformer::backward(const Batch& bt, ops::CValues weights, double loss_scale, const GradOut& grads,
                           StepTelemetry* tel, GradSink sink) {
  const Dims dims = dims_of(bt);
  allocate_backward(dims);
  const std::int64_t N = dims.N, C = dims.C, H = dims.H, V = dims.V, KVD = dims.KVD;
  const WeightViews p(weights, lay_);
  const void* key = grads.store != nullptr ? static_cast<const void*>(grads.store->binary32().data())
                                           : static_cast<const void*>(grads.binary64.data());
  const std::size_t size = grads.store != nullptr ? grads.store->size() : grads.binary64.size();
  const bool cleared = grads.direct != nullptr || (key == cleared_grads_ && size == cleared_size_);
  cleared_grads_ = nullptr;
  if (!cleared)
    ops::timed_phase(profile_, kGradZeroing, [&] {
      if (grads.store != nullptr) grads.store->zero();
      else std::fill(grads.binary64.begin(), grads.binary64.end(), 0.0);
    });
  // Binary32 gradients: each weight-gradient op adds into its binary32 slice (with_grad).
  GradOut g = grads;
  if (g.direct != nullptr && g.scratch == nullptr) g.scratch = &slice32_;
  // Tied embeddings: the classifier reads wte, and its weight gradient is added into wte's before the
  // embedding's scatter-add (two gradients summed, one update).
  const ops::CValues wcls = c_.tie_embeddings ? p.wte : p.wcls;
  const Slot dwcls = grad_slot(c_.tie_embeddings ? ParamTensor::Embedding : ParamTensor::Classifier, 0);
  const ops::RowShape rows = dims.rows();
  const ops::AttnShape ash = dims.attn(), kv_ash = dims.kv_attn();
  // Op outputs go through observe() as in forward(); the checks written out below are the ones the Runner
  // cannot name: RMSNorm's dx (the rmsnorm-bwd defect bypasses the Runner), gradient sums checked once
  // complete, and outputs checked under another name or entry than their call's.
  const ObserverScope watch(runner_, [this, tel](const ops::Observation& o) { observe(tel, o); });

  BackwardBuffers& b = bw_;
  // dlogits (N, V) = (probs − onehot)·scale/N; dxf (N, C) = dlogits · Wcls; dWcls (V, C) += dlogitsᵀ · xf
  const ops::Values dlogits = zeros(b.dlogits);
  runner_.cross_entropy_backward_data({OpKind::CrossEntropy, -1, "dlogits"}, dlogits, probs_, bt.targets,
                                      loss_scale / static_cast<double>(N), {N, V});
  const ops::Values dxf = zeros(b.dxf);
  runner_.matmul_backward_data({OpKind::Classifier, -1, "dx", ops::Observe::Outputs, "logits"}, dxf, dlogits, wcls,
                               {N, C, V});
  with_grad(
      g, dwcls,
      [&](ops::Values dw) {
        runner_.matmul_backward_weight({OpKind::Classifier, -1, "wcls", ops::Observe::Outputs, "logits"}, dw,
                                       dlogits, xf_, {N, C, V});
      },
      /*last=*/!c_.tie_embeddings);  // tied: the embedding's scatter-add below adds into the same slice
  zeros(b.dx);
  ops::Buffer& dx = b.dx;
  // dx (N, C), dlnfw (C) through the final norm
  norm_backward_data({OpKind::RmsNorm, -1, "lnf"}, dx, dxf, x_final_, p.lnfw, rf_, rows);
  with_grad(g, grad_slot(ParamTensor::FinalNorm, 0), [&](ops::Values dw) {
    runner_.rmsnorm_backward_weight({OpKind::RmsNorm, -1, "lnfw"}, dw, dxf, x_final_, rf_, rows);
  });
  check(tel, OpKind::RmsNorm, Pass::BackwardData, -1, "lnf", dx);

  for (int l = c_.layers - 1; l >= 0; --l) {
    LayerActs& L = acts_[static_cast<std::size_t>(l)];
    const BlockWeights w = block_weights(p, l);
    // --- feed-forward half: x_out = x_mid + β·f ---
    // dpre2 (N, C) = dx
    const ops::CValues dpre2 = norm_out_backward(tel, {OpKind::RmsNorm, l, "post2"}, "ln2w", b.dpre2, dx, L.pre2,
                                                 w.ln2w, L.rp2, g, grad_slot(ParamTensor::FfnNorm, l), rows);
    // dxm, df (N, C) = dpre2, β·dpre2; dz (N, H) = df · W2; dW2 (C, H) += dfᵀ · z
    const ops::Values dxm = zeros(b.dxm), df = zeros(b.df);
    runner_.residual_backward_data({OpKind::ResidualFfn, l, "dx"}, dxm, df, dpre2, rule_.branch, rows);
    const ops::Values dz = zeros(b.dz);
    runner_.matmul_backward_data({OpKind::Matmul, l, "dz", ops::Observe::Outputs, "w2"}, dz, df, w.w2, {N, H, C});
    with_grad(g, grad_slot(ParamTensor::W2, l), [&](ops::Values dw) {
      runner_.matmul_backward_weight({OpKind::Matmul, l, "w2"}, dw, df, L.z, {N, H, C});
    });
    // dh2 (N, C) through z = silu(h2·W1ᵀ) ⊙ (h2·W3ᵀ); dW1, dW3
    const ops::Values dh2 = zeros(b.dh2);
    ffn_backward(l, L, w, g, dz, dh2, dims);
    // dxm (N, C) += dh2 through h2 = rmsnorm(x_mid) ⊙ ln2w; dln2w
    norm_in_backward(tel, {OpKind::RmsNorm, l, "ln2"}, "ln2w", OpKind::ResidualFfn, dxm, dh2, L.x_mid, w.ln2w, L.r2,
                     g, grad_slot(ParamTensor::FfnNorm, l), rows);
    check(tel, OpKind::RmsNorm, Pass::BackwardData, l, "dx_mid", dxm);
    // --- attention half: x_mid = x_in + β·o ---
    // dpre1 (N, C) = dxm
    const ops::CValues dpre1 = norm_out_backward(tel, {OpKind::RmsNorm, l, "post1"}, "ln1w", b.dpre1, dxm, L.pre1,
                                                 w.ln1w, L.rp1, g, grad_slot(ParamTensor::AttnNorm, l), rows);
    // dxi, dout (N, C) = dpre1, β·dpre1; dy (N, C) = dout · Wo; dWo (C, C) += doutᵀ · y
    const ops::Values dxi = zeros(b.dxi), dout = zeros(b.dout);
    runner_.residual_backward_data({OpKind::ResidualAttn, l, "dx", ops::Observe::Off}, dxi, dout, dpre1, rule_.branch,
                                   rows);
    check(tel, OpKind::ResidualAttn, Pass::BackwardData, l, "dx", dxi);
    check(tel, OpKind::ResidualAttn, Pass::BackwardData, l, "dout", dout);
    const ops::Values dy = zeros(b.dy);
    runner_.matmul_backward_data({OpKind::Matmul, l, "dy", ops::Observe::Outputs, "o"}, dy, dout, w.wo, {N, C, C});
    with_grad(g, grad_slot(ParamTensor::Wo, l), [&](ops::Values dw) {
      runner_.matmul_backward_weight({OpKind::Matmul, l, "wo", ops::Observe::Off, "o"}, dw, dout, L.y, {N, C, C});
    });
    // kt, vt (B, T, NH·hs) and att (B, NH, T, T) as the attention backward reads them
    const AttnOperands a = attention_operands(tel, l, L, dims);
    // datt (B, NH, T, T), dvt (N, C) through y = att·vt; dpreatt through the softmax; dqr, dkrt (N, C)
    const ops::Values datt = zeros(b.datt), dvt = zeros(b.dvt), dpreatt = zeros(b.dpreatt);
    runner_.attn_values_backward_data({OpKind::AttnValues, l, "datt"}, datt, dvt, dy, a.att, a.vt, ash);
    runner_.softmax_backward_data({OpKind::Softmax, l, "dpreatt"}, dpreatt, datt, a.att, ash);
    const ops::Values dqr = zeros(b.dqr), dkrt = zeros(b.dkrt), dq = zeros(b.dq), dk = zeros(b.dk);
    runner_.attn_scores_backward_data({OpKind::AttnScores, l, "dqk"}, dqr, dkrt, dpreatt, L.qr, a.kt, ash);
    // dkr, dv (B, T, NKV·hs): the query heads' dK and dV of each KV head
    const auto [dkr, dv] = kv_heads_backward(dkrt, dvt, dims);
    // dq (N, C), dk (N, KVD) rotated back; dh1 (N, C) = dq · Wq + dk · Wk + dv · Wv; dWq, dWk, dWv
    runner_.rope_backward_data({OpKind::RopeRotate, l, "dq"}, dq, dqr, cos_, sin_, ash);
    runner_.rope_backward_data({OpKind::RopeRotate, l, "dk"}, dk, dkr, cos_, sin_, kv_ash);
    const ops::Values dh1 = zeros(b.dh1);
    runner_.matmul_backward_data({OpKind::Matmul, l, "dh1", ops::Observe::Off, "q"}, dh1, dq, w.wq, {N, C, C});
    runner_.matmul_backward_data({OpKind::Matmul, l, "dh1", ops::Observe::Off, "k"}, dh1, dk, w.wk, {N, C, KVD});
    runner_.matmul_backward_data({OpKind::Matmul, l, "dh1", ops::Observe::Outputs, "v"}, dh1, dv, w.wv, {N, C, KVD});
    with_grad(g, grad_slot(ParamTensor::Wq, l), [&](ops::Values dw) {
      runner_.matmul_backward_weight({OpKind::Matmul, l, "wq", ops::Observe::Outputs, "q"}, dw, dq, L.h1, {N, C, C});
    });
    with_grad(g, grad_slot(ParamTensor::Wk, l), [&](ops::Values dw) {
      runner_.matmul_backward_weight({OpKind::Matmul, l, "wk", ops::Observe::Outputs, "k"}, dw, dk, L.h1, {N, C, KVD});
    });
    with_grad(g, grad_slot(ParamTensor::Wv, l), [&](ops::Values dw) {
      runner_.matmul_backward_weight({OpKind::Matmul, l, "wv", ops::Observe::Outputs, "v"}, dw, dv, L.h1, {N, C, KVD});
    });
    // dxi (N, C) += dh1 through h1 = rmsnorm(x_in) ⊙ ln1w; dln1w
    norm_in_backward(tel, {OpKind::RmsNorm, l, "ln1"}, "ln1w", OpKind::ResidualAttn, dxi, dh1, L.x_in, w.ln1w, L.r1,
                     g, grad_slot(ParamTensor::AttnNorm, l), rows);
    check(tel, OpKind::RmsNorm, Pass::BackwardData, l, "dx_in", dxi);
    std::swap(b.dx, b.dxi);  // dx ← dxi (the buffers trade places; dxi is zeroed before its next use)
  }
  // dwte (V, C) += dx scattered to the input tokens' rows
  with_grad(g, grad_slot(ParamTensor::Embedding, 0), [&](ops::Values dw) {
    runner_.embedding_backward_weight({OpKind::Embedding, -1, "wte"}, dw, dx, bt.inputs, rows);
  });
  if (g.direct != nullptr) {
    finish_direct(*g.direct, tel);
  } else if (g.store != nullptr) {
    finish_gradients(*g.store, tel, sink);
  } else {
    finish_gradients(g.binary64, tel, sink);
  }
}

ops::CValues Transformer::norm_out_backward(StepTelemetry* tel, ops::Site s, std::string_view weight,
                                            ops::Buffer& buffer, ops::CValues dy, ops::CValues pre, ops::CValues w,
                                            ops::CValues rstd, const GradOut& g, Slot dw, ops::RowShape rows) {
  if (!rule_.post_norm) return dy;  // Pre-Norm: y = pre
  const ops::Values dpre = zeros(buffer);
  norm_backward_data(s, dpre, dy, pre, w, rstd, rows);
  check(tel, OpKind::RmsNorm, Pass::BackwardData, s.layer, s.tensor, dpre);
  with_grad(g, dw, [&](ops::Values d) {
    runner_.rmsnorm_backward_weight({OpKind::RmsNorm, s.layer, weight}, d, dy, pre, rstd, rows);
  });
  return dpre;
}

void Transformer::norm_in_backward(StepTelemetry* tel, ops::Site s, std::string_view weight, OpKind residual,
                                   ops::Values dx, ops::CValues dh, ops::CValues x, ops::CValues w,
                                   ops::CValues rstd, const GradOut& g, Slot dw, ops::RowShape rows) {
  if (rule_.post_norm) {
    // h = x: the two uses of x meet in a residual-stream gradient sum (dx += dh), under the residual's entry.
    const ops::Values scratch = zeros(bw_.scratch);
    runner_.residual_backward_data({residual, s.layer, "dx", ops::Observe::Off}, dx, scratch, dh, 1.0, rows);
    check(tel, residual, Pass::BackwardData, s.layer, "dx", dx);
    return;
  }
  norm_backward_data(s, dx, dh, x, w, rstd, rows);
  with_grad(g, dw, [&](ops::Values d) {
    runner_.rmsnorm_backward_weight({OpKind::RmsNorm, s.layer, weight}, d, dh, x, rstd, rows);
  });
}

void Transformer::ffn_backward(int l, const LayerActs& L, const BlockWeights& w, const GradOut& g,
                               ops::CValues dz, ops::Values dh2, const Dims& d) {
  const ops::MatmulShape up{d.N, d.C, d.H};
  const ops::RowShape hid = d.hidden();
  BackwardBuffers& b = bw_;
  switch (c_.ffn) {
    case Ffn::SwiGlu: {
      // da, du (N, H) through z = a ⊙ u; dg (N, H) through a = silu(g); dh2 (N, C) = dg · W1 + du · W3
      const ops::Values da = zeros(b.da), du = zeros(b.du), dg = zeros(b.dg);
      runner_.swiglu_backward_data({OpKind::SwiGlu, l, "da"}, da, du, dz, L.a, L.u, hid);
      runner_.silu_backward_data({OpKind::Silu, l, "dg"}, dg, da, L.g, hid);
      runner_.matmul_backward_data({OpKind::Matmul, l, "dh2", ops::Observe::Off, "w1"}, dh2, dg, w.w1, up);
      runner_.matmul_backward_data({OpKind::Matmul, l, "dh2", ops::Observe::Outputs, "w3"}, dh2, du, w.w3, up);
      with_grad(g, grad_slot(ParamTensor::W1, l),
                [&](ops::Values dw) { runner_.matmul_backward_weight({OpKind::Matmul, l, "w1"}, dw, dg, L.h2, up); });
      with_grad(g, grad_slot(ParamTensor::W3, l),
                [&](ops::Values dw) { runner_.matmul_backward_weight({OpKind::Matmul, l, "w3"}, dw, du, L.h2, up); });
      return;
    }
    case Ffn::Gelu:
    case Ffn::GeluTanh: {
      // dg (N, H) through z = gelu(g); dh2 (N, C) = dg · W1; dW1 (H, C) += dgᵀ · h2
      const ops::Values dg = zeros(b.dg);
      runner_.gelu_backward_data({OpKind::Gelu, l, "dg"}, dg, dz, L.g, hid, *gelu_form(c_.ffn));
      runner_.matmul_backward_data({OpKind::Matmul, l, "dh2", ops::Observe::Outputs, "w1"}, dh2, dg, w.w1, up);
      with_grad(g, grad_slot(ParamTensor::W1, l),
                [&](ops::Values dw) { runner_.matmul_backward_weight({OpKind::Matmul, l, "w1"}, dw, dg, L.h2, up); });
      return;
    }
  }
}

Transformer::AttnOperands Transformer::attention_operands(StepTelemetry* tel, int l, LayerActs& L, const Dims& d) {
  // The forward's K/V and softmax, except under the gqa-mismatch defect, where K/V are re-tiled with the
  // backward map and the scores and softmax recomputed from them under the forward entries (AutoANE's sdpaBwd
  // kernels recompute them too); under the online order the softmax is recomputed from the saved lse.
  if (d.gqa() && bwd_map_ != fwd_map_) {
    BackwardBuffers& b = bw_;
    const ops::Values kt_b = zeros(b.kt_b), vt_b = zeros(b.vt_b);
    tile(b.kt_b, L.kr, bwd_map_, d.NKV, d.hs);
    tile(b.vt_b, L.v, bwd_map_, d.NKV, d.hs);
    const ops::Values pre_b = zeros(b.pre_b), att_b = zeros(b.att_b);
    runner_.attn_scores_forward({OpKind::AttnScores, l, "scores", ops::Observe::Off}, pre_b, L.qr, kt_b, d.attn());
    runner_.softmax_forward({OpKind::Softmax, l, "att", ops::Observe::Off}, att_b, pre_b, d.attn());
    return {kt_b, vt_b, att_b};
  }
  if (runner_.policy().attention_order() == ops::AttentionOrder::Online) {
    runner_.softmax_from_lse({OpKind::Softmax, l, "att", ops::Observe::Off}, L.att, L.preatt, L.lse, d.attn());
    check(tel, OpKind::Softmax, Pass::Forward, l, "att", L.att);
  }
  return {d.gqa() ? L.kt : L.kr, d.gqa() ? L.vt : L.v, L.att};
}

std::pair<ops::CValues, ops::CValues> Transformer::kv_heads_backward(ops::CValues dkt, ops::CValues dvt,
                                                                     const Dims& d) {
  if (!d.gqa()) return {dkt, dvt};
  // dK and dV summed over the query heads of each KV head (backward map), under the (residual-attn, bwd-data) entry.
  BackwardBuffers& b = bw_;
  zeros(b.dkr_kv);
  zeros(b.dv_kv);
  const auto reduce = [&](ops::Buffer& dkv, ops::CValues dfull) {
    const auto& ctx = runner_.context(OpKind::ResidualAttn, Pass::BackwardData);
    if (!dkv.binary32() && !dfull.binary32()) {
      ops::kv_reduce_backward<ops::Emulated>(ops::Values(dkv).f64(), dfull.f64(), bwd_map_, d.NKV, d.hs, ctx);
      return;
    }
    // The reduction's body is binary64: binary32 tensors widened, the sums narrowed back exactly (values of the
    // entry's storage, which fits binary32 when the activations are binary32).
    std::vector<double> sums = ops::CValues(dkv).widened();
    ops::kv_reduce_backward<ops::Emulated>(sums, wide(dfull), bwd_map_, d.NKV, d.hs, ctx);
    store(dkv, sums);
  };
  ops::timed_phase(profile_, kKvReduce, [&] {
    reduce(b.dkr_kv, dkt);
    reduce(b.dv_kv, dvt);
  });
  return {b.dkr_kv, b.dv_kv};
}

void Transformer::finish_gradients(std::span<double> grads, StepTelemetry* tel, GradSink sink) {
  // Weight gradients are held in the policy's gradient format; an overflow there is named by its tensor.
  const numerics::Format& gf = runner_.policy().storage_for(ops::TensorRole::Gradient);
  const bool round = !(gf == numerics::formats::fp64), accumulate = !sink.total.empty();
  if (!round && !accumulate) return;
  const numerics::RoundingPlan plan(gf);
  ops::timed_phase(profile_, accumulate ? kGradRoundingAccumulate : kGradRounding, [&] {
    for (const ParamTensor t : kAllParamTensors) {
      const std::size_t off = lay_.offset_of(t), n = lay_.size_of(t);
      const auto g = grads.subspan(off, n);
      bool finite = true;
      if (accumulate) {
        // per range: rounded, scanned while in cache, summed into the total, cleared
        bool ok = true;
        constexpr std::size_t kRange = std::size_t{1} << 15;
        const auto ranges = static_cast<std::int64_t>((n + kRange - 1) / kRange);
#pragma omp parallel for schedule(static) reduction(&& : ok)
        for (std::int64_t r = 0; r < ranges; ++r) {
          const std::size_t b = static_cast<std::size_t>(r) * kRange, e = std::min(n, b + kRange);
          const auto part = g.subspan(b, e - b);
          if (round) {
            numerics::round_array(plan, numerics::Rounding::NearestEven, part, part);
            ok = ok && numerics::all_finite(part);
          }
          accumulate_and_clear(sink.total.subspan(off + b, e - b), part, sink.first);
        }
        finite = ok;
      } else {
        ops::for_ranges(n, [&](std::size_t first, std::size_t end) {
          const auto part = g.subspan(first, end - first);
          numerics::round_array(plan, numerics::Rounding::NearestEven, part, part);
        });
        finite = tel == nullptr || !tel->first_nonfinite_op.empty() || all_finite(CSpan(g));
      }
      if (round && !finite && tel != nullptr && tel->first_nonfinite_op.empty())
        tel->first_nonfinite_op = "grads-role rounding(" + std::string(name_of(t)) + ")";
    }
  });
  if (accumulate) {
    cleared_grads_ = grads.data();
    cleared_size_ = grads.size();
  }
}

void Transformer::finish_gradients(ParamStore& grads, StepTelemetry* tel, GradSink sink) {
  // finish_gradients on binary32 gradients: each range widened piece by piece, then the same roundings, scan and
  // accumulation as the binary64 version (elementwise, so the same bits), stored back narrowed (exact: the
  // gradient role, fp32 and the values written are binary32 by grads_storage()).
  const numerics::Format& gf = runner_.policy().storage_for(ops::TensorRole::Gradient);
  const bool round = !(gf == numerics::formats::fp64), accumulate = sink.accumulates();
  if (!round && !accumulate) return;
  if (accumulate && (sink.total_store == nullptr || sink.total_store->kind() != StorageKind::Binary32))
    throw std::logic_error("finish_gradients: binary32 gradients need a binary32 total");
  const numerics::RoundingPlan plan(gf);
  const std::span<float> g32 = grads.binary32();
  const std::span<float> t32 = accumulate ? sink.total_store->binary32() : std::span<float>{};
  const bool identity = round && numerics::holds_binary32(gf);  // the rounding returns every binary32 value but NaN
  const bool keeps = !round || identity;                         // ... or there is none
  ops::timed_phase(profile_, accumulate ? kGradRoundingAccumulate : kGradRounding, [&] {
    for (const ParamTensor t : kAllParamTensors) {
      const std::size_t off = lay_.offset_of(t), n = lay_.size_of(t);
      bool ok = true;
      constexpr std::size_t kRange = std::size_t{1} << 15;
      const auto ranges = static_cast<std::int64_t>((n + kRange - 1) / kRange);
#pragma omp parallel for schedule(static) reduction(&& : ok)
      for (std::int64_t r = 0; r < ranges; ++r) {
        std::array<double, kGradPiece> gp;
        const std::size_t b = static_cast<std::size_t>(r) * kRange, e = std::min(n, b + kRange);
        // A range of finite gradients under a gradient format that holds binary32 (the fp32 role): the rounding
        // returns every value unchanged, so the scan is all there is to do. Any other range takes the pieces.
        if (!accumulate && identity && numerics::all_finite(std::span<const float>(g32.subspan(off + b, e - b))))
          continue;
        for (std::size_t at = off + b; at < off + e; at += kGradPiece) {
          const std::size_t k = std::min(kGradPiece, off + e - at);
          // finite values and sums under an identity rounding: summed in binary32 (the same bits), g32 cleared
          if (accumulate && keeps && accumulate_and_clear_binary32(t32.subspan(at, k), g32.subspan(at, k), sink.first))
            continue;
          const std::span<double> part(gp.data(), k);
          for (std::size_t i = 0; i < k; ++i) part[i] = static_cast<double>(g32[at + i]);
          if (accumulate) {
            ok = finish_piece(plan, round, part, t32.subspan(at, k), sink.first) && ok;
            std::fill(g32.begin() + static_cast<std::ptrdiff_t>(at), g32.begin() + static_cast<std::ptrdiff_t>(at + k),
                      0.0f);
          } else {
            if (round) {
              numerics::round_array(plan, numerics::Rounding::NearestEven, part, part);
              ok = ok && numerics::all_finite(part);
            }
            for (std::size_t i = 0; i < k; ++i) g32[at + i] = static_cast<float>(part[i]);  // gf values: exact
          }
        }
      }
      // Unaccumulated, the scan only names a tensor when no op named one before (as the binary64 version).
      const bool finite = accumulate ? ok : (tel == nullptr || !tel->first_nonfinite_op.empty() || ok);
      if (round && !finite && tel != nullptr && tel->first_nonfinite_op.empty())
        tel->first_nonfinite_op = "grads-role rounding(" + std::string(name_of(t)) + ")";
    }
  });
  if (accumulate) {
    cleared_grads_ = g32.data();
    cleared_size_ = g32.size();
  }
}

void Transformer::finish_slice(DirectSink& d, Slot at, std::span<float> part) {
  const numerics::Format& gf = runner_.policy().storage_for(ops::TensorRole::Gradient);
  const bool round = !(gf == numerics::formats::fp64), keeps = !round || numerics::holds_binary32(gf);
  const numerics::RoundingPlan plan(gf);
  const std::span<float> t32 = d.total->binary32().subspan(at.off, at.n);
  bool ok = true;
  ops::timed_phase(profile_, kGradRoundingAccumulate, [&] {
    constexpr std::size_t kRange = std::size_t{1} << 15;
    const auto ranges = static_cast<std::int64_t>((at.n + kRange - 1) / kRange);
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (std::int64_t r = 0; r < ranges; ++r) {
      std::array<double, kGradPiece> gp;
      const std::size_t b = static_cast<std::size_t>(r) * kRange, e = std::min(at.n, b + kRange);
      for (std::size_t i = b; i < e; i += kGradPiece) {
        const std::size_t k = std::min(kGradPiece, e - i);
        const std::span<float> piece = part.subspan(i, k);
        // finite values and sums under an identity rounding: summed in binary32 (the same bits), piece cleared
        if (keeps && accumulate_and_clear_binary32(t32.subspan(i, k), piece, d.first)) continue;
        const std::span<double> wide(gp.data(), k);
        for (std::size_t j = 0; j < k; ++j) wide[j] = static_cast<double>(piece[j]);
        ok = finish_piece(plan, round, wide, t32.subspan(i, k), d.first) && ok;
        std::fill(piece.begin(), piece.end(), 0.0f);
      }
    }
  });
  if (!ok)
    for (const ParamTensor t : kAllParamTensors)
      if (at.off >= lay_.offset_of(t) && at.off < lay_.offset_of(t) + lay_.size_of(t)) d.nonfinite.push_back(t);
  d.finished.push_back(at);
}

void Transformer::finish_direct(DirectSink& d, StepTelemetry* tel) {
  if (d.pending_off != static_cast<std::size_t>(-1))
    throw std::logic_error("Transformer: a gradient slice was left pending by its last writer");
  std::sort(d.finished.begin(), d.finished.end(), [](Slot a, Slot b) { return a.off < b.off; });
  const std::vector<Slot> done = std::move(d.finished);
  d.finished.clear();
  std::size_t at = 0;
  std::vector<float> zeros;
  const auto finish_zeros = [&](std::size_t end) {  // elements no op wrote: +0, as in a cleared store
    if (end <= at) return;
    zeros.assign(end - at, 0.0f);
    finish_slice(d, {at, end - at}, zeros);
  };
  for (const Slot s : done) {
    if (s.off < at) throw std::logic_error("Transformer: a gradient slice was finished twice");
    finish_zeros(s.off);
    at = s.off + s.n;
  }
  finish_zeros(d.total->size());
  if (tel != nullptr && tel->first_nonfinite_op.empty())
    for (const ParamTensor t : kAllParamTensors)
      if (std::find(d.nonfinite.begin(), d.nonfinite.end(), t) != d.nonfinite.end()) {
        tel->first_nonfinite_op = "grads-role rounding(" + std::string(name_of(t)) + ")";
        break;
      }
}

bool Transformer::derived_current(const void* data, std::size_t n) const {
  return weights_version_ != 0 && weights_version_ == derived_version_ && data == derived_from_ && n == derived_size_;
}

ops::CValues Transformer::working_weights(const ParamStore& master) {
  if (master.kind() == StorageKind::Binary64) return working_weights(master.binary64());
  const std::span<const float> m32 = master.binary32();
  if (derived_current(m32.data(), m32.size())) return derived_identity_ ? ops::CValues(m32) : weights_.cvalues();
  derived_version_ = weights_version_;
  derived_from_ = m32.data();
  derived_size_ = m32.size();
  derived_identity_ = false;
  // Widened piece by piece and rounded: round_array is elementwise, so these are the bits it gives on the binary64
  // masters (the same values).
  const numerics::Format& wf = runner_.policy().storage_for(ops::TensorRole::Weight);
  const numerics::RoundingPlan plan(wf);
  const bool round = !(wf == numerics::formats::fp64);
  constexpr std::size_t kPiece = std::size_t{1} << 12;
  std::vector<double> part(kPiece);
  const auto rounded = [&](std::size_t at, std::size_t n) {  // masters [at, at + n) rounded to the Weight role
    const std::span<double> r(part.data(), n);
    numerics::widen_binary32(m32.subspan(at, n), r);
    if (round) numerics::round_array(plan, numerics::Rounding::NearestEven, r, r);
    return r;
  };
  if (weights32_) {
    // Binary32 working weights (their values fit: weights32_). Where the rounding changes no master bit pattern
    // (an fp32 Weight role over fp32 masters: every finite binary32 value is left as it is; a piece holding a
    // non-finite value is rounded and compared), the masters themselves are the working weights and no copy is held.
    // The pieces split over the threads (a logical and: the same answer on any thread count); once a piece
    // changes, the others are skipped.
    const bool fp32 = wf == numerics::formats::fp32;
    const auto pieces = static_cast<std::int64_t>((m32.size() + kPiece - 1) / kPiece);
    std::atomic<bool> changed{false};
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < pieces; ++p) {
      if (changed.load(std::memory_order_relaxed)) continue;
      const std::size_t at = static_cast<std::size_t>(p) * kPiece, n = std::min(kPiece, m32.size() - at);
      if (fp32 && numerics::all_finite(m32.subspan(at, n))) continue;
      std::array<double, kPiece> before, after;
      numerics::widen_binary32(m32.subspan(at, n), std::span<double>(before.data(), n));
      numerics::widen_binary32(m32.subspan(at, n), std::span<double>(after.data(), n));
      const std::span<double> a(after.data(), n);
      if (round) numerics::round_array(plan, numerics::Rounding::NearestEven, a, a);
      if (std::memcmp(after.data(), before.data(), n * sizeof(double)) != 0)
        changed.store(true, std::memory_order_relaxed);
    }
    const bool identity = !changed.load();
    derived_identity_ = identity;
    if (identity) {
      weights_.release();
      register_weights(m32);
      return m32;
    }
    weights_.resize(m32.size(), true);
    const std::span<float> out = weights_.values().f32();
    for (std::size_t at = 0; at < m32.size(); at += kPiece) {
      const std::size_t n = std::min(kPiece, m32.size() - at);
      numerics::narrow_to_binary32(rounded(at, n), out.subspan(at, n));  // exact: values of the Weight role
    }
    register_weights(weights_);
    return weights_;
  }
  weights_.resize(m32.size(), false);
  const std::span<double> out = weights_.values().f64();
  for (std::size_t at = 0; at < m32.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, m32.size() - at);
    const std::span<double> r = rounded(at, n);
    std::copy(r.begin(), r.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
  }
  register_weights(weights_);
  return weights_;
}

ops::CValues Transformer::working_weights(std::span<const double> master) {
  const numerics::Format& wf = runner_.policy().storage_for(ops::TensorRole::Weight);
  if (wf == numerics::formats::fp64) return master;
  if (derived_current(master.data(), master.size()))
    return derived_identity_ ? ops::CValues(master) : weights_.cvalues();
  derived_version_ = weights_version_;
  derived_from_ = master.data();
  derived_size_ = master.size();
  const numerics::RoundingPlan plan(wf);
  // When rounding leaves every master bit pattern as it is (fp32 masters read by an fp32 weights role: the
  // fp32 twin, or a policy whose master and weights formats agree), the working copy would equal the
  // masters: read them directly and hold no copy. Checked block by block; the first block that changes
  // stops the check (an fp16 weights role over fp32 masters stops at once).
  // With an fp32 weights role a block of binary32 values (NaN excluded: numerics::all_binary32) is left as it is by
  // the rounding (round_to of a value of the format), so only the blocks that fail that scan are rounded.
  constexpr std::size_t kBlock = 4096;
  std::array<double, kBlock> block;
  bool identity = true;
  const bool fp32 = wf == numerics::formats::fp32;
  for (std::size_t at = 0; at < master.size() && identity; at += kBlock) {
    const std::size_t n = std::min(kBlock, master.size() - at);
    if (fp32 && numerics::all_binary32(master.subspan(at, n))) continue;
    numerics::round_array(plan, numerics::Rounding::NearestEven, master.subspan(at, n), std::span(block).first(n));
    identity = std::memcmp(block.data(), master.data() + at, n * sizeof(double)) == 0;
  }
  derived_identity_ = identity;
  if (identity) {
    weights_.release();
    register_weights(master);
    return master;
  }
  weights_.resize(master.size(), false);
  numerics::round_array(plan, numerics::Rounding::NearestEven, master, weights_.values().f64());
  register_weights(weights_);
  return weights_;
}

Transformer::WeightViews::WeightViews(ops::CValues flat, const ParamLayout& lay) {
  const auto at = [&](ParamTensor t) { return flat.subspan(lay.offset_of(t), lay.size_of(t)); };
  wte = at(ParamTensor::Embedding);
  ln1w = at(ParamTensor::AttnNorm);
  wq = at(ParamTensor::Wq);
  wk = at(ParamTensor::Wk);
  wv = at(ParamTensor::Wv);
  wo = at(ParamTensor::Wo);
  ln2w = at(ParamTensor::FfnNorm);
  w1 = at(ParamTensor::W1);
  w3 = at(ParamTensor::W3);
  w2 = at(ParamTensor::W2);
  lnfw = at(ParamTensor::FinalNorm);
  wcls = at(ParamTensor::Classifier);
}

Transformer::BlockWeights Transformer::block_weights(const WeightViews& p, int l) const {
  const auto at = [&](ops::CValues all) {
    const std::size_t n = all.size() / static_cast<std::size_t>(c_.layers);
    return all.subspan(n * static_cast<std::size_t>(l), n);
  };
  return {at(p.ln1w), at(p.wq), at(p.wk), at(p.wv), at(p.wo), at(p.ln2w), at(p.w1), at(p.w3), at(p.w2)};
}

Transformer::~Transformer() { unregister_weights(); }

void Transformer::weights_changed() {
  unregister_weights();
  weights_version_ = ++versions_;
}

void Transformer::release_weights() {
  unregister_weights();
  weights_version_ = 0;
}

void Transformer::drop_derived() {
  unregister_weights();
  weights_.release();
  derived_version_ = 0;
  derived_from_ = nullptr;
  derived_size_ = 0;
  // The pass buffers too (E11: ≈ 0.3 GiB forward, 0.1 GiB backward), sized again by the next pass as on a first one.
  std::vector<LayerActs>().swap(acts_);
  bw_ = BackwardBuffers{};
  for (ops::Buffer* v : {&x_, &x_final_, &xf_, &rf_, &logits_, &probs_}) v->release();
  std::vector<double>().swap(losses_);
  fwd_B_ = fwd_T_ = bwd_B_ = bwd_T_ = -1;
  std::vector<double>().swap(slice_);
  std::vector<float>().swap(slice32_);
}

void Transformer::register_weights(ops::CValues w) {
  if (weights_version_ == 0) return;  // no promise from the caller: the weights may change between calls
  if (registered_ != nullptr && registered_ != w.data()) unregister_weights();
  w.visit([&](auto s) { runner_.pack_cache().register_immutable(s.data(), s.size(), weights_version_); });
  registered_ = w.data();
}

void Transformer::unregister_weights() {
  if (registered_ == nullptr) return;
  runner_.pack_cache().unregister_immutable(registered_);
  registered_ = nullptr;
}

template <class Master>
double Transformer::total_loss_of(const Batch& b, const Master& master) {
  current_step_ = -1;
  runner_.set_step(-1);
  forward(b, working_weights(master), nullptr);
  double total = 0;
  for (const double l : losses_) total += l;
  return total;
}

double Transformer::total_loss(const Batch& b, std::span<const double> master) { return total_loss_of(b, master); }

double Transformer::training_pass(const Batch& b, ops::CValues w, double loss_scale, const GradOut& grads,
                                  StepTelemetry& telemetry, GradSink sink) {
  // A training forward+backward folds its fp8 operands' amaxes into the delayed-scaling histories, then updates
  // the scales (Transformer Engine: at the end of the forward and of the backward; every tensor is read by one of
  // them, so one update after both is the same): evaluation and shadow passes read the scales only.
  runner_.set_fp8_recording(true);
  // A telemetry step also counts what the fp8 casts saturate and flush to zero (changes no bit).
  const bool count = telemetry.detailed && telemetry.log != nullptr;
  runner_.set_fp8_counting(count);
  forward(b, w, &telemetry);
  backward(b, w, loss_scale, grads, &telemetry, sink);
  runner_.set_fp8_recording(false);
  if (count) {
    runner_.set_fp8_counting(false);
    log_fp8_cast_shares(*telemetry.log, telemetry.step, runner_.fp8_counts());
    runner_.clear_fp8_counts();
  }
  runner_.fp8_update();
  return mean_loss_;
}

double Transformer::loss_and_grad(const Batch& b, std::span<const double> master, double loss_scale,
                                  std::span<double> grads, StepTelemetry& telemetry) {
  current_step_ = telemetry.step;
  runner_.set_step(telemetry.step);
  const ops::CValues w = working_weights(master);
  return training_pass(b, w, loss_scale, GradOut{grads}, telemetry, GradSink{});
}

double Transformer::loss_and_grad_accumulate(const Batch& b, std::span<const double> master, double loss_scale,
                                             std::span<double> grads, std::span<double> total, bool first,
                                             StepTelemetry& telemetry) {
  current_step_ = telemetry.step;
  runner_.set_step(telemetry.step);
  const ops::CValues w = working_weights(master);
  return training_pass(b, w, loss_scale, GradOut{grads}, telemetry, GradSink{total, first});
}

double Transformer::total_loss_stored(const Batch& b, const ParamStore& master) { return total_loss_of(b, master); }

double Transformer::loss_and_grad_stored(const Batch& b, const ParamStore& master, double loss_scale,
                                         ParamStore& grads, StepTelemetry& telemetry) {
  if (grads.kind() == StorageKind::Binary32 && grads_storage() != StorageKind::Binary32)
    throw std::logic_error("loss_and_grad: binary32 gradients under a policy that needs binary64 ones");
  current_step_ = telemetry.step;
  runner_.set_step(telemetry.step);
  const ops::CValues w = working_weights(master);
  return training_pass(b, w, loss_scale, grad_out(grads), telemetry, GradSink{});
}

double Transformer::loss_and_grad_accumulate_stored(const Batch& b, const ParamStore& master, double loss_scale,
                                                    ParamStore& grads, ParamStore& total, bool first,
                                                    StepTelemetry& telemetry) {
  const bool direct_sum = grads.size() == 0;  // no micro-step store
  if (direct_sum && total.kind() != StorageKind::Binary32)  // binary64 gradients: through a temporary store
    return Model::loss_and_grad_accumulate_stored(b, master, loss_scale, grads, total, first, telemetry);
  if ((!direct_sum && grads.kind() != total.kind()) ||
      (total.kind() == StorageKind::Binary32 && grads_storage() != StorageKind::Binary32))
    throw std::logic_error("loss_and_grad_accumulate: gradient stores of another kind than the policy's");
  current_step_ = telemetry.step;
  runner_.set_step(telemetry.step);
  const ops::CValues w = working_weights(master);
  if (direct_sum) {  // each slice summed into the binary32 total as it completes (DirectSink)
    DirectSink direct;
    direct.total = &total;
    direct.first = first;
    GradOut out;
    out.direct = &direct;
    return training_pass(b, w, loss_scale, out, telemetry, GradSink{});
  }
  GradSink sink{{}, first};
  if (total.kind() == StorageKind::Binary64) sink.total = total.binary64();
  else sink.total_store = &total;
  return training_pass(b, w, loss_scale, grad_out(grads), telemetry, sink);
}

void Transformer::shadow(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale,
                         ops::Tape& tape, std::int64_t units, Transformer* reference) {
  ops::Sampling sampling;
  sampling.every = 1;
  sampling.units = units;
  runner_.enable_shadow(&tape, sampling);
  std::vector<double> grads(master.size());
  StepTelemetry tel;
  tel.step = step;
  current_step_ = -2;
  runner_.set_step(step);
  const ops::CValues w = working_weights(master);
  forward(b, w, &tel);
  backward(b, w, loss_scale, grads, &tel, GradSink{});
  runner_.enable_shadow(nullptr);
  if (reference != nullptr) record_global(step, b, master, loss_scale, grads, *reference, tape);
}

namespace {

/// The op whose backward-weight pass produces the gradient of t.
OpKind op_of(ParamTensor t) {
  switch (t) {
    case ParamTensor::Embedding: return OpKind::Embedding;
    case ParamTensor::AttnNorm:
    case ParamTensor::FfnNorm:
    case ParamTensor::FinalNorm: return OpKind::RmsNorm;
    case ParamTensor::Wq:
    case ParamTensor::Wk:
    case ParamTensor::Wv:
    case ParamTensor::Wo:
    case ParamTensor::W1:
    case ParamTensor::W3:
    case ParamTensor::W2: return OpKind::Matmul;
    case ParamTensor::Classifier: return OpKind::Classifier;
  }
  return OpKind::Matmul;
}

}  // namespace

void Transformer::global_error(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale,
                               Transformer& reference, ops::Tape& tape) {
  std::vector<double> grads(master.size());
  current_step_ = -2;  // never the injection step
  runner_.set_step(step);
  const ops::CValues w = working_weights(master);
  forward(b, w, nullptr);
  backward(b, w, loss_scale, grads, nullptr, GradSink{});
  record_global(step, b, master, loss_scale, grads, reference, tape);
}

void Transformer::record_global(std::int64_t step, const Batch& b, std::span<const double> master, double loss_scale,
                                std::span<const double> grads, Transformer& reference, ops::Tape& tape) {
  std::vector<double> g_ref(master.size());
  reference.current_step_ = -2;
  reference.runner_.set_step(step);
  reference.forward(b, master, nullptr);
  reference.backward(b, master, loss_scale, g_ref, nullptr, GradSink{});
  struct ActSite {
    ops::Buffer LayerActs::*member;
    OpKind op;
    const char* tensor;
    bool post_norm_only;
  };
  static constexpr std::array<ActSite, 19> kSites{{
      {&LayerActs::h1, OpKind::RmsNorm, "ln1", false},       {&LayerActs::q, OpKind::Matmul, "q", false},
      {&LayerActs::k, OpKind::Matmul, "k", false},           {&LayerActs::v, OpKind::Matmul, "v", false},
      {&LayerActs::qr, OpKind::RopeRotate, "q", false},      {&LayerActs::kr, OpKind::RopeRotate, "k", false},
      {&LayerActs::preatt, OpKind::AttnScores, "scores", false}, {&LayerActs::att, OpKind::Softmax, "att", false},
      {&LayerActs::y, OpKind::AttnValues, "y", false},       {&LayerActs::o, OpKind::Matmul, "o", false},
      {&LayerActs::pre1, OpKind::ResidualAttn, "x", false},  {&LayerActs::x_mid, OpKind::RmsNorm, "post1", true},
      {&LayerActs::h2, OpKind::RmsNorm, "ln2", false},       {&LayerActs::g, OpKind::Matmul, "w1", false},
      {&LayerActs::u, OpKind::Matmul, "w3", false},          {&LayerActs::a, OpKind::Silu, "silu", false},
      {&LayerActs::z, OpKind::SwiGlu, "z", false},           {&LayerActs::f, OpKind::Matmul, "w2", false},
      {&LayerActs::pre2, OpKind::ResidualFfn, "x", false},
  }};
  runner_.enable_shadow(&tape);  // record_global writes to the tape; no op runs while it is on
  for (int l = 0; l < c_.layers; ++l) {
    const LayerActs &own = acts_[static_cast<std::size_t>(l)], &ref = reference.acts_[static_cast<std::size_t>(l)];
    for (const ActSite& s : kSites) {
      if (s.post_norm_only && !rule_.post_norm) continue;
      if (s.op == OpKind::RmsNorm && !s.post_norm_only && rule_.post_norm) continue;  // h = x: no norm ran
      const bool gelu = gelu_form(c_.ffn).has_value();
      if (gelu && (s.member == &LayerActs::u || s.member == &LayerActs::a)) continue;  // no W3, no SiLU
      const OpKind op = gelu && s.member == &LayerActs::z ? OpKind::Gelu : s.op;     // z = gelu(g)
      runner_.record_global({op, l, s.tensor}, Pass::Forward, wide(own.*s.member), wide(ref.*s.member));
    }
  }
  runner_.record_global({OpKind::RmsNorm, -1, "lnf"}, Pass::Forward, wide(xf_), wide(reference.xf_));
  runner_.record_global({OpKind::Classifier, -1, "logits"}, Pass::Forward, wide(logits_), wide(reference.logits_));
  runner_.record_global({OpKind::CrossEntropy, -1, "loss"}, Pass::Forward, losses_, reference.losses_);
  for (const ParamTensor t : kAllParamTensors) {
    const bool per_layer = t != ParamTensor::Embedding && t != ParamTensor::FinalNorm && t != ParamTensor::Classifier;
    const int layers = lay_.layers[static_cast<std::size_t>(t)];
    const std::size_t n = lay_.layer_size(t);
    if (n == 0) continue;  // the classifier of tied embeddings
    for (int l = 0; l < layers; ++l) {
      const std::size_t off = lay_.offset_of(t) + n * static_cast<std::size_t>(l);
      runner_.record_global({op_of(t), per_layer ? l : -1, name_of(t)}, Pass::BackwardWeight,
                            grads.subspan(off, n), std::span<const double>(g_ref).subspan(off, n));
    }
  }
  runner_.enable_shadow(nullptr);
}

StorageKind Transformer::moments_storage() const {
  const std::array formats{policy().storage_for(ops::TensorRole::AdamM), policy().storage_for(ops::TensorRole::AdamV)};
  return storage_kind_for(formats);
}

namespace {

/// True when every finite value of `narrow` is a value of `wide` (more or equal precision and range, and a least
/// positive value no larger): rounding such values to `wide` changes none of them.
bool holds_values_of(const numerics::Format& wide, const numerics::Format& narrow) {
  const auto least = [](const numerics::Format& f) { return f.emin - (f.subnormals ? f.precision - 1 : 0); };
  return wide.precision >= narrow.precision && wide.emax >= narrow.emax && wide.emin <= narrow.emin &&
         least(wide) <= least(narrow);
}

}  // namespace

StorageKind Transformer::master_storage() const {
  // When the Weight role holds every master value (fp32 masters read as fp32 weights: fp32, ane-fp16, ane-guide; or
  // fp64 weights), the working weights are the masters themselves and no copy is held (working_weights): binary32
  // masters when the working weights are binary32 (weights32_: the ops read them in place; E11: 248 MB instead of
  // 496), else binary64 ones (binary32 masters would need a widened binary64 copy for the ops to read). Otherwise
  // binary32 masters wherever their format fits, and a working copy of the Weight role's width. The choice changes
  // no bit either way.
  const numerics::Format& mf = policy().storage_for(ops::TensorRole::MasterWeight);
  if (holds_values_of(policy().storage_for(ops::TensorRole::Weight), mf))
    return weights32_ && numerics::fits_binary32(mf) ? StorageKind::Binary32 : StorageKind::Binary64;
  return storage_kind_for(mf);
}

StorageKind Transformer::grads_storage() const {
  const ops::Policy& p = policy();
  const numerics::Format& gf = p.storage_for(ops::TensorRole::Gradient);
  const std::array formats{p.at(OpKind::Matmul, Pass::BackwardWeight).storage,
                           p.at(OpKind::Classifier, Pass::BackwardWeight).storage,
                           p.at(OpKind::RmsNorm, Pass::BackwardWeight).storage,
                           p.at(OpKind::Embedding, Pass::BackwardWeight).storage,
                           gf,
                           update_format(gf),
                           numerics::formats::fp32};
  return storage_kind_for(formats);
}

void Transformer::update_tensor(ParamTensor tensor, std::span<double> master, ParamStore& m, ParamStore& v,
                                std::span<const double> grads, const Recipe& recipe, double lr, std::int64_t t,
                                double coef) {
  const std::size_t off = lay_.offset_of(tensor), n = lay_.size_of(tensor);
  update_slice(tensor, master.subspan(off, n), m, v, off, grads.subspan(off, n), recipe, lr, t, coef);
}

void Transformer::update_tensor_stored(ParamTensor tensor, ParamStore& master, ParamStore& m, ParamStore& v,
                                       const ParamStore& grads, const Recipe& recipe, double lr, std::int64_t t,
                                       double coef) {
  // Binary32 masters and gradients: with binary32 moments both read in place (AdamW reads binary32 gradients at
  // their width); else this tensor's elements widened into binary64 slices (the largest tensor at most; the
  // gradients' into the kept slice_), the masters stored back narrowed: exact, the update stores them in the
  // MasterWeight role's format.
  const std::size_t off = lay_.offset_of(tensor), n = lay_.size_of(tensor);
  const bool moments32 = moments_storage() == StorageKind::Binary32;
  const ops::CValues g = moments32 && grads.kind() == StorageKind::Binary32
                             ? ops::CValues(grads.binary32().subspan(off, n))
                             : ops::CValues(grads.view(off, n, slice_));
  if (master.kind() == StorageKind::Binary32 && moments32) {  // in place
    update_slice(tensor, master.binary32().subspan(off, n), m, v, off, g, recipe, lr, t, coef);
    return;
  }
  std::vector<double> w_slice;
  const std::span<double> w = master.view(off, n, w_slice);
  update_slice(tensor, w, m, v, off, g, recipe, lr, t, coef);
  master.store_from(off, w);
}

void Transformer::update_slice(ParamTensor tensor, ops::Values w, ParamStore& m, ParamStore& v, std::size_t off,
                               ops::CValues g, const Recipe& recipe, double lr, std::int64_t t, double coef) {
  unregister_weights();  // the masters change (and with them any working copy): no pack of them stays valid
  const std::size_t n = w.size();
  ops::AdamWConfig cfg;
  cfg.lr = lr;
  cfg.beta1 = recipe.beta1;
  cfg.beta2 = recipe.beta2;
  cfg.eps = recipe.eps;
  cfg.weight_decay = is_decayed(tensor, recipe.decay_embedding) ? recipe.weight_decay : 0.0;
  cfg.grad_scale = coef;
  const ops::Site site{OpKind::AdamW, -1, name_of(tensor)};
  if (w.binary32()) {  // binary32 masters: binary32 moments (update_tensor_stored)
    runner_.adamw_update(site, w.f32(), m.binary32().subspan(off, n), v.binary32().subspan(off, n), g, cfg, t);
    return;
  }
  switch (moments_storage()) {
    case StorageKind::Binary32:
      runner_.adamw_update(site, w.f64(), m.binary32().subspan(off, n), v.binary32().subspan(off, n), g, {}, cfg, t);
      return;
    case StorageKind::Binary64: {  // binary64 moments read binary64 gradients (update_tensor_stored widens them)
      if (g.binary32()) throw std::logic_error("update_slice: binary32 gradients with binary64 moments");
      runner_.adamw_update(site, w.f64(), m.binary64().subspan(off, n), v.binary64().subspan(off, n), g.f64(), {},
                           cfg, t);
      return;
    }
  }
}

}  // namespace roundoff::studies::train
