// The span-level fast paths against the per-element definition (ExecOptions::fast_paths off: the oracle), bit for
// bit including NaN encodings: Ctx's store_array / store_to_array / result_array against the per-element
// store / store_to / to_compute calls, the span + − × (ops/span_arith.hpp) against Ctx's add/sub/mul, the
// matmul output conversion and AdamW's binary32 path (the elementwise ops' bodies against their scalar references:
// reference_test.cpp) — for every
// preset plus stochastic, directed, saturating and NaN→inf variants, ragged sizes (masked tails, partial
// blocks), and inputs in the normal, overflow, subnormal and special-value regimes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/gemm_kernels.hpp"
#include "ops/adamw.hpp"
#include "ops/gqa.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/span_arith.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

using test::both;
using test::on;
using test::expect_same;
using test::inputs;
using test::kRegimes;
using test::Regime;


std::vector<std::string> policies() { return test::span_policies(); }

TEST(SpanOps, ArrayFormsEqualThePerElementCalls) {
  for (const std::string& spec : policies()) {
    const Policy pol = load_policy(spec);
    for (OpKind op : {OpKind::Matmul, OpKind::Classifier, OpKind::AdamW})
      for (Regime regime : kRegimes) {
        const Ctx<Emulated> c(pol.at(op, Pass::Forward), {3, 9});
        // values beyond every format: fp64-rounded samples of the regime of the widest format here
        const std::vector<double> x = inputs(1037, regime, numerics::formats::fp64, 17 + static_cast<int>(regime));
        const numerics::RoundingPlan other(numerics::formats::bf16);
        const auto ka = [](std::size_t i) { return key(Tensor::Y, i, 3); };
        const auto kb = [](std::size_t i) { return key(Tensor::Y, i, 5); };
        std::vector<double> st(x.size()), to(x.size()), res = x;
        c.store_array(x, st, ka);
        c.store_to_array(other, x, to, kb);
        c.result_array(res, ka, kb);
        std::vector<double> st1(x.size()), to1(x.size()), res1(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          st1[i] = c.store(x[i], ka(i));
          to1[i] = c.store_to(other, x[i], kb(i));
          res1[i] = c.store(c.to_compute(x[i], ka(i)), kb(i));
        }
        const std::string what = spec + " " + std::string(name_of(op)) + " regime " +
                                 std::to_string(static_cast<int>(regime));
        expect_same(st, st1, "store_array " + what, true);
        expect_same(to, to1, "store_to_array " + what, true);
        expect_same(res, res1, "result_array " + what, true);
      }
  }
}

