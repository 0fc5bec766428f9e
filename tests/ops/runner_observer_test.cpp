// The Runner's one call site per (op, pass): the observer hook (which outputs it sees, under which names, after
// which call) and the shadow's Reference call on in-place updates.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/runner.hpp"

namespace roundoff::ops {
namespace {

struct Seen {
  OpKind op;
  Pass pass;
  int layer;
  std::string tensor;
  std::vector<double> data;
  std::string storage;
};

std::vector<double> ramp(std::size_t n, double scale) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<double>(i % 7) - 3.0 + 0.25 * static_cast<double>(i % 3));
  return v;
}

TEST(RunnerObserver, SeesEveryWatchedOutputAfterTheCallUnderItsName) {
  Runner run(Policy::preset("ane-fp16"), 7);
  std::vector<Seen> seen;
  run.set_observer([&](const Observation& o) {
    seen.push_back({o.op, o.pass, o.layer, std::string(o.tensor), o.data.widened(),
                    numerics::name_of(o.storage)});
  });
  const std::int64_t N = 4, C = 8;
  const std::vector<double> x = ramp(static_cast<std::size_t>(N * C), 0.5), w = ramp(static_cast<std::size_t>(C * C), 0.125);
  std::vector<double> y(x.size()), rstd(static_cast<std::size_t>(N));
  run.matmul_forward({OpKind::Matmul, 2, "q"}, y, x, w, {N, C, C});
  run.rmsnorm_forward({OpKind::RmsNorm, 2, "ln1"}, y, rstd, x, ramp(static_cast<std::size_t>(C), 1.0), {N, C}, 1e-5);
  const std::vector<double> normed = y;
  const AttnShape sh{1, 2, 2, 4};
  std::vector<double> dq(x.size()), dk(x.size()), preatt(static_cast<std::size_t>(sh.att_size()), 0.5);
  run.attn_scores_backward_data({OpKind::AttnScores, 0, "dqk"}, dq, dk, preatt, x, x, sh);
  run.matmul_forward({OpKind::Matmul, 2, "k", Observe::Off}, y, x, w, {N, C, C});

  ASSERT_EQ(seen.size(), 4u);
  // One watched output: the Site's tensor name; the values are those the call wrote.
  EXPECT_EQ(seen[0].op, OpKind::Matmul);
  EXPECT_EQ(seen[0].pass, Pass::Forward);
  EXPECT_EQ(seen[0].layer, 2);
  EXPECT_EQ(seen[0].tensor, "q");
  EXPECT_EQ(seen[0].storage, "fp16");
  // rmsnorm: y is watched, rstd (a saved statistic) is not, so y carries the Site's name.
  EXPECT_EQ(seen[1].op, OpKind::RmsNorm);
  EXPECT_EQ(seen[1].tensor, "ln1");
  EXPECT_EQ(seen[1].data, normed);
  // Two watched outputs: their own names, in output order.
  EXPECT_EQ(seen[2].tensor, "dq");
  EXPECT_EQ(seen[2].pass, Pass::BackwardData);
  EXPECT_EQ(seen[2].data, dq);
  EXPECT_EQ(seen[3].tensor, "dk");
  EXPECT_EQ(seen[3].data, dk);
  EXPECT_NE(seen[0].data, seen[1].data);

  run.set_observer({});
  run.matmul_forward({OpKind::Matmul, 2, "q"}, y, x, w, {N, C, C});
  EXPECT_EQ(seen.size(), 4u) << "an empty observer is off";
}

TEST(RunnerObserver, WritesOfTheObserverReachTheOutput) {
  Runner run(Policy::preset("fp32"));
  run.set_observer([](const Observation& o) {
    for (double& v : o.data.f64()) v *= 2.0;
  });
  const std::vector<double> x = ramp(8, 1.0), f = ramp(8, 0.5);
  std::vector<double> out(8), plain(8);
  run.residual_forward({OpKind::ResidualAttn, 0, "x"}, out, x, f, 1.0, {2, 4});
  run.set_observer({});
  run.residual_forward({OpKind::ResidualAttn, 0, "x"}, plain, x, f, 1.0, {2, 4});
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], 2.0 * plain[i]) << i;
}

/// An in-place call (output = input) must give the shadow the same record as the out-of-place call on the
/// same input: the Reference reads the input as it was before the emulated call overwrote it.
TEST(RunnerObserver, ShadowOfAnInPlaceCallReadsTheInputBeforeTheCall) {
  const AttnShape sh{1, 2, 4, 8};
  const std::vector<double> x0 = ramp(static_cast<std::size_t>(sh.B * sh.T * sh.C()), 0.75);
  const auto records = [&](bool in_place) {
    Runner run(Policy::preset("ane-fp16"), 3);
    Tape tape;
    run.enable_shadow(&tape, {});
    std::vector<double> cs(static_cast<std::size_t>(sh.T * sh.hs / 2)), sn(cs.size());
    run.rope_angles({OpKind::RopeAngles, -1, "rope"}, cs, sn, sh.T, sh.hs, 10000.0);
    std::vector<double> x = x0, y(x0.size());
    run.rope_forward({OpKind::RopeRotate, 0, "q"}, in_place ? x : y, x, cs, sn, sh);
    std::vector<double> s = x0, out(x0.size());
    const std::vector<double> f = ramp(x0.size(), 0.001);
    run.residual_forward({OpKind::ResidualAttn, 0, "x"}, in_place ? s : out, s, f, 1.0, {sh.B * sh.T, sh.C()});
    return tape.records();
  };
  const std::vector<OpRecord> apart = records(false), in_place = records(true);
  ASSERT_EQ(apart.size(), 4u);
  ASSERT_EQ(in_place.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_GT(apart[i].error.count, 0) << i;
    EXPECT_EQ(in_place[i].error.max_ulp, apart[i].error.max_ulp) << i;
    EXPECT_EQ(in_place[i].error.median_ulp, apart[i].error.median_ulp) << i;
  }
}

}  // namespace
}  // namespace roundoff::ops
