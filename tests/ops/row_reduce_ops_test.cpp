// The ops whose reductions run rows-in-lanes (ctx.dot_rows → numerics::reduce_rows) and RoPE's span
// arithmetic against their per-element definitions (ExecOptions::fast_paths off: the oracle), bit for bit
// (NaN encodings aside): RMSNorm forward / backward-data / backward-weight, softmax forward / backward,
// cross-entropy forward / backward, RoPE forward / backward — for every preset plus stochastic op rounding (the keyed
// draws must be the same), a stochastic accumulation and an order without a lane kernel (the fallbacks), at
// every ISA tier (KernelOptions::isa_limit: none, AVX2, AVX-512), on ragged shapes (row counts and causal lengths not a
// multiple of the lane count, long rows) and inputs in the normal, overflow, subnormal and special regimes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "numerics/gemm_kernels.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/policy.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/rope.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using numerics::kernels::Isa;
using test::both;
using test::expect_same;
using test::inputs;
using test::kRegimes;
using test::Regime;

/// The presets, stochastic op rounding, a stochastic accumulation and a pairwise order (no lane kernel).
std::vector<std::string> policies() {
  return test::presets_and({"pure-bf16,all.rounding=stochastic", "ane-guide,all.rounding=stochastic",
                            "pure-fp16,all.acc=fp16-sr", "fp32,all.acc=fp16-pairwise",
                            "ane-guide,all.ftz=all,all.daz=on", "pure-fp16,all.ftz=out",
                            "pure-bf16,all.ftz=all,all.daz=on,all.rounding=stochastic"});
}

std::vector<Isa> tiers() {
  std::vector<Isa> t = {Isa::None};
  for (Isa i : {Isa::Avx2, Isa::Avx512})
    if (numerics::kernels::detected_isa() >= i) t.push_back(i);
  return t;
}

class RowReduceOps : public ::testing::Test {
 protected:
  /// The kernel options of the tier each() is on.
  numerics::KernelOptions kernels_{};
  /// fn(spec, pol, regime, what) for every policy, tier (kernels_) and regime.
  template <class F>
  void each(F&& fn) {
    for (Isa isa : tiers()) {
      kernels_ = ::roundoff::test::kernels_at(isa);
      for (const std::string& spec : policies()) {
        const Policy pol = load_policy(spec);
        for (Regime regime : kRegimes)
          fn(pol, regime, spec + ", " + numerics::kernels::name_of(isa) + ", regime " +
                              std::to_string(static_cast<int>(regime)));
      }
    }
  }
};

TEST_F(RowReduceOps, RmsNormEqualsTheOracle) {
  const RowShape shapes[] = {{37, 70}, {3, 700}};
  each([&](const Policy& pol, Regime regime, const std::string& what) {
    for (const RowShape& s : shapes) {
      const auto n = static_cast<std::size_t>(s.size()), C = static_cast<std::size_t>(s.cols);
      const auto seed = static_cast<std::uint64_t>(s.rows) + static_cast<std::uint64_t>(regime) * 7;
      const OpPrecision& pf = pol.at(OpKind::RmsNorm, Pass::Forward);
      // x's specials without NaN: a NaN in x makes its row's rstd NaN, and dw sums every row.
      const std::vector<double> x = inputs(n, regime, pf.storage, seed, C, false),
                                w = inputs(C, Regime::Normal, pf.storage, seed + 1),
                                dy = inputs(n, regime, pf.storage, seed + 2, C);
      const auto [fast, oracle] = both([&](const ExecOptions& ex) {
        std::vector<double> y(n), rstd(static_cast<std::size_t>(s.rows));
        rmsnorm_forward<Emulated>(y, rstd, x, w, s, 1e-5, Ctx<Emulated>(pf, {11, 1}, ex));
        std::vector<double> dx = dy, dw = w;
        rmsnorm_backward_data<Emulated>(dx, dy, x, w, rstd, s, Ctx<Emulated>(pol.at(OpKind::RmsNorm, Pass::BackwardData), {11, 2}, ex));
        rmsnorm_backward_weight<Emulated>(dw, dy, x, rstd, s,
                                          Ctx<Emulated>(pol.at(OpKind::RmsNorm, Pass::BackwardWeight), {11, 3}, ex));
        return std::vector<std::vector<double>>{y, rstd, dx, dw};
      }, kernels_);
      const std::string at = what + " rows " + std::to_string(s.rows) + " cols " + std::to_string(s.cols);
      expect_same(fast[0], oracle[0], "rmsnorm y " + at);
      expect_same(fast[1], oracle[1], "rmsnorm rstd " + at);
      expect_same(fast[2], oracle[2], "rmsnorm dx " + at);
      expect_same(fast[3], oracle[3], "rmsnorm dw " + at);
    }
  });
}

