// Below fp32, bit for bit, the attention half of the model (issue 11): rope-angles, rope (fwd, bwd-data),
// attn-scores, softmax and attn-values (fwd, bwd-data each) under the ane-fp16 and amp-bf16 presets (rope and
// rope-angles also under ane-guide, whose rope entries differ from ane-fp16's only in the NaN rule), against
// scalar references written here from each op's documented definition and rounding contract (ops/rope.hpp,
// ops/attention.hpp, numerics/accumulate.hpp), step by step with numerics:: correctly rounded scalar
// operations (round_to, add, sub, mul, div, fma, exp, sin, cos) in the documented order. They call no op body
// and no Ctx, so an accumulator wider than asked, a skipped or extra rounding, another summation order, or a
// context built from another (op, pass) entry makes them fail (the mutations reported in the commit).
//
// The accumulation of every dot and sum is the sequential fused one: s = round_acc(t_0) (the first product is
// exact in binary64: two ≤ 11-bit significands), then s = fma_acc(a_i, b_i, s) (one rounding of the exact
// a_i·b_i + s), or s = add_acc(s, t_i) for a sum; the result is rounded to compute, then saturated when the
// entry has saturate = L (|v| ≥ L → ±inf). Every op runs twice: with its fast paths (the batched GEMMs of
// attention) and with ExecOptions::fast_paths off (one dot per output element). Shapes are ragged: T = 37 (one band
// of 32 query rows and a ragged one), hs = 5 (odd) for the attention products, B = 2, NH = 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/arith.hpp"
#include "ops/attention.hpp"
#include "ops/policy.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using numerics::Rounding;
using test::cs;
using test::randn;
using Vec = std::vector<double>;
constexpr Rounding kNe = Rounding::NearestEven;

const OpPrecision& entry(const std::string& preset, OpKind op, Pass pass) {
  static const Policy ane = Policy::preset("ane-fp16"), amp = Policy::preset("amp-bf16"),
                      guide = Policy::preset("ane-guide");
  return (preset == "ane-fp16" ? ane : preset == "amp-bf16" ? amp : guide).at(op, pass);
}

/// The scalar arithmetic of one policy entry, from numerics:: alone.
struct Ref {
  explicit Ref(const OpPrecision& p)
      : prec(p), st(p.storage), cp(p.compute), acc(p.accumulate.format) {}
  OpPrecision prec;
  numerics::RoundingPlan st, cp, acc;
  double store(double x) const { return numerics::round_to(st, kNe, x); }
  double c(double x) const { return numerics::round_to(cp, kNe, x); }
  double add(double a, double b) const { return numerics::add(cp, kNe, a, b); }
  double sub(double a, double b) const { return numerics::sub(cp, kNe, a, b); }
  double mul(double a, double b) const { return numerics::mul(cp, kNe, a, b); }
  double div(double a, double b) const { return numerics::div(cp, kNe, a, b); }
  double exp(double a) const { return numerics::exp(cp, kNe, a); }
  /// A reduction result converted to compute, then saturated.
  double to_compute(double s) const {
    const double v = c(s);
    return prec.saturate > 0 && std::fabs(v) >= prec.saturate ? std::copysign(INFINITY, v) : v;
  }
  /// Σ_{i<n} a(i)·b(i), sequential, fused, in the accumulator format; converted to compute.
  double dot(std::int64_t n, const auto& a, const auto& b) const {
    double s = numerics::round_to(acc, kNe, a(0) * b(0));
    for (std::int64_t i = 1; i < n; ++i) s = numerics::fma(acc, kNe, a(i), b(i), s);
    return to_compute(s);
  }
  /// Σ_{i<n} x(i), sequential, in the accumulator format; converted to compute.
  double sum(std::int64_t n, const auto& x) const {
    double s = numerics::round_to(acc, kNe, x(0));
    for (std::int64_t i = 1; i < n; ++i) s = numerics::add(acc, kNe, s, x(i));
    return to_compute(s);
  }
};

