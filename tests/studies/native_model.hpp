#pragma once
/// \file native_model.hpp
/// A straightforward implementation of the trainer's model in plain T arithmetic (float or double), for
/// tests: NativeModel<float> is the oracle of TrainModel.Fp32PolicyStepEqualsPlainFloatModelBitForBit (one
/// Transformer step under the `fp32` policy equals it bit for bit) and a fast Model for the trainer-loop
/// tests; NativeModel<double> is the fp64 twin of the gradient checks (compared with tolerances).
///
/// Same architecture, same op sequence and same operation order as studies/train/model.cpp, each op written
/// out as plain T expressions that follow the op's documented rounding contract (ops/*.hpp) under a policy
/// whose storage and compute formats are T and whose Accumulation is sequential in T with fused products:
///   - every + − · / is one T operation, in the order the op's contract states (e.g. RMSNorm backward
///     a = ((r·r)·r)·s / C; SiLU backward dy·σ·(1 + x·(1 − σ)); softmax att = e_j / Z; cross-entropy
///     probs = e_j / Z, loss = (m + log Z) − l_target);
///   - a dot product is s = x_0·y_0, then s = fma(x_i, y_i, s) in index order (numerics::dot, Sequential,
///     fused: a partial sum starts with round(t_0)); a sum s = x_0, then s = s + x_i;
///   - a GEMM that adds into its output (matmul backward, beta = 1) starts its FMA chain at the current output
///     value; every other backward adds its result into the gradient with one addition, g = g + Δ;
///   - constants are formed in binary64 and rounded to T once (1/√hs, eps, the branch scale β, the gradient
///     scale loss_scale/N, the RoPE inverse frequencies b^(−2i/hs)).
/// Elementary functions (exp, log, σ(x) = 1/(1 + e^−x), rsqrt = 1/√x, sin, cos) are single correctly rounded
/// operations in the ops. For T = float the twin calls the project's correctly rounded fp32 functions
/// (numerics/arith.hpp, verified against MPFR); libm's float functions are not correctly rounded (glibc's
/// expf differs from them on inputs of that very test). For T = double it uses libm in double (exp, log, sin, cos) and 1/sqrt, 1/(1 + exp(−x)): within a
/// few ulps of the fp64 policy, which the fp64 tests compare with tolerances, not bits.
/// GQA: K and V tiled to the query heads (copies) before the attention ops; their gradients reduced back as
/// one sequential sum per element (s = x_0, s = s + x_i over the query heads in increasing order), then added
/// into the zero gradient. Tied embeddings: the classifier reads wte and adds its weight gradient into wte's
/// before the embedding's scatter-add.
/// AdamW: plain float code in the form of ops/adamw.hpp for T = float (master weights, m and v are fp32
/// values); for T = double studies/train/optimizer.hpp's fp32 adamw_update (the gradients of the fp64 twin
/// are not fp32 values, and the trainer keeps fp32 master weights).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "numerics/arith.hpp"
#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "studies/train/config.hpp"
#include "studies/train/model_interface.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train::testing {

