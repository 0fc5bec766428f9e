// The online (FlashAttention-style) order of softmax·V (ops/online_attention.hpp) against the materialised
// order (softmax_forward + attn_values_forward) and the MPFR reference: closed forms, a-priori error bounds
// from the policy's unit roundoffs, the orders giving different bits under fp16, the recomputed weights of
// the backward, and the Runner wrapper's records.
//
// Notation (one query row of n = t + 1 scores x_j, exact weights w_j = e_j/ℓ, e_j = exp(x_j − M), M = max x,
// ℓ = Σ e_j ≥ 1, exact output y_d = Σ w_j v_jd, S_d = Σ w_j |v_jd|, D = M − min x, R = the number of times the
// running max grows). Each rounding to a format F is z(1+δ) + η with |δ| ≤ u_F and |η| ≤ η_F = 2^(emin − p)
// (half the smallest subnormal; η = 0 when the result is normal). |Π(1+δ_i) − 1| ≤ Π(1+u_i) − 1, and
// |e^{±a} − 1| ≤ e^a − 1.
//
// Online bound. Term j reaches o through: the subtraction x_j − m_j and the exps of the R_j ≤ R later
// rescale factors α (arguments summing to M − x_j ≤ D, each rounded once in sm.compute: factor e^{±D·u_c}),
// the exp of p_j and the R_j α's (1 + R roundings in sm.compute), the cast of p to av.storage, the unfused
// product (if any), ≤ n additions and R multiplications by α in av's accumulator. So
//   ô = Σ e_j v_j (1 + θ_j) + H,   |θ_j| ≤ Θ = e^{D u_c}(1+u_c)^{1+R}(1+u_s,av)(1+u_prod)(1+u_a,av)^{n+R} − 1,
//   |H| ≤ (n + R + n·[unfused])·max(η_a,av, η_prod)·(1+u_a,av)^{n+R}   (an η of a rounding of o or of a
//         product is scaled only by later roundings and by α̂ ≤ 1; p and α are normal in the tests)
//   ℓ̂ = Σ e_j (1 + φ_j) = ℓ(1 + φ̄),  |φ_j| ≤ Φ = e^{D u_c}(1+u_c)^{1+R}(1+u_a,sm)^{n+R} − 1 (positive terms).
// With ℓ ≥ 1:  |ô/ℓ̂ − y| ≤ E1 = (Θ·S + |H| + Φ·|y|)/(1 − Φ), and the division (av.compute) and store give
//   |ŷ − y| ≤ E1 + (|y| + E1)((1+u_c,av)(1+u_s,av) − 1) + η_c,av(1+u_s,av) + η_s,av.
// lse = fl_s(fl_c(M + fl_c(log ℓ̂))) (the max is exact): |fl(log ℓ̂) − log ℓ| ≤ Lerr = −log(1−Φ) +
// u_c(log ℓ − log(1−Φ)) + η_c, so |l̂se − lse| ≤ Lerr + (|lse| + Lerr)((1+u_c)(1+u_s) − 1) + η_c(1+u_s) + η_s.
//
// Materialised bound. ê_j = e_j(1+ε_j), |ε_j| ≤ E = e^{D u_c}(1+u_c) − 1; Ẑ = fl_c(Σ ê_j) = ℓ(1+φ̄) with
// |φ̄| ≤ Φm = (1+E)(1+u_a,sm)^n(1+u_c) − 1; att_j = fl_s(fl_c(ê_j/Ẑ)), cast to av.storage: relative
// Aw = (1+E)(1+u_c)(1+u_s)(1+u_s,av)/(1−Φm) − 1, absolute ηw = (η_c(1+u_s) + η_s)(1+u_s,av) + η_s,av; the dot
// adds Θd = (1+u_prod)(1+u_a,av)^n − 1 per term and n·(η_a,av + η_prod): |dot − y| ≤ E1m =
// S[(1+Aw)(1+Θd) − 1] + ηw(1+Θd)Σ|v| + n(η_a,av + η_prod)(1+u_a,av)^n, then to_compute and store as above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

#include "ops/attention.hpp"
#include "ops/online_attention.hpp"
#include "ops/runner.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;

