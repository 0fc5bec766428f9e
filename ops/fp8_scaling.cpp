#include "ops/fp8_scaling.hpp"

#include <algorithm>
#include <charconv>
#include <cfloat>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "numerics/format.hpp"
#include "numerics/round.hpp"

namespace roundoff::ops {

namespace {

/// The saturating fp8 formats the casts round through (CUDA's __NV_SATFINITE conversions).
constexpr numerics::Format kE4m3Sat{4, -6, 8, true, numerics::Specials::NanOnly, true};
constexpr numerics::Format kE5m2Sat{3, -14, 15, true, numerics::Specials::Ieee, true};

/// Values per chunk of the span casts (4 KiB of doubles each: they stay in L1).
constexpr std::size_t kCastChunk = 512;

const numerics::Format& cast_format(Fp8Elem e) { return e == Fp8Elem::E4M3 ? kE4m3Sat : kE5m2Sat; }

/// q[i] = fp8_cast(e, y[i]) for i < n, where every y[i] is a binary32 value held exactly as a double; `plan` is
/// RoundingPlan(cast_format(e)). Argument: for a finite y, fp8_cast returns float(round_to(cast_format(e),
/// NearestEven, y)), and round_to(Format, ...) is round_to(RoundingPlan(Format), ...); round_array's contract
/// (numerics/round.hpp) is dst[i] = round_to(plan, mode, src[i]) bit for bit, so the finite lanes agree; the
/// non-finite lanes (±inf saturate, NaN kept) are fp8_cast itself. n <= kCastChunk.
void fp8_cast_chunk(Fp8Elem e, const numerics::RoundingPlan& plan, const double* y, double* q, std::size_t n) {
  numerics::round_array(plan, numerics::Rounding::NearestEven, std::span<const double>(y, n), std::span<double>(q, n));
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(y[i])) q[i] = static_cast<double>(fp8_cast(e, static_cast<float>(y[i])));
}

constexpr const char* kOperandValid = "valid: off, e4m3, e5m2, ELEM:1xB (1×B blocks along the contraction axis), "
                                      "ELEM:BxB (B×B tiles), B in 1..65536, either with :pad for a ragged last block (e.g. e4m3:1x128, "
                                      "e4m3:128x128:pad)";
constexpr const char* kScalingValid =
    "valid: current[:MARGIN] or delayed[:H[:ALGO[:MARGIN]]], H an amax history length >= 1, ALGO max or "
    "most-recent, MARGIN an integer in 0..100 (e.g. delayed:1024:max:0)";

bool parse_int(std::string_view t, int lo, int hi, int& out) {
  const auto r = std::from_chars(t.data(), t.data() + t.size(), out);
  return r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty() && out >= lo && out <= hi;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t a = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(a, i - a));
      a = i + 1;
    }
  return out;
}

}  // namespace

std::string_view name_of(Fp8Elem e) {
  switch (e) {
    case Fp8Elem::Off: return "off";
    case Fp8Elem::E4M3: return "e4m3";
    case Fp8Elem::E5M2: return "e5m2";
  }
  return "";
}

float fp8_max(Fp8Elem e) {
  switch (e) {
    case Fp8Elem::Off: return 0.0f;
    case Fp8Elem::E4M3: return 448.0f;
    case Fp8Elem::E5M2: return 57344.0f;
  }
  return 0.0f;
}

std::string to_string(const Fp8Operand& o) {
  std::string s(name_of(o.elem));
  if (o.on() && !o.per_tensor()) s += ":" + std::to_string(o.block_rows) + "x" + std::to_string(o.block_cols);
  if (o.pad) s += ":pad";
  return s;
}