template <class T>
class NativeModel final : public Model {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);

 public:
  NativeModel(const ModelConfig& c, ResidualScale rs) : c_(c), rule_(residual_rule(rs, c.layers)), lay_(param_layout(c)) {
    for (int h = 0; h < c_.heads; ++h) map_.push_back(kv_head_of(c_.gqa_map, h, c_.heads, c_.kv_count()));
  }

  double total_loss(const Batch& b, std::span<const double> master) override {
    load(master);
    forward(b);
    double total = 0;
    for (const T l : losses_) total += static_cast<double>(l);
    return total;
  }

  double loss_and_grad(const Batch& b, std::span<const double> master, double loss_scale, std::span<double> grads,
                       StepTelemetry&) override {
    load(master);
    forward(b);
    backward(b, loss_scale);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<double>(g_[i]);
    // The mean over tokens in binary64, as ops::mean_loss.
    double total = 0;
    for (const T l : losses_) total += static_cast<double>(l);
    return total / static_cast<double>(losses_.size());
  }

  /// AdamW in the form of ops::adamw_update (see the file comment for T = double).
  /// The moments: binary32 for T = float (its own format), binary64 for T = double (the oracle's plain arithmetic
  /// reads and writes them as doubles).
  StorageKind moments_storage() const override {
    return std::is_same_v<T, float> ? StorageKind::Binary32 : StorageKind::Binary64;
  }

  void update_tensor(ParamTensor tensor, std::span<double> master, ParamStore& m_store, ParamStore& v_store,
                     std::span<const double> grads, const Recipe& recipe, double lr, std::int64_t t,
                     double coef) override {
    if constexpr (std::is_same_v<T, float>) {
      const std::span<float> m = m_store.binary32(), v = v_store.binary32();
      const float b1 = static_cast<float>(recipe.beta1), b2 = static_cast<float>(recipe.beta2);
      const float ob1 = static_cast<float>(1.0 - recipe.beta1), ob2 = static_cast<float>(1.0 - recipe.beta2);
      const float c1 = static_cast<float>(1.0 - std::pow(recipe.beta1, static_cast<double>(t)));
      const float c2 = static_cast<float>(1.0 - std::pow(recipe.beta2, static_cast<double>(t)));
      const float eps = static_cast<float>(recipe.eps), lrf = static_cast<float>(lr), gs = static_cast<float>(coef);
      const float wd = is_decayed(tensor, recipe.decay_embedding) ? static_cast<float>(recipe.weight_decay) : 0.0f;
      for (std::size_t e = lay_.offset_of(tensor); e < lay_.offset_of(tensor) + lay_.size_of(tensor); ++e) {
        float g = static_cast<float>(grads[e]), w = static_cast<float>(master[e]);
        if (coef != 1.0) g = g * gs;
        const float mi = b1 * static_cast<float>(m[e]) + ob1 * g;
        const float vi = b2 * static_cast<float>(v[e]) + ob2 * (g * g);
        const float mhat = mi / c1, vhat = vi / c2;
        const float step = mhat / (std::sqrt(vhat) + eps) + wd * w;
        w = w - lrf * step;
        m[e] = mi;
        v[e] = vi;
        master[e] = w;
      }
    } else {
      adamw_update(tensor, master, m_store.binary64(), v_store.binary64(), grads, lay_, recipe, lr, t, coef,
                   AdamFormats{});
    }
  }

 private:
  using V = std::vector<T>;
  using Idx = std::ptrdiff_t;

  // --- elementary functions: one correctly rounded operation (T = float), libm (T = double) ---
  static const numerics::RoundingPlan& fp32_plan() {
    static const numerics::RoundingPlan plan(numerics::formats::fp32);
    return plan;
  }
  static T elementary(numerics::Elementary f, T x) {
    return static_cast<T>(numerics::elementary(fp32_plan(), numerics::Rounding::NearestEven, f, static_cast<double>(x)));
  }
  static T exp_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Exp, x);
    else return std::exp(x);
  }
  static T log_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Log, x);
    else return std::log(x);
  }
  static T sigmoid_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Sigmoid, x);
    else return T(1) / (T(1) + std::exp(-x));
  }
  static T rsqrt_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Rsqrt, x);
    else return T(1) / std::sqrt(x);
  }
  static T sin_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Sin, x);
    else return std::sin(x);
  }
  static T cos_(T x) {
    if constexpr (std::is_same_v<T, float>) return elementary(numerics::Elementary::Cos, x);
    else return std::cos(x);
  }

  // --- reductions: sequential, fused ---
  /// Σ_{i<n} x[i·incx]·y[i·incy]: s = x_0·y_0, then s = fma(x_i, y_i, s).
  static T dot(const T* x, Idx incx, const T* y, Idx incy, int n) {
    T s = x[0] * y[0];
    for (Idx i = 1; i < n; ++i) s = std::fma(x[i * incx], y[i * incy], s);
    return s;
  }
  /// The same chain started at `init` (a GEMM that adds into its output).
  static T dot_from(T init, const T* x, Idx incx, const T* y, Idx incy, int n) {
    T s = init;
    for (Idx i = 0; i < n; ++i) s = std::fma(x[i * incx], y[i * incy], s);
    return s;
  }
  /// Σ_{i<n} x[i]: s = x_0, then s = s + x_i.
  static T sum(const T* x, int n) {
    T s = x[0];
    for (int i = 1; i < n; ++i) s = s + x[i];
    return s;
  }

  // --- ops (ops/*.hpp), one function per op entry point ---
  /// y (N, O) = x (N, I) · W (O, I)ᵀ.
  static void matmul_forward(T* y, const T* x, const T* w, int N, int I, int O) {
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o) y[n * O + o] = dot(x + n * I, 1, w + o * I, 1, I);
  }
  /// dx (N, I) += dy (N, O) · W (O, I), the chain starting at dx.
  static void matmul_backward_data(T* dx, const T* dy, const T* w, int N, int I, int O) {
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < I; ++i) dx[n * I + i] = dot_from(dx[n * I + i], dy + n * O, 1, w + i, I, O);
  }
  /// dW (O, I) += dyᵀ · x over the N tokens, the chain starting at dW.
  static void matmul_backward_weight(T* dw, const T* dy, const T* x, int N, int I, int O) {
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < I; ++i) dw[o * I + i] = dot_from(dw[o * I + i], dy + o, O, x + i, I, N);
  }
  /// y = (x·r)·w, r = rsqrt(Σx²/C + eps) per row.
  void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int N, double eps) const {
    const int C = c_.d;
    const T n = static_cast<T>(C), e = static_cast<T>(eps);
    for (int r = 0; r < N; ++r) {
      const T* xr = x + r * C;
      const T inv = rsqrt_(dot(xr, 1, xr, 1, C) / n + e);
      rstd[r] = inv;
      for (int i = 0; i < C; ++i) y[r * C + i] = (xr[i] * inv) * w[i];
    }
  }
  /// g = w∘dy, s = Σ g·x, a = ((r·r)·r)·s / C, dx = dx + (r·g − a·x).
  void rmsnorm_backward_data(T* dx, const T* dy, const T* x, const T* w, const T* rstd, int N) const {
    const int C = c_.d;
    const T n = static_cast<T>(C);
    V g(static_cast<std::size_t>(C));
    for (int r = 0; r < N; ++r) {
      const T inv = rstd[r];
      for (int i = 0; i < C; ++i) g[i] = w[i] * dy[r * C + i];
      const T s = dot(g.data(), 1, x + r * C, 1, C);
      const T a = (((inv * inv) * inv) * s) / n;
      for (int i = 0; i < C; ++i) dx[r * C + i] = dx[r * C + i] + (inv * g[i] - a * x[r * C + i]);
    }
  }
  /// dw_i = dw_i + Σ_rows dy·(x·r).
  void rmsnorm_backward_weight(T* dw, const T* dy, const T* x, const T* rstd, int N) const {
    const int C = c_.d;
    V xhat(static_cast<std::size_t>(N * C));
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < C; ++i) xhat[r * C + i] = x[r * C + i] * rstd[r];
    for (int i = 0; i < C; ++i) dw[i] = dw[i] + dot(dy + i, C, xhat.data() + i, C, N);
  }
  /// cos, sin (T, hs/2) of θ = fl(p)·fl(b^(−2i/hs)).
  void rope_angles(V& cs, V& sn, int Tn) const {
    const int hs = c_.head_size(), H = hs / 2;
    cs.assign(static_cast<std::size_t>(Tn * H), 0);
    sn.assign(cs.size(), 0);
    for (int p = 0; p < Tn; ++p)
      for (int i = 0; i < H; ++i) {
        const T f = static_cast<T>(std::pow(c_.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(hs)));
        const T theta = static_cast<T>(p) * f;
        cs[p * H + i] = cos_(theta);
        sn[p * H + i] = sin_(theta);
      }
  }
  /// y_2i = x_2i·c − x_2i+1·s, y_2i+1 = x_2i·s + x_2i+1·c; `heads` heads per row.
  void rope_forward(T* y, const T* x, int B, int Tn, int heads) const {
    const int hs = c_.head_size(), C = heads * hs, H = hs / 2;
    for (int row = 0; row < B * Tn; ++row)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < H; ++i) {
          const int e = row * C + h * hs + 2 * i, ti = (row % Tn) * H + i;
          const T c = cos_t_[ti], s = sin_t_[ti], x0 = x[e], x1 = x[e + 1];
          y[e] = x0 * c - x1 * s;
          y[e + 1] = x0 * s + x1 * c;
        }
  }
  /// dx_2i += dy_2i·c + dy_2i+1·s, dx_2i+1 += dy_2i+1·c − dy_2i·s.
  void rope_backward_data(T* dx, const T* dy, int B, int Tn, int heads) const {
    const int hs = c_.head_size(), C = heads * hs, H = hs / 2;
    for (int row = 0; row < B * Tn; ++row)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < H; ++i) {
          const int e = row * C + h * hs + 2 * i, ti = (row % Tn) * H + i;
          const T c = cos_t_[ti], s = sin_t_[ti], d0 = dy[e], d1 = dy[e + 1];
          dx[e] = dx[e] + (d0 * c + d1 * s);
          dx[e + 1] = dx[e + 1] + (d1 * c - d0 * s);
        }
  }
  /// GQA tile: head h of each full row (NH·hs) is a copy of KV head map_[h] (NKV·hs).
  V kv_tile(const V& kv, int N) const {
    const int hs = c_.head_size(), NH = c_.heads, NKV = c_.kv_count();
    V full(static_cast<std::size_t>(N * NH * hs));
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < hs; ++i) full[(n * NH + h) * hs + i] = kv[(n * NKV + map_[h]) * hs + i];
    return full;
  }
  /// GQA reduce: s = Σ over the query heads of KV head j in increasing h (s = x_0, s = s + x_i), dkv = 0 + s.
  V kv_reduce(const V& full, int N) const {
    const int hs = c_.head_size(), NH = c_.heads, NKV = c_.kv_count();
    V kv(static_cast<std::size_t>(N * NKV * hs), 0);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < NKV; ++j)
        for (int i = 0; i < hs; ++i) {
          bool first = true;
          T acc = 0;
          for (int h = 0; h < NH; ++h)
            if (map_[h] == j) {
              const T x = full[(n * NH + h) * hs + i];
              acc = first ? x : acc + x;
              first = false;
            }
          T& out = kv[(n * NKV + j) * hs + i];
          out = out + acc;
        }
    return kv;
  }
  T attn_scale() const { return static_cast<T>(1.0 / std::sqrt(static_cast<double>(c_.head_size()))); }
  /// Offsets: (b, t, h, d) in (B, T, NH·hs) and (b, h, t, j) in (B, NH, T, T).
  int at3(int Tn, int b, int t, int h, int d) const { return (b * Tn + t) * c_.d + h * c_.head_size() + d; }
  int at4(int Tn, int b, int h, int t, int j) const { return ((b * c_.heads + h) * Tn + t) * Tn + j; }
  /// preatt[t, j] = (q_t·k_j)·(1/√hs) for j ≤ t, else 0.
  void attn_scores_forward(T* preatt, const T* q, const T* k, int B, int Tn) const {
    const int hs = c_.head_size();
    const T scale = attn_scale();
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < c_.heads; ++h)
        for (int t = 0; t < Tn; ++t)
          for (int j = 0; j < Tn; ++j)
            preatt[at4(Tn, b, h, t, j)] =
                j > t ? T(0) : dot(q + at3(Tn, b, t, h, 0), 1, k + at3(Tn, b, j, h, 0), 1, hs) * scale;
  }
  /// dq[t] += Σ_{j≤t} (dp[t,j]·scale)·k[j],  dk[t] += Σ_{i≥t} (dp[i,t]·scale)·q[i].
  void attn_scores_backward_data(T* dq, T* dk, const T* dpreatt, const T* q, const T* k, int B, int Tn) const {
    const int C = c_.d, hs = c_.head_size();
    const T scale = attn_scale();
    V dps(static_cast<std::size_t>(Tn * Tn));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < c_.heads; ++h) {
        for (int t = 0; t < Tn; ++t)
          for (int j = 0; j < Tn; ++j) dps[t * Tn + j] = j > t ? T(0) : dpreatt[at4(Tn, b, h, t, j)] * scale;
        for (int t = 0; t < Tn; ++t)
          for (int d = 0; d < hs; ++d) {
            const int e = at3(Tn, b, t, h, d);
            dq[e] = dq[e] + dot(dps.data() + t * Tn, 1, k + at3(Tn, b, 0, h, d), C, t + 1);
            dk[e] = dk[e] + dot(dps.data() + t * Tn + t, Tn, q + e, C, Tn - t);
          }
      }
  }
  /// att[t, :t+1] = e_j / Z, e_j = exp(x_j − m), m = max x_j, Z = Σ e_j; the rest 0.
  void softmax_forward(T* att, const T* preatt, int B, int Tn) const {
    V ex(static_cast<std::size_t>(Tn));
    for (int row = 0; row < B * c_.heads * Tn; ++row) {
      const int t = row % Tn, o = row * Tn, n = t + 1;
      T m = preatt[o];
      for (int j = 1; j < n; ++j)
        if (preatt[o + j] > m) m = preatt[o + j];
      for (int j = 0; j < n; ++j) ex[j] = exp_(preatt[o + j] - m);
      const T z = sum(ex.data(), n);
      for (int j = 0; j < Tn; ++j) att[o + j] = j < n ? ex[j] / z : T(0);
    }
  }
  /// dpreatt_j += a_j·(g_j − Σ a·g).
  void softmax_backward_data(T* dpreatt, const T* datt, const T* att, int B, int Tn) const {
    for (int row = 0; row < B * c_.heads * Tn; ++row) {
      const int t = row % Tn, o = row * Tn, n = t + 1;
      const T d = dot(att + o, 1, datt + o, 1, n);
      for (int j = 0; j < n; ++j) dpreatt[o + j] = dpreatt[o + j] + att[o + j] * (datt[o + j] - d);
    }
  }
  /// y[t, d] = Σ_{j≤t} att[t, j]·v[j, d].
  void attn_values_forward(T* y, const T* att, const T* v, int B, int Tn) const {
    const int C = c_.d, hs = c_.head_size();
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < c_.heads; ++h)
        for (int t = 0; t < Tn; ++t)
          for (int d = 0; d < hs; ++d)
            y[at3(Tn, b, t, h, d)] = dot(att + at4(Tn, b, h, t, 0), 1, v + at3(Tn, b, 0, h, d), C, t + 1);
  }
  /// datt[t, j] += dy[t]·v[j] (j ≤ t);  dv[j, d] += Σ_{t≥j} att[t, j]·dy[t, d].
  void attn_values_backward_data(T* datt, T* dv, const T* dy, const T* att, const T* v, int B, int Tn) const {
    const int C = c_.d, hs = c_.head_size();
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < c_.heads; ++h) {
        for (int t = 0; t < Tn; ++t)
          for (int j = 0; j <= t; ++j) {
            const int e = at4(Tn, b, h, t, j);
            datt[e] = datt[e] + dot(dy + at3(Tn, b, t, h, 0), 1, v + at3(Tn, b, j, h, 0), 1, hs);
          }
        for (int j = 0; j < Tn; ++j)
          for (int d = 0; d < hs; ++d) {
            const int e = at3(Tn, b, j, h, d);
            dv[e] = dv[e] + dot(att + at4(Tn, b, h, j, j), Tn, dy + e, C, Tn - j);
          }
      }
  }
  /// out = x + β·f (the product skipped when β = 1).
  void residual_forward(T* out, const T* x, const T* f, std::size_t n) const {
    const T beta = static_cast<T>(rule_.branch);
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] + (rule_.branch != 1.0 ? beta * f[i] : f[i]);
  }
  /// dx += dout, df += β·dout.
  void residual_backward_data(T* dx, T* df, const T* dout, std::size_t n) const {
    const T beta = static_cast<T>(rule_.branch);
    for (std::size_t i = 0; i < n; ++i) {
      dx[i] = dx[i] + dout[i];
      df[i] = df[i] + (rule_.branch != 1.0 ? beta * dout[i] : dout[i]);
    }
  }
  /// a = x·σ(x).
  static void silu_forward(T* a, const T* x, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) a[i] = x[i] * sigmoid_(x[i]);
  }
  /// dx += (dy·σ)·(1 + x·(1 − σ)).
  static void silu_backward_data(T* dx, const T* dy, const T* x, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const T sg = sigmoid_(x[i]);
      dx[i] = dx[i] + (dy[i] * sg) * (T(1) + x[i] * (T(1) - sg));
    }
  }
  /// z = a·u;  backward: da += dz·u, du += dz·a.
  static void swiglu_forward(T* z, const T* a, const T* u, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) z[i] = a[i] * u[i];
  }
  static void swiglu_backward_data(T* da, T* du, const T* dz, const T* a, const T* u, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      da[i] = da[i] + dz[i] * u[i];
      du[i] = du[i] + dz[i] * a[i];
    }
  }
  /// Per token row: m = max l, e = exp(l − m), Z = Σ e, probs = e / Z, loss = (m + log Z) − l_target.
  void cross_entropy_forward(const T* logits, const std::vector<std::int32_t>& targets, int N) {
    const int Vv = c_.vocab;
    V ex(static_cast<std::size_t>(Vv));
    probs_.assign(static_cast<std::size_t>(N * Vv), 0);
    losses_.assign(static_cast<std::size_t>(N), 0);
    for (int r = 0; r < N; ++r) {
      const T* l = logits + r * Vv;
      T m = l[0];
      for (int j = 1; j < Vv; ++j)
        if (l[j] > m) m = l[j];
      for (int j = 0; j < Vv; ++j) ex[j] = exp_(l[j] - m);
      const T z = sum(ex.data(), Vv);
      for (int j = 0; j < Vv; ++j) probs_[r * Vv + j] = ex[j] / z;
      losses_[r] = (m + log_(z)) - l[targets[static_cast<std::size_t>(r)]];
    }
  }

  double post_eps() const { return c_.norm_eps * rule_.post_norm_eps_factor; }

  void load(std::span<const double> master) {
    w_.resize(master.size());
    for (std::size_t i = 0; i < master.size(); ++i) w_[i] = static_cast<T>(master[i]);
  }

  /// Saved activations of one block (the members of Transformer::LayerActs).
  struct Layer {
    V x_in, h1, r1, q, k, v, qr, kr, kt, vt, preatt, att, y, o, pre1, rp1, x_mid, h2, r2, g, u, a, z, f, pre2, rp2;
  };

  /// The op sequence of Transformer::forward.
  void forward(const Batch& bt) {
    const int B = bt.batch, Tn = bt.seq, C = c_.d, H = c_.hidden, N = B * Tn, Vv = c_.vocab,
              KVD = c_.kv_count() * c_.head_size();
    const auto NC = static_cast<std::size_t>(N * C), NH = static_cast<std::size_t>(N * H),
               NKVD = static_cast<std::size_t>(N * KVD);
    const auto att_size = static_cast<std::size_t>(B * c_.heads * Tn * Tn);
    ParamViews<T> p(std::span<T>(w_), lay_);
    auto layer = [&](std::span<T> all, int l) { return ParamViews<T>::layer(all, c_.layers, l).data(); };
    const double eps = c_.norm_eps;
    rope_angles(cos_t_, sin_t_, Tn);
    layers_.assign(static_cast<std::size_t>(c_.layers), Layer{});
    V x(NC);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) x[n * C + i] = p.wte[bt.inputs[static_cast<std::size_t>(n)] * C + i];
    for (int l = 0; l < c_.layers; ++l) {
      Layer& L = layers_[static_cast<std::size_t>(l)];
      L.x_in = x;
      if (rule_.post_norm) {
        L.h1 = x;
      } else {
        L.h1.assign(NC, 0);
        L.r1.assign(static_cast<std::size_t>(N), 0);
        rmsnorm_forward(L.h1.data(), L.r1.data(), x.data(), layer(p.ln1w, l), N, eps);
      }
      L.q.assign(NC, 0);
      L.k.assign(NKVD, 0);
      L.v.assign(NKVD, 0);
      matmul_forward(L.q.data(), L.h1.data(), layer(p.wq, l), N, C, C);
      matmul_forward(L.k.data(), L.h1.data(), layer(p.wk, l), N, C, KVD);
      matmul_forward(L.v.data(), L.h1.data(), layer(p.wv, l), N, C, KVD);
      L.qr.assign(NC, 0);
      L.kr.assign(NKVD, 0);
      rope_forward(L.qr.data(), L.q.data(), B, Tn, c_.heads);
      rope_forward(L.kr.data(), L.k.data(), B, Tn, c_.kv_count());
      L.kt = kv_tile(L.kr, N);
      L.vt = kv_tile(L.v, N);
      L.preatt.assign(att_size, 0);
      attn_scores_forward(L.preatt.data(), L.qr.data(), L.kt.data(), B, Tn);
      L.att.assign(att_size, 0);
      softmax_forward(L.att.data(), L.preatt.data(), B, Tn);
      L.y.assign(NC, 0);
      attn_values_forward(L.y.data(), L.att.data(), L.vt.data(), B, Tn);
      L.o.assign(NC, 0);
      matmul_forward(L.o.data(), L.y.data(), layer(p.wo, l), N, C, C);
      L.pre1.assign(NC, 0);
      residual_forward(L.pre1.data(), x.data(), L.o.data(), NC);
      if (rule_.post_norm) {
        L.x_mid.assign(NC, 0);
        L.rp1.assign(static_cast<std::size_t>(N), 0);
        rmsnorm_forward(L.x_mid.data(), L.rp1.data(), L.pre1.data(), layer(p.ln1w, l), N, post_eps());
      } else {
        L.x_mid = L.pre1;
      }
      if (rule_.post_norm) {
        L.h2 = L.x_mid;
      } else {
        L.h2.assign(NC, 0);
        L.r2.assign(static_cast<std::size_t>(N), 0);
        rmsnorm_forward(L.h2.data(), L.r2.data(), L.x_mid.data(), layer(p.ln2w, l), N, eps);
      }
      L.g.assign(NH, 0);
      L.u.assign(NH, 0);
      matmul_forward(L.g.data(), L.h2.data(), layer(p.w1, l), N, C, H);
      matmul_forward(L.u.data(), L.h2.data(), layer(p.w3, l), N, C, H);
      L.a.assign(NH, 0);
      silu_forward(L.a.data(), L.g.data(), NH);
      L.z.assign(NH, 0);
      swiglu_forward(L.z.data(), L.a.data(), L.u.data(), NH);
      L.f.assign(NC, 0);
      matmul_forward(L.f.data(), L.z.data(), layer(p.w2, l), N, H, C);
      L.pre2.assign(NC, 0);
      residual_forward(L.pre2.data(), L.x_mid.data(), L.f.data(), NC);
      if (rule_.post_norm) {
        x.assign(NC, 0);
        L.rp2.assign(static_cast<std::size_t>(N), 0);
        rmsnorm_forward(x.data(), L.rp2.data(), L.pre2.data(), layer(p.ln2w, l), N, post_eps());
      } else {
        x = L.pre2;
      }
    }
    x_final_ = x;
    xf_.assign(NC, 0);
    rf_.assign(static_cast<std::size_t>(N), 0);
    rmsnorm_forward(xf_.data(), rf_.data(), x_final_.data(), p.lnfw.data(), N, eps);
    V logits(static_cast<std::size_t>(N * Vv), 0);
    matmul_forward(logits.data(), xf_.data(), (c_.tie_embeddings ? p.wte : p.wcls).data(), N, C, Vv);
    cross_entropy_forward(logits.data(), bt.targets, N);
  }

  /// The op sequence of Transformer::backward; gradients start at 0 and every op adds into them.
  void backward(const Batch& bt, double loss_scale) {
    const int B = bt.batch, Tn = bt.seq, C = c_.d, H = c_.hidden, N = B * Tn, Vv = c_.vocab,
              KVD = c_.kv_count() * c_.head_size();
    const auto NC = static_cast<std::size_t>(N * C), NH = static_cast<std::size_t>(N * H),
               NKVD = static_cast<std::size_t>(N * KVD);
    const auto att_size = static_cast<std::size_t>(B * c_.heads * Tn * Tn);
    ParamViews<T> p(std::span<T>(w_), lay_);
    g_.assign(w_.size(), 0);
    ParamViews<T> d(std::span<T>(g_), lay_);
    auto layer = [&](std::span<T> all, int l) { return ParamViews<T>::layer(all, c_.layers, l).data(); };

    // cross-entropy: dlogits += (probs − onehot)·fl(loss_scale / N)
    const T gs = static_cast<T>(loss_scale / static_cast<double>(N));
    V dlogits(static_cast<std::size_t>(N * Vv), 0);
    for (int r = 0; r < N; ++r)
      for (int j = 0; j < Vv; ++j) {
        const int e = r * Vv + j;
        const T pr = j == bt.targets[static_cast<std::size_t>(r)] ? probs_[e] - T(1) : probs_[e];
        dlogits[e] = dlogits[e] + pr * gs;
      }
    V dxf(NC, 0);
    matmul_backward_data(dxf.data(), dlogits.data(), (c_.tie_embeddings ? p.wte : p.wcls).data(), N, C, Vv);
    matmul_backward_weight((c_.tie_embeddings ? d.wte : d.wcls).data(), dlogits.data(), xf_.data(), N, C, Vv);
    V dx(NC, 0);
    rmsnorm_backward_data(dx.data(), dxf.data(), x_final_.data(), p.lnfw.data(), rf_.data(), N);
    rmsnorm_backward_weight(d.lnfw.data(), dxf.data(), x_final_.data(), rf_.data(), N);

    for (int l = c_.layers - 1; l >= 0; --l) {
      Layer& L = layers_[static_cast<std::size_t>(l)];
      // feed-forward half: x_out = [post-norm](x_mid + β·f)
      V dpre2;
      if (rule_.post_norm) {
        dpre2.assign(NC, 0);
        rmsnorm_backward_data(dpre2.data(), dx.data(), L.pre2.data(), layer(p.ln2w, l), L.rp2.data(), N);
        rmsnorm_backward_weight(layer(d.ln2w, l), dx.data(), L.pre2.data(), L.rp2.data(), N);
      } else {
        dpre2 = dx;
      }
      V dxm(NC, 0), df(NC, 0);
      residual_backward_data(dxm.data(), df.data(), dpre2.data(), NC);
      V dz(NH, 0);
      matmul_backward_data(dz.data(), df.data(), layer(p.w2, l), N, H, C);
      matmul_backward_weight(layer(d.w2, l), df.data(), L.z.data(), N, H, C);
      V da(NH, 0), du(NH, 0), dg(NH, 0);
      swiglu_backward_data(da.data(), du.data(), dz.data(), L.a.data(), L.u.data(), NH);
      silu_backward_data(dg.data(), da.data(), L.g.data(), NH);
      V dh2(NC, 0);
      matmul_backward_data(dh2.data(), dg.data(), layer(p.w1, l), N, C, H);
      matmul_backward_data(dh2.data(), du.data(), layer(p.w3, l), N, C, H);
      matmul_backward_weight(layer(d.w1, l), dg.data(), L.h2.data(), N, C, H);
      matmul_backward_weight(layer(d.w3, l), du.data(), L.h2.data(), N, C, H);
      if (rule_.post_norm) {
        for (std::size_t i = 0; i < NC; ++i) dxm[i] = dxm[i] + dh2[i];
      } else {
        rmsnorm_backward_data(dxm.data(), dh2.data(), L.x_mid.data(), layer(p.ln2w, l), L.r2.data(), N);
        rmsnorm_backward_weight(layer(d.ln2w, l), dh2.data(), L.x_mid.data(), L.r2.data(), N);
      }
      // attention half: x_mid = [post-norm](x_in + β·o)
      V dpre1;
      if (rule_.post_norm) {
        dpre1.assign(NC, 0);
        rmsnorm_backward_data(dpre1.data(), dxm.data(), L.pre1.data(), layer(p.ln1w, l), L.rp1.data(), N);
        rmsnorm_backward_weight(layer(d.ln1w, l), dxm.data(), L.pre1.data(), L.rp1.data(), N);
      } else {
        dpre1 = dxm;
      }
      V dxi(NC, 0), dout(NC, 0);
      residual_backward_data(dxi.data(), dout.data(), dpre1.data(), NC);
      V dy(NC, 0);
      matmul_backward_data(dy.data(), dout.data(), layer(p.wo, l), N, C, C);
      matmul_backward_weight(layer(d.wo, l), dout.data(), L.y.data(), N, C, C);
      const bool gqa = c_.kv_count() != c_.heads;
      V datt(att_size, 0), dvt(NC, 0), dpreatt(att_size, 0);
      attn_values_backward_data(datt.data(), dvt.data(), dy.data(), L.att.data(), L.vt.data(), B, Tn);
      softmax_backward_data(dpreatt.data(), datt.data(), L.att.data(), B, Tn);
      V dqr(NC, 0), dkrt(NC, 0), dq(NC, 0), dk(NKVD, 0);
      attn_scores_backward_data(dqr.data(), dkrt.data(), dpreatt.data(), L.qr.data(), L.kt.data(), B, Tn);
      const V dkr = gqa ? kv_reduce(dkrt, N) : dkrt, dv = gqa ? kv_reduce(dvt, N) : dvt;
      rope_backward_data(dq.data(), dqr.data(), B, Tn, c_.heads);
      rope_backward_data(dk.data(), dkr.data(), B, Tn, c_.kv_count());
      V dh1(NC, 0);
      matmul_backward_data(dh1.data(), dq.data(), layer(p.wq, l), N, C, C);
      matmul_backward_data(dh1.data(), dk.data(), layer(p.wk, l), N, C, KVD);
      matmul_backward_data(dh1.data(), dv.data(), layer(p.wv, l), N, C, KVD);
      matmul_backward_weight(layer(d.wq, l), dq.data(), L.h1.data(), N, C, C);
      matmul_backward_weight(layer(d.wk, l), dk.data(), L.h1.data(), N, C, KVD);
      matmul_backward_weight(layer(d.wv, l), dv.data(), L.h1.data(), N, C, KVD);
      if (rule_.post_norm) {
        for (std::size_t i = 0; i < NC; ++i) dxi[i] = dxi[i] + dh1[i];
      } else {
        rmsnorm_backward_data(dxi.data(), dh1.data(), L.x_in.data(), layer(p.ln1w, l), L.r1.data(), N);
        rmsnorm_backward_weight(layer(d.ln1w, l), dh1.data(), L.x_in.data(), L.r1.data(), N);
      }
      dx = std::move(dxi);
    }
    // embedding: a sequential scatter-add over the tokens n = 0..N-1
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) {
        T& gw = d.wte[static_cast<std::size_t>(bt.inputs[static_cast<std::size_t>(n)] * C + i)];
        gw = gw + dx[n * C + i];
      }
  }

  ModelConfig c_;
  ResidualRule rule_;
  ParamLayout lay_;
  V w_, g_, cos_t_, sin_t_, x_final_, xf_, rf_, probs_, losses_;
  std::vector<Layer> layers_;
  std::vector<int> map_;  ///< KV head of each query head
};

}  // namespace roundoff::studies::train::testing
