// Known facts about accumulations (NUMERICS.md, STUDY_PROTOCOL.md §4.8), the preset/spec parser, shape
// errors, specials and overflow counting, and gemm determinism across thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/row_reduce.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(AccumulateFacts, SequentialOnesStagnateAtTheIntegerLimit) {
  const std::vector<double> ones(4096, 1.0);
  EXPECT_EQ(sum(parse_accumulation("fp16-seq"), ones), 2048.0);
  EXPECT_EQ(sum(parse_accumulation("bf16-seq"), ones), 256.0);
  EXPECT_EQ(sum(parse_accumulation("fp32-seq"), ones), 4096.0);
  // Pairwise sums of powers of two are exact; split-K blocks of 32 are exact and the fp32 outer sum too.
  EXPECT_EQ(sum(parse_accumulation("fp16-pairwise"), ones), 4096.0);
  EXPECT_EQ(sum(parse_accumulation("fp16-splitk32-fp32"), ones), 4096.0);
  EXPECT_EQ(sum(parse_accumulation("fp16-promote128-fp32"), ones), 4096.0);
  // Kahan's compensation recovers the lost ones in fp16 (the total 4096 is an fp16 value).
  EXPECT_EQ(sum(parse_accumulation("fp16-kahan"), ones), 4096.0);
  // As a dot product of ones with ones the same holds.
  EXPECT_EQ(dot(parse_accumulation("fp16-seq"), ones, ones), 2048.0);
  EXPECT_EQ(dot(parse_accumulation("bf16-unfused-seq"), ones, ones), 256.0);
}

TEST(AccumulateFacts, StochasticRoundingDoesNotStagnate) {
  const std::vector<double> ones(4096, 1.0);
  const double s = sum(parse_accumulation("fp16-sr"), ones, StochasticBits{7, 0});
  // Unbiased rounding: the expected value is 4096; beyond 2048 each step has spread ±1 ulp = 2.
  EXPECT_GT(s, 3500.0);
  EXPECT_LT(s, 4700.0);
  // Deterministic in (seed, stream).
  EXPECT_EQ(s, sum(parse_accumulation("fp16-sr"), ones, StochasticBits{7, 0}));
  EXPECT_NE(s, sum(parse_accumulation("fp16-sr"), ones, StochasticBits{8, 0}));
}

TEST(AccumulateFacts, FusedVersusUnfusedDiffer) {
  // NUMERICS.md trap 1: 2^-24 + 1.75·(439/256). The exact product 3.0009765625 is an fp16 midpoint; fused, the
  // 2^-24 already in the accumulator breaks the tie upward (3.001953125); unfused, the product rounds to even
  // (3.0) first and the tiny term is then lost.
  const std::vector<double> x{0x1p-24, 1.75}, y{1.0, 439.0 / 256.0};
  EXPECT_EQ(dot(parse_accumulation("fp16-seq"), x, y), 3.001953125);
  EXPECT_EQ(dot(parse_accumulation("fp16-unfused-seq"), x, y), 3.0);
  // An unfused MAC with an fp32 product format rounds nothing in the product: same as fused here.
  EXPECT_EQ(dot(parse_accumulation("acc=fp16,unfused,product=fp32"), x, y), 3.001953125);
}

