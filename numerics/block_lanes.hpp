#pragma once
/// \file block_lanes.hpp
/// Internal to numerics/block_kernels.cpp: the MX and NVFP4 quantization kernels of one ISA tier
/// (block_lanes.inc compiled once per tier), and the plan they read. Their arithmetic, and why it gives the
/// generic path's bits, is in block_kernels.hpp.
#include <cstddef>
#include <cstdint>

#include "numerics/rounding.hpp"

namespace roundoff::numerics::block_lanes {

enum class Rule : std::uint8_t { OcpFloor, NvidiaCeil, MlxRound };

/// The constants of one block format, as the kernels read them.
struct LanePlan {
  bool is_int;           ///< integer elements (mxint8): fixed point with frac_bits
  int m;                 ///< floating-point elements: stored mantissa bits (p − 1)
  int emin;              ///< floating-point elements: exponent of the smallest normal binade
  int sign_shift;        ///< bit of the sign in the code (total bits − 1)
  double max_elem;       ///< largest element magnitude
  int emax_elem;         ///< exponent of the largest normal binade (0 for integers)
  int frac_bits;         ///< integers: value of code q is q·2^-frac_bits
  double int_lo, int_hi; ///< integers: the codes used
  Rounding mode;         ///< element rounding (deterministic)
  Rule rule;             ///< MX scale rule
  // NVFP4
  float s_enc;           ///< tensor encode scale
  float s_enc_6;         ///< s_enc · fp32(1/6)
  float inv_s_enc;       ///< fp32(1 / s_enc)
};

/// A run of blocks: block j is `rows` segments of `cols` values, segment r at x + j·block_step + r·ld (1-D
/// blocks: rows = 1, block_step = cols); its codes at the same offsets of `codes`; its scale code scales[j].
struct Blocks {
  std::size_t count;
  std::size_t rows, cols, ld, block_step;
};

/// What a tensor pass found: the largest |fp32(x)| over the tensor, and whether some x is not finite or
/// overflows fp32 (the generic path then refuses it).
struct Amax32 {
  float amax;
  bool bad;
};

#define ROUNDOFF_BLOCK_LANES_DECL                                                                                 \
  void quantize_mx(const LanePlan& pl, const double* x, const Blocks& bl, std::uint8_t* codes,                   \
                   std::uint32_t* scales);                                                                       \
  void quantize_mx(const LanePlan& pl, const float* x, const Blocks& bl, std::uint8_t* codes,                    \
                   std::uint32_t* scales);                                                                       \
  void quantize_nvfp4(const LanePlan& pl, const double* x, const Blocks& bl, std::uint8_t* codes,                \
                      std::uint32_t* scales);                                                                    \
  void quantize_nvfp4(const LanePlan& pl, const float* x, const Blocks& bl, std::uint8_t* codes,                 \
                      std::uint32_t* scales);                                                                    \
  Amax32 amax_fp32(const double* x, std::size_t n);                                                              \
  Amax32 amax_fp32(const float* x, std::size_t n);

namespace avx512 {
inline constexpr std::size_t kW = 8;
ROUNDOFF_BLOCK_LANES_DECL
}  // namespace avx512
namespace avx2 {
inline constexpr std::size_t kW = 4;
ROUNDOFF_BLOCK_LANES_DECL
}  // namespace avx2
#undef ROUNDOFF_BLOCK_LANES_DECL

}  // namespace roundoff::numerics::block_lanes
