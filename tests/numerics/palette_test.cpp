// Palettized weights (numerics/palette.hpp) against the rule written out as numpy states it: the index of the
// first minimum of |x − lut| (fp32 inputs and entries, so each distance is exact in binary64: a direct scan, not
// the library's sorted midpoint search), per tensor and per group of rows; ties, duplicates, unsorted LUTs;
// quantize → dequantize → quantize; refusals in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "numerics/palette.hpp"

using namespace roundoff::numerics;

namespace {

/// The first index minimising |x − lut[i]|, distances compared exactly (x and the entries are fp32 values here,
/// so x − lut[i] is exact in binary64).
std::uint8_t argmin_first(const float* lut, std::size_t k, double x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < k; ++i)
    if (std::fabs(x - static_cast<double>(lut[i])) < std::fabs(x - static_cast<double>(lut[best]))) best = i;
  return static_cast<std::uint8_t>(best);
}

template <class F>
void refused(F f, const char* needle) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

}  // namespace

TEST(Palette, NearestEntryFirstIndexOnTiesPerTensorAndPerGroup) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{16}, std::size_t{100}, std::size_t{256}})
    for (std::size_t groups : {std::size_t{1}, std::size_t{4}}) {
      Palette p{{}, k, groups};
      for (std::size_t i = 0; i < k * groups; ++i) p.lut.push_back(std::ldexp(std::round(g(rng) * 64), -6));  // duplicates likely
      const std::size_t rows = 8, cols = 40;
      std::vector<double> x(rows * cols);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float* lut = p.lut.data() + (i / (x.size() / groups)) * k;
        switch (i % 4) {
          case 0: x[i] = static_cast<double>(g(rng)) * 2; break;
          case 1: x[i] = static_cast<double>(lut[rng() % k]); break;                                    // an entry
          case 2: x[i] = (static_cast<double>(lut[rng() % k]) + static_cast<double>(lut[rng() % k])) / 2; break;  // a midpoint
          default: x[i] = std::ldexp(std::round(g(rng) * 128), -7);                                    // on the grid
        }
        x[i] = static_cast<float>(x[i]);  // fp32 inputs: |x − l| exact in binary64
      }
      const std::vector<std::uint8_t> idx = palettize(p, x, rows);
      const std::vector<double> v = depalettize(p, idx, rows);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float* lut = p.lut.data() + (i / (x.size() / groups)) * k;
        ASSERT_EQ(idx[i], argmin_first(lut, k, x[i])) << "k=" << k << " groups=" << groups << " x=" << x[i];
        ASSERT_EQ(v[i], static_cast<double>(lut[idx[i]]));
      }
      EXPECT_EQ(depalettize(p, palettize(p, v, rows), rows), v);  // quantize → dequantize → quantize: a fixed point
    }
}

TEST(Palette, ByHandTiesDuplicatesAndRefusals) {
  const Palette p{{1.0f, -1.0f, 0.0f, 1.0f, 0.5f}, 5, 1};  // unsorted, 1.0 twice
  const std::vector<double> x = {0.75, 0.25, -0.5, 2.0, -7.0, 1.0, 0.2500000001, 0.7499999};
  const std::vector<std::uint8_t> want = {0, 2, 1, 0, 1, 0, 4, 4};  // 0.75: tie 0.5 (4) / 1.0 (0) → 0; 0.25: tie 0 (2) / 0.5 (4) → 2
  EXPECT_EQ(palettize(p, x, 1), want);
  refused([&] { palettize(Palette{{}, 0, 1}, x, 1); }, "0 LUT entries; valid: 1 to 256");
  refused([&] { palettize(Palette{std::vector<float>(257), 257, 1}, x, 1); }, "valid: 1 to 256");
  refused([&] { palettize(Palette{{1.0f, 2.0f, 3.0f}, 2, 1}, x, 1); }, "3 LUT values for 1 LUTs of 2");
  refused([&] { palettize(Palette{{1.0f, NAN}, 2, 1}, x, 1); }, "valid: finite values");
  refused([&] { palettize(p, std::vector<double>{1.0, INFINITY}, 1); }, "x[1] = inf is not finite");
  refused([&] { palettize(Palette{{1.0f, 2.0f, 3.0f, 4.0f}, 2, 2}, x, 3); }, "do not split into 2 LUT groups");
  refused([&] { depalettize(p, std::vector<std::uint8_t>{5}, 1); }, "index 5 at 0 is not below the LUT size 5");
}