/// got and want bit for bit, NaN where want is NaN and only there (any NaN encoding); fails when every value is NaN
/// on both (nothing compared).
void expect_same(const Vec& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, numbers = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool nan = std::isnan(got[i]) && std::isnan(want[i]);
    numbers += !std::isnan(got[i]) && !std::isnan(want[i]);
    if (!(nan || std::bit_cast<std::uint64_t>(got[i]) == std::bit_cast<std::uint64_t>(want[i])) && bad++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: op " << got[i] << " reference " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what;
  EXPECT_GT(numbers, 0u) << what << ": every value is NaN on both: nothing compared";
}

/// Runs f(how, ex) with the fast paths on and off.
template <class F>
void both_paths(F&& f) {
  for (const bool fast : {true, false}) f(fast ? " (fast paths)" : " (per-element)", ::roundoff::test::exec_for(fast));
}

const AttnShape kS{2, 3, 37, 5};
std::size_t at3(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
  return static_cast<std::size_t>((b * kS.T + t) * kS.C() + h * kS.hs + d);
}
std::size_t at4(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t u) {
  return static_cast<std::size_t>(((b * kS.NH + h) * kS.T + t) * kS.T + u);
}

/// Causal attention weights in storage: row t a random probability vector over s ≤ t, 0 elsewhere.
Vec causal_weights(const numerics::Format& f, std::uint64_t seed) {
  Vec a = randn(static_cast<std::size_t>(kS.att_size()), 1.0, numerics::formats::fp64, seed);
  const numerics::RoundingPlan plan(f);
  for (std::int64_t r = 0; r < kS.heads() * kS.T; ++r) {
    const std::int64_t t = r % kS.T;
    double z = 0;
    for (std::int64_t j = 0; j <= t; ++j) z += std::exp(a[static_cast<std::size_t>(r * kS.T + j)]);
    for (std::int64_t j = 0; j < kS.T; ++j) {
      double& v = a[static_cast<std::size_t>(r * kS.T + j)];
      v = j <= t ? numerics::round_to(plan, kNe, std::exp(v) / z) : 0.0;
    }
  }
  return a;
}

class HalfBitExactAttention : public ::testing::TestWithParam<const char*> {};
class HalfBitExactRope : public ::testing::TestWithParam<const char*> {};

TEST_P(HalfBitExactRope, AnglesForwardBackward) {
  const std::string preset = GetParam();
  const std::int64_t T = 37, hs = 10, H = hs / 2;
  const double base = 10000.0;
  {  // angles: f_i = b^(−2i/hs) in binary64 rounded to compute; θ = c(p)·f_i; cos, sin one rounding each; stored
    const OpPrecision& p = entry(preset, OpKind::RopeAngles, Pass::Forward);
    const Ref r(p);
    Vec co(static_cast<std::size_t>(T * H)), si(co.size()), wc, ws;
    rope_angles<Emulated>(co, si, T, hs, base, Ctx<Emulated>(p));
    for (std::int64_t pos = 0; pos < T; ++pos)
      for (std::int64_t i = 0; i < H; ++i) {
        const double f = r.c(std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(hs)));
        const double theta = r.mul(r.c(static_cast<double>(pos)), f);
        wc.push_back(r.store(numerics::cos(r.cp, kNe, theta)));
        ws.push_back(r.store(numerics::sin(r.cp, kNe, theta)));
      }
    expect_same(co, wc, preset + " rope-angles cos");
    expect_same(si, ws, preset + " rope-angles sin");
  }
  const AttnShape s{2, 3, T, hs};
  const auto n = static_cast<std::size_t>(s.qkv_size());
  for (const Pass pass : {Pass::Forward, Pass::BackwardData}) {
    const OpPrecision& p = entry(preset, OpKind::RopeRotate, pass);
    const Ref r(p);
    const Vec co = randn(static_cast<std::size_t>(T * H), 0.7, p.storage, 1),
              si = randn(static_cast<std::size_t>(T * H), 0.7, p.storage, 2);
    const Vec x = randn(n, 2.0, p.storage, 3);
    Vec got = pass == Pass::Forward ? Vec(n) : randn(n, 0.5, p.storage, 4);
    const Vec before = got;
    if (pass == Pass::Forward)
      rope_forward<Emulated>(got, cs(x), cs(co), cs(si), s, Ctx<Emulated>(p));
    else
      rope_backward_data<Emulated>(got, cs(x), cs(co), cs(si), s, Ctx<Emulated>(p));
    Vec want(n);
    for (std::int64_t row = 0; row < s.B * T; ++row)
      for (std::int64_t h = 0; h < s.NH; ++h)
        for (std::int64_t i = 0; i < H; ++i) {
          const auto e = static_cast<std::size_t>(row * s.C() + h * hs + 2 * i);
          const auto ti = static_cast<std::size_t>((row % T) * H + i);
          const double c = co[ti], sn = si[ti], a = x[e], b = x[e + 1];
          if (pass == Pass::Forward) {  // y0 = x0·c − x1·s, y1 = x0·s + x1·c
            want[e] = r.store(r.sub(r.mul(a, c), r.mul(b, sn)));
            want[e + 1] = r.store(r.add(r.mul(a, sn), r.mul(b, c)));
          } else {  // dx0 += dy0·c + dy1·s, dx1 += dy1·c − dy0·s
            want[e] = r.store(r.add(before[e], r.add(r.mul(a, c), r.mul(b, sn))));
            want[e + 1] = r.store(r.add(before[e + 1], r.sub(r.mul(b, c), r.mul(a, sn))));
          }
        }
    expect_same(got, want, preset + " rope." + std::string(name_of(pass)));
  }
}

