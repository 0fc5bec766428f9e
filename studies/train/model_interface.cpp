// The Model interface's default for a micro-step of an accumulated update.
#include "studies/train/model_interface.hpp"

#include <algorithm>

#include "studies/train/optimizer.hpp"

namespace roundoff::studies::train {

double Model::loss_and_grad_accumulate(const Batch& b, std::span<const double> master, double loss_scale,
                                       std::span<double> grads, std::span<double> total, bool first,
                                       StepTelemetry& telemetry) {
  const double loss = loss_and_grad(b, master, loss_scale, grads, telemetry);
  accumulate_gradients(total, grads, first);
  std::fill(grads.begin(), grads.end(), 0.0);
  return loss;
}

}  // namespace roundoff::studies::train
