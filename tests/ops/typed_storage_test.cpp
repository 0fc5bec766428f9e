// Typed storage (issue 45, docs/design.md "Typed storage"): the ops' span bodies on tensors in binary32 storage give,
// widened, exactly the binary64 bodies' outputs, NaN encodings included, under every span policy whose entry's storage
// fits binary32 (stochastic, directed, saturating, NaN→inf and flush-to-zero variants among them), the four input
// regimes, fast paths on and off; a store into binary32 under a storage format that does not fit it is refused;
// and the fast bodies of either width equal the per-element definitions.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/gelu.hpp"
#include "ops/matmul.hpp"
#include "ops/online_attention.hpp"
#include "ops/policy.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::expect_same;
using test::inputs;
using test::kRegimes;
using test::Regime;
using test::to_float;
using E = Emulated;
using Vec = std::vector<double>;
using FVec = std::vector<float>;

Vec widen(const FVec& v) { return {v.begin(), v.end()}; }

constexpr RowShape kRows{5, 37};
constexpr auto kN = static_cast<std::size_t>(kRows.rows * kRows.cols);
constexpr AttnShape kAttn{2, 2, 3, 6};  // B = 2, 2 heads of 6, T = 3
constexpr auto kAtt = static_cast<std::size_t>(2 * 2 * 3 * 3);  // (B, NH, T, T)
constexpr MatmulShape kMm{5, 37, 11};                           // n = kRows.rows, in = kRows.cols

/// One op and pass, run on binary64 tensors (f32 false) or on the same values in binary32 storage (true); the
/// outputs as binary64.
struct IoCase {
  std::string name;
  OpKind op;
  Pass pass;
  std::function<std::vector<Vec>(const Ctx<E>&, bool, Regime)> run;
  bool refuses = true;  ///< whether the binary32 form refuses a storage beyond binary32 (false: no binary32 output)
};

