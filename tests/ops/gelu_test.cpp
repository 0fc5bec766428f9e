// GELU (ops/gelu.hpp), both forms, forward and backward:
//  - the rounding contract: a scalar mirror of the documented steps (each one Ctx<Emulated> call on a value,
//    tracked together with an a-priori bound on its distance to the exact value) gives the op's output bit for
//    bit under fp32, ane-fp16, amp-bf16 and pure-bf16;
//  - the bound: |op − Reference| ≤ the mirror's propagated bound, element by element. The bound follows the
//    contract step by step (no tuned tolerance): an input x̂ with |x̂ − x| ≤ e_x, rounded once to a format with unit
//    roundoff u and half-smallest-subnormal η, gives |fl(z) − z| ≤ u·(1 + 2u)·|fl(z)| + η, and
//      a·b:   |âb̂ − ab| ≤ |â|e_b + (|b̂| + e_b)e_a         a ± b: e_a + e_b
//      erf:   Lipschitz 2/√π                                tanh: Lipschitz 1
//      exp:   |exp(â) − exp(a)| ≤ exp(â)·expm1(e_a)         constants: |ĉ − c| (c the binary64 value, the Reference's)
//    plus 2^-52·|Reference| for the Reference's conversion to binary64, all summed in binary64 with a final
//    factor 1 + 2^-30 covering the bound's own evaluation;
//  - the gradient: the Reference backward against central differences of the Reference forward (as
//    gradcheck_test.cpp), with a second term for the binary64 constants (the forward's exact derivative uses
//    1/√2 and √(2/π) as binary64 numbers; the backward's 1/√(2π), 3·0.044715 and √(2/π)/2 are their own binary64
//    roundings): each is off by at most 2^-53 relatively, and each enters a term of magnitude ≤ 1 + |x|, so
//    |error| ≤ 1e-18·(1 + |g|) + 2^-49·|c_i|·(1 + |x_i|)³;
//  - erf and tanh of the backend: correctly rounded (numerics::elementary; every fp16/bf16 input in
//    tests/numerics/elementary_test.cpp) and MPFR's in the Reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/gelu.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;

/// A computed value and an a-priori bound on its distance to the exact (Reference) value.
struct Tracked {
  double v;
  double e;
};

/// The mirror: each method is one documented step of the contract under a deterministic Ctx<Emulated>.
struct Mirror {
  const Ctx<Emulated>& ctx;
  double u, eta;      // compute format
  double us, etas;    // storage format
  static Key k() { return key(Tensor::Y, 0, 0); }
  double round_err(double r) const { return u * (1 + 2 * u) * std::fabs(r) + eta; }
  Tracked c(double x) const {
    const double r = ctx.c(x);
    return {r, std::fabs(r - x)};
  }
  Tracked mul(Tracked a, Tracked b) const {
    const double r = ctx.mul(a.v, b.v, k());
    return {r, std::fabs(a.v) * b.e + (std::fabs(b.v) + b.e) * a.e + round_err(r)};
  }
  Tracked add(Tracked a, Tracked b) const {
    const double r = ctx.add(a.v, b.v, k());
    return {r, a.e + b.e + round_err(r)};
  }
  Tracked sub(Tracked a, Tracked b) const {
    const double r = ctx.sub(a.v, b.v, k());
    return {r, a.e + b.e + round_err(r)};
  }
  Tracked erf(Tracked a) const {
    const double r = ctx.erf(a.v, k());
    return {r, 1.1283791670955126 * (1 + 0x1p-50) * a.e + round_err(r)};
  }
  Tracked tanh(Tracked a) const {
    const double r = ctx.tanh(a.v, k());
    return {r, a.e + round_err(r)};
  }
  Tracked exp(Tracked a) const {
    const double r = ctx.exp(a.v, k());
    return {r, (std::fabs(r) + round_err(r)) * std::expm1(a.e) * (1 + 0x1p-50) + round_err(r)};
  }
  Tracked store(Tracked a) const {
    const double r = ctx.store(a.v, k());
    return {r, a.e + us * (1 + 2 * us) * std::fabs(r) + etas};
  }
  Tracked in(double x) const { return {ctx.in(x, k()), 0.0}; }  // inputs are storage values: exact
};

