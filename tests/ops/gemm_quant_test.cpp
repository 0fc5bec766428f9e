// Block-quantized GEMM operands (ops/gemm_quant.hpp, ops/matmul_quant.hpp; issue 41 item 3): the quantized matmul
// passes against a written-out definition, the RHT (orthogonal, exact product kept, written out), stochastic element
// rounding (deterministic over thread counts, only where switched on, tied to the library's nearest-even chain),
// the policy text (canonical round trips of every block preset and of the recipe switches removed) and the refusals.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/block_format.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/pack_cache_derived.hpp"
#include "numerics/round.hpp"
#include "numerics/scale_format.hpp"
#include "ops/gemm_quant.hpp"
#include "ops/matmul.hpp"
#include "ops/policy.hpp"
#include "ops/runner.hpp"
#include "tests/ops/ops_test_util.hpp"

namespace roundoff::ops {
namespace {

namespace fmts = numerics::formats;
using numerics::BlockFormat;
using numerics::parse_block_format;

// ---- written-out definitions --------------------------------------------------------------------------------

/// m (rows × cols, row-major) transposed.
std::vector<double> transpose(const std::vector<double>& m, std::size_t rows, std::size_t cols) {
  std::vector<double> t(m.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

/// v (rows × K) quantized in blocks along K and decoded to fp32: numerics::quantize + dequantize, nothing else.
std::vector<double> quant_dequant(const BlockFormat& f, const std::vector<double>& v, std::size_t K) {
  const numerics::BlockCodes q = numerics::quantize(f, v, K);
  return numerics::dequantize(f, q.codes, q.scales, q.tensor_scale, fmts::fp32, q.biases, K);
}

/// Every element rounded to storage (the entry cast, nearest-even).
std::vector<double> cast(const std::vector<double>& v, const numerics::Format& f) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = numerics::round_to(f, numerics::Rounding::NearestEven, v[i]);
  return r;
}

/// C (M × N) = A (M × K) · B (K × N), each element numerics::dot under `acc` in k order, then rounded to compute and
/// storage (both the entry's `f`), added to C's old value first when `add` (the beta = 1 GEMM: the old value enters the
/// accumulator first, as numerics::gemm does).
std::vector<double> plain_gemm(const numerics::Accumulation& acc, const numerics::Format& f, std::size_t M,
                               std::size_t N, std::size_t K, const std::vector<double>& A, const std::vector<double>& B,
                               const std::vector<double>* c0) {
  std::vector<double> C(M * N);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      std::vector<double> a, b;
      if (c0 != nullptr) {
        a.push_back((*c0)[i * N + j]);
        b.push_back(1.0);
      }
      for (std::size_t k = 0; k < K; ++k) {
        a.push_back(A[i * K + k]);
        b.push_back(B[k * N + j]);
      }
      const double s = numerics::dot(acc, a.data(), 1, b.data(), 1, a.size());
      C[i * N + j] = numerics::round_to(f, numerics::Rounding::NearestEven, s);
    }
  return C;
}

/// y = x·Wᵀ and friends with the operands quantized as the definition says (the test's own transposes).
struct Case {
  std::size_t n, in, out;
};

OpPrecision quantized_entry(const char* x, const char* w, const char* dy) {
  OpPrecision p{fmts::bf16, fmts::bf16, numerics::Rounding::NearestEven, sequential_in(fmts::fp32)};
  p.quant.format[index_of(GemmRole::X)] = parse_block_format(x);
  p.quant.format[index_of(GemmRole::W)] = parse_block_format(w);
  p.quant.format[index_of(GemmRole::Dy)] = parse_block_format(dy);
  return p;
}

/// The three passes under `p`, against the definition: entry cast to bf16, quantize along the pass's contraction axis
/// (the transposes written here), plain GEMM under the entry's Accumulation, rounded to bf16.
void check_passes(const OpPrecision& p, Case c, bool fast_paths) {
  const std::size_t N = c.n, I = c.in, O = c.out;
  const std::vector<double> x = test::randn(N * I, 1.0, fmts::fp32, 11), w = test::randn(O * I, 0.1, fmts::fp32, 12),
                            dy = test::randn(N * O, 1e-3, fmts::fp32, 13);
  ExecOptions exec;
  exec.fast_paths = fast_paths;
  const Ctx<Emulated> ctx(p, {}, exec);
  const MatmulShape s{static_cast<std::int64_t>(N), static_cast<std::int64_t>(I), static_cast<std::int64_t>(O)};
  const auto& fx = *p.quant.of(GemmRole::X);
  const auto& fw = *p.quant.of(GemmRole::W);
  const auto& fdy = *p.quant.of(GemmRole::Dy);
  const std::vector<double> xb = cast(x, fmts::bf16), wb = cast(w, fmts::bf16), dyb = cast(dy, fmts::bf16);
  // forward: x along in, W along in (W read as Wᵀ: B = transpose of the quantized W)
  {
    std::vector<double> y(N * O, 0.0);
    matmul_forward<Emulated>(y, x, w, s, ctx);
    const std::vector<double> want = plain_gemm(p.accumulate, fmts::bf16, N, O, I, quant_dequant(fx, xb, I),
                                                transpose(quant_dequant(fw, wb, I), O, I), nullptr);
    for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "fwd element " << i;
  }
  // bwd-data: dy along out, W along out (quantize Wᵀ (in × out) along its rows, then read back as W)
  {
    const std::vector<double> dx0 = cast(test::randn(N * I, 1e-3, fmts::fp32, 14), fmts::bf16);
    std::vector<double> dx = dx0;
    matmul_backward_data<Emulated>(dx, dy, w, s, ctx);
    const std::vector<double> wq =
        fw.block_rows > 1 ? quant_dequant(fw, wb, I) : transpose(quant_dequant(fw, transpose(wb, O, I), O), I, O);
    const std::vector<double> want =
        plain_gemm(p.accumulate, fmts::bf16, N, I, O, quant_dequant(fdy, dyb, O), wq, &dx0);
    for (std::size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], want[i]) << "bwd-data element " << i;
  }
  // bwd-weight: dyᵀ (out × n) along tokens, x along tokens (quantize xᵀ (in × n) along its rows)
  {
    const std::vector<double> dw0 = cast(test::randn(O * I, 1e-3, fmts::fp32, 15), fmts::bf16);
    std::vector<double> dw = dw0;
    matmul_backward_weight<Emulated>(dw, dy, x, s, ctx);
    const std::vector<double> a = quant_dequant(fdy, transpose(dyb, N, O), N);             // (out × n)
    const std::vector<double> b = transpose(quant_dequant(fx, transpose(xb, N, I), N), I, N);  // (n × in)
    const std::vector<double> want = plain_gemm(p.accumulate, fmts::bf16, O, I, N, a, b, &dw0);
    for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_EQ(dw[i], want[i]) << "bwd-weight element " << i;
  }
}

TEST(GemmQuant, MatmulPassesEqualTheDefinitionMx) {
  // ragged: n, in, out different multiples of 32, none a power of two
  for (bool fast : {true, false}) {
    check_passes(quantized_entry("mxfp8-e4m3", "mxfp8-e4m3", "mxfp8-e5m2"), {64, 96, 160}, fast);
    check_passes(quantized_entry("mxfp6-e3m2", "mxfp6-e2m3", "mxfp4"), {32, 64, 96}, fast);
    check_passes(quantized_entry("mxfp4:nv-ceil", "mxint8", "mxfp6-e3m2"), {96, 32, 64}, fast);
  }
}

TEST(GemmQuant, MatmulPassesEqualTheDefinitionNvfp4AndGroups) {
  for (bool fast : {true, false}) {
    check_passes(quantized_entry("nvfp4", "nvfp4-16x16", "nvfp4"), {48, 80, 32}, fast);
    check_passes(quantized_entry("int4-g32", "int4-g32", "nvfp4"), {32, 64, 96}, fast);
  }
}

TEST(GemmQuant, TwoDimensionalWeightsAreOneQuantizationForWAndWT) {
  const BlockFormat f = parse_block_format("nvfp4-16x16");
  const std::vector<double> w = test::randn(48 * 80, 0.1, fmts::fp32, 21);
  const std::vector<double> a = quant_dequant(f, w, 80);
  const std::vector<double> b = transpose(quant_dequant(f, transpose(w, 48, 80), 48), 80, 48);
  EXPECT_EQ(a, b);
  // and the operand helper gives the same values in both passes' axes
  std::vector<double> fwd(w.size()), bwd(w.size());
  quantize_operand(f, w, 48, 80, true, false, 0, nullptr, fwd, "t");
  quantize_operand(f, w, 48, 80, false, false, 0, nullptr, bwd, "t");
  EXPECT_EQ(fwd, a);
  EXPECT_EQ(bwd, a);
}

TEST(GemmQuant, Nf4RunsOverTheFlattenedTensor) {
  // bitsandbytes' blocks of 64 over the flat storage: a 12 × 48 weight (576 = 9 blocks, rows of 48 not a multiple)
  const BlockFormat f = parse_block_format("nf4");
  const std::vector<double> w = test::randn(12 * 48, 0.1, fmts::fp32, 22);
  std::vector<double> out(w.size());
  quantize_operand(f, w, 12, 48, true, false, 0, nullptr, out, "t");
  EXPECT_EQ(out, quant_dequant(f, w, w.size()));
}

// ---- the RHT ----------------------------------------------------------------------------------------------

TEST(GemmQuant, RhtMatrixIsOrthogonalAndWrittenOut) {
  for (std::uint64_t seed : {std::uint64_t{1}, kDefaultRhtSeed, std::uint64_t{0xDEADBEEF}}) {
    const auto q = rht_matrix(seed);
    const auto s = rht_signs(seed);
    for (std::size_t i = 0; i < kRhtSize; ++i)
      for (std::size_t j = 0; j < kRhtSize; ++j) {
        // Sylvester H_16 by its recursion H_2n = [[H, H], [H, -H]]: the sign of entry (i, j) flips once per bit where
        // both indices are 1.
        int sign = 1;
        for (int b = 0; b < 4; ++b)
          if (((i >> b) & 1) != 0 && ((j >> b) & 1) != 0) sign = -sign;
        EXPECT_EQ(q[i * kRhtSize + j], s[i] * sign * 0.25);
        double dotp = 0;  // (Q Qᵀ)_ij: exact, every term ±1/16
        for (std::size_t k = 0; k < kRhtSize; ++k) dotp += q[i * kRhtSize + k] * q[j * kRhtSize + k];
        EXPECT_EQ(dotp, i == j ? 1.0 : 0.0);
      }
    int negatives = 0;
    for (double v : s) negatives += v < 0 ? 1 : 0;
    EXPECT_GT(negatives, 0);
    EXPECT_LT(negatives, 16);
  }
  EXPECT_NE(rht_signs(1), rht_signs(2));
}

TEST(GemmQuant, RhtKeepsTheExactProduct) {
  // Small integers: every transformed value (a sum of ±v/4) and every product sum is exact in fp32 and binary64, so
  // A'·B' == A·B must hold exactly (QQᵀ = I).
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> d(-8, 8);
  const std::size_t M = 5, K = 48, N = 3;
  std::vector<double> A(M * K), B(K * N);
  for (double& v : A) v = d(rng);
  for (double& v : B) v = d(rng);
  std::vector<double> Aq(A.size()), Bq(B.size());
  quantize_operand(std::nullopt, A, M, K, true, true, 77, nullptr, Aq, "A");   // K = A's columns
  quantize_operand(std::nullopt, B, K, N, false, true, 77, nullptr, Bq, "B");  // K = B's rows
  EXPECT_NE(Aq, A);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double exact = 0, transformed = 0;
      for (std::size_t k = 0; k < K; ++k) {
        exact += A[i * K + k] * B[k * N + j];
        transformed += Aq[i * K + k] * Bq[k * N + j];
      }
      EXPECT_EQ(transformed, exact) << i << "," << j;
    }
  // a different seed on one side breaks it (the check can fail)
  quantize_operand(std::nullopt, B, K, N, false, true, 78, nullptr, Bq, "B");
  double diff = 0;
  for (std::size_t j = 0; j < N; ++j) {
    double exact = 0, transformed = 0;
    for (std::size_t k = 0; k < K; ++k) {
      exact += A[k] * B[k * N + j];
      transformed += Aq[k] * Bq[k * N + j];
    }
    diff += std::fabs(transformed - exact);
  }
  EXPECT_GT(diff, 0);
}