/// Unit roundoff and underflow term of one format.
struct Fmt {
  double u = 0, eta = 0;
};
Fmt of(const numerics::Format& f) { return {numerics::unit_roundoff(f), std::ldexp(1.0, f.emin - f.precision)}; }
/// MPFR at the reference precision: every operation (including the Reference's products and sums) one
/// rounding to p bits, no underflow.
Fmt reference_fmt() { return {std::ldexp(1.0, -std::numeric_limits<Ref>::digits), 0.0}; }

/// The formats both orders round to, from the Softmax and AttnValues forward entries.
struct Units {
  Fmt sm_c, sm_s, sm_a, av_c, av_s, av_a, prod;  ///< prod.u = 0 when the accumulation is fused
};
Units units_of(const OpPrecision& sm, const OpPrecision& av) {
  Units r{of(sm.compute), of(sm.storage), of(sm.accumulate.format), of(av.compute), of(av.storage),
          of(av.accumulate.format), of(av.accumulate.product_format)};
  if (av.accumulate.fused) r.prod = {};
  return r;
}
Units reference_units() {
  const Fmt f = reference_fmt();
  return {f, f, f, f, f, f, f};  // the Reference's dot rounds each product: unfused
}

/// Exact per-row facts, from the Reference's materialised weights.
struct Row {
  std::size_t n = 0;
  double D = 0, M = 0, lse = 0;
  int R = 0;
};
Row row_facts(const std::vector<double>& pre, const std::vector<Ref>& att_ref, const AttnShape& s, std::int64_t row) {
  const std::int64_t t = row % s.T;
  const double* x = pre.data() + row * s.T;
  Row r;
  r.n = static_cast<std::size_t>(t + 1);
  double m = x[0], lo = x[0];
  for (std::int64_t j = 1; j <= t; ++j) {
    if (x[j] > m) ++r.R, m = x[j];
    lo = std::min(lo, x[j]);
  }
  r.M = m;
  r.D = m - lo;
  // lse = M − log w_argmax (w of a maximal element is e^0/ℓ = 1/ℓ).
  std::int64_t jm = 0;
  while (x[jm] != m) ++jm;
  r.lse = static_cast<double>(Ref(m) - boost::multiprecision::log(att_ref[static_cast<std::size_t>(row * s.T + jm)]));
  return r;
}

/// log(1 + u): products Π(1+u_i)^{k_i} − 1 are evaluated as expm1(Σ k_i·lg(u_i)) so that they stay exact
/// for the Reference's u = 2^-p (1 + u rounds to 1 in binary64).
double lg(double u) { return std::log1p(u); }

/// Online order: bound on |ŷ − y| for one output (S = Σ w|v|, y exact).
double online_phi(const Units& U, const Row& r) {
  const double n = static_cast<double>(r.n), R = r.R;
  return std::expm1(r.D * U.sm_c.u + (1 + R) * lg(U.sm_c.u) + (n + R) * lg(U.sm_a.u));
}
double online_y_bound(const Units& U, const Row& r, double S, double y) {
  const double n = static_cast<double>(r.n), R = r.R;
  const double Theta = std::expm1(r.D * U.sm_c.u + (1 + R) * lg(U.sm_c.u) + lg(U.av_s.u) + lg(U.prod.u) +
                                  (n + R) * lg(U.av_a.u));
  const double Phi = online_phi(U, r);
  const double H = ((n + R) * U.av_a.eta + n * U.prod.eta) * std::exp((n + R) * lg(U.av_a.u));
  const double E1 = (Theta * S + H + Phi * std::fabs(y)) / (1 - Phi);
  return E1 + (std::fabs(y) + E1) * std::expm1(lg(U.av_c.u) + lg(U.av_s.u)) + U.av_c.eta * (1 + U.av_s.u) +
         U.av_s.eta;
}
/// Online order: bound on |l̂se − lse|.
double online_lse_bound(const Units& U, const Row& r) {
  const double Phi = online_phi(U, r);
  const double logl = r.lse - r.M;
  const double Lerr = -std::log1p(-Phi) + U.sm_c.u * (logl - std::log1p(-Phi)) + U.sm_c.eta;
  return Lerr + (std::fabs(r.lse) + Lerr) * std::expm1(lg(U.sm_c.u) + lg(U.sm_s.u)) + U.sm_c.eta * (1 + U.sm_s.u) +
         U.sm_s.eta;
}
/// Materialised order: bound on |ŷ − y| (sum_abs_v = Σ_j |v_jd|).
double materialised_y_bound(const Units& U, const Row& r, double S, double y, double sum_abs_v) {
  const double n = static_cast<double>(r.n);
  const double lE = r.D * U.sm_c.u + lg(U.sm_c.u);  // log(1 + E)
  const double Phim = std::expm1(lE + n * lg(U.sm_a.u) + lg(U.sm_c.u));
  const double lAw = lE + lg(U.sm_c.u) + lg(U.sm_s.u) + lg(U.av_s.u) - std::log1p(-Phim);  // log(1 + Aw)
  const double lThd = lg(U.prod.u) + n * lg(U.av_a.u);                                      // log(1 + Θd)
  const double etaw = (U.sm_c.eta * (1 + U.sm_s.u) + U.sm_s.eta) * (1 + U.av_s.u) + U.av_s.eta;
  const double E1 = S * std::expm1(lAw + lThd) + etaw * std::exp(lThd) * sum_abs_v +
                    n * (U.av_a.eta + U.prod.eta) * std::exp(n * lg(U.av_a.u));
  return E1 + (std::fabs(y) + E1) * std::expm1(lg(U.av_c.u) + lg(U.av_s.u)) + U.av_c.eta * (1 + U.av_s.u) +
         U.av_s.eta;
}