Fp8Operand parse_fp8_operand(std::string_view text) {
  const std::vector<std::string_view> parts = split(text, ':');
  Fp8Operand o;
  bool found = false;
  for (Fp8Elem e : {Fp8Elem::Off, Fp8Elem::E4M3, Fp8Elem::E5M2})
    if (name_of(e) == parts[0]) {
      o.elem = e;
      found = true;
    }
  if (parts.size() == 3 && parts[2] == "pad") o.pad = true;
  if (!found || parts.size() > 3 || (parts.size() == 3 && !o.pad) || (o.elem == Fp8Elem::Off && parts.size() != 1))
    throw std::invalid_argument("unknown scaled fp8 operand '" + std::string(text) + "'; " + kOperandValid);
  if (parts.size() == 1) return o;
  const std::string_view g = parts[1];
  const std::size_t x = g.find('x');
  int r = 0, c = 0;
  if (x == std::string_view::npos || !parse_int(g.substr(0, x), 1, 65536, r) ||
      !parse_int(g.substr(x + 1), 1, 65536, c) || !(r == 1 || r == c))
    throw std::invalid_argument("unknown fp8 block shape '" + std::string(g) + "'; " + kOperandValid);
  o.block_rows = r;
  o.block_cols = c;
  return o;
}

std::string to_string(const Fp8Scaling& s) {
  switch (s.mode) {
    case Fp8ScaleMode::Current: return s.margin == 0 ? "current" : "current:" + std::to_string(s.margin);
    case Fp8ScaleMode::Delayed:
      return "delayed:" + std::to_string(s.history) + ":" + (s.algo == AmaxAlgo::Max ? "max" : "most-recent") + ":" +
             std::to_string(s.margin);
  }
  return "";
}

Fp8Scaling parse_fp8_scaling(std::string_view text) {
  const std::vector<std::string_view> p = split(text, ':');
  Fp8Scaling s;
  const auto bad = [&](const std::string& why) {
    throw std::invalid_argument("fp8-scaling '" + std::string(text) + "': " + why + "; " + kScalingValid);
  };
  if (p[0] == "current") {
    if (p.size() > 2) bad("too many parts");
    if (p.size() == 2 && !parse_int(p[1], 0, 100, s.margin)) bad("margin '" + std::string(p[1]) + "' is not in 0..100");
    return s;
  }
  if (p[0] != "delayed") bad("unknown scaling mode '" + std::string(p[0]) + "'");
  s.mode = Fp8ScaleMode::Delayed;
  if (p.size() > 4) bad("too many parts");
  if (p.size() >= 2 && !parse_int(p[1], 1, 1 << 20, s.history))
    bad("amax history length '" + std::string(p[1]) + "' is not an integer in 1..1048576");
  if (p.size() >= 3) {
    if (p[2] == "max") s.algo = AmaxAlgo::Max;
    else if (p[2] == "most-recent") s.algo = AmaxAlgo::MostRecent;
    else bad("unknown amax algorithm '" + std::string(p[2]) + "'");
  }
  if (p.size() == 4 && !parse_int(p[3], 0, 100, s.margin)) bad("margin '" + std::string(p[3]) + "' is not in 0..100");
  return s;
}

float tensor_amax(std::span<const double> v) {
  float m = 0.0f;
  for (double x : v) m = std::fmax(m, std::fabs(static_cast<float>(x)));  // fmaxf: a NaN operand is skipped
  return m;
}

float scaled_max(Fp8Elem e, int margin) { return fp8_max(e) * std::ldexp(1.0f, -margin); }

int rescale_exponent(double amax, Fp8Elem e) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  const double top = fp8_max(e);
  int k = std::ilogb(top) - std::ilogb(amax);
  if (std::ldexp(amax, k) > top) --k;
  return k;
}

float current_scale(float amax, float smax) {
  if (std::isinf(amax) || amax == 0.0f || std::isnan(amax)) return 1.0f;
  float s = smax / amax;
  if (std::isinf(s)) s = FLT_MAX;
  return s;
}

float delayed_update(std::span<float> h, float scale, AmaxAlgo algo, float smax) {
  const std::size_t H = h.size();
  const float last = h[0];
  float mx = 0.0f;
  std::vector<float> a(H);
  for (std::size_t i = 0; i < H; ++i) {
    a[i] = i + 1 < H ? h[i + 1] : last;
    mx = std::fmax(mx, a[i]);
  }
  for (std::size_t i = 0; i < H; ++i) h[i] = i > 0 ? a[i] : 0.0f;
  const float amax = algo == AmaxAlgo::MostRecent ? last : mx;
  float s = std::isfinite(amax) && amax > 0.0f ? smax / amax : scale;
  if (std::isinf(s)) s = FLT_MAX;
  return s;
}

float scale_inverse(float scale) { return 1.0f / scale; }

