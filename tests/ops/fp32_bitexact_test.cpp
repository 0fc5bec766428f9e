// The `fp32` policy reproduces a plain binary32 implementation of every op bit for bit. The float loops
// below are the straightforward llm.c-style code with the same operation order: fp32-seq accumulation is
// fused (s = fmaf(a, b, s)), elementary functions are correctly rounded (computed in binary64, then rounded
// once: double rounding would need a binary64 value within 2^-29 relative of a binary32 midpoint, which
// these inputs do not hit — a mismatch would show up here as a failure, not pass silently).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>

#include "ops/activation.hpp"
#include "ops/adamw.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/matmul.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::cs;
using test::randn;
namespace fmts = numerics::formats;

const Ctx<Emulated>& fp32_ctx() {
  static const Ctx<Emulated> c(uniform(fmts::fp32));
  return c;
}

/// Bitwise equality of the emulated doubles with the float results.
void expect_bits(const std::vector<double>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto g = static_cast<float>(got[i]);
    if (static_cast<double>(g) != got[i] || std::memcmp(&g, &want[i], sizeof g) != 0) {
      if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "]: emulated " << got[i] << " float " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

float sigmoidf_cr(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }
float expf_cr(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
float logf_cr(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }

TEST(Fp32BitExact, Matmul) {
  const MatmulShape s{7, 33, 5};
  const auto x = randn(s.n * s.in, 1.0, fmts::fp32, 1), w = randn(s.out * s.in, 0.3, fmts::fp32, 2);
  const auto dy = randn(s.n * s.out, 1.0, fmts::fp32, 3);
  std::vector<double> y(s.n * s.out), dx = randn(s.n * s.in, 0.1, fmts::fp32, 4), dw = randn(s.out * s.in, 0.1, fmts::fp32, 5);
  std::vector<float> fy(y.size()), fdx(dx.begin(), dx.end()), fdw(dw.begin(), dw.end());
  const auto fx = test::to_float(x), fw = test::to_float(w), fdy = test::to_float(dy);
  matmul_forward<Emulated>(y, cs(x), cs(w), s, fp32_ctx());
  matmul_backward_data<Emulated>(dx, cs(dy), cs(w), s, fp32_ctx());
  matmul_backward_weight<Emulated>(dw, cs(dy), cs(x), s, fp32_ctx());
  for (int n = 0; n < s.n; ++n)
    for (int o = 0; o < s.out; ++o) {
      float acc = 0;
      for (int k = 0; k < s.in; ++k) acc = std::fma(fx[n * s.in + k], fw[o * s.in + k], acc);
      fy[n * s.out + o] = acc;
    }
  for (int n = 0; n < s.n; ++n)
    for (int i = 0; i < s.in; ++i) {
      float acc = fdx[n * s.in + i];
      for (int o = 0; o < s.out; ++o) acc = std::fma(fdy[n * s.out + o], fw[o * s.in + i], acc);
      fdx[n * s.in + i] = acc;
    }
  for (int o = 0; o < s.out; ++o)
    for (int i = 0; i < s.in; ++i) {
      float acc = fdw[o * s.in + i];
      for (int n = 0; n < s.n; ++n) acc = std::fma(fdy[n * s.out + o], fx[n * s.in + i], acc);
      fdw[o * s.in + i] = acc;
    }
  expect_bits(y, fy, "y");
  expect_bits(dx, fdx, "dx");
  expect_bits(dw, fdw, "dw");
}

TEST(Fp32BitExact, RmsNorm) {
  const RowShape s{6, 40};
  const float eps = 1e-5f;
  const auto x = randn(s.size(), 2.0, fmts::fp32, 11), w = randn(s.cols, 1.0, fmts::fp32, 12);
  const auto dy = randn(s.size(), 1.0, fmts::fp32, 13);
  std::vector<double> y(s.size()), r(s.rows), dx(s.size(), 0.0), dw(s.cols, 0.0);
  rmsnorm_forward<Emulated>(y, r, cs(x), cs(w), s, eps, fp32_ctx());
  rmsnorm_backward_data<Emulated>(dx, cs(dy), cs(x), cs(w), cs(r), s, fp32_ctx());
  rmsnorm_backward_weight<Emulated>(dw, cs(dy), cs(x), cs(r), s, fp32_ctx());
  const auto fx = test::to_float(x), fw = test::to_float(w), fdy = test::to_float(dy);
  std::vector<float> fy(y.size()), fr(s.rows), fdx(dx.size(), 0.f), fdw(dw.size(), 0.f), xhat(x.size());
  for (int i = 0; i < s.rows; ++i) {
    const float* xr = fx.data() + i * s.cols;
    float ss = 0;
    for (int j = 0; j < s.cols; ++j) ss = std::fma(xr[j], xr[j], ss);
    const float t = ss / static_cast<float>(s.cols) + eps;
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t)));
    fr[i] = inv;
    for (int j = 0; j < s.cols; ++j) fy[i * s.cols + j] = (xr[j] * inv) * fw[j];
    std::vector<float> g(s.cols);
    for (int j = 0; j < s.cols; ++j) g[j] = fw[j] * fdy[i * s.cols + j];
    float sg = 0;
    for (int j = 0; j < s.cols; ++j) sg = std::fma(g[j], xr[j], sg);
    const float a = (((inv * inv) * inv) * sg) / static_cast<float>(s.cols);
    for (int j = 0; j < s.cols; ++j) fdx[i * s.cols + j] = 0.f + (inv * g[j] - a * xr[j]);
    for (int j = 0; j < s.cols; ++j) xhat[i * s.cols + j] = xr[j] * inv;
  }
  for (int j = 0; j < s.cols; ++j) {
    float acc = 0;
    for (int i = 0; i < s.rows; ++i) acc = std::fma(fdy[i * s.cols + j], xhat[i * s.cols + j], acc);
    fdw[j] = 0.f + acc;
  }
  expect_bits(y, fy, "y");
  expect_bits(r, fr, "rstd");
  expect_bits(dx, fdx, "dx");
  expect_bits(dw, fdw, "dw");
}

