// The batched attention paths (per-head GEMMs, numerics::gemm_ranged with per-row causal k-ranges, span forms of
// the elementwise steps; ops/attention.hpp) against the per-element definition they replace
// (ExecOptions::fast_paths off: one dot and one scalar rounding at a time, the oracle), bit for bit, for every
// preset, with stochastic op rounding and stochastic accumulation, ragged shapes (T across the micro-tiles,
// tiles and bands, hs not a multiple of 8 and across the kernel panels), and inputs in the normal, overflow,
// subnormal and special-value (±0, ±inf, NaN) regimes; the same on binary32 tensors (typed storage: the binary32
// heads), and a NaN sum into a gradient on the binary32 heads.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.hpp"
#include "ops/policy.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::both;
using test::on;
using test::expect_same;
using test::inputs;
using test::Regime;

struct Case {
  std::string policy;
  AttnShape shape;
};

/// A tensor of a storage that fits binary32 held in floats (exact), and back.
std::vector<float> f32(const std::vector<double>& x) { return {x.begin(), x.end()}; }
std::vector<double> f64(const std::vector<float>& x) { return {x.begin(), x.end()}; }
/// The fast paths on, for the binary32 tensors' runs.
Ctx<Emulated> fast_on(const Ctx<Emulated>& c) { return on(c, ::roundoff::test::exec_for(true, {})); }

