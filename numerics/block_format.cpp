#include "numerics/named.hpp"
#include "numerics/block_format.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <initializer_list>
#include <optional>
#include <stdexcept>

#include "numerics/block_kernels.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr Format kE4m3Sat{4, -6, 8, true, Specials::NanOnly, true};
constexpr Format kE5m2Sat{3, -14, 15, true, Specials::Ieee, true};

// NF4: the values of bitsandbytes' NF4 table (csrc/kernels.cu nf4_dequantization_lut), QLoRA (Dettmers et al.,
// 2023, arXiv:2305.14314), used as data with attribution.
constexpr float kNf4[kCodebookSize] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};
constexpr std::uint8_t kNf4ZeroCode = 7;

// bitsandbytes' signed 8-bit dynamic map (functional.py create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8); Dettmers 2016, arXiv:1511.04561; MIT licence), used as data with attribution: for i = 0..6 the fp32
// midpoints of torch.linspace(0.1, 1, 2^i + 1) times 10^(i-6) (an fp32 tensor operation), both signs, then 0 and 1,
// ascending. Generated with torch 1.13 (scripts/gen-dynamic-map-8bit reproduces it).
constexpr float kDynamicMap8[256] = {
    -0x1.fc6666p-1f, -0x1.f53332p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, -0x1.df9998p-1f, -0x1.d86666p-1f,
    -0x1.d13334p-1f, -0x1.cap-1f, -0x1.c2ccccp-1f, -0x1.bb9998p-1f, -0x1.b46666p-1f, -0x1.ad3332p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.979998p-1f, -0x1.906666p-1f, -0x1.893334p-1f, -0x1.82p-1f,
    -0x1.7acccep-1f, -0x1.73999ap-1f, -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56cccep-1f,
    -0x1.4f999ap-1f, -0x1.486666p-1f, -0x1.413334p-1f, -0x1.3ap-1f, -0x1.32ccccp-1f, -0x1.2b999ap-1f,
    -0x1.246668p-1f, -0x1.1d3334p-1f, -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.07999ap-1f, -0x1.006666p-1f,
    -0x1.f26668p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, -0x1.b8ccccp-2f, -0x1.aa6664p-2f,
    -0x1.9cp-2f, -0x1.8d9998p-2f, -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626664p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, -0x1.0cp-2f, -0x1.fb3334p-3f,
    -0x1.de6668p-3f, -0x1.c1999ap-3f, -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3332p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, -0x1.93d70ap-4f, -0x1.8851eap-4f,
    -0x1.7ccccep-4f, -0x1.7147aep-4f, -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb85p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, -0x1.09999ap-4f, -0x1.fc28f4p-5f,
    -0x1.e51ebap-5f, -0x1.ce147ap-5f, -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c28ep-5f, -0x1.fd70a4p-6f, -0x1.cf5c26p-6f,
    -0x1.a147aep-6f, -0x1.733334p-6f, -0x1.451eb8p-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, -0x1.e978d4p-8f, -0x1.c49ba6p-8f,
    -0x1.9fbe76p-8f, -0x1.7ae148p-8f, -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, -0x1.eecbfep-11f, -0x1.b3d07cp-11f,
    -0x1.78d5p-11f, -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f, -0x1.b43528p-19f,
    -0x1.27476ep-21f, 0.0f, 0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, 0x1.19ce0ap-12f, 0x1.8fc506p-12f,
    0x1.02de02p-11f, 0x1.3dd982p-11f, 0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, 0x1.0c49bap-8f, 0x1.3126e8p-8f,
    0x1.56041ap-8f, 0x1.7ae148p-8f, 0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, 0x1.d1eb86p-7f, 0x1.170a3ep-6f,
    0x1.451eb8p-6f, 0x1.733334p-6f, 0x1.a147aep-6f, 0x1.cf5c26p-6f, 0x1.fd70a4p-6f, 0x1.15c28ep-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, 0x1.88f5c2p-5f, 0x1.ap-5f,
    0x1.b70a3ep-5f, 0x1.ce147ap-5f, 0x1.e51ebap-5f, 0x1.fc28f4p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, 0x1.4eb85p-4f, 0x1.5a3d7p-4f,
    0x1.65c29p-4f, 0x1.7147aep-4f, 0x1.7ccccep-4f, 0x1.8851eap-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, 0x1.6b3332p-3f, 0x1.88p-3f,
    0x1.a4ccccp-3f, 0x1.c1999ap-3f, 0x1.de6668p-3f, 0x1.fb3334p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, 0x1.626664p-2f, 0x1.70ccccp-2f,
    0x1.7f3334p-2f, 0x1.8d9998p-2f, 0x1.9cp-2f, 0x1.aa6664p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26668p-2f, 0x1.006666p-1f, 0x1.07999ap-1f, 0x1.0eccccp-1f,
    0x1.16p-1f, 0x1.1d3334p-1f, 0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486666p-1f, 0x1.4f999ap-1f, 0x1.56cccep-1f, 0x1.5ep-1f, 0x1.653334p-1f,
    0x1.6c6668p-1f, 0x1.73999ap-1f, 0x1.7acccep-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.979998p-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3332p-1f, 0x1.b46666p-1f, 0x1.bb9998p-1f,
    0x1.c2ccccp-1f, 0x1.cap-1f, 0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df9998p-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53332p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};
static_assert(kDynamicMap8[127] == 0.0f && kDynamicMap8[255] == 1.0f);

BlockElement fp_element(const Format& f) { return BlockElement{false, f, IntFormat::Int8, 0, 0, 0, nullptr, 0}; }
BlockElement int_element(IntFormat t, int fraction_bits, int lo, int hi) {
  return BlockElement{true, Format{}, t, fraction_bits, lo, hi, nullptr, 0};
}
BlockElement codebook_element(const float* values) {
  return BlockElement{false, Format{}, IntFormat::Int8, 0, 0, 0, values, 0};
}
/// MLX affine codes: unsigned b-bit integers 0..2^b - 1 (held in a uint8).
BlockElement affine_element(int bits) {
  return BlockElement{true, Format{}, IntFormat::Uint8, 0, 0, (1 << bits) - 1, nullptr, bits};
}

