// Reference-backend gradients against central finite differences computed in MPFR (133 bits).
// With h = 1e-12 the truncation error is O(h²·|f'''|) ≈ 1e-24 and the cancellation error ≈ 2^-133/h ≈ 1e-28
// (relative to the loss scale, which is O(1) here), so 1e-18·(1 + |g|) is a bound with a wide margin, not
// a tuned tolerance. The loss is L = Σ_i c_i·y_i with fixed random c, so dy = c.
#include <gtest/gtest.h>

#include <functional>

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/matmul.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using RV = std::vector<Ref>;
namespace fmts = numerics::formats;

RV rand_ref(std::size_t n, double sigma, std::uint64_t seed) { return lift(test::randn(n, sigma, fmts::fp64, seed)); }

const Ctx<Reference>& rctx() {
  static const Ctx<Reference> c(uniform(fmts::fp64));
  return c;
}

Ref dotc(const RV& c, const RV& y) {
  Ref s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += c[i] * y[i];
  return s;
}

/// Checks grads[a][i] == ∂loss/∂inputs[a][i] for every element (or those with mask(a, i) true).
void check(const std::vector<RV*>& inputs, const std::vector<const RV*>& grads, const std::function<Ref()>& loss,
           const std::function<bool(std::size_t, std::size_t)>& mask = nullptr) {
  const Ref h("1e-12");
  for (std::size_t a = 0; a < inputs.size(); ++a) {
    RV& x = *inputs[a];
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (mask && !mask(a, i)) continue;
      const Ref x0 = x[i];
      x[i] = x0 + h;
      const Ref lp = loss();
      x[i] = x0 - h;
      const Ref lm = loss();
      x[i] = x0;
      const Ref num = (lp - lm) / (2 * h);
      const Ref g = (*grads[a])[i];
      const double err = static_cast<double>(abs(num - g));
      ASSERT_LE(err, 1e-18 * (1 + static_cast<double>(abs(g)))) << "input " << a << " element " << i << ": numeric "
                                                                   << static_cast<double>(num) << " analytic "
                                                                   << static_cast<double>(g);
    }
  }
}

TEST(GradCheck, Matmul) {
  const MatmulShape s{3, 5, 4};
  RV x = rand_ref(15, 1, 1), w = rand_ref(20, 1, 2), c = rand_ref(12, 1, 3), y(12), dx(15, Ref(0)), dw(20, Ref(0));
  auto loss = [&] {
    matmul_forward<Reference>(y, x, w, s, rctx());
    return dotc(c, y);
  };
  matmul_backward_data<Reference>(dx, c, w, s, rctx());
  matmul_backward_weight<Reference>(dw, c, x, s, rctx());
  check({&x, &w}, {&dx, &dw}, loss);
}

TEST(GradCheck, RmsNorm) {
  const RowShape s{3, 6};
  RV x = rand_ref(18, 1, 4), w = rand_ref(6, 1, 5), c = rand_ref(18, 1, 6), y(18), r(3), dx(18, Ref(0)), dw(6, Ref(0));
  auto loss = [&] {
    rmsnorm_forward<Reference>(y, r, x, w, s, 1e-5, rctx());
    return dotc(c, y);
  };
  (void)loss();
  rmsnorm_backward_data<Reference>(dx, c, x, w, r, s, rctx());
  rmsnorm_backward_weight<Reference>(dw, c, x, r, s, rctx());
  check({&x, &w}, {&dx, &dw}, loss);
}

TEST(GradCheck, Rope) {
  const AttnShape s{1, 2, 4, 4};
  RV ct(8), st(8);
  rope_angles<Reference>(ct, st, s.T, s.hs, 10000.0, rctx());
  RV x = rand_ref(s.qkv_size(), 1, 7), c = rand_ref(s.qkv_size(), 1, 8), y(x.size()), dx(x.size(), Ref(0));
  auto loss = [&] {
    rope_forward<Reference>(y, x, ct, st, s, rctx());
    return dotc(c, y);
  };
  rope_backward_data<Reference>(dx, c, ct, st, s, rctx());
  check({&x}, {&dx}, loss);
}

TEST(GradCheck, AttentionScoresSoftmaxValues) {
  const AttnShape s{1, 2, 4, 3};
  RV q = rand_ref(s.qkv_size(), 1, 9), k = rand_ref(s.qkv_size(), 1, 10), v = rand_ref(s.qkv_size(), 1, 11);
  RV c = rand_ref(s.qkv_size(), 1, 12), pre(s.att_size()), att(s.att_size()), out(s.qkv_size());
  auto loss = [&] {
    attn_scores_forward<Reference>(pre, q, k, s, rctx());
    softmax_forward<Reference>(att, pre, s, rctx());
    attn_values_forward<Reference>(out, att, v, s, rctx());
    return dotc(c, out);
  };
  (void)loss();
  RV datt(s.att_size(), Ref(0)), dv(s.qkv_size(), Ref(0)), dpre(s.att_size(), Ref(0)), dq(s.qkv_size(), Ref(0)),
      dk(s.qkv_size(), Ref(0));
  attn_values_backward_data<Reference>(datt, dv, c, att, v, s, rctx());
  softmax_backward_data<Reference>(dpre, datt, att, s, rctx());
  attn_scores_backward_data<Reference>(dq, dk, dpre, q, k, s, rctx());
  check({&q, &k, &v}, {&dq, &dk, &dv}, loss);
}

TEST(GradCheck, SiluSwigluResidual) {
  const RowShape s{2, 5};
  RV x = rand_ref(10, 2, 13), u = rand_ref(10, 1, 14), c = rand_ref(10, 1, 15), a(10), h(10), r(10);
  const double alpha = 0.35;
  auto loss = [&] {
    silu_forward<Reference>(a, x, s, rctx());
    swiglu_forward<Reference>(h, a, u, s, rctx());
    residual_forward<Reference>(r, u, h, alpha, s, rctx());
    return dotc(c, r);
  };
  (void)loss();
  RV du(10, Ref(0)), dh(10, Ref(0)), da(10, Ref(0)), dx(10, Ref(0));
  residual_backward_data<Reference>(du, dh, c, alpha, s, rctx());
  swiglu_backward_data<Reference>(da, du, dh, a, u, s, rctx());
  silu_backward_data<Reference>(dx, da, x, s, rctx());
  check({&x, &u}, {&dx, &du}, loss);
}

TEST(GradCheck, CrossEntropy) {
  const RowShape s{3, 7};
  RV l = rand_ref(21, 2, 16), losses(3), probs(21), dl(21, Ref(0));
  const std::vector<std::int32_t> tg{2, 0, 6};
  auto loss = [&] {
    cross_entropy_forward<Reference>(losses, probs, l, test::cs(tg), s, rctx());
    return mean_loss<Ref>(losses);
  };
  (void)loss();
  cross_entropy_backward_data<Reference>(dl, probs, test::cs(tg), 1.0 / 3.0, s, rctx());
  // grad_scale 1/3 enters as the binary64 constant 1/3; its relative error 2^-54 scales the gradient.
  const Ref fix = Ref(1) / 3 / Ref(1.0 / 3.0);
  for (Ref& g : dl) g *= fix;
  check({&l}, {&dl}, loss);
}

}  // namespace
}  // namespace roundoff::ops