TEST(AttentionGemm, BitIdenticalToPerElementDots) {
  std::vector<std::string> policies = Policy::preset_names();
  policies.push_back("ane-fp16,all.rounding=stochastic");
  policies.push_back("pure-bf16,all.rounding=up");
  policies.push_back("ane-fp16,attn-scores.acc=[acc=fp16:stochastic,order=seq],attn-values.acc=fp16-pairwise");
  policies.push_back("fp32,attn-scores.acc=[acc=fp32,order=blocked:4,outer=fp32],attn-values.acc=bf16-seq");
  policies.push_back("ane-guide,all.ftz=all,all.daz=on");
  policies.push_back("pure-fp16,all.ftz=out");
  policies.push_back("pure-bf16,all.ftz=all,all.daz=on,all.rounding=stochastic");
  // T across the 8-row micro-tiles, the 4-term tiles and the 32-row bands; hs below, across and above the 16-,
  // 32- and 64-column kernel panels, never a multiple of 8 but once.
  const AttnShape shapes[] = {{1, 2, 37, 6}, {2, 3, 5, 4}, {1, 1, 70, 16}, {1, 1, 11, 33}, {1, 1, 9, 70}};
  int batched_cases = 0;
  for (const std::string& spec : policies) {
    const Policy pol = load_policy(spec);
    for (const AttnShape& s : shapes)
      for (Regime regime : {Regime::Normal, Regime::Overflow, Regime::Subnormal, Regime::Specials}) {
        const std::string what = spec + " T=" + std::to_string(s.T) + " hs=" + std::to_string(s.hs) + " regime " +
                                 std::to_string(static_cast<int>(regime));
        const auto qkv = static_cast<std::size_t>(s.qkv_size()), att = static_cast<std::size_t>(s.att_size());
        const numerics::StochasticBits bits{11, 5};
        const auto seed = static_cast<std::uint64_t>(s.T * 131 + s.hs) * 7 + static_cast<std::uint64_t>(regime);
        // q, k, v and their gradients in rows of C, att and its gradients in rows of T (test::inputs' blocks).
        const auto C = static_cast<std::size_t>(s.C()), T = static_cast<std::size_t>(s.T);
        {
          const Ctx<Emulated> c(pol.at(OpKind::AttnScores, Pass::Forward), bits);
          batched_cases += c.gemm_is_dot();
          const numerics::Format& f = c.precision().storage;
          const auto q = inputs(qkv, regime, f, seed, C), k = inputs(qkv, regime, f, seed + 2, C);
          const auto [fast, oracle] = both([&](const ExecOptions& ex) {
            std::vector<double> pre(att, 7.0);
            attn_scores_forward<Emulated>(pre, q, k, s, on(c, ex));
            return std::vector<std::vector<double>>{pre};
          });
          expect_same(fast[0], oracle[0], "scores fwd " + what);
          if (c.binary32_storage()) {  // binary32 tensors (binary32 heads where ops::detail::heads32 allows)
            std::vector<float> pre(att, 7.0f);
            attn_scores_forward(pre, f32(q), f32(k), s, fast_on(c));
            expect_same(f64(pre), oracle[0], "scores fwd binary32 " + what);
          }
        }
        {
          const Ctx<Emulated> c(pol.at(OpKind::AttnScores, Pass::BackwardData), bits);
          const numerics::Format& f = c.precision().storage;
          const auto q = inputs(qkv, regime, f, seed + 3, C), k = inputs(qkv, regime, f, seed + 4, C);
          const auto dp = inputs(att, regime, f, seed + 5, T), dq0 = inputs(qkv, Regime::Normal, f, seed + 6);
          const auto [fast, oracle] = both([&](const ExecOptions& ex) {
            std::vector<double> dq = dq0, dk = dq0;
            attn_scores_backward_data<Emulated>(dq, dk, dp, q, k, s, on(c, ex));
            return std::vector<std::vector<double>>{dq, dk};
          });
          expect_same(fast[0], oracle[0], "scores bwd dq " + what);
          expect_same(fast[1], oracle[1], "scores bwd dk " + what);
          if (c.binary32_storage()) {
            std::vector<float> dq = f32(dq0), dk = f32(dq0);
            attn_scores_backward_data(dq, dk, f32(dp), f32(q), f32(k), s, fast_on(c));
            expect_same(f64(dq), oracle[0], "scores bwd dq binary32 " + what);
            expect_same(f64(dk), oracle[1], "scores bwd dk binary32 " + what);
          }
        }
        {
          const Ctx<Emulated> c(pol.at(OpKind::AttnValues, Pass::Forward), bits);
          const numerics::Format& f = c.precision().storage;
          const auto a = inputs(att, regime, f, seed + 7, T), v = inputs(qkv, regime, f, seed + 8, C);
          const auto [fast, oracle] = both([&](const ExecOptions& ex) {
            std::vector<double> out(qkv, 3.0);
            attn_values_forward<Emulated>(out, a, v, s, on(c, ex));
            return std::vector<std::vector<double>>{out};
          });
          expect_same(fast[0], oracle[0], "values fwd " + what);
          if (c.binary32_storage()) {
            std::vector<float> out(qkv, 3.0f);
            attn_values_forward(out, f32(a), f32(v), s, fast_on(c));
            expect_same(f64(out), oracle[0], "values fwd binary32 " + what);
          }
        }
        {
          const Ctx<Emulated> c(pol.at(OpKind::AttnValues, Pass::BackwardData), bits);
          const numerics::Format& f = c.precision().storage;
          const auto a = inputs(att, regime, f, seed + 9, T), v = inputs(qkv, regime, f, seed + 10, C);
          const auto d = inputs(qkv, regime, f, seed + 11, C), g0 = inputs(att, Regime::Normal, f, seed + 12);
          const auto dv0 = inputs(qkv, Regime::Normal, f, seed + 13);
          const auto [fast, oracle] = both([&](const ExecOptions& ex) {
            std::vector<double> datt = g0, dv = dv0;
            attn_values_backward_data<Emulated>(datt, dv, d, a, v, s, on(c, ex));
            return std::vector<std::vector<double>>{datt, dv};
          });
          expect_same(fast[0], oracle[0], "values bwd datt " + what);
          expect_same(fast[1], oracle[1], "values bwd dv " + what);
          if (c.binary32_storage()) {
            std::vector<float> datt = f32(g0), dv = f32(dv0);
            attn_values_backward_data(datt, dv, f32(d), f32(a), f32(v), s, fast_on(c));
            expect_same(f64(datt), oracle[0], "values bwd datt binary32 " + what);
            expect_same(f64(dv), oracle[1], "values bwd dv binary32 " + what);
          }
        }
      }
  }
  // Every policy but the one with a stochastic attn-scores accumulation takes the batched path.
  EXPECT_EQ(batched_cases, static_cast<int>((policies.size() - 1) * std::size(shapes)) * 4);
}