/// result_array on binary32 values (a binary32 accumulator's results): chunks of 512 values that are all binary32
/// values are left as they are when compute and storage hold every binary32 value with no flush or saturation
/// (Ctx::round_results); the results must equal the per-element store(to_compute(x)) in every policy of the list
/// plus fp64 (compute and storage binary64), on every ISA tier of the test, with chunks that are all binary32
/// (normals, subnormals, ±0, ±inf, values beyond fp16's range) and chunks where one value is a NaN with a payload,
/// a value off the binary32 grid or a binary64 subnormal, and a ragged last chunk.
TEST(SpanOps, ResultArrayOfBinary32ValuesEqualsThePerElementCalls) {
  std::vector<std::string> specs = policies();
  specs.push_back("fp64");
  std::mt19937_64 rng(19);
  std::uniform_int_distribution<int> e(-149, 127);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x(4 * 512 + 77);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<double>(static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng) / (i % 3 == 0 ? 8 : 1))));
  for (const std::size_t c : {std::size_t{0}, std::size_t{512}, std::size_t{1024}, std::size_t{1536}, std::size_t{2048}}) {
    x[c + 1] = 0x1p-149;
    x[c + 2] = -0.0;
    x[c + 3] = inf;
    x[c + 4] = 0x1.fffffep127;
    x[c + 5] = 70000.0;     // beyond fp16's largest finite value
    x[c + 6] = 0x1p-130;    // a binary32 subnormal
  }
  x[512 + 300] = std::bit_cast<double>(std::uint64_t{0x7ff8000000012345});  // a NaN with a payload
  x[1024 + 17] = 0x1.0000000000001p0;                                         // off the binary32 grid
  x[2048 + 70] = std::numeric_limits<double>::denorm_min();                   // a binary64 subnormal
  namespace k = numerics::kernels;
  for (const k::Isa isa : ::roundoff::test::isa_tiers(true))
    for (const std::string& spec : specs) {
      const Policy pol = load_policy(spec);
      for (OpKind op : {OpKind::Matmul, OpKind::Classifier}) {
        const Ctx<Emulated> c(pol.at(op, Pass::Forward), {3, 9}, ::roundoff::test::exec_for(true, ::roundoff::test::kernels_at(isa)));
        const auto ka = [](std::size_t i) { return key(Tensor::Y, i, 3); };
        const auto kb = [](std::size_t i) { return key(Tensor::Y, i, 5); };
        std::vector<double> res = x, res1(x.size());
        c.result_array(res, ka, kb);
        for (std::size_t i = 0; i < x.size(); ++i) res1[i] = c.store(c.to_compute(x[i], ka(i)), kb(i));
        expect_same(res, res1, "result_array " + spec + " " + std::string(name_of(op)) + " isa " +
                                   std::to_string(static_cast<int>(isa)), true);
      }
    }
}

/// ex on the definition's path when its fast paths are off (both()'s oracle arm): the GEMM kernels switched off
/// too, so every output is numerics::gemm's generic per-element dot of the materialised casts.
ExecOptions on_definition_when_oracle(ExecOptions ex) {
  ex.kernels.fast_paths = ex.fast_paths;
  return ex;
}

/// The kernel tiers this CPU has (each forced through KernelOptions::isa_limit), and None (no kernel: the
/// materialised casts).
std::vector<numerics::kernels::Isa> isa_tiers() { return ::roundoff::test::isa_tiers(true); }

/// Inputs of format f with every third value moved off f's grid (x + x·2^-30, exact in binary64), so that the entry
/// casts round.
std::vector<double> cast_inputs(std::size_t n, Regime regime, const numerics::Format& f, std::uint64_t seed,
                                std::size_t cols) {
  std::vector<double> v = inputs(n, regime, f, seed, cols);
  for (std::size_t i = 0; i < n; i += 3)
    if (std::isfinite(v[i])) v[i] += std::ldexp(v[i], -30);
  return v;
}

