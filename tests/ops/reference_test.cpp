// Each op's span body against its scalar reference (the per-element definition beside it, slots by construction:
// ops/steps.hpp), bit for bit including NaN encodings, with the fast paths on and off (the span forms' per-element
// fallback), under every span policy (tests/ops/ops_test_util.hpp: stochastic rounding among them, where a key in the
// wrong slot changes the draw, and ftz/daz, directed, saturating, NaN→inf variants) and the four input regimes.
// Under each stochastic policy the test also checks that the keys matter for these inputs: the reference under
// another stream differs somewhere (otherwise a swapped slot could pass unseen).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/adamw.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gqa.hpp"
#include "ops/matmul.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops/policy.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::expect_same;
using test::inputs;
using test::kRegimes;
using test::Regime;
using E = Emulated;
using Vec = std::vector<double>;

/// One op and pass: run(policy, ctx, reference, regime) gives the outputs of the span body (reference false) or of the
/// scalar reference (true) on the regime's inputs (drawn in ctx's storage format).
struct OpCase {
  std::string name;
  OpKind op;
  Pass pass;
  std::function<std::vector<Vec>(const Policy&, const Ctx<E>&, bool, Regime)> run;
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

constexpr RowShape kRows{5, 37};
constexpr auto kN = static_cast<std::size_t>(kRows.rows * kRows.cols);

std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  c.push_back({"silu.fwd", OpKind::Silu, Pass::Forward, []([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto x = inputs(kN, rg, ctx.precision().storage, 501);
                 Vec y(kN, 7.0);
                 if (ref) silu_forward_reference<E>(y, x, kRows, ctx);
                 else silu_forward<E>(y, x, kRows, ctx);
                 return std::vector<Vec>{y};
               }});
  c.push_back({"silu.bwd-data", OpKind::Silu, Pass::BackwardData, []([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto x = inputs(kN, rg, f, 502), dy = inputs(kN, rg, f, 503);
                 Vec dx = inputs(kN, Regime::Normal, f, 504);
                 if (ref) silu_backward_data_reference<E>(dx, dy, x, kRows, ctx);
                 else silu_backward_data<E>(dx, dy, x, kRows, ctx);
                 return std::vector<Vec>{dx};
               }});
  c.push_back({"swiglu.fwd", OpKind::SwiGlu, Pass::Forward, []([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto a = inputs(kN, rg, f, 301), u = inputs(kN, rg, f, 302);
                 Vec h(kN, 7.0);
                 if (ref) swiglu_forward_reference<E>(h, a, u, kRows, ctx);
                 else swiglu_forward<E>(h, a, u, kRows, ctx);
                 return std::vector<Vec>{h};
               }});
  c.push_back({"swiglu.bwd-data", OpKind::SwiGlu, Pass::BackwardData, []([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto a = inputs(kN, rg, f, 303), u = inputs(kN, rg, f, 304), dh = inputs(kN, rg, f, 305);
                 Vec da = inputs(kN, Regime::Normal, f, 306), du = inputs(kN, Regime::Normal, f, 307);
                 if (ref) swiglu_backward_data_reference<E>(da, du, dh, a, u, kRows, ctx);
                 else swiglu_backward_data<E>(da, du, dh, a, u, kRows, ctx);
                 return std::vector<Vec>{da, du};
               }});
  for (const double alpha : {1.0, 0.7}) {
    const std::string a = alpha == 1.0 ? "" : "_alpha07";
    for (const OpKind op : {OpKind::ResidualAttn, OpKind::ResidualFfn}) {
      const std::string site = op == OpKind::ResidualAttn ? "attn" : "ffn";
      c.push_back({"residual." + site + ".fwd" + a, op, Pass::Forward, [alpha]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                     const auto& f = ctx.precision().storage;
                     Vec out = inputs(kN, rg, f, 310);  // out aliases x, as in the model
                     const auto fx = inputs(kN, rg, f, 311);
                     if (ref) residual_forward_reference<E>(out, out, fx, alpha, kRows, ctx);
                     else residual_forward<E>(out, out, fx, alpha, kRows, ctx);
                     return std::vector<Vec>{out};
                   }});
      c.push_back({"residual." + site + ".bwd-data" + a, op, Pass::BackwardData,
                   [alpha]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                     const auto& f = ctx.precision().storage;
                     const auto d = inputs(kN, rg, f, 312);
                     Vec dx = inputs(kN, Regime::Normal, f, 313), df = inputs(kN, Regime::Normal, f, 314);
                     if (ref) residual_backward_data_reference<E>(dx, df, d, alpha, kRows, ctx);
                     else residual_backward_data<E>(dx, df, d, alpha, kRows, ctx);
                     return std::vector<Vec>{dx, df};
                   }});
    }
  }
  // RoPE: 2 sequences of T = 5 tokens, 3 heads of hs = 6 (pairs per head 3), the table from rope_angles.
  static constexpr AttnShape kAttn{2, 3, 5, 6};
  const auto rope_inputs = [](const Ctx<E>& ctx, Regime rg, std::uint64_t seed) {
    const auto& f = ctx.precision().storage;
    const auto n = static_cast<std::size_t>(kAttn.qkv_size());
    Vec cos_t(static_cast<std::size_t>(kAttn.T * kAttn.hs / 2)), sin_t(cos_t.size());
    rope_angles<E>(cos_t, sin_t, kAttn.T, kAttn.hs, 10000.0, ctx);
    return std::vector<Vec>{inputs(n, rg, f, seed, static_cast<std::size_t>(kAttn.C())),
                            inputs(n, Regime::Normal, f, seed + 1), cos_t, sin_t};
  };
  c.push_back({"rope.fwd", OpKind::RopeRotate, Pass::Forward, [rope_inputs]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 auto in = rope_inputs(ctx, rg, 320);
                 Vec& y = in[0];  // y aliases x, as in the model
                 if (ref) rope_forward_reference<E>(y, y, in[2], in[3], kAttn, ctx);
                 else rope_forward<E>(y, y, in[2], in[3], kAttn, ctx);
                 return std::vector<Vec>{y};
               }});
  c.push_back({"rope.bwd-data", OpKind::RopeRotate, Pass::BackwardData,
               [rope_inputs]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 auto in = rope_inputs(ctx, rg, 322);
                 Vec dx = in[1];
                 if (ref) rope_backward_data_reference<E>(dx, in[0], in[2], in[3], kAttn, ctx);
                 else rope_backward_data<E>(dx, in[0], in[2], in[3], kAttn, ctx);
                 return std::vector<Vec>{dx};
               }});
  // Softmax on the causal rows of kAttn's (B, NH, T, T) scores.
  const auto natt = static_cast<std::size_t>(kAttn.att_size()), T = static_cast<std::size_t>(kAttn.T);
  c.push_back({"softmax.fwd", OpKind::Softmax, Pass::Forward, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto pre = inputs(natt, rg, ctx.precision().storage, 325, T);
                 Vec att(natt, 7.0);
                 if (ref) softmax_forward_reference<E>(att, pre, kAttn, ctx);
                 else softmax_forward<E>(att, pre, kAttn, ctx);
                 return std::vector<Vec>{att};
               }});
  c.push_back({"softmax.bwd-data", OpKind::Softmax, Pass::BackwardData, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto att = inputs(natt, rg, f, 326, T), datt = inputs(natt, rg, f, 327, T);
                 Vec dpre = inputs(natt, Regime::Normal, f, 328);
                 if (ref) softmax_backward_data_reference<E>(dpre, datt, att, kAttn, ctx);
                 else softmax_backward_data<E>(dpre, datt, att, kAttn, ctx);
                 return std::vector<Vec>{dpre};
               }});
  // RMSNorm: x without NaN (a NaN makes its row's rstd NaN, and dw sums every row); rstd positive.
  const auto cols = static_cast<std::size_t>(kRows.cols), rows = static_cast<std::size_t>(kRows.rows);
  const auto rstd_of = [rows](const numerics::Format& f, std::uint64_t seed) {
    Vec r = inputs(rows, Regime::Normal, f, seed);
    for (double& v : r) v = std::fabs(v) + 0.5;
    return r;
  };
  c.push_back({"rmsnorm.fwd", OpKind::RmsNorm, Pass::Forward, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto x = inputs(kN, rg, f, 330, cols, false), w = inputs(cols, rg, f, 331);
                 Vec y(kN, 7.0), rstd(rows, 7.0);
                 if (ref) rmsnorm_forward_reference<E>(y, rstd, x, w, kRows, 1e-5, ctx);
                 else rmsnorm_forward<E>(y, rstd, x, w, kRows, 1e-5, ctx);
                 return std::vector<Vec>{y, rstd};
               }});
  c.push_back({"rmsnorm.bwd-data", OpKind::RmsNorm, Pass::BackwardData, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto x = inputs(kN, rg, f, 332, cols, false), w = inputs(cols, Regime::Normal, f, 333),
                            dy = inputs(kN, rg, f, 334, cols), rstd = rstd_of(f, 335);
                 Vec dx = inputs(kN, Regime::Normal, f, 336);
                 if (ref) rmsnorm_backward_data_reference<E>(dx, dy, x, w, rstd, kRows, ctx);
                 else rmsnorm_backward_data<E>(dx, dy, x, w, rstd, kRows, ctx);
                 return std::vector<Vec>{dx};
               }});
  c.push_back({"rmsnorm.bwd-weight", OpKind::RmsNorm, Pass::BackwardWeight, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto x = inputs(kN, rg, f, 337, cols, false), dy = inputs(kN, rg, f, 338, cols, false),
                            rstd = rstd_of(f, 339);
                 Vec dw = inputs(cols, Regime::Normal, f, 340);
                 if (ref) rmsnorm_backward_weight_reference<E>(dw, dy, x, rstd, kRows, ctx);
                 else rmsnorm_backward_weight<E>(dw, dy, x, rstd, kRows, ctx);
                 return std::vector<Vec>{dw};
               }});
  // Cross-entropy: 37 rows of a 23-token vocabulary (two row blocks of the batched denominators: 32 + 5).
  static constexpr RowShape kVocab{37, 23};
  const auto nv = static_cast<std::size_t>(kVocab.size());
  c.push_back({"cross_entropy.fwd", OpKind::CrossEntropy, Pass::Forward, [nv]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto logits = inputs(nv, rg, ctx.precision().storage, 350, static_cast<std::size_t>(kVocab.cols));
                 const auto tg = test::random_tokens(static_cast<std::size_t>(kVocab.rows), 23, 351);
                 Vec losses(static_cast<std::size_t>(kVocab.rows), 7.0), probs(nv, 7.0);
                 if (ref) cross_entropy_forward_reference<E>(losses, probs, logits, tg, kVocab, ctx);
                 else cross_entropy_forward<E>(losses, probs, logits, tg, kVocab, ctx);
                 return std::vector<Vec>{losses, probs};
               }});
  c.push_back({"cross_entropy.bwd-data", OpKind::CrossEntropy, Pass::BackwardData,
               [nv]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto probs = inputs(nv, rg, f, 352);
                 const auto tg = test::random_tokens(static_cast<std::size_t>(kVocab.rows), 23, 353);
                 Vec dl = inputs(nv, Regime::Normal, f, 354);
                 if (ref) cross_entropy_backward_data_reference<E>(dl, probs, tg, 0.25, kVocab, ctx);
                 else cross_entropy_backward_data<E>(dl, probs, tg, 0.25, kVocab, ctx);
                 return std::vector<Vec>{dl};
               }});
  // The attention products: 1 sequence of T = 37 tokens (two bands of the T×T GEMMs: 32 + 5), 2 heads of hs = 6.
  static constexpr AttnShape kLong{1, 2, 37, 6};
  const auto nq = static_cast<std::size_t>(kLong.qkv_size()), na = static_cast<std::size_t>(kLong.att_size());
  const auto lc = static_cast<std::size_t>(kLong.C()), lt = static_cast<std::size_t>(kLong.T);
  c.push_back({"attn_scores.fwd", OpKind::AttnScores, Pass::Forward, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto q = inputs(nq, rg, f, 370, lc), k = inputs(nq, rg, f, 371, lc);
                 Vec pre(na, 7.0);
                 if (ref) attn_scores_forward_reference<E>(pre, q, k, kLong, ctx);
                 else attn_scores_forward<E>(pre, q, k, kLong, ctx);
                 return std::vector<Vec>{pre};
               }});
  c.push_back({"attn_scores.bwd-data", OpKind::AttnScores, Pass::BackwardData,
               [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dpre = inputs(na, rg, f, 372, lt), q = inputs(nq, rg, f, 373, lc),
                            k = inputs(nq, rg, f, 374, lc);
                 Vec dq = inputs(nq, Regime::Normal, f, 375), dk = inputs(nq, Regime::Normal, f, 376);
                 if (ref) attn_scores_backward_data_reference<E>(dq, dk, dpre, q, k, kLong, ctx);
                 else attn_scores_backward_data<E>(dq, dk, dpre, q, k, kLong, ctx);
                 return std::vector<Vec>{dq, dk};
               }});
  c.push_back({"attn_values.fwd", OpKind::AttnValues, Pass::Forward, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto att = inputs(na, rg, f, 377, lt), v = inputs(nq, rg, f, 378, lc);
                 Vec out(nq, 7.0);
                 if (ref) attn_values_forward_reference<E>(out, att, v, kLong, ctx);
                 else attn_values_forward<E>(out, att, v, kLong, ctx);
                 return std::vector<Vec>{out};
               }});
  c.push_back({"attn_values.bwd-data", OpKind::AttnValues, Pass::BackwardData,
               [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dout = inputs(nq, rg, f, 379, lc), att = inputs(na, rg, f, 380, lt),
                            v = inputs(nq, rg, f, 381, lc);
                 Vec datt = inputs(na, Regime::Normal, f, 382), dv = inputs(nq, Regime::Normal, f, 383);
                 if (ref) attn_values_backward_data_reference<E>(datt, dv, dout, att, v, kLong, ctx);
                 else attn_values_backward_data<E>(datt, dv, dout, att, v, kLong, ctx);
                 return std::vector<Vec>{datt, dv};
               }});
  // The projections and the classifier: n = 11 tokens, in = 37, out = 13 (ragged for every GEMM kernel tile). A
  // quantized entry (the block and fp8 presets) runs matmul_quant's exact model, tested in gemm_quant_test.cpp: no
  // outputs here.
  static constexpr MatmulShape kMm{11, 37, 13};
  const auto mn = static_cast<std::size_t>(kMm.n), mi = static_cast<std::size_t>(kMm.in),
             mo = static_cast<std::size_t>(kMm.out);
  for (const OpKind op : {OpKind::Matmul, OpKind::Classifier}) {
    const std::string nm = op == OpKind::Matmul ? "matmul" : "classifier";
    c.push_back({nm + ".fwd", op, Pass::Forward, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                   if (ctx.precision().quant.active()) return std::vector<Vec>{};
                   const auto& f = ctx.precision().storage;
                   const auto x = inputs(mn * mi, rg, f, 390, mi), w = inputs(mo * mi, rg, f, 391, mi);
                   Vec y(mn * mo, 7.0);
                   if (ref) matmul_forward_reference<E>(y, x, w, kMm, ctx);
                   else matmul_forward<E>(y, x, w, kMm, ctx);
                   return std::vector<Vec>{y};
                 }});
    c.push_back({nm + ".bwd-data", op, Pass::BackwardData, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                   if (ctx.precision().quant.active()) return std::vector<Vec>{};
                   const auto& f = ctx.precision().storage;
                   const auto dy = inputs(mn * mo, rg, f, 392, mo), w = inputs(mo * mi, rg, f, 393, mi);
                   Vec dx = inputs(mn * mi, Regime::Normal, f, 394);
                   if (ref) matmul_backward_data_reference<E>(dx, dy, w, kMm, ctx);
                   else matmul_backward_data<E>(dx, dy, w, kMm, ctx);
                   return std::vector<Vec>{dx};
                 }});
    c.push_back({nm + ".bwd-weight", op, Pass::BackwardWeight, [=]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                   if (ctx.precision().quant.active()) return std::vector<Vec>{};
                   const auto& f = ctx.precision().storage;
                   const auto dy = inputs(mn * mo, rg, f, 395, mo), x = inputs(mn * mi, rg, f, 396, mi);
                   Vec dw = inputs(mo * mi, Regime::Normal, f, 397);
                   if (ref) matmul_backward_weight_reference<E>(dw, dy, x, kMm, ctx);
                   else matmul_backward_weight<E>(dw, dy, x, kMm, ctx);
                   return std::vector<Vec>{dw};
                 }});
  }
  // GQA's K/V gradient reduction under the entry the trainer gives it (residual-attn, bwd-data): 5 token rows, 6
  // query heads of hs = 4 onto 2 or 3 KV heads by the block and cyclic maps (the span path) and an irregular map
  // (the reference's own rows).
  const std::vector<std::pair<std::string, std::vector<int>>> maps{
      {"block2", {0, 0, 0, 1, 1, 1}}, {"cyclic3", {0, 1, 2, 0, 1, 2}}, {"irregular2", {0, 0, 1, 0, 1, 1}}};
  for (const auto& named_map : maps) {
    const std::vector<int> map = named_map.second;
    const std::int64_t nkv = *std::max_element(map.begin(), map.end()) + 1;
    c.push_back({"kv_reduce.bwd-data_" + named_map.first, OpKind::ResidualAttn, Pass::BackwardData,
                 [map, nkv]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                   const auto& f = ctx.precision().storage;
                   constexpr std::size_t tokens = 5, hs = 4;
                   const auto dfull = inputs(tokens * map.size() * hs, rg, f, 398, map.size() * hs);
                   Vec dkv = inputs(tokens * static_cast<std::size_t>(nkv) * hs, Regime::Normal, f, 399);
                   constexpr auto hsi = static_cast<std::int64_t>(hs);
                   if (ref) kv_reduce_backward_reference<E>(dkv, dfull, map, nkv, hsi, ctx);
                   else kv_reduce_backward<E>(dkv, dfull, map, nkv, hsi, ctx);
                   return std::vector<Vec>{dkv};
                 }});
  }
  // AdamW: two full blocks of the binary32 path and a ragged one; the master, m, v, weight formats of the policy.
  for (const double gs : {1.0, 1.0 / 256})
    c.push_back({gs == 1.0 ? "adamw" : "adamw_unscale", OpKind::AdamW, Pass::Forward,
                 [gs]([[maybe_unused]] const Policy& pol, const Ctx<E>& ctx, bool ref, Regime rg) {
                   const std::size_t n = 2 * detail::kAdamWBlock + 13;
                   const AdamWFormats f(pol);
                   const numerics::Format& fp32 = numerics::formats::fp32;
                   Vec w = inputs(n, Regime::Normal, fp32, 360), m = inputs(n, Regime::Normal, fp32, 361),
                       v = inputs(n, Regime::Normal, fp32, 362), weights(n, 5.0);
                   const auto g = inputs(n, rg, fp32, 363);
                   for (double& x : v) x = std::fabs(x);
                   AdamWConfig cfg;
                   cfg.grad_scale = gs;
                   if (ref) adamw_update_reference<E>(w, m, v, g, weights, cfg, 3, f, ctx);
                   else adamw_update<E>(w, m, v, g, weights, cfg, 3, f, ctx);
                   return std::vector<Vec>{w, m, v, weights};
                 }});
  return c;
}

