// Unscaling, clipping and AdamW on master weights.
#include "studies/train/optimizer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "numerics/binary32_arith.hpp"
#include "numerics/round.hpp"
#include "numerics/round_span.hpp"

namespace roundoff::studies::train {
namespace {

using numerics::Rounding;

/// round_to(fp32, nearest-even, x) for a binary64 x: the IEEE conversion to binary32 is that rounding (correctly
/// rounded to nearest-even, gradual underflow, overflow to ±inf); NaN goes through round_to for its NaN.
double to_fp32(const numerics::RoundingPlan& fp32, double x) {
  return std::isnan(x) ? numerics::round_to(fp32, Rounding::NearestEven, x)
                       : static_cast<double>(static_cast<float>(x));
}

/// Rounds binary64 results to the state format, nearest-even (identity for fp64, the conversion for fp32).
struct Rounder {
  enum class Kind { Identity, Fp32, Plan };
  numerics::RoundingPlan plan;
  Kind kind;
  explicit Rounder(const numerics::Format& f)
      : plan(f),
        kind(f == numerics::formats::fp64   ? Kind::Identity
             : f == numerics::formats::fp32 ? Kind::Fp32
                                            : Kind::Plan) {}
  double operator()(double x) const {
    switch (kind) {
      case Kind::Identity: return x;
      case Kind::Fp32: return to_fp32(plan, x);
      case Kind::Plan: return numerics::round_to(plan, Rounding::NearestEven, x);
    }
    return x;
  }
};

/// unscale_gradients' fast case: a power-of-two scale whose inverse S⁻¹ is a binary32 value, f = fp32, the default
/// control register. fl32(w·S⁻¹) of the exact binary64 product is then the hardware binary32 product w × S⁻¹
/// (correctly rounded, subnormals and overflow included) for every non-NaN w.
bool binary32_inverse_applies(double scale, const numerics::Format& f) {
  int exponent = 0;
  const double inv = 1.0 / scale;
  return std::frexp(scale, &exponent) == 0.5 && f == numerics::formats::fp32 &&
         static_cast<double>(static_cast<float>(inv)) == inv && numerics::default_mxcsr();
}

constexpr std::size_t kUnscaleChunk = std::size_t{1} << 15;

/// g ← fl32(g·S⁻¹) where binary32_inverse_applies, chunk by chunk over the threads; returns whether every result is
/// finite. A chunk holding a NaN takes the binary64 product and rounding element by element (the NaN's bits, as
/// the general loop gives them). With `sums` (one per chunk), sums[c] = Σ g² of chunk c after the unscaling in
/// binary64 (numerics::binary64_sum_of_squares16), read while the chunk is in cache; NaN for a chunk that held a NaN.
bool unscale_by_binary32_inverse(std::span<float> g, double scale, double* sums) {
  const double inv = 1.0 / scale;
  const auto inv32 = static_cast<float>(inv);
  const Rounder to_f(numerics::formats::fp32);
  const auto chunks = static_cast<std::int64_t>((g.size() + kUnscaleChunk - 1) / kUnscaleChunk);
  bool all = true;
#pragma omp parallel for schedule(static) reduction(&& : all)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kUnscaleChunk, n = std::min(kUnscaleChunk, g.size() - b);
    const std::span<float> part = g.subspan(b, n);
    if (numerics::any_nan(std::span<const float>(part))) {
      for (float& v : part) v = static_cast<float>(to_f(static_cast<double>(v) * inv));
      if (sums != nullptr) sums[c] = std::numeric_limits<double>::quiet_NaN();
      all = false;
      continue;
    }
    numerics::binary32_arith(numerics::Binary32Op::Mul, part, std::span<const float>(&inv32, 1), part);
    if (sums != nullptr) {
      // A binary32 value squares below 2^256 and 2^15 such squares sum below 2^271: the sum is finite exactly when
      // every value is (the finiteness scan's answer).
      sums[c] = numerics::binary64_sum_of_squares16(std::span<const float>(part));
      all = std::isfinite(sums[c]) && all;
    } else {
      all = numerics::all_finite(std::span<const float>(part)) && all;
    }
  }
  return all;
}
}  // namespace

numerics::Format update_format(const numerics::Format& grads) {
  return numerics::holds_binary32(grads) ? grads : numerics::formats::fp32;
}