std::vector<IoCase> cases() {
  std::vector<IoCase> c;
  c.push_back({"silu.fwd", OpKind::Silu, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto x = inputs(kN, rg, ctx.precision().storage, 501);
                 if (!f32) {
                   Vec y(kN, 7.0);
                   silu_forward<E>(y, x, kRows, ctx);
                   return std::vector<Vec>{y};
                 }
                 FVec y(kN, 7.0f);
                 const FVec xf = to_float(x);
                 silu_forward(y, xf, kRows, ctx);
                 return std::vector<Vec>{widen(y)};
               }});
  // silu_backward_data on binary64 tensors or (f32) binary32 ones: dx.
  const auto silu_bwd = [](const Ctx<E>& ctx, bool f32, const Vec& x, const Vec& dy, Vec dx) {
    if (!f32) {
      silu_backward_data<E>(dx, dy, x, kRows, ctx);
      return std::vector<Vec>{dx};
    }
    FVec dxf = to_float(dx);
    const FVec xf = to_float(x), dyf = to_float(dy);
    silu_backward_data(dxf, dyf, xf, kRows, ctx);
    return std::vector<Vec>{widen(dxf)};
  };
  c.push_back({"silu.bwd-data", OpKind::Silu, Pass::BackwardData,
               [silu_bwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 return silu_bwd(ctx, f32, inputs(kN, rg, f, 502), inputs(kN, rg, f, 503),
                                 inputs(kN, Regime::Normal, f, 504));
               }});
  // Tensors of binary32 values that are not all values of the storage format (a tensor an fp32 op wrote, read by an
  // fp16 op): where compute and storage are fp16 (Ctx::binary16_through) the binary32 bodies, which skip the entry
  // casts, must decline such a call. Here only the in-out dx (rope.fwd-wide: every input).
  c.push_back({"silu.bwd-data-wide", OpKind::Silu, Pass::BackwardData,
               [silu_bwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 return silu_bwd(ctx, f32, inputs(kN, rg, f, 512), inputs(kN, rg, f, 513),
                                 inputs(kN, Regime::Normal, numerics::formats::fp32, 514));
               }});
  c.push_back({"swiglu.fwd", OpKind::SwiGlu, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto a = inputs(kN, rg, f, 301), u = inputs(kN, rg, f, 302);
                 if (!f32) {
                   Vec h(kN, 7.0);
                   swiglu_forward<E>(h, a, u, kRows, ctx);
                   return std::vector<Vec>{h};
                 }
                 FVec h(kN, 7.0f);
                 const FVec af = to_float(a), uf = to_float(u);
                 swiglu_forward(h, af, uf, kRows, ctx);
                 return std::vector<Vec>{widen(h)};
               }});
  c.push_back({"swiglu.bwd-data", OpKind::SwiGlu, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dh = inputs(kN, rg, f, 303), a = inputs(kN, rg, f, 304), u = inputs(kN, rg, f, 305);
                 Vec da = inputs(kN, Regime::Normal, f, 306), du = inputs(kN, Regime::Normal, f, 307);
                 if (!f32) {
                   swiglu_backward_data<E>(da, du, dh, a, u, kRows, ctx);
                   return std::vector<Vec>{da, du};
                 }
                 FVec daf = to_float(da), duf = to_float(du);
                 const FVec dhf = to_float(dh), af = to_float(a), uf = to_float(u);
                 swiglu_backward_data(daf, duf, dhf, af, uf, kRows, ctx);
                 return std::vector<Vec>{widen(daf), widen(duf)};
               }});
  // rmsnorm: row-shaped inputs keep two rows in three finite (in_special_block); w stays finite in dx, whose every
  // row reads all of it.
  constexpr auto kR = static_cast<std::size_t>(kRows.rows), kC = static_cast<std::size_t>(kRows.cols);
  // rmsnorm_forward on x and w as binary64 tensors or (f32) as binary32 ones: y and rstd.
  const auto rmsnorm_fwd = [](const Ctx<E>& ctx, bool f32, const Vec& x, const Vec& w) {
    if (!f32) {
      Vec y(kN, 7.0), r(kR, 7.0);
      rmsnorm_forward<E>(y, r, x, w, kRows, 1e-5, ctx);
      return std::vector<Vec>{y, r};
    }
    FVec y(kN, 7.0f), r(kR, 7.0f);
    const FVec xf = to_float(x), wf = to_float(w);
    rmsnorm_forward(y, r, xf, wf, kRows, 1e-5, ctx);
    return std::vector<Vec>{widen(y), widen(r)};
  };
  c.push_back({"rmsnorm.fwd", OpKind::RmsNorm, Pass::Forward, [rmsnorm_fwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 return rmsnorm_fwd(ctx, f32, inputs(kN, rg, f, 601, kC), inputs(kC, rg, f, 602));
               }});
  // x with ±inf but no NaN (Specials regime): a row's sum of squares is +inf, not NaN, so the binary32 chains hold
  // for every row while that row's (x·r)·w = ±inf·0 is NaN and the row takes the binary64 form.
  c.push_back({"rmsnorm.fwd-inf", OpKind::RmsNorm, Pass::Forward,
               [rmsnorm_fwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 return rmsnorm_fwd(ctx, f32, inputs(kN, rg, f, 612, kC, false), inputs(kC, Regime::Normal, f, 613));
               }});
  c.push_back({"rmsnorm.bwd-data", OpKind::RmsNorm, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dy = inputs(kN, rg, f, 603, kC), x = inputs(kN, rg, f, 604, kC), w = inputs(kC, rg, f, 605, kC),
                            rstd = inputs(kR, Regime::Normal, f, 606);
                 Vec dx = inputs(kN, Regime::Normal, f, 607);
                 // A NaN already in dx, in a row whose dy, x and w are finite in every regime: its row reductions
                 // are finite (the binary32 chains hold in the Normal regime) while its store is NaN, so the row
                 // takes the binary64 form after the binary32 products and chains.
                 dx[2 * kC + 5] = std::numeric_limits<double>::quiet_NaN();
                 if (!f32) {
                   rmsnorm_backward_data<E>(dx, dy, x, w, rstd, kRows, ctx);
                   return std::vector<Vec>{dx};
                 }
                 FVec dxf = to_float(dx);
                 const FVec dyf = to_float(dy), xf = to_float(x), wf = to_float(w), rf = to_float(rstd);
                 rmsnorm_backward_data(dxf, dyf, xf, wf, rf, kRows, ctx);
                 return std::vector<Vec>{widen(dxf)};
               }});
  c.push_back({"rmsnorm.bwd-weight", OpKind::RmsNorm, Pass::BackwardWeight,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dy = inputs(kN, rg, f, 608, kC), x = inputs(kN, rg, f, 609, kC),
                            rstd = inputs(kR, Regime::Normal, f, 610);
                 Vec dw = inputs(kC, Regime::Normal, f, 611);
                 if (!f32) {
                   rmsnorm_backward_weight<E>(dw, dy, x, rstd, kRows, ctx);
                   return std::vector<Vec>{dw};
                 }
                 FVec dwf = to_float(dw);
                 const FVec dyf = to_float(dy), xf = to_float(x), rf = to_float(rstd);
                 rmsnorm_backward_weight(dwf, dyf, xf, rf, kRows, ctx);
                 return std::vector<Vec>{widen(dwf)};
               }});
  c.push_back({"cross_entropy.fwd", OpKind::CrossEntropy, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto logits = inputs(kN, rg, ctx.precision().storage, 701, kC);
                 const std::vector<std::int32_t> targets{0, 36, 5, 17, 2};
                 Vec losses(kR, 7.0);
                 if (!f32) {
                   Vec probs(kN, 7.0);
                   cross_entropy_forward<E>(losses, probs, logits, targets, kRows, ctx);
                   return std::vector<Vec>{losses, probs};
                 }
                 FVec probs(kN, 7.0f);
                 const FVec lf = to_float(logits);
                 cross_entropy_forward(losses, probs, lf, targets, kRows, ctx);
                 return std::vector<Vec>{losses, widen(probs)};
               }});
  c.push_back({"cross_entropy.bwd-data", OpKind::CrossEntropy, Pass::BackwardData,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto probs = inputs(kN, rg, f, 702, kC);
                 const std::vector<std::int32_t> targets{3, 0, 36, 11, 20};
                 Vec dl = inputs(kN, Regime::Normal, f, 703);
                 if (!f32) {
                   cross_entropy_backward_data<E>(dl, probs, targets, 256.0, kRows, ctx);
                   return std::vector<Vec>{dl};
                 }
                 FVec dlf = to_float(dl);
                 const FVec pf = to_float(probs);
                 cross_entropy_backward_data(dlf, pf, targets, 256.0, kRows, ctx);
                 return std::vector<Vec>{widen(dlf)};
               }});
  // rope (kAttn): rows of 12; the table (T, hs/2) in the same storage.
  constexpr auto kAN = static_cast<std::size_t>(2 * 3 * 12), kTab = std::size_t{3 * 3};
  // rope_forward in place (y aliases x, as the model's rotation) on binary64 or (f32) binary32 tensors: y.
  const auto rope_fwd = [](const Ctx<E>& ctx, bool f32, const Vec& x, const Vec& ct, const Vec& st) {
    if (!f32) {
      Vec y(kAN, 7.0);
      rope_forward<E>(y, x, ct, st, kAttn, ctx);
      return std::vector<Vec>{y};
    }
    FVec y = to_float(x);
    const FVec cf = to_float(ct), sf = to_float(st);
    rope_forward(y, y, cf, sf, kAttn, ctx);
    return std::vector<Vec>{widen(y)};
  };
  c.push_back({"rope.fwd", OpKind::RopeRotate, Pass::Forward, [rope_fwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 return rope_fwd(ctx, f32, inputs(kAN, rg, f, 801, 12), inputs(kTab, Regime::Normal, f, 802),
                                 inputs(kTab, Regime::Normal, f, 803));
               }});
  c.push_back({"rope.fwd-wide", OpKind::RopeRotate, Pass::Forward, [rope_fwd](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const numerics::Format& f = numerics::formats::fp32;  // not storage values
                 return rope_fwd(ctx, f32, inputs(kAN, rg, f, 811, 12), inputs(kTab, Regime::Normal, f, 812),
                                 inputs(kTab, Regime::Normal, f, 813));
               }});
  c.push_back({"rope.bwd-data", OpKind::RopeRotate, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dy = inputs(kAN, rg, f, 804, 12), ct = inputs(kTab, Regime::Normal, f, 805),
                            st = inputs(kTab, Regime::Normal, f, 806);
                 Vec dx = inputs(kAN, Regime::Normal, f, 807);
                 if (!f32) {
                   rope_backward_data<E>(dx, dy, ct, st, kAttn, ctx);
                   return std::vector<Vec>{dx};
                 }
                 FVec dxf = to_float(dx);
                 const FVec dyf = to_float(dy), cf = to_float(ct), sf = to_float(st);
                 rope_backward_data(dxf, dyf, cf, sf, kAttn, ctx);
                 return std::vector<Vec>{widen(dxf)};
               }});
  // softmax (kAttn): (B·NH·T, T) rows of 3, causal; the specials block keeps two rows in three finite.
  c.push_back({"softmax.fwd", OpKind::Softmax, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto pre = inputs(kAtt, rg, ctx.precision().storage, 901, 3);
                 if (!f32) {
                   Vec att(kAtt, 7.0);
                   softmax_forward<E>(att, pre, kAttn, ctx);
                   return std::vector<Vec>{att};
                 }
                 FVec att(kAtt, 7.0f);
                 const FVec pf = to_float(pre);
                 softmax_forward(att, pf, kAttn, ctx);
                 return std::vector<Vec>{widen(att)};
               }});
  c.push_back({"softmax.bwd-data", OpKind::Softmax, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto datt = inputs(kAtt, rg, f, 902, 3), att = inputs(kAtt, rg, f, 903, 3);
                 Vec dp = inputs(kAtt, Regime::Normal, f, 904);
                 if (!f32) {
                   softmax_backward_data<E>(dp, datt, att, kAttn, ctx);
                   return std::vector<Vec>{dp};
                 }
                 FVec dpf = to_float(dp);
                 const FVec df = to_float(datt), af = to_float(att);
                 softmax_backward_data(dpf, df, af, kAttn, ctx);
                 return std::vector<Vec>{widen(dpf)};
               }});
  // embedding: 5 tokens (one repeated, so that backward adds twice into a row) of a vocabulary of 4, rows of 37.
  c.push_back({"embedding.fwd", OpKind::Embedding, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto wte = inputs(4 * kC, rg, ctx.precision().storage, 1101, kC);
                 const std::vector<std::int32_t> tokens{1, 3, 1, 0, 2};
                 if (!f32) {
                   Vec out(kN, 7.0);
                   embedding_forward<E>(out, tokens, wte, kRows, ctx);
                   return std::vector<Vec>{out};
                 }
                 FVec out(kN, 7.0f);
                 const FVec wf = to_float(wte);
                 embedding_forward(out, tokens, wf, kRows, ctx);
                 return std::vector<Vec>{widen(out)};
               }});
  c.push_back({"embedding.bwd-weight", OpKind::Embedding, Pass::BackwardWeight,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dout = inputs(kN, rg, f, 1102, kC);
                 const std::vector<std::int32_t> tokens{1, 3, 1, 0, 2};
                 Vec dw = inputs(4 * kC, Regime::Normal, f, 1103);
                 if (!f32) {
                   embedding_backward_weight<E>(dw, dout, tokens, kRows, ctx);
                   return std::vector<Vec>{dw};
                 }
                 FVec dwf = to_float(dw);
                 const FVec df = to_float(dout);
                 embedding_backward_weight(dwf, df, tokens, kRows, ctx);
                 return std::vector<Vec>{widen(dwf)};
               }});
  // attention products (kAttn): q, k, v, dout (B, T, NH·hs) in rows of 12; preatt, att and their gradients
  // (B, NH, T, T) in rows of 3.
  c.push_back({"attn_scores.fwd", OpKind::AttnScores, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto q = inputs(kAN, rg, f, 1201, 12), k = inputs(kAN, rg, f, 1202, 12);
                 if (!f32) {
                   Vec pre(kAtt, 7.0);
                   attn_scores_forward<E>(pre, q, k, kAttn, ctx);
                   return std::vector<Vec>{pre};
                 }
                 FVec pre(kAtt, 7.0f);
                 const FVec qf = to_float(q), kf = to_float(k);
                 attn_scores_forward(pre, qf, kf, kAttn, ctx);
                 return std::vector<Vec>{widen(pre)};
               }});
  c.push_back({"attn_scores.bwd-data", OpKind::AttnScores, Pass::BackwardData,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dpre = inputs(kAtt, rg, f, 1203, 3), q = inputs(kAN, rg, f, 1204, 12),
                            k = inputs(kAN, rg, f, 1205, 12);
                 Vec dq = inputs(kAN, Regime::Normal, f, 1206), dk = inputs(kAN, Regime::Normal, f, 1207);
                 if (!f32) {
                   attn_scores_backward_data<E>(dq, dk, dpre, q, k, kAttn, ctx);
                   return std::vector<Vec>{dq, dk};
                 }
                 FVec dqf = to_float(dq), dkf = to_float(dk);
                 const FVec df = to_float(dpre), qf = to_float(q), kf = to_float(k);
                 attn_scores_backward_data(dqf, dkf, df, qf, kf, kAttn, ctx);
                 return std::vector<Vec>{widen(dqf), widen(dkf)};
               }});
  c.push_back({"attn_values.fwd", OpKind::AttnValues, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto att = inputs(kAtt, rg, f, 1208, 3), v = inputs(kAN, rg, f, 1209, 12);
                 if (!f32) {
                   Vec out(kAN, 7.0);
                   attn_values_forward<E>(out, att, v, kAttn, ctx);
                   return std::vector<Vec>{out};
                 }
                 FVec out(kAN, 7.0f);
                 const FVec af = to_float(att), vf = to_float(v);
                 attn_values_forward(out, af, vf, kAttn, ctx);
                 return std::vector<Vec>{widen(out)};
               }});
  c.push_back({"attn_values.bwd-data", OpKind::AttnValues, Pass::BackwardData,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dout = inputs(kAN, rg, f, 1210, 12), att = inputs(kAtt, rg, f, 1211, 3),
                            v = inputs(kAN, rg, f, 1212, 12);
                 Vec datt = inputs(kAtt, Regime::Normal, f, 1213), dv = inputs(kAN, Regime::Normal, f, 1214);
                 if (!f32) {
                   attn_values_backward_data<E>(datt, dv, dout, att, v, kAttn, ctx);
                   return std::vector<Vec>{datt, dv};
                 }
                 FVec dattf = to_float(datt), dvf = to_float(dv);
                 const FVec df = to_float(dout), af = to_float(att), vf = to_float(v);
                 attn_values_backward_data(dattf, dvf, df, af, vf, kAttn, ctx);
                 return std::vector<Vec>{widen(dattf), widen(dvf)};
               }});
  // online attention (kAttn) under one context for both its softmax and values entries.
  c.push_back({"online_attention.fwd", OpKind::Softmax, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto pre = inputs(kAtt, rg, f, 1301, 3), v = inputs(kAN, rg, f, 1302, 12);
                 constexpr auto kL = std::size_t{2 * 2 * 3};
                 if (!f32) {
                   Vec y(kAN, 7.0), lse(kL, 7.0);
                   online_attention_forward<E>(y, lse, pre, v, kAttn, ctx, ctx);
                   return std::vector<Vec>{y, lse};
                 }
                 FVec y(kAN, 7.0f), lse(kL, 7.0f);
                 const FVec pf = to_float(pre), vf = to_float(v);
                 online_attention_forward(y, lse, pf, vf, kAttn, ctx, ctx);
                 return std::vector<Vec>{widen(y), widen(lse)};
               }});
  c.push_back({"softmax_from_lse", OpKind::Softmax, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto pre = inputs(kAtt, rg, f, 1303, 3), lse = inputs(2 * 2 * 3, Regime::Normal, f, 1304);
                 if (!f32) {
                   Vec att(kAtt, 7.0);
                   softmax_from_lse<E>(att, pre, lse, kAttn, ctx);
                   return std::vector<Vec>{att};
                 }
                 FVec att(kAtt, 7.0f);
                 const FVec pf = to_float(pre), lf = to_float(lse);
                 softmax_from_lse(att, pf, lf, kAttn, ctx);
                 return std::vector<Vec>{widen(att)};
               }});
  // matmul: x (5, 37) · W (11, 37)ᵀ; the weights and dW binary64 (the model's), the activations binary32.
  constexpr auto kW = std::size_t{11 * 37}, kY = std::size_t{5 * 11};
  c.push_back({"matmul.fwd", OpKind::Matmul, Pass::Forward, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto x = inputs(kN, rg, f, 1401, kC), w = inputs(kW, rg, f, 1402, kC);
                 if (!f32) {
                   Vec y(kY, 7.0);
                   matmul_forward<E>(y, x, w, kMm, ctx);
                   return std::vector<Vec>{y};
                 }
                 FVec y(kY, 7.0f);
                 const FVec xf = to_float(x);
                 matmul_forward(y, xf, w, kMm, ctx);
                 return std::vector<Vec>{widen(y)};
               }});
  c.push_back({"matmul.bwd-data", OpKind::Matmul, Pass::BackwardData, [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dy = inputs(kY, rg, f, 1403, 11), w = inputs(kW, rg, f, 1404, 37);
                 Vec dx = inputs(kN, Regime::Normal, f, 1405);
                 if (!f32) {
                   matmul_backward_data<E>(dx, dy, w, kMm, ctx);
                   return std::vector<Vec>{dx};
                 }
                 FVec dxf = to_float(dx);
                 const FVec dyf = to_float(dy);
                 matmul_backward_data(dxf, dyf, w, kMm, ctx);
                 return std::vector<Vec>{widen(dxf)};
               }});
  c.push_back({"matmul.bwd-weight", OpKind::Matmul, Pass::BackwardWeight,
               [](const Ctx<E>& ctx, bool f32, Regime rg) {
                 const auto& f = ctx.precision().storage;
                 const auto dy = inputs(kY, rg, f, 1406, 1), x = inputs(kN, rg, f, 1407, 1);
                 Vec dw = inputs(kW, Regime::Normal, f, 1408);
                 if (!f32) {
                   matmul_backward_weight<E>(dw, dy, x, kMm, ctx);
                   return std::vector<Vec>{dw};
                 }
                 const FVec dyf = to_float(dy), xf = to_float(x);
                 matmul_backward_weight(dw, dyf, xf, kMm, ctx);
                 return std::vector<Vec>{dw};
               },
               false});
  for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    const std::string tag = form == GeluForm::Erf ? "_erf" : "_tanh";
    c.push_back({"gelu.fwd" + tag, OpKind::Gelu, Pass::Forward, [form](const Ctx<E>& ctx, bool f32, Regime rg) {
                   const auto x = inputs(kN, rg, ctx.precision().storage, 1001);
                   if (!f32) {
                     Vec y(kN, 7.0);
                     gelu_forward<E>(y, x, kRows, form, ctx);
                     return std::vector<Vec>{y};
                   }
                   FVec y(kN, 7.0f);
                   const FVec xf = to_float(x);
                   gelu_forward(y, xf, kRows, form, ctx);
                   return std::vector<Vec>{widen(y)};
                 }});
    c.push_back({"gelu.bwd-data" + tag, OpKind::Gelu, Pass::BackwardData,
                 [form](const Ctx<E>& ctx, bool f32, Regime rg) {
                   const auto& f = ctx.precision().storage;
                   const auto x = inputs(kN, rg, f, 1002), dy = inputs(kN, rg, f, 1003);
                   Vec dx = inputs(kN, Regime::Normal, f, 1004);
                   if (!f32) {
                     gelu_backward_data<E>(dx, dy, x, kRows, form, ctx);
                     return std::vector<Vec>{dx};
                   }
                   FVec dxf = to_float(dx);
                   const FVec xf = to_float(x), dyf = to_float(dy);
                   gelu_backward_data(dxf, dyf, xf, kRows, form, ctx);
                   return std::vector<Vec>{widen(dxf)};
                 }});
  }
  for (const double alpha : {1.0, 0.35355339059327373}) {  // β = 1 skips the scaling slot; 1/√8 takes it
    const std::string tag = alpha == 1.0 ? "" : "_beta";
    c.push_back({"residual.fwd" + tag, OpKind::ResidualFfn, Pass::Forward,
                 [alpha](const Ctx<E>& ctx, bool f32, Regime rg) {
                   const auto& f = ctx.precision().storage;
                   const auto x = inputs(kN, rg, f, 401), br = inputs(kN, rg, f, 402);
                   if (!f32) {
                     Vec out(kN, 7.0);
                     residual_forward<E>(out, x, br, alpha, kRows, ctx);
                     return std::vector<Vec>{out};
                   }
                   FVec out = to_float(x);  // out aliases x, as the model's stream update does
                   const FVec bf = to_float(br);
                   residual_forward(out, out, bf, alpha, kRows, ctx);
                   return std::vector<Vec>{widen(out)};
                 }});
    c.push_back({"residual.bwd-data" + tag, OpKind::ResidualFfn, Pass::BackwardData,
                 [alpha](const Ctx<E>& ctx, bool f32, Regime rg) {
                   const auto& f = ctx.precision().storage;
                   const auto dout = inputs(kN, rg, f, 403);
                   Vec dx = inputs(kN, Regime::Normal, f, 404), df = inputs(kN, Regime::Normal, f, 405);
                   if (!f32) {
                     residual_backward_data<E>(dx, df, dout, alpha, kRows, ctx);
                     return std::vector<Vec>{dx, df};
                   }
                   FVec dxf = to_float(dx), dff = to_float(df);
                   const FVec doutf = to_float(dout);
                   residual_backward_data(dxf, dff, doutf, alpha, kRows, ctx);
                   return std::vector<Vec>{widen(dxf), widen(dff)};
                 }});
  }
  return c;
}