std::vector<std::string> specs() {
  std::vector<std::string> p = test::span_policies();
  p.push_back("ane-guide,silu.approx=ane-lut,softmax.approx=ane-lut");
  p.push_back("ane-guide,silu.approx=ane-lut,softmax.approx=ane-lut,all.rounding=stochastic");
  p.push_back("pure-bf16,all.rounding=stochastic");
  // Stochastic accumulation (the GEMMs' and dots' own streams): alone, and with stochastic elementwise rounding.
  p.push_back("ane-fp16,all.acc=fp16-sr");
  p.push_back("pure-bf16,all.rounding=stochastic,all.acc=bf16-sr");
  // Stochastic rounding where a GEMM's outputs are not exact in compute or storage (see outputs_may_be_exact): the
  // conversion to compute rounds (fp32 accumulator, fp16 compute), or the store does (fp32 compute, bf16 storage).
  p.push_back("ane-fp16,all.rounding=stochastic,all.acc=fp32-seq");
  p.push_back("amp-bf16,all.rounding=stochastic");
  return p;
}

bool differ(const std::vector<Vec>& a, const std::vector<Vec>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j)
      if (!test::same(a[i][j], b[i][j])) return true;
  return false;
}

/// Ops whose outputs are reduction results taken from the accumulator (a GEMM's; att·V's): where the accumulation,
/// compute and storage share one format and the accumulation rounds to nearest (ane-fp16, pure-bf16), their
/// conversion and store round nothing, so no stream can change their bits there. For them the check asks the stream
/// to matter under two of the stochastic policies (specs() has policies where the conversion or the store rounds)
/// rather than under every one.
bool outputs_may_be_exact(const OpCase& c) {
  return c.op == OpKind::Matmul || c.op == OpKind::Classifier || (c.op == OpKind::AttnValues && c.pass == Pass::Forward);
}