TEST(SpanOps, MatmulOutputsEqualTheOracle) {
  // The fast arm casts the inputs (a third of them off the storage grid) while the kernels pack them
  // (Ctx::gemm_in) on every ISA tier; the oracle casts them into arrays and takes the generic GEMM. {9, 5, 130}:
  // several 64-row runs of a transposed dy (bwd-weight) and panels of W (fwd) with ragged ends.
  namespace k = numerics::kernels;
  const MatmulShape shapes[] = {{5, 13, 7}, {17, 9, 33}, {9, 5, 130}};
  for (const k::Isa isa : isa_tiers()) {
    const numerics::KernelOptions kernels = ::roundoff::test::kernels_at(isa);
    for (const std::string& spec : policies()) {
      const Policy pol = load_policy(spec);
      for (OpKind op : {OpKind::Matmul, OpKind::Classifier})
        for (const MatmulShape& s : shapes)
          for (Regime regime : kRegimes) {
            const std::string what = spec + " " + std::string(name_of(op)) + " n=" + std::to_string(s.n) +
                                     " regime " + std::to_string(static_cast<int>(regime)) + " isa " +
                                     k::name_of(isa);
            const auto seed = static_cast<std::uint64_t>(s.n * 31 + s.in) + static_cast<std::uint64_t>(regime);
            const auto nx = static_cast<std::size_t>(s.n * s.in), ny = static_cast<std::size_t>(s.n * s.out),
                       nw = static_cast<std::size_t>(s.out * s.in);
            // One pass: operands a, b from cast_inputs (seeds s0, s0 + 1), the output starting at 7 (forward) or at
            // random storage values (the backward passes add into it), under the pass's policy entry.
            // a and b are row-major with rows of ca and cb values (their specials in a block: test::inputs).
            const auto check = [&](Pass pass, std::uint64_t stream, std::size_t na, std::size_t ca, std::size_t nb,
                                   std::size_t cb, std::size_t nout, std::uint64_t s0, const auto& call,
                                   const std::string& label) {
              const Ctx<Emulated> c(pol.at(op, pass), {5, stream});
              const auto& f = c.precision().storage;
              const auto a = cast_inputs(na, regime, f, s0, ca), b = cast_inputs(nb, regime, f, s0 + 1, cb);
              const auto out0 = pass == Pass::Forward ? std::vector<double>(nout, 7.0)
                                                      : inputs(nout, Regime::Normal, f, s0 + 2);
              const auto [fast, oracle] = both([&](const ExecOptions& ex) {
                std::vector<double> out = out0;
                call(out, a, b, test::on(c, on_definition_when_oracle(ex)));
                return std::vector<std::vector<double>>{out};
              }, kernels);
              expect_same(fast[0], oracle[0], label + " " + what, true);
            };
            using Vec = std::vector<double>;
            const auto n_in = static_cast<std::size_t>(s.in), n_out = static_cast<std::size_t>(s.out);
            check(Pass::Forward, 1, nx, n_in, nw, n_in, ny, seed, [&](Vec& y, const Vec& x, const Vec& w, const Ctx<Emulated>& c) {
              matmul_forward<Emulated>(y, x, w, s, c);
            }, "fwd");
            check(Pass::BackwardData, 2, ny, n_out, nw, n_in, nx, seed + 2,
                  [&](Vec& dx, const Vec& dy, const Vec& w, const Ctx<Emulated>& c) {
                    matmul_backward_data<Emulated>(dx, dy, w, s, c);
                  }, "bwd-data");
            check(Pass::BackwardWeight, 3, ny, n_out, nx, n_in, nw, seed + 5,
                  [&](Vec& dw, const Vec& dy, const Vec& x, const Ctx<Emulated>& c) {
                    matmul_backward_weight<Emulated>(dw, dy, x, s, c);
                  }, "bwd-weight");
          }
    }
  }
}