TEST_P(HalfBitExactAttention, Scores) {
  const std::string preset = GetParam();
  const std::size_t nq = static_cast<std::size_t>(kS.qkv_size()), na = static_cast<std::size_t>(kS.att_size());
  {  // preatt[t,s] = c(q_t·k_s)·c(1/√hs) for s ≤ t, else 0; stored
    const OpPrecision& p = entry(preset, OpKind::AttnScores, Pass::Forward);
    const Ref r(p);
    const Vec q = randn(nq, 1.5, p.storage, 10), k = randn(nq, 1.5, p.storage, 11);
    const double scale = r.c(1.0 / std::sqrt(static_cast<double>(kS.hs)));
    Vec want(na, 0.0);
    for (std::int64_t b = 0; b < kS.B; ++b)
      for (std::int64_t h = 0; h < kS.NH; ++h)
        for (std::int64_t t = 0; t < kS.T; ++t)
          for (std::int64_t j = 0; j <= t; ++j)
            want[at4(b, h, t, j)] = r.store(r.mul(
                r.dot(kS.hs, [&](std::int64_t d) { return q[at3(b, t, h, d)]; },
                      [&](std::int64_t d) { return k[at3(b, j, h, d)]; }),
                scale));
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec got(na, 1.0);
      attn_scores_forward<Emulated>(got, cs(q), cs(k), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(got, want, preset + " attn-scores.fwd" + how);
    });
  }
  {  // dps = c(dpreatt·scale); dq_t += Σ_{j≤t} dps[t,j]·k_j (j ascending), dk_t += Σ_{i≥t} dps[i,t]·q_i
    const OpPrecision& p = entry(preset, OpKind::AttnScores, Pass::BackwardData);
    const Ref r(p);
    const Vec q = randn(nq, 1.5, p.storage, 12), k = randn(nq, 1.5, p.storage, 13);
    const Vec dpre = randn(na, 0.5, p.storage, 14), dq0 = randn(nq, 0.1, p.storage, 15),
              dk0 = randn(nq, 0.1, p.storage, 16);
    const double scale = r.c(1.0 / std::sqrt(static_cast<double>(kS.hs)));
    Vec wq(nq), wk(nq);
    for (std::int64_t b = 0; b < kS.B; ++b)
      for (std::int64_t h = 0; h < kS.NH; ++h) {
        auto dps = [&](std::int64_t t, std::int64_t j) { return r.mul(dpre[at4(b, h, t, j)], scale); };
        for (std::int64_t t = 0; t < kS.T; ++t)
          for (std::int64_t d = 0; d < kS.hs; ++d) {
            const std::size_t e = at3(b, t, h, d);
            wq[e] = r.store(r.add(dq0[e], r.dot(t + 1, [&](std::int64_t j) { return dps(t, j); },
                                                [&](std::int64_t j) { return k[at3(b, j, h, d)]; })));
            wk[e] = r.store(r.add(dk0[e], r.dot(kS.T - t, [&](std::int64_t i) { return dps(t + i, t); },
                                                [&](std::int64_t i) { return q[at3(b, t + i, h, d)]; })));
          }
      }
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec dq = dq0, dk = dk0;
      attn_scores_backward_data<Emulated>(dq, dk, cs(dpre), cs(q), cs(k), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(dq, wq, preset + " attn-scores.bwd-data dq" + how);
      expect_same(dk, wk, preset + " attn-scores.bwd-data dk" + how);
    });
  }
}

