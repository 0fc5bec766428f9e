#pragma once
/// \file optimizer.hpp
/// The update half of a training step: unscaling, the fp32 global-norm clip and AdamW (PyTorch
/// torch.optim.AdamW semantics, decoupled weight decay) on master weights held in a given format.
///
/// Rounding contract: every arithmetic operation of the update is rounded to `formats.compute`, and the
/// stored results to the master / m / v formats (the policy's roles), round-to-nearest-even. Each
/// operation is computed exactly or
/// correctly rounded in binary64 and then rounded to the format, which equals direct arithmetic in any
/// format with p ≤ 25 (double rounding is innocuous when 53 ≥ 2p+2), so under fp32 it is bit-identical to
/// plain `float` code.
#include <cstdint>
#include <span>

#include "numerics/format.hpp"
#include "studies/train/config.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train {

/// accum == 1: g[i] ← fl32(g[i] / scale). accum > 1 (AutoANE's update): g[i] ← fl32(g[i] · fl32(1/(accum·scale))).
/// Returns true when every unscaled gradient is finite.
bool unscale_gradients(std::span<double> grads, double scale, int accum = 1);

/// Gradient accumulation over micro-steps in fp32 (AutoANE's fp32 gradient buffers): total[i] ← fl32(micro[i])
/// when `first`, else fl32(total[i] + micro[i]): one addition per micro-step, in micro-step order.
void accumulate_gradients(std::span<double> total, std::span<const double> micro, bool first);

/// ‖g‖₂ of fp32 gradients: squares and sum in binary64, sequentially in buffer order, rounded to fp32 once.
double global_norm_fp32(std::span<const double> grads);

/// Clip multiplier in fp32: min(1, fl32(max_norm / (norm + 1e-6))); 1 when max_norm ≤ 0.
double clip_coefficient(double norm, double max_norm);

/// Formats of the optimizer: arithmetic and the three stored tensors.
struct AdamFormats {
  numerics::Format compute = numerics::formats::fp32;
  numerics::Format master = numerics::formats::fp32;
  numerics::Format m = numerics::formats::fp32;
  numerics::Format v = numerics::formats::fp32;
};

/// One AdamW step on every tensor, in the form of ops/adamw.hpp (llm.c): `t` is the 1-based count of
/// applied updates (bias correction); `coef` multiplies the gradients first (the clip); the decay λ = wd
/// on is_decayed() tensors, 0 elsewhere. m, v, master are updated in place:
///   g ← g·coef;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
///   w ← w − lr·(m̂/(√v̂ + ε) + λ·w),  m̂ = m/(1−β1ᵗ),  v̂ = v/(1−β2ᵗ).
/// This is the plain-arithmetic twin of ops::adamw_update, used by the test oracle model.
void adamw_update(std::span<double> master, std::span<double> m, std::span<double> v,
                         std::span<const double> grads, const ParamLayout& layout, const Recipe& recipe,
                         double lr, std::int64_t t, double coef, const AdamFormats& formats);

}  // namespace roundoff::studies::train