TEST(SpanOps, AdamWEqualsTheOracle) {
  // n spans two full blocks and a ragged one; the roles in fp32 (the binary32 path) and narrower (scalar path).
  const std::size_t n = 2 * detail::kAdamWBlock + 13;
  std::vector<std::string> specs = policies();
  specs.push_back("fp32,weights=fp16");
  specs.push_back("fp32,adam-v=bf16");
  int binary32_cases = 0, ftz_binary32_cases = 0;
  for (const std::string& spec : specs) {
    const Policy pol = load_policy(spec);
    const AdamWFormats f(pol);
    const Ctx<Emulated> c(pol.at(OpKind::AdamW, Pass::Forward), {7, 4});
    const bool binary32 = c.binary32_compute() && f.master.format == numerics::formats::fp32 &&
                          f.m.format == numerics::formats::fp32 && f.v.format == numerics::formats::fp32 &&
                          detail::adamw_binary32_supported(c.exec().kernels);
    binary32_cases += binary32;
    ftz_binary32_cases += binary32 && c.precision().ftz != Ftz::Off;
    for (Regime regime : kRegimes)
      for (double grad_scale : {1.0, 1.0 / 256}) {
        const auto seed = 100 + static_cast<std::uint64_t>(regime);
        const numerics::Format& fp32 = numerics::formats::fp32;
        std::vector<double> w0 = inputs(n, Regime::Normal, fp32, seed), g = inputs(n, regime, fp32, seed + 1);
        std::vector<double> m0 = inputs(n, Regime::Normal, fp32, seed + 2), v0 = inputs(n, Regime::Normal, fp32, seed + 3);
        for (double& x : v0) x = std::fabs(x);
        w0[5] = 1.0 + 0x1p-40;                                    // not a binary32 value: the scalar path
        g[9] = std::numeric_limits<double>::quiet_NaN();          // non-finite intermediates: the scalar path
        v0[11] = 0x1p127;                                          // v·β2 + ... stays finite, v̂ may overflow
        m0[12] = -0x1p-149;                                        // subnormal
        for (std::size_t i = 20; i < 60; ++i) {  // m = β1·m0 subnormal in fp32: flushed under ftz out/all
          m0[i] = std::ldexp(static_cast<double>(i) * (i % 2 == 0 ? 1.0 : -1.0), -146);
          g[i] = 0;
        }
        AdamWConfig cfg;
        cfg.grad_scale = grad_scale;
        for (std::int64_t t : {std::int64_t{3}}) {
          const auto [fast, oracle] = both([&](const ExecOptions& ex) {
            std::vector<double> w = w0, m = m0, v = v0, weights(n, 5.0);
            adamw_update<Emulated>(w, m, v, g, weights, cfg, t, f, on(c, ex));
            return std::vector<std::vector<double>>{w, m, v, weights};
          });
          const std::string what = spec + " regime " + std::to_string(static_cast<int>(regime)) + " t " +
                                   std::to_string(t) + " gs " + std::to_string(grad_scale);
          for (std::size_t i = 0; i < 4; ++i) expect_same(fast[i], oracle[i], what + " out " + std::to_string(i), true);
          const bool ftz = c.precision().ftz != Ftz::Off;
          if (f.m.format == numerics::formats::fp32) {
            for (std::size_t i = 20; i < 60; ++i) {
              EXPECT_EQ(fast[1][i] == 0, ftz) << what << ": m[" << i << "] = " << fast[1][i];
            }
          }
        }
      }
  }
  // The binary32 path was exercised (fp32 AdamW in most presets), wherever the CPU has AVX2.
  namespace k = numerics::kernels;
  if (k::detected_isa() >= k::Isa::Avx2) {
    EXPECT_GT(binary32_cases, 0);
    EXPECT_GT(ftz_binary32_cases, 0);  // the kernel's flushes (fp32,all.ftz=out, ...)
  }
}