TEST_P(HalfBitExactAttention, Softmax) {
  const std::string preset = GetParam();
  const std::size_t na = static_cast<std::size_t>(kS.att_size());
  {  // m = max x_j; e_j = exp(c(x_j − m)); Z = Σ e_j; att_j = c(e_j / Z) stored; 0 above the diagonal
    const OpPrecision& p = entry(preset, OpKind::Softmax, Pass::Forward);
    const Ref r(p);
    const Vec x = randn(na, 3.0, p.storage, 20);
    Vec want(na, 0.0);
    for (std::int64_t row = 0; row < kS.heads() * kS.T; ++row) {
      const std::int64_t n = row % kS.T + 1;
      const double* xr = x.data() + row * kS.T;
      const double m = *std::max_element(xr, xr + n);
      Vec ex(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) ex[static_cast<std::size_t>(j)] = r.exp(r.sub(xr[j], m));
      const double z = r.sum(n, [&](std::int64_t j) { return ex[static_cast<std::size_t>(j)]; });
      for (std::int64_t j = 0; j < n; ++j)
        want[static_cast<std::size_t>(row * kS.T + j)] = r.store(r.div(ex[static_cast<std::size_t>(j)], z));
    }
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec got(na, 1.0);
      softmax_forward<Emulated>(got, cs(x), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(got, want, preset + " softmax.fwd" + how);
    });
  }
  {  // d = Σ_j a_j·g_j; dp_j += c(a_j · c(g_j − d)) on s ≤ t
    const OpPrecision& p = entry(preset, OpKind::Softmax, Pass::BackwardData);
    const Ref r(p);
    const Vec a = causal_weights(p.storage, 21), g = randn(na, 1.0, p.storage, 22), dp0 = randn(na, 0.1, p.storage, 23);
    Vec want = dp0;
    for (std::int64_t row = 0; row < kS.heads() * kS.T; ++row) {
      const std::int64_t n = row % kS.T + 1;
      const auto o = static_cast<std::size_t>(row * kS.T);
      const double d = r.dot(n, [&](std::int64_t j) { return a[o + static_cast<std::size_t>(j)]; },
                             [&](std::int64_t j) { return g[o + static_cast<std::size_t>(j)]; });
      for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j)
        want[o + j] = r.store(r.add(dp0[o + j], r.mul(a[o + j], r.sub(g[o + j], d))));
    }
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec got = dp0;
      softmax_backward_data<Emulated>(got, cs(g), cs(a), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(got, want, preset + " softmax.bwd-data" + how);
    });
  }
}

