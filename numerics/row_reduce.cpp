// Independent reductions in SIMD lanes (argument in row_reduce.hpp): plan, packing, tier dispatch, and the
// per-reduction recomputation of the lanes a kernel flags.
#include "numerics/row_reduce.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "numerics/row_reduce_lanes.hpp"

namespace roundoff::numerics {

namespace {

using row_lanes::Kind;
using row_lanes::LanePlan;

/// Formats the Seq step handles: p ≤ 24 inside binary32's exponent range, with subnormals, IEEE, not saturating.
bool lane_format(const Format& f) {
  return f.precision <= 24 && f.emin >= -126 && f.emax <= 127 && f.subnormals && f.specials == Specials::Ieee &&
         !f.saturate;
}

std::optional<LanePlan> plan_of(const Accumulation& a, bool dot) {
  if (validate(a) || a.rounding != Rounding::NearestEven || a.order != Order::Sequential || a.promote_every != 0 ||
      a.adder.group != 0 || a.splitk.count != 0 || (dot && !a.fused) || (a.flush.step && a.tile.size != 0))
    return std::nullopt;  // the step flush with a tile stage has no lane kernel: the scalar definition runs it
  LanePlan pl{};
  pl.dot = dot;
  if (a.format == formats::fp64) {
    if (a.tile.size != 0 || a.flush.step) return std::nullopt;
    pl.kind = Kind::Binary64;
    return pl;
  }
  if (!lane_format(a.format)) return std::nullopt;
  const RoundingPlan acc(a.format);
  pl.p = a.format.precision;
  pl.emin = a.format.emin;
  pl.max_finite = acc.max_finite;
  pl.bound = std::ldexp(1.0, a.format.emax + 1);
  pl.kind = Kind::Seq;
  if (a.flush.step) pl.step_flush_below = std::ldexp(1.0, a.flush.step_format.value_or(a.format).emin);
  if (a.tile.size > 0) {
    if (a.tile.rounding != Rounding::TowardZero || !lane_format(a.tile.format)) return std::nullopt;
    pl.kind = Kind::Tile;
    pl.tile = a.tile.size;
    pl.tile_p = a.tile.format.precision;
    pl.tile_emin = a.tile.format.emin;
    pl.tile_max = RoundingPlan(a.tile.format).max_finite;
    pl.tile_flush_below = a.flush.tile ? std::ldexp(1.0, a.tile.format.emin) : 0.0;
  }
  return pl;
}

using kernels::Isa;

/// The scalar definition of reduction r.
double scalar(const Accumulation& a, const RowBatch& rb, std::size_t r) {
  const auto ri = static_cast<std::ptrdiff_t>(r);
  const std::size_t n = rb.length[r];
  if (rb.y) return dot(a, rb.x + ri * rb.x_row, rb.x_step, rb.y + ri * rb.y_row, rb.y_step, n);
  thread_local std::vector<double> buf;
  buf.resize(n);
  for (std::size_t k = 0; k < n; ++k) buf[k] = rb.x[ri * rb.x_row + static_cast<std::ptrdiff_t>(k) * rb.x_step];
  return sum(a, std::span<const double>(buf.data(), n));
}

/// dst[k·L + l] = term k of lane l (0 past its length), k in [k0, k0 + kb), for the rows r0 + l.
void pack(const double* src, std::ptrdiff_t row, std::ptrdiff_t step, std::size_t r0, std::size_t L,
          const std::int64_t* len, std::size_t k0, std::size_t kb, double* dst) {
  const bool along_rows = step == 1 || step == -1;  // contiguous terms: one row at a time
  if (along_rows) {
    for (std::size_t l = 0; l < L; ++l) {
      const auto n = static_cast<std::size_t>(len[l]);
      for (std::size_t k = k0; k < k0 + kb; ++k)
        dst[(k - k0) * L + l] =
            k < n ? src[static_cast<std::ptrdiff_t>(r0 + l) * row + static_cast<std::ptrdiff_t>(k) * step] : 0.0;
    }
    return;
  }
  for (std::size_t k = k0; k < k0 + kb; ++k)
    for (std::size_t l = 0; l < L; ++l)
      dst[(k - k0) * L + l] = k < static_cast<std::size_t>(len[l])
                                  ? src[static_cast<std::ptrdiff_t>(r0 + l) * row + static_cast<std::ptrdiff_t>(k) * step]
                                  : 0.0;
}

}  // namespace

const char* row_kernel_name(const Accumulation& a, const KernelOptions& opts) {
  const auto pl = plan_of(a, true);
  const Isa isa = opts.isa();
  if (!pl || isa == Isa::None) return nullptr;
  const bool wide = isa != Isa::Avx2;
  switch (pl->kind) {
    case Kind::Seq: return wide ? "seq-avx512" : "seq-avx2";
    case Kind::Binary64: return wide ? "binary64-avx512" : "binary64-avx2";
    case Kind::Tile: return wide ? "tile-avx512" : "tile-avx2";
  }
  return nullptr;
}

bool reduce_rows(const Accumulation& a, const RowBatch& rb, std::span<double> out, std::size_t* recomputed,
                 const KernelOptions& opts) {
  const Isa isa = opts.isa();
  if (isa == Isa::None) return false;
  const auto pl = plan_of(a, rb.y != nullptr);
  if (!pl) return false;
  const bool wide = isa != Isa::Avx2;
  const std::size_t L = wide ? row_lanes::avx512::kLanes : row_lanes::avx2::kLanes;
  const auto block = wide ? row_lanes::avx512::block : row_lanes::avx2::block;
  const std::size_t g = pl->kind == Kind::Tile ? static_cast<std::size_t>(pl->tile) : 1;
  const std::size_t KB = g * ((256 + g - 1) / g);  // terms per packed block, a whole number of tiles
  thread_local std::vector<double> xb, yb;
  xb.resize(L * KB);
  if (rb.y) yb.resize(L * KB);
  std::vector<std::int64_t> len(L), bad(L);
  std::vector<double> s(L);
  const std::size_t R = rb.length.size();
  for (std::size_t r0 = 0; r0 < R; r0 += L) {
    const std::size_t nr = std::min(L, R - r0);
    std::size_t longest = 0;
    for (std::size_t l = 0; l < L; ++l) {
      len[l] = l < nr ? static_cast<std::int64_t>(rb.length[r0 + l]) : 0;
      longest = std::max(longest, static_cast<std::size_t>(len[l]));
      s[l] = -0.0;
      bad[l] = 0;
    }
    for (std::size_t k0 = 0; k0 < longest; k0 += KB) {
      const std::size_t kb = std::min(KB, g * ((longest - k0 + g - 1) / g));
      // rows past nr have length 0: pack reads nothing of them
      pack(rb.x, rb.x_row, rb.x_step, r0, L, len.data(), k0, kb, xb.data());
      if (rb.y) pack(rb.y, rb.y_row, rb.y_step, r0, L, len.data(), k0, kb, yb.data());
      block(*pl, xb.data(), rb.y ? yb.data() : nullptr, k0, kb, len.data(), s.data(), bad.data());
    }
    for (std::size_t l = 0; l < nr; ++l) {
      const bool redo = len[l] != 0 && bad[l] != 0;
      out[r0 + l] = len[l] == 0 ? 0.0 : redo ? scalar(a, rb, r0 + l) : s[l];
      if (redo && recomputed) ++*recomputed;
    }
  }
  return true;
}

}  // namespace roundoff::numerics