/// Runs f(i) for every i in [0, n), ranges of elements split over the threads (elementwise work only: no
/// element depends on another, so the result is the same on any thread count); returns false when f returned
/// false for some i (a logical and, which needs no order).
template <class F>
bool for_each_element(std::size_t n, F&& f) {
  constexpr std::size_t kChunk = std::size_t{1} << 15;
  bool all = true;
  const auto ranges = static_cast<std::int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) reduction(&& : all)
  for (std::int64_t r = 0; r < ranges; ++r) {
    const std::size_t b = static_cast<std::size_t>(r) * kChunk, e = std::min(n, b + kChunk);
    unsigned bad = 0;
    for (std::size_t i = b; i < e; ++i) bad |= static_cast<unsigned>(!f(i));
    all = all && bad == 0;
  }
  return all;
}

bool unscale_gradients(std::span<double> grads, double scale, int accum, const numerics::Format& f) {
  const Rounder to_f(f);
  if (accum > 1) {
    const double gsc = to_f(1.0 / (static_cast<double>(accum) * scale));
    return for_each_element(grads.size(), [&](std::size_t i) {
      grads[i] = to_f(grads[i] * gsc);
      return std::isfinite(grads[i]);
    });
  }
  const double inv = 1.0 / scale;
  int exponent = 0;
  const bool exact_inverse = std::frexp(scale, &exponent) == 0.5;  // S a power of two: g·(1/S) is exact
  return for_each_element(grads.size(), [&](std::size_t i) {
    grads[i] = to_f(exact_inverse ? grads[i] * inv : grads[i] / scale);
    return std::isfinite(grads[i]);
  });
}

void accumulate_gradients(std::span<double> total, std::span<const double> micro, bool first) {
  const numerics::RoundingPlan fp32(numerics::formats::fp32);
  (void)for_each_element(total.size(), [&](std::size_t i) {
    total[i] = to_fp32(fp32, first ? micro[i] : total[i] + micro[i]);
    return true;
  });
}

void accumulate_and_clear(std::span<double> total, std::span<double> micro, bool first) {
  const numerics::RoundingPlan fp32(numerics::formats::fp32);
  constexpr std::size_t kPiece = 1024;  // the sums of a piece stay in L1 between the addition and the rounding
  std::array<double, kPiece> sum;
  for (std::size_t at = 0; at < total.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, total.size() - at);
    const std::span<double> t = total.subspan(at, n), m = micro.subspan(at, n);
    if (first) {
      numerics::round_array(fp32, Rounding::NearestEven, m, t);
    } else {
      for (std::size_t i = 0; i < n; ++i) sum[i] = t[i] + m[i];
      numerics::round_array(fp32, Rounding::NearestEven, std::span<const double>(sum.data(), n), t);
    }
    std::fill(m.begin(), m.end(), 0.0);
  }
}

bool accumulate_and_clear_binary32(std::span<float> total, std::span<float> micro, bool first) {
  if (total.size() != micro.size() || micro.size() > kAccumulatePiece)
    throw std::logic_error("accumulate_and_clear_binary32: spans of different lengths or longer than a piece");
  std::array<float, kAccumulatePiece> sum;
  const std::size_t n = micro.size();
  std::uint32_t special = 0;  // any sum (or micro value) inf or NaN: exponent field all ones
  for (std::size_t i = 0; i < n; ++i) {
    const float s = first ? micro[i] : total[i] + micro[i];
    sum[i] = s;
    special |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(s) & 0x7f800000u) == 0x7f800000u);
  }
  if (special != 0) return false;
  std::copy_n(sum.begin(), n, total.begin());
  std::fill(micro.begin(), micro.end(), 0.0f);
  return true;
}

double global_norm(std::span<const double> grads, const numerics::Format& f) {
  double sum = 0;
  for (const double g : grads) sum += g * g;
  return Rounder(f)(std::sqrt(sum));
}