struct Named {
  const char* name;
  BlockElement element;
  ScaleFormat scale;
  int block;
  ScaleRule rule;
};
const Named kBlockFormats[] = {
    {"mxfp8-e4m3", fp_element(kE4m3Sat), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"mxfp8-e5m2", fp_element(kE5m2Sat), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"mxfp6-e3m2", fp_element(formats::e3m2), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"mxfp6-e2m3", fp_element(formats::e2m3), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"mxfp4", fp_element(formats::e2m1), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"mxint8", int_element(IntFormat::Int8, 6, -127, 127), ScaleFormat::E8M0, 32, ScaleRule::OcpFloor},
    {"nvfp4", fp_element(formats::e2m1), ScaleFormat::UE4M3, 16, ScaleRule::Nvfp4},
    {"nvfp4-16x16", fp_element(formats::e2m1), ScaleFormat::UE4M3, 16, ScaleRule::Nvfp4},
    {"int4-g32", int_element(IntFormat::Int4, 0, -8, 7), ScaleFormat::FP16, 32, ScaleRule::AbsmaxInt},
    {"int4-g64", int_element(IntFormat::Int4, 0, -8, 7), ScaleFormat::FP16, 64, ScaleRule::AbsmaxInt},
    {"int4-g128", int_element(IntFormat::Int4, 0, -8, 7), ScaleFormat::FP16, 128, ScaleRule::AbsmaxInt},
    {"nf4", codebook_element(kNf4), ScaleFormat::FP32, 64, ScaleRule::AbsmaxCodebook},
    {"nf4-dq", codebook_element(kNf4), ScaleFormat::FP32, 64, ScaleRule::AbsmaxCodebook},
    {"mlx-int4-g32", affine_element(4), ScaleFormat::FP16, 32, ScaleRule::AffineMlx},
    {"mlx-int4-g64", affine_element(4), ScaleFormat::FP16, 64, ScaleRule::AffineMlx},
    {"mlx-int4-g128", affine_element(4), ScaleFormat::FP16, 128, ScaleRule::AffineMlx},
    {"mlx-int8-g64", affine_element(8), ScaleFormat::FP16, 64, ScaleRule::AffineMlx},
    {"gptq-int4-g32", affine_element(4), ScaleFormat::FP16, 32, ScaleRule::MinMaxZeroPoint},
    {"gptq-int4-g64", affine_element(4), ScaleFormat::FP16, 64, ScaleRule::MinMaxZeroPoint},
    {"gptq-int4-g128", affine_element(4), ScaleFormat::FP16, 128, ScaleRule::MinMaxZeroPoint},
};

/// Bits and group size of a name PREFIX<B>-g<G> (the suffix already removed from `rest`); throws the one-line
/// refusal of `text` naming `valid` when either is not a number or not allowed.
std::pair<int, int> parse_bits_group(std::string_view text, std::string_view rest, std::initializer_list<int> bits_ok,
                                     const char* valid) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("block format '" + std::string(text) + "': " + why + "; valid: " + valid);
  };
  const auto g = rest.find("-g");
  if (g == std::string_view::npos) throw bad("no group size");
  int bits = 0, group = 0;
  for (const auto& [t, v] : {std::pair<std::string_view, int*>{rest.substr(0, g), &bits}, {rest.substr(g + 2), &group}}) {
    if (t.empty() || t.size() > 3 || t.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad("'" + std::string(t) + "' is not a number");
    *v = std::stoi(std::string(t));
  }
  if (std::find(bits_ok.begin(), bits_ok.end(), bits) == bits_ok.end()) throw bad(std::to_string(bits) + " bits");
  if (group != 32 && group != 64 && group != 128) throw bad("group size " + std::to_string(group));
  return {bits, group};
}

