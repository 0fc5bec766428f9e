// Flush to zero (OpPrecision::ftz) and denormals-are-zero (OpPrecision::daz), docs/policy.md:
//   - the policy fields: parse, canonical text, round trip, PREC items leaving them alone, bad values;
//   - the element semantics of Ctx<Emulated>'s in / store / to_compute / add against an MPFR oracle
//     (tests/support/mpfr_oracle.hpp) followed by a flush decided by an exponent check (std::ilogb, not the code
//     under test), for every encoding of fp16 and bf16 (65536, in the exhaustive suite; every 97th in the
//     default one) and of e4m3 and e5m2 (256), in every rounding mode;
//   - ops with subnormal-rich inputs: the flush fires (outputs zero that are subnormal without it), the span,
//     GEMM and lane fast paths equal the per-element definition, and the Reference backend ignores both fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/format.hpp"
#include "ops/activation.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/residual.hpp"
#include "ops/rmsnorm.hpp"
#include "ops/span_arith.hpp"
#include "tests/ops/ops_test_util.hpp"
#include "tests/support/mpfr_oracle.hpp"

namespace roundoff::ops {
namespace {

namespace fmts = numerics::formats;
using numerics::Format;
using numerics::Rounding;
using test::cs;
namespace rt = ::roundoff::test;

// ---- policy fields ---------------------------------------------------------------------------------------

TEST(FtzDazPolicy, ParsesPrintsAndRoundTrips) {
  const Policy p = Policy::parse("ane-guide,all.ftz=out,all.daz=on");
  for (OpKind k : kAllOps)
    for (Pass ps : kAllPasses) {
      EXPECT_EQ(p.at(k, ps).ftz, Ftz::Out);
      EXPECT_EQ(p.at(k, ps).daz, Daz::On);
    }
  EXPECT_EQ(Policy::parse(p.canonical()), p);
  EXPECT_EQ(p.canonical(), "ane-guide,all.ftz=out,all.daz=on");
  EXPECT_EQ(extras_text(p.at(OpKind::Matmul, Pass::Forward)), "saturate=32768 nan=ane-inf ftz=out daz=on");
  // Defaults are never printed.
  EXPECT_EQ(Policy::parse("fp32,all.ftz=off,all.daz=off").canonical(), "fp32");
  EXPECT_EQ(extras_text(uniform(fmts::fp16)), "");
  // PREC items do not change them; per-pass selectors set one pass.
  const Policy q = Policy::parse("fp32,all.ftz=all,matmul=fp16,softmax.bwd.daz=on,rmsnorm.fwd.ftz=off");
  EXPECT_EQ(q.at(OpKind::Matmul, Pass::Forward).ftz, Ftz::All);
  EXPECT_EQ(q.at(OpKind::Softmax, Pass::Forward).daz, Daz::Off);
  EXPECT_EQ(q.at(OpKind::Softmax, Pass::BackwardData).daz, Daz::On);
  EXPECT_EQ(q.at(OpKind::RmsNorm, Pass::Forward).ftz, Ftz::Off);
  EXPECT_EQ(q.at(OpKind::RmsNorm, Pass::BackwardData).ftz, Ftz::All);
  EXPECT_EQ(Policy::parse(q.canonical()), q) << q.canonical();
  EXPECT_NE(q.canonical().find("softmax.bwd-data.daz=on"), std::string::npos) << q.canonical();
  // Not every entry has ftz=all (rmsnorm fwd is off): per op and per pass.
  EXPECT_NE(q.canonical().find("rmsnorm.bwd-data.ftz=all"), std::string::npos) << q.canonical();
  EXPECT_EQ(q.canonical().find("all."), std::string::npos) << q.canonical();
  // Per op and per pass when the entries differ.
  const Policy r = Policy::parse("ane-guide,matmul.ftz=out,matmul.fwd.daz=on");
  EXPECT_NE(r.canonical().find("matmul.fwd.ftz=out"), std::string::npos) << r.canonical();
  EXPECT_NE(r.canonical().find("matmul.fwd.daz=on"), std::string::npos) << r.canonical();
  EXPECT_EQ(r.canonical().find("all."), std::string::npos) << r.canonical();
  EXPECT_EQ(Policy::parse(r.canonical()), r) << r.canonical();
  for (const char* spec : {"pure-fp16,all.ftz=all", "pure-bf16,all.rounding=stochastic,matmul.daz=on",
                           "amp-fp16,cross-entropy.bwd-data.ftz=out,attention=online"}) {
    const Policy rt = Policy::parse(spec);
    EXPECT_EQ(Policy::parse(rt.canonical()), rt) << spec << " -> " << rt.canonical();
  }
}

void expect_error(const std::string& spec, const std::string& token, const std::string& valid) {
  try {
    (void)Policy::parse(spec);
    ADD_FAILURE() << spec << " parsed";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'" + token + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(valid), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(FtzDazPolicy, BadValuesNameTheTokenAndTheValidValues) {
  expect_error("fp32,all.ftz=yes", "all.ftz=yes", "valid: off, out, all");
  expect_error("fp32,matmul.daz=all", "matmul.daz=all", "valid: off, on");
  expect_error("fp32,matmul.fwd.ftz=ON", "matmul.fwd.ftz=ON", "valid: off, out, all");
  expect_error("fp32,matmul.ftzz=out", "matmul.ftzz=out", "ftz, daz");
}

// ---- element semantics against MPFR ---------------------------------------------------------------------

/// v flushed in f by an exponent check: nonzero finite v with exponent below emin becomes ±0.
double oracle_flush(double v, const Format& f) {
  if (v == 0 || !std::isfinite(v) || std::ilogb(v) >= f.emin) return v;
  return std::copysign(0.0, v);
}

struct ElementCounts {
  std::int64_t checked = 0, flushed = 0;
};

/// For every `stride`-th encoding v of f: x = v + j·ulp/4 (j = 0..3: exact, quarter, midpoint, three quarters)
/// through in / store / to_compute, and v + w (w another encoding) through add, under three settings — nothing,
/// ftz out, ftz all with daz on — in every rounding mode; each against the oracle's rounding followed by
/// oracle_flush where the setting flushes.
void check_elements(const Format& f, std::uint64_t stride, ElementCounts& counts) {
  const auto enc = numerics::encoding_of(f);
  ASSERT_TRUE(enc.has_value()) << numerics::name_of(f);
  const std::uint64_t n = std::uint64_t{1} << enc->total_bits();
  struct Setting {
    Ftz ftz;
    Daz daz;
  };
  const Setting settings[] = {{Ftz::Off, Daz::Off}, {Ftz::Out, Daz::Off}, {Ftz::All, Daz::On}};
  for (std::uint64_t bits = 0; bits < n; bits += stride) {
    const double v = numerics::from_bits(f, bits);
    if (!std::isfinite(v)) continue;
    const double w = numerics::from_bits(f, (bits * 40503u + 12345u) % n);
    const double q = numerics::ulp(f, v) / 4;
    std::vector<double> xs;
    for (int j = 0; j < 4; ++j) xs.push_back(v + j * q);  // exact in binary64 (p <= 24)
    std::vector<rt::OracleResults> conv;
    for (double x : xs) conv.push_back(rt::oracle_op(f, rt::Op::Convert, x));
    const bool add_ok = std::isfinite(w);
    const rt::OracleResults sum = add_ok ? rt::oracle_op(f, rt::Op::Add, v, w) : rt::OracleResults{};
    for (const Setting& s : settings) {
      OpPrecision p{f, f, Rounding::NearestEven, sequential_in(fmts::fp32)};
      p.ftz = s.ftz;
      p.daz = s.daz;
      for (Rounding m : numerics::kDeterministicRoundings) {
        p.rounding = m;
        const Ctx<Emulated> ctx(p);
        const auto want = [&](double r, bool flush) { return flush ? oracle_flush(r, f) : r; };
        for (std::size_t j = 0; j < xs.size(); ++j) {
          const double r = conv[j].value(m);
          const std::string what = numerics::name_of(f) + " " + std::string(numerics::name_of(m)) + " x=" +
                                   std::to_string(xs[j]) + " ftz=" + std::string(name_of(s.ftz)) +
                                   " daz=" + std::string(name_of(s.daz));
          ASSERT_TRUE(rt::same_value(ctx.in(xs[j], {}), want(r, s.daz == Daz::On))) << "in " << what;
          ASSERT_TRUE(rt::same_value(ctx.store(xs[j], {}), want(r, s.ftz != Ftz::Off))) << "store " << what;
          ASSERT_TRUE(rt::same_value(ctx.to_compute(xs[j], {}), want(r, s.ftz == Ftz::All)))
              << "to_compute " << what;
          counts.checked += 3;
          counts.flushed += s.ftz != Ftz::Off && want(r, true) != r;
        }
        if (add_ok) {
          const double r = sum.value(m);
          ASSERT_TRUE(rt::same_value(ctx.add(v, w, {}), want(r, s.ftz == Ftz::All)))
              << "add " << numerics::name_of(f) << " " << numerics::name_of(m) << " " << v << " + " << w;
          ++counts.checked;
        }
      }
      // Stochastic rounding: one of the two neighbours, each flushed where the setting flushes.
      p.rounding = Rounding::Stochastic;
      for (std::uint64_t stream = 0; stream < 2; ++stream) {
        const Ctx<Emulated> ctx(p, {99, stream});
        for (std::size_t j = 0; j < xs.size(); ++j) {
          const auto one_of = [&](double got, bool flush) {
            return rt::same_value(got, flush ? oracle_flush(conv[j].down, f) : conv[j].down) ||
                   rt::same_value(got, flush ? oracle_flush(conv[j].up, f) : conv[j].up);
          };
          const Key k = key(Tensor::X, bits * 4 + j, 0);
          ASSERT_TRUE(one_of(ctx.in(xs[j], k), s.daz == Daz::On)) << "stochastic in " << xs[j];
          ASSERT_TRUE(one_of(ctx.store(xs[j], k), s.ftz != Ftz::Off)) << "stochastic store " << xs[j];
          ASSERT_TRUE(one_of(ctx.to_compute(xs[j], k), s.ftz == Ftz::All)) << "stochastic to_compute " << xs[j];
          counts.checked += 3;
        }
      }
    }
  }
}

TEST(FtzDazElements, E4m3AndE5m2EveryEncodingEqualsMpfrThenFlush) {
  for (const Format& f : {fmts::e4m3, fmts::e5m2}) {
    ElementCounts c;
    check_elements(f, 1, c);
    EXPECT_GT(c.flushed, 100) << numerics::name_of(f) << ": the flush never fired";
  }
}

TEST(FtzDazElements, Fp16AndBf16SampledEncodingsEqualMpfrThenFlush) {
  for (const Format& f : {fmts::fp16, fmts::bf16}) {
    ElementCounts c;
    check_elements(f, 97, c);
    EXPECT_GT(c.flushed, 20) << numerics::name_of(f) << ": the flush never fired";
  }
}

TEST(FtzDazElementsExhaustive, Fp16AndBf16EveryEncodingEqualsMpfrThenFlush) {
  for (const Format& f : {fmts::fp16, fmts::bf16}) {
    ElementCounts c;
    check_elements(f, 1, c);
    EXPECT_GT(c.flushed, 10000) << numerics::name_of(f) << ": the flush never fired";
  }
}

// ---- ops: the flush fires, fast paths equal the definition, the Reference ignores it -------------------------

/// n values N(0, (2·min_normal(f))²) rounded to f: about two thirds subnormal in f.
std::vector<double> subnormal_rich(std::size_t n, const Format& f, std::uint64_t seed) {
  return test::randn(n, 2 * numerics::min_normal(f), f, seed);
}

std::size_t count_subnormal(const std::vector<double>& v, const Format& f) {
  std::size_t c = 0;
  for (double x : v) c += x != 0 && std::isfinite(x) && std::ilogb(x) < f.emin;
  return c;
}

OpPrecision with(OpPrecision p, Ftz ftz, Daz daz) {
  p.ftz = ftz;
  p.daz = daz;
  return p;
}

TEST(FtzDazOps, CtxSpanFormsEqualThePerElementCallsAndFlush) {
  // store_array, store_to_array, result_array, in_array, compute_array, exp_array and arith_array on
  // subnormal-rich values (of the storage format, some off its grid) against the per-element calls.
  for (const char* spec : {"ane-guide,all.ftz=all,all.daz=on", "pure-fp16,all.ftz=out", "pure-bf16,all.ftz=all,all.daz=on",
                           "fp32,all.ftz=all,all.daz=on", "ane-fp16,all.rounding=up,all.ftz=all,all.daz=on",
                           "ane-guide,softmax.approx=ane-lut,all.ftz=all"}) {
    const OpPrecision p = Policy::parse(spec).at(OpKind::Softmax, Pass::Forward);
    const Format& f = p.storage;
    std::vector<double> x = subnormal_rich(1029, f, 31);
    for (std::size_t i = 0; i < x.size(); i += 3) x[i] += std::ldexp(x[i], -30);
    // exp arguments whose results are subnormal in compute: log(min_normal) − [0, 4)
    std::vector<double> e(x.size());
    for (std::size_t i = 0; i < e.size(); ++i)
      e[i] = numerics::round_to(p.compute, Rounding::NearestEven,
                                std::log(numerics::min_normal(p.compute)) - 4.0 * static_cast<double>(i % 64) / 64);
    const numerics::RoundingPlan other(fmts::bf16);
    const auto kf = [](std::size_t i) { return key(Tensor::Y, i, 1); };
    const auto kg = [](std::size_t i) { return key(Tensor::Y, i, 2); };
    const Ctx<Emulated> c(p, {1, 2}), off(with(p, Ftz::Off, Daz::Off), {1, 2});
    std::vector<double> st(x.size()), to(x.size()), res = x, in(x.size()), comp = x, ex(x.size()), ar(x.size());
    c.store_array(x, st, kf);
    c.store_to_array(other, x, to, kf);
    c.result_array(res, kf, kg);
    c.in_array(x, in, Tensor::X);
    c.compute_array(comp, kf);
    c.exp_array(e, ex, kf);
    arith_array(c, ArithOp::Add, cs(in), cs(x), std::span<double>(ar), kf);
    std::vector<double> st1(x.size()), to1(x.size()), res1(x.size()), in1(x.size()), comp1(x.size()), ex1(x.size()),
        ar1(x.size()), st0(x.size()), ex0(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      st1[i] = c.store(x[i], kf(i));
      to1[i] = c.store_to(other, x[i], kf(i));
      res1[i] = c.store(c.to_compute(x[i], kf(i)), kg(i));
      in1[i] = c.in(x[i], key(Tensor::X, i, 0));
      comp1[i] = c.to_compute(x[i], kf(i));
      ex1[i] = c.exp(e[i], kf(i));
      ar1[i] = c.add(in[i], x[i], kf(i));
      st0[i] = off.store(x[i], kf(i));
      ex0[i] = off.exp(e[i], kf(i));
    }
    const std::string what = spec;
    test::expect_same(st, st1, "store_array " + what, true);
    test::expect_same(to, to1, "store_to_array " + what, true);
    test::expect_same(res, res1, "result_array " + what, true);
    test::expect_same(in, in1, "in_array " + what, true);
    test::expect_same(comp, comp1, "compute_array " + what, true);
    test::expect_same(ex, ex1, "exp_array " + what, true);
    test::expect_same(ar, ar1, "arith_array " + what, true);
    // The flush fired: stores that are subnormal without ftz are zeros with it.
    EXPECT_GT(count_subnormal(st0, f), x.size() / 4) << what;
    EXPECT_EQ(count_subnormal(st, f), 0u) << what;
    if (p.ftz == Ftz::All) {
      EXPECT_GT(count_subnormal(ex0, p.compute), 0u) << what << ": no subnormal exp to flush";
      EXPECT_EQ(count_subnormal(ex, p.compute), 0u) << what;
      EXPECT_EQ(count_subnormal(ar, p.compute), 0u) << what;
      std::size_t sums_flushed = 0;
      for (std::size_t i = 0; i < x.size(); ++i) sums_flushed += ar[i] == 0 && off.add(in[i], x[i], kf(i)) != 0;
      EXPECT_GT(sums_flushed, x.size() / 8) << what << ": no subnormal sum to flush";
    }
    if (p.daz == Daz::On) {
      EXPECT_EQ(count_subnormal(in, f), 0u) << what;
    }
  }
}

TEST(FtzDazOps, ResidualOutputsFlushAndTheFastPathAgrees) {
  for (const char* preset : {"pure-fp16", "pure-bf16", "ane-guide", "fp32"}) {
    const OpPrecision base = Policy::preset(preset).at(OpKind::ResidualFfn, Pass::Forward);
    const Format& f = base.storage;
    const RowShape s{7, 37};
    const auto x = subnormal_rich(s.size(), f, 3), r = subnormal_rich(s.size(), f, 4);
    for (Ftz ftz : {Ftz::Off, Ftz::Out, Ftz::All}) {
      const auto [fast, oracle] = test::both([&](const ExecOptions& ex) {
        std::vector<double> out(x.size());
        residual_forward<Emulated>(out, cs(x), cs(r), 1.0, s, Ctx<Emulated>(with(base, ftz, Daz::Off), {}, ex));
        return std::vector<std::vector<double>>{out};
      });
      test::expect_same(fast[0], oracle[0], std::string(preset) + " residual ftz=" + std::string(name_of(ftz)), true);
      const std::size_t sub = count_subnormal(fast[0], f);
      if (ftz == Ftz::Off) {
        EXPECT_GT(sub, x.size() / 4) << preset;  // the inputs do make subnormal outputs
      } else {
        EXPECT_EQ(sub, 0u) << preset << ": ftz=" << name_of(ftz) << " left subnormal outputs";
      }
    }
    // The Reference backend ignores ftz: the shadow measures the flush as local error.
    std::vector<Ref> ref(x.size());
    residual_forward<Reference>(ref, lift(x), lift(r), 1.0, s, Ctx<Reference>(with(base, Ftz::All, Daz::On)));
    std::size_t ref_sub = 0;
    for (const Ref& v : ref) ref_sub += v != 0 && std::fabs(static_cast<double>(v)) < numerics::min_normal(f);
    EXPECT_GT(ref_sub, x.size() / 4) << preset;
  }
}

TEST(FtzDazOps, MatmulDazZeroesSubnormalInputsOnEveryKernelTier) {
  // y = x·Wᵀ with x subnormal-rich and W normal: under daz the subnormal x read as zeros (the GEMM's entry casts,
  // which leave the kernels' cast-in-pack for in_array), so y is the product of the flushed x.
  for (const char* preset : {"pure-fp16", "pure-bf16", "ane-guide"})
    for (const auto isa : ::roundoff::test::isa_tiers(true)) {
      const numerics::KernelOptions kernels = ::roundoff::test::kernels_at(isa);
      const OpPrecision base = Policy::preset(preset).at(OpKind::Matmul, Pass::Forward);
      const Format& f = base.storage;
      const MatmulShape s{9, 33, 17};
      const auto x = subnormal_rich(static_cast<std::size_t>(s.n * s.in), f, 11);
      const auto w = test::randn(static_cast<std::size_t>(s.out * s.in), 1.0, f, 12);
      std::vector<double> x_flushed = x;
      for (double& v : x_flushed) v = oracle_flush(v, f);
      ASSERT_NE(x_flushed, x);
      const auto run = [&](const std::vector<double>& xin, const OpPrecision& p) {
        return test::both([&](const ExecOptions& ex0) {
          ExecOptions ex = ex0;
          ex.kernels.fast_paths = ex.fast_paths;
          std::vector<double> y(static_cast<std::size_t>(s.n * s.out));
          matmul_forward<Emulated>(y, cs(xin), cs(w), s, Ctx<Emulated>(p, {}, ex));
          return std::vector<std::vector<double>>{y};
        }, kernels);
      };
      const auto [daz_fast, daz_oracle] = run(x, with(base, Ftz::Off, Daz::On));
      const auto [pre_fast, pre_oracle] = run(x_flushed, base);
      const auto [plain_fast, plain_oracle] = run(x, base);
      const std::string what = std::string(preset) + " isa " + numerics::kernels::name_of(isa);
      test::expect_same(daz_fast[0], daz_oracle[0], "daz fast vs definition " + what, true);
      test::expect_same(daz_fast[0], pre_fast[0], "daz vs pre-flushed x " + what, true);
      EXPECT_NE(daz_fast[0], plain_fast[0]) << what << ": daz changed nothing";
    }
}

TEST(FtzDazOps, RmsNormAndSiluUnderFtzAllEqualTheDefinition) {
  // The lane reductions (dot_rows), compute_array, the span arithmetic and sigmoid_array under ftz all.
  for (const char* spec : {"pure-fp16,all.ftz=all,all.daz=on", "pure-bf16,all.ftz=all", "fp32,all.ftz=all",
                           "ane-guide,all.ftz=all,all.daz=on,silu.approx=ane-lut"}) {
    const Policy pol = Policy::parse(spec);
    const OpPrecision& pr = pol.at(OpKind::RmsNorm, Pass::Forward);
    const OpPrecision& ps = pol.at(OpKind::Silu, Pass::Forward);
    const RowShape s{13, 70};
    const auto x = subnormal_rich(s.size(), pr.storage, 21);
    const auto g = test::randn(static_cast<std::size_t>(s.cols), 1.0, pr.storage, 22);
    const auto [fast, oracle] = test::both([&](const ExecOptions& ex) {
      std::vector<double> y(x.size()), rstd(static_cast<std::size_t>(s.rows)), h(x.size());
      rmsnorm_forward<Emulated>(y, rstd, cs(x), cs(g), s, 1e-5, Ctx<Emulated>(pr, {}, ex));
      silu_forward<Emulated>(h, cs(x), s, Ctx<Emulated>(ps, {}, ex));
      return std::vector<std::vector<double>>{y, rstd, h};
    });
    for (std::size_t i = 0; i < fast.size(); ++i)
      test::expect_same(fast[i], oracle[i], std::string(spec) + " output " + std::to_string(i), true);
    EXPECT_EQ(count_subnormal(fast[2], ps.storage), 0u) << spec;
  }
}

}  // namespace
}  // namespace roundoff::ops
