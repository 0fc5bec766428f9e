// The Runner on typed storage (issue 45; ops/values.hpp): one sequence of op calls, forward and backward, run on
// binary64 tensors, on binary32 tensors and on a mix of both widths, gives the same bits in every output (NaN
// encodings included), the same shadow tape and the same observations, under policies with fp32, fp16, block-scaled
// and per-tensor fp8 entries (stochastic rounding among them); a binary32 output under a storage format that does not
// fit binary32 is refused before the call, while binary32 inputs to binary64 outputs run widened.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/runner.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

enum class Width { Binary64, Binary32, Mixed };

/// A tensor at the width its bank gives it; the same values at every width.
struct Tensor {
  std::vector<double> d;
  std::vector<float> f;
  bool f32 = false;
  Values v() { return f32 ? Values(f) : Values(d); }
  CValues c() const { return f32 ? CValues(f) : CValues(d); }
  std::vector<double> widened() const { return f32 ? std::vector<double>(f.begin(), f.end()) : d; }
};

/// Tensors in creation order: all binary64, all binary32, or (Mixed) every second one binary32.
class Bank {
 public:
  explicit Bank(Width w) : width_(w) {}
  /// A tensor holding `values` (binary32 values, so that every width holds them exactly).
  Tensor& make(const std::vector<float>& values) {
    auto t = std::make_unique<Tensor>();
    const std::size_t i = all_.size();
    t->f32 = width_ == Width::Binary32 || (width_ == Width::Mixed && i % 2 == 1);
    if (t->f32) t->f = values;
    else t->d.assign(values.begin(), values.end());
    all_.push_back(std::move(t));
    return *all_.back();
  }
  Tensor& zeros(std::size_t n) { return make(std::vector<float>(n, 0.0f)); }
  const std::vector<std::unique_ptr<Tensor>>& all() const { return all_; }

 private:
  Width width_;
  std::vector<std::unique_ptr<Tensor>> all_;
};

