// Stochastic-rounding keys: no two roundings of one op call share a draw (issue 9 item 5). Every op and pass
// runs under stochastic rounding with a KeyLog (ops/backend.hpp) recording each draw's (stream, key) and each
// stochastic reduction's stream; all entries of one call must be distinct. Ragged shapes (T = 7, hs = 6,
// rows and columns that are multiples of nothing), two precisions: stochastic op roundings with a
// nearest-even accumulator (the batched GEMM paths of attention run) and with a stochastic accumulator (every
// dot alone, each with its own stream).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/adamw.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/gelu.hpp"
#include "ops/gqa.hpp"
#include "ops/matmul.hpp"
#include "ops/online_attention.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using numerics::Rounding;
namespace fmts = numerics::formats;
using test::cs;
using test::randn;
using Vec = std::vector<double>;
using E = Emulated;

OpPrecision stochastic(bool stochastic_accumulator) {
  OpPrecision p{fmts::bf16, fmts::bf16, Rounding::Stochastic, {}};
  p.accumulate.format = stochastic_accumulator ? fmts::bf16 : fmts::fp32;
  p.accumulate.rounding = stochastic_accumulator ? Rounding::Stochastic : Rounding::NearestEven;
  return p;
}

std::string describe(std::uint64_t k) {
  std::ostringstream o;
  if (k == KeyLog::kStreamUse) return "a reduction stream";
  o << "key 0x" << std::hex << k << std::dec << " (element " << (k >> 16) << ", tensor " << ((k >> 8) & 0xff)
    << ", slot " << (k & 0xff) << ")";
  return o.str();
}

/// Runs f(exec) with exec's key log set; returns a description of the repeated (stream, key) entries (empty:
/// none), and the number of draws (so that a call that draws nothing cannot pass unnoticed).
std::pair<std::string, std::size_t> collisions(const std::function<void(const ExecOptions&)>& f) {
  KeyLog log;
  ExecOptions exec;
  exec.key_log = &log;
  f(exec);
  std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
  for (const auto& e : log.entries) ++seen[e];
  std::ostringstream o;
  std::size_t repeated = 0;
  for (const auto& [e, n] : seen)
    if (n > 1) {
      if (repeated < 3) o << "  " << describe(e.second) << " drawn " << n << " times\n";
      ++repeated;
    }
  if (repeated > 0) o << "  " << repeated << " repeated keys of " << seen.size() << " distinct";
  return {o.str(), log.entries.size()};
}

struct Case {
  std::string name;
  std::function<void(const Ctx<E>&, const Ctx<E>&)> run;  // op context, and a second one (online attention)
};