void check(const OpCase& oc) {
  int stochastic_cases = 0, stream_matters = 0;
  for (const std::string& spec : specs()) {
    const Policy pol = load_policy(spec);
    const Ctx<E> c(pol.at(oc.op, oc.pass), {6, 1 + static_cast<std::uint64_t>(oc.pass)});
    for (Regime rg : kRegimes) {
      const std::string what = oc.name + " " + spec + " regime " + std::to_string(static_cast<int>(rg));
      const auto want = oc.run(pol, c, true, rg);
      for (const bool fast : {true, false}) {
        const auto got = oc.run(pol, test::on(c, ::roundoff::test::exec_for(fast, {})), false, rg);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          expect_same(got[i], want[i], what + (fast ? " fast" : " per-element") + " out " + std::to_string(i), true);
      }
      if (c.precision().rounding == numerics::Rounding::Stochastic && rg == Regime::Normal && !want.empty()) {
        ++stochastic_cases;
        const Ctx<E> other(c.precision(), {6, 99});
        const bool d = differ(oc.run(pol, other, true, rg), want);
        stream_matters += d ? 1 : 0;
        if (!outputs_may_be_exact(oc)) {
          EXPECT_TRUE(d) << what << ": another stream gives the same bits";
        }
      }
    }
  }
  EXPECT_GE(stochastic_cases, 3) << oc.name;
  EXPECT_GE(stream_matters, 2) << oc.name << ": another stream changes the bits under too few stochastic policies";
}

