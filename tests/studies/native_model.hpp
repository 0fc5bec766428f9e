#pragma once
/// \file native_model.hpp
/// A straightforward implementation of the trainer's model in plain T arithmetic (float or double), for
/// tests: the oracle of the fp32-policy bit-for-bit check and a fast Model for trainer-loop tests.
/// Same architecture and operation order as studies/train/model.cpp (see its file comment):
/// dot products run sequentially in k with fused multiply-add, sums sequentially in index order.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "studies/train/config.hpp"
#include "studies/train/model_interface.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train::testing {

template <class T>
class NativeModel final : public Model {
 public:
  NativeModel(const ModelConfig& c, ResidualScale rs) : c_(c), rule_(residual_rule(rs, c.layers)), lay_(param_layout(c)) {}

  double total_loss(const Batch& b, std::span<const double> master) override {
    load(master);
    forward(b);
    double total = 0;
    for (const double l : token_loss_) total += l;
    return total;
  }

  double loss_and_grad(const Batch& b, std::span<const double> master, double loss_scale, std::span<double> grads,
                       StepTelemetry&) override {
    load(master);
    forward(b);
    backward(b, static_cast<T>(loss_scale));
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<double>(g_[i]);
    double total = 0;
    for (const double l : token_loss_) total += l;
    return total / static_cast<double>(token_loss_.size());
  }

  /// Plain fp32 AdamW (studies/train/optimizer.hpp).
  void apply_update(std::span<double> master, std::span<double> m, std::span<double> v, std::span<const double> grads,
                    const Recipe& recipe, double lr, std::int64_t t, double coef) override {
    adamw_update(master, m, v, grads, lay_, recipe, lr, t, coef, AdamFormats{});
  }