TEST(GemmQuant, RhtEqualsTheWrittenOutTransform) {
  const std::vector<double> v = test::randn(3 * 32, 1.0, fmts::bf16, 31);
  std::vector<double> got(v.size());
  quantize_operand(std::nullopt, v, 3, 32, true, true, 9, nullptr, got, "v");
  const auto s = rht_signs(9);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t blk = 0; blk < 2; ++blk)
      for (std::size_t j = 0; j < 16; ++j) {
        double acc = 0;
        for (std::size_t i = 0; i < 16; ++i) {
          const double h = std::popcount(i & j) % 2 == 0 ? 1.0 : -1.0;
          acc += v[r * 32 + blk * 16 + i] * (s[i] * h / 4);
        }
        EXPECT_EQ(got[r * 32 + blk * 16 + j], static_cast<double>(static_cast<float>(acc)));
      }
}

TEST(GemmQuant, RhtWgradMatchesTheDefinition) {
  // bwd-weight with rht: both operands transformed along tokens before quantization
  OpPrecision p = quantized_entry("nvfp4", "nvfp4", "nvfp4");
  p.quant.rht = true;
  const std::size_t N = 64, I = 48, O = 32;
  const std::vector<double> x = test::randn(N * I, 1.0, fmts::fp32, 41), dy = test::randn(N * O, 1e-3, fmts::fp32, 42);
  std::vector<double> dw(O * I, 0.0);
  matmul_backward_weight<Emulated>(dw, dy, x, {64, 48, 32}, Ctx<Emulated>(p));
  std::vector<double> a = transpose(cast(dy, fmts::bf16), N, O), bt = transpose(cast(x, fmts::bf16), N, I);
  rht_rows(a, N, kDefaultRhtSeed);
  rht_rows(bt, N, kDefaultRhtSeed);
  const BlockFormat f = parse_block_format("nvfp4");
  const std::vector<double> want = plain_gemm(p.accumulate, fmts::bf16, O, I, N, quant_dequant(f, a, N),
                                              transpose(quant_dequant(f, bt, N), I, N), nullptr);
  EXPECT_EQ(dw, want);
}