std::vector<float> randn(std::size_t n, double sigma, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

std::vector<float> narrowed(const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (static_cast<double>(f[i]) != v[i] && !std::isnan(v[i])) throw std::logic_error("not a binary32 value");
  return f;
}

struct Seen {
  std::string where;
  std::vector<double> data;
  bool operator==(const Seen&) const = default;
};

struct Result {
  std::vector<std::vector<double>> tensors;
  std::string tape;
  std::vector<Seen> seen;
  std::array<std::int64_t, 4> widths{};  ///< Runner::width_counts()
};

// Every GEMM axis a multiple of 32 (the MX blocks; NVFP4's Hadamard transform needs 16).
constexpr std::int64_t kB = 2, kT = 16, kNH = 2, kHs = 16, kC = kNH * kHs, kN = kB * kT, kH = 64, kV = 32;

/// The sequence: a transformer block's op calls forward and backward (not chained as a model would chain them:
/// the calls, their widths and their stochastic stream are what is tested), two of them in place.
Result run_sequence(const std::string& policy, Width width) {
  Runner run(Policy::parse(policy), 11);
  Tape tape;
  run.enable_shadow(&tape, {.every = 1, .units = 3});
  Result r;
  run.set_observer([&](const Observation& o) {
    r.seen.push_back({std::string(name_of(o.op)) + "/" + std::string(name_of(o.pass)) + "/" +
                          std::to_string(o.layer) + "/" + std::string(o.tensor) + "/" + numerics::name_of(o.storage),
                      o.data.widened()});
  });
  run.set_fp8_recording(true);
  Bank b(width);
  const auto n = [](std::int64_t k) { return static_cast<std::size_t>(k); };
  const AttnShape ash{kB, kNH, kT, kHs};
  const RowShape rows{kN, kC}, hid{kN, kH}, cls{kN, kV};
  std::vector<std::int32_t> tokens(n(kN)), targets(n(kN));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((7 * i + 3) % kV);
    targets[i] = static_cast<std::int32_t>((5 * i + 1) % kV);
  }

  Tensor& wte = b.make(randn(n(kV * kC), 1.0, 1));
  Tensor& x0 = b.zeros(n(kN * kC));
  run.embedding_forward({OpKind::Embedding, -1, "x0"}, x0.v(), tokens, wte.c(), rows);
  std::vector<float> lw = randn(n(kC), 0.1, 2);
  for (float& w : lw) w += 1.0f;
  Tensor& lnw = b.make(lw);
  Tensor& h = b.zeros(n(kN * kC));
  Tensor& rstd = b.zeros(n(kN));
  run.rmsnorm_forward({OpKind::RmsNorm, 0, "ln1"}, h.v(), rstd.v(), x0.c(), lnw.c(), rows, 1e-5);
  const std::vector<float> wq32 = randn(n(kC * kC), 0.25, 3), wc32 = randn(n(kV * kC), 0.25, 4);
  // The GEMM weights at the bank's width too: binary32 weights are read in place by the binary32 body and widened by
  // the binary64 one (a model's binary32 working weights).
  const Tensor& wq = b.make(wq32);
  const Tensor& wcls = b.make(wc32);
  Tensor& q = b.zeros(n(kN * kC));
  run.matmul_forward({OpKind::Matmul, 0, "q"}, q.v(), h.c(), wq.c(), {kN, kC, kC});
  std::vector<double> cs(n(kT * kHs / 2)), sn(cs.size());
  run.rope_angles({OpKind::RopeAngles, -1, "rope"}, cs, sn, kT, kHs, 10000.0);
  Tensor& cos_t = b.make(narrowed(cs));
  Tensor& sin_t = b.make(narrowed(sn));
  Tensor& qr = b.zeros(n(kN * kC));
  run.rope_forward({OpKind::RopeRotate, 0, "q"}, qr.v(), q.c(), cos_t.c(), sin_t.c(), ash);
  run.rope_forward({OpKind::RopeRotate, 0, "k"}, q.v(), q.c(), cos_t.c(), sin_t.c(), ash);  // in place
  Tensor& preatt = b.zeros(n(ash.att_size()));
  run.attn_scores_forward({OpKind::AttnScores, 0, "scores"}, preatt.v(), qr.c(), q.c(), ash);
  Tensor& att = b.zeros(n(ash.att_size()));
  run.softmax_forward({OpKind::Softmax, 0, "att"}, att.v(), preatt.c(), ash);
  Tensor& y = b.zeros(n(kN * kC));
  run.attn_values_forward({OpKind::AttnValues, 0, "y"}, y.v(), att.c(), h.c(), ash);
  Tensor& y2 = b.zeros(n(kN * kC));
  Tensor& lse = b.zeros(n(kB * kNH * kT));
  run.online_attention_forward({OpKind::AttnValues, 0, "y"}, y2.v(), lse.v(), preatt.c(), h.c(), ash);
  Tensor& att2 = b.zeros(n(ash.att_size()));
  run.softmax_from_lse({OpKind::Softmax, 0, "att"}, att2.v(), preatt.c(), lse.c(), ash);
  Tensor& g = b.make(randn(n(kN * kH), 2.0, 5));
  Tensor& u = b.make(randn(n(kN * kH), 1.0, 6));
  Tensor& a = b.zeros(n(kN * kH));
  run.silu_forward({OpKind::Silu, 0, "silu"}, a.v(), g.c(), hid);
  Tensor& z = b.zeros(n(kN * kH));
  run.swiglu_forward({OpKind::SwiGlu, 0, "z"}, z.v(), a.c(), u.c(), hid);
  Tensor& ze = b.zeros(n(kN * kH));
  run.gelu_forward({OpKind::Gelu, 0, "z"}, ze.v(), g.c(), hid, GeluForm::Tanh);
  run.residual_forward({OpKind::ResidualAttn, 0, "x"}, x0.v(), x0.c(), y.c(), 1.0, rows);  // in place
  Tensor& logits = b.zeros(n(kN * kV));
  run.matmul_forward({OpKind::Classifier, -1, "logits"}, logits.v(), x0.c(), wcls.c(), {kN, kC, kV});
  std::vector<double> losses(n(kN));
  Tensor& probs = b.zeros(n(kN * kV));
  const double loss =
      run.cross_entropy_forward({OpKind::CrossEntropy, -1, "loss"}, losses, probs.v(), logits.c(), targets, cls);

  Tensor& dlogits = b.zeros(n(kN * kV));
  run.cross_entropy_backward_data({OpKind::CrossEntropy, -1, "dlogits"}, dlogits.v(), probs.c(), targets, 256.0, cls);
  Tensor& dx = b.zeros(n(kN * kC));
  run.matmul_backward_data({OpKind::Classifier, -1, "dx"}, dx.v(), dlogits.c(), wcls.c(), {kN, kC, kV});
  // The GEMMs' weight gradients at the bank's width too (a model's binary32 gradients).
  Tensor& dwcls = b.zeros(wc32.size());
  Tensor& dwq = b.zeros(wq32.size());
  run.matmul_backward_weight({OpKind::Classifier, -1, "wcls"}, dwcls.v(), dlogits.c(), x0.c(), {kN, kC, kV});
  Tensor& dn = b.zeros(n(kN * kC));
  run.rmsnorm_backward_data({OpKind::RmsNorm, 0, "dx"}, dn.v(), dx.c(), x0.c(), lnw.c(), rstd.c(), rows);
  Tensor& dlnw = b.zeros(n(kC));
  run.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "ln1w"}, dlnw.v(), dx.c(), x0.c(), rstd.c(), rows);
  run.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "ln1w"}, dlnw.v(), dn.c(), x0.c(), rstd.c(), rows);  // adds
  Tensor& dres_x = b.zeros(n(kN * kC));
  Tensor& dres_f = b.zeros(n(kN * kC));
  run.residual_backward_data({OpKind::ResidualAttn, 0, "dx"}, dres_x.v(), dres_f.v(), dx.c(), 1.0, rows);
  Tensor& datt = b.zeros(n(ash.att_size()));
  Tensor& dv = b.zeros(n(kN * kC));
  run.attn_values_backward_data({OpKind::AttnValues, 0, "datt"}, datt.v(), dv.v(), dx.c(), att.c(), h.c(), ash);
  Tensor& dpre = b.zeros(n(ash.att_size()));
  run.softmax_backward_data({OpKind::Softmax, 0, "dpreatt"}, dpre.v(), datt.c(), att.c(), ash);
  Tensor& dq = b.zeros(n(kN * kC));
  Tensor& dk = b.zeros(n(kN * kC));
  run.attn_scores_backward_data({OpKind::AttnScores, 0, "dqk"}, dq.v(), dk.v(), dpre.c(), qr.c(), q.c(), ash);
  Tensor& dqq = b.zeros(n(kN * kC));
  run.rope_backward_data({OpKind::RopeRotate, 0, "dq"}, dqq.v(), dq.c(), cos_t.c(), sin_t.c(), ash);
  Tensor& dz = b.make(randn(n(kN * kH), 0.5, 7));
  Tensor& dg = b.zeros(n(kN * kH));
  run.silu_backward_data({OpKind::Silu, 0, "dg"}, dg.v(), dz.c(), g.c(), hid);
  Tensor& da = b.zeros(n(kN * kH));
  Tensor& du = b.zeros(n(kN * kH));
  run.swiglu_backward_data({OpKind::SwiGlu, 0, "da"}, da.v(), du.v(), dz.c(), a.c(), u.c(), hid);
  Tensor& dge = b.zeros(n(kN * kH));
  run.gelu_backward_data({OpKind::Gelu, 0, "dg"}, dge.v(), dz.c(), g.c(), hid, GeluForm::Erf);
  Tensor& dwte = b.zeros(n(kV * kC));
  run.embedding_backward_weight({OpKind::Embedding, -1, "wte"}, dwte.v(), dx.c(), tokens, rows);
  run.matmul_backward_weight({OpKind::Matmul, 0, "wq"}, dwq.v(), dqq.c(), h.c(), {kN, kC, kC});
  Tensor& dh = b.zeros(n(kN * kC));
  run.matmul_backward_data({OpKind::Matmul, 0, "dh1", Observe::Off, "q"}, dh.v(), dqq.c(), wq.c(), {kN, kC, kC});
  run.matmul_backward_data({OpKind::Matmul, 0, "dh1", Observe::Outputs, "q"}, dh.v(), dq.c(), wq.c(), {kN, kC, kC});
  run.fp8_update();

  for (const auto& t : b.all()) r.tensors.push_back(t->widened());
  r.tensors.push_back(losses);
  r.tensors.push_back({loss});
  r.widths = run.width_counts();
  std::ostringstream csv;
  tape.write_csv(csv);
  r.tape = csv.str();
  return r;
}

