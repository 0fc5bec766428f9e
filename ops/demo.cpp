#include "ops/demo.hpp"

#include <cmath>
#include <ostream>
#include <random>

namespace roundoff::ops {

namespace {

/// n values mean + N(0, sigma²), rounded to f.
std::vector<double> normal(std::size_t n, double sigma, const numerics::Format& f, std::mt19937_64& rng,
                           double mean = 0.0) {
  std::normal_distribution<double> d(mean, sigma);
  const numerics::RoundingPlan plan(f);
  std::vector<double> v(n);
  for (double& x : v) x = numerics::round_to(plan, numerics::Rounding::NearestEven, d(rng));
  return v;
}

}  // namespace

BlockResult run_block(Runner& run, const BlockConfig& cfg) {
  using std::vector;
  const std::int64_t N = cfg.B * cfg.T, C = cfg.C, H = cfg.hidden, hs = C / cfg.NH;
  const AttnShape as{cfg.B, cfg.NH, cfg.T, hs};
  const RowShape rc{N, C}, rh{N, H};
  const MatmulShape pc{N, C, C}, p_up{N, C, H}, p_down{N, H, C};
  const numerics::Format wf = run.policy().storage_for(TensorRole::Weight);
  const numerics::Format af = run.policy().at(OpKind::Embedding, Pass::Forward).storage;
  std::mt19937_64 rng(cfg.data_seed);
  const double ws = 1.0 / std::sqrt(static_cast<double>(C)), ws2 = 1.0 / std::sqrt(static_cast<double>(H));
  const auto x = normal(static_cast<std::size_t>(N * C), 1.0, af, rng);
  const auto g1 = normal(static_cast<std::size_t>(C), 0.1, wf, rng, 1.0);
  const auto g2 = normal(static_cast<std::size_t>(C), 0.1, wf, rng, 1.0);
  vector<vector<double>> W;
  for (int i = 0; i < 4; ++i) W.push_back(normal(static_cast<std::size_t>(C * C), ws, wf, rng));
  W.push_back(normal(static_cast<std::size_t>(H * C), ws, wf, rng));
  W.push_back(normal(static_cast<std::size_t>(H * C), ws, wf, rng));
  W.push_back(normal(static_cast<std::size_t>(C * H), ws2, wf, rng));
  const auto dout = normal(static_cast<std::size_t>(N * C), 1.0 / static_cast<double>(N), af, rng);
  const vector<double>&Wq = W[0], &Wk = W[1], &Wv = W[2], &Wo = W[3], &W1 = W[4], &W3 = W[5], &W2 = W[6];
  auto z = [](std::int64_t n) { return vector<double>(static_cast<std::size_t>(n), 0.0); };
  auto S = [](const vector<double>& v) { return std::span<const double>(v); };

  // ---- forward ----
  vector<double> ct = z(cfg.T * hs / 2), st = z(cfg.T * hs / 2);
  run.rope_angles({OpKind::RopeAngles, 0, "table"}, ct, st, cfg.T, hs, 10000.0);
  vector<double> xn = z(N * C), r1 = z(N), q0 = z(N * C), k0 = z(N * C), v = z(N * C), q = z(N * C), k = z(N * C);
  run.rmsnorm_forward({OpKind::RmsNorm, 0, "norm1"}, xn, r1, S(x), S(g1), rc, cfg.eps);
  run.matmul_forward({OpKind::Matmul, 0, "q"}, q0, S(xn), S(Wq), pc);
  run.matmul_forward({OpKind::Matmul, 0, "k"}, k0, S(xn), S(Wk), pc);
  run.matmul_forward({OpKind::Matmul, 0, "v"}, v, S(xn), S(Wv), pc);
  run.rope_forward({OpKind::RopeRotate, 0, "q"}, q, S(q0), S(ct), S(st), as);
  run.rope_forward({OpKind::RopeRotate, 0, "k"}, k, S(k0), S(ct), S(st), as);
  vector<double> pre = z(as.att_size()), att = z(as.att_size()), ao = z(N * C), o = z(N * C), x1 = z(N * C);
  run.attn_scores_forward({OpKind::AttnScores, 0, "scores"}, pre, S(q), S(k), as);
  run.softmax_forward({OpKind::Softmax, 0, "att"}, att, S(pre), as);
  run.attn_values_forward({OpKind::AttnValues, 0, "av"}, ao, S(att), S(v), as);
  run.matmul_forward({OpKind::Matmul, 0, "o"}, o, S(ao), S(Wo), pc);
  run.residual_forward({OpKind::ResidualAttn, 0, "x1"}, x1, S(x), S(o), cfg.alpha, rc);
  vector<double> xn2 = z(N * C), r2 = z(N), gt = z(N * H), up = z(N * H), a = z(N * H), h = z(N * H), f = z(N * C);
  run.rmsnorm_forward({OpKind::RmsNorm, 0, "norm2"}, xn2, r2, S(x1), S(g2), rc, cfg.eps);
  run.matmul_forward({OpKind::Matmul, 0, "w1"}, gt, S(xn2), S(W1), p_up);
  run.matmul_forward({OpKind::Matmul, 0, "w3"}, up, S(xn2), S(W3), p_up);
  run.silu_forward({OpKind::Silu, 0, "silu"}, a, S(gt), rh);
  run.swiglu_forward({OpKind::SwiGlu, 0, "gate"}, h, S(a), S(up), rh);
  run.matmul_forward({OpKind::Matmul, 0, "w2"}, f, S(h), S(W2), p_down);
  BlockResult res;
  res.out = z(N * C);
  run.residual_forward({OpKind::ResidualFfn, 0, "out"}, res.out, S(x1), S(f), cfg.alpha, rc);

  // ---- backward (gradients zeroed here; every op adds) ----
  vector<vector<double>> dW;
  for (const auto& w : W) dW.push_back(z(static_cast<std::int64_t>(w.size())));
  vector<double> dg1 = z(C), dg2 = z(C);
  vector<double> dx1 = z(N * C), df = z(N * C), dh = z(N * H), da = z(N * H), du = z(N * H), dgt = z(N * H),
                 dxn2 = z(N * C);
  run.residual_backward_data({OpKind::ResidualFfn, 0, "out"}, dx1, df, S(dout), cfg.alpha, rc);
  run.matmul_backward_data({OpKind::Matmul, 0, "w2"}, dh, S(df), S(W2), p_down);
  run.matmul_backward_weight({OpKind::Matmul, 0, "w2"}, dW[6], S(df), S(h), p_down);
  run.swiglu_backward_data({OpKind::SwiGlu, 0, "gate"}, da, du, S(dh), S(a), S(up), rh);
  run.silu_backward_data({OpKind::Silu, 0, "silu"}, dgt, S(da), S(gt), rh);
  run.matmul_backward_data({OpKind::Matmul, 0, "w1"}, dxn2, S(dgt), S(W1), p_up);
  run.matmul_backward_data({OpKind::Matmul, 0, "w3"}, dxn2, S(du), S(W3), p_up);
  run.matmul_backward_weight({OpKind::Matmul, 0, "w1"}, dW[4], S(dgt), S(xn2), p_up);
  run.matmul_backward_weight({OpKind::Matmul, 0, "w3"}, dW[5], S(du), S(xn2), p_up);
  run.rmsnorm_backward_data({OpKind::RmsNorm, 0, "norm2"}, dx1, S(dxn2), S(x1), S(g2), S(r2), rc);
  run.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "norm2"}, dg2, S(dxn2), S(x1), S(r2), rc);
  res.dx = z(N * C);
  vector<double> dout_o = z(N * C), dao = z(N * C), datt = z(as.att_size()), dv = z(N * C), dpre = z(as.att_size()),
                 dq = z(N * C), dk = z(N * C), dq0 = z(N * C), dk0 = z(N * C), dxn = z(N * C);
  run.residual_backward_data({OpKind::ResidualAttn, 0, "x1"}, res.dx, dout_o, S(dx1), cfg.alpha, rc);
  run.matmul_backward_data({OpKind::Matmul, 0, "o"}, dao, S(dout_o), S(Wo), pc);
  run.matmul_backward_weight({OpKind::Matmul, 0, "o"}, dW[3], S(dout_o), S(ao), pc);
  run.attn_values_backward_data({OpKind::AttnValues, 0, "av"}, datt, dv, S(dao), S(att), S(v), as);
  run.softmax_backward_data({OpKind::Softmax, 0, "att"}, dpre, S(datt), S(att), as);
  run.attn_scores_backward_data({OpKind::AttnScores, 0, "scores"}, dq, dk, S(dpre), S(q), S(k), as);
  run.rope_backward_data({OpKind::RopeRotate, 0, "q"}, dq0, S(dq), S(ct), S(st), as);
  run.rope_backward_data({OpKind::RopeRotate, 0, "k"}, dk0, S(dk), S(ct), S(st), as);
  run.matmul_backward_data({OpKind::Matmul, 0, "q"}, dxn, S(dq0), S(Wq), pc);
  run.matmul_backward_data({OpKind::Matmul, 0, "k"}, dxn, S(dk0), S(Wk), pc);
  run.matmul_backward_data({OpKind::Matmul, 0, "v"}, dxn, S(dv), S(Wv), pc);
  run.matmul_backward_weight({OpKind::Matmul, 0, "q"}, dW[0], S(dq0), S(xn), pc);
  run.matmul_backward_weight({OpKind::Matmul, 0, "k"}, dW[1], S(dk0), S(xn), pc);
  run.matmul_backward_weight({OpKind::Matmul, 0, "v"}, dW[2], S(dv), S(xn), pc);
  run.rmsnorm_backward_data({OpKind::RmsNorm, 0, "norm1"}, res.dx, S(dxn), S(x), S(g1), S(r1), rc);
  run.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "norm1"}, dg1, S(dxn), S(x), S(r1), rc);
  res.dweights = std::move(dW);
  res.dweights.push_back(std::move(dg1));
  res.dweights.push_back(std::move(dg2));
  return res;
}

void print_block_error_demo(std::ostream& out) {
  const Policy pol = Policy::preset("ane-fp16");
  Runner run(pol, 1);
  Tape tape;
  Sampling sampling;
  sampling.units = 8;
  run.enable_shadow(&tape, sampling);
  run_block(run, BlockConfig{});
  out << "One transformer block (d = 64, 4 heads, T = 32, SwiGLU 176) forward + backward under\n  "
      << pol.canonical() << "\nLocal error of each op against MPFR on the same inputs (8 rows/heads per call; "
      << "ulp of the op's storage format; dot rat = max |err| / (u_acc·Σ|a||b|)):\n";
  tape.print_table(out);
}

}  // namespace roundoff::ops