// ---- stochastic rounding ----------------------------------------------------------------------------------

/// The stochastic chain shares the library's scales and replaces only the element rounding: every stochastic value
/// is the library's round-down or round-up value of that element (numerics::quantize with element_rounding Down / Up,
/// same scales), and some differ from nearest-even.
TEST(GemmQuant, StochasticElementsAreTheLibrarysDownOrUpValues) {
  for (const char* name : {"mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e2m3", "mxfp6-e3m2", "mxfp4", "mxfp4:nv-ceil",
                           "mxfp4:mlx-round", "nvfp4"}) {
    const BlockFormat f = parse_block_format(name);
    const std::size_t K = 64, R = 8;
    const std::vector<double> v = test::randn(R * K, 1.0, fmts::bf16, 51);
    std::vector<double> rn(v.begin(), v.end()), sr(v.begin(), v.end());
    quantize_rows(f, rn, K, nullptr, "rn");
    const QuantDraws d{{7, 9}, nullptr, static_cast<std::uint8_t>(Tensor::Dy)};
    quantize_rows(f, sr, K, &d, "sr");
    BlockFormat down = f, up = f;
    down.element_rounding = numerics::Rounding::Down;
    up.element_rounding = numerics::Rounding::Up;
    const std::vector<double> lo = quant_dequant(down, v, K), hi = quant_dequant(up, v, K);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      EXPECT_TRUE(sr[i] == lo[i] || sr[i] == hi[i]) << name << " " << i << ": " << sr[i] << " not in {" << lo[i]
                                                    << ", " << hi[i] << "}";
      if (sr[i] != rn[i]) ++differ;
    }
    EXPECT_GT(differ, 0u) << name;  // stochastic rounding does change some elements
  }
}

