#include "numerics/block_kernels.hpp"

#include <array>
#include <cfloat>
#include <cmath>

#include "numerics/block_lanes.hpp"
#include "numerics/round.hpp"
#include "numerics/scale_format.hpp"

namespace roundoff::numerics::kernels {

namespace {

namespace bl = block_lanes;

bool mx_rule(ScaleRule r) { return r == ScaleRule::OcpFloor || r == ScaleRule::NvidiaCeil || r == ScaleRule::MlxRound; }

/// The plan of a covered format, nullopt when the kernels do not cover it.
std::optional<bl::LanePlan> lane_plan(const BlockFormat& b) {
  if (b.element_rounding == Rounding::Stochastic || b.element.codebook != nullptr) return std::nullopt;
  if (b.block_size % 8 != 0) return std::nullopt;
  bl::LanePlan pl{};
  pl.mode = b.element_rounding;
  if (b.element.is_int) {
    // mxint8: signed 8-bit codes in two's complement
    if (!mx_rule(b.rule) || b.element.integer != IntFormat::Int8 || b.element.bits != 0 || b.element.int_lo < -128 ||
        b.element.int_hi > 127 || b.element.int_lo > b.element.int_hi)
      return std::nullopt;
    pl.is_int = true;
    pl.frac_bits = b.element.fraction_bits;
    pl.int_lo = b.element.int_lo;
    pl.int_hi = b.element.int_hi;
    pl.sign_shift = 7;
  } else {
    const Format& f = b.element.fp;
    const bool saturating = f.saturate || f.specials == Specials::None;
    if (!f.subnormals || !saturating || f.precision < 2 || f.precision > 8 || f.emin < -100 || f.emax > 100)
      return std::nullopt;
    if (b.rule == ScaleRule::Nvfp4) {
      if (b.scale != ScaleFormat::UE4M3) return std::nullopt;
    } else if (!mx_rule(b.rule) || b.scale != ScaleFormat::E8M0) {
      return std::nullopt;
    }
    pl.m = f.precision - 1;
    pl.emin = f.emin;
    pl.sign_shift = element_bits(b.element) - 1;
  }
  pl.max_elem = element_max(b.element);
  pl.emax_elem = element_emax(b.element);
  switch (b.rule) {
    case ScaleRule::OcpFloor: pl.rule = bl::Rule::OcpFloor; break;
    case ScaleRule::NvidiaCeil: pl.rule = bl::Rule::NvidiaCeil; break;
    case ScaleRule::MlxRound: pl.rule = bl::Rule::MlxRound; break;
    case ScaleRule::Nvfp4:
    case ScaleRule::AbsmaxInt:
    case ScaleRule::AbsmaxCodebook:
    case ScaleRule::AffineMlx:
    case ScaleRule::MinMaxZeroPoint: break;
  }
  return pl;
}

bool shape_ok(const BlockFormat& b, std::size_t n, std::size_t axis_len) {
  const auto k = static_cast<std::size_t>(b.block_size), rt = static_cast<std::size_t>(b.block_rows);
  if (axis_len == 0 || axis_len % k != 0 || n % axis_len != 0) return false;
  return b.block_rows <= 1 || (n / axis_len) % rt == 0;
}

/// Quantizes into codes (x.size()) and scales (one per block); false (nothing written) when not covered.
template <class T>
bool quantize_impl(const BlockFormat& b, std::span<const T> x, std::size_t axis_len, Isa isa,
                   std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, float& tensor_scale) {
  if (isa == Isa::None || !shape_ok(b, x.size(), axis_len)) return false;
  std::optional<bl::LanePlan> pl = lane_plan(b);
  if (!pl) return false;
  const auto k = static_cast<std::size_t>(b.block_size);
  const std::size_t rt = b.block_rows > 1 ? static_cast<std::size_t>(b.block_rows) : 1;
  if (codes.size() != x.size() || scales.size() != x.size() / (k * rt)) return false;
  const bool wide = isa != Isa::Avx2;
  const bool nv = b.rule == ScaleRule::Nvfp4;
  tensor_scale = 1.0f;
  if (nv) {
    const bl::Amax32 a = wide ? bl::avx512::amax_fp32(x.data(), x.size()) : bl::avx2::amax_fp32(x.data(), x.size());
    if (a.bad) return false;  // the generic path refuses it with the index
    float enc = 1.0f;
    if (a.amax != 0) {
      enc = 2688.0f / a.amax;
      if (std::isinf(enc)) enc = FLT_MAX;
      if (enc == 0) enc = 1.0f;
    }
    pl->s_enc = enc;
    pl->s_enc_6 = enc * (1.0f / 6.0f);
    pl->inv_s_enc = 1.0f / enc;
    tensor_scale = enc;
  }
  const auto run = [&](const T* xs, const bl::Blocks& blk, std::uint8_t* c, std::uint32_t* s) {
    if (nv) {
      if (wide) bl::avx512::quantize_nvfp4(*pl, xs, blk, c, s);
      else bl::avx2::quantize_nvfp4(*pl, xs, blk, c, s);
    } else {
      if (wide) bl::avx512::quantize_mx(*pl, xs, blk, c, s);
      else bl::avx2::quantize_mx(*pl, xs, blk, c, s);
    }
  };
  if (rt == 1) {
    run(x.data(), bl::Blocks{x.size() / k, 1, k, 0, k}, codes.data(), scales.data());
  } else {  // tiles rt × k, in row-major order of tiles: one call per row of tiles
    const std::size_t tiles = axis_len / k, tile_rows = x.size() / axis_len / rt;
    for (std::size_t t = 0; t < tile_rows; ++t)
      run(x.data() + t * rt * axis_len, bl::Blocks{tiles, rt, k, axis_len, k}, codes.data() + t * rt * axis_len,
          scales.data() + t * tiles);
  }
  return true;
}

template <class T>
std::optional<BlockCodes> quantize_alloc(const BlockFormat& b, std::span<const T> x, std::size_t axis_len, Isa isa) {
  if (isa == Isa::None || !shape_ok(b, x.size(), axis_len) || !lane_plan(b)) return std::nullopt;
  BlockCodes out;
  out.codes.resize(x.size());
  out.scales.resize(x.size() / static_cast<std::size_t>(b.block_size * std::max(b.block_rows, 1)));
  if (!quantize_impl(b, x, axis_len, isa, out.codes, out.scales, out.tensor_scale)) return std::nullopt;
  return out;
}

}  // namespace

std::optional<BlockCodes> quantize_blocks(const BlockFormat& b, std::span<const double> x, std::size_t axis_len,
                                          Isa isa) {
  return quantize_alloc(b, x, axis_len, isa);
}
std::optional<BlockCodes> quantize_blocks(const BlockFormat& b, std::span<const float> x, std::size_t axis_len,
                                          Isa isa) {
  return quantize_alloc(b, x, axis_len, isa);
}
bool quantize_blocks_into(const BlockFormat& b, std::span<const double> x, std::size_t axis_len, Isa isa,
                          std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, float& tensor_scale) {
  return quantize_impl(b, x, axis_len, isa, codes, scales, tensor_scale);
}
bool quantize_blocks_into(const BlockFormat& b, std::span<const float> x, std::size_t axis_len, Isa isa,
                          std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, float& tensor_scale) {
  return quantize_impl(b, x, axis_len, isa, codes, scales, tensor_scale);
}

const char* block_kernel_name(const BlockFormat& b, Isa isa) {
  if (isa == Isa::None || !lane_plan(b)) return nullptr;
  return isa == Isa::Avx2 ? "block-avx2" : "block-avx512";
}

std::optional<std::vector<double>> dequantize_blocks(const BlockFormat& b, std::span<const std::uint8_t> codes,
                                                     std::span<const std::uint32_t> scales, float tensor_scale,
                                                     const Format& out, std::size_t axis_len) {
  std::vector<double> v(codes.size());
  if (!dequantize_blocks_into(b, codes, scales, tensor_scale, out, axis_len, v)) return std::nullopt;
  return v;
}

bool dequantize_blocks_into(const BlockFormat& b, std::span<const std::uint8_t> codes,
                            std::span<const std::uint32_t> scales, float tensor_scale, const Format& out,
                            std::size_t axis_len, std::span<double> v) {
  if (b.rule == ScaleRule::AffineMlx || b.rule == ScaleRule::MinMaxZeroPoint || b.scale_block > 0) return false;
  if (out != formats::fp32 && out != formats::fp64) return false;
  if (v.size() != codes.size()) return false;
  const auto k = static_cast<std::size_t>(b.block_size);
  const std::size_t rt = b.block_rows > 1 ? static_cast<std::size_t>(b.block_rows) : 1;
  if (codes.size() != scales.size() * k * rt) return false;
  if (rt > 1 && (axis_len == 0 || axis_len % k != 0 || codes.size() % axis_len != 0 ||
                 (codes.size() / axis_len) % rt != 0))
    return false;
  // Element values: NaN marks a code that is not an element (the generic path refuses it).
  std::array<double, 256> elem{};
  const int ebits = element_bits(b.element);
  for (std::uint32_t c = 0; c < 256; ++c) {
    elem[c] = std::numeric_limits<double>::quiet_NaN();
    if (c >> ebits) continue;
    if (b.element.codebook != nullptr && c >= static_cast<std::uint32_t>(kCodebookSize)) continue;
    elem[c] = element_value(b.element, c);
  }
  for (std::uint8_t c : codes)
    if (std::isnan(elem[c])) return false;
  std::vector<double> sv(scales.size());
  for (std::size_t j = 0; j < scales.size(); ++j) {
    if (scale_bits(b.scale) < 32 && (scales[j] >> scale_bits(b.scale)) != 0) return false;
    if (b.scale == ScaleFormat::UE4M3 && (scales[j] & 0x80) != 0) return false;
    sv[j] = scale_value(b.scale, scales[j]);
  }
  const bool f32 = out == formats::fp32;
  const bool nv = b.rule == ScaleRule::Nvfp4;
  const auto ts = static_cast<double>(tensor_scale);
  // One run of `len` codes of block j starting at i.
  const auto decode = [&](std::size_t i, std::size_t len, std::size_t j) {
    const double x = sv[j];
    for (std::size_t e = i; e < i + len; ++e) {
      const double n = elem[codes[e]] * x;  // exact
      double r;
      if (nv) r = f32 ? static_cast<double>(static_cast<float>(n) / tensor_scale) : n / ts;
      else r = f32 ? static_cast<double>(static_cast<float>(n)) : n;
      v[e] = std::isnan(r) ? std::numeric_limits<double>::quiet_NaN() : r;
    }
  };
  if (rt == 1) {
    for (std::size_t j = 0; j < scales.size(); ++j) decode(j * k, k, j);
  } else {
    const std::size_t tiles = axis_len / k;
    for (std::size_t r = 0; r < codes.size() / axis_len; ++r)
      for (std::size_t t = 0; t < tiles; ++t) decode(r * axis_len + t * k, k, (r / rt) * tiles + t);
  }
  return true;
}

}  // namespace roundoff::numerics::kernels