double eta_of(const numerics::Format& f) {
  const numerics::RoundingPlan p(f);
  return std::ldexp(1.0, p.qexp_min) / 2;
}

/// The forward of one element, step for step as documented in ops/gelu.hpp.
Tracked forward(const Mirror& m, double x, GeluForm form) {
  const Tracked xi = m.in(x), one = m.c(1.0), half = m.c(0.5);
  switch (form) {
    case GeluForm::Erf: {
      const Tracked g = m.add(one, m.erf(m.mul(xi, m.c(kGeluInvSqrt2))));
      return m.store(m.mul(half, m.mul(xi, g)));
    }
    case GeluForm::Tanh: {
      const Tracked x3 = m.mul(m.mul(xi, xi), xi);
      const Tracked s = m.add(xi, m.mul(m.c(kGeluCubic), x3));
      const Tracked g = m.add(one, m.tanh(m.mul(m.c(kGeluSqrt2OverPi), s)));
      return m.store(m.mul(half, m.mul(xi, g)));
    }
  }
  return {};
}

/// dx of one element from dx = 0: store(in(0) + in(dy)·gelu'(x)).
Tracked backward(const Mirror& m, double x, double dy, GeluForm form) {
  const Tracked xi = m.in(x), one = m.c(1.0), half = m.c(0.5);
  Tracked d{};
  switch (form) {
    case GeluForm::Erf: {
      const Tracked t = m.mul(xi, m.c(kGeluInvSqrt2));
      const Tracked cdf = m.mul(half, m.add(one, m.erf(t)));
      const Tracked q = m.exp(m.mul(m.c(-0.5), m.mul(xi, xi)));
      d = m.add(cdf, m.mul(xi, m.mul(m.c(kGeluInvSqrt2Pi), q)));
      break;
    }
    case GeluForm::Tanh: {
      const Tracked x2 = m.mul(xi, xi);
      const Tracked s = m.add(xi, m.mul(m.c(kGeluCubic), m.mul(x2, xi)));
      const Tracked t = m.tanh(m.mul(m.c(kGeluSqrt2OverPi), s));
      const Tracked l = m.mul(half, m.add(one, t));
      const Tracked w = m.sub(one, m.mul(t, t));
      const Tracked v = m.add(one, m.mul(m.c(3.0 * kGeluCubic), x2));
      const Tracked kv = m.mul(m.c(0.5 * kGeluSqrt2OverPi), v);
      d = m.add(l, m.mul(xi, m.mul(w, kv)));
      break;
    }
  }
  return m.store(m.add(m.in(0.0), m.mul(m.in(dy), d)));
}

void check_policy(const std::string& preset, GeluForm form) {
  const Policy pol = Policy::preset(preset);
  const std::string what = preset + " gelu-" + std::string(name_of(form));
  for (const Pass pass : {Pass::Forward, Pass::BackwardData}) {
    const OpPrecision& p = pol.at(OpKind::Gelu, pass);
    const Ctx<Emulated> ctx(p);
    const Mirror m{ctx, numerics::unit_roundoff(p.compute), eta_of(p.compute), numerics::unit_roundoff(p.storage),
                   eta_of(p.storage)};
    const RowShape s{6, 50};
    // N(0, 2²): both tails of Φ, cancellation in 1 + erf for x ≪ 0, and the tanh form's cubic term.
    const auto x = randn(s.size(), 2.0, p.storage, 31), dy = randn(s.size(), 1.0, p.storage, 32);
    std::vector<double> got(s.size(), 0.0);
    std::vector<Ref> ref(s.size(), Ref(0));
    const Ctx<Reference> rc(p);
    if (pass == Pass::Forward) {
      gelu_forward<Emulated>(got, cs(x), s, form, ctx);
      gelu_forward<Reference>(ref, lift(x), s, form, rc);
    } else {
      gelu_backward_data<Emulated>(got, cs(dy), cs(x), s, form, ctx);
      gelu_backward_data<Reference>(ref, lift(dy), lift(x), s, form, rc);
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Tracked want = pass == Pass::Forward ? forward(m, x[i], form) : backward(m, x[i], dy[i], form);
      ASSERT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(want.v))
          << what << " " << name_of(pass) << " element " << i << " x=" << x[i] << ": op " << got[i] << ", contract "
          << want.v;
      const double exact = static_cast<double>(ref[i]);
      const double bound = (want.e + 0x1p-52 * std::fabs(exact)) * (1 + 0x1p-30);
      ASSERT_LE(std::fabs(got[i] - exact), bound)
          << what << " " << name_of(pass) << " element " << i << " x=" << x[i] << ": op " << got[i] << ", reference "
          << exact;
    }
  }
}

