// The MX and NVFP4 fast paths (numerics/block_kernels.hpp) against the generic per-element quantize/dequantize
// (KernelOptions::isa_limit = None), bit for bit, on every tier this CPU has: every element encoding (each code's
// value, the midpoints between neighbours and their neighbouring doubles, at many scales), adversarial blocks
// (amax at a binade edge and just below it, amax/2^s above the element max, all zeros, −0, NaN and ±inf, double
// subnormals, one nonzero, NaN scales from overflow), random tensors of many scales, every deterministic element
// rounding, float and double input, 1-D blocks and 16×16 tiles, every block count 1..19 (partial groups of W
// blocks), refused shapes; dequantize and dequantize_into of every code under random scale codes (the NaN scale
// included), fp32 and fp64 out.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/block_format.hpp"
#include "numerics/block_kernels.hpp"

using namespace roundoff::numerics;
using roundoff::numerics::kernels::Isa;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Rounding kModes[] = {Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero,
                               Rounding::Up,          Rounding::Down,        Rounding::Odd};

std::vector<Isa> fast_tiers() {
  std::vector<Isa> t;
  for (Isa i : {Isa::Avx2, Isa::Avx512})
    if (kernels::detected_isa() >= i) t.push_back(i);
  return t;
}
KernelOptions limit(Isa i) { return KernelOptions{true, i}; }
const KernelOptions kGeneric = limit(Isa::None);

std::vector<std::string> covered_names() {
  std::vector<std::string> v;
  for (const char* base : {"mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e3m2", "mxfp6-e2m3", "mxfp4", "mxint8"})
    for (const char* rule : {"", ":nv-ceil", ":mlx-round"}) v.push_back(std::string(base) + rule);
  v.emplace_back("nvfp4");
  v.emplace_back("nvfp4-16x16");
  return v;
}

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

/// quantize on `isa` equals the generic path (or both refuse with the same message).
template <class T>
void expect_same_quantize(const BlockFormat& b, const std::vector<T>& x, std::size_t axis_len, Isa isa,
                          const std::string& what) {
  SCOPED_TRACE(b.name + " " + std::string(name_of(b.element_rounding)) + " " + kernels::name_of(isa) + " " + what);
  std::string generic_error, fast_error;
  BlockCodes g, f;
  try {
    g = quantize(b, std::span<const T>(x), axis_len, kGeneric);
  } catch (const std::invalid_argument& e) {
    generic_error = e.what();
  }
  try {
    f = quantize(b, std::span<const T>(x), axis_len, limit(isa));
  } catch (const std::invalid_argument& e) {
    fast_error = e.what();
  }
  ASSERT_EQ(fast_error, generic_error);
  if (!generic_error.empty()) return;
  ASSERT_EQ(f.scales.size(), g.scales.size());
  for (std::size_t j = 0; j < g.scales.size(); ++j) ASSERT_EQ(f.scales[j], g.scales[j]) << "block " << j;
  ASSERT_EQ(f.codes.size(), g.codes.size());
  for (std::size_t i = 0; i < g.codes.size(); ++i)
    ASSERT_EQ(+f.codes[i], +g.codes[i]) << "i=" << i << " x=" << static_cast<double>(x[i]) << " scale code "
                                        << g.scales[i / static_cast<std::size_t>(b.block_size)];
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f.tensor_scale), std::bit_cast<std::uint32_t>(g.tensor_scale));
  EXPECT_TRUE(f.biases.empty() && g.biases.empty());
}

void expect_same_everywhere(const BlockFormat& b0, const std::vector<double>& x, std::size_t axis_len,
                            const std::string& what, bool all_modes = true) {
  for (Rounding m : kModes) {
    if (!all_modes && m != Rounding::NearestEven) continue;
    BlockFormat b = b0;
    b.element_rounding = m;
    for (Isa isa : fast_tiers()) {
      expect_same_quantize(b, x, axis_len, isa, what);
      std::vector<float> xf(x.size());
      bool exact = true;
      for (std::size_t i = 0; i < x.size(); ++i) {
        xf[i] = static_cast<float>(x[i]);
        exact &= std::isnan(x[i]) || static_cast<double>(xf[i]) == x[i];
      }
      if (exact) expect_same_quantize(b, xf, axis_len, isa, what + " (float input)");
    }
  }
}