/// gptq-intB-gG beyond the listed names; nullopt when `text` does not have that shape.
std::optional<BlockFormat> parse_gptq(std::string_view text) {
  constexpr std::string_view prefix = "gptq-int";
  if (text.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto [bits, group] = parse_bits_group(text, text.substr(prefix.size()), {2, 3, 4, 8},
                                              "gptq-intB-gG with B in 2, 3, 4, 8 and G in 32, 64, 128");
  return BlockFormat{"gptq-int" + std::to_string(bits) + "-g" + std::to_string(group), affine_element(bits),
                     ScaleFormat::FP16, group, ScaleRule::MinMaxZeroPoint, Rounding::NearestEven};
}

/// mlx-intB-gG[-bf16|-fp32] beyond the listed names; nullopt when `text` does not have that shape.
std::optional<BlockFormat> parse_mlx_affine(std::string_view text) {
  constexpr std::string_view prefix = "mlx-int";
  if (text.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view rest = text.substr(prefix.size());
  ScaleFormat dtype = ScaleFormat::FP16;
  for (const auto& [suffix, f] : {std::pair<std::string_view, ScaleFormat>{"-bf16", ScaleFormat::BF16},
                                  {"-fp32", ScaleFormat::FP32}, {"-fp16", ScaleFormat::FP16}}) {
    if (rest.size() > suffix.size() && rest.substr(rest.size() - suffix.size()) == suffix) {
      dtype = f;
      rest = rest.substr(0, rest.size() - suffix.size());
      break;
    }
  }
  const auto [bits, group] = parse_bits_group(text, rest, {2, 3, 4, 5, 6, 8},
                                              "mlx-intB-gG[-bf16|-fp32] with B in 2, 3, 4, 5, 6, 8 and G in 32, 64, 128");
  std::string name = "mlx-int" + std::to_string(bits) + "-g" + std::to_string(group);
  if (dtype != ScaleFormat::FP16) name += "-" + std::string(name_of(dtype));
  return BlockFormat{name, affine_element(bits), dtype, group, ScaleRule::AffineMlx, Rounding::NearestEven};
}

std::string valid_block_names() {
  std::string s;
  for (const auto& n : kBlockFormats) s += std::string(s.empty() ? "" : ", ") + n.name;
  return s + " (MX formats also NAME:ocp-floor, NAME:nv-ceil or NAME:mlx-round; MLX affine: mlx-intB-gG[-bf16|-fp32]; "
             "GPTQ grid: gptq-intB-gG)";
}

/// Rounds the exact quotient v / d (d > 0, both doubles, v/d far from the double range's ends) to an
/// integer in `mode`: the candidates k·d and (k + 1/2)·d are compared with v exactly (d has at most 24
/// significant bits and |k| < 2^24 here, so each product is a double).
double round_quotient_to_int(double v, double d, Rounding mode) {
  const double t = v / d;
  if (std::fabs(t) > 0x1p20) return t;  // far beyond every integer type: the caller saturates
  double fl = std::floor(t);
  if (fl * d > v) fl -= 1;
  if ((fl + 1) * d <= v) fl += 1;
  const double below = v - fl * d;                  // exact, in [0, d)
  if (below == 0) return fl;
  const double half = (fl + 0.5) * d;
  const int cls = v < half ? -1 : (v == half ? 0 : 1);  // below, on, above the midpoint
  const bool odd_fl = std::fmod(fl, 2.0) != 0;
  switch (mode) {
    case Rounding::NearestEven: return cls > 0 || (cls == 0 && odd_fl) ? fl + 1 : fl;
    case Rounding::NearestAway: return cls > 0 || (cls == 0 && v > 0) ? fl + 1 : fl;
    case Rounding::TowardZero: return v > 0 ? fl : fl + 1;
    case Rounding::Up: return fl + 1;
    case Rounding::Down: return fl;
    case Rounding::Odd: return odd_fl ? fl : fl + 1;
    case Rounding::Stochastic: break;
  }
  throw std::invalid_argument("block formats round elements deterministically; stochastic is not supported");
}

void refuse_nonfinite(const BlockFormat& b, std::span<const double> x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      throw std::invalid_argument(b.name + ": x[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                  " is not finite; " + std::string(name_of(b.rule)) +
                                  " quantizes finite values only (MX formats give a NaN scale)");
}

/// MX (OcpFloor, NvidiaCeil, MlxRound): one block.
void quantize_mx_block(const BlockFormat& b, const RoundingPlan* plan, std::span<const double> v,
                       std::uint8_t* codes, std::uint32_t& scale) {
  double amax = 0;
  bool special = false;
  for (double x : v) {
    if (!std::isfinite(x)) special = true;
    else amax = std::max(amax, std::fabs(x));
  }
  const auto nan_block = [&] {
    scale = static_cast<std::uint32_t>(scale_code(b.scale, kNaN));
    std::fill(codes, codes + v.size(), std::uint8_t{0});
  };
  if (special) return nan_block();
  int s = -127;
  if (b.rule == ScaleRule::MlxRound) {
    const auto a32 = static_cast<float>(amax);  // nearest-even
    if (std::isinf(a32)) return nan_block();
    const float q = a32 / static_cast<float>(element_max(b.element));
    if (q > 0) {
      int e = 0;
      const double m = 2 * std::frexp(static_cast<double>(q), &e);  // q = m·2^(e-1), m in [1, 2)
      s = std::min(e - 1 + (m * m >= 2 ? 1 : 0), 127);               // m·m exact: 48 significant bits
    }
  } else if (amax > 0) {
    if (b.rule == ScaleRule::OcpFloor) {
      s = std::ilogb(amax) - element_emax(b.element);
    } else {  // ceil(log2(amax / max)) from the significands in [1/2, 1): exact
      int ea = 0, em = 0;
      const double ma = std::frexp(amax, &ea), mm = std::frexp(element_max(b.element), &em);
      s = ea - em + (ma > mm ? 1 : 0);
    }
  }
  if (s > 127) return nan_block();
  s = std::max(s, -127);
  scale = static_cast<std::uint16_t>(s + 127);
  for (std::size_t i = 0; i < v.size(); ++i) {
    double p = 0;
    if (b.element.is_int) {
      double t = std::ldexp(v[i], b.element.fraction_bits - s);
      if (t == 0 && v[i] != 0) t = std::copysign(0x1p-1074, v[i]);  // underflow: only sign and nonzero matter
      const double q = std::clamp(static_cast<double>(round_int(b.element.integer, b.element_rounding, t)),
                                  static_cast<double>(b.element.int_lo), static_cast<double>(b.element.int_hi));
      p = std::ldexp(q, -b.element.fraction_bits);
    } else {
      p = round_pair_scaled(*plan, b.element_rounding, v[i], 0.0, -s);
    }
    codes[i] = static_cast<std::uint8_t>(element_code(b.element, p));
  }
}

/// bitsandbytes' search of the dynamic map for t (see "Double quantization" in block_format.hpp).
std::uint32_t dynamic_map_code(float t) {
  const float* d = kDynamicMap8;
  int p = 127;
  for (int step = 64; step > 0; step /= 2) p += t > d[p] ? step : -step;
  if (t > d[p]) {
    const float mid = (d[p + 1] + d[p]) * 0.5f;
    return static_cast<std::uint32_t>(t > mid ? p + 1 : p);
  }
  const float lo = d[p == 0 ? 0 : p - 1];
  const float mid = (lo + d[p]) * 0.5f;
  return static_cast<std::uint32_t>(p > 0 && t < mid ? p - 1 : p);
}

/// Replaces out.scales (fp32 bits of S_j) by their double quantization (block_format.hpp).
void double_quantize(const BlockFormat& b, BlockCodes& out) {
  if (b.rule != ScaleRule::AbsmaxCodebook || b.scale != ScaleFormat::FP32)
    throw std::invalid_argument(b.name + ": double quantization applies to fp32 absmax scales only; valid: nf4-dq");
  const std::size_t n = out.scales.size();
  std::vector<float> s(n);
  ExactSum sum;
  for (std::size_t j = 0; j < n; ++j) {
    s[j] = std::bit_cast<float>(out.scales[j]);
    sum.add(static_cast<double>(s[j]));
  }
  // offset = fp32(sum / n): the exact sum at 4400 bits (exact), divided with one rounding to 24 bits; a mean in
  // fp32's subnormal range is rounded again there (below 2^-126 only when every absmax is that small).
  mpfr_t m;
  mpfr_init2(m, 4400);
  sum.to_mpfr(m, MPFR_RNDN);
  mpfr_t q;
  mpfr_init2(q, 24);
  mpfr_div_ui(q, m, static_cast<unsigned long>(n), MPFR_RNDN);
  const float offset = static_cast<float>(mpfr_get_d(q, MPFR_RNDN));
  mpfr_clear(q);
  mpfr_clear(m);
  const auto g = static_cast<std::size_t>(b.scale_block);
  out.scale_offset = offset;
  out.scale_scales.assign((n + g - 1) / g, 0);
  for (std::size_t k = 0; k * g < n; ++k) {
    const std::size_t end = std::min(n, (k + 1) * g);
    float a = 0;
    for (std::size_t j = k * g; j < end; ++j) a = std::max(a, std::fabs(s[j] - offset));
    out.scale_scales[k] = std::bit_cast<std::uint32_t>(a);
    const float r = 1.0f / a;
    for (std::size_t j = k * g; j < end; ++j) out.scales[j] = dynamic_map_code((s[j] - offset) * r);
  }
}

float nvfp4_tensor_scale(std::span<const float> x) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  if (amax == 0) return 1.0f;
  float enc = 2688.0f / amax;  // 448 · 6, in fp32
  if (std::isinf(enc)) enc = FLT_MAX;
  if (enc == 0) enc = 1.0f;
  return enc;
}

/// AffineMlx (see block_format.hpp): binary32 steps with native float arithmetic (IEEE, nearest-even; the
/// build's -ffp-contract=off keeps every operation separately rounded).
void quantize_affine_mlx(const BlockFormat& b, std::span<const double> x, BlockCodes& out) {
  refuse_nonfinite(b, x);
  const Format t = ieee_format_of(b.scale);
  const RoundingPlan tp(t);
  const auto k = static_cast<std::size_t>(b.block_size);
  std::vector<float> w(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = round_to(tp, Rounding::NearestEven, x[i]);
    if (std::isinf(r))
      throw std::invalid_argument(b.name + ": x[" + std::to_string(i) + "] = " + std::to_string(x[i]) + " overflows " +
                                  name_of(t) + ", the dtype of its scales; valid: |x| <= " +
                                  std::to_string(max_finite(t)));
    w[i] = static_cast<float>(r);  // exact: T's values are binary32 values
  }
  const auto n_bins = static_cast<float>(b.element.int_hi);
  const float eps = 1e-7f;
  out.biases.assign(out.scales.size(), 0);
  for (std::size_t j = 0; j < out.scales.size(); ++j) {
    float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      w_max = std::max(w_max, w[i]);
      w_min = std::min(w_min, w[i]);
    }
    const bool low_edge = std::fabs(w_min) > std::fabs(w_max);
    float scale = std::max((w_max - w_min) / n_bins, eps);
    if (!low_edge) scale = -scale;
    const float edge = low_edge ? w_min : w_max;
    const float q0 = std::nearbyint(edge / scale);  // the default FE mode: nearest-even, as rint
    float bias = 0;
    if (q0 != 0) {
      scale = edge / q0;
      bias = edge;
    }
    const double scale_t = round_to(tp, Rounding::NearestEven, static_cast<double>(scale));
    if (!std::isfinite(scale_t))
      throw std::invalid_argument(b.name + ": block " + std::to_string(j) + " has scale " + std::to_string(scale) +
                                  ", which overflows " + name_of(t) + "; valid: blocks whose range fits the dtype");
    out.scales[j] = static_cast<std::uint32_t>(to_bits(t, scale_t));
    out.biases[j] = static_cast<std::uint32_t>(to_bits(t, round_to(tp, Rounding::NearestEven, static_cast<double>(bias))));
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      const float q = (w[i] - bias) / scale;
      const double p = std::clamp(round_quotient_to_int(static_cast<double>(q), 1.0, b.element_rounding), 0.0,
                                  static_cast<double>(n_bins));
      out.codes[i] = static_cast<std::uint8_t>(p);
    }
  }
}