TEST(Fp32BitExact, AttentionChain) {
  const AttnShape s{2, 2, 9, 8};
  const auto q = randn(s.qkv_size(), 1.0, fmts::fp32, 21), k = randn(s.qkv_size(), 1.0, fmts::fp32, 22),
             v = randn(s.qkv_size(), 1.0, fmts::fp32, 23), dout = randn(s.qkv_size(), 1.0, fmts::fp32, 24);
  std::vector<double> pre(s.att_size()), att(s.att_size()), out(s.qkv_size()), datt(s.att_size(), 0.0),
      dv(s.qkv_size(), 0.0), dpre(s.att_size(), 0.0);
  attn_scores_forward<Emulated>(pre, cs(q), cs(k), s, fp32_ctx());
  softmax_forward<Emulated>(att, cs(pre), s, fp32_ctx());
  attn_values_forward<Emulated>(out, cs(att), cs(v), s, fp32_ctx());
  attn_values_backward_data<Emulated>(datt, dv, cs(dout), cs(att), cs(v), s, fp32_ctx());
  softmax_backward_data<Emulated>(dpre, cs(datt), cs(att), s, fp32_ctx());
  const auto fq = test::to_float(q), fk = test::to_float(k), fv = test::to_float(v), fd = test::to_float(dout);
  const int T = static_cast<int>(s.T), C = static_cast<int>(s.C()), hs = static_cast<int>(s.hs);
  std::vector<float> fpre(pre.size(), 0.f), fatt(att.size(), 0.f), fout(out.size()), fdatt(att.size(), 0.f),
      fdv(dv.size(), 0.f), fdpre(att.size(), 0.f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      float* P = fpre.data() + (b * s.NH + h) * T * T;
      float* A = fatt.data() + (b * s.NH + h) * T * T;
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j <= t; ++j) {
          float acc = 0;
          for (int d = 0; d < hs; ++d) acc = std::fma(fq[(b * T + t) * C + h * hs + d], fk[(b * T + j) * C + h * hs + d], acc);
          P[t * T + j] = acc * scale;
        }
        float m = P[t * T];
        for (int j = 1; j <= t; ++j) m = std::max(m, P[t * T + j]);
        std::vector<float> e(t + 1);
        float z = 0;
        for (int j = 0; j <= t; ++j) e[j] = expf_cr(P[t * T + j] - m);
        for (int j = 0; j <= t; ++j) z = z + e[j];
        for (int j = 0; j <= t; ++j) A[t * T + j] = e[j] / z;
        for (int d = 0; d < hs; ++d) {
          float acc = 0;
          for (int j = 0; j <= t; ++j) acc = std::fma(A[t * T + j], fv[(b * T + j) * C + h * hs + d], acc);
          fout[(b * T + t) * C + h * hs + d] = acc;
        }
      }
      float* DA = fdatt.data() + (b * s.NH + h) * T * T;
      for (int t = 0; t < T; ++t)
        for (int j = 0; j <= t; ++j) {
          float acc = 0;
          for (int d = 0; d < hs; ++d) acc = std::fma(fd[(b * T + t) * C + h * hs + d], fv[(b * T + j) * C + h * hs + d], acc);
          DA[t * T + j] = 0.f + acc;
        }
      for (int j = 0; j < T; ++j)
        for (int d = 0; d < hs; ++d) {
          float acc = 0;
          for (int t = j; t < T; ++t) acc = std::fma(A[t * T + j], fd[(b * T + t) * C + h * hs + d], acc);
          fdv[(b * T + j) * C + h * hs + d] = 0.f + acc;
        }
      float* DP = fdpre.data() + (b * s.NH + h) * T * T;
      for (int t = 0; t < T; ++t) {
        float dd = 0;
        for (int j = 0; j <= t; ++j) dd = std::fma(A[t * T + j], DA[t * T + j], dd);
        for (int j = 0; j <= t; ++j) DP[t * T + j] = 0.f + A[t * T + j] * (DA[t * T + j] - dd);
      }
    }
  expect_bits(pre, fpre, "preatt");
  expect_bits(att, fatt, "att");
  expect_bits(out, fout, "out");
  expect_bits(datt, fdatt, "datt");
  expect_bits(dv, fdv, "dv");
  expect_bits(dpre, fdpre, "dpreatt");
}