/// Scores N(0, σ²) and values N(0, 1), rounded to the storage formats that read them.
struct Problem {
  AttnShape s;
  std::vector<double> pre, v;
};
Problem problem(const AttnShape& s, double logit_std, const Policy& pol, std::uint64_t seed) {
  const numerics::Format &fs = pol.at(OpKind::Softmax, Pass::Forward).storage,
                         &fv = pol.at(OpKind::AttnValues, Pass::Forward).storage;
  return {s, randn(static_cast<std::size_t>(s.att_size()), logit_std, fs, seed),
          randn(static_cast<std::size_t>(s.qkv_size()), 1.0, fv, seed + 1)};
}

template <class A, class V = typename A::Value>
std::vector<V> materialised(const std::vector<V>& pre, const std::vector<V>& v, const AttnShape& s, const Ctx<A>& sm,
                            const Ctx<A>& av) {
  std::vector<V> att(pre.size()), y(v.size());
  softmax_forward<A>(att, std::span<const V>(pre), s, sm);
  attn_values_forward<A>(y, std::span<const V>(att), std::span<const V>(v), s, av);
  return y;
}
template <class A, class V = typename A::Value>
std::pair<std::vector<V>, std::vector<V>> online(const std::vector<V>& pre, const std::vector<V>& v, const AttnShape& s,
                                                 const Ctx<A>& sm, const Ctx<A>& av) {
  std::vector<V> y(v.size()), lse(static_cast<std::size_t>(s.heads() * s.T));
  online_attention_forward<A>(y, lse, std::span<const V>(pre), std::span<const V>(v), s, sm, av);
  return {y, lse};
}

/// Exact facts of every row: the Reference's materialised weights and output.
struct Exact {
  std::vector<Ref> att, y;
};
Exact exact(const Problem& p) {
  const Ctx<Reference> rc(uniform(fmts::fp64));
  Exact e{std::vector<Ref>(p.pre.size()), std::vector<Ref>(p.v.size())};
  softmax_forward<Reference>(e.att, lift(p.pre), p.s, rc);
  attn_values_forward<Reference>(e.y, e.att, lift(p.v), p.s, rc);
  return e;
}

/// Calls f(row facts, row, t, d, e3 = index of y[b,t,h,d], S_d, y_d, Σ|v|) for every output element.
template <class F>
void for_outputs(const Problem& p, const Exact& ex, F&& f) {
  const AttnShape& s = p.s;
  for (std::int64_t row = 0; row < s.heads() * s.T; ++row) {
    const Row r = row_facts(p.pre, ex.att, s, row);
    const std::int64_t u = row / s.T, t = row % s.T, b = u / s.NH, h = u % s.NH;
    for (std::int64_t d = 0; d < s.hs; ++d) {
      double S = 0, sum_abs = 0;
      for (std::int64_t j = 0; j <= t; ++j) {
        const double vj = std::fabs(p.v[static_cast<std::size_t>((b * s.T + j) * s.C() + h * s.hs + d)]);
        S += static_cast<double>(ex.att[static_cast<std::size_t>(row * s.T + j)]) * vj;
        sum_abs += vj;
      }
      const auto e3 = static_cast<std::size_t>((b * s.T + t) * s.C() + h * s.hs + d);
      f(r, row, t, d, e3, S, static_cast<double>(ex.y[e3]), sum_abs);
    }
  }
}

