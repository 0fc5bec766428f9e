#include "numerics/palette.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace roundoff::numerics {

namespace {

void check_rows(const Palette& p, std::size_t n, std::size_t rows, const char* what) {
  if (rows == 0 || n % rows != 0 || rows % p.groups != 0)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " values in " + std::to_string(rows) +
                                " rows do not split into " + std::to_string(p.groups) +
                                " LUT groups; valid: rows a nonzero multiple of the number of LUTs, values a multiple "
                                "of rows");
}

/// One LUT's distinct values ascending, each with the lowest index holding it.
struct Sorted {
  std::vector<double> v;
  std::vector<std::uint8_t> idx;
};

Sorted sorted_lut(const float* lut, std::size_t k) {
  std::vector<std::size_t> order(k);
  for (std::size_t i = 0; i < k; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lut[a] < lut[b]; });
  Sorted s;
  for (std::size_t i : order) {
    const auto v = static_cast<double>(lut[i]);
    if (!s.v.empty() && s.v.back() == v) continue;  // a duplicate: the stable sort put the lowest index first
    s.v.push_back(v);
    s.idx.push_back(static_cast<std::uint8_t>(i));
  }
  return s;
}

std::uint8_t nearest(const Sorted& s, double x) {
  const auto hi = static_cast<std::size_t>(std::upper_bound(s.v.begin(), s.v.end(), x) - s.v.begin());
  if (hi == 0) return s.idx.front();
  if (hi == s.v.size()) return s.idx.back();
  const std::size_t lo = hi - 1;
  const double mid = (s.v[lo] + s.v[hi]) / 2;  // exact: two fp32 values
  if (x < mid) return s.idx[lo];
  if (x > mid) return s.idx[hi];
  return std::min(s.idx[lo], s.idx[hi]);
}

}  // namespace

void check_palette(const Palette& p) {
  if (p.k < 1 || p.k > 256)
    throw std::invalid_argument("palette: " + std::to_string(p.k) + " LUT entries; valid: 1 to 256");
  if (p.groups < 1 || p.lut.size() != p.groups * p.k)
    throw std::invalid_argument("palette: " + std::to_string(p.lut.size()) + " LUT values for " +
                                std::to_string(p.groups) + " LUTs of " + std::to_string(p.k) +
                                "; valid: groups x entries values");
  for (std::size_t i = 0; i < p.lut.size(); ++i)
    if (!std::isfinite(p.lut[i]))
      throw std::invalid_argument("palette: LUT value " + std::to_string(i) + " is " + std::to_string(p.lut[i]) +
                                  "; valid: finite values");
}

std::vector<std::uint8_t> palettize(const Palette& p, std::span<const double> x, std::size_t rows) {
  check_palette(p);
  check_rows(p, x.size(), rows, "palettize");
  const std::size_t per_group = x.size() / p.groups;
  std::vector<std::uint8_t> out(x.size());
  for (std::size_t g = 0; g < p.groups; ++g) {
    const Sorted s = sorted_lut(p.lut.data() + g * p.k, p.k);
    for (std::size_t i = g * per_group; i < (g + 1) * per_group; ++i) {
      if (!std::isfinite(x[i]))
        throw std::invalid_argument("palettize: x[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                    " is not finite; valid: finite values");
      out[i] = nearest(s, x[i]);
    }
  }
  return out;
}

std::vector<double> depalettize(const Palette& p, std::span<const std::uint8_t> indices, std::size_t rows) {
  check_palette(p);
  check_rows(p, indices.size(), rows, "depalettize");
  const std::size_t per_group = indices.size() / p.groups;
  std::vector<double> v(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= p.k)
      throw std::invalid_argument("depalettize: index " + std::to_string(indices[i]) + " at " + std::to_string(i) +
                                  " is not below the LUT size " + std::to_string(p.k) + "; valid: 0.." +
                                  std::to_string(p.k - 1));
    v[i] = static_cast<double>(p.lut[(i / per_group) * p.k + indices[i]]);
  }
  return v;
}

}  // namespace roundoff::numerics