float fp8_cast(Fp8Elem e, float x) {
  if (std::isnan(x)) return x;
  const float top = fp8_max(e);
  if (std::isinf(x)) return x > 0 ? top : -top;
  return static_cast<float>(numerics::round_to(cast_format(e), numerics::Rounding::NearestEven, static_cast<double>(x)));
}

void quantize_per_tensor(std::span<double> v, Fp8Elem e, float scale, bool codes_only) {
  // Element by element: x ← fp8_cast(e, fp32(x) · scale) (· inv). The casts go a chunk at a time through
  // fp8_cast_chunk (the same values); each y is a binary32 product, held exactly as a double.
  const float inv = scale_inverse(scale);
  const numerics::RoundingPlan plan(cast_format(e));
  double y[kCastChunk], q[kCastChunk];
  for (std::size_t c = 0; c < v.size(); c += kCastChunk) {
    const std::size_t n = std::min(kCastChunk, v.size() - c);
    for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<double>(static_cast<float>(v[c + i]) * scale);
    fp8_cast_chunk(e, plan, y, q, n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto qi = static_cast<float>(q[i]);
      v[c + i] = codes_only ? static_cast<double>(qi) : static_cast<double>(qi * inv);
    }
  }
}

float block_scale(float amax, Fp8Elem e) {
  const float clamped = std::fmax(amax, 1e-4f);
  return clamped / fp8_max(e);
}

float quantize_block(std::span<double> v, Fp8Elem e, bool codes_only) {
  float amax = 0.0f;
  for (double x : v) {
    if (!std::isfinite(x)) {
      for (double& y : v) y = std::numeric_limits<double>::quiet_NaN();
      return std::numeric_limits<float>::quiet_NaN();
    }
    amax = std::fmax(amax, std::fabs(static_cast<float>(x)));
  }
  const float s = block_scale(amax, e);
  // x ← fp8_cast(e, fp32(x) / s) (· s), the casts a chunk at a time as in quantize_per_tensor.
  const numerics::RoundingPlan plan(cast_format(e));
  double y[kCastChunk], q[kCastChunk];
  for (std::size_t c = 0; c < v.size(); c += kCastChunk) {
    const std::size_t n = std::min(kCastChunk, v.size() - c);
    for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<double>(static_cast<float>(v[c + i]) / s);
    fp8_cast_chunk(e, plan, y, q, n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto qi = static_cast<float>(q[i]);
      v[c + i] = codes_only ? static_cast<double>(qi) : static_cast<double>(qi * s);
    }
  }
  return s;
}

Fp8TensorState& Fp8ScalingState::tensor(const std::string& key, Fp8Elem elem) {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    Fp8TensorState t;
    t.elem = elem;
    t.history.assign(static_cast<std::size_t>(cfg_.mode == Fp8ScaleMode::Delayed ? cfg_.history : 0), 0.0f);
    it = tensors_.emplace(key, std::move(t)).first;
  }
  return it->second;
}

void Fp8ScalingState::update() {
  if (cfg_.mode != Fp8ScaleMode::Delayed) return;
  for (auto& [key, t] : tensors_) t.scale = delayed_update(t.history, t.scale, cfg_.algo, scaled_max(t.elem, cfg_.margin));
}

void Fp8ScalingState::assign(std::map<std::string, Fp8TensorState> t) {
  const std::size_t H = static_cast<std::size_t>(cfg_.mode == Fp8ScaleMode::Delayed ? cfg_.history : 0);
  for (const auto& [key, s] : t)
    if (s.history.size() != H || s.elem == Fp8Elem::Off)
      throw std::invalid_argument("fp8 scaling state of tensor '" + key + "' has an amax history of " +
                                  std::to_string(s.history.size()) + " entries (element " + std::string(name_of(s.elem)) +
                                  "); valid: " + std::to_string(H) + " entries (" + to_string(cfg_) + ") and e4m3 or e5m2");
  tensors_ = std::move(t);
}