/// Every element value, the midpoints of neighbours and the doubles next to both, both signs: the values that
/// decide rounding, before scaling.
std::vector<double> element_probe_values(const BlockFormat& b) {
  std::vector<double> pos;
  const int nb = element_bits(b.element);
  for (std::uint32_t c = 0; c < (1u << nb); ++c) {
    double v = 0;
    try {
      v = element_value(b.element, c);
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (std::isfinite(v) && v >= 0) pos.push_back(v);
  }
  std::sort(pos.begin(), pos.end());
  pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
  std::vector<double> probe;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    probe.push_back(pos[i]);
    const double mid = i + 1 < pos.size() ? (pos[i] + pos[i + 1]) / 2 : pos[i] * 1.0625;
    for (double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf), std::nextafter(pos[i], kInf)})
      probe.push_back(v);
    if (pos[i] > 0) probe.push_back(std::nextafter(pos[i], 0.0));
  }
  const std::size_t n = probe.size();
  for (std::size_t i = 0; i < n; ++i) probe.push_back(-probe[i]);
  return probe;
}

/// Blocks of k whose first element is the element max (so the scale is 2^shift for OcpFloor) and the rest the
/// probe values, all times 2^shift; padded with zeros.
std::vector<double> probe_blocks(const BlockFormat& b, int shift) {
  const std::vector<double> probe = element_probe_values(b);
  const auto k = static_cast<std::size_t>(b.block_size * b.block_rows);
  std::vector<double> x;
  for (std::size_t i = 0; i < probe.size(); i += k - 1) {
    x.push_back(std::ldexp(element_max(b.element), shift));
    for (std::size_t t = i; t < i + k - 1; ++t) x.push_back(t < probe.size() ? std::ldexp(probe[t], shift) : 0.0);
  }
  return x;
}

std::vector<double> block_of(std::size_t k, std::initializer_list<std::pair<std::size_t, double>> set,
                             double fill = 0.0) {
  std::vector<double> v(k, fill);
  for (auto [i, x] : set) v[i] = x;
  return v;
}

/// Adversarial blocks, concatenated (k values each).
std::vector<double> adversarial(const BlockFormat& b) {
  const auto k = static_cast<std::size_t>(b.block_size * b.block_rows);
  const double mx = element_max(b.element);
  const int emax = element_emax(b.element);
  std::vector<std::vector<double>> blocks = {
      block_of(k, {}),                                              // all zeros
      block_of(k, {}, -0.0),                                        // all −0
      block_of(k, {{3, 1.0}}),                                      // one nonzero
      block_of(k, {{k - 1, -0x1p-1074}}),                           // one double subnormal
      block_of(k, {{0, 0x1p-1022}, {1, 0x1p-1074}, {2, -0x1.8p-1060}}),
      block_of(k, {{0, 4.0}, {1, 0.25}, {2, -0.75}, {3, 0x1p-20}, {4, -0x1p-30}}),  // amax at a binade edge
      block_of(k, {{0, std::nextafter(4.0, 0.0)}, {1, 0.25}, {2, -0.75}}),          // just below it
      block_of(k, {{0, std::ldexp(mx, 3) * 1.0001}, {1, -std::ldexp(1.99, emax + 3)}, {2, 1.0}}),  // above max·X
      block_of(k, {{0, std::ldexp(1.9999999, emax)}, {5, std::ldexp(mx, 0)}, {6, -std::ldexp(1.0, emax - 9)}}),
      block_of(k, {{0, std::nan("")}, {1, 3.0}}),
      block_of(k, {{2, kInf}, {1, -3.0}}),
      block_of(k, {{k - 1, -kInf}}),
      block_of(k, {{0, 0x1p200}, {1, 1.0}}),                        // NaN scale (s > 127) for OCP
      block_of(k, {{0, 0x1p127}, {1, -0x1p100}, {2, 0x1p90}}),
      block_of(k, {{0, 0x1.fffffffp127}}),                          // overflows fp32 (MLX: NaN scale)
      block_of(k, {{0, 0x1p-140}, {1, 0x1p-150}, {2, -0x1.3p-149}, {3, 0x1p-160}}),  // scale clamped at 2^-127
      block_of(k, {{0, std::ldexp(mx, -126)}, {1, std::ldexp(mx, -127)}, {2, std::ldexp(mx, -129)}}),
  };
  // Every binade edge of amax relative to the element max: mx·2^e, just above, just below.
  for (int e : {-3, 0, 5}) {
    blocks.push_back(block_of(k, {{0, std::ldexp(mx, e)}, {1, std::ldexp(mx, e - 5)}, {2, -std::ldexp(mx, e - 1)}}));
    blocks.push_back(block_of(k, {{0, std::nextafter(std::ldexp(mx, e), kInf)}, {1, std::ldexp(1.0, e - 6)}}));
    blocks.push_back(block_of(k, {{0, std::nextafter(std::ldexp(mx, e), 0.0)}, {1, -std::ldexp(1.0, e - 6)}}));
  }
  std::vector<double> x;
  for (const auto& bl : blocks) x.insert(x.end(), bl.begin(), bl.end());
  return x;
}