/// Equal logits: every p = exp(0) = 1 exactly and m never grows, so ℓ = n and o = Σ v exactly for small
/// integer multiples of 1/4 (exact in every format tested); y = fl(Σ_j v_j / n) — uniform weights, the mean of
/// the value rows — and lse = fl(c + fl(log n)). The Reference gives the exact mean and c + log n.
TEST(OnlineAttention, ClosedFormEqualLogits) {
  const AttnShape s{1, 2, 16, 4};
  const double c = 0.75;
  std::vector<double> pre(static_cast<std::size_t>(s.att_size()), c), v(static_cast<std::size_t>(s.qkv_size()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * static_cast<double>(static_cast<int>(i * 7 % 13) - 6);
  for (const char* name : {"fp64", "fp32", "pure-fp16", "pure-bf16", "ane-fp16-acc32"}) {
    const Policy pol = Policy::preset(name);
    const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
    const auto [y, lse] = online<Emulated>(pre, v, s, Ctx<Emulated>(sp), Ctx<Emulated>(ap));
    const auto [yr, lser] = online<Reference>(lift(pre), lift(v), s, Ctx<Reference>(sp), Ctx<Reference>(ap));
    const auto rn = numerics::Rounding::NearestEven;
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const double n = static_cast<double>(t + 1);
        const std::size_t row = static_cast<std::size_t>(h * s.T + t);
        const double want_lse = numerics::round_to(
            sp.storage, rn,
            numerics::round_to(sp.compute, rn, c + numerics::round_to(sp.compute, rn, std::log(n))));
        EXPECT_EQ(lse[row], want_lse) << name << " t " << t;
        EXPECT_EQ(lser[row], Ref(c) + boost::multiprecision::log(Ref(n))) << name << " t " << t;
        for (std::int64_t d = 0; d < s.hs; ++d) {
          double sum = 0;
          for (std::int64_t j = 0; j <= t; ++j) sum += v[static_cast<std::size_t>(j * s.C() + h * s.hs + d)];
          const auto e = static_cast<std::size_t>(t * s.C() + h * s.hs + d);
          EXPECT_EQ(y[e], numerics::round_to(ap.storage, rn, numerics::round_to(ap.compute, rn, sum / n)))
              << name << " t " << t << " d " << d;
          EXPECT_EQ(yr[e], Ref(sum) / Ref(n)) << name << " t " << t << " d " << d;
        }
      }
    // The recomputed weights are uniform: the same value for every s ≤ t, and 1/n for the Reference up to its
    // roundings: l̂se = (c + log n(1+δ))(1+δ), the subtraction (1+δ) and the exp (1+δ) give
    // att = (1/n)·e^Δ(1+δ), |Δ| ≤ u(c + 3 log n)(1 + 2u).
    std::vector<Ref> att(pre.size());
    softmax_from_lse<Reference>(att, lift(pre), lser, s, Ctx<Reference>(sp));
    std::vector<double> att16(pre.size());
    softmax_from_lse<Emulated>(att16, cs(pre), cs(lse), s, Ctx<Emulated>(pol.at(OpKind::Softmax, Pass::BackwardData)));
    const double u = reference_fmt().u;
    for (std::int64_t t = 0; t < s.T; ++t) {
      const double n = static_cast<double>(t + 1);
      for (std::int64_t j = 0; j <= t; ++j) {
        const auto e = static_cast<std::size_t>(t * s.T + j);
        const double delta = u * (c + 3 * std::log(n)) * (1 + 2 * u);
        EXPECT_LE(std::fabs(static_cast<double>(att[e] - Ref(1) / Ref(n))), std::expm1(delta + lg(u)) / n);
        EXPECT_EQ(att16[e], att16[static_cast<std::size_t>(t * s.T)]) << name;
      }
    }
  }
}

/// The rounding contract, bit for bit: a scalar loop over numerics' correctly rounded operations (running
/// sums rounded to the accumulator format, o + p·v as one fused rounding) equals the op under ane-fp16
/// (running sums fp16) and ane-fp16-acc32 (running sums fp32).
TEST(OnlineAttention, BitExactAgainstScalarLoop) {
  using numerics::Rounding;
  for (const char* name : {"ane-fp16", "ane-fp16-acc32"}) {
    const Policy pol = Policy::preset(name);
    const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
    const Problem p = problem({1, 2, 40, 8}, 2.0, pol, 81);
    const auto [y, lse] = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap));
    const numerics::RoundingPlan c(sp.compute), st(sp.storage), al(sp.accumulate.format), ao(ap.accumulate.format),
        avc(ap.compute), avs(ap.storage);
    const Rounding rn = Rounding::NearestEven;
    const AttnShape& s = p.s;
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const double* x = p.pre.data() + (h * s.T + t) * s.T;
        double m = x[0], l = 0;
        std::vector<double> o(static_cast<std::size_t>(s.hs), 0.0);
        for (std::int64_t j = 0; j <= t; ++j) {
          if (x[j] > m) {
            const double alpha = numerics::exp(c, rn, numerics::sub(c, rn, m, x[j]));
            l = numerics::mul(al, rn, l, alpha);
            for (double& od : o) od = numerics::mul(ao, rn, od, alpha);
            m = x[j];
          }
          const double pj = numerics::exp(c, rn, numerics::sub(c, rn, x[j], m));
          l = numerics::add(al, rn, l, pj);
          const double pc = numerics::round_to(avs, rn, pj);
          for (std::int64_t d = 0; d < s.hs; ++d) {
            double& od = o[static_cast<std::size_t>(d)];
            od = numerics::fma(ao, rn, pc, p.v[static_cast<std::size_t>(j * s.C() + h * s.hs + d)], od);
          }
        }
        for (std::int64_t d = 0; d < s.hs; ++d) {
          const double want = numerics::round_to(avs, rn, numerics::div(avc, rn, o[static_cast<std::size_t>(d)], l));
          ASSERT_EQ(y[static_cast<std::size_t>(t * s.C() + h * s.hs + d)], want) << name << " h " << h << " t " << t;
        }
        const double want_lse =
            numerics::round_to(st, rn, numerics::add(c, rn, m, numerics::log(c, rn, l)));
        ASSERT_EQ(lse[static_cast<std::size_t>(h * s.T + t)], want_lse) << name << " h " << h << " t " << t;
      }
  }
}