TEST(SpanOps, AdamWOnBinary32MastersEqualsBinary64Masters) {
  // Binary32 masters and moments (the trainer's storage when the MasterWeight, AdamM and AdamV roles hold only
  // binary32 values) give the bits of binary64 masters with binary32 moments, on the binary32 path and the scalar
  // one (fast paths on and off), under every policy whose master format fits binary32.
  const std::size_t n = 2 * detail::kAdamWBlock + 13;
  int cases = 0;
  for (const std::string& spec : policies()) {
    const Policy pol = load_policy(spec);
    const AdamWFormats f(pol);
    if (!numerics::fits_binary32(f.master.format) || !numerics::fits_binary32(f.m.format) ||
        !numerics::fits_binary32(f.v.format))
      continue;
    ++cases;
    const Ctx<Emulated> c(pol.at(OpKind::AdamW, Pass::Forward), {7, 4});
    for (Regime regime : kRegimes) {
      const auto seed = 200 + static_cast<std::uint64_t>(regime);
      const auto as_format = [&](std::vector<double> x, const numerics::RoundingPlan& r) {
        for (double& e : x) e = numerics::round_to(r, numerics::Rounding::NearestEven, e);
        return x;
      };
      const numerics::Format& fp32 = numerics::formats::fp32;
      const std::vector<double> w0 = as_format(inputs(n, Regime::Normal, fp32, seed), f.master),
                                g = inputs(n, regime, fp32, seed + 1),
                                m0 = as_format(inputs(n, Regime::Normal, fp32, seed + 2), f.m);
      std::vector<double> v0 = as_format(inputs(n, Regime::Normal, fp32, seed + 3), f.v);
      for (double& x : v0) x = std::fabs(x);
      AdamWConfig cfg;
      cfg.grad_scale = 1.0 / 256;
      const auto narrow = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
      const auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
      for (const bool fast : {true, false}) {
        const ExecOptions ex = ::roundoff::test::exec_for(fast);
        std::vector<double> w64 = w0;
        std::vector<float> m64 = narrow(m0), v64 = narrow(v0);
        adamw_update(std::span<double>(w64), std::span<float>(m64), std::span<float>(v64), g, {}, cfg, 3, f,
                     on(c, ex));
        std::vector<float> w32 = narrow(w0), m32 = narrow(m0), v32 = narrow(v0);
        adamw_update(std::span<float>(w32), std::span<float>(m32), std::span<float>(v32), g, cfg, 3, f, on(c, ex));
        const std::string what = spec + " regime " + std::to_string(static_cast<int>(regime)) + (fast ? " fast" : "");
        expect_same(wide(w32), w64, what + " w", true);
        expect_same(wide(m32), wide(m64), what + " m", true);
        expect_same(wide(v32), wide(v64), what + " v", true);
      }
    }
  }
  EXPECT_GT(cases, 3);
}

TEST(SpanOps, GqaKvReduceEqualsTheOracle) {
  // 6 query heads on 2 KV heads: the block map (groups 0-2, 3-5), the cyclic map (0,2,4 and 1,3,5), and a map
  // that is no progression (the per-element path either way); 7 rows, hs 5; dkv starts non-zero.
  const std::vector<std::vector<int>> maps = {{0, 0, 0, 1, 1, 1}, {0, 1, 0, 1, 0, 1}, {0, 1, 1, 0, 1, 0}};
  const std::int64_t NH = 6, NKV = 2, hs = 5, rows = 7;
  for (const std::string& spec : policies()) {
    const Policy pol = load_policy(spec);
    const Ctx<Emulated> c(pol.at(OpKind::ResidualAttn, Pass::BackwardData), {5, 2});
    for (Regime regime : kRegimes)
      for (const std::vector<int>& map : maps) {
        const auto seed = 60 + static_cast<int>(regime);
        const std::vector<double> dfull = inputs(static_cast<std::size_t>(rows * NH * hs), regime,
                                                 numerics::formats::fp32, seed);
        const std::vector<double> dkv0 = inputs(static_cast<std::size_t>(rows * NKV * hs), regime,
                                                numerics::formats::fp32, seed + 1);
        const auto [fast, oracle] = both([&](const ExecOptions& ex) {
          std::vector<double> dkv = dkv0;
          kv_reduce_backward<Emulated>(dkv, test::cs(dfull), map, NKV, hs, on(c, ex));
          return std::vector<std::vector<double>>{dkv};
        });
        expect_same(fast[0], oracle[0], spec + " regime " + std::to_string(static_cast<int>(regime)) + " map " +
                                            std::to_string(map[1]) + std::to_string(map[2]), true);
      }
  }
  EXPECT_TRUE(head_groups(std::vector<int>{0, 0, 1, 1}, 2).has_value());
  EXPECT_FALSE(head_groups(std::vector<int>{0, 1, 1, 0, 1, 0}, 2).has_value());
  EXPECT_FALSE(head_groups(std::vector<int>{0, 0, 0, 1}, 2).has_value());  // unequal groups
}