bool unscale_gradients(ParamStore& grads, double scale, int accum, const numerics::Format& f) {
  if (grads.kind() == StorageKind::Binary64) return unscale_gradients(grads.binary64(), scale, accum, f);
  // The binary64 version's arithmetic on each widened value; the result (a value of f, binary32) stored back.
  const std::span<float> g = grads.binary32();
  // Unscaled gradients when nothing is scaled (scale 1, one micro-step: the fp32 and bf16 presets without a loss
  // scale): x = fl_f(w·1) = fl_f(w) is w itself for every finite binary32 w when f holds every binary32 value
  // (update_format's choice), so the stored gradients stay as they are and only the finiteness is asked. A store
  // holding ±inf or NaN takes the general loop below (fl_f of a NaN may change its bits), so the results are
  // those of the loop in every case.
  if (accum == 1 && scale == 1.0 && numerics::holds_binary32(f) && grads.all_finite()) return true;
  const Rounder to_f(f);
  if (accum > 1) {
    const double gsc = to_f(1.0 / (static_cast<double>(accum) * scale));
    return for_each_element(g.size(), [&](std::size_t i) {
      const double x = to_f(static_cast<double>(g[i]) * gsc);
      g[i] = static_cast<float>(x);
      return std::isfinite(x);
    });
  }
  const double inv = 1.0 / scale;
  int exponent = 0;
  const bool exact_inverse = std::frexp(scale, &exponent) == 0.5;
  if (binary32_inverse_applies(scale, f)) return unscale_by_binary32_inverse(g, scale, nullptr);
  return for_each_element(g.size(), [&](std::size_t i) {
    const double w = static_cast<double>(g[i]);
    const double x = to_f(exact_inverse ? w * inv : w / scale);
    g[i] = static_cast<float>(x);
    return std::isfinite(x);
  });
}

void accumulate_gradients(ParamStore& total, const ParamStore& micro, bool first) {
  if (total.kind() != micro.kind()) throw std::logic_error("accumulate_gradients: stores of two kinds");
  if (total.kind() == StorageKind::Binary64) return accumulate_gradients(total.binary64(), micro.binary64(), first);
  const std::span<float> t = total.binary32();
  const std::span<const float> m = micro.binary32();
  const numerics::RoundingPlan fp32(numerics::formats::fp32);
  (void)for_each_element(t.size(), [&](std::size_t i) {
    const double w = static_cast<double>(m[i]);
    t[i] = static_cast<float>(to_fp32(fp32, first ? w : static_cast<double>(t[i]) + w));
    return true;
  });
}

namespace {
/// Σ g² in binary64, sequentially in buffer order (global_norm's sum; each square exact: 48 significant bits).
double sum_of_squares(std::span<const float> g) {
  double sum = 0;
  for (const float x : g) sum += static_cast<double>(x) * static_cast<double>(x);
  return sum;
}

constexpr std::size_t kSquaresChunk = std::size_t{1} << 15;

/// Σ g² in binary64 in another order, for the bound of norm_of: chunks of kSquaresChunk elements split over the
/// threads, each summed in 16 chains (numerics::binary64_sum_of_squares16), then the chunks' sums in order (the same
/// bits on any thread count). Non-finite exactly when some g is.
double sum_of_squares_chunked(std::span<const float> g) {
  const std::size_t n = g.size(), chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  std::vector<double> part(chunks);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(chunks); ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kSquaresChunk, len = std::min(kSquaresChunk, n - b);
    part[static_cast<std::size_t>(c)] = numerics::binary64_sum_of_squares16(g.subspan(b, len));
  }
  double sum = 0;
  for (const double p : part) sum += p;
  return sum;
}

/// {every g finite, fl_f(√ŝ)} with ŝ = sum_of_squares(g) (global_norm's value): the norm from
/// sum_of_squares_chunked's s_p when that decides it, else from ŝ itself. Both sums add nonnegative terms, so with s
/// the exact sum, |ŝ − s| ≤ γ_a·s and |s_p − s| ≤ γ_b·s, where γ_k = k·u/(1 − k·u), u = 2^−53, and k bounds the
/// additions any one term passes through (n for the sequential sum; a chain, the tree and the chunks for the
/// other): Higham, Accuracy and Stability of Numerical Algorithms, §4.2. With γ = γ_a + γ_b < 1/3 that gives
/// ŝ ∈ [s_p·(1 − 3γ), s_p·(1 + 3γ)] (8u more cover the two roundings of each end). x ↦ fl_f(√x) is nondecreasing
/// (a correctly rounded √, then nearest-even with its overflow and underflow), so where both ends give one value ŝ
/// gives it too: the same bits, read in parallel. The ends differ when √ŝ lies within 3γ/2 (relative; ≈ 4·10⁻⁹ for
/// 13 million gradients) of a rounding boundary of f, and for a non-finite s_p: the sequential sum decides then.
/// norm_of given s_p (sum_of_squares_chunked(g)'s value, however computed).
GradientNorm norm_from_chunks(std::span<const float> g, double s_p, const numerics::Format& f) {
  const Rounder r(f);
  const bool finite = std::isfinite(s_p);
  if (finite) {
    const double u = 0x1p-53, n = static_cast<double>(g.size());
    const double chunks = std::ceil(n / static_cast<double>(kSquaresChunk));
    const auto gamma = [u](double k) { return k * u / (1 - k * u); };
    const double depth = static_cast<double>(kSquaresChunk / 16 + 4) + chunks;
    const double g3 = 3 * (gamma(n) + gamma(depth)) + 8 * u;
    if (g3 < 1) {
      const double lo = r(std::sqrt(s_p * (1 - g3))), hi = r(std::sqrt(s_p * (1 + g3)));
      if (std::bit_cast<std::uint64_t>(lo) == std::bit_cast<std::uint64_t>(hi)) return {true, lo};
    }
  }
  return {finite, r(std::sqrt(sum_of_squares(g)))};
}