std::vector<double> random_tensor(std::mt19937_64& rng, std::size_t n, double spread, bool fp32) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> e(-spread, spread), u(0, 1);
  std::vector<double> v(n);
  double block_scale = 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) block_scale = std::exp2(std::round(e(rng)));
    double x = g(rng) * block_scale * (u(rng) < 0.1 ? std::exp2(-20 * u(rng)) : 1.0);
    if (u(rng) < 0.02) x = 0;
    v[i] = fp32 ? static_cast<double>(static_cast<float>(x)) : x;
  }
  return v;
}

/// The 2-D format's input: a matrix whose rows are the 1-D test vector cut into rows of `cols`, padded.
std::vector<double> as_matrix(std::vector<double> x, std::size_t cols, std::size_t row_mult) {
  const std::size_t rows = (x.size() + cols - 1) / cols;
  const std::size_t r = (rows + row_mult - 1) / row_mult * row_mult;
  x.resize(r * cols, 0.0);
  return x;
}

}  // namespace

TEST(BlockKernels, CoverTheMxAndNvfp4FormatsOnlyWithDeterministicRounding) {
  if (fast_tiers().empty()) GTEST_SKIP() << "no AVX2";
  for (const std::string& n : covered_names())
    EXPECT_NE(kernels::block_kernel_name(parse_block_format(n), Isa::Avx2), nullptr) << n;
  for (const char* n : {"int4-g32", "nf4", "mlx-int4-g64", "gptq-int4-g32"})
    EXPECT_EQ(kernels::block_kernel_name(parse_block_format(n), Isa::Avx512), nullptr) << n;
  BlockFormat b = parse_block_format("mxfp4");
  EXPECT_EQ(kernels::block_kernel_name(b, Isa::None), nullptr);
  b.element_rounding = Rounding::Stochastic;
  EXPECT_EQ(kernels::block_kernel_name(b, Isa::Avx2), nullptr);
}

TEST(BlockKernels, EveryElementEncodingAndItsMidpointsMatchTheGenericPath) {
  for (const std::string& n : covered_names()) {
    const BlockFormat b = parse_block_format(n);
    for (int shift : {-130, -127, -20, -1, 0, 3, 100, 126}) {
      std::vector<double> x = probe_blocks(b, shift);
      const std::size_t cols = b.block_rows > 1 ? 64 : x.size();
      if (b.block_rows > 1) x = as_matrix(x, cols, 16);
      expect_same_everywhere(b, x, cols, "probe shift " + std::to_string(shift));
    }
  }
}

TEST(BlockKernels, AdversarialBlocksMatchTheGenericPath) {
  for (const std::string& n : covered_names()) {
    const BlockFormat b = parse_block_format(n);
    std::vector<double> x = adversarial(b);
    if (b.rule == ScaleRule::Nvfp4) {  // non-finite inputs are refused as a whole: test them one block at a time
      const auto k = static_cast<std::size_t>(b.block_size * b.block_rows);
      for (std::size_t j = 0; j < x.size() / k; ++j) {
        std::vector<double> one(x.begin() + static_cast<std::ptrdiff_t>(j * k),
                                x.begin() + static_cast<std::ptrdiff_t>((j + 1) * k));
        // a finite block next to a large and a tiny one: S_enc and S_dec at their edges
        one.insert(one.end(), k, 0.0);
        one[k] = 1.0;
        expect_same_everywhere(b, one, b.block_rows > 1 ? 16 : k, "adversarial block " + std::to_string(j));
      }
      continue;
    }
    expect_same_everywhere(b, x, x.size(), "adversarial");
    std::vector<double> neg(x);
    for (double& v : neg) v = -v;
    expect_same_everywhere(b, neg, 2 * static_cast<std::size_t>(b.block_size), "adversarial negated");
  }
}

TEST(BlockKernels, RandomTensorsOfManyScalesMatchTheGenericPath) {
  std::mt19937_64 rng(41);
  for (const std::string& n : covered_names()) {
    const BlockFormat b = parse_block_format(n);
    for (double spread : {0.0, 4.0, 40.0, 200.0})
      for (bool fp32 : {true, false}) {
        const std::vector<double> x = random_tensor(rng, 4096, spread, fp32);
        expect_same_everywhere(b, x, 256, "random spread " + std::to_string(spread), spread < 50);
      }
  }
  // NVFP4 tensors whose S_enc is at its edges: tiny (FLT_MAX encode scale), huge (near FLT_MAX), fp32 denormals.
  const BlockFormat nv = parse_block_format("nvfp4");
  for (double scale : {0x1p-149, 0x1p-140, 0x1p-126, 0x1p100, 0x1p120, 0x1p126}) {
    std::vector<double> x = random_tensor(rng, 512, 3.0, false);
    for (double& v : x) v = std::clamp(v * scale, -static_cast<double>(FLT_MAX), static_cast<double>(FLT_MAX));
    expect_same_everywhere(nv, x, 64, "nvfp4 scaled by " + std::to_string(std::log2(scale)));
  }
}