TEST_F(RowReduceOps, SoftmaxEqualsTheOracle) {
  const AttnShape s{2, 2, 37, 4};
  each([&](const Policy& pol, Regime regime, const std::string& what) {
    const auto n = static_cast<std::size_t>(s.att_size());
    const auto seed = 40 + static_cast<std::uint64_t>(regime);
    const OpPrecision& pf = pol.at(OpKind::Softmax, Pass::Forward);
    const auto T = static_cast<std::size_t>(s.T);
    const std::vector<double> pre = inputs(n, regime, pf.storage, seed, T),
                              datt = inputs(n, regime, pf.storage, seed + 1, T),
                              att0 = inputs(n, regime, pf.storage, seed + 2, T);
    const auto [fast, oracle] = both([&](const ExecOptions& ex) {
      std::vector<double> att(n), dpre = datt;
      softmax_forward<Emulated>(att, pre, s, Ctx<Emulated>(pf, {12, 1}, ex));
      softmax_backward_data<Emulated>(dpre, datt, att0, s, Ctx<Emulated>(pol.at(OpKind::Softmax, Pass::BackwardData), {12, 2}, ex));
      return std::vector<std::vector<double>>{att, dpre};
    }, kernels_);
    expect_same(fast[0], oracle[0], "softmax att " + what);
    expect_same(fast[1], oracle[1], "softmax dpreatt " + what);
  });
}

TEST_F(RowReduceOps, CrossEntropyEqualsTheOracle) {
  const RowShape shapes[] = {{45, 50}, {3, 1500}};
  each([&](const Policy& pol, Regime regime, const std::string& what) {
    for (const RowShape& s : shapes) {
      const auto n = static_cast<std::size_t>(s.size());
      const OpPrecision& pf = pol.at(OpKind::CrossEntropy, Pass::Forward);
      const auto V = static_cast<std::size_t>(s.cols);
      const std::vector<double> logits = inputs(n, regime, pf.storage, 50 + static_cast<std::uint64_t>(regime), V);
      const std::vector<double> dl0 = inputs(n, regime, pf.storage, 55 + static_cast<std::uint64_t>(regime), V);
      const auto targets = test::random_tokens(static_cast<std::size_t>(s.rows), static_cast<std::int32_t>(s.cols), 5);
      const auto [fast, oracle] = both([&](const ExecOptions& ex) {
        std::vector<double> losses(static_cast<std::size_t>(s.rows)), probs(n), dlogits = dl0;
        cross_entropy_forward<Emulated>(losses, probs, logits, targets, s, Ctx<Emulated>(pf, {13, 1}, ex));
        cross_entropy_backward_data<Emulated>(dlogits, probs, targets, 0.375, s,
                                              Ctx<Emulated>(pol.at(OpKind::CrossEntropy, Pass::BackwardData), {13, 2}, ex));
        return std::vector<std::vector<double>>{losses, probs, dlogits};
      }, kernels_);
      const std::string at = what + " rows " + std::to_string(s.rows) + " V " + std::to_string(s.cols);
      expect_same(fast[0], oracle[0], "cross-entropy losses " + at);
      expect_same(fast[1], oracle[1], "cross-entropy probs " + at);
      expect_same(fast[2], oracle[2], "cross-entropy dlogits " + at);
    }
  });
}

TEST_F(RowReduceOps, RopeEqualsTheOracle) {
  const AttnShape s{2, 3, 13, 6};
  each([&](const Policy& pol, Regime regime, const std::string& what) {
    const auto n = static_cast<std::size_t>(s.qkv_size()), tab = static_cast<std::size_t>(s.T * s.hs / 2);
    const OpPrecision& pf = pol.at(OpKind::RopeRotate, Pass::Forward);
    const auto seed = 60 + static_cast<std::uint64_t>(regime);
    const std::vector<double> x = inputs(n, regime, pf.storage, seed), dy = inputs(n, regime, pf.storage, seed + 1),
                              c = inputs(tab, Regime::Normal, pf.storage, seed + 2),
                              sn = inputs(tab, regime, pf.storage, seed + 3);
    const auto [fast, oracle] = both([&](const ExecOptions& ex) {
      std::vector<double> y(n), dx = dy;
      rope_forward<Emulated>(y, x, c, sn, s, Ctx<Emulated>(pf, {14, 1}, ex));
      rope_backward_data<Emulated>(dx, dy, c, sn, s, Ctx<Emulated>(pol.at(OpKind::RopeRotate, Pass::BackwardData), {14, 2}, ex));
      return std::vector<std::vector<double>>{y, dx};
    }, kernels_);
    expect_same(fast[0], oracle[0], "rope y " + what);
    expect_same(fast[1], oracle[1], "rope dx " + what);
  });
}

}  // namespace
}  // namespace roundoff::ops