/// fp64 (Emulated) and the Reference backend: both orders are within their a-priori bounds of the exact y,
/// so |y_online − y_materialised| ≤ B_online + B_materialised (u = 2^-53, resp. 2^-p of MPFR).
TEST(OnlineAttention, MatchesMaterialisedWithinBoundFp64AndReference) {
  const Policy pol = Policy::preset("fp64");
  const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
  const Problem p = problem({1, 2, 48, 8}, 3.0, pol, 21);
  const Exact ex = exact(p);
  const auto ym = materialised<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap));
  const auto yo = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap)).first;
  const auto ymr = materialised<Reference>(lift(p.pre), lift(p.v), p.s, Ctx<Reference>(sp), Ctx<Reference>(ap));
  const auto yor = online<Reference>(lift(p.pre), lift(p.v), p.s, Ctx<Reference>(sp), Ctx<Reference>(ap)).first;
  const Units U = units_of(sp, ap), UR = reference_units();
  double worst = 0, worst_ref = 0;
  for_outputs(p, ex, [&](const Row& r, std::int64_t row, std::int64_t, std::int64_t d, std::size_t e, double S,
                         double y, double sum_abs) {
    const double b = online_y_bound(U, r, S, y) + materialised_y_bound(U, r, S, y, sum_abs);
    ASSERT_LE(std::fabs(yo[e] - ym[e]), b) << "row " << row << " d " << d;
    const double br = online_y_bound(UR, r, S, y) + materialised_y_bound(UR, r, S, y, sum_abs);
    const double dr = std::fabs(static_cast<double>(yor[e] - ymr[e]));
    ASSERT_LE(dr, br) << "reference row " << row << " d " << d;
    worst = std::max(worst, std::fabs(yo[e] - ym[e]) / b);
    if (br > 0) worst_ref = std::max(worst_ref, dr / br);
  });
  std::cout << "[ online vs materialised ] fp64: max |diff|/bound = " << worst << "; Reference: " << worst_ref << "\n";
}

