#pragma once
/// \file palette.hpp
/// Palettized weights (Core ML's palettization, coremltools.optimize.coreml.palettize_weights / OpPalettizerConfig
/// with a given look-up table): each value is stored as the index of a LUT entry. The LUT has k entries (1 <= k
/// <= 256, fp32 values, any order, duplicates allowed) per tensor, or one LUT per group of consecutive rows
/// (Core ML's "per_grouped_channel" granularity: the tensor seen as `rows` rows, e.g. a weight's output channels
/// on axis 0, split into `groups` equal groups of rows).
///
/// Rule: the index of the entry nearest to x, compared exactly (the distance between two fp32 entries' midpoint
/// and x is decided without rounding: the midpoint of two fp32 values is a binary64 value); a value equidistant
/// from two entries, and a value equal to duplicated entries, gets the lowest LUT index among them (numpy's
/// argmin(|x − lut|), the first minimum, which coremltools' nearest assignment uses). Non-finite x is refused.
/// Decoding: lut[index], exact in fp32 and fp64.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "numerics/format.hpp"

namespace roundoff::numerics {

struct Palette {
  std::vector<float> lut;  ///< groups × k entries, row-major: group g's LUT is lut[g·k, (g+1)·k)
  std::size_t k = 0;       ///< entries per LUT
  std::size_t groups = 1;  ///< 1: per tensor
};

/// Throws std::invalid_argument (one line) unless 1 <= k <= 256, groups >= 1, lut.size() == groups·k and every
/// entry is finite.
void check_palette(const Palette& p);

/// Indices of x (a C-order tensor of `rows` rows; x.size() a multiple of rows, rows a multiple of p.groups).
std::vector<std::uint8_t> palettize(const Palette& p, std::span<const double> x, std::size_t rows);
/// The LUT values of `indices` (each index < k; fp32 values, exact in binary64).
std::vector<double> depalettize(const Palette& p, std::span<const std::uint8_t> indices, std::size_t rows);

}  // namespace roundoff::numerics