std::vector<Case> all_cases() {
  const auto bf = fmts::bf16;
  const RowShape rs{5, 13};
  const MatmulShape ms{5, 11, 7};
  const AttnShape as{2, 3, 7, 6};
  const auto n = static_cast<std::size_t>(rs.size());
  const auto qkv = static_cast<std::size_t>(as.qkv_size()), att = static_cast<std::size_t>(as.att_size());
  // Causal weights: each row a probability vector on s ≤ t (values only matter for being finite).
  Vec probs(att, 0.0);
  for (std::int64_t r = 0; r < as.heads() * as.T; ++r)
    for (std::int64_t j = 0; j <= r % as.T; ++j)
      probs[static_cast<std::size_t>(r * as.T + j)] = 1.0 / static_cast<double>(r % as.T + 1);
  const std::vector<std::int32_t> tokens{3, 1, 3, 0, 3};  // repeated rows: the scatter-add adds twice
  std::vector<Case> c;
  auto mm = [=](auto fn) {
    return [=](const Ctx<E>& ctx, const Ctx<E>&) { fn(ctx); };
  };
  c.push_back({"matmul.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec y(35);
                 matmul_forward<E>(y, cs(randn(55, 1, bf, 1)), cs(randn(77, 1, bf, 2)), ms, ctx);
               })});
  c.push_back({"matmul.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dx = randn(55, 1, bf, 3);
                 matmul_backward_data<E>(dx, cs(randn(35, 1, bf, 4)), cs(randn(77, 1, bf, 2)), ms, ctx);
               })});
  c.push_back({"matmul.bwd-weight", mm([=](const Ctx<E>& ctx) {
                 Vec dw = randn(77, 1, bf, 5);
                 matmul_backward_weight<E>(dw, cs(randn(35, 1, bf, 4)), cs(randn(55, 1, bf, 1)), ms, ctx);
               })});
  c.push_back({"rmsnorm.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec y(n), rstd(5);
                 rmsnorm_forward<E>(y, rstd, cs(randn(n, 1, bf, 6)), cs(randn(13, 1, bf, 7)), rs, 1e-5, ctx);
               })});
  c.push_back({"rmsnorm.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dx = randn(n, 1, bf, 8);
                 rmsnorm_backward_data<E>(dx, cs(randn(n, 1, bf, 9)), cs(randn(n, 1, bf, 6)), cs(randn(13, 1, bf, 7)),
                                          cs(randn(5, 1, bf, 10)), rs, ctx);
               })});
  c.push_back({"rmsnorm.bwd-weight", mm([=](const Ctx<E>& ctx) {
                 Vec dw = randn(13, 1, bf, 11);
                 rmsnorm_backward_weight<E>(dw, cs(randn(n, 1, bf, 9)), cs(randn(n, 1, bf, 6)), cs(randn(5, 1, bf, 10)),
                                            rs, ctx);
               })});
  c.push_back({"silu.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec y(n);
                 silu_forward<E>(y, cs(randn(n, 1, bf, 12)), rs, ctx);
               })});
  c.push_back({"silu.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dx = randn(n, 1, bf, 13);
                 silu_backward_data<E>(dx, cs(randn(n, 1, bf, 14)), cs(randn(n, 1, bf, 12)), rs, ctx);
               })});
  for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    const std::string f(name_of(form));
    c.push_back({"gelu-" + f + ".fwd", mm([=](const Ctx<E>& ctx) {
                   Vec y(n);
                   gelu_forward<E>(y, cs(randn(n, 1, bf, 12)), rs, form, ctx);
                 })});
    c.push_back({"gelu-" + f + ".bwd-data", mm([=](const Ctx<E>& ctx) {
                   Vec dx = randn(n, 1, bf, 13);
                   gelu_backward_data<E>(dx, cs(randn(n, 1, bf, 14)), cs(randn(n, 1, bf, 12)), rs, form, ctx);
                 })});
  }
  c.push_back({"swiglu.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec h(n);
                 swiglu_forward<E>(h, cs(randn(n, 1, bf, 15)), cs(randn(n, 1, bf, 16)), rs, ctx);
               })});
  c.push_back({"swiglu.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec da = randn(n, 1, bf, 17), du = randn(n, 1, bf, 18);
                 swiglu_backward_data<E>(da, du, cs(randn(n, 1, bf, 19)), cs(randn(n, 1, bf, 15)),
                                         cs(randn(n, 1, bf, 16)), rs, ctx);
               })});
  c.push_back({"residual.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec out(n);
                 residual_forward<E>(out, cs(randn(n, 1, bf, 20)), cs(randn(n, 1, bf, 21)), 0.5, rs, ctx);
               })});
  c.push_back({"residual.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dx = randn(n, 1, bf, 22), df = randn(n, 1, bf, 23);
                 residual_backward_data<E>(dx, df, cs(randn(n, 1, bf, 24)), 0.5, rs, ctx);
               })});
  c.push_back({"embedding.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec out(n);
                 embedding_forward<E>(out, tokens, cs(randn(4 * 13, 1, fmts::fp32, 25)), rs, ctx);
               })});
  c.push_back({"embedding.bwd-weight", mm([=](const Ctx<E>& ctx) {
                 Vec dwte = randn(4 * 13, 1, bf, 26);
                 embedding_backward_weight<E>(dwte, cs(randn(n, 1, bf, 27)), tokens, rs, ctx);
               })});
  c.push_back({"cross-entropy.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec losses(5), p(n);
                 cross_entropy_forward<E>(losses, p, cs(randn(n, 1, bf, 28)), std::vector<std::int32_t>{0, 12, 5, 5, 7},
                                          rs, ctx);
               })});
  c.push_back({"cross-entropy.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dl = randn(n, 1, bf, 29);
                 cross_entropy_backward_data<E>(dl, cs(randn(n, 0.1, bf, 30)), std::vector<std::int32_t>{0, 12, 5, 5, 7},
                                                0.2, rs, ctx);
               })});
  c.push_back({"adamw", mm([=](const Ctx<E>& ctx) {
                 Vec w = randn(n, 1, fmts::fp32, 31), m = randn(n, 0.1, fmts::fp32, 32),
                     v = randn(n, 0.1, fmts::fp32, 33), weights(n);
                 for (double& x : v) x = x * x;
                 AdamWConfig cfg;
                 cfg.grad_scale = 0.5;
                 adamw_update<E>(w, m, v, cs(randn(n, 1, fmts::fp32, 34)), weights, cfg, 3,
                                 AdamWFormats(Policy(ctx.precision()).set_role(TensorRole::Weight, bf)), ctx);
               })});
  c.push_back({"kv-reduce.bwd-data", mm([=](const Ctx<E>& ctx) {
                 const std::vector<int> head_map{0, 1, 0};  // NH 3 → 2 KV heads
                 Vec dkv = randn(5 * 2 * 6, 1, bf, 35);
                 kv_reduce_backward<E>(dkv, cs(randn(5 * 3 * 6, 1, bf, 36)), head_map, 2, 6, ctx);
               })});
  c.push_back({"rope-angles.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec co(7 * 3), si(7 * 3);
                 rope_angles<E>(co, si, 7, 6, 10000.0, ctx);
               })});
  const Vec cos_t = randn(7 * 3, 0.5, bf, 37), sin_t = randn(7 * 3, 0.5, bf, 38);
  c.push_back({"rope.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec y(qkv);
                 rope_forward<E>(y, cs(randn(qkv, 1, bf, 39)), cs(cos_t), cs(sin_t), as, ctx);
               })});
  c.push_back({"rope.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dx = randn(qkv, 1, bf, 40);
                 rope_backward_data<E>(dx, cs(randn(qkv, 1, bf, 41)), cs(cos_t), cs(sin_t), as, ctx);
               })});
  c.push_back({"attn-scores.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec pre(att);
                 attn_scores_forward<E>(pre, cs(randn(qkv, 1, bf, 42)), cs(randn(qkv, 1, bf, 43)), as, ctx);
               })});
  c.push_back({"attn-scores.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dq = randn(qkv, 1, bf, 44), dk = randn(qkv, 1, bf, 45);
                 attn_scores_backward_data<E>(dq, dk, cs(randn(att, 1, bf, 46)), cs(randn(qkv, 1, bf, 42)),
                                              cs(randn(qkv, 1, bf, 43)), as, ctx);
               })});
  c.push_back({"softmax.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec a(att);
                 softmax_forward<E>(a, cs(randn(att, 2, bf, 47)), as, ctx);
               })});
  c.push_back({"softmax.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec dp = randn(att, 1, bf, 48);
                 softmax_backward_data<E>(dp, cs(randn(att, 1, bf, 49)), cs(probs), as, ctx);
               })});
  c.push_back({"attn-values.fwd", mm([=](const Ctx<E>& ctx) {
                 Vec out(qkv);
                 attn_values_forward<E>(out, cs(probs), cs(randn(qkv, 1, bf, 50)), as, ctx);
               })});
  c.push_back({"attn-values.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec datt = randn(att, 1, bf, 51), dv = randn(qkv, 1, bf, 52);
                 attn_values_backward_data<E>(datt, dv, cs(randn(qkv, 1, bf, 53)), cs(probs), cs(randn(qkv, 1, bf, 50)),
                                              as, ctx);
               })});
  c.push_back({"online-attention.fwd", [=](const Ctx<E>& sm, const Ctx<E>& av) {
                 Vec y(qkv), lse(static_cast<std::size_t>(as.heads() * as.T));
                 online_attention_forward<E>(y, lse, cs(randn(att, 2, bf, 47)), cs(randn(qkv, 1, bf, 50)), as, sm, av);
               }});
  c.push_back({"softmax-from-lse.bwd-data", mm([=](const Ctx<E>& ctx) {
                 Vec a(att);
                 softmax_from_lse<E>(a, cs(randn(att, 1, bf, 47)),
                                     cs(randn(static_cast<std::size_t>(as.heads() * as.T), 1, bf, 54)), as, ctx);
               })});
  return c;
}