TEST(Gelu, ContractAndBoundUnderPresets) {
  for (const char* preset : {"fp32", "ane-fp16", "amp-bf16", "pure-bf16", "fp64"})
    for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) check_policy(preset, form);
}

/// The policy puts GELU where SiLU is: the same entry as SiLU's in every preset, both passes.
TEST(Gelu, PolicyFollowsSilu) {
  for (const std::string& name : Policy::preset_names()) {
    const Policy p = Policy::preset(name);
    for (const Pass pass : kAllPasses)
      EXPECT_EQ(p.at(OpKind::Gelu, pass), p.at(OpKind::Silu, pass)) << name << " " << name_of(pass);
  }
}

/// Reference gradients against central differences in MPFR (see the file comment for the bound).
TEST(Gelu, GradCheck) {
  const Ctx<Reference> rc(uniform(fmts::fp64));
  const RowShape s{2, 9};
  const auto xd = randn(s.size(), 2.0, fmts::fp64, 41), cd = randn(s.size(), 1.0, fmts::fp64, 42);
  std::vector<Ref> x = lift(xd), c = lift(cd), y(s.size());
  const Ref h("1e-12");
  for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    auto loss = [&] {
      gelu_forward<Reference>(y, x, s, form, rc);
      Ref l = 0;
      for (std::size_t i = 0; i < y.size(); ++i) l += c[i] * y[i];
      return l;
    };
    std::vector<Ref> dx(s.size(), Ref(0));
    gelu_backward_data<Reference>(dx, c, x, s, form, rc);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const Ref x0 = x[i];
      x[i] = x0 + h;
      const Ref lp = loss();
      x[i] = x0 - h;
      const Ref lm = loss();
      x[i] = x0;
      const double num = static_cast<double>((lp - lm) / (2 * h)), g = static_cast<double>(dx[i]);
      const double ax = 1 + std::fabs(xd[i]);
      ASSERT_LE(std::fabs(num - g), 1e-18 * (1 + std::fabs(g)) + 0x1p-49 * std::fabs(cd[i]) * ax * ax * ax)
          << name_of(form) << " element " << i << " x=" << xd[i] << ": numeric " << num << " analytic " << g;
    }
  }
}

/// Closed forms: gelu(0) = 0 and gelu'(0) = 1/2 exactly in every preset; gelu(x) = x for large x (Φ rounds to 1).
TEST(Gelu, ClosedForms) {
  for (const std::string& name : Policy::preset_names())
    for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
      const Policy pol = Policy::preset(name);
      const RowShape s{1, 3};
      const std::vector<double> x{0.0, 64.0, -64.0}, dy{1.0, 1.0, 1.0};
      std::vector<double> y(3), dx(3, 0.0);
      gelu_forward<Emulated>(y, cs(x), s, form, Ctx<Emulated>(pol.at(OpKind::Gelu, Pass::Forward)));
      gelu_backward_data<Emulated>(dx, cs(dy), cs(x), s, form, Ctx<Emulated>(pol.at(OpKind::Gelu, Pass::BackwardData)));
      EXPECT_EQ(y[0], 0.0) << name;
      EXPECT_EQ(y[1], 64.0) << name;
      EXPECT_EQ(y[2], 0.0) << name;  // −64·(1 + erf(−45.25…)) = −64·0 (erf rounds to −1)
      EXPECT_EQ(dx[0], 0.5) << name;
    }
}

}  // namespace
}  // namespace roundoff::ops