/// MinMaxZeroPoint (see block_format.hpp): binary32 steps with native float arithmetic.
void quantize_minmax_zp(const BlockFormat& b, std::span<const double> x, BlockCodes& out) {
  refuse_nonfinite(b, x);
  const auto k = static_cast<std::size_t>(b.block_size);
  std::vector<float> w(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    w[i] = static_cast<float>(x[i]);  // nearest-even
    if (std::isinf(w[i]))
      throw std::invalid_argument(b.name + ": x[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                  " overflows fp32; valid: |x| <= FLT_MAX");
  }
  const auto maxq = static_cast<float>(b.element.int_hi);
  const RoundingPlan f16(formats::fp16);
  out.biases.assign(out.scales.size(), 0);
  for (std::size_t j = 0; j < out.scales.size(); ++j) {
    float x_min = 0, x_max = 0;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      x_min = std::min(x_min, w[i]);
      x_max = std::max(x_max, w[i]);
    }
    if (x_min == 0 && x_max == 0) x_min = -1, x_max = 1;
    const float scale = (x_max - x_min) / maxq;
    const double s16 = round_to(f16, Rounding::NearestEven, static_cast<double>(scale));
    if (!std::isfinite(scale) || !std::isfinite(s16))
      throw std::invalid_argument(b.name + ": block " + std::to_string(j) + " has scale " + std::to_string(scale) +
                                  ", which overflows fp16; valid: blocks whose range is below 65504·" +
                                  std::to_string(b.element.int_hi));
    const float zero = std::nearbyint(-x_min / scale);
    out.scales[j] = static_cast<std::uint32_t>(to_bits(formats::fp16, s16));
    out.biases[j] = static_cast<std::uint32_t>(zero);
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      const float q = std::nearbyint(w[i] / scale) + zero;
      out.codes[i] = static_cast<std::uint8_t>(std::clamp(q, 0.0f, maxq));
    }
  }
}

}  // namespace