TEST(BlockKernels, RaggedBlockCountsMatchTheGenericPath) {
  // The kernels take W blocks at a time (8 or 4): every count from 1 to 19 blocks, so that the last group is
  // partial in every way, with a NaN in one block (MX) and blocks of very different scales.
  std::mt19937_64 rng(17);
  for (const std::string& n : covered_names()) {
    const BlockFormat b = parse_block_format(n);
    const auto k = static_cast<std::size_t>(b.block_size * b.block_rows);
    for (std::size_t blocks = 1; blocks <= 19; ++blocks) {
      std::vector<double> x = random_tensor(rng, blocks * k, 30.0, false);
      if (b.rule != ScaleRule::Nvfp4 && blocks > 3) x[2 * k + 5] = std::nan("");
      const std::size_t cols = b.block_rows > 1 ? 16 : k;
      expect_same_everywhere(b, x, cols, std::to_string(blocks) + " blocks", blocks % 5 == 0);
    }
  }
}

TEST(BlockKernels, RefusalsAndShapesMatchTheGenericPath) {
  const BlockFormat fp4 = parse_block_format("mxfp4"), nv = parse_block_format("nvfp4"),
                    nv2 = parse_block_format("nvfp4-16x16");
  for (Isa isa : fast_tiers()) {
    const std::vector<double> x(96, 1.5);
    expect_same_quantize(fp4, x, 48, isa, "axis not a multiple");
    expect_same_quantize(fp4, x, 0, isa, "empty axis");
    expect_same_quantize(fp4, x, 64, isa, "not rows");
    expect_same_quantize(fp4, x, 96, isa, "rows of 96");
    expect_same_quantize(fp4, x, 32, isa, "rows of 32");
    expect_same_quantize(nv, block_of(32, {{3, std::nan("")}}), 32, isa, "nvfp4 NaN");
    expect_same_quantize(nv, block_of(32, {{31, -kInf}}), 16, isa, "nvfp4 inf");
    expect_same_quantize(nv, block_of(32, {{7, 1e39}}), 16, isa, "nvfp4 overflows fp32");
    expect_same_quantize(nv2, std::vector<double>(16 * 48, 2.0), 48, isa, "16x48");
    expect_same_quantize(nv2, std::vector<double>(8 * 32, 2.0), 32, isa, "8 rows");
    expect_same_quantize(nv2, std::vector<double>(16 * 40, 2.0), 40, isa, "40 columns");
    BlockFormat st = fp4;
    st.element_rounding = Rounding::Stochastic;
    expect_same_quantize(st, x, 32, isa, "stochastic");
  }
}

TEST(BlockKernels, DequantizeOfEveryCodeMatchesTheGenericPath) {
  std::mt19937_64 rng(7);
  for (const std::string& n : covered_names()) {
    const BlockFormat b = parse_block_format(n);
    const auto k = static_cast<std::size_t>(b.block_size * b.block_rows);
    const int nb = element_bits(b.element);
    const std::size_t nblocks = 64;
    std::vector<std::uint8_t> codes(nblocks * k);
    std::vector<std::uint32_t> scales(nblocks);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i % (std::size_t{1} << nb));
    if (b.element.is_int) for (auto& c : codes) c = c == 0x80 ? 0x81 : c;  // mxint8 does not use -128
    for (std::size_t j = 0; j < nblocks; ++j)
      scales[j] = b.scale == ScaleFormat::E8M0 ? static_cast<std::uint32_t>(j == 0 ? 0xFF : j < 8 ? j : 255 - j * 2)
                                               : static_cast<std::uint32_t>(rng() % 0x7F);
    if (b.scale == ScaleFormat::UE4M3) scales[1] = 0x7E, scales[2] = 0;
    const std::size_t cols = b.block_rows > 1 ? 64 : 0;
    for (float ts : {1.0f, 2688.0f / 3.5f, FLT_MAX, 1e-30f})
      for (const Format& out : {formats::fp32, formats::fp64}) {
        const std::vector<double> g = dequantize(b, codes, scales, ts, out, {}, cols, kGeneric);
        for (Isa isa : fast_tiers()) {
          const std::vector<double> f = dequantize(b, codes, scales, ts, out, {}, cols, limit(isa));
          ASSERT_EQ(f.size(), g.size());
          std::vector<double> into(g.size(), -1.0);
          dequantize_into(b, codes, scales, ts, out, into, {}, cols, limit(isa));
          for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(bits(into[i]), bits(g[i])) << n << " into, i=" << i;
          for (std::size_t i = 0; i < g.size(); ++i)
            ASSERT_EQ(bits(f[i]), bits(g[i])) << n << " code " << +codes[i] << " i=" << i << " " << f[i] << " vs " << g[i];
        }
      }
  }
}