TEST(SpanOps, ArithArrayEqualsThePerElementCalls) {
  // Every ISA tier: the fused AVX-512 and AVX2 passes (numerics::op_round_avx512, op_round_avx2) and the
  // pass-by-pass fallback.
  namespace k = numerics::kernels;
  const ArithOp ops[] = {ArithOp::Add, ArithOp::Sub, ArithOp::Mul, ArithOp::Div};
  int fast_cases = 0;
  for (const k::Isa isa : {k::Isa::Avx512Fp16, k::Isa::Avx2, k::Isa::None}) {
    const ExecOptions exec = ::roundoff::test::exec_for(true, ::roundoff::test::kernels_at(isa));
    for (const std::string& spec : policies()) {
      const Policy pol = load_policy(spec);
      for (OpKind op : {OpKind::SwiGlu, OpKind::ResidualFfn, OpKind::ResidualAttn})
        for (Regime regime : kRegimes) {
          const Ctx<Emulated> c(pol.at(op, Pass::Forward), {3, 9}, exec);
          const numerics::Format& f = c.precision().compute;
          const numerics::RoundingPlan fplan(f);
          // operands mostly in compute, some in binary64 only (not values of compute: the per-element path)
          std::vector<double> a = inputs(517, regime, f, 40 + static_cast<int>(regime));
          std::vector<double> b = inputs(517, regime, f, 41 + static_cast<int>(regime));
          a[3] = 1.0 + 0x1p-40;
          b[4] = -0x1p-1070;
          // a midpoint of compute plus a tiny term: exact sum 1 + 2^-p + 2^-70 is not a binary64, which rounds it
          // to the midpoint, which nearest-even then rounds down (the correct result rounds up)
          a[5] = 1.0 + std::ldexp(1.0, -f.precision);
          b[5] = 0x1p-70;
          a[6] = 1.0 + std::ldexp(1.0, -f.precision);
          b[6] = -0x1p-70;
          // a value of compute plus one that is not, whose binary64 sum is a midpoint of compute: the exact sum
          // 1 + 2^-p + 2^-(p+52) rounds up, the binary64 sum 1 + 2^-p then rounds down
          a[7] = 1.0;
          b[7] = std::ldexp(1.0, -f.precision) + std::ldexp(1.0, -f.precision - 52);
          // sums past the largest finite value (overflow) and an inf - inf (NaN)
          a[8] = b[8] = fplan.max_finite;
          a[9] = b[9] = -fplan.max_finite;
          a[10] = std::numeric_limits<double>::infinity();
          b[10] = -a[10];
          std::vector<double> out(a.size());
          std::vector<std::size_t> slow;
          const std::string where = spec + " isa " + k::name_of(isa) + " regime " + std::to_string(static_cast<int>(regime));
          if (arith_span(c, ArithOp::Add, a, b, out, slow)) {
            // the core's own contract: every element outside `slow` is the correctly rounded sum and finite
            ++fast_cases;
            std::vector<bool> listed(a.size());
            for (const std::size_t i : slow) listed[i] = true;
            for (std::size_t i = 0; i < a.size(); ++i) {
              const double want = c.add(a[i], b[i], key(Tensor::Y, i, 7));
              if (!std::isfinite(want)) {
                EXPECT_TRUE(listed[i]) << where << ": non-finite sum at " << i << " not listed";
              }
              if (!listed[i]) {
                EXPECT_EQ(std::bit_cast<std::uint64_t>(out[i]), std::bit_cast<std::uint64_t>(want))
                    << where << " at " << i << ": " << out[i] << " vs " << want;
              }
            }
          }
          for (ArithOp o : ops) {
            const auto want_of = [&](double x, double y, Key kk) {
              switch (o) {
                case ArithOp::Add: return c.add(x, y, kk);
                case ArithOp::Sub: return c.sub(x, y, kk);
                case ArithOp::Mul: return c.mul(x, y, kk);
                case ArithOp::Div: return c.div(x, y, kk);
              }
              return 0.0;
            };
            arith_array(c, o, test::cs(a), test::cs(b), std::span<double>(out),
                        [](std::size_t i) { return key(Tensor::Y, i, 7); });
            std::vector<double> want(a.size());
            for (std::size_t i = 0; i < a.size(); ++i) want[i] = want_of(a[i], b[i], key(Tensor::Y, i, 7));
            expect_same(out, want, where + " op " + std::to_string(static_cast<int>(o)), true);
            // a constant right operand: a value of compute, two that are not (the second with a[7] = 1 has a
            // binary64 sum on a midpoint of compute), a zero, a NaN
            for (const double y : {numerics::round_to(fplan, numerics::Rounding::NearestEven, 0.7), 1.0 + 0x1p-40,
                                   b[7], -0.0, std::numeric_limits<double>::quiet_NaN()}) {
              arith_const(c, o, test::cs(a), y, std::span<double>(out), [](std::size_t i) { return key(Tensor::Y, i, 3); });
              for (std::size_t i = 0; i < a.size(); ++i) want[i] = want_of(a[i], y, key(Tensor::Y, i, 3));
              // y = NaN makes every output NaN: the comparison is of the NaN encodings (nan_bits).
              expect_same(out, want, where + " const op " + std::to_string(static_cast<int>(o)) + " y " + std::to_string(y),
                          true, std::isnan(y) ? test::AllNan::Allowed : test::AllNan::Fails);
            }
          }
        }
    }
  }
  EXPECT_GT(fast_cases, 0);  // the binary64-then-round path was exercised
}

