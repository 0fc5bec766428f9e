// Bit-exactness of numerics::sum/dot/gemm against the MPFR-executed twin (tests/support/accum_mpfr_twin):
// every order, fused and unfused products, promotion, the multi-term adder, the tile stage and the subnormal
// flush, in every rounding mode, on fp16 and bf16 inputs of several kinds (normal data, wide exponent spread
// with subnormals, overflow, specials, cancellation), for ragged lengths. Results and overflow counts must agree exactly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/mpfr_util.hpp"
#include "numerics/round.hpp"
#include "tests/support/accum_mpfr_twin.hpp"

namespace roundoff::numerics {
namespace {

using test::twin_dot;
using test::twin_sum;

enum class Data { Normal, Wide, Overflow, Specials, Tiny, Cancel };
constexpr Data kAllData[] = {Data::Normal, Data::Wide, Data::Overflow, Data::Specials, Data::Tiny, Data::Cancel};
const char* name_of(Data d) {
  switch (d) {
    case Data::Normal: return "normal";
    case Data::Wide: return "wide";
    case Data::Overflow: return "overflow";
    case Data::Specials: return "specials";
    case Data::Tiny: return "tiny";
    case Data::Cancel: return "cancel";
  }
  return "?";
}

/// Values of `in` of the given kind (products of two such values exercise the same regime for dots).
std::vector<double> make_data(const Format& in, Data kind, std::size_t n, std::mt19937_64& rng) {
  const RoundingPlan plan(in);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> v(n);
  const double big = max_finite(in);
  for (std::size_t i = 0; i < n; ++i) {
    double x = 0;
    switch (kind) {
      case Data::Normal: x = normal(rng); break;
      case Data::Wide: {
        // Magnitudes spread over the format's whole range, subnormals included.
        const double e = in.emin - in.precision + 1 + unit(rng) * (in.emax - (in.emin - in.precision + 1));
        x = std::ldexp(1.0 + unit(rng), static_cast<int>(e)) * (unit(rng) < 0.5 ? -1 : 1);
        break;
      }
      case Data::Overflow: x = (0.2 + 0.8 * unit(rng)) * std::sqrt(big) * 8 * (unit(rng) < 0.8 ? 1 : -1); break;
      case Data::Specials: {
        const double r = unit(rng);
        constexpr double inf = std::numeric_limits<double>::infinity();
        x = r < 0.04 ? inf : r < 0.08 ? -inf : r < 0.1 ? std::nan("") : r < 0.15 ? -0.0 : r < 0.2 ? 0.0 : normal(rng);
        break;
      }
      case Data::Tiny: x = std::ldexp(normal(rng), in.emin - 2 + static_cast<int>(unit(rng) * 4)); break;
      case Data::Cancel: x = (i % 2 == 1) ? -v[i - 1] * (unit(rng) < 0.7 ? 1.0 : 1.0 + std::ldexp(1.0, 1 - in.precision))
                                         : std::ldexp(normal(rng), static_cast<int>(unit(rng) * 12) - 4);
        break;
    }
    v[i] = round_to(plan, Rounding::NearestEven, x);
  }
  return v;
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

/// Accumulations under test: a grid over orders, product modes, promotion and adder parameters.
std::vector<Accumulation> grid() {
  std::vector<Accumulation> out;
  for (const Format& acc : {formats::fp16, formats::bf16, formats::fp32}) {
    for (const Order order : {Order::Sequential, Order::Reverse, Order::Pairwise, Order::Kahan, Order::Blocked}) {
      for (int fused = 0; fused < 2; ++fused) {
        Accumulation a;
        a.format = acc;
        a.order = order;
        a.fused = fused != 0;
        a.product_format = a.fused ? formats::fp32 : (acc == formats::fp32 ? formats::bf16 : acc);
        if (order == Order::Blocked) {
          a.block = 5;  // ragged blocks
          a.outer_format = acc == formats::fp32 ? formats::fp16 : formats::fp32;
        }
        out.push_back(a);
      }
    }
    Accumulation promote;
    promote.format = acc;
    promote.promote_every = 7;
    promote.promote_format = acc == formats::fp32 ? formats::bf16 : formats::fp32;
    out.push_back(promote);
    promote.order = Order::Reverse;
    promote.fused = false;
    promote.product_format = formats::fp16;
    out.push_back(promote);
  }
  // Multi-term adders around the tensor-core models.
  const MultiTermAdder adders[] = {
      {4, 0, Rounding::TowardZero, Rounding::TowardZero, 2},   {8, 0, Rounding::TowardZero, Rounding::TowardZero, 2},
      {3, 3, Rounding::NearestEven, Rounding::NearestEven, 1}, {4, 1, Rounding::TowardZero, Rounding::NearestEven, 0},
      {5, 2, Rounding::NearestEven, Rounding::Up, 3},
      {16, 2, Rounding::TowardZero, Rounding::TowardZero, 6, AdderAnchor::ExponentSum, -14, AdderEdges::InfPositiveZero},
      {4, 1, Rounding::NearestEven, Rounding::Down, 2, AdderAnchor::ExponentSum, -10, AdderEdges::Ieee},
      {3, 0, Rounding::TowardZero, Rounding::NearestEven, 1, AdderAnchor::LeadingBit, 0, AdderEdges::InfPositiveZero},
      {4, 2, Rounding::TowardZero, Rounding::TowardZero, 6, AdderAnchor::ExponentSum, -14, AdderEdges::InfPositiveZero,
       AdderFeed::EvenPairsFirst},
      {2, 1, Rounding::NearestEven, Rounding::NearestEven, 2, AdderAnchor::LeadingBit, 0, AdderEdges::Ieee,
       AdderFeed::EvenPairsFirst},
  };
  for (const Format& acc : {formats::fp32, formats::fp16}) {
    for (const MultiTermAdder& ad : adders) {
      Accumulation a;
      a.format = acc;
      a.adder = ad;
      out.push_back(a);
      a.order = Order::Reverse;
      a.fused = false;
      a.product_format = formats::bf16;
      out.push_back(a);
      a.order = Order::Sequential;
      a.fused = true;
      a.promote_every = 9;
      a.promote_format = formats::fp64;
      out.push_back(a);
    }
  }
  // Exact tile stages (the ANE model) in several tile formats and modes, fused and unfused, both orders.
  const TileStage tiles[] = {
      {4, formats::fp16, Rounding::TowardZero}, {3, formats::fp16, Rounding::NearestEven},
      {5, formats::bf16, Rounding::Up},         {2, formats::fp32, Rounding::NearestAway},
      {4, formats::fp16, Rounding::Odd},        {1, formats::fp16, Rounding::Down},
  };
  for (const Format& acc : {formats::fp32, formats::fp16}) {
    for (const TileStage& t : tiles) {
      Accumulation a;
      a.format = acc;
      a.tile = t;
      out.push_back(a);
      a.order = Order::Reverse;
      a.fused = false;
      a.product_format = formats::bf16;
      out.push_back(a);
    }
  }
  // The subnormal flush (the M1 ANE model): of tile values, of the partial sums (in the accumulator's own range or
  // a narrower one), both; flush=tile also inside split-K chunks.
  for (const char* spec : {"ane-tile4-ftz", "ane-tile4,tile=3:fp16:nearest-even,flush=tile+step",
                           "acc=fp16,tile=2:bf16:up,flush=tile", "ane-tile4,flush=step:fp16",
                           "acc=fp16,flush=step", "acc=bf16,order=reverse,unfused,product=bf16,flush=step",
                           "acc=fp32,flush=step:fp16", "acc=fp16,unfused,product=fp16,flush=step:bf16",
                           "ane-tile4-ftz,splitk=3:2"})
    out.push_back(parse_accumulation(spec));
  // Split-K over each kind of chunk reduction (ragged chunks, fewer chunks than S, its own rounding and format).
  const SplitK splits[] = {{3, 1, Rounding::NearestEven}, {2, 4, Rounding::TowardZero}, {4, 2, Rounding::Down},
                           {5, 3, Rounding::Stochastic},  {7, 1, Rounding::Odd},         {1, 1, Rounding::Up}};
  for (const char* base : {"fp16-seq", "bf16-unfused-seq", "fp16-pairwise", "fp16-kahan", "fp16-reverse",
                           "fp16-promote128-fp32,promote=4:fp32", "tc-h100", "tc-h100-f16acc",
                           "acc=fp32,group=3,extra=1,align=nearest-even,normalize=nearest-even,carry=1", "ane-tile4"}) {
    for (const SplitK& sk : splits) {
      Accumulation a = parse_accumulation(base);
      a.splitk = sk;
      if (sk.rounding == Rounding::Down) a.outer_format = formats::bf16;
      if (sk.rounding == Rounding::Odd) a.outer_format = formats::fp16;
      out.push_back(a);
    }
  }
  return out;
}

struct Counter {
  int runs = 0, failures = 0;
};

void check_one(const Accumulation& a, const Format& in, Data kind, std::size_t n, std::mt19937_64& rng, Counter& c) {
  const auto x = make_data(in, kind, n, rng);
  const auto y = make_data(in, kind == Data::Overflow ? Data::Normal : kind, n, rng);
  const StochasticBits bits{rng(), rng() % 1000};
  AccumStats st_sum, st_dot;
  const double s = sum(a, x, bits, &st_sum);
  const auto ts = twin_sum(a, x, bits);
  const double d = dot(a, x, y, bits, &st_dot);
  const auto td = twin_dot(a, x, y, bits);
  ++c.runs;
  const bool ok = same(s, ts.value) && same(d, td.value) && st_sum.overflows == ts.overflows &&
                  st_dot.overflows == td.overflows;
  if (!ok && ++c.failures <= 10) {
    ADD_FAILURE() << canonical(a) << " inputs " << name_of(in) << " data " << name_of(kind) << " n=" << n
                  << ": sum " << s << " twin " << ts.value << " (overflows " << st_sum.overflows << " vs "
                  << ts.overflows << "); dot " << d << " twin " << td.value << " (overflows " << st_dot.overflows
                  << " vs " << td.overflows << ")";
  }
}

TEST(AccumulateTwin, EveryOrderProductModePromotionAdderAndTileIsBitExact) {
  std::mt19937_64 rng(20260);
  Counter c;
  const std::size_t lengths[] = {0, 1, 2, 3, 4, 7, 10, 16, 33, 70};
  for (const Accumulation& base : grid()) {
    for (const Rounding mode : kAllRoundings) {
      Accumulation a = base;
      a.rounding = mode;
      for (const Format& in : {formats::fp16, formats::bf16})
        for (const Data kind : kAllData)
          for (const std::size_t n : lengths) check_one(a, in, kind, n, rng, c);
    }
  }
  EXPECT_EQ(c.failures, 0) << "of " << c.runs;
  EXPECT_GT(c.runs, 10000);
}

TEST(AccumulateTwin, PresetsAreBitExactOnLongInputs) {
  std::mt19937_64 rng(77);
  Counter c;
  for (const std::string& name : preset_accumulation_names()) {
    const Accumulation a = parse_accumulation(name);
    for (const Format& in : {formats::fp16, formats::bf16})
      for (const Data kind : {Data::Normal, Data::Wide, Data::Overflow, Data::Cancel})
        for (const std::size_t n : {129, 300}) check_one(a, in, kind, n, rng, c);
  }
  EXPECT_EQ(c.failures, 0) << "of " << c.runs;
}

TEST(AccumulateTwin, GemmWithAccumulateMatchesTheTwin) {
  // The initial C_ij enters exactly (it need not be a value of the accumulator format).
  std::mt19937_64 rng(5);
  const std::size_t M = 3, N = 4, K = 19;
  for (const char* name : {"fp16-seq", "bf16-pairwise", "fp16-splitk16-fp32", "fp16-kahan", "fp16-promote128-fp32",
                           "tc-v100", "fp16-sr", "ane-tile4", "acc=fp16:up,order=blocked:4,outer=bf16,unfused,product=fp16",
                           "tc-h100", "tc-h100-fp8,promote=8:fp32", "tc-h100-fp8-e5m2", "tc-h100,splitk=3:4",
                           "fp16-sr,splitk=2:1:stochastic", "fp16-seq,outer=fp16,splitk=4:2:toward-zero",
                           "tc-b200-fp8-mma", "tc-h100-fp8-mma,promote=8:fp32", "tc-b200-fp8-mma-f16acc", "tc-ada-fp8",
                           "tc-ada-fp8-f16acc"}) {
    const Accumulation a = parse_accumulation(name);
    const auto A = make_data(formats::fp16, Data::Normal, M * K, rng);
    const auto B = make_data(formats::fp16, Data::Normal, K * N, rng);
    std::vector<double> C(M * N);
    for (auto& v : C) v = std::ldexp(static_cast<double>(rng() % 100000), -13);  // not fp16 values in general
    const auto C0 = C;
    const StochasticBits bits{41, 3};
    gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{B.data(), N}, C.data(), N, true, bits, nullptr, 2);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        std::vector<double> row(A.begin() + static_cast<std::ptrdiff_t>(i * K),
                                A.begin() + static_cast<std::ptrdiff_t>((i + 1) * K));
        std::vector<double> col(K);
        for (std::size_t k = 0; k < K; ++k) col[k] = B[k * N + j];
        const auto t = twin_dot(a, row, col, StochasticBits{41, 3 + i * N + j}, true, C0[i * N + j]);
        EXPECT_TRUE(same(C[i * N + j], t.value)) << name << " " << i << "," << j << ": " << C[i * N + j] << " vs "
                                                 << t.value;
      }
  }
}

TEST(AccumulateTwin, TileStageAdversarialCases) {
  // Hand-made tiles: ties in the tile format, cancellation to exact zero, signed zeros, overflow of a tile,
  // subnormal tile sums, and binary64 terms spanning more than 120 bits (the Kulisch path of the engine).
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> cases = {
      {2048, 1, 2048, 3},                      // tiles of 2: 2049 and 2051, fp16 midpoints
      {4096, 1, 1, 1, 4096, -1, -1, -1},       // +-3 below half an ulp of 4096
      {1000, -1000, 0.5, -0.5, 7, -7},         // exact cancellation: +0 tiles
      {-0.0, -0.0, -0.0, -0.0, -0.0},          // every term -0
      {0.0, -0.0, -0.0, 0.0},
      {65504, 65504, 16, 8, -65504, -65504},   // a tile overflows fp16, the fp32 sum does not
      {0x1p-24, 0x1p-25, -0x1p-26, 0x1p-30},   // subnormal tile sums (ties below the smallest subnormal)
      {-0x1p-25, -0x1p-26, 0x1p-27, 0x1p-24},
      {0x1p1000, -0x1p1000, 0x1p-1000, 1.0},   // > 120-bit span inside one tile
      {1e300, 1e-300, -1e300, 5e-324, 3.0, 0x1p-1074},
      {inf, -inf, 1, 2},                       // inf - inf: NaN tile
      {inf, 1, 2, 3, -65504, 65504},
  };
  int checked = 0;
  for (const char* spec :
       {"ane-tile4", "ane-tile4,tile=2", "ane-tile4,tile=2:fp16:nearest-even", "ane-tile4,tile=3:fp16:up",
        "acc=fp16,tile=2:fp16:nearest-away", "acc=fp32:down,order=reverse,tile=4:bf16:odd",
        "acc=fp16:toward-zero,tile=5:fp32:nearest-even"}) {
    const Accumulation a = parse_accumulation(spec);
    for (const auto& x : cases) {
      const std::vector<double> ones(x.size(), 1.0), halves(x.size(), 0.5);
      AccumStats st_s, st_d;
      const double s = sum(a, x, {}, &st_s), d = dot(a, x, halves, {}, &st_d);
      const auto ts = twin_sum(a, x), td = twin_dot(a, x, halves);
      EXPECT_TRUE(same(s, ts.value) && st_s.overflows == ts.overflows)
          << spec << " case " << checked << ": sum " << s << " twin " << ts.value << " overflows " << st_s.overflows
          << " vs " << ts.overflows;
      EXPECT_TRUE(same(d, td.value) && st_d.overflows == td.overflows)
          << spec << " case " << checked << ": dot " << d << " twin " << td.value;
      ++checked;
    }
  }
  // Hand-derived values the twin and the engine must both give.
  const Accumulation rne2 = parse_accumulation("ane-tile4,tile=2:fp16:nearest-even");
  EXPECT_EQ(sum(rne2, std::vector<double>{2048, 1, 2048, 3}), 2048.0 + 2052.0);  // ties to even
  EXPECT_EQ(sum(parse_accumulation("ane-tile4,tile=2"), std::vector<double>{2048, 1, 2048, 3}), 2048.0 + 2050.0);
  EXPECT_TRUE(std::signbit(sum(parse_accumulation("ane-tile4"), std::vector<double>{-0.0, -0.0})) == false);
  AccumStats st;
  // 65504 + 16 = 65520 rounds to inf in fp16 (nearest); the fp32 accumulator then holds inf.
  EXPECT_EQ(sum(rne2, std::vector<double>{65504, 16, -65504, 0}, {}, &st), inf);
  EXPECT_EQ(st.overflows, 1);
}

TEST(AccumulateTwin, TwinRoundingMatchesKnownValues) {
  // Oracle self-checks on hand-derived cases (so a wrong twin cannot agree with a wrong engine by accident).
  Mpfr v(200);
  auto r = [&](const Format& f, Rounding m, double x, std::uint64_t draw = 0) {
    mpfr_set_d(v, x, MPFR_RNDN);
    return test::twin_round(f, m, v, draw);
  };
  EXPECT_EQ(r(formats::fp16, Rounding::NearestEven, 2049.0), 2048.0);  // tie to even
  EXPECT_EQ(r(formats::fp16, Rounding::NearestAway, 2049.0), 2050.0);
  EXPECT_EQ(r(formats::fp16, Rounding::Odd, 2049.0), 2050.0);           // 2050 = 1025·2, odd significand
  EXPECT_EQ(r(formats::fp16, Rounding::TowardZero, -2051.0), -2050.0);
  EXPECT_EQ(r(formats::fp16, Rounding::Up, 0x1p-26), 0x1p-24);          // below the smallest subnormal
  EXPECT_EQ(r(formats::fp16, Rounding::NearestEven, 0x1p-25), 0.0);     // exact midpoint to even (0)
  EXPECT_EQ(r(formats::fp16, Rounding::NearestEven, 0x1.8p-25), 0x1p-24);
  EXPECT_EQ(r(formats::fp16, Rounding::NearestEven, 65520.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(r(formats::fp16, Rounding::NearestEven, 65519.0), 65504.0);
  EXPECT_EQ(r(formats::fp16, Rounding::TowardZero, 1e6), 65504.0);
  mpfr_set_d(v, 0x1p-100, MPFR_RNDN);
  mpfr_add_ui(v, v, 1, MPFR_RNDN);  // 1 + 2^-100 exactly (200 bits)
  EXPECT_EQ(test::twin_round(formats::bf16, Rounding::Up, v, 0), 1.0078125);  // NUMERICS.md trap 2
  // Stochastic: 1 + 2^-12 lies a quarter of the way from 1 to 1 + 2^-10: up iff draw < 2^62.
  EXPECT_EQ(r(formats::fp16, Rounding::Stochastic, 1.0 + 0x1p-12, (std::uint64_t{1} << 62) - 1), 1.0 + 0x1p-10);
  EXPECT_EQ(r(formats::fp16, Rounding::Stochastic, 1.0 + 0x1p-12, std::uint64_t{1} << 62), 1.0);
}

TEST(AccumulateTwin, EveryParameterChangesSomeResult) {
  // The comparison above can fail: for each parameter, changing it alone changes some result on the same kind
  // of data, so an engine that ignored the parameter would disagree with the twin.
  Accumulation tc = parse_accumulation("acc=fp32,group=4,extra=2,align=nearest-even,normalize=nearest-even,carry=2");
  auto with = [](Accumulation a, auto edit) {
    edit(a);
    return a;
  };
  const std::pair<Accumulation, Accumulation> pairs[] = {
      {parse_accumulation("fp16-seq"), parse_accumulation("fp16-reverse")},
      {parse_accumulation("fp16-seq"), parse_accumulation("fp16-unfused-seq")},
      {parse_accumulation("fp16-splitk16-fp32"), parse_accumulation("fp16-splitk32-fp32")},
      {parse_accumulation("fp16-seq"), parse_accumulation("fp16-promote128-fp32")},
      {parse_accumulation("fp16-seq"), parse_accumulation("fp16-kahan")},
      {parse_accumulation("fp16-seq"), parse_accumulation("fp16-pairwise")},
      {tc, with(tc, [](Accumulation& a) { a.adder.group = 8; })},
      {tc, with(tc, [](Accumulation& a) { a.adder.extra_bits = 0; })},
      {tc, with(tc, [](Accumulation& a) { a.adder.align = Rounding::TowardZero; })},
      {tc, with(tc, [](Accumulation& a) { a.adder.normalize = Rounding::TowardZero; })},
      {tc, with(tc, [](Accumulation& a) { a.adder.carry_bits = 0; })},
      {tc, with(tc, [](Accumulation& a) {
         a.adder.anchor = AdderAnchor::ExponentSum;
         a.adder.input_emin = -14;
       })},
      {tc, with(tc, [](Accumulation& a) { a.adder.feed = AdderFeed::EvenPairsFirst; })},
      {parse_accumulation("ane-tile4"), parse_accumulation("ane-tile4,tile=8")},
      {parse_accumulation("ane-tile4"), parse_accumulation("ane-tile4,tile=4:bf16:toward-zero")},
      {parse_accumulation("ane-tile4"), parse_accumulation("ane-tile4,tile=4:fp16:nearest-even")},
      {parse_accumulation("ane-tile4"), parse_accumulation("fp32-seq")},
      {parse_accumulation("tc-h100"), parse_accumulation("tc-h100,splitk=3")},
      {parse_accumulation("tc-h100,splitk=3"), parse_accumulation("tc-h100,splitk=4")},
      {parse_accumulation("tc-h100,splitk=3"), parse_accumulation("tc-h100,splitk=3:64")},
      {parse_accumulation("fp16-seq,outer=fp16,splitk=3"), parse_accumulation("fp16-seq,outer=fp16,splitk=3:1:toward-zero")},
      {parse_accumulation("fp16-seq,splitk=3"), parse_accumulation("fp16-seq,outer=fp16,splitk=3")},
  };
  std::mt19937_64 rng(3);
  for (const auto& [a, b] : pairs) {
    int differ = 0;
    for (int t = 0; t < 200 && differ == 0; ++t) {
      const Data kind = t % 2 ? Data::Normal : Data::Cancel;
      const auto x = make_data(formats::fp16, kind, 300, rng), y = make_data(formats::fp16, kind, 300, rng);
      differ += !same(dot(b, x, y), twin_dot(a, x, y).value);
    }
    EXPECT_GT(differ, 0) << canonical(a) << " vs " << canonical(b);
  }
}

}  // namespace
}  // namespace roundoff::numerics