/// Stochastic quantization written out (gemm_quant.hpp step 4): the nearest-even quantization's scales, then each
/// element x_i rounded stochastically by round_parts (the definition, not round_to) with draw
/// bits.draw(key(tensor, element_of(i), kQuantSlot)) — MX: x/X; nvfp4: fp32(fp32(x)·enc), enc = fp32(1 /
/// (fp32(s_dec) · fp32(1/s_enc))) capped at FLT_MAX — its code numerics::element_code, decoded to fp32.
std::vector<double> sr_written_out(const BlockFormat& f, const std::vector<double>& v, std::size_t K,
                                   numerics::StochasticBits bits, Tensor t, const std::vector<std::size_t>& element_of) {
  numerics::BlockCodes q = numerics::quantize(f, v, K);
  const numerics::RoundingPlan elem(f.element.fp);
  const auto k = static_cast<std::size_t>(f.block_size);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t j = i / k;
    double x = 0;
    if (f.rule == numerics::ScaleRule::Nvfp4) {
      const auto s_dec = static_cast<float>(numerics::scale_value(f.scale, q.scales[j]));
      float enc = 1.0f / (s_dec * (1.0f / q.tensor_scale));
      if (std::isinf(enc)) enc = std::numeric_limits<float>::max();
      x = static_cast<double>(static_cast<float>(v[i]) * enc);
    } else {
      const double sv = numerics::scale_value(f.scale, q.scales[j]);
      if (std::isnan(sv)) continue;
      x = v[i] / sv;
    }
    std::uint64_t m = 0;
    int e = 0;
    if (x != 0) numerics::split_double(x, m, e);
    const std::uint64_t draw = bits.draw(key(t, element_of[i], kQuantSlot).bits);
    const double p = numerics::round_parts(elem, numerics::Rounding::Stochastic,
                                           numerics::ExactParts{std::signbit(x), m, e, false}, draw);
    q.codes[i] = static_cast<std::uint8_t>(numerics::element_code(f.element, p));
  }
  return numerics::dequantize(f, q.codes, q.scales, q.tensor_scale, fmts::fp32, q.biases, K);
}

/// quantize_operand with stochastic elements, K along the columns and along the rows (the transposed layout, whose
/// draws are keyed by the element's index in the operand as given), equals the written-out chain bit for bit.
TEST(GemmQuant, StochasticOperandsEqualTheWrittenOutChain) {
  for (const char* name : {"mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e2m3", "mxfp6-e3m2", "mxfp4", "mxfp4:nv-ceil", "nvfp4"}) {
    const BlockFormat f = parse_block_format(name);
    const std::size_t R = 64, C = 96;  // both multiples of 32 (and 16)
    std::vector<double> v = test::randn(R * C, 1.0, fmts::bf16, 71);
    v[5] = 0.0;
    v[6] = -0.0;
    v[7] = 1e-30;  // far below every element's quantum
    const numerics::StochasticBits bits{11, 13};
    const QuantDraws d{bits, nullptr, static_cast<std::uint8_t>(Tensor::Dy)};
    // K = the columns: element i is position i
    std::vector<std::size_t> ident(R * C);
    for (std::size_t i = 0; i < ident.size(); ++i) ident[i] = i;
    std::vector<double> got(R * C);
    quantize_operand(f, v, R, C, true, false, 0, &d, got, "t");
    const std::vector<double> want = sr_written_out(f, v, C, bits, Tensor::Dy, ident);
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i])) << name << " cols " << i;
    // K = the rows: quantize vᵀ (C × R) along its rows; position c·R + r is element r·C + c
    std::vector<std::size_t> of(R * C);
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t r = 0; r < R; ++r) of[c * R + r] = r * C + c;
    quantize_operand(f, v, R, C, false, false, 0, &d, got, "t");
    const std::vector<double> want_t = transpose(sr_written_out(f, transpose(v, R, C), R, bits, Tensor::Dy, of), C, R);
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(got[i] == want_t[i] && std::signbit(got[i]) == std::signbit(want_t[i])) << name << " rows " << i;
  }
}

// ---- the kept weight quantization (pack cache, derived operands) -------------------------------------------

/// y = x·Wᵀ and dx = dy·W of shape s into fresh zeroed outputs (the kept-operand tests compare them across contexts).
std::vector<double> forward_of(const Ctx<Emulated>& c, const std::vector<double>& x, const std::vector<double>& w,
                               MatmulShape s) {
  std::vector<double> y(static_cast<std::size_t>(s.n * s.out), 0.0);
  matmul_forward<Emulated>(y, x, w, s, c);
  return y;
}
std::vector<double> backward_data_of(const Ctx<Emulated>& c, const std::vector<double>& dy,
                                     const std::vector<double>& w, MatmulShape s) {
  std::vector<double> dx(static_cast<std::size_t>(s.n * s.in), 0.0);
  matmul_backward_data<Emulated>(dx, dy, w, s, c);
  return dx;
}

