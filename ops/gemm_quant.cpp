#include "ops/gemm_quant.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "numerics/round.hpp"
#include "numerics/scale_format.hpp"
#include "ops/backend.hpp"

namespace roundoff::ops {

using numerics::BlockFormat;
using numerics::Rounding;
using numerics::ScaleRule;

std::string_view name_of(GemmRole r) {
  switch (r) {
    case GemmRole::X: return "x";
    case GemmRole::W: return "w";
    case GemmRole::Dy: return "dy";
  }
  return "";
}

bool GemmQuant::active() const {
  if (rht) return true;
  for (const auto& f : format)
    if (f) return true;
  for (const auto& f : fp8)
    if (f.on()) return true;
  return false;
}

bool GemmQuant::per_tensor_fp8() const {
  for (const auto& f : fp8)
    if (f.on() && f.per_tensor()) return true;
  return false;
}

bool operator==(const GemmQuant& a, const GemmQuant& b) {
  for (std::size_t i = 0; i < kGemmRoleCount; ++i) {
    if (a.format[i].has_value() != b.format[i].has_value()) return false;
    if (a.format[i] && a.format[i]->name != b.format[i]->name) return false;
  }
  return a.stochastic == b.stochastic && a.rht == b.rht && a.rht_seed == b.rht_seed && a.fp8 == b.fp8;
}

std::array<double, kRhtSize> rht_signs(std::uint64_t seed) {
  std::array<double, kRhtSize> s{};
  const std::uint64_t bits = numerics::mix64(seed);
  for (std::size_t i = 0; i < kRhtSize; ++i) s[i] = (bits >> i & 1) != 0 ? -1.0 : 1.0;
  return s;
}

std::array<double, kRhtSize * kRhtSize> rht_matrix(std::uint64_t seed) {
  const std::array<double, kRhtSize> s = rht_signs(seed);
  std::array<double, kRhtSize * kRhtSize> q{};
  for (std::size_t i = 0; i < kRhtSize; ++i)
    for (std::size_t j = 0; j < kRhtSize; ++j)
      q[i * kRhtSize + j] = s[i] * ((std::popcount(i & j) & 1) != 0 ? -0.25 : 0.25);
  return q;
}

void rht_rows(std::span<double> v, std::size_t K, std::uint64_t seed) {
  const std::array<double, kRhtSize * kRhtSize> q = rht_matrix(seed);
  std::array<double, kRhtSize> in{};
  for (std::size_t b = 0; b + kRhtSize <= v.size(); b += kRhtSize) {  // runs never straddle rows: K % 16 == 0
    (void)K;
    for (std::size_t i = 0; i < kRhtSize; ++i) in[i] = v[b + i];
    for (std::size_t j = 0; j < kRhtSize; ++j) {
      double s = 0;
      for (std::size_t i = 0; i < kRhtSize; ++i) s += in[i] * q[i * kRhtSize + j];
      v[b + j] = static_cast<double>(static_cast<float>(s));  // nearest-even to fp32
    }
  }
}

bool quantized_in_storage_layout(const BlockFormat& f) {
  return f.block_rows > 1 || f.rule == ScaleRule::AbsmaxCodebook;
}

bool supports_stochastic(const BlockFormat& f) {
  if (f.block_rows != 1 || f.element.is_int || f.element.codebook != nullptr) return false;
  switch (f.rule) {
    case ScaleRule::OcpFloor:
    case ScaleRule::NvidiaCeil:
    case ScaleRule::MlxRound:
    case ScaleRule::Nvfp4: return true;
    case ScaleRule::AbsmaxInt:
    case ScaleRule::AbsmaxCodebook:
    case ScaleRule::AffineMlx:
    case ScaleRule::MinMaxZeroPoint: return false;
  }
  return false;
}

namespace {

/// Rules whose quantize refuses NaN and ±inf (MX rules give the block a NaN scale instead).
bool refuses_nonfinite(const BlockFormat& f) {
  switch (f.rule) {
    case ScaleRule::OcpFloor:
    case ScaleRule::NvidiaCeil:
    case ScaleRule::MlxRound: return false;
    case ScaleRule::Nvfp4:
    case ScaleRule::AbsmaxInt:
    case ScaleRule::AbsmaxCodebook:
    case ScaleRule::AffineMlx:
    case ScaleRule::MinMaxZeroPoint: return true;
  }
  return true;
}

/// The element codes of x under f's block scales `q.scales` (and tensor scale) with stochastic element rounding:
/// the library's nearest-even chain with the one element rounding replaced (numerics/block_format.hpp's rules).
void stochastic_codes(const BlockFormat& f, std::span<const double> x, numerics::BlockCodes& q, const QuantDraws& d) {
  const auto k = static_cast<std::size_t>(f.block_size);
  const numerics::RoundingPlan elem(f.element.fp);
  const auto draw = [&](std::size_t i) {
    const std::size_t e = d.element_of != nullptr ? d.element_of[i] : i;
    return d.bits.draw(key(static_cast<Tensor>(d.tensor), e, kQuantSlot).bits);
  };
  if (f.rule == ScaleRule::Nvfp4) {
    const float s_enc = q.tensor_scale, inv_s_enc = 1.0f / s_enc;
    for (std::size_t j = 0; j * k < x.size(); ++j) {
      const auto s_dec = static_cast<float>(numerics::scale_value(f.scale, q.scales[j]));
      float enc = 1.0f / (s_dec * inv_s_enc);
      if (std::isinf(enc)) enc = FLT_MAX;
      for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
        const float xf = static_cast<float>(x[i]);
        const double p = numerics::round_to(elem, Rounding::Stochastic, static_cast<double>(xf * enc), draw(i));
        q.codes[i] = static_cast<std::uint8_t>(numerics::element_code(f.element, p));
      }
    }
    return;
  }
  for (std::size_t j = 0; j * k < x.size(); ++j) {  // MX: X = 2^(code - 127); the NaN scale keeps its codes
    const double sv = numerics::scale_value(f.scale, q.scales[j]);
    if (std::isnan(sv)) continue;
    for (std::size_t i = j * k; i < (j + 1) * k; ++i) {
      const double t = x[i] / sv;  // a power of two: exact
      const double p = numerics::round_to(elem, Rounding::Stochastic, t, draw(i));
      q.codes[i] = static_cast<std::uint8_t>(numerics::element_code(f.element, p));
    }
  }
}

}  // namespace