TEST_P(HalfBitExactAttention, Values) {
  const std::string preset = GetParam();
  const std::size_t nq = static_cast<std::size_t>(kS.qkv_size()), na = static_cast<std::size_t>(kS.att_size());
  {  // out[t,d] = Σ_{j≤t} att[t,j]·v[j,d] (j ascending), stored
    const OpPrecision& p = entry(preset, OpKind::AttnValues, Pass::Forward);
    const Ref r(p);
    const Vec att = causal_weights(p.storage, 30), v = randn(nq, 2.0, p.storage, 31);
    Vec want(nq);
    for (std::int64_t b = 0; b < kS.B; ++b)
      for (std::int64_t h = 0; h < kS.NH; ++h)
        for (std::int64_t t = 0; t < kS.T; ++t)
          for (std::int64_t d = 0; d < kS.hs; ++d)
            want[at3(b, t, h, d)] = r.store(r.dot(t + 1, [&](std::int64_t j) { return att[at4(b, h, t, j)]; },
                                                  [&](std::int64_t j) { return v[at3(b, j, h, d)]; }));
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec got(nq, 1.0);
      attn_values_forward<Emulated>(got, cs(att), cs(v), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(got, want, preset + " attn-values.fwd" + how);
    });
  }
  {  // datt[t,j] += dout_t·v_j (j ≤ t); dv[j,d] += Σ_{t≥j} att[t,j]·dout[t,d] (t ascending)
    const OpPrecision& p = entry(preset, OpKind::AttnValues, Pass::BackwardData);
    const Ref r(p);
    const Vec att = causal_weights(p.storage, 32), v = randn(nq, 2.0, p.storage, 33), dout = randn(nq, 1.0, p.storage, 34);
    const Vec datt0 = randn(na, 0.1, p.storage, 35), dv0 = randn(nq, 0.1, p.storage, 36);
    Vec wa = datt0, wv(nq);
    for (std::int64_t b = 0; b < kS.B; ++b)
      for (std::int64_t h = 0; h < kS.NH; ++h) {
        for (std::int64_t t = 0; t < kS.T; ++t)
          for (std::int64_t j = 0; j <= t; ++j) {
            const std::size_t e = at4(b, h, t, j);
            wa[e] = r.store(r.add(datt0[e], r.dot(kS.hs, [&](std::int64_t d) { return dout[at3(b, t, h, d)]; },
                                                  [&](std::int64_t d) { return v[at3(b, j, h, d)]; })));
          }
        for (std::int64_t j = 0; j < kS.T; ++j)
          for (std::int64_t d = 0; d < kS.hs; ++d) {
            const std::size_t e = at3(b, j, h, d);
            wv[e] = r.store(r.add(dv0[e], r.dot(kS.T - j, [&](std::int64_t i) { return att[at4(b, h, j + i, j)]; },
                                                [&](std::int64_t i) { return dout[at3(b, j + i, h, d)]; })));
          }
      }
    both_paths([&](const char* how, const ExecOptions& ex) {
      Vec datt = datt0, dv = dv0;
      attn_values_backward_data<Emulated>(datt, dv, cs(dout), cs(att), cs(v), kS, Ctx<Emulated>(p, {}, ex));
      expect_same(datt, wa, preset + " attn-values.bwd-data datt" + how);
      expect_same(dv, wv, preset + " attn-values.bwd-data dv" + how);
    });
  }
}

// The presets' entries are what the references assume: sequential fused accumulations, exact functions.
TEST_P(HalfBitExactAttention, EntriesAreSequentialFusedExact) {
  for (const OpKind op : {OpKind::AttnScores, OpKind::Softmax, OpKind::AttnValues})
    for (const Pass pass : {Pass::Forward, Pass::BackwardData}) {
      const OpPrecision& p = entry(GetParam(), op, pass);
      EXPECT_TRUE(p.accumulate.fused && p.accumulate.order == numerics::Order::Sequential &&
                  p.accumulate.tile.size == 0 && p.accumulate.adder.group == 0 && p.accumulate.promote_every == 0 &&
                  p.approx.kind == ApproxKind::Exact && p.rounding == kNe)
          << GetParam() << " " << name_of(op) << "." << name_of(pass);
    }
}

INSTANTIATE_TEST_SUITE_P(Presets, HalfBitExactAttention, ::testing::Values("ane-fp16", "amp-bf16"));
INSTANTIATE_TEST_SUITE_P(Presets, HalfBitExactRope, ::testing::Values("ane-fp16", "amp-bf16", "ane-guide"));

}  // namespace
}  // namespace roundoff::ops