/// While W is registered immutable with the Ctx's pack cache, its cast and quantization are kept and reused (a hit per
/// later call) with the same bits as a Ctx without a cache; a new version (the weights changed) is quantized afresh
/// (a cache that kept the old quantization would give the old product); nothing is kept for an unregistered W or
/// with stochastic draws. nvfp4's 16×16 weight tiles are one entry for fwd and bwd-data (the storage layout).
TEST(GemmQuant, KeptWeightQuantizationHasTheBitsAndIsDroppedWhenWChanges) {
  for (const bool tiles : {false, true}) {
    const OpPrecision p = tiles ? quantized_entry("nvfp4", "nvfp4-16x16", "nvfp4")
                                : quantized_entry("mxfp8-e4m3", "mxfp8-e4m3", "mxfp8-e5m2");
    const std::size_t N = 32, I = 64, O = 96;
    const MatmulShape s{32, 64, 96};
    const std::vector<double> x = test::randn(N * I, 1.0, fmts::fp32, 81), dy = test::randn(N * O, 1e-3, fmts::fp32, 82);
    std::vector<double> w = test::randn(O * I, 0.1, fmts::fp32, 83);
    numerics::kernels::PackCache cache;
    ExecOptions with;
    with.pack_cache = &cache;
    const Ctx<Emulated> cached(p, {}, with), plain(p, {});
    const auto fwd = [&](const Ctx<Emulated>& c) { return forward_of(c, x, w, s); };
    const auto bwd = [&](const Ctx<Emulated>& c) { return backward_data_of(c, dy, w, s); };
    // unregistered: computed, nothing kept
    EXPECT_EQ(fwd(cached), fwd(plain));
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
    cache.register_immutable(w.data(), w.size(), 1);
    const std::vector<double> y1 = fwd(plain), dx1 = bwd(plain);
    EXPECT_EQ(fwd(cached), y1);
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 1u);
    EXPECT_EQ(fwd(cached), y1);
    EXPECT_EQ(bwd(cached), dx1);
    EXPECT_EQ(bwd(cached), dx1);
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, tiles ? 1u : 2u);
    EXPECT_EQ(numerics::kernels::derived_stats(cache).hits, tiles ? 3u : 2u);
    // the weights change (an optimiser update): the model registers a new version
    for (double& v : w) v = numerics::round_to(fmts::fp32, numerics::Rounding::NearestEven, v * 1.5 + 1e-3);
    cache.register_immutable(w.data(), w.size(), 2);
    const std::vector<double> y2 = fwd(plain), dx2 = bwd(plain);
    ASSERT_NE(y2, y1);
    ASSERT_NE(dx2, dx1);
    EXPECT_EQ(fwd(cached), y2);
    EXPECT_EQ(bwd(cached), dx2);
    EXPECT_EQ(fwd(cached), y2);
    // unregistered again: everything dropped, nothing kept
    cache.unregister_immutable(w.data());
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
    EXPECT_EQ(fwd(cached), y2);
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
    // stochastic entry casts: never kept
    cache.register_immutable(w.data(), w.size(), 3);
    OpPrecision sr = p;
    sr.rounding = numerics::Rounding::Stochastic;
    const Ctx<Emulated> sr_cached(sr, {1, 2}, with), sr_plain(sr, {1, 2});
    EXPECT_EQ(fwd(sr_cached), fwd(sr_plain));
    EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
  }
}

TEST(GemmQuant, KeptWeightEntryCastHasTheBitsAndIsDroppedWhenWChanges) {
  // The GEMMs without a cast in their packing (the tc-* adder kernels: h100-amp-bf16) keep a registered weight's
  // entry cast (ops/backend.cpp, weight_entry_cast): the same bits as casting afresh, one entry for the forward and
  // backward-data layouts, a new version casts again, another storage format never reads the kept cast, nothing is
  // kept unregistered. W is binary32 noise, so a stale or wrong cast changes the products.
  const Policy h100 = Policy::preset("h100-amp-bf16"), h100_fp16 = Policy::preset("h100-amp-fp16");
  const OpPrecision pf = h100.at(OpKind::Matmul, Pass::Forward), pb = h100.at(OpKind::Matmul, Pass::BackwardData);
  const OpPrecision pf16 = h100_fp16.at(OpKind::Matmul, Pass::Forward);
  ASSERT_NE(numerics::kernels::kernel_name(pf.accumulate), nullptr);  // the adder kernel runs
  const std::size_t N = 32, I = 64, O = 96;
  const MatmulShape s{32, 64, 96};
  const std::vector<double> x = test::randn(N * I, 1.0, fmts::bf16, 91), dy = test::randn(N * O, 1e-3, fmts::bf16, 92);
  std::vector<double> w = test::randn(O * I, 0.1, fmts::fp32, 93);
  numerics::kernels::PackCache cache;
  ExecOptions with;
  with.pack_cache = &cache;
  const Ctx<Emulated> fc(pf, {}, with), fp(pf, {}), bc(pb, {}, with), bp(pb, {}), f16c(pf16, {}, with), f16p(pf16, {});
  const auto fwd = [&](const Ctx<Emulated>& c) { return forward_of(c, x, w, s); };
  const auto bwd = [&](const Ctx<Emulated>& c) { return backward_data_of(c, dy, w, s); };
  EXPECT_EQ(fwd(fc), fwd(fp));  // unregistered: nothing kept
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
  cache.register_immutable(w.data(), w.size(), 1);
  const std::vector<double> y1 = fwd(fp), dx1 = bwd(bp), h1 = fwd(f16p);
  EXPECT_EQ(fwd(fc), y1);
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 1u);
  EXPECT_EQ(fwd(fc), y1);
  EXPECT_EQ(bwd(bc), dx1);
  EXPECT_EQ(bwd(bc), dx1);
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 1u);
  EXPECT_EQ(numerics::kernels::derived_stats(cache).hits, 3u);
  ASSERT_NE(h1, y1);
  EXPECT_EQ(fwd(f16c), h1);  // fp16 storage: its own cast
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 2u);
  // an optimiser update: a new version, cast again
  for (double& v : w) v = numerics::round_to(fmts::fp32, numerics::Rounding::NearestEven, v * 1.5 + 1e-3);
  cache.register_immutable(w.data(), w.size(), 2);
  const std::vector<double> y2 = fwd(fp), dx2 = bwd(bp);
  ASSERT_NE(y2, y1);
  EXPECT_EQ(fwd(fc), y2);
  EXPECT_EQ(bwd(bc), dx2);
  cache.unregister_immutable(w.data());
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
  EXPECT_EQ(fwd(fc), y2);
  EXPECT_EQ(numerics::kernels::derived_stats(cache).entries, 0u);
  // Scaled fp8 operands (te-fp8-current, ops/matmul_quant.cpp): the weight's cast kept, its fp8 quantization afresh.
  const Policy te = Policy::preset("te-fp8-current");
  const OpPrecision tf = te.at(OpKind::Matmul, Pass::Forward), tb = te.at(OpKind::Matmul, Pass::BackwardData);
  ASSERT_TRUE(tf.quant.fp8_of(GemmRole::W).on());
  numerics::kernels::PackCache cache8;
  ExecOptions with8;
  with8.pack_cache = &cache8;
  const Ctx<Emulated> tfc(tf, {}, with8), tfp(tf, {}), tbc(tb, {}, with8), tbp(tb, {});
  cache8.register_immutable(w.data(), w.size(), 1);
  const std::vector<double> y8 = fwd(tfp), dx8 = bwd(tbp);
  EXPECT_EQ(fwd(tfc), y8);
  EXPECT_EQ(fwd(tfc), y8);
  EXPECT_EQ(bwd(tbc), dx8);
  EXPECT_EQ(numerics::kernels::derived_stats(cache8).entries, 1u);
  EXPECT_EQ(numerics::kernels::derived_stats(cache8).hits, 2u);
  for (double& v : w) v = numerics::round_to(fmts::fp32, numerics::Rounding::NearestEven, v * 0.75 - 1e-3);
  cache8.register_immutable(w.data(), w.size(), 2);
  const std::vector<double> y9 = fwd(tfp);
  ASSERT_NE(y9, y8);
  EXPECT_EQ(fwd(tfc), y9);
}