// The causal sums (att·V, dq, dk, dv) never read a masked position into a sum. att and dpreatt hold −0 on every
// causal position and +0 on the masked ones (as softmax and its backward leave them); the operands hold 1.5 in
// even columns and, in odd columns, +inf in the rows that only masked positions meet. So every sum over its own
// range is a sum of −0 products (or meets −0·inf where the range itself holds an inf), while a sum zero-padded
// over the whole row adds +0·1.5 = +0 (turning −0 into +0) or +0·inf = NaN. What a sum of −0 products and a sum
// meeting −0·inf give under a policy (−0 and NaN under most; ane-guide's ane-tile4 accumulation gives +0 for the
// first, so there only the inf rows tell padding apart) is read off a T = 1 head, which has no masked position and so nothing to pad; every
// output of the T = 37 head must then be that value, on the fast path and on the per-element definition alike.
TEST(AttentionGemm, MaskedPositionsNeverEnterTheSums) {
  const double inf = std::numeric_limits<double>::infinity();
  // The three ops' four causal sums (out, dq, dv, dk) of shape s; gradients start at −0.
  auto run = [](const AttnShape& s, const std::vector<double>& tri, const std::vector<double>& pre,
                const std::vector<double>& suf, const Policy& pol) {
    const Ctx<Emulated> sc(pol.at(OpKind::AttnScores, Pass::BackwardData)),
        vf(pol.at(OpKind::AttnValues, Pass::Forward)), vb(pol.at(OpKind::AttnValues, Pass::BackwardData));
    return both([&](const ExecOptions& ex) {
      const std::vector<double> neg0(static_cast<std::size_t>(s.qkv_size()), -0.0);
      std::vector<double> out(neg0.size(), 3.0), dq = neg0, dk = neg0, dv = neg0, datt(tri.size(), 0.0);
      attn_values_forward<Emulated>(out, tri, pre, s, on(vf, ex));
      attn_values_backward_data<Emulated>(datt, dv, suf, tri, pre, s, on(vb, ex));
      attn_scores_backward_data<Emulated>(dq, dk, tri, suf, pre, s, on(sc, ex));
      return std::vector<std::vector<double>>{out, dq, dv, dk};
    });
  };
  const AttnShape s{1, 2, 37, 5}, one{1, 1, 1, 2};
  const auto T = static_cast<std::size_t>(s.T), hs = static_cast<std::size_t>(s.hs), C = static_cast<std::size_t>(s.C());
  std::vector<double> tri(static_cast<std::size_t>(s.att_size()));
  for (std::size_t i = 0; i < tri.size(); ++i) tri[i] = (i % T) <= (i / T) % T ? -0.0 : 0.0;
  // (B, T, NH·hs) operands; `row` is the one row every sum reads (0 for a prefix sum's operand, T − 1 for a
  // suffix sum's).
  auto operand = [&](std::size_t row) {
    std::vector<double> x(static_cast<std::size_t>(s.qkv_size()));
    for (std::size_t e = 0; e < x.size(); ++e) x[e] = (e % hs) % 2 == 0 || e / C == row ? 1.5 : inf;
    return x;
  };
  const std::vector<double> pre = operand(0), suf = operand(T - 1);
  std::vector<std::string> policies = Policy::preset_names();
  policies.push_back("pure-bf16,all.rounding=stochastic");
  const char* names[] = {"out = att·v", "dq += dps·k", "dv += attᵀ·dout", "dk += dpsᵀ·q"};
  int batched = 0;
  for (const std::string& spec : policies) {
    const Policy pol = load_policy(spec);
    for (OpKind k : {OpKind::AttnScores, OpKind::AttnValues})
      for (Pass ps : {Pass::Forward, Pass::BackwardData}) batched += Ctx<Emulated>(pol.at(k, ps)).gemm_is_dot();
    // ref[o] = {a sum of −0 products, a sum meeting −0·inf} for output o, from the T = 1 head.
    const auto [ref, ref_oracle] = run(one, {-0.0}, {1.5, inf}, {1.5, inf}, pol);
    const auto [fast, oracle] = run(s, tri, pre, suf, pol);
    for (std::size_t o = 0; o < 4; ++o) {
      expect_same(ref[o], ref_oracle[o], spec + " T = 1: " + names[o]);
      // The construction tells padding apart: the −0 sum keeps its sign (but under a tile stage), and the −0·inf
      // sum is not a zero.
      // A tensor-core adder with inf-pos-zero edges (the GPU presets) gives +0 for every zero result, as the H100 does.
      const numerics::Accumulation& acc = pol.at(o % 2 == 0 ? OpKind::AttnValues : OpKind::AttnScores,  // out, dq, dv, dk
                                                 o == 0 ? Pass::Forward : Pass::BackwardData)
                                              .accumulate;
      const bool pos_zero = acc.adder.edges == numerics::AdderEdges::InfPositiveZero;
      // An exact tile stage (ane-tile4 and its flush variant: ane-guide and its -m1/-ftz presets) gives an exactly
      // zero tile sum as +0, so its −0 sum is +0 too: only the inf rows tell padding apart there.
      const bool tile_zero = acc.tile.size != 0;
      if (pos_zero) {
        EXPECT_TRUE(ref[o][0] == 0 && !std::signbit(ref[o][0])) << spec << " " << names[o];
      } else if (!tile_zero) {
        EXPECT_TRUE(ref[o][0] == 0 && std::signbit(ref[o][0])) << spec << " " << names[o];
      }
      EXPECT_FALSE(ref[o][1] == 0) << spec << " " << names[o];
      std::vector<double> want(fast[o].size());
      for (std::size_t e = 0; e < want.size(); ++e)
        want[e] = (e % hs) % 2 == 0 || e / C == (o < 2 ? 0 : T - 1) ? ref[o][0] : ref[o][1];
      expect_same(fast[o], want, spec + " fast path: " + names[o]);
      expect_same(oracle[o], want, spec + " per-element definition: " + names[o]);
    }
  }
  // Every policy takes the batched paths (GEMMs, gemm_ranged) of both ops and passes (stochastic op rounding
  // keeps a nearest-even accumulation).
  EXPECT_EQ(batched, 4 * static_cast<int>(policies.size()));
}