/// Runs the online order under `pol` and checks y and lse against the Reference elementwise within the online
/// bounds (file comment). Returns the largest error / bound ratio of y.
double check_online_bound(const Policy& pol, const Problem& p, const Exact& ex) {
  const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
  const auto [y, lse] = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap));
  const Units U = units_of(sp, ap);
  double worst = 0;
  for_outputs(p, ex, [&](const Row& r, std::int64_t row, std::int64_t, std::int64_t d, std::size_t e, double S,
                         double yex, double) {
    // The bound's premise: p and α ≥ exp(−D(1+u)) are normal in the Softmax compute and AttnValues storage.
    const double low = std::exp(-r.D * (1 + U.sm_c.u));
    ASSERT_GE(low, std::ldexp(1.0, std::max(sp.compute.emin, ap.storage.emin))) << "row " << row;
    const double b = online_y_bound(U, r, S, yex);
    ASSERT_LE(std::fabs(y[e] - yex), b) << "row " << row << " d " << d << " bound " << b;
    worst = std::max(worst, std::fabs(y[e] - yex) / b);
    if (d == 0) {
      ASSERT_LE(std::fabs(lse[static_cast<std::size_t>(row)] - r.lse), online_lse_bound(U, r)) << "lse row " << row;
    }
  });
  return worst;
}

/// ane-fp16 (every sum, exp and running sum in fp16), ane-fp16-acc32 (running sums in fp32) and pure-bf16.
TEST(OnlineAttention, ErrorBound16Bit) {
  for (const char* name : {"ane-fp16", "ane-fp16-acc32", "pure-bf16"}) {
    const Policy pol = Policy::parse(std::string(name) + ",attention=online");
    const Problem p = problem({1, 2, 64, 16}, 1.5, pol, 31);
    const double w = check_online_bound(pol, p, exact(p));
    std::cout << "[ online bound ] " << name << ": max error/bound = " << w << "\n";
  }
}

/// The backward's recomputed weights att = exp(x − l̂se) under ane-fp16 (softmax bwd-data entry) are within
/// |att − w| ≤ w(e^Δ(1+u_c)(1+u_s) − 1) + η_c(1+u_s) + η_s of the exact weights, Δ = B_lse + (|x| + |l̂se|)u_s
/// + |x − l̂se|·u_c (l̂se's error, the casts on entry and the rounded subtraction).
TEST(OnlineAttention, RecomputedWeightsWithinBoundFp16) {
  const Policy pol = Policy::parse("ane-fp16,attention=online");
  const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
  const OpPrecision& bp = pol.at(OpKind::Softmax, Pass::BackwardData);
  const Problem p = problem({1, 2, 64, 4}, 1.5, pol, 41);
  const Exact ex = exact(p);
  const auto lse = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap)).second;
  std::vector<double> att(p.pre.size());
  softmax_from_lse<Emulated>(att, cs(p.pre), cs(lse), p.s, Ctx<Emulated>(bp));
  const Units U = units_of(sp, ap);
  const Fmt bc = of(bp.compute), bs = of(bp.storage);
  for (std::int64_t row = 0; row < p.s.heads() * p.s.T; ++row) {
    const Row r = row_facts(p.pre, ex.att, p.s, row);
    ASSERT_GE(std::exp(-r.D * (1 + U.sm_c.u)), std::ldexp(1.0, sp.compute.emin)) << "premise, row " << row;
    const double L = lse[static_cast<std::size_t>(row)];
    for (std::int64_t j = 0; j < p.s.T; ++j) {
      const auto e = static_cast<std::size_t>(row * p.s.T + j);
      if (j > row % p.s.T) {
        ASSERT_EQ(att[e], 0.0);
        continue;
      }
      const double x = p.pre[e], w = static_cast<double>(ex.att[e]);
      const double delta = online_lse_bound(U, r) + (std::fabs(x) + std::fabs(L)) * bs.u + std::fabs(x - L) * bc.u;
      const double b = w * std::expm1(delta + lg(bc.u) + lg(bs.u)) + bc.eta * (1 + bs.u) + bs.eta;
      ASSERT_LE(std::fabs(att[e] - w), b) << "row " << row << " j " << j;
    }
  }
}