TEST(GemmQuant, StochasticIsUnbiasedOnAverage) {
  // One value between two mxfp4 grid points, many keys: the mean of the draws approaches the value (bound: 6σ of the
  // Bernoulli mean), while nearest-even always gives the same neighbour.
  const BlockFormat f = parse_block_format("mxfp4");
  std::vector<double> block(32, 0.0);
  block[0] = 6.0;    // amax: scale 2^0 (floor(log2 6) = 2 = emax of e2m1)
  block[1] = 2.375;  // between 2 and 3: p(up) = 0.375
  double sum = 0;
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> v = block;
    const QuantDraws d{{1, static_cast<std::uint64_t>(t)}, nullptr, 0};
    quantize_rows(f, v, 32, &d, "t");
    ASSERT_TRUE(v[1] == 2.0 || v[1] == 3.0) << v[1];
    sum += v[1];
  }
  const double mean = sum / trials, sigma = std::sqrt(0.375 * 0.625 / trials);
  EXPECT_NEAR(mean, 2.375, 6 * sigma);
}

std::vector<double> run_wgrad(const OpPrecision& p, int threads, std::uint64_t stream) {
  const std::size_t N = 64, I = 32, O = 48;
  const std::vector<double> x = test::randn(N * I, 1.0, fmts::fp32, 61), dy = test::randn(N * O, 1e-3, fmts::fp32, 62);
  std::vector<double> dw(O * I, 0.0);
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  matmul_backward_weight<Emulated>(dw, dy, x, {64, 32, 48}, Ctx<Emulated>(p, {3, stream}));
  omp_set_num_threads(before);
  return dw;
}

TEST(GemmQuant, StochasticDrawsAreDeterministicAcrossThreadsAndOnlyWhereOn) {
  OpPrecision off = quantized_entry("nvfp4", "nvfp4", "nvfp4");
  OpPrecision on = off;
  on.quant.stochastic[index_of(GemmRole::Dy)] = true;
  const std::vector<double> a1 = run_wgrad(on, 1, 5), a2 = run_wgrad(on, 2, 5), a4 = run_wgrad(on, 4, 5);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(a1, a4);
  EXPECT_NE(a1, run_wgrad(on, 1, 6));    // another stream draws other bits
  EXPECT_NE(a1, run_wgrad(off, 1, 5));   // SR changes the result
  EXPECT_EQ(run_wgrad(off, 1, 5), run_wgrad(off, 1, 6));  // off: the stream is not read
  // SR on a role this pass does not read (W in bwd-weight) changes nothing
  OpPrecision w_only = off;
  w_only.quant.stochastic[index_of(GemmRole::W)] = true;
  EXPECT_EQ(run_wgrad(w_only, 1, 5), run_wgrad(off, 1, 5));
}

TEST(GemmQuant, NonFiniteOperandsGiveNaNNotAnException) {
  std::vector<double> v = test::randn(2 * 32, 1.0, fmts::bf16, 91);
  v[5] = std::numeric_limits<double>::infinity();
  for (const char* name : {"nvfp4", "int4-g32", "nf4"}) {  // rules that refuse non-finite input: all NaN
    std::vector<double> q = v;
    ASSERT_NO_THROW(quantize_rows(parse_block_format(name), q, 32, nullptr, "t")) << name;
    for (double x : q) EXPECT_TRUE(std::isnan(x)) << name;
  }
  std::vector<double> q = v;  // MX: only the block with the inf has the NaN scale
  quantize_rows(parse_block_format("mxfp8-e4m3"), q, 32, nullptr, "t");
  for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(std::isnan(q[i]), i < 32) << i;
}

