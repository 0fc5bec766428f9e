#pragma once
/// \file optimizer.hpp
/// The update half of a training step: unscaling, the global-norm clip (in update_format) and AdamW (PyTorch
/// torch.optim.AdamW semantics, decoupled weight decay) on master weights held in a given format.
///
/// Rounding contract: every arithmetic operation of the update is rounded to `formats.compute`, and the
/// stored results to the master / m / v formats (the policy's roles), round-to-nearest-even. Each
/// operation is computed exactly or
/// correctly rounded in binary64 and then rounded to the format, which equals direct arithmetic in any
/// format with p ≤ 25 (double rounding is innocuous when 53 ≥ 2p+2), so under fp32 it is bit-identical to
/// plain `float` code.
#include <cstdint>
#include <optional>
#include <span>

#include "numerics/format.hpp"
#include "studies/train/config.hpp"
#include "studies/train/param_store.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train {

/// The format of the unscaled gradients, the global norm and the clip coefficient for a policy whose
/// `grads` role is `grads`: that format when it holds every fp32 value (fp32, fp64), else fp32 — the
/// unscaled gradients are the optimizer's, never narrower than fp32 (torch's GradScaler likewise refuses to
/// unscale fp16 gradients in place). So the fp64 policy trains on binary64 gradients end to end.
numerics::Format update_format(const numerics::Format& grads);

/// accum == 1: g[i] ← fl_f(g[i] / scale) (exact when scale is a power of two and f is fp64). accum > 1 (AutoANE's
/// update): g[i] ← fl_f(g[i] · fl_f(1/(accum·scale))). f: update_format of the policy's grads role. Returns true
/// when every unscaled gradient is finite.
bool unscale_gradients(std::span<double> grads, double scale, int accum = 1,
                       const numerics::Format& f = numerics::formats::fp32);

/// Gradient accumulation over micro-steps in fp32 (AutoANE's fp32 gradient buffers): total[i] ← fl32(micro[i])
/// when `first`, else fl32(total[i] + micro[i]): one addition per micro-step, in micro-step order.
void accumulate_gradients(std::span<double> total, std::span<const double> micro, bool first);

/// accumulate_gradients on one range, then micro ← +0 there: the same fl32 roundings (by numerics::round_array,
/// whose binary32 rounding is the conversion accumulate_gradients uses), in the calling thread.
void accumulate_and_clear(std::span<double> total, std::span<double> micro, bool first);

/// accumulate_and_clear on a binary32 total, in binary32 arithmetic: total[i] ← micro[i] when `first`, else the
/// binary32 sum total[i] + micro[i]; then micro ← +0 (a binary32 gradient store or slice). The bits are those of
/// widening both, accumulate_and_clear and narrowing back: for finite binary32 operands the binary64 sum rounded to
/// binary32 is the correctly rounded binary32 sum (a double rounding through binary64 is innocuous for addition:
/// 53 ≥ 2·24 + 2), which is what the binary32 addition computes (a sum in binary32's subnormal range is exact
/// either way). Returns false and writes nothing when any micro value or sum is not finite: the caller then takes
/// the widened path, whose NaN and overflow handling it keeps. total.size() == micro.size() ≤ kAccumulatePiece.
bool accumulate_and_clear_binary32(std::span<float> total, std::span<float> micro, bool first);
inline constexpr std::size_t kAccumulatePiece = 2048;


/// ‖g‖₂: squares and sum in binary64, sequentially in buffer order, the square root rounded to f once.
double global_norm(std::span<const double> grads, const numerics::Format& f = numerics::formats::fp32);

/// unscale_gradients, accumulate_gradients and global_norm on stored gradients: the same results as on the
/// widened values. A Binary32 store takes its results back narrowed, which is exact when its kind was chosen so
/// (Model::grads_storage(): f and fp32 among the formats); micro and total of one kind.
bool unscale_gradients(ParamStore& grads, double scale, int accum, const numerics::Format& f);
void accumulate_gradients(ParamStore& total, const ParamStore& micro, bool first);
double global_norm(const ParamStore& grads, const numerics::Format& f);

/// The gradients' finiteness and global_norm, from one pass.
struct GradientNorm {
  bool finite = true;  // every gradient finite
  double norm = 0;     // global_norm's value (possibly +inf when f cannot hold it, or NaN, with finite false)
};

/// unscale_gradients fused with global_norm, so that the update's norm need not read the gradients again, for
/// binary32 gradients of one micro-step:
/// - where the unscaling changes nothing (scale 1, f holding binary32: every finite gradient stays as it is), the
///   finiteness unscale_gradients returns and global_norm's bits (a binary32 value squares below 2^256, and a sum
///   of fewer than 2^700 of them stays finite, so the sum of squares is finite exactly when every gradient is); the
///   gradients are left untouched (where one is not finite too: the caller only asks the finiteness then);
/// - for a power-of-two scale whose inverse is a binary32 value and f = fp32 (unscale_gradients' binary32
///   product): the gradients unscaled as unscale_gradients leaves them, its finiteness, and global_norm's bits of
///   the unscaled gradients, the parallel sum's chunks squared and summed while each is in cache.
/// std::nullopt elsewhere, the gradients untouched (the caller then runs unscale_gradients and global_norm).
std::optional<GradientNorm> unscale_with_norm(ParamStore& grads, double scale, int accum, const numerics::Format& f);

/// Clip multiplier in f: min(1, fl_f(max_norm / fl_f(norm + 1e-6))); 1 when max_norm ≤ 0.
double clip_coefficient(double norm, double max_norm, const numerics::Format& f = numerics::formats::fp32);

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
/// adamw_update of one tensor's elements only (master, m, v, grads: whole buffers in `layout`).
void adamw_update(ParamTensor tensor, std::span<double> master, std::span<double> m, std::span<double> v,
                  std::span<const double> grads, const ParamLayout& layout, const Recipe& recipe, double lr,
                  std::int64_t t, double coef, const AdamFormats& formats);

}  // namespace roundoff::studies::train