void PrintTo(const IoCase& c, std::ostream* os) { *os << c.name; }

class TypedStorage : public ::testing::TestWithParam<IoCase> {};

/// The calling thread's op scratch (scratch_buffer, binary64 and binary32) filled with a value no op computes here,
/// before every call: a body that reads scratch it did not write (an entry cast it skipped) then differs, rather than
/// reading the values the call before it left there.
std::vector<Vec> run_fresh(const IoCase& oc, const Ctx<E>& ctx, bool f32, Regime rg) {
  for (std::size_t slot = 0; slot < kScratchSlots; ++slot) {
    const std::span<double> b = scratch_buffer<double>(4 * kN, slot);
    std::fill(b.begin(), b.end(), 0x1.234p+100);
    const std::span<float> f = scratch_buffer<float>(4 * kN, slot);  // the binary32 heads' (ops/attention.hpp)
    std::fill(f.begin(), f.end(), 0x1.234p+100f);
  }
  return oc.run(ctx, f32, rg);
}

TEST_P(TypedStorage, Binary32TensorsGiveTheBinary64TensorsValues) {
  const IoCase& oc = GetParam();
  int compared = 0;
  for (const std::string& spec : test::span_policies()) {
    const Policy pol = load_policy(spec);
    const Ctx<E> c(pol.at(oc.op, oc.pass), {6, 1 + static_cast<std::uint64_t>(oc.pass)});
    if (!c.binary32_storage()) continue;  // fp64: stays binary64 (refusal below)
    ++compared;
    for (Regime rg : kRegimes)
      for (const bool fast : {true, false}) {
        const Ctx<E> ctx = test::on(c, ::roundoff::test::exec_for(fast, {}));
        const std::string what = oc.name + " " + spec + " regime " + std::to_string(static_cast<int>(rg)) +
                                 (fast ? " fast" : " per-element");
        const auto want = run_fresh(oc, ctx, false, rg);
        const auto got = run_fresh(oc, ctx, true, rg);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          expect_same(got[i], want[i], what + " out " + std::to_string(i), true);
      }
  }
  EXPECT_GE(compared, 20) << oc.name << ": too few policies with binary32 storage";
}