std::string_view name_of(ScaleRule r) {
  switch (r) {
    case ScaleRule::OcpFloor: return "ocp-floor";
    case ScaleRule::NvidiaCeil: return "nv-ceil";
    case ScaleRule::MlxRound: return "mlx-round";
    case ScaleRule::Nvfp4: return "nvfp4";
    case ScaleRule::AbsmaxInt: return "absmax";
    case ScaleRule::AbsmaxCodebook: return "absmax-codebook";
    case ScaleRule::AffineMlx: return "affine-mlx";
    case ScaleRule::MinMaxZeroPoint: return "minmax-zp";
  }
  return "?";
}

ScaleRule parse_scale_rule(std::string_view text) {
  return parse_named<ScaleRule>(text, kAllScaleRules, "scale rule");
}

const std::vector<std::string>& block_format_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& n : kBlockFormats) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

BlockFormat parse_block_format(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view base = text.substr(0, colon);
  for (const auto& n : kBlockFormats) {
    if (base != n.name) continue;
    BlockFormat b{n.name, n.element, n.scale, n.block, n.rule, Rounding::NearestEven,
                  std::string_view(n.name).ends_with("16x16") ? 16 : 1};
    if (base == "nf4-dq") b.scale_block = 256;
    if (colon != std::string_view::npos) {
      const std::string_view rule = text.substr(colon + 1);
      const bool mx = n.rule == ScaleRule::OcpFloor;
      if (!mx || (rule != "ocp-floor" && rule != "nv-ceil" && rule != "mlx-round"))
        throw std::invalid_argument("block format '" + std::string(text) + "': rule '" + std::string(rule) +
                                    "' does not apply to " + n.name +
                                    (mx ? "; valid: ocp-floor, nv-ceil, mlx-round"
                                        : "; only MX formats take a rule (valid: " + std::string(n.name) + " alone)"));
      b.rule = parse_scale_rule(rule);
      if (b.rule != ScaleRule::OcpFloor) b.name += ":" + std::string(rule);
    }
    return b;
  }
  if (auto affine = parse_mlx_affine(text)) return *affine;
  if (auto gptq = parse_gptq(text)) return *gptq;
  throw std::invalid_argument("unknown block format '" + std::string(text) + "'; valid: " + valid_block_names());
}

const float* nf4_codebook() { return kNf4; }

double element_max(const BlockElement& e) {
  if (e.codebook != nullptr) return static_cast<double>(e.codebook[kCodebookSize - 1]);
  return e.is_int ? std::ldexp(static_cast<double>(e.int_hi), -e.fraction_bits) : max_finite(e.fp);
}
int element_emax(const BlockElement& e) {
  return e.is_int || e.codebook != nullptr ? std::ilogb(element_max(e)) : e.fp.emax;
}
int element_bits(const BlockElement& e) {
  if (e.codebook != nullptr) return 4;
  if (e.is_int) return e.bits > 0 ? e.bits : int_bits(e.integer);
  return encoding_of(e.fp)->total_bits();
}

double element_value(const BlockElement& e, std::uint32_t code) {
  if (e.codebook != nullptr) {
    if (code >= static_cast<std::uint32_t>(kCodebookSize))
      throw std::invalid_argument("element code " + std::to_string(code) + " is not a codebook index; valid: 0.." +
                                  std::to_string(kCodebookSize - 1));
    return static_cast<double>(e.codebook[code]);
  }
  if (e.is_int) {
    if (e.bits > 0 && (code >> e.bits) != 0)
      throw std::invalid_argument("element code " + std::to_string(code) + " does not fit " + std::to_string(e.bits) +
                                  " bits; valid: 0.." + std::to_string((1u << e.bits) - 1));
    return std::ldexp(static_cast<double>(int_value(e.integer, code)), -e.fraction_bits);
  }
  if (code >> element_bits(e))
    throw std::invalid_argument("element code " + std::to_string(code) + " does not fit " + name_of(e.fp) + " (" +
                                std::to_string(element_bits(e)) + " bits)");
  return from_bits(e.fp, code);
}

std::uint32_t element_code(const BlockElement& e, double value) {
  if (e.codebook != nullptr) {
    for (int i = 0; i < kCodebookSize; ++i)
      if (static_cast<double>(e.codebook[i]) == value) return static_cast<std::uint32_t>(i);
    throw std::invalid_argument("value " + std::to_string(value) + " is not a codebook value");
  }
  if (e.is_int) {
    const double q = std::ldexp(value, e.fraction_bits);
    if (q != std::floor(q) || q < e.int_lo || q > e.int_hi)
      throw std::invalid_argument("value " + std::to_string(value) + " is not an element value");
    return int_code(e.integer, static_cast<int>(q));
  }
  return static_cast<std::uint32_t>(to_bits(e.fp, value));
}