void count_fp8_cast(std::span<const double> v, Fp8Elem e, float factor, bool divide, Fp8CastCounts& c) {
  // Saturated: nearest-even with an unbounded exponent would give more than fp8_max, i.e. |y| is past the midpoint
  // between fp8_max and the next value of that wider format: E4M3 448 = 1.110b·2^8, next 480, midpoint 464, which
  // ties to 448 (even); E5M2 57344 = 1.11b·2^15, next 65536, midpoint 61440, which ties to 65536 (even). A |y| just
  // above fp8_max (a scale's rounding puts amax at 448.00003) rounds to fp8_max anyway and is not counted.
  const bool e4m3 = e == Fp8Elem::E4M3;
  const float mid = e4m3 ? 464.0f : 61440.0f;
  // Underflow needs |y| below the smallest normal (2^-6, 2^-14): rounding is monotone and that normal is a value of
  // the format, so a larger |y| never rounds to 0 and its cast is skipped.
  const float min_normal = e4m3 ? 0x1p-6f : 0x1p-14f;
  for (const double x : v) {
    ++c.elements;
    if (std::isnan(x)) continue;
    const float y = divide ? static_cast<float>(x) / factor : static_cast<float>(x) * factor;
    const float a = std::fabs(y);
    if (e4m3 ? a > mid : a >= mid) ++c.saturated;
    else if (x != 0 && std::isfinite(x) && a < min_normal && fp8_cast(e, y) == 0.0f) ++c.underflowed;
  }
}

void quantize_fp8_operand(const Fp8Operand& o, std::span<double> v, std::size_t rows, std::size_t cols,
                          const Fp8Scaling& cfg, Fp8TensorState* state, bool record, const std::string& where,
                          Fp8Codes* codes, Fp8CastCounts* counts) {
  if (!o.on()) return;
  if (o.per_tensor()) {
    const float amax = tensor_amax(v);
    float scale = 0;
    switch (cfg.mode) {
      case Fp8ScaleMode::Current: scale = current_scale(amax, scaled_max(o.elem, cfg.margin)); break;
      case Fp8ScaleMode::Delayed:
        if (state == nullptr)
          throw std::invalid_argument(where + ": delayed fp8 scaling needs the amax history of a Runner (ops::Runner "
                                              "keeps it per tensor); valid here: fp8-scaling=current");
        if (record) state->history[0] = std::fmax(state->history[0], amax);
        scale = state->scale;
        break;
    }
    if (codes != nullptr) codes->tensor_inv = scale_inverse(scale);
    if (counts != nullptr) count_fp8_cast(v, o.elem, scale, false, *counts);
    return quantize_per_tensor(v, o.elem, scale, codes != nullptr);
  }
  const auto br = static_cast<std::size_t>(o.block_rows), bc = static_cast<std::size_t>(o.block_cols);
  if (!o.pad && (cols % bc != 0 || rows % br != 0))
    throw std::invalid_argument(where + ": fp8 blocks of " + std::to_string(br) + "x" + std::to_string(bc) +
                                " do not divide the " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " operand; valid: a block size that divides " +
                                (br == 1 ? "the contraction axis (" + std::to_string(cols) + ")"
                                         : "both dimensions (" + std::to_string(rows) + ", " + std::to_string(cols) + ")") +
                                " (or " + to_string(o) + ":pad for a zero-padded last block)");
  std::vector<double> block, before;
  if (codes != nullptr) {
    codes->block.clear();
    codes->block_grid_cols = (cols + bc - 1) / bc;
  }
  for (std::size_t r0 = 0; r0 < rows; r0 += br)
    for (std::size_t c0 = 0; c0 < cols; c0 += bc) {
      const std::size_t nr = std::min(br, rows - r0), nc = std::min(bc, cols - c0);
      block.resize(nr * nc);
      for (std::size_t i = 0; i < nr; ++i)
        for (std::size_t j = 0; j < nc; ++j) block[i * nc + j] = v[(r0 + i) * cols + c0 + j];
      if (counts != nullptr) before = block;
      const float sc = quantize_block(block, o.elem, codes != nullptr);
      if (codes != nullptr) codes->block.push_back(sc);
      if (counts != nullptr) {
        if (std::isnan(sc)) counts->elements += before.size();  // a non-finite block: NaN, neither share
        else count_fp8_cast(before, o.elem, sc, true, *counts);
      }
      for (std::size_t i = 0; i < nr; ++i)
        for (std::size_t j = 0; j < nc; ++j) v[(r0 + i) * cols + c0 + j] = block[i * nc + j];
    }
}

}  // namespace roundoff::ops