const char* name_of(Width w) {
  switch (w) {
    case Width::Binary64: return "binary64";
    case Width::Binary32: return "binary32";
    case Width::Mixed: return "mixed";
  }
  return "";
}

class RunnerTyped : public ::testing::TestWithParam<const char*> {};

TEST_P(RunnerTyped, EveryWidthGivesTheSameBitsTapeAndObservations) {
  const std::string policy = GetParam();
  const Result ref = run_sequence(policy, Width::Binary64);
  ASSERT_FALSE(ref.tape.empty());
  ASSERT_GT(ref.seen.size(), 30u);
  using W = Runner::Width;
  const auto count = [](const Result& r, W w) { return r.widths[static_cast<std::size_t>(w)]; };
  EXPECT_EQ(count(ref, W::Binary32) + count(ref, W::Widened) + count(ref, W::Narrowed), 0);
  for (Width w : {Width::Binary32, Width::Mixed}) {
    const std::string what = policy + " " + name_of(w);
    const Result got = run_sequence(policy, w);
    if (w == Width::Binary32) {
      EXPECT_EQ(count(got, W::Binary64), 1) << what << ": rope_angles (no binary32 form) only";
      EXPECT_EQ(count(got, W::Widened) + count(got, W::Narrowed), 0) << what;
    } else {
      EXPECT_GT(count(got, W::Widened), 0) << what << ": the sequence must test both conversions";
      EXPECT_GT(count(got, W::Narrowed), 0) << what << ": the sequence must test both conversions";
    }
    ASSERT_EQ(got.tensors.size(), ref.tensors.size()) << what;
    for (std::size_t i = 0; i < ref.tensors.size(); ++i)
      test::expect_same(got.tensors[i], ref.tensors[i], what + " tensor " + std::to_string(i), true,
                        test::AllNan::Allowed);
    EXPECT_EQ(got.tape, ref.tape) << what;
    ASSERT_EQ(got.seen.size(), ref.seen.size()) << what;
    for (std::size_t i = 0; i < ref.seen.size(); ++i) {
      EXPECT_EQ(got.seen[i].where, ref.seen[i].where) << what << " observation " << i;
      test::expect_same(got.seen[i].data, ref.seen[i].data, what + " observation " + ref.seen[i].where, true,
                        test::AllNan::Allowed);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RunnerTyped,
                         ::testing::Values("fp32", "ane-fp16", "ane-guide-ftz", "pure-bf16", "nvfp4", "mxfp6",
                                           "te-fp8-delayed", "deepseek-fp8"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(RunnerTypedRefusal, ABinary32OutputUnderStorageBeyondBinary32IsRefusedBeforeTheCall) {
  Runner run(Policy::parse("fp64"));
  std::vector<float> x32 = randn(32, 1.0, 9), y32(32, 0.0f);
  std::vector<double> x64(x32.begin(), x32.end()), y64(32, 0.0), ymixed(32, 0.0);
  int observed = 0;
  run.set_observer([&](const Observation&) { ++observed; });
  try {
    run.silu_forward({OpKind::Silu, 3, "silu"}, y32, x32, {4, 8});
    FAIL() << "a binary32 output under fp64 storage ran";
  } catch (const std::logic_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("silu layer 3"), std::string::npos) << m;
    EXPECT_NE(m.find("fp64"), std::string::npos) << m;
    EXPECT_NE(m.find("binary32"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(observed, 0);
  for (float v : y32) EXPECT_EQ(v, 0.0f) << "nothing written";
  // Binary32 inputs to a binary64 output: widened, the same bits as binary64 inputs (a fresh Runner: the same
  // stream position).
  Runner a(Policy::parse("fp64")), b(Policy::parse("fp64"));
  a.silu_forward({OpKind::Silu, 3, "silu"}, y64, x64, {4, 8});
  b.silu_forward({OpKind::Silu, 3, "silu"}, ymixed, x32, {4, 8});
  test::expect_same(ymixed, y64, "fp64 silu, binary32 input", true);
}

TEST(RunnerTypedMixed, SmallBinary64TensorsAreNarrowedWhenExactElseTheCallRunsWidened) {
  using W = Runner::Width;
  const std::vector<float> x32 = randn(64, 1.0, 12), w32 = randn(16, 0.5, 13);
  const std::vector<double> x64(x32.begin(), x32.end()), w64(w32.begin(), w32.end());
  std::vector<double> w_inexact = w64;
  w_inexact[5] += std::ldexp(std::fabs(w_inexact[5]), -40);  // not a binary32 value
  const RowShape rows{4, 16};
  for (const char* policy : {"fp32", "ane-fp16"}) {
    // x binary32 (64 values), w binary64 (16): narrowed when w's values are binary32 values.
    for (const bool exact : {true, false}) {
      const std::vector<double>& w = exact ? w64 : w_inexact;
      Runner mixed(Policy::parse(policy), 3), plain(Policy::parse(policy), 3);
      std::vector<float> y32(64), r32(4);
      std::vector<double> y64(64), r64(4);
      mixed.rmsnorm_forward({OpKind::RmsNorm, 0, "ln1"}, y32, r32, x32, w, rows, 1e-5);
      plain.rmsnorm_forward({OpKind::RmsNorm, 0, "ln1"}, y64, r64, x64, w, rows, 1e-5);
      EXPECT_EQ(mixed.width_counts()[static_cast<std::size_t>(exact ? W::Narrowed : W::Widened)], 1) << policy;
      test::expect_same({y32.begin(), y32.end()}, y64, std::string(policy) + " y", true);
      test::expect_same({r32.begin(), r32.end()}, r64, std::string(policy) + " rstd", true);
      // The weight gradient: a binary64 add-into output (16 values) from binary32 dy, x (64 each).
      std::vector<double> dw_mixed(16, 0.25), dw_plain(16, 0.25);
      const std::vector<float> dy32 = randn(64, 1.0, 14);
      const std::vector<double> dy64(dy32.begin(), dy32.end());
      mixed.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "ln1w"}, dw_mixed, dy32, x32, r32, rows);
      plain.rmsnorm_backward_weight({OpKind::RmsNorm, 0, "ln1w"}, dw_plain, dy64, x64, r64, rows);
      EXPECT_EQ(mixed.width_counts()[static_cast<std::size_t>(W::Narrowed)], exact ? 2 : 1) << policy;
      test::expect_same(dw_mixed, dw_plain, std::string(policy) + " dw", true);
    }
  }
}

}  // namespace
}  // namespace roundoff::ops