namespace {

/// The matrix (rows × cols, C order) with each rt × ct tile made one contiguous run, tiles in row-major order
/// (to_tiles), or back (from_tiles).
template <class T>
std::vector<T> tile_order(std::span<const T> a, std::size_t rows, std::size_t cols, std::size_t rt, std::size_t ct,
                          bool to_tiles) {
  std::vector<T> b(a.size());
  std::size_t t = 0;
  for (std::size_t r0 = 0; r0 < rows; r0 += rt)
    for (std::size_t c0 = 0; c0 < cols; c0 += ct)
      for (std::size_t r = r0; r < r0 + rt; ++r)
        for (std::size_t c = c0; c < c0 + ct; ++c, ++t) {
          if (to_tiles) b[t] = a[r * cols + c];
          else b[r * cols + c] = a[t];
        }
  return b;
}

/// The 1-D format that quantizes one tile of a 2-D format as one block.
BlockFormat tile_as_block(const BlockFormat& b) {
  BlockFormat one = b;
  one.block_size = b.block_size * b.block_rows;
  one.block_rows = 1;
  return one;
}

void check_tiles(const BlockFormat& b, std::size_t n, std::size_t axis_len) {
  const auto rt = static_cast<std::size_t>(b.block_rows), ct = static_cast<std::size_t>(b.block_size);
  if (axis_len == 0 || axis_len % ct != 0 || n % axis_len != 0 || (n / axis_len) % rt != 0)
    throw std::invalid_argument(b.name + ": a " + std::to_string(axis_len == 0 ? 0 : n / axis_len) + "x" +
                                std::to_string(axis_len) + " matrix does not split into " + std::to_string(rt) + "x" +
                                std::to_string(ct) + " tiles; valid: rows a multiple of " + std::to_string(rt) +
                                " and columns a multiple of " + std::to_string(ct));
}

}  // namespace

BlockCodes quantize(const BlockFormat& b, std::span<const double> x, std::size_t axis_len, const KernelOptions& opts) {
  if (std::optional<BlockCodes> q = kernels::quantize_blocks(b, x, axis_len, opts.isa())) return std::move(*q);
  if (b.block_rows > 1) {
    check_tiles(b, x.size(), axis_len);
    const std::size_t rows = x.size() / axis_len, rt = static_cast<std::size_t>(b.block_rows);
    const auto ct = static_cast<std::size_t>(b.block_size);
    const std::vector<double> xt = tile_order<double>(x, rows, axis_len, rt, ct, true);
    BlockCodes q = quantize(tile_as_block(b), xt, rt * ct, opts);
    q.codes = tile_order<std::uint8_t>(q.codes, rows, axis_len, rt, ct, false);
    return q;
  }
  const auto k = static_cast<std::size_t>(b.block_size);
  if (axis_len == 0 || axis_len % k != 0)
    throw std::invalid_argument(b.name + ": block size " + std::to_string(k) + " does not divide the axis length " +
                                std::to_string(axis_len) + "; valid: axis lengths that are multiples of " +
                                std::to_string(k));
  if (x.size() % axis_len != 0)
    throw std::invalid_argument(b.name + ": " + std::to_string(x.size()) + " values are not rows of " +
                                std::to_string(axis_len));
  if (b.element_rounding == Rounding::Stochastic)
    throw std::invalid_argument(b.name + ": element rounding must be deterministic");
  BlockCodes out;
  out.codes.assign(x.size(), 0);
  out.scales.assign(x.size() / k, 0);
  const std::size_t nblocks = x.size() / k;
  switch (b.rule) {
    case ScaleRule::OcpFloor:
    case ScaleRule::NvidiaCeil:
    case ScaleRule::MlxRound: {
      std::optional<RoundingPlan> plan;
      if (!b.element.is_int) plan.emplace(b.element.fp);
      for (std::size_t j = 0; j < nblocks; ++j)
        quantize_mx_block(b, plan ? &*plan : nullptr, x.subspan(j * k, k), &out.codes[j * k], out.scales[j]);
      break;
    }
    case ScaleRule::Nvfp4: {
      refuse_nonfinite(b, x);
      std::vector<float> xf(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        xf[i] = static_cast<float>(x[i]);  // nearest-even to fp32
        if (std::isinf(xf[i]))
          throw std::invalid_argument(b.name + ": x[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                      " overflows fp32; nvfp4 quantizes fp32 values");
      }
      const float s_enc = nvfp4_tensor_scale(xf);
      out.tensor_scale = s_enc;
      const float s_enc_6 = s_enc * (1.0f / 6.0f);
      const float inv_s_enc = 1.0f / s_enc;
      const RoundingPlan elem(b.element.fp);
      const RoundingPlan sc(kUe4m3Rounding);
      for (std::size_t j = 0; j < nblocks; ++j) {
        float amax = 0;
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) amax = std::max(amax, std::fabs(xf[i]));
        const auto s_dec = static_cast<float>(round_to(sc, Rounding::NearestEven, static_cast<double>(amax * s_enc_6)));
        float enc = 1.0f / (s_dec * inv_s_enc);
        if (std::isinf(enc)) enc = FLT_MAX;
        out.scales[j] = static_cast<std::uint32_t>(scale_code(b.scale, static_cast<double>(s_dec)));
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
          const double p = round_to(elem, b.element_rounding, static_cast<double>(xf[i] * enc));
          out.codes[i] = static_cast<std::uint8_t>(element_code(b.element, p));
        }
      }
      break;
    }
    case ScaleRule::AbsmaxInt: {
      refuse_nonfinite(b, x);
      const RoundingPlan sc(kFp16Saturating);
      const double qmax = static_cast<double>(b.element.int_hi);
      for (std::size_t j = 0; j < nblocks; ++j) {
        double amax = 0;
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) amax = std::max(amax, std::fabs(x[i]));
        // fp16(amax / qmax), one rounding of the exact quotient: the remainder's sign decides ties.
        const double q = amax / qmax;
        const double r = std::fma(-q, qmax, amax);
        const double s = round_pair(sc, Rounding::NearestEven, q, r / qmax);
        out.scales[j] = static_cast<std::uint32_t>(scale_code(b.scale, s));
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
          double p = 0;
          if (s > 0)
            p = std::clamp(round_quotient_to_int(x[i], s, b.element_rounding), static_cast<double>(b.element.int_lo),
                           qmax);
          out.codes[i] = static_cast<std::uint8_t>(element_code(b.element, p));
        }
      }
      break;
    }
    case ScaleRule::AbsmaxCodebook: {
      refuse_nonfinite(b, x);
      const RoundingPlan f32(formats::fp32);
      const float* c = b.element.codebook;
      double mid[kCodebookSize - 1];  // exact: two fp32 values' mean has at most 25 significant bits
      for (int j = 0; j + 1 < kCodebookSize; ++j)
        mid[j] = (static_cast<double>(c[j]) + static_cast<double>(c[j + 1])) / 2;
      for (std::size_t j = 0; j < nblocks; ++j) {
        double amax = 0;
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) amax = std::max(amax, std::fabs(x[i]));
        const double s = round_to(f32, Rounding::NearestEven, amax);
        if (std::isinf(s))
          throw std::invalid_argument(b.name + ": block " + std::to_string(j) + " has absmax " + std::to_string(amax) +
                                      ", which overflows its fp32 scale; valid: |x| <= FLT_MAX");
        out.scales[j] = static_cast<std::uint32_t>(scale_code(b.scale, s));
        for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
          std::uint8_t code = kNf4ZeroCode;
          if (s > 0) {
            code = 0;
            // x > m·s exactly: fma rounds m·s − x once, keeping its sign (m·s >= 2^-179, so no underflow to 0)
            for (int m = 0; m + 1 < kCodebookSize; ++m)
              if (std::fma(mid[m], s, -x[i]) < 0) ++code;
          }
          out.codes[i] = code;
        }
      }
      break;
    }
    case ScaleRule::AffineMlx: quantize_affine_mlx(b, x, out); break;
    case ScaleRule::MinMaxZeroPoint: quantize_minmax_zp(b, x, out); break;
  }
  if (b.scale_block > 0) double_quantize(b, out);
  return out;
}

