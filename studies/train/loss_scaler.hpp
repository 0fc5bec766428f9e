#pragma once
/// \file loss_scaler.hpp
/// Loss scaling with torch.amp.GradScaler semantics (STUDY_PROTOCOL.md §1.3).
///
/// The loss is multiplied by S before backprop; weight gradients are unscaled (g/S, in fp32) before
/// clipping and the update. With `static` and `dynamic`, a step whose emulated gradients hold Inf/NaN is
/// skipped. `dynamic` then multiplies S by `backoff`; after `interval` consecutive clean steps it multiplies
/// S by `growth`. With `none` (S = 1) nothing is skipped: a non-finite gradient reaches the weights, as in
/// a trainer without a scaler.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace roundoff::studies::train {

enum class LossScaleKind : std::uint8_t { None, Static, Dynamic };

/// Parsed `--loss-scale none|static:S|dynamic[:init,growth,backoff,interval]`.
struct LossScaleSpec {
  LossScaleKind kind = LossScaleKind::None;
  double init = 65536.0;  ///< static S, or dynamic initial scale (GradScaler init_scale 2^16)
  double growth = 2.0;    ///< dynamic growth_factor
  double backoff = 0.5;   ///< dynamic backoff_factor
  std::int64_t interval = 2000;  ///< dynamic growth_interval

  /// Throws std::invalid_argument naming the bad part and the accepted syntax.
  static LossScaleSpec parse(std::string_view text);
  /// "none", "static:256", "dynamic:65536,2,0.5,2000" (round-trips through parse).
  std::string canonical() const;
};

/// One change of the scale, for the log.
struct ScaleChange {
  std::int64_t step;
  double from, to;
  std::string_view reason;  ///< "backoff" or "growth"
};

/// The scaler's state (checkpointed): current scale and the count of consecutive clean steps.
class LossScaler {
 public:
  explicit LossScaler(const LossScaleSpec& spec);

  double scale() const { return scale_; }
  std::int64_t clean_steps() const { return clean_steps_; }
  const LossScaleSpec& spec() const { return spec_; }
  /// Restores a checkpointed state.
  void restore(double scale, std::int64_t clean_steps);

  /// Whether a step with (non-)finite gradients must skip the optimizer update.
  bool skips(bool grads_finite) const;
  /// GradScaler.update(): called once per step after the optimizer decision. Returns the change if the
  /// scale changed.
  std::optional<ScaleChange> update(std::int64_t step, bool grads_finite);

 private:
  LossScaleSpec spec_;
  double scale_ = 1.0;
  std::int64_t clean_steps_ = 0;
};

}  // namespace roundoff::studies::train