void check_all(bool stochastic_accumulator, bool flush = false) {
  OpPrecision p = stochastic(stochastic_accumulator);
  if (flush) {  // the flushes draw nothing; daz moves the GEMMs' entry casts from the packs to in_array
    p.ftz = Ftz::All;
    p.daz = Daz::On;
  }
  for (const Case& c : all_cases()) {
    const auto [repeats, draws] = collisions([&](const ExecOptions& exec) {
      const Ctx<E> ctx(p, {20260101, 7}, exec), other(p, {20260101, 8}, exec);
      c.run(ctx, other);
    });
    EXPECT_GT(draws, 0u) << c.name << " drew no stochastic bits";
    EXPECT_TRUE(repeats.empty()) << c.name << " shares draws between roundings:\n" << repeats;
  }
}

TEST(StochasticKeys, EveryRoundingOfACallHasItsOwnKey) { check_all(false); }
TEST(StochasticKeys, EveryRoundingOfACallHasItsOwnKeyStochasticAccumulator) { check_all(true); }
TEST(StochasticKeys, EveryRoundingOfACallHasItsOwnKeyUnderFtzAndDaz) { check_all(false, true); }

/// The op function (ops/<op>.hpp) that runs an OpKind: the case names above start with it. A switch, so that a
/// new OpKind fails to compile here until it names its function, and OpKindsAllHaveACase then fails until the
/// function has a case above.
std::string_view op_function(OpKind k) {
  switch (k) {
    case OpKind::Embedding: return "embedding";
    case OpKind::RmsNorm: return "rmsnorm";
    case OpKind::Matmul:
    case OpKind::Classifier: return "matmul";
    case OpKind::RopeAngles: return "rope-angles";
    case OpKind::RopeRotate: return "rope";
    case OpKind::AttnScores: return "attn-scores";
    case OpKind::Softmax: return "softmax";
    case OpKind::AttnValues: return "attn-values";
    case OpKind::Silu: return "silu";
    case OpKind::SwiGlu: return "swiglu";
    case OpKind::ResidualAttn:
    case OpKind::ResidualFfn: return "residual";
    case OpKind::CrossEntropy: return "cross-entropy";
    case OpKind::AdamW: return "adamw";
    case OpKind::Gelu: return "gelu";
  }
  return "";
}