BlockCodes quantize(const BlockFormat& b, std::span<const float> x, std::size_t axis_len, const KernelOptions& opts) {
  if (std::optional<BlockCodes> q = kernels::quantize_blocks(b, x, axis_len, opts.isa())) return std::move(*q);
  const std::vector<double> xd(x.begin(), x.end());  // exact
  return quantize(b, std::span<const double>(xd), axis_len, KernelOptions{false, kernels::Isa::None});
}

namespace {

template <class T>
float quantize_into_impl(const BlockFormat& b, std::span<const T> x, std::size_t axis_len,
                         std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, const KernelOptions& opts) {
  if (b.rule == ScaleRule::AffineMlx || b.rule == ScaleRule::MinMaxZeroPoint)
    throw std::invalid_argument(b.name + ": quantize_into has no biases to write; valid: quantize for this format");
  const std::size_t per = static_cast<std::size_t>(b.block_size) * static_cast<std::size_t>(std::max(b.block_rows, 1));
  if (codes.size() != x.size() || scales.size() * per != x.size())
    throw std::invalid_argument(b.name + ": quantize_into got " + std::to_string(codes.size()) + " codes and " +
                                std::to_string(scales.size()) + " scales for " + std::to_string(x.size()) +
                                " values; valid: " + std::to_string(x.size()) + " codes and " +
                                std::to_string(x.size() / per) + " scales");
  float ts = 1.0f;
  if (kernels::quantize_blocks_into(b, x, axis_len, opts.isa(), codes, scales, ts)) return ts;
  const BlockCodes q = quantize(b, x, axis_len, opts);
  std::copy(q.codes.begin(), q.codes.end(), codes.begin());
  std::copy(q.scales.begin(), q.scales.end(), scales.begin());
  return q.tensor_scale;
}

}  // namespace

float quantize_into(const BlockFormat& b, std::span<const double> x, std::size_t axis_len,
                    std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, const KernelOptions& opts) {
  return quantize_into_impl(b, x, axis_len, codes, scales, opts);
}
float quantize_into(const BlockFormat& b, std::span<const float> x, std::size_t axis_len,
                    std::span<std::uint8_t> codes, std::span<std::uint32_t> scales, const KernelOptions& opts) {
  return quantize_into_impl(b, x, axis_len, codes, scales, opts);
}

