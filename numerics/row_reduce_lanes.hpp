#pragma once
/// \file row_reduce_lanes.hpp
/// Internal to numerics/row_reduce.cpp: the lane kernels of one ISA tier (row_reduce_lanes.inc compiled once
/// per tier). The kernels' arithmetic and its argument are in row_reduce.hpp.
#include <cstddef>
#include <cstdint>

namespace roundoff::numerics::row_lanes {

enum class Kind : std::uint8_t { Seq, Binary64, Tile };

/// The constants of one accumulation, as the kernels read them.
struct LanePlan {
  Kind kind;
  bool dot;              ///< terms are x·y (else x)
  int p, emin;           ///< accumulator format (Seq, Tile)
  double max_finite;
  double bound;          ///< 2^(emax + 1)
  int tile;              ///< Tile: terms per tile
  int tile_p, tile_emin; ///< Tile: tile format (rounding toward zero)
  double tile_max;
  double tile_flush_below; ///< Tile: flush=tile's 2^emin of the tile format (tile values below it become ±0), else 0
  double step_flush_below; ///< Seq: flush=step's 2^emin of the step format (partial sums below it become ±0), else 0
};

/// One block of `lanes` reductions over the packed terms k0 ≤ k < k0 + kb: x[(k − k0)·lanes + l] (and y) is term k
/// of lane l; len[l] its length; s[l] the running sums (in/out, start −0); bad[l] set (nonzero) for lanes the
/// caller must recompute. For Tile, k0 and kb are multiples of the tile size.
/// lanes is kLanes of the tier.
namespace avx512 {
inline constexpr std::size_t kLanes = 32;
void block(const LanePlan& pl, const double* x, const double* y, std::size_t k0, std::size_t kb,
           const std::int64_t* len, double* s, std::int64_t* bad);
}  // namespace avx512
namespace avx2 {
inline constexpr std::size_t kLanes = 16;
void block(const LanePlan& pl, const double* x, const double* y, std::size_t k0, std::size_t kb,
           const std::int64_t* len, double* s, std::int64_t* bad);
}  // namespace avx2

}  // namespace roundoff::numerics::row_lanes