TEST(AccumulateFacts, PresetsRoundTripThroughCanonical) {
  const auto& names = preset_accumulation_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Accumulation a = parse_accumulation(names[i]);
    // A preset prints as its own name, unless it is the same model as an earlier preset (tc-ada is tc-a100,
    // tc-b200 is tc-h100): then as that earlier name.
    std::size_t first = 0;
    while (!(parse_accumulation(names[first]) == a)) ++first;
    EXPECT_EQ(canonical(a), names[first]) << names[i];
    EXPECT_EQ(parse_accumulation(canonical(a)), a) << names[i];
  }
  EXPECT_EQ(canonical(parse_accumulation("tc-b200")), "tc-h100");
  EXPECT_EQ(canonical(parse_accumulation("tc-ada-bf16")), "tc-a100-bf16");
  EXPECT_EQ(canonical(parse_accumulation("tc-v100,feed=even-pairs-first")),
            "acc=fp32:toward-zero,order=seq,fused,group=4,extra=0,align=toward-zero,normalize=toward-zero,carry=6,"
            "anchor=exp-sum:-14,edges=inf-pos-zero,feed=even-pairs-first");
  EXPECT_THROW(parse_accumulation("tc-v100,feed=odd"), std::invalid_argument);
  EXPECT_THROW(parse_accumulation("acc=fp32,group=3,feed=even-pairs-first"), std::invalid_argument);  // odd group
  EXPECT_THROW(parse_accumulation("acc=fp32,feed=even-pairs-first"), std::invalid_argument);  // no adder
  const char* specs[] = {
      "acc=fp16:nearest-even,order=blocked:32,outer=fp32,fused",
      "acc=bf16:toward-zero,order=pairwise,unfused,product=bf16",
      "acc=fp16,order=reverse,promote=64:bf16",
      "acc=p11:emin-14:emax15:up,order=kahan",
      "acc=fp32:toward-zero,group=8,extra=3,align=nearest-even,normalize=nearest-even,carry=1",
      "fp16-seq,order=reverse",
      "acc=fp32,tile=4",
      "acc=bf16:up,order=reverse,unfused,product=fp16,tile=3:p11:emin-14:emax15:nearest-even",
      "ane-tile4,tile=8:bf16",
      "tc-h100,splitk=3:64",
      "tc-h100-fp8,promote=128:fp32,splitk=12:128",
      "fp16-sr,outer=bf16,splitk=5:1:stochastic",
      "acc=fp16,order=pairwise,splitk=2:1:toward-zero",
      "tc-h100-fp8-mma,promote=64:fp32",
      "acc=fp16,group=8,extra=3,normalize=nearest-even,feed=even-pairs-first",
  };
  for (const char* spec : specs) {
    const Accumulation a = parse_accumulation(spec);
    EXPECT_EQ(parse_accumulation(canonical(a)), a) << spec << " -> " << canonical(a);
  }
  EXPECT_EQ(parse_accumulation("fp16-seq,order=reverse"), parse_accumulation("fp16-reverse"));
}