TEST(Fp32BitExact, PointwiseOps) {
  const RowShape s{5, 24};
  const auto x = randn(s.size(), 3.0, fmts::fp32, 31), u = randn(s.size(), 1.0, fmts::fp32, 32),
             dy = randn(s.size(), 1.0, fmts::fp32, 33);
  const double alpha = 0.35355339059327373;  // 1/√8
  std::vector<double> y(s.size()), dx(s.size(), 0.0), h(s.size()), r(s.size()), rx(s.size(), 0.0), rf(s.size(), 0.0);
  silu_forward<Emulated>(y, cs(x), s, fp32_ctx());
  silu_backward_data<Emulated>(dx, cs(dy), cs(x), s, fp32_ctx());
  swiglu_forward<Emulated>(h, cs(y), cs(u), s, fp32_ctx());
  residual_forward<Emulated>(r, cs(u), cs(x), alpha, s, fp32_ctx());
  residual_backward_data<Emulated>(rx, rf, cs(dy), alpha, s, fp32_ctx());
  std::vector<float> fy(y.size()), fdx(y.size()), fh(y.size()), fr(y.size()), frx(y.size()), frf(y.size());
  const float fa = static_cast<float>(alpha);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float xi = static_cast<float>(x[i]), sg = sigmoidf_cr(xi), di = static_cast<float>(dy[i]);
    fy[i] = xi * sg;
    fdx[i] = 0.f + (di * sg) * (1.f + xi * (1.f - sg));
    fh[i] = fy[i] * static_cast<float>(u[i]);
    fr[i] = static_cast<float>(u[i]) + fa * xi;
    frx[i] = 0.f + di;
    frf[i] = 0.f + fa * di;
  }
  expect_bits(y, fy, "silu");
  expect_bits(dx, fdx, "silu dx");
  expect_bits(h, fh, "swiglu");
  expect_bits(r, fr, "residual");
  expect_bits(rx, frx, "residual dx");
  expect_bits(rf, frf, "residual df");
}