 private:
  using V = std::vector<T>;
  static T dot(const T* a, const T* b, int n) {
    T acc = 0;
    for (int i = 0; i < n; ++i) acc = std::fma(a[i], b[i], acc);
    return acc;
  }
  /// out(N, OC) = in(N, C) · W(OC, C)ᵀ
  static void matmul(T* out, const T* in, const T* w, int N, int C, int OC) {
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[n * OC + o] = dot(in + n * C, w + o * C, C);
  }
  /// din(N, C) += dout(N, OC) · W(OC, C);  dW(OC, C) += dout(N, OC)ᵀ · in(N, C)
  static void matmul_backward(T* din, T* dw, const T* dout, const T* in, const T* w, int N, int C, int OC) {
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) {
        T acc = 0;
        for (int o = 0; o < OC; ++o) acc = std::fma(dout[n * OC + o], w[o * C + i], acc);
        din[n * C + i] += acc;
      }
    for (int o = 0; o < OC; ++o)
      for (int i = 0; i < C; ++i) {
        T acc = 0;
        for (int n = 0; n < N; ++n) acc = std::fma(dout[n * OC + o], in[n * C + i], acc);
        dw[o * C + i] += acc;
      }
  }
  void rmsnorm(T* y, T* rstd, const T* x, const T* w, int N, double eps) const {
    const int C = c_.d;
    for (int n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T ms = dot(xr, xr, C) / static_cast<T>(C);
      const T r = T(1) / std::sqrt(ms + static_cast<T>(eps));
      rstd[n] = r;
      for (int i = 0; i < C; ++i) y[n * C + i] = (xr[i] * r) * w[i];
    }
  }
  /// dx += rstd·(dy∘w) − x·rstd³·mean(x·(dy∘w));  dw += Σ_n dy·x·rstd
  void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int N) const {
    const int C = c_.d;
    for (int n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      const T r = rstd[n];
      T acc = 0;
      for (int i = 0; i < C; ++i) acc = std::fma(dyr[i] * w[i], xr[i], acc);
      const T coef = (acc / static_cast<T>(C)) * (r * r * r);
      for (int i = 0; i < C; ++i) {
        dx[n * C + i] += (dyr[i] * w[i]) * r - xr[i] * coef;
        dw[i] += (dyr[i] * xr[i]) * r;
      }
    }
  }
  /// Rotates pairs (2i, 2i+1) of every head by θ = t·base^(−2i/hs); sign = −1 rotates back (backward).
  void rope(T* x, int B, int Tn, T sign) const {
    const int C = c_.d, hs = c_.head_size();
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tn; ++t)
        for (int h = 0; h < c_.heads; ++h)
          for (int i = 0; i < hs / 2; ++i) {
            const T freq = static_cast<T>(std::pow(c_.rope_base, -2.0 * i / hs));
            const T ang = static_cast<T>(t) * freq;
            const T cs = std::cos(ang), sn = sign * std::sin(ang);
            T* p = x + (b * Tn + t) * C + h * hs + 2 * i;
            const T a = p[0], bb = p[1];
            p[0] = a * cs - bb * sn;
            p[1] = a * sn + bb * cs;
          }
  }

  double post_eps() const { return c_.norm_eps * rule_.post_norm_eps_factor; }

  void load(std::span<const double> master) {
    w_.resize(master.size());
    for (std::size_t i = 0; i < master.size(); ++i) w_[i] = static_cast<T>(master[i]);
  }

  struct Layer {
    V x_in, h1, r1, q, k, v, att, y, o, x_mid, h2, r2, g, u, z, f, x_out, pre1, pre2, rp1, rp2;
  };

  void forward(const Batch& bt) {
    const int B = bt.batch, Tn = bt.seq, C = c_.d, H = c_.hidden, N = B * Tn, NH = c_.heads, hs = c_.head_size();
    ParamViews<T> p(std::span<T>(w_), lay_);
    layers_.assign(static_cast<std::size_t>(c_.layers), Layer{});
    V x(static_cast<std::size_t>(N * C));
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) x[n * C + i] = p.wte[bt.inputs[n] * C + i];
    const T skip = T(1), branch = static_cast<T>(rule_.branch);
    for (int l = 0; l < c_.layers; ++l) {
      Layer& L = layers_[l];
      const std::size_t NC = static_cast<std::size_t>(N * C);
      L.x_in = x;
      L.h1.resize(NC); L.r1.resize(N); L.q.resize(NC); L.k.resize(NC); L.v.resize(NC);
      if (rule_.post_norm) L.h1 = x; else rmsnorm(L.h1.data(), L.r1.data(), x.data(), p.ln1w.data() + l * C, N, c_.norm_eps);
      matmul(L.q.data(), L.h1.data(), p.wq.data() + l * C * C, N, C, C);
      matmul(L.k.data(), L.h1.data(), p.wk.data() + l * C * C, N, C, C);
      matmul(L.v.data(), L.h1.data(), p.wv.data() + l * C * C, N, C, C);
      rope(L.q.data(), B, Tn, 1);
      rope(L.k.data(), B, Tn, 1);
      L.att.assign(static_cast<std::size_t>(B * NH * Tn * Tn), 0);
      L.y.assign(NC, 0);
      const T inv = T(1) / std::sqrt(static_cast<T>(hs));
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int t = 0; t < Tn; ++t) {
            T* a = L.att.data() + ((b * NH + h) * Tn + t) * Tn;
            const T* qr = L.q.data() + (b * Tn + t) * C + h * hs;
            T mx = -INFINITY;
            for (int s = 0; s <= t; ++s) {
              a[s] = dot(qr, L.k.data() + (b * Tn + s) * C + h * hs, hs) * inv;
              mx = std::max(mx, a[s]);
            }
            T sum = 0;
            for (int s = 0; s <= t; ++s) {
              a[s] = std::exp(a[s] - mx);
              sum += a[s];
            }
            for (int s = 0; s <= t; ++s) a[s] = a[s] / sum;
            T* yr = L.y.data() + (b * Tn + t) * C + h * hs;
            for (int i = 0; i < hs; ++i) {
              T acc = 0;
              for (int s = 0; s <= t; ++s) acc = std::fma(a[s], L.v[(b * Tn + s) * C + h * hs + i], acc);
              yr[i] = acc;
            }
          }
      L.o.resize(NC);
      matmul(L.o.data(), L.y.data(), p.wo.data() + l * C * C, N, C, C);
      L.pre1.resize(NC);
      for (std::size_t i = 0; i < NC; ++i) L.pre1[i] = skip * x[i] + branch * L.o[i];
      L.rp1.resize(N);
      if (rule_.post_norm) rmsnorm(x.data(), L.rp1.data(), L.pre1.data(), p.ln1w.data() + l * C, N, post_eps()); else x = L.pre1;
      L.x_mid = x;
      L.h2.resize(NC); L.r2.resize(N);
      if (rule_.post_norm) L.h2 = x; else rmsnorm(L.h2.data(), L.r2.data(), x.data(), p.ln2w.data() + l * C, N, c_.norm_eps);
      const std::size_t NH2 = static_cast<std::size_t>(N * H);
      L.g.resize(NH2); L.u.resize(NH2); L.z.resize(NH2);
      matmul(L.g.data(), L.h2.data(), p.w1.data() + l * H * C, N, C, H);
      matmul(L.u.data(), L.h2.data(), p.w3.data() + l * H * C, N, C, H);
      for (std::size_t i = 0; i < NH2; ++i) L.z[i] = (L.g[i] / (T(1) + std::exp(-L.g[i]))) * L.u[i];
      L.f.resize(NC);
      matmul(L.f.data(), L.z.data(), p.w2.data() + l * C * H, N, H, C);
      L.pre2.resize(NC);
      for (std::size_t i = 0; i < NC; ++i) L.pre2[i] = skip * x[i] + branch * L.f[i];
      L.rp2.resize(N);
      if (rule_.post_norm) rmsnorm(x.data(), L.rp2.data(), L.pre2.data(), p.ln2w.data() + l * C, N, post_eps()); else x = L.pre2;
      L.x_out = x;
    }
    xL_ = x;
    xf_.resize(x.size());
    rf_.resize(N);
    rmsnorm(xf_.data(), rf_.data(), x.data(), p.lnfw.data(), N, c_.norm_eps);
    const int Vv = c_.vocab;
    probs_.resize(static_cast<std::size_t>(N * Vv));
    matmul(probs_.data(), xf_.data(), p.wcls.data(), N, C, Vv);
    token_loss_.resize(N);
    for (int n = 0; n < N; ++n) {
      T* lg = probs_.data() + n * Vv;
      T mx = -INFINITY;
      for (int j = 0; j < Vv; ++j) mx = std::max(mx, lg[j]);
      T sum = 0;
      for (int j = 0; j < Vv; ++j) sum += std::exp(lg[j] - mx);
      const T logz = mx + std::log(sum);
      token_loss_[n] = static_cast<double>(logz - lg[bt.targets[n]]);
      for (int j = 0; j < Vv; ++j) lg[j] = std::exp(lg[j] - logz);
    }
  }

  void backward(const Batch& bt, T scale) {
    const int B = bt.batch, Tn = bt.seq, C = c_.d, H = c_.hidden, N = B * Tn, NH = c_.heads, hs = c_.head_size();
    const int Vv = c_.vocab;
    ParamViews<T> p(std::span<T>(w_), lay_);
    g_.assign(w_.size(), 0);
    ParamViews<T> d(std::span<T>(g_), lay_);
    const T dscale = scale / static_cast<T>(N);
    V dlogits(static_cast<std::size_t>(N * Vv));
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < Vv; ++j)
        dlogits[n * Vv + j] = (probs_[n * Vv + j] - (j == bt.targets[n] ? T(1) : T(0))) * dscale;
    V dxf(static_cast<std::size_t>(N * C), 0);
    matmul_backward(dxf.data(), d.wcls.data(), dlogits.data(), xf_.data(), p.wcls.data(), N, C, Vv);
    V dx(static_cast<std::size_t>(N * C), 0);
    rmsnorm_backward(dx.data(), d.lnfw.data(), dxf.data(), xL_.data(), p.lnfw.data(), rf_.data(), N);
    const T skip = T(1), branch = static_cast<T>(rule_.branch);
    const std::size_t NC = static_cast<std::size_t>(N * C);
    for (int l = c_.layers - 1; l >= 0; --l) {
      Layer& L = layers_[l];
      // FFN residual: x_out = [norm](skip·x_mid + branch·f)
      V dpre2(NC, 0);
      if (rule_.post_norm) rmsnorm_backward(dpre2.data(), d.ln2w.data() + l * C, dx.data(), L.pre2.data(), p.ln2w.data() + l * C, L.rp2.data(), N);
      else dpre2 = dx;
      V dxm(NC), df(NC);
      for (std::size_t i = 0; i < NC; ++i) { dxm[i] = skip * dpre2[i]; df[i] = branch * dpre2[i]; }
      const std::size_t NH2 = static_cast<std::size_t>(N * H);
      V dz(NH2, 0), dg(NH2), du(NH2);
      matmul_backward(dz.data(), d.w2.data() + l * C * H, df.data(), L.z.data(), p.w2.data() + l * C * H, N, H, C);
      for (std::size_t i = 0; i < NH2; ++i) {
        const T sg = T(1) / (T(1) + std::exp(-L.g[i]));
        const T silu = L.g[i] * sg;
        du[i] = dz[i] * silu;
        dg[i] = dz[i] * L.u[i] * (sg * (T(1) + L.g[i] * (T(1) - sg)));
      }
      V dh2(NC, 0);
      matmul_backward(dh2.data(), d.w1.data() + l * H * C, dg.data(), L.h2.data(), p.w1.data() + l * H * C, N, C, H);
      matmul_backward(dh2.data(), d.w3.data() + l * H * C, du.data(), L.h2.data(), p.w3.data() + l * H * C, N, C, H);
      if (rule_.post_norm) for (std::size_t i = 0; i < NC; ++i) dxm[i] += dh2[i];
      else rmsnorm_backward(dxm.data(), d.ln2w.data() + l * C, dh2.data(), L.x_mid.data(), p.ln2w.data() + l * C, L.r2.data(), N);
      // attention residual: x_mid = [norm](skip·x_in + branch·o)
      V dpre1(NC, 0);
      if (rule_.post_norm) rmsnorm_backward(dpre1.data(), d.ln1w.data() + l * C, dxm.data(), L.pre1.data(), p.ln1w.data() + l * C, L.rp1.data(), N);
      else dpre1 = dxm;
      V dxi(NC), dov(NC);
      for (std::size_t i = 0; i < NC; ++i) { dxi[i] = skip * dpre1[i]; dov[i] = branch * dpre1[i]; }
      V dy(NC, 0);
      matmul_backward(dy.data(), d.wo.data() + l * C * C, dov.data(), L.y.data(), p.wo.data() + l * C * C, N, C, C);
      V dq(NC, 0), dk(NC, 0), dv(NC, 0);
      const T inv = T(1) / std::sqrt(static_cast<T>(hs));
      V datt(static_cast<std::size_t>(Tn));
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int t = 0; t < Tn; ++t) {
            const T* a = L.att.data() + ((b * NH + h) * Tn + t) * Tn;
            const T* dyr = dy.data() + (b * Tn + t) * C + h * hs;
            for (int s = 0; s <= t; ++s) {
              const T* vr = L.v.data() + (b * Tn + s) * C + h * hs;
              datt[s] = dot(dyr, vr, hs);
              for (int i = 0; i < hs; ++i) dv[(b * Tn + s) * C + h * hs + i] += a[s] * dyr[i];
            }
            T inner = 0;
            for (int s = 0; s <= t; ++s) inner = std::fma(a[s], datt[s], inner);
            const T* qr = L.q.data() + (b * Tn + t) * C + h * hs;
            for (int s = 0; s <= t; ++s) {
              const T ds = a[s] * (datt[s] - inner) * inv;
              const T* kr = L.k.data() + (b * Tn + s) * C + h * hs;
              for (int i = 0; i < hs; ++i) {
                dq[(b * Tn + t) * C + h * hs + i] += ds * kr[i];
                dk[(b * Tn + s) * C + h * hs + i] += ds * qr[i];
              }
            }
          }
      rope(dq.data(), B, Tn, -1);
      rope(dk.data(), B, Tn, -1);
      V dh1(NC, 0);
      matmul_backward(dh1.data(), d.wq.data() + l * C * C, dq.data(), L.h1.data(), p.wq.data() + l * C * C, N, C, C);
      matmul_backward(dh1.data(), d.wk.data() + l * C * C, dk.data(), L.h1.data(), p.wk.data() + l * C * C, N, C, C);
      matmul_backward(dh1.data(), d.wv.data() + l * C * C, dv.data(), L.h1.data(), p.wv.data() + l * C * C, N, C, C);
      if (rule_.post_norm) for (std::size_t i = 0; i < NC; ++i) dxi[i] += dh1[i];
      else rmsnorm_backward(dxi.data(), d.ln1w.data() + l * C, dh1.data(), L.x_in.data(), p.ln1w.data() + l * C, L.r1.data(), N);
      dx = dxi;
    }
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) d.wte[bt.inputs[n] * C + i] += dx[n * C + i];
  }

  ModelConfig c_;
  ResidualRule rule_;
  ParamLayout lay_;
  V w_, g_, xL_, xf_, rf_, probs_;
  std::vector<Layer> layers_;
  std::vector<double> token_loss_;
};

}  // namespace roundoff::studies::train::testing