TEST(AccumulateFacts, BadSpecsNameTheToken) {
  auto message = [](const std::string& text) {
    try {
      parse_accumulation(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("fp17-seq").find("fp17-seq"), std::string::npos);
  EXPECT_NE(message("fp17-seq").find("fp16-pairwise"), std::string::npos);  // lists presets
  EXPECT_NE(message("acc=fp16,order=zigzag").find("zigzag"), std::string::npos);
  EXPECT_NE(message("acc=fp16,colour=red").find("colour"), std::string::npos);
  EXPECT_NE(message("acc=fp99").find("fp99"), std::string::npos);
  EXPECT_NE(message("acc=fp16,order=blocked:x").find("'x'"), std::string::npos);
  EXPECT_NE(message("acc=fp16,order=pairwise,promote=128").find("promotion"), std::string::npos);
  EXPECT_NE(message("acc=fp16,order=blocked:0").find("block size"), std::string::npos);
  EXPECT_NE(message("acc=fp32,group=4,normalize=stochastic").find("stochastic"), std::string::npos);
  EXPECT_NE(message("acc=fp32,tile=4:fp16:stochastic").find("tile rounding cannot be stochastic"), std::string::npos);
  EXPECT_NE(message("acc=fp32,tile=4:fp99").find("fp99"), std::string::npos);
  EXPECT_NE(message("acc=fp32,tile=-1").find("'-1'"), std::string::npos);
  EXPECT_NE(message("acc=fp32,tile=300").find("0..256"), std::string::npos);
  EXPECT_NE(message("acc=fp32,order=pairwise,tile=4").find("order=seq"), std::string::npos);
  EXPECT_NE(message("acc=fp32,group=4,tile=4").find("multi-term adder"), std::string::npos);
  EXPECT_NE(message("acc=fp32,promote=8,tile=4").find("promotion"), std::string::npos);
  EXPECT_NE(message("acc=fp32,tile=0:bf16").find("tile size is 0"), std::string::npos);
  EXPECT_NE(message("fp16-splitk32-fp32,splitk=4").find("order=blocked"), std::string::npos);
  EXPECT_NE(message("tc-h100,splitk=4:0").find("granule"), std::string::npos);
  EXPECT_NE(message("tc-h100,splitk=0:64").find("count is 0"), std::string::npos);
  EXPECT_NE(message("tc-h100,splitk=x").find("'x'"), std::string::npos);
  EXPECT_NE(message("tc-h100,splitk=4:64:sideways").find("sideways"), std::string::npos);
  EXPECT_NE(message("tc-h100,splitk=2000000").find("0..1048576"), std::string::npos);
}

TEST(AccumulateFacts, SplitKChunksAndSumsAsSpecified) {
  // fp32 accumulator, terms 1, 2^-24, 2^-24, 2^-24: sequentially each 2^-24 is a tie that rounds back to 1. Cut
  // in two chunks (1, 2^-24) → 1 and (2^-24, 2^-24) → 2^-23, whose sum 1 + 2^-23 is exact.
  const std::vector<double> x = {1.0, 0x1p-24, 0x1p-24, 0x1p-24};
  EXPECT_EQ(sum(parse_accumulation("fp32-seq"), x), 1.0);
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,splitk=2"), x), 1.0 + 0x1p-23);
  // Three chunks of L = ceil(4/3) = 2 terms: only two hold terms, the same result.
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,splitk=3"), x), 1.0 + 0x1p-23);
  // Granule 4: L = 4·ceil(4/8) = 4, one chunk: the unsplit result.
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,splitk=2:4"), x), 1.0);
  // Four chunks of one term: 1 + 2^-24 → 1 (tie to even), three times.
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,splitk=4"), x), 1.0);
  // The chunk sum has its own rounding: 1 + 2^-23 rounded up to bf16 is 1 + 2^-7; toward zero, 1.
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,outer=bf16,splitk=2:1:up"), x), 1.0 + 0x1p-7);
  EXPECT_EQ(sum(parse_accumulation("fp32-seq,outer=bf16,splitk=2"), x), 1.0);
  EXPECT_EQ(result_format(parse_accumulation("fp32-seq,outer=bf16,splitk=2")), formats::bf16);
  // A stochastic chunk sum draws real bits even when the accumulator rounds deterministically: chunks 1 and
  // 2^-9, whose sum lies a quarter of bf16's gap 2^-7 above 1, round up for about a quarter of the seeds.
  const Accumulation sr = parse_accumulation("fp32-seq,outer=bf16,splitk=2:1:stochastic");
  int up = 0;
  for (std::uint64_t seed = 0; seed < 4000; ++seed)
    up += sum(sr, std::vector<double>{1.0, 0x1p-9}, StochasticBits{seed, 0}) > 1.0;
  EXPECT_GT(up, 800);
  EXPECT_LT(up, 1200);
  // Chunk lengths L = G·ceil(n/(G·S)) of the cuBLAS kernels fitted in docs/studies/tensorcore.md:
  EXPECT_EQ(splitk_chunk(SplitK{3, 64}, 4096), 1408u);    // cuBLAS nvjet, 256x256x4096: 1408, 1408, 1280
  EXPECT_EQ(splitk_chunk(SplitK{12, 64}, 16384), 1408u);  // 128x128x16384: 11 chunks of 1408, one of 896
  EXPECT_EQ(splitk_chunk(SplitK{6, 32}, 1024), 192u);     // CUTLASS tf32, 64x2816x1024: 5 of 192, one of 64
  EXPECT_EQ(splitk_chunk(SplitK{3, 1}, 0), 0u);
  EXPECT_EQ(splitk_chunk(SplitK{}, 10), 10u);
  // gemm with accumulate: the total starts at C, the chunks from zero. C = 1, terms 2^-24 ×4 in fp32 chunks of 2:
  // each chunk is 2^-23, 1 + 2^-23 + 2^-23 = 1 + 2^-22 exactly; sequentially from C each 2^-24 is lost.
  const std::vector<double> A = {0x1p-24, 0x1p-24, 0x1p-24, 0x1p-24}, B = {1, 1, 1, 1};
  double c = 1.0;
  gemm(parse_accumulation("fp32-seq,splitk=2"), 1, 1, 4, ConstMatrix{A.data(), 4}, ConstMatrix{B.data(), 1}, &c, 1,
       true);
  EXPECT_EQ(c, 1.0 + 0x1p-22);
  c = 1.0;
  gemm(parse_accumulation("fp32-seq"), 1, 1, 4, ConstMatrix{A.data(), 4}, ConstMatrix{B.data(), 1}, &c, 1, true);
  EXPECT_EQ(c, 1.0);
  // No SIMD kernel claims a split-K accumulation (they would compute the unsplit sum).
  for (const char* name : {"fp32-seq,splitk=2", "fp16-seq,splitk=4:16", "ane-tile4,splitk=2", "bf16-seq,splitk=1"}) {
    EXPECT_EQ(kernels::kernel_name(parse_accumulation(name)), nullptr) << name;
    EXPECT_EQ(row_kernel_name(parse_accumulation(name)), nullptr) << name;
  }
}

TEST(AccumulateFacts, AneGuideWorkedSumGives5116) {
  // ane-guide part 1 ch. 3: one 4096 followed by 1024 ones, summed by the ANE through a matmul against ones,
  // reads back 5116. Under ane-tile4 the first tile 4096+1+1+1 = 4099 rounds toward zero to the fp16 value 4096,
  // the other 255 full tiles and the ragged last one are exact, the fp32 sum is 5117 and the fp16 output rounding
  // (half to even) gives 5116. Rounding the tiles to nearest instead would give 4100 + 1021 = 5121 -> 5120.
  std::vector<double> x(1025, 1.0);
  x[0] = 4096.0;
  const Accumulation ane = parse_accumulation("ane-tile4");
  const double s = sum(ane, x);
  EXPECT_EQ(s, 5117.0);
  EXPECT_EQ(round_to(formats::fp16, Rounding::NearestEven, s), 5116.0);
  EXPECT_EQ(round_to(formats::fp16, Rounding::NearestEven, dot(ane, x, std::vector<double>(1025, 1.0))), 5116.0);
  EXPECT_EQ(round_to(formats::fp16, Rounding::NearestEven, sum(parse_accumulation("ane-tile4,tile=4:fp16:nearest-even"), x)),
            5120.0);
  EXPECT_EQ(sum(parse_accumulation("fp16-seq"), x), 4096.0);  // the naive fp16 running sum
  // "A reduction of sixteen thousand ones is bit exact."
  EXPECT_EQ(sum(ane, std::vector<double>(16000, 1.0)), 16000.0);
  // The cancellation triple (big, -big, 1) x 16 keeps all sixteen ones for the magnitudes the guide reports 16 for.
  for (const double big : {1024.0, 3000.0, 4090.0}) {
    std::vector<double> v;
    for (int i = 0; i < 16; ++i) v.insert(v.end(), {big, -big, 1.0});
    EXPECT_EQ(sum(ane, v), 16.0) << big;
  }
}

TEST(AccumulateFacts, SpecialsPropagate) {
  const Accumulation a = parse_accumulation("fp16-seq");
  EXPECT_TRUE(std::isnan(sum(a, std::vector<double>{1.0, kInf, -kInf})));
  EXPECT_TRUE(std::isnan(sum(a, std::vector<double>{1.0, std::nan(""), 2.0})));
  EXPECT_EQ(sum(a, std::vector<double>{1.0, kInf, 2.0}), kInf);
  EXPECT_TRUE(std::isnan(dot(a, std::vector<double>{kInf}, std::vector<double>{0.0})));
  EXPECT_EQ(sum(a, std::vector<double>{}), 0.0);
}

TEST(AccumulateFacts, OverflowIsCountedOnce) {
  const Accumulation a = parse_accumulation("fp16-seq");
  AccumStats st;
  const std::vector<double> big(8, 60000.0);
  EXPECT_EQ(sum(a, big, {}, &st), kInf);
  EXPECT_EQ(st.overflows, 1);  // inf is absorbing: later steps have a non-finite operand
  EXPECT_EQ(st.terms, 8);
  // Saturating accumulator: the result sticks at max_finite and every saturating step counts.
  Accumulation sat = a;
  sat.format.saturate = true;
  AccumStats st2;
  EXPECT_EQ(sum(sat, big, {}, &st2), 65504.0);
  EXPECT_EQ(st2.overflows, 7);
  // A sum that reaches max_finite exactly is not an overflow.
  AccumStats st3;
  EXPECT_EQ(sum(sat, std::vector<double>{65504.0, 0.0}, {}, &st3), 65504.0);
  EXPECT_EQ(st3.overflows, 0);
  // IEEE 754 §7.4: 65504 + 8 = 65512 rounds to nearest 65504 (below 65520, half an ulp up): no overflow.
  AccumStats st4;
  EXPECT_EQ(sum(a, std::vector<double>{65504.0, 8.0}, {}, &st4), 65504.0);
  EXPECT_EQ(st4.overflows, 0);
  // Toward zero, 65504 + 65504 gives max_finite and is an overflow (the unbounded result exceeds it).
  AccumStats st5;
  EXPECT_EQ(sum(parse_accumulation("acc=fp16:toward-zero"), std::vector<double>{65504.0, 65504.0}, {}, &st5), 65504.0);
  EXPECT_EQ(st5.overflows, 1);
}

TEST(AccumulateFacts, GemmShapesAreChecked) {
  const Accumulation a = parse_accumulation("fp16-seq");
  std::vector<double> A(6, 1.0), B(6, 1.0), C(4, 0.0);
  EXPECT_THROW(gemm(a, 2, 2, 3, ConstMatrix{A.data(), 2}, ConstMatrix{B.data(), 2}, C.data(), 2),
               std::invalid_argument);  // lda 2 < K 3
  EXPECT_THROW(gemm(a, 2, 2, 3, ConstMatrix{A.data(), 3}, ConstMatrix{B.data(), 1}, C.data(), 2),
               std::invalid_argument);  // ldb 1 < N 2
  EXPECT_THROW(gemm(a, 2, 2, 3, ConstMatrix{A.data(), 3}, ConstMatrix{B.data(), 2}, C.data(), 1),
               std::invalid_argument);  // ldc 1 < N 2
  EXPECT_THROW(gemm(a, 2, 2, 3, ConstMatrix{nullptr, 3}, ConstMatrix{B.data(), 2}, C.data(), 2),
               std::invalid_argument);
  EXPECT_NO_THROW(gemm(a, 2, 2, 3, ConstMatrix{A.data(), 3}, ConstMatrix{B.data(), 2}, C.data(), 2));
  EXPECT_EQ(C[0], 3.0);
}

/// Random fp16 values (N(0,1) rounded), with a few specials.
std::vector<double> random_fp16(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, 1.0);
  const RoundingPlan plan(formats::fp16);
  std::vector<double> v(n);
  for (auto& x : v) x = round_to(plan, Rounding::NearestEven, d(rng));
  return v;
}

TEST(AccumulateFacts, GemmMatchesDotAndIsThreadCountInvariant) {
  std::mt19937_64 rng(11);
  const std::size_t M = 7, N = 5, K = 37;
  const auto A = random_fp16(M * K, rng), Bt = random_fp16(N * K, rng);  // B stored transposed (N×K)
  for (const char* name : {"fp16-seq", "fp16-pairwise", "fp16-splitk16-fp32", "fp16-sr", "tc-v100", "bf16-kahan",
                           "fp16-seq,splitk=3:4", "tc-h100,splitk=4:8", "fp16-sr,splitk=2:1:stochastic"}) {
    const Accumulation a = parse_accumulation(name);
    std::vector<double> C1(M * N, 0.5), C2(M * N, 0.5);
    AccumStats s1, s2;
    gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{Bt.data(), K, true}, C1.data(), N, true, {3, 9}, &s1, 1);
    gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{Bt.data(), K, true}, C2.data(), N, true, {3, 9}, &s2, 2);
    for (std::size_t k = 0; k < M * N; ++k) EXPECT_EQ(C1[k], C2[k]) << name;
    EXPECT_EQ(s1.terms, static_cast<std::int64_t>(M * N * K));
    // Without accumulate, each output equals dot() on the row and column (stream i·N + j).
    std::vector<double> C3(M * N, 0.0);
    gemm(a, M, N, K, ConstMatrix{A.data(), K}, ConstMatrix{Bt.data(), K, true}, C3.data(), N, false, {3, 9}, nullptr, 2);
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        EXPECT_EQ(C3[i * N + j], dot(a, A.data() + i * K, 1, Bt.data() + j * K, 1, K, StochasticBits{3, 9 + i * N + j}))
            << name << " " << i << "," << j;
  }
}