TEST(Fp32BitExact, RopeAndCrossEntropy) {
  const AttnShape s{1, 2, 6, 8};
  const int H = 4;
  std::vector<double> cs_t(s.T * H), sn_t(s.T * H), y(s.qkv_size());
  rope_angles<Emulated>(cs_t, sn_t, s.T, s.hs, 10000.0, fp32_ctx());
  const auto x = randn(s.qkv_size(), 1.0, fmts::fp32, 41);
  rope_forward<Emulated>(y, cs(x), cs(cs_t), cs(sn_t), s, fp32_ctx());
  std::vector<float> fc(cs_t.size()), fs(sn_t.size()), fy(y.size());
  for (int p = 0; p < s.T; ++p)
    for (int i = 0; i < H; ++i) {
      const float f = static_cast<float>(std::pow(10000.0, -2.0 * i / static_cast<double>(s.hs)));
      const float th = static_cast<float>(p) * f;
      fc[p * H + i] = static_cast<float>(std::cos(static_cast<double>(th)));
      fs[p * H + i] = static_cast<float>(std::sin(static_cast<double>(th)));
    }
  for (int t = 0; t < s.T; ++t)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < H; ++i) {
        const std::size_t e = t * s.C() + h * s.hs + 2 * i;
        const float x0 = static_cast<float>(x[e]), x1 = static_cast<float>(x[e + 1]), c = fc[t * H + i], sn = fs[t * H + i];
        fy[e] = x0 * c - x1 * sn;
        fy[e + 1] = x0 * sn + x1 * c;
      }
  expect_bits(cs_t, fc, "cos");
  expect_bits(sn_t, fs, "sin");
  expect_bits(y, fy, "rope");

  const RowShape cshape{4, 50};
  const auto logits = randn(cshape.size(), 2.0, fmts::fp32, 42);
  const auto tg = test::random_tokens(cshape.rows, 50, 43);
  std::vector<double> loss(cshape.rows), probs(cshape.size()), dl(cshape.size(), 0.0);
  cross_entropy_forward<Emulated>(loss, probs, cs(logits), cs(tg), cshape, fp32_ctx());
  cross_entropy_backward_data<Emulated>(dl, cs(probs), cs(tg), 0.25, cshape, fp32_ctx());
  std::vector<float> floss(loss.size()), fp(probs.size()), fdl(dl.size());
  for (int r = 0; r < cshape.rows; ++r) {
    const double* l = logits.data() + r * cshape.cols;
    float m = static_cast<float>(l[0]);
    for (int j = 1; j < cshape.cols; ++j) m = std::max(m, static_cast<float>(l[j]));
    std::vector<float> e(cshape.cols);
    float z = 0;
    for (int j = 0; j < cshape.cols; ++j) e[j] = expf_cr(static_cast<float>(l[j]) - m);
    for (int j = 0; j < cshape.cols; ++j) z = z + e[j];
    for (int j = 0; j < cshape.cols; ++j) fp[r * cshape.cols + j] = e[j] / z;
    floss[r] = (m + logf_cr(z)) - static_cast<float>(l[tg[r]]);
    for (int j = 0; j < cshape.cols; ++j) {
      float p = fp[r * cshape.cols + j];
      if (j == tg[r]) p = p - 1.f;
      fdl[r * cshape.cols + j] = 0.f + p * 0.25f;
    }
  }
  expect_bits(probs, fp, "probs");
  expect_bits(loss, floss, "loss");
  expect_bits(dl, fdl, "dlogits");
}

TEST(Fp32BitExact, AdamW) {
  const std::size_t n = 64;
  auto w = randn(n, 0.5, fmts::fp32, 51), m = randn(n, 0.01, fmts::fp32, 52), g = randn(n, 0.02, fmts::fp32, 54);
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(m[i] * m[i]);
  auto fw = test::to_float(w), fm = test::to_float(m), fv = test::to_float(v);
  const AdamWConfig cfg{};
  const Policy pol = Policy::preset("fp32");
  adamw_update<Emulated>(w, m, v, cs(g), {}, cfg, 3, AdamWFormats(pol), fp32_ctx());
  const float b1 = 0.9f, b2 = 0.95f, ob1 = static_cast<float>(1.0 - 0.9), ob2 = static_cast<float>(1.0 - 0.95);
  const float c1 = static_cast<float>(1.0 - std::pow(0.9, 3.0)), c2 = static_cast<float>(1.0 - std::pow(0.95, 3.0));
  const float eps = 1e-8f, wd = 0.1f, lr = 3e-4f;
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = static_cast<float>(g[i]);
    fm[i] = b1 * fm[i] + ob1 * gi;
    fv[i] = b2 * fv[i] + ob2 * (gi * gi);
    const float mh = fm[i] / c1, vh = fv[i] / c2;
    fw[i] = fw[i] - lr * (mh / (std::sqrt(vh) + eps) + wd * fw[i]);
  }
  expect_bits(w, fw, "w");
  expect_bits(m, fm, "m");
  expect_bits(v, fv, "v");
}

}  // namespace
}  // namespace roundoff::ops