// ---- reference twin -----------------------------------------------------------------------------------------

TEST(GemmQuant, ReferenceIgnoresTheQuantization) {
  const OpPrecision p = quantized_entry("mxfp4", "mxfp4", "mxfp4");
  const std::vector<double> x = test::randn(32 * 64, 1.0, fmts::bf16, 71), w = test::randn(32 * 64, 0.1, fmts::bf16, 72);
  std::vector<Ref> y(32 * 32, Ref(0));
  const std::vector<Ref> xr = lift(x), wr = lift(w);
  matmul_forward<Reference>(y, xr, wr, {32, 64, 32}, Ctx<Reference>(p));
  for (std::size_t i = 0; i < 32; ++i) {
    Ref s = 0;
    for (std::size_t k = 0; k < 64; ++k) s += xr[k] * wr[i * 64 + k];
    EXPECT_EQ(y[i], s);
  }
}

// ---- policy text ------------------------------------------------------------------------------------------

TEST(GemmQuantPolicy, BlockPresetsRoundTripAndSayWhatTheyQuantize) {
  for (const char* name : {"mxfp8", "mxfp6", "mxfp4", "nvfp4", "int4-g32", "nf4"}) {
    const Policy p = Policy::preset(name);
    EXPECT_EQ(p.canonical(), name);
    EXPECT_EQ(Policy::parse(p.canonical()), p) << name;
  }
  const Policy nv = Policy::preset("nvfp4");
  const GemmQuant& fwd = nv.at(OpKind::Matmul, Pass::Forward).quant;
  EXPECT_EQ(fwd.of(GemmRole::W)->name, "nvfp4-16x16");
  EXPECT_EQ(fwd.of(GemmRole::X)->name, "nvfp4");
  EXPECT_TRUE(fwd.stochastic[index_of(GemmRole::Dy)]);
  EXPECT_FALSE(fwd.stochastic[index_of(GemmRole::X)]);
  EXPECT_FALSE(fwd.rht);
  EXPECT_TRUE(nv.at(OpKind::Matmul, Pass::BackwardWeight).quant.rht);
  EXPECT_FALSE(nv.at(OpKind::Classifier, Pass::Forward).quant.active());
  EXPECT_EQ(nv.block_keep(), (BlockKeep{0, 1}));
  // everything but the quantization is amp-bf16
  Policy stripped = nv;
  for (OpKind k : kAllOps)
    for (Pass ps : kAllPasses) stripped.at(k, ps).quant = GemmQuant{};
  stripped.set_block_keep({});
  EXPECT_EQ(stripped, Policy::preset("amp-bf16"));
  const Policy w4 = Policy::preset("int4-g32");
  EXPECT_EQ(w4.at(OpKind::Matmul, Pass::Forward).quant.of(GemmRole::W)->name, "int4-g32");
  EXPECT_FALSE(w4.at(OpKind::Matmul, Pass::Forward).quant.of(GemmRole::X).has_value());
  EXPECT_FALSE(w4.at(OpKind::Matmul, Pass::BackwardData).quant.active());
}

TEST(GemmQuantPolicy, RecipeSwitchesRemoveOneAtATimeAndRoundTrip) {
  const Policy nv = Policy::preset("nvfp4");
  const char* specs[] = {
      "nvfp4,matmul.bwd-weight.rht=off",                                  // no RHT
      "nvfp4,matmul.block-w=nvfp4",                                       // 1-D weight blocks
      "nvfp4,matmul.block-sr=none",                                       // no stochastic rounding
      "nvfp4,block-keep=0:0",                                             // every block in nvfp4
      "nvfp4,matmul.bwd-weight.rht=on:12345,matmul.fwd.block-sr=dy+x",     // other seed; SR on x in fwd
      "mxfp8,matmul.block-dy=mxfp8-e4m3:nv-ceil,classifier.block=mxfp8-e4m3",
      "fp32,matmul.fwd.block=off,matmul.bwd.block-x=mxint8",
  };
  for (const char* s : specs) {
    const Policy p = Policy::parse(s);
    EXPECT_NE(p, nv) << s;
    EXPECT_EQ(Policy::parse(p.canonical()), p) << s << " -> " << p.canonical();
  }
  EXPECT_FALSE(Policy::parse(specs[0]).at(OpKind::Matmul, Pass::BackwardWeight).quant.rht);
  EXPECT_EQ(Policy::parse(specs[1]).at(OpKind::Matmul, Pass::Forward).quant.of(GemmRole::W)->name, "nvfp4");
  EXPECT_FALSE(Policy::parse(specs[2]).at(OpKind::Matmul, Pass::BackwardData).quant.stochastic[2]);
  EXPECT_EQ(Policy::parse(specs[3]).block_keep(), (BlockKeep{0, 0}));
  EXPECT_EQ(Policy::parse(specs[4]).at(OpKind::Matmul, Pass::BackwardWeight).quant.rht_seed, 12345u);
  EXPECT_EQ(Policy::parse("nvfp4,matmul.bwd-weight.rht=off").canonical(), "nvfp4,matmul.rht=off");
}