/// The next value of the format above x >= 0 (inf above the largest).
double next_up(const numerics::RoundingPlan& plan, double x) {
  return numerics::round_to(plan, numerics::Rounding::Up, std::nextafter(x, INFINITY));
}
bool same_bits(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

/// Values of f drawn uniformly over its finite encodings (every binade, subnormals, both signs, ±0).
std::vector<double> encodings(std::mt19937_64& rng, const numerics::Format& f, std::size_t n) {
  const numerics::RoundingPlan plan(f);
  std::vector<double> v(n);
  std::uniform_int_distribution<int> e(f.emin - f.precision + 1, f.emax);
  for (double& x : v) {
    const double m = std::ldexp(static_cast<double>(rng() >> 11), -53);  // [0, 1)
    x = numerics::round_to(plan, numerics::Rounding::TowardZero, std::ldexp(1.0 + m, e(rng)));
    if (rng() & 1) x = -x;
    if (rng() % 97 == 0) x = (rng() & 1) ? 0.0 : -0.0;
  }
  return v;
}

/// The span division (one binary64 division, one rounding) against numerics::div (checked against MPFR in
/// tests/numerics) under nearest-even in fp16, bf16, binary32 and a p = 25 format (the largest the path takes):
/// operands uniform over the encodings (quotients across the whole range, subnormal and overflowing ones
/// included, division by ±0) and quotients placed within a few binary64 ulps of midpoints of the format — the
/// inputs where rounding to binary64 first could land on the midpoint — m·b rounded to the format and divided
/// by b, for m a midpoint.
TEST(SpanOps, DivisionEqualsNumericsDivOnStratifiedPairs) {
  numerics::Format p25 = numerics::formats::fp32;
  p25.precision = 25;
  p25.emax = 126;
  std::int64_t compared = 0, subnormal = 0, near_midpoint = 0;
  for (const numerics::Format& f : {numerics::formats::fp16, numerics::formats::bf16, numerics::formats::fp32, p25}) {
    const numerics::RoundingPlan plan(f);
    const OpPrecision prec{f, f, numerics::Rounding::NearestEven, numerics::parse_accumulation("fp32-seq")};
    const Ctx<Emulated> c(prec, {5, 2});
    std::mt19937_64 rng(0xd1f + static_cast<std::uint64_t>(f.precision));
    constexpr std::size_t n = 400000;
    std::vector<double> a = encodings(rng, f, n), b = encodings(rng, f, n);
    for (std::size_t i = 0; i < n / 2; ++i) {  // a = round(m·b) for a midpoint m between neighbours of f
      const double lo = std::fabs(a[i]);
      if (!(lo > 0) || !std::isfinite(b[i]) || b[i] == 0) continue;
      const double hi = next_up(plan, lo);
      if (!std::isfinite(hi)) continue;
      const double m = 0.5 * (lo + hi);
      a[i] = numerics::round_to(plan, numerics::Rounding::NearestEven, m * b[i]);
    }
    std::vector<double> out(n);
    arith_array(c, ArithOp::Div, test::cs(a), test::cs(b), std::span<double>(out),
                [](std::size_t i) { return key(Tensor::Y, i, 2); });
    for (std::size_t i = 0; i < n; ++i) {
      const double want = numerics::div(plan, numerics::Rounding::NearestEven, a[i], b[i]);
      ASSERT_TRUE(same_bits(out[i], want))
          << numerics::name_of(f) << std::hexfloat << ' ' << a[i] << " / " << b[i] << " = " << out[i]
          << ", numerics::div " << want;
      ++compared;
      subnormal += want != 0 && std::fabs(want) < plan.min_normal;
      if (i < n / 2 && std::isfinite(want) && want != 0) {
        const double q = a[i] / b[i], r = numerics::round_to(plan, numerics::Rounding::TowardZero, q);
        const double mid = 0.5 * (r + next_up(plan, std::fabs(r)) * (r < 0 ? -1 : 1));
        near_midpoint += std::fabs(q - mid) <= 0x1p-40 * std::fabs(q);
      }
    }
  }
  EXPECT_EQ(compared, 1600000);
  EXPECT_GT(subnormal, 1000);
  EXPECT_GT(near_midpoint, 1000);
}

TEST(SpanOps, ElementaryArraysEqualThePerElementCalls) {
  // Ctx::exp_array / sigmoid_array (numerics::elementary_span, or the ANE tables) against Ctx::exp / sigmoid.
  auto specs = policies();
  specs.push_back("ane-guide,silu.approx=ane-lut,softmax.approx=ane-lut");
  specs.push_back("ane-guide,silu.approx=ane-lut,softmax.approx=ane-lut,all.rounding=stochastic");
  for (const std::string& spec : specs) {
    const Policy pol = load_policy(spec);
    for (OpKind op : {OpKind::Silu, OpKind::Softmax})
      for (Regime regime : kRegimes) {
        const Ctx<Emulated> c(pol.at(op, Pass::Forward), {3, 11});
        std::vector<double> x = inputs(1037, regime, c.precision().compute, 60 + static_cast<int>(regime));
        const auto kf = [](std::size_t i) { return key(Tensor::Y, i, 4); };
        std::vector<double> e(x.size()), sg(x.size()), e1(x.size()), sg1(x.size());
        c.exp_array(x, e, kf);
        c.sigmoid_array(x, sg, kf);
        for (std::size_t i = 0; i < x.size(); ++i) {
          e1[i] = c.exp(x[i], kf(i));
          sg1[i] = c.sigmoid(x[i], kf(i));
        }
        const std::string what = spec + " " + std::string(name_of(op)) + " regime " +
                                 std::to_string(static_cast<int>(regime));
        expect_same(e, e1, "exp_array " + what, true);
        expect_same(sg, sg1, "sigmoid_array " + what, true);
        c.sigmoid_array(x, x, kf);  // in place
        expect_same(x, sg1, "sigmoid_array in place " + what, true);
      }
  }
}

// SiLU, SwiGLU and the residual adds: their span bodies against their scalar references (fast paths on and off,
// the same policies and regimes, and the ANE-table variants) in tests/ops/reference_test.cpp.

}  // namespace
}  // namespace roundoff::ops