namespace roundoff::ops {
namespace {

// The embedding's scatter-add in binary32 reads only the rows its tokens add into, so it checks only those: an
// untouched row may hold anything (NaN, inf, a value that is not binary32) and keeps it bit for bit, while a
// touched row holding a value that is not binary32 takes the per-element definition, which casts it to fp32
// before the add (1 + 2^-24 + 2^-40 → 1 + 2^-23, then + 2^-24 ties to 1 + 2^-22; one rounding of the exact sum
// would give 1 + 2^-23), as does a touched row holding a NaN (the definition gives its quiet NaN, +NaN, where the
// hardware add would keep −NaN).
TEST(Fp32BitExact, EmbeddingBackwardWeightReadsOnlyItsTokensRows) {
  const std::int64_t V = 5, C = 37;
  const std::vector<std::int32_t> tokens{1, 3, 1};
  const RowShape s{static_cast<std::int64_t>(tokens.size()), C};
  const auto dout = randn(s.rows * C, 1.0, fmts::fp32, 31);
  for (const int touched : {0, 1, 2}) {  // 1: a value not binary32 in a touched row; 2: a NaN there
    std::vector<double> dw = randn(V * C, 0.5, fmts::fp32, 32);
    dw[0 * C + 3] = std::numeric_limits<double>::quiet_NaN();
    dw[0 * C + 4] = 1.0 + 0x1p-40;  // not a binary32 value
    dw[4 * C + 0] = -std::numeric_limits<double>::infinity();
    std::vector<double> d(dout.begin(), dout.end());
    if (touched == 1) {
      dw[3 * C + 5] = 1.0 + 0x1p-24 + 0x1p-40;
      d[1 * C + 5] = 0x1p-24;  // token 3 is the second
    }
    if (touched == 2) dw[1 * C + 7] = -std::numeric_limits<double>::quiet_NaN();  // the definition gives +NaN
    std::vector<float> want(dw.size());
    for (std::size_t i = 0; i < dw.size(); ++i) want[i] = static_cast<float>(dw[i]);
    for (std::size_t n = 0; n < tokens.size(); ++n)
      for (std::int64_t c = 0; c < C; ++c) {
        float& w = want[static_cast<std::size_t>(tokens[n] * C + c)];
        w = w + static_cast<float>(d[n * C + static_cast<std::size_t>(c)]);
      }
    std::vector<double> got = dw;
    embedding_backward_weight<Emulated>(got, cs(d), tokens, s, fp32_ctx());
    if (touched != 1) {  // the same on binary32 tensors (the NaN: +NaN, the definition's)
      std::vector<float> f = test::to_float(dw);
      const std::vector<float> df = test::to_float(d);
      embedding_backward_weight(std::span<float>(f), std::span<const float>(df), tokens, s, fp32_ctx());
      for (const std::int64_t v : {1, 3})
        for (std::int64_t c = 0; c < C; ++c) {
          const auto i = static_cast<std::size_t>(v * C + c);
          const bool nan = touched == 2 && i == static_cast<std::size_t>(1 * C + 7);
          const float w = nan ? std::numeric_limits<float>::quiet_NaN() : want[i];
          EXPECT_EQ(std::bit_cast<std::uint32_t>(f[i]), std::bit_cast<std::uint32_t>(w)) << "binary32 tensors, " << i;
        }
    }
    if (touched == 2) {  // expect_bits takes no NaN: this one is compared here and left out there
      const double quiet = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got[1 * C + 7]), std::bit_cast<std::uint64_t>(quiet));
      got[1 * C + 7] = 0.0;
      want[1 * C + 7] = 0.0f;
    }
    std::vector<double> got_touched;
    std::vector<float> want_touched;
    for (std::int64_t v = 0; v < V; ++v)
      for (std::int64_t c = 0; c < C; ++c) {
        const auto i = static_cast<std::size_t>(v * C + c);
        if (v == 1 || v == 3) {
          got_touched.push_back(got[i]);
          want_touched.push_back(want[i]);
        } else {
          EXPECT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(dw[i])) << "untouched " << i;
        }
      }
    expect_bits(got_touched, want_touched, ("embedding, case " + std::to_string(touched)).c_str());
    if (touched == 1) {
      EXPECT_EQ(got[3 * C + 5], 1.0 + 0x1p-22);
    }
  }
}

}  // namespace
}  // namespace roundoff::ops