TEST(GemmQuantPolicy, RandomBlockSpecsRoundTrip) {
  std::mt19937_64 rng(3);
  const std::vector<std::string> fmts_ = {"off", "mxfp8-e4m3", "mxfp6-e2m3", "mxfp4:mlx-round", "nvfp4", "nvfp4-16x16",
                                          "int4-g64", "nf4", "mxint8"};
  const std::vector<std::string> sel = {"matmul", "matmul.fwd", "matmul.bwd", "matmul.bwd-weight", "classifier",
                                        "classifier.bwd-data"};
  const std::vector<std::string> fields = {"block", "block-x", "block-w", "block-dy"};
  auto pick = [&](const auto& v) { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  int refused = 0;
  for (int t = 0; t < 300; ++t) {
    std::string s = pick(Policy::preset_names());
    const int items = std::uniform_int_distribution<int>(1, 5)(rng);
    for (int i = 0; i < items; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      if (kind == 0) s += "," + pick(sel) + "." + pick(fields) + "=" + pick(fmts_);
      if (kind == 1) s += "," + pick(sel) + ".rht=" + pick(std::vector<std::string>{"off", "on", "on:42"});
      if (kind == 2) s += ",block-keep=" + std::to_string(t % 3) + ":" + std::to_string(t % 2);
      if (kind == 3) s += "," + pick(sel) + ".block-sr=none";
    }
    Policy p;
    try {
      p = Policy::parse(s);
    } catch (const std::invalid_argument& e) {  // a random format under a preset's stochastic role: refused
      EXPECT_NE(std::string(e.what()).find("stochastic rounding of"), std::string::npos) << s << ": " << e.what();
      ++refused;
      continue;
    }
    EXPECT_EQ(Policy::parse(p.canonical()), p) << s << " -> " << p.canonical();
  }
  EXPECT_LT(refused, 100);
}

std::string error_of(const std::string& spec) {
  try {
    (void)Policy::parse(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GemmQuantPolicy, BadValuesAreRefusedInOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"fp32,matmul.block=mxfp5", "mxfp5"},
      {"fp32,softmax.block=mxfp8-e4m3", "matmul and classifier"},
      {"fp32,all.block-x=mxfp4", "matmul and classifier"},
      {"fp32,matmul.block-sr=grads", "unknown operand role 'grads'"},
      {"fp32,matmul.block-dy=int4-g32,matmul.block-sr=dy", "stochastic rounding of int4-g32"},
      {"fp32,matmul.block-sr=w,matmul.block-w=nvfp4-16x16", "stochastic rounding of nvfp4-16x16"},
      {"fp32,matmul.rht=maybe", "unknown rht value 'maybe'"},
      {"fp32,matmul.rht=on:x", "unknown rht value"},
      {"fp32,block-keep=1", "block-keep must be F:L"},
      {"fp32,block-keep=-1:0", "block-keep must be F:L"},
  };
  for (const auto& [spec, want] : cases) {
    const std::string e = error_of(spec);
    EXPECT_NE(e.find(want), std::string::npos) << spec << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << spec;
  }
}

TEST(GemmQuant, ShapeRefusalNamesOpPassOperandAndShape) {
  Runner run(Policy::parse("fp32,matmul.block=mxfp8-e4m3"));
  const std::size_t N = 32, I = 48, O = 64;  // in = 48 is not a multiple of 32
  std::vector<double> x(N * I, 1.0), w(O * I, 1.0), y(N * O);
  try {
    run.matmul_forward({OpKind::Matmul, 2, "w1"}, y, x, w, {32, 48, 64});
    FAIL() << "no refusal";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    for (const char* part : {"matmul layer 2 w1", "fwd operand x", "tokens 32 × in-features 48",
                             "contraction axis in-features", "block size 32 does not divide the axis length 48"})
      EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  Runner rht(Policy::parse("fp32,matmul.rht=on"));
  std::vector<double> dw(O * I, 0.0), dy(N * O, 1.0);
  std::vector<double> x2(40 * I, 1.0), dy2(40 * O, 1.0);
  EXPECT_THROW(rht.matmul_backward_weight({OpKind::Matmul, 0, "w"}, dw, dy2, x2, {40, 48, 64}), std::invalid_argument);
}

TEST(GemmQuant, KeptLayersRunWithoutQuantization) {
  const Policy p = Policy::parse("fp32,matmul.block=mxfp4,block-keep=1:1");
  const std::size_t N = 32, I = 64, O = 32;
  const std::vector<double> x = test::randn(N * I, 1.0, fmts::fp32, 81), w = test::randn(O * I, 0.1, fmts::fp32, 82);
  auto y_at = [&](int layer, int layers) {
    Runner run(p);
    run.set_layer_count(layers);
    std::vector<double> y(N * O);
    run.matmul_forward({OpKind::Matmul, layer, "q"}, y, x, w, {32, 64, 32});
    return y;
  };
  Runner plain(Policy::parse("fp32"));
  std::vector<double> y_plain(N * O);
  plain.matmul_forward({OpKind::Matmul, 0, "q"}, y_plain, x, w, {32, 64, 32});
  EXPECT_EQ(y_at(0, 4), y_plain);  // first kept
  EXPECT_EQ(y_at(3, 4), y_plain);  // last kept
  EXPECT_NE(y_at(1, 4), y_plain);  // middle quantized
  EXPECT_NE(y_at(2, 4), y_plain);
  EXPECT_NE(y_at(-1, 4), y_plain);  // outside the blocks: never kept
}

}  // namespace
}  // namespace roundoff::ops