GradientNorm norm_of(std::span<const float> g, const numerics::Format& f) {
  return norm_from_chunks(g, sum_of_squares_chunked(g), f);
}
}  // namespace

double global_norm(const ParamStore& grads, const numerics::Format& f) {
  if (grads.kind() == StorageKind::Binary64) return global_norm(grads.binary64(), f);
  return norm_of(grads.binary32(), f).norm;
}

std::optional<GradientNorm> unscale_with_norm(ParamStore& grads, double scale, int accum, const numerics::Format& f) {
  if (accum != 1 || grads.kind() != StorageKind::Binary32) return std::nullopt;
  const std::span<float> g = grads.binary32();
  if (scale == 1.0 && numerics::holds_binary32(f)) return norm_of(g, f);  // finite gradients stay as they are
  if (!binary32_inverse_applies(scale, f)) return std::nullopt;
  static_assert(kUnscaleChunk == kSquaresChunk, "the unscaling's chunks are the parallel sum's");
  std::vector<double> sums((g.size() + kUnscaleChunk - 1) / kUnscaleChunk);
  const bool finite = unscale_by_binary32_inverse(g, scale, sums.data());
  if (!finite) return GradientNorm{false, norm_of(g, f).norm};  // a NaN chunk's sum is not the parallel sum's
  double s_p = 0;
  for (const double p : sums) s_p += p;
  return norm_from_chunks(g, s_p, f);
}

double clip_coefficient(double norm, double max_norm, const numerics::Format& f) {
  if (max_norm <= 0) return 1.0;
  const Rounder r(f);
  const double c = r(max_norm / r(norm + 1e-6));
  return c < 1.0 ? c : 1.0;
}

void adamw_update(std::span<double> master, std::span<double> m, std::span<double> v, std::span<const double> grads,
                  const ParamLayout& layout, const Recipe& recipe, double lr, std::int64_t t, double coef,
                  const AdamFormats& formats) {
  for (const ParamTensor tensor : kAllParamTensors)
    adamw_update(tensor, master, m, v, grads, layout, recipe, lr, t, coef, formats);
}

void adamw_update(ParamTensor tensor, std::span<double> master, std::span<double> m, std::span<double> v,
                  std::span<const double> grads, const ParamLayout& layout, const Recipe& recipe, double lr,
                  std::int64_t t, double coef, const AdamFormats& formats) {
  const Rounder r(formats.compute), to_master(formats.master), to_m(formats.m), to_v(formats.v);
  const double b1 = r(recipe.beta1), b2 = r(recipe.beta2);
  const double one_b1 = r(1.0 - recipe.beta1), one_b2 = r(1.0 - recipe.beta2);
  // Bias corrections 1 − β^t: binary64, rounded once (a host-side constant, as in PyTorch and llm.c).
  const double bc1 = r(1.0 - std::pow(recipe.beta1, static_cast<double>(t)));
  const double bc2 = r(1.0 - std::pow(recipe.beta2, static_cast<double>(t)));
  const double lr_r = r(lr), eps = r(recipe.eps), gs = r(coef);
  const std::size_t off = layout.offset_of(tensor), n = layout.size_of(tensor);
  const double wd = is_decayed(tensor, recipe.decay_embedding) ? r(recipe.weight_decay) : 0.0;
  for (std::size_t k = off; k < off + n; ++k) {
    const double g = coef != 1.0 ? r(grads[k] * gs) : grads[k];
    m[k] = to_m(r(r(b1 * m[k]) + r(one_b1 * g)));
    v[k] = to_v(r(r(b2 * v[k]) + r(one_b2 * r(g * g))));
    const double m_hat = r(m[k] / bc1), v_hat = r(v[k] / bc2);
    const double step = r(r(m_hat / r(r(std::sqrt(v_hat)) + eps)) + r(wd * master[k]));
    master[k] = to_master(r(master[k] - r(lr_r * step)));
  }
}

}  // namespace roundoff::studies::train