std::vector<double> dequantize(const BlockFormat& b, std::span<const std::uint8_t> codes,
                               std::span<const std::uint32_t> scales, float tensor_scale, const Format& out,
                               std::span<const std::uint32_t> biases, std::size_t axis_len, const KernelOptions& opts) {
  if (b.scale_block > 0)
    throw std::invalid_argument(b.name + ": its scales are double-quantized 8-bit codes; valid: dequantize(format, "
                                "BlockCodes, ...) with scale_scales and scale_offset");
  if (opts.isa() != kernels::Isa::None && biases.empty())
    if (std::optional<std::vector<double>> v = kernels::dequantize_blocks(b, codes, scales, tensor_scale, out, axis_len))
      return std::move(*v);
  if (b.block_rows > 1) {
    check_tiles(b, codes.size(), axis_len);
    const std::size_t rows = codes.size() / axis_len, rt = static_cast<std::size_t>(b.block_rows);
    const auto ct = static_cast<std::size_t>(b.block_size);
    const std::vector<std::uint8_t> ct_codes = tile_order<std::uint8_t>(codes, rows, axis_len, rt, ct, true);
    const std::vector<double> v = dequantize(tile_as_block(b), ct_codes, scales, tensor_scale, out, biases, 0, opts);
    return tile_order<double>(v, rows, axis_len, rt, ct, false);
  }
  const auto k = static_cast<std::size_t>(b.block_size);
  const bool affine = b.rule == ScaleRule::AffineMlx || b.rule == ScaleRule::MinMaxZeroPoint;
  if (affine ? biases.size() != scales.size() : !biases.empty())
    throw std::invalid_argument(b.name + ": " + std::to_string(biases.size()) + " biases given; valid: " +
                                (affine ? std::to_string(scales.size()) + " (one per block)" : std::string("none")));
  if (codes.size() != scales.size() * k)
    throw std::invalid_argument(b.name + ": " + std::to_string(codes.size()) + " codes need " +
                                std::to_string(codes.size() / k) + " scales (blocks of " + std::to_string(k) +
                                "), got " + std::to_string(scales.size()));
  if (out != formats::fp32 && out != formats::fp64)
    throw std::invalid_argument("dequantize: output format " + name_of(out) + " is not supported; valid: fp32, fp64");
  const bool f32 = out == formats::fp32;
  const RoundingPlan plan(out);
  std::vector<double> v(codes.size());
  for (std::size_t j = 0; j < scales.size(); ++j) {
    if (b.rule == ScaleRule::MinMaxZeroPoint) {
      const double s = from_bits(formats::fp16, scales[j]);
      const auto zero = static_cast<double>(biases[j]);
      for (std::size_t i = j * k; i < (j + 1) * k; ++i)
        v[i] = round_to(plan, Rounding::NearestEven, s * (element_value(b.element, codes[i]) - zero));  // exact product
      continue;
    }
    if (affine) {
      const Format t = ieee_format_of(b.scale);
      const double s = from_bits(t, scales[j]), bias = from_bits(t, biases[j]);
      for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
        const double p = element_value(b.element, codes[i]) * s;  // exact: at most 8 + 24 significant bits
        const double hi = p + bias;                               // TwoSum: hi + lo = p + bias exactly
        const double bb = hi - p;
        const double lo = (p - (hi - bb)) + (bias - bb);
        v[i] = round_pair(plan, Rounding::NearestEven, hi, lo);
      }
      continue;
    }
    const double x = scale_value(b.scale, scales[j]);
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      const double p = element_value(b.element, codes[i]);
      switch (b.rule) {
        case ScaleRule::OcpFloor:
        case ScaleRule::NvidiaCeil:
        case ScaleRule::MlxRound:
        case ScaleRule::AbsmaxInt:
        case ScaleRule::AbsmaxCodebook: v[i] = round_to(plan, Rounding::NearestEven, p * x); break;  // p·x exact
        case ScaleRule::AffineMlx:
        case ScaleRule::MinMaxZeroPoint: break;  // above
        case ScaleRule::Nvfp4: {
          const double n = p * x;  // exact: 3 × 4 significant bits
          v[i] = f32 ? static_cast<double>(static_cast<float>(n) / tensor_scale)
                     : n / static_cast<double>(tensor_scale);
          break;
        }
      }
    }
  }
  return v;
}

void dequantize_into(const BlockFormat& b, std::span<const std::uint8_t> codes, std::span<const std::uint32_t> scales,
                     float tensor_scale, const Format& out, std::span<double> v, std::span<const std::uint32_t> biases,
                     std::size_t axis_len, const KernelOptions& opts) {
  if (v.size() != codes.size())
    throw std::invalid_argument(b.name + ": dequantize_into got room for " + std::to_string(v.size()) + " values for " +
                                std::to_string(codes.size()) + " codes; valid: one value per code");
  if (b.scale_block == 0 && opts.isa() != kernels::Isa::None && biases.empty() &&
      kernels::dequantize_blocks_into(b, codes, scales, tensor_scale, out, axis_len, v))
    return;
  const std::vector<double> r = dequantize(b, codes, scales, tensor_scale, out, biases, axis_len, opts);
  std::copy(r.begin(), r.end(), v.begin());
}

std::vector<float> double_quantized_scales(const BlockFormat& b, std::span<const std::uint32_t> scales,
                                           std::span<const std::uint32_t> scale_scales, float scale_offset) {
  const auto g = static_cast<std::size_t>(b.scale_block);
  if (g == 0) throw std::invalid_argument(b.name + ": its scales are not double-quantized; valid: nf4-dq");
  if (scale_scales.size() != (scales.size() + g - 1) / g)
    throw std::invalid_argument(b.name + ": " + std::to_string(scale_scales.size()) + " scale scales for " +
                                std::to_string(scales.size()) + " scales; valid: " +
                                std::to_string((scales.size() + g - 1) / g) + " (one per " + std::to_string(g) + ")");
  std::vector<float> s(scales.size());
  for (std::size_t j = 0; j < scales.size(); ++j) {
    if (scales[j] > 255)
      throw std::invalid_argument(b.name + ": scale code " + std::to_string(scales[j]) + " is not 8 bits; valid: 0..255");
    s[j] = kDynamicMap8[scales[j]] * std::bit_cast<float>(scale_scales[j / g]) + scale_offset;  // two fp32 steps
  }
  return s;
}

std::vector<double> dequantize(const BlockFormat& b, const BlockCodes& q, const Format& out, std::size_t axis_len,
                               const KernelOptions& opts) {
  if (b.scale_block == 0) return dequantize(b, q.codes, q.scales, q.tensor_scale, out, q.biases, axis_len, opts);
  const std::vector<float> s = double_quantized_scales(b, q.scales, q.scale_scales, q.scale_offset);
  std::vector<std::uint32_t> bits(s.size());
  for (std::size_t j = 0; j < s.size(); ++j) bits[j] = std::bit_cast<std::uint32_t>(s[j]);
  BlockFormat single = b;
  single.scale_block = 0;
  return dequantize(single, q.codes, bits, q.tensor_scale, out, {}, axis_len, opts);
}

const float* dynamic_map_8bit() { return kDynamicMap8; }

}  // namespace roundoff::numerics