class OpReference : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpReference, SpanBodyEqualsTheScalarReference) { check(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, OpReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<OpCase>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

/// Where an op's reference stands. A switch over OpKind: a new op does not compile here until it is placed.
enum class RefKind {
  Case,        ///< a span body and a scalar *_reference beside it: a case in cases()
  ScalarBody,  ///< one scalar body on Steps, its own reference (no fast path to compare)
};
RefKind reference_of(OpKind k) {
  switch (k) {
    case OpKind::Silu:
    case OpKind::SwiGlu:
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn:
    case OpKind::RopeRotate:
    case OpKind::RmsNorm:
    case OpKind::CrossEntropy:
    case OpKind::AdamW:
    case OpKind::Softmax:  // online attention and softmax_from_lse (ops/online_attention.hpp): scalar bodies
    case OpKind::Matmul:
    case OpKind::Classifier:
    case OpKind::AttnScores:
    case OpKind::AttnValues:
      return RefKind::Case;
    case OpKind::Embedding:
    case OpKind::RopeAngles:
    case OpKind::Gelu:
      return RefKind::ScalarBody;
  }
  return RefKind::ScalarBody;
}

TEST(OpReferenceCoverage, EveryOpMarkedCaseHasOne) {
  const std::vector<OpCase> all = cases();
  for (const OpKind k : kAllOps) {
    if (reference_of(k) != RefKind::Case) continue;
    bool found = false;
    for (const OpCase& oc : all) found = found || oc.op == k;
    EXPECT_TRUE(found) << name_of(k) << ": marked RefKind::Case but no case in cases() runs it";
  }
}

TEST(OpReferenceSlots, AdamWCopyTakesTheSlotAfterTheUpdate) {
  // adamw_update's fast path stores the working copy with slot kAdamWUpdateSlots (the binary32 path rounds to
  // nearest, so no bits would show a wrong slot there): the scalar element takes exactly that many before it.
  const Policy pol = load_policy("ane-fp16,all.rounding=stochastic");
  const Ctx<E> c(pol.at(OpKind::AdamW, Pass::Forward), {1, 2});
  const AdamWFormats f(pol);
  Vec w{0.5}, m{0.1}, v{0.2}, weights{0.0};
  const Vec g{0.3};
  for (const bool unscale : {false, true}) {
    const auto k = detail::adamw_constants(AdamWConfig{}, 1, c);
    EXPECT_EQ(detail::adamw_element<E>(0, w, m, v, g, weights, unscale, k, f, c), detail::kAdamWUpdateSlots);
  }
}

}  // namespace
}  // namespace roundoff::ops