/// The fast bodies against the per-element definitions: under every policy whose storage fits binary32, each
/// op's outputs with the fast paths on, on binary32 tensors and on binary64 ones, are bit for bit those of the
/// per-element calls on binary64 tensors (fast paths off). Where an entry computes and stores in binary32
/// (Ctx::binary32_through: fp32 and its variants) this holds the binary32 bodies in hardware binary32
/// (ops/activation.hpp, residual.hpp, rope.hpp, embedding.hpp) to the definitions themselves, NaN encodings included.
TEST_P(TypedStorage, FastBodiesGiveThePerElementValues) {
  const IoCase& oc = GetParam();
  int through = 0;
  for (const std::string& spec : test::span_policies()) {
    const Policy pol = load_policy(spec);
    const Ctx<E> c(pol.at(oc.op, oc.pass), {6, 1 + static_cast<std::uint64_t>(oc.pass)});
    if (!c.binary32_storage()) continue;
    const Ctx<E> fast = test::on(c, ::roundoff::test::exec_for(true, {}));
    const Ctx<E> slow = test::on(c, ::roundoff::test::exec_for(false, {}));
    through += fast.binary32_through() ? 1 : 0;
    for (Regime rg : kRegimes) {
      const std::string what = oc.name + " " + spec + " regime " + std::to_string(static_cast<int>(rg));
      const auto want = run_fresh(oc, slow, false, rg);
      for (const bool f32 : {false, true}) {
        const auto got = run_fresh(oc, fast, f32, rg);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          expect_same(got[i], want[i], what + (f32 ? " binary32" : " binary64") + " out " + std::to_string(i), true);
      }
    }
  }
  EXPECT_GE(through, 1) << oc.name << ": no policy reaches the binary32 bodies";
}

/// The cases whose binary32 form has a binary32 output (matmul's backward-weight writes binary64 dW).
std::vector<IoCase> refusing_cases() {
  std::vector<IoCase> r;
  for (IoCase& c : cases())
    if (c.refuses) r.push_back(std::move(c));
  return r;
}

class TypedStorageRefusal : public ::testing::TestWithParam<IoCase> {};

TEST_P(TypedStorageRefusal, RefusesBinary32StorageOfAFormatBeyondIt) {
  const IoCase& oc = GetParam();
  const Ctx<E> c(Policy::preset("fp64").at(oc.op, oc.pass));
  ASSERT_FALSE(c.binary32_storage());
  EXPECT_THROW(oc.run(c, true, Regime::Normal), std::logic_error) << oc.name;
}

std::string case_name(const ::testing::TestParamInfo<IoCase>& i) {
  std::string n = i.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Ops, TypedStorage, ::testing::ValuesIn(cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, TypedStorageRefusal, ::testing::ValuesIn(refusing_cases()), case_name);

}  // namespace
}  // namespace roundoff::ops