void quantize_rows(const BlockFormat& f, std::span<double> v, std::size_t K, const QuantDraws* draws,
                   const std::string& where) {
  const std::size_t axis = f.block_rows == 1 && f.rule == ScaleRule::AbsmaxCodebook ? v.size() : K;
  if (draws != nullptr && !supports_stochastic(f))
    throw std::invalid_argument(where + ": stochastic rounding of " + f.name +
                                " elements is not supported; valid: the 1-D MX floating-point formats and nvfp4");
  if (refuses_nonfinite(f) && std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); })) {
    std::fill(v.begin(), v.end(), std::numeric_limits<double>::quiet_NaN());  // a diverged operand stays diverged
    return;
  }
  numerics::BlockCodes q;
  try {
    q = numerics::quantize(f, v, axis);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  if (draws != nullptr) stochastic_codes(f, v, q, *draws);
  numerics::dequantize_into(f, q.codes, q.scales, q.tensor_scale, numerics::formats::fp32, v, q.biases, axis);
}

void quantize_operand(const std::optional<BlockFormat>& f, std::span<const double> data, std::size_t rows,
                      std::size_t cols, bool k_is_cols, bool rht, std::uint64_t rht_seed, const QuantDraws* sr,
                      std::span<double> out, const std::string& where) {
  const std::size_t n = rows * cols;
  if (data.size() != n || out.size() != n) throw std::logic_error("quantize_operand: operand size mismatch");
  const std::size_t K = k_is_cols ? cols : rows;
  if (rht && K % kRhtSize != 0)
    throw std::invalid_argument(where + ": the random Hadamard transform needs a contraction axis that is a multiple of " +
                                std::to_string(kRhtSize) + ", not " + std::to_string(K) +
                                "; valid: rht=off for this entry");
  // w: the operand with K as its last axis (a copy, or the transpose).
  std::vector<double> w(n);
  std::vector<std::size_t> element_of;
  if (k_is_cols) {
    std::copy(data.begin(), data.end(), w.begin());
  } else {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) w[c * rows + r] = data[r * cols + c];
    if (sr != nullptr) {
      element_of.resize(n);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) element_of[c * rows + r] = r * cols + c;
    }
  }
  if (rht) rht_rows(w, K, rht_seed);
  const auto back = [&](const std::vector<double>& src, std::span<double> dst) {  // K-last layout → storage layout
    if (k_is_cols) {
      std::copy(src.begin(), src.end(), dst.begin());
    } else {
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
    }
  };
  if (!f) return back(w, out);
  if (quantized_in_storage_layout(*f)) {
    back(w, out);
    return quantize_rows(*f, out, cols, sr, where);  // refused for sr: neither layout supports it
  }
  QuantDraws d{};
  if (sr != nullptr) {
    d = *sr;
    if (!element_of.empty()) d.element_of = element_of.data();
  }
  quantize_rows(*f, w, K, sr != nullptr ? &d : nullptr, where);
  back(w, out);
}

}  // namespace roundoff::ops