// On binary32 heads a sum into a gradient that is NaN (+inf + −inf) takes that row's binary64 steps (ops/attention.hpp,
// add_into32): datt, dv, dq and dk start at +inf and every causal product overflows to −inf after its conversion to
// compute (big·big beyond the format), so every sum is NaN. The binary32 tensors must give the per-element
// definition's bits on binary64 tensors, NaN encodings included (the NaN rule's NaN, not the hardware's).
TEST(AttentionGemm, Binary32HeadsTakeTheBinary64StepsForANaNSum) {
  const AttnShape s{1, 2, 37, 6};
  const auto qkv = static_cast<std::size_t>(s.qkv_size()), att = static_cast<std::size_t>(s.att_size());
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> cases[] = {{"fp32", 0x1p100}, {"ane-fp16", 0x1p15}, {"ane-fp16-acc32", 0x1p15}};
  for (const auto& [spec, big] : cases) {
    const Policy pol = Policy::preset(spec);
    const std::vector<double> plus(qkv, big), minus(qkv, -big), a(att, big), g_att(att, inf), g_qkv(qkv, inf);
    {
      const Ctx<Emulated> c(pol.at(OpKind::AttnScores, Pass::BackwardData));
      std::vector<double> dq = g_qkv, dk = g_qkv;
      attn_scores_backward_data<Emulated>(dq, dk, a, minus, minus, s, on(c, ::roundoff::test::exec_for(false, {})));
      std::vector<float> dq32 = f32(g_qkv), dk32 = f32(g_qkv);
      attn_scores_backward_data(dq32, dk32, f32(a), f32(minus), f32(minus), s, fast_on(c));
      expect_same(f64(dq32), dq, std::string("scores bwd dq ") + spec, true, test::AllNan::Allowed);
      expect_same(f64(dk32), dk, std::string("scores bwd dk ") + spec, true, test::AllNan::Allowed);
      EXPECT_TRUE(std::isnan(dq[0]) && std::isnan(dk[0])) << spec << ": the sums are not NaN";
    }
    {
      const Ctx<Emulated> c(pol.at(OpKind::AttnValues, Pass::BackwardData));
      std::vector<double> datt = g_att, dv = g_qkv;
      attn_values_backward_data<Emulated>(datt, dv, minus, a, plus, s, on(c, ::roundoff::test::exec_for(false, {})));
      std::vector<float> datt32 = f32(g_att), dv32 = f32(g_qkv);
      attn_values_backward_data(datt32, dv32, f32(minus), f32(a), f32(plus), s, fast_on(c));
      expect_same(f64(datt32), datt, std::string("values bwd datt ") + spec, true, test::AllNan::Allowed);
      expect_same(f64(dv32), dv, std::string("values bwd dv ") + spec, true, test::AllNan::Allowed);
      EXPECT_TRUE(std::isnan(datt[0]) && std::isnan(dv[0])) << spec << ": the sums are not NaN";
    }
  }
}

TEST(AttentionGemm, FastPathsOffMeansPerElementDots) {
  const Ctx<Emulated> c(Policy::preset("ane-fp16").at(OpKind::AttnScores, Pass::Forward));
  EXPECT_TRUE(c.gemm_is_dot());
  EXPECT_FALSE(on(c, ::roundoff::test::exec_for(false)).gemm_is_dot());
  const Ctx<Emulated> sr(load_policy("ane-fp16,attn-scores.acc=[acc=fp16:stochastic,order=seq]")
                             .at(OpKind::AttnScores, Pass::Forward));
  EXPECT_FALSE(sr.gemm_is_dot());
}

}  // namespace
}  // namespace roundoff::ops