/// Under ane-fp16 the two orders round differently (the online order rescales its running sums and never
/// rounds normalised weights), so on realistic scores they must give different bits somewhere; both stay
/// within their bounds. Prints how much they differ.
TEST(OnlineAttention, OrdersGiveDifferentBitsUnderFp16) {
  const Policy pol = Policy::preset("ane-fp16");
  const OpPrecision &sp = pol.at(OpKind::Softmax, Pass::Forward), &ap = pol.at(OpKind::AttnValues, Pass::Forward);
  const Problem p = problem({1, 4, 128, 16}, 1.0, pol, 51);
  const Exact ex = exact(p);
  const auto ym = materialised<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap));
  const auto yo = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(sp), Ctx<Emulated>(ap)).first;
  const Units U = units_of(sp, ap);
  std::int64_t differ = 0;
  double max_su = 0, d2 = 0, em2 = 0, eo2 = 0, r2 = 0;
  const double u = numerics::unit_roundoff(fmts::fp16);
  for_outputs(p, ex, [&](const Row& r, std::int64_t, std::int64_t, std::int64_t, std::size_t e, double S, double y,
                         double sum_abs) {
    // The bounds' premise: exp(−D(1+u)) is normal in fp16 (p, α and the exps of both orders).
    ASSERT_GE(std::exp(-r.D * (1 + u)), std::ldexp(1.0, fmts::fp16.emin));
    if (ym[e] != yo[e]) ++differ;
    max_su = std::max(max_su, std::fabs(ym[e] - yo[e]) / (u * S));
    d2 += (ym[e] - yo[e]) * (ym[e] - yo[e]);
    ASSERT_LE(std::fabs(ym[e] - y), materialised_y_bound(U, r, S, y, sum_abs));
    ASSERT_LE(std::fabs(yo[e] - y), online_y_bound(U, r, S, y));
    em2 += (ym[e] - y) * (ym[e] - y);
    eo2 += (yo[e] - y) * (yo[e] - y);
    r2 += y * y;
  });
  std::cout << "[ orders differ ] ane-fp16, T = 128, 4 heads x 16: " << differ << " of " << p.v.size()
            << " outputs differ; ||y_mat - y_online|| / ||y|| = " << std::sqrt(d2 / r2)
            << ", max |y_mat - y_online| / (u_fp16 * sum_j w_j |v_j|) = " << max_su
            << "; normwise error vs MPFR: materialised "
            << std::sqrt(em2 / r2) << ", online " << std::sqrt(eo2 / r2) << "\n";
  EXPECT_GT(differ, 0);
}

/// The Runner wrapper computes the same bits as the op under the policy's entries and records local error for
/// y and lse under (attn-values, fwd), and for the recomputed weights under (softmax, bwd-data).
TEST(OnlineAttention, RunnerRecordsLocalError) {
  const Policy pol = Policy::parse("ane-fp16,attention=online");
  const Problem p = problem({2, 2, 24, 8}, 1.5, pol, 61);
  Runner run(pol, 7);
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 2});
  std::vector<double> y(p.v.size()), lse(static_cast<std::size_t>(p.s.heads() * p.s.T)), att(p.pre.size());
  run.online_attention_forward({OpKind::AttnValues, 0, "attn"}, y, lse, cs(p.pre), cs(p.v), p.s);
  run.softmax_from_lse({OpKind::Softmax, 0, "att"}, att, cs(p.pre), cs(lse), p.s);
  const auto [y2, lse2] = online<Emulated>(p.pre, p.v, p.s, Ctx<Emulated>(pol.at(OpKind::Softmax, Pass::Forward)),
                                           Ctx<Emulated>(pol.at(OpKind::AttnValues, Pass::Forward)));
  EXPECT_EQ(y, y2);
  EXPECT_EQ(lse, lse2);
  ASSERT_EQ(tape.records().size(), 3u);
  const OpRecord &ry = tape.records()[0], &rl = tape.records()[1], &ra = tape.records()[2];
  EXPECT_EQ(ry.op, OpKind::AttnValues);
  EXPECT_EQ(ry.pass, Pass::Forward);
  EXPECT_EQ(ry.tensor, "attn.y");
  EXPECT_EQ(rl.tensor, "attn.lse");
  EXPECT_EQ(ra.op, OpKind::Softmax);
  EXPECT_EQ(ra.pass, Pass::BackwardData);
  // 2 of 4 heads: y has T·hs elements per head, lse T; att T·T per query row, 2 of the 48 rows.
  EXPECT_EQ(ry.error.count, 2 * p.s.T * p.s.hs);
  EXPECT_EQ(rl.error.count, 2 * p.s.T);
  EXPECT_EQ(ra.error.count, 2 * p.s.T);
  EXPECT_GT(ry.error.max_ulp, 0.0);
  EXPECT_TRUE(std::isnan(ry.error.dot_ratio));
}

