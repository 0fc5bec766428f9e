#include "ops/gemm_quant.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
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
  return a.stochastic == b.stochastic && a.rht == b.rht && a.rht_seed == b.rht_seed && a.fp8 == b.fp8 &&
         a.rescale == b.rescale;
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
    // s_j = Σ_i in_i·Q_ij in i order from 0, for the 16 j side by side (each s_j sees the same additions in the
    // same order as one j at a time; the j loop is the one the compiler can vectorise)
    std::array<double, kRhtSize> s{};
    for (std::size_t i = 0; i < kRhtSize; ++i)
      for (std::size_t j = 0; j < kRhtSize; ++j) s[j] += in[i] * q[i * kRhtSize + j];
    for (std::size_t j = 0; j < kRhtSize; ++j) v[b + j] = static_cast<double>(static_cast<float>(s[j]));  // RN fp32
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

/// element_code(e, p) for the values p of a floating-point element format, by binary search in a table of its
/// codes' values built once per operand (to_bits' format arithmetic per element dominated the stochastic
/// quantization). Only codes that to_bits gives back for their own value enter the table, and a value not in it
/// (none is, for a value of the format) takes element_code itself, so every answer is element_code's.
class ElementCodes {
 public:
  explicit ElementCodes(const numerics::BlockElement& e) : e_(e) {
    if (e.is_int || e.codebook != nullptr) return;
    const std::optional<numerics::Encoding> enc = numerics::encoding_of(e.fp);
    if (!enc || enc->total_bits() > 12) return;
    for (std::uint64_t c = 0; c < (std::uint64_t{1} << enc->total_bits()); ++c) {
      const double v = numerics::from_bits(e.fp, c);
      if (!std::isfinite(v) || numerics::to_bits(e.fp, v) != c) continue;
      if (v == 0) (std::signbit(v) ? neg_zero_ : pos_zero_) = static_cast<std::int64_t>(c);
      else table_.push_back({v, static_cast<std::uint32_t>(c)});
    }
    std::sort(table_.begin(), table_.end(), [](const Entry& a, const Entry& b) { return a.value < b.value; });
  }
  std::uint32_t operator()(double p) const {
    if (p == 0) {
      const std::int64_t c = std::signbit(p) ? neg_zero_ : pos_zero_;
      if (c >= 0) return static_cast<std::uint32_t>(c);
    } else {
      const auto it = std::lower_bound(table_.begin(), table_.end(), p,
                                       [](const Entry& a, double v) { return a.value < v; });
      if (it != table_.end() && it->value == p) return it->code;
    }
    return numerics::element_code(e_, p);
  }

 private:
  struct Entry {
    double value;
    std::uint32_t code;
  };
  const numerics::BlockElement& e_;
  std::vector<Entry> table_;
  std::int64_t pos_zero_ = -1, neg_zero_ = -1;
};

/// The element codes of x under f's block scales `q.scales` (and tensor scale) with stochastic element rounding:
/// the library's nearest-even chain with the one element rounding replaced (numerics/block_format.hpp's rules).
void stochastic_codes(const BlockFormat& f, std::span<const double> x, numerics::BlockCodes& q, const QuantDraws& d) {
  const auto k = static_cast<std::size_t>(f.block_size);
  const numerics::RoundingPlan elem(f.element.fp);
  const ElementCodes code_of(f.element);
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
        q.codes[i] = static_cast<std::uint8_t>(code_of(p));
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
      q.codes[i] = static_cast<std::uint8_t>(code_of(p));
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

namespace {

/// dst (cols × rows) ← srcᵀ, src rows × cols row-major; in 32 × 32 tiles, so that neither side is walked with a
/// stride of a whole row per element (the operands of the backward passes are transposed twice per call).
void transpose_into(const double* src, std::size_t rows, std::size_t cols, double* dst) {
  constexpr std::size_t T = 32;
  for (std::size_t r0 = 0; r0 < rows; r0 += T) {
    const std::size_t r1 = std::min(rows, r0 + T);
    for (std::size_t c0 = 0; c0 < cols; c0 += T) {
      const std::size_t c1 = std::min(cols, c0 + T);
      for (std::size_t r = r0; r < r1; ++r)
        for (std::size_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
    }
  }
}

}  // namespace

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
  // K the columns, or a format quantized in the storage layout without the transform: work in `out` itself (the
  // transform and the quantization run along the rows of the layout they are given, so no transpose is needed).
  if (k_is_cols || (!rht && f && quantized_in_storage_layout(*f))) {
    if (out.data() != data.data()) std::copy(data.begin(), data.end(), out.begin());
    if (rht) rht_rows(out, K, rht_seed);
    if (f) quantize_rows(*f, out, cols, sr, where);  // refused for sr in the storage layouts: neither supports it
    return;
  }
  // K the rows: w = the operand with K as its last axis (the transpose), in this thread's scratch slot 4 (the
  // matmul ops hold slots 0..3 while they call this; every element of w is written before it is read).
  const std::span<double> w = scratch_buffer<double>(n, 4);
  transpose_into(data.data(), rows, cols, w.data());
  if (rht) rht_rows(w, K, rht_seed);
  if (!f) return transpose_into(w.data(), cols, rows, out.data());
  if (quantized_in_storage_layout(*f)) {
    transpose_into(w.data(), cols, rows, out.data());
    return quantize_rows(*f, out, cols, sr, where);  // refused for sr: neither layout supports it
  }
  std::vector<std::size_t> element_of;
  QuantDraws d{};
  if (sr != nullptr) {
    element_of.resize(n);  // position c·rows + r of w is element r·cols + c of the operand
    for (std::size_t c = 0, p = 0; c < cols; ++c)
      for (std::size_t r = 0; r < rows; ++r, ++p) element_of[p] = r * cols + c;
    d = *sr;
    d.element_of = element_of.data();
  }
  quantize_rows(*f, w, K, sr != nullptr ? &d : nullptr, where);
  transpose_into(w.data(), cols, rows, out.data());
}

}  // namespace roundoff::ops