TEST(StochasticKeys, OpKindsAllHaveACase) {
  const std::vector<Case> cases = all_cases();
  for (const OpKind k : kAllOps) {
    const std::string_view f = op_function(k);
    bool found = false;
    for (const Case& c : cases)
      found |= c.name == f || c.name.starts_with(std::string(f) + ".") || c.name.starts_with(std::string(f) + "-");
    EXPECT_TRUE(found) << name_of(k) << ": no stochastic-keys case runs " << f << " (add one to all_cases())";
  }
}

// The key layout: distinct (tensor, element, slot) give distinct keys, elements 2^16 apart.
TEST(StochasticKeys, KeyLayout) {
  EXPECT_NE(key(Tensor::Row, 0, 1).bits, key(Tensor::Y, 0, 1).bits);
  EXPECT_NE(key(Tensor::Y, 1, 0).bits, key(Tensor::Y, 0, 1).bits);
  EXPECT_NE(key(Tensor::Dq, 5, 0).bits, key(Tensor::Dpreatt, 5, 0).bits);
  EXPECT_EQ(key(Tensor::Y, 3, 2).bits - key(Tensor::Y, 2, 2).bits, std::uint64_t{1} << 16);
  EXPECT_EQ(key(Tensor::Y, (std::uint64_t{1} << 48) - 1, 255).bits >> 16, (std::uint64_t{1} << 48) - 1);
}

}  // namespace
}  // namespace roundoff::ops