/// Materialised vs online under fp16 at sequence lengths 64..4096 (docs/studies/op-error.md, "Online vs
/// materialised softmax·V"): two causal heads of hs = 16, scores N(0, σ²) (σ = 1 and 4) and values N(0, 1)
/// rounded to fp16; reference = the fp64 policy's materialised output (its relative error, below T·2^-52, is
/// ~10^-12 of fp16's). Per arm and T: normwise relative error ‖ŷ − r‖₂/‖r‖₂ of y over all T query rows and over
/// the last 1/8 of the rows (the longest), and the fraction of outputs whose bits differ between the orders.
/// Labelled exhaustive (./run test skips it; about 4 min wall on 2 cores).
TEST(OnlineAttentionExhaustive, SequenceLengthSweepFp16) {
  std::cout << "| arm | σ | T | materialised, all rows | online, all rows | materialised, last T/8 rows | "
               "online, last T/8 rows | outputs differing |\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const double sigma : {1.0, 4.0})
    for (std::int64_t T = 64; T <= 4096; T *= 2) {
      const AttnShape s{1, 2, T, 16};
      const Policy base = Policy::preset("ane-fp16");
      const Problem p = problem(s, sigma, base, 71 + static_cast<std::uint64_t>(T));
      const Policy f64 = Policy::preset("fp64");
      const auto r = materialised<Emulated>(p.pre, p.v, s, Ctx<Emulated>(f64.at(OpKind::Softmax, Pass::Forward)),
                                            Ctx<Emulated>(f64.at(OpKind::AttnValues, Pass::Forward)));
      for (const char* arm : {"ane-fp16", "ane-fp16-acc32"}) {
        const Policy pol = Policy::preset(arm);
        const Ctx<Emulated> sm(pol.at(OpKind::Softmax, Pass::Forward)), av(pol.at(OpKind::AttnValues, Pass::Forward));
        const auto ym = materialised<Emulated>(p.pre, p.v, s, sm, av);
        const auto yo = online<Emulated>(p.pre, p.v, s, sm, av).first;
        double em = 0, eo = 0, rr = 0, emt = 0, eot = 0, rrt = 0;
        std::int64_t differ = 0;
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t c = 0; c < s.C(); ++c) {
            const auto e = static_cast<std::size_t>(t * s.C() + c);
            const double dm = (ym[e] - r[e]) * (ym[e] - r[e]), d_o = (yo[e] - r[e]) * (yo[e] - r[e]);
            em += dm, eo += d_o, rr += r[e] * r[e];
            if (t >= T - T / 8) emt += dm, eot += d_o, rrt += r[e] * r[e];
            differ += ym[e] != yo[e] ? 1 : 0;
          }
        std::cout << "| " << arm << " | " << sigma << " | " << T << " | " << std::sqrt(em / rr) << " | "
                  << std::sqrt(eo / rr) << " | " << std::sqrt(emt / rrt) << " | " << std::sqrt(eot / rrt) << " | "
                  << static_cast<double>(differ) / static_cast<double>(ym.size()) << " |" << std::endl;
        EXPECT_GT(differ, 0);
      }
    }
}

}  // namespace
}  // namespace roundoff::ops
