// AdamW on binary32 moments (Runner::adamw_update's std::span<float> overload, the trainer's storage when the
// policy's moments are binary32 values) gives the bits of the binary64-moment update: the master weights and the
// moments (widened) after several steps, on the binary32 fast path (fp32 roles, with and without ftz) and on the
// scalar path (fp16 / bf16 roles, stochastic rounding, fast paths off), on every element including the ragged tail
// of a block; and under the shadow, the w record equals the binary64 run's (the reference reads the moments before
// the update). Binary32 masters with binary32 moments (the overload without a working copy: the trainer's storage
// when the masters' format fits binary32 and the ops read binary32 weights) give the same bits and records, and so
// do binary32 gradients (the CValues overloads read them at their width: the trainer's binary32 gradient store).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/adamw.hpp"
#include "ops/probe.hpp"
#include "ops/runner.hpp"
#include "tests/support/exec_options.hpp"

namespace roundoff::ops {
namespace {

std::size_t mismatches(const std::vector<double>& a, const std::vector<double>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i]);
  return n;
}

struct Outcome {
  std::vector<double> w, m, v;
  std::vector<OpRecord> records;
};

/// How the state is stored: every tensor binary64, binary32 moments, binary32 masters and moments.
enum class Kind { Wide, Moments32, Masters32 };

/// Three AdamW steps of n parameters under `spec`, stored as `kind` says; g32: the gradients handed over as binary32
/// (every gradient here is a binary32 value), for the binary32-moment kinds.
Outcome steps(const std::string& spec, Kind kind, std::size_t n, bool shadow, bool fast = true, bool g32 = false) {
  const bool wide = kind == Kind::Wide;
  Runner run(Policy::parse(spec), 5, test::exec_for(fast));
  Tape tape;
  if (shadow) {
    Sampling s;
    s.units = 64;
    run.enable_shadow(&tape, s);
  }
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  Outcome r;
  r.w.resize(n);
  for (double& x : r.w) x = static_cast<float>(0.05 * normal(rng));
  std::vector<double> md(n, 0.0), vd(n, 0.0);
  std::vector<float> mf(n, 0.0f), vf(n, 0.0f), wf(r.w.begin(), r.w.end());
  AdamWConfig cfg;
  cfg.lr = 1e-3;
  for (std::int64_t t = 1; t <= 3; ++t) {
    std::vector<double> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(1e-3 * normal(rng));
    g[n / 2] = 0x1p-140;  // tiny gradients: subnormal squares, ftz's flushes
    g[n / 3] = 1e30f;     // a square that overflows binary32: the scalar path's element
    cfg.grad_scale = t == 2 ? 0.5 : 1.0;
    const std::vector<float> gf(g.begin(), g.end());  // exact
    const CValues gv = g32 ? CValues(std::span<const float>(gf)) : CValues(std::span<const double>(g));
    const Site site{OpKind::AdamW, -1, "w"};
    if (wide) run.adamw_update(site, r.w, md, vd, g, {}, cfg, t);
    else if (kind == Kind::Moments32)
      run.adamw_update(site, r.w, std::span<float>(mf), std::span<float>(vf), gv, {}, cfg, t);
    else run.adamw_update(site, std::span<float>(wf), std::span<float>(mf), std::span<float>(vf), gv, cfg, t);
  }
  if (kind == Kind::Masters32) r.w.assign(wf.begin(), wf.end());
  if (wide) {
    r.m = md;
    r.v = vd;
  } else {
    r.m.assign(mf.begin(), mf.end());
    r.v.assign(vf.begin(), vf.end());
  }
  r.records = tape.records();
  return r;
}

TEST(AdamWStorage, Binary32MomentsGiveTheBinary64Bits) {
  const std::size_t n = 2 * 2048 + 13;  // two blocks of the binary32 path and a ragged tail
  for (const std::string spec : {"fp32", "fp32,all.ftz=out", "fp32,all.ftz=all", "ane-fp16", "ane-guide",
                                 "pure-bf16", "pure-fp16", "amp-bf16", "ane-fp16,all.rounding=stochastic",
                                 "fp32,all.rounding=stochastic"}) {
    for (const bool fast : {true, false}) {
      const Outcome a = steps(spec, Kind::Wide, n, false, fast);
      for (const Kind k : {Kind::Moments32, Kind::Masters32})
        for (const bool g32 : {false, true}) {
          const Outcome b = steps(spec, k, n, false, fast, g32);
          const std::string what = spec + " fast " + std::to_string(fast) + " kind " +
                                   std::to_string(static_cast<int>(k)) + " g32 " + std::to_string(g32);
          EXPECT_EQ(mismatches(a.w, b.w), 0u) << what;
          EXPECT_EQ(mismatches(a.m, b.m), 0u) << what;
          EXPECT_EQ(mismatches(a.v, b.v), 0u) << what;
        }
      std::size_t moved = 0;
      for (std::size_t i = 0; i < n; ++i) moved += a.m[i] != 0.0;
      EXPECT_GT(moved, n / 2) << spec;
    }
  }
}

TEST(AdamWStorage, ShadowReadsTheMomentsBeforeTheUpdate) {
  const Outcome a = steps("ane-fp16", Kind::Wide, 300, true);
  for (const Kind kind : {Kind::Moments32, Kind::Masters32}) {
    const Outcome b = steps("ane-fp16", kind, 300, true, true, kind == Kind::Masters32);
    ASSERT_EQ(a.records.size(), 9u);  // w, m, v per step
    ASSERT_EQ(b.records.size(), 3u);  // w per step
    for (std::size_t k = 0; k < 3; ++k) {
      const OpRecord &ra = a.records[3 * k], &rb = b.records[k];
      EXPECT_EQ(ra.tensor, "w.w");  // one of three outputs
      EXPECT_EQ(rb.tensor, "w");    // the only output: named by its site
      EXPECT_GT(ra.error.count, 0);
      EXPECT_EQ(ra.error.count, rb.error.count) << k;
      EXPECT_EQ(ra.error.max_ulp, rb.error.max_ulp) << k;
      EXPECT_EQ(ra.error.norm_rel, rb.error.norm_rel) << k;
    }
    EXPECT_EQ(mismatches(a.w, b.w), 0u);
  }
}

}  // namespace
}  // namespace roundoff::ops