TEST(AccumulateFacts, H100AdderAnchorsOnExponentSumsAndHasItsOwnEdges) {
  // 1.5·1.5 = 2.25 has its leading bit at 2^1 but its exponent sum is 0. With -1.5·1.25 = -1.875 (exponent sum
  // 0) and 2^-13·2^-12 = 2^-25: the exp-sum anchor is 0, so the register keeps bits down to 2^(0-23-2) = 2^-25 and
  // the sum 0.375 + 2^-25 is exact in binary32; the leading-bit anchor is 1, keeps only 2^-24 and truncates the
  // 2^-25 away.
  const Accumulation h100 = parse_accumulation("tc-h100");
  const Accumulation lead = parse_accumulation("tc-h100,anchor=lead");
  const std::vector<double> x = {1.5, -1.5, 0x1p-13}, y = {1.5, 1.25, 0x1p-12};
  EXPECT_EQ(dot(h100, x, y), 0.375 + 0x1p-25);
  EXPECT_EQ(dot(lead, x, y), 0.375);
  // Subnormal factors count with the input format's emin: 2^-20 (an fp16 subnormal) anchors at -14, which lifts
  // the register's last kept bit to 2^(-14-25) and truncates the 2^-42 product; anchored at its own exponent
  // (emin -24) the last kept bit is 2^-45 and 2^-20 + 2^-42 is exact in binary32.
  const std::vector<double> xs = {0x1p-20, 0x1p-24}, ys = {1.0, 0x1p-18};
  EXPECT_EQ(dot(h100, xs, ys), 0x1p-20);
  EXPECT_EQ(dot(parse_accumulation("tc-h100,anchor=exp-sum:-24"), xs, ys), 0x1p-20 + 0x1p-42);
  // Overflow is inf even though the normalisation truncates; IEEE toward-zero edges give max_finite.
  const Accumulation bf = parse_accumulation("tc-h100-bf16");
  const Accumulation bf_ieee = parse_accumulation("tc-h100-bf16,edges=ieee");
  const std::vector<double> big = {0x1.8p127}, two = {2.0};
  EXPECT_EQ(dot(bf, big, two), HUGE_VAL);
  EXPECT_EQ(dot(bf_ieee, big, two), max_finite(formats::fp32));
  // An underflow to zero is +0, where IEEE toward-zero keeps the sign.
  const std::vector<double> tiny = {-0x1p-100}, tiny2 = {0x1p-100};
  EXPECT_FALSE(std::signbit(dot(bf, tiny, tiny2)));
  EXPECT_TRUE(std::signbit(dot(bf_ieee, tiny, tiny2)));
  EXPECT_EQ(dot(bf_ieee, tiny, tiny2), 0.0);
  // The text form round-trips and names what is wrong.
  for (const char* name : {"tc-h100", "tc-h100-bf16", "tc-h100-tf32", "tc-h100-f16acc", "tc-h100-fp8",
                           "tc-h100-fp8-e5m2"}) {
    const Accumulation a = parse_accumulation(name);
    EXPECT_EQ(parse_accumulation(spec_text(a)), a) << name;
    EXPECT_EQ(canonical(a), name);
  }
  EXPECT_THROW(parse_accumulation("tc-h100,anchor=exp-sum:x"), std::invalid_argument);
  EXPECT_THROW(parse_accumulation("tc-h100,edges=wrap"), std::invalid_argument);
  EXPECT_THROW(parse_accumulation("acc=fp32,group=4,anchor=exp-sum:0"), std::invalid_argument);
  EXPECT_THROW(parse_accumulation("acc=e4m3,group=4,edges=inf-pos-zero"), std::invalid_argument);
}

}  // namespace
}  // namespace roundoff::numerics
