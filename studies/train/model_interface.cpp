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

namespace {

/// The elements of a store as a binary64 span: its own for Binary64, else widened into `copy`.
std::span<const double> widened(const ParamStore& s, std::vector<double>& copy) { return s.view(0, s.size(), copy); }
std::span<double> widened(ParamStore& s, std::vector<double>& copy) { return s.view(0, s.size(), copy); }

}  // namespace

double Model::total_loss_stored(const Batch& b, const ParamStore& master) {
  std::vector<double> w;
  return total_loss(b, widened(master, w));
}

double Model::loss_and_grad_stored(const Batch& b, const ParamStore& master, double loss_scale, ParamStore& grads,
                                   StepTelemetry& telemetry) {
  std::vector<double> w, g;
  const std::span<double> gs = widened(grads, g);
  const double loss = loss_and_grad(b, widened(master, w), loss_scale, gs, telemetry);
  grads.store_from(0, gs);
  return loss;
}

double Model::loss_and_grad_accumulate_stored(const Batch& b, const ParamStore& master, double loss_scale,
                                              ParamStore& grads, ParamStore& total, bool first,
                                              StepTelemetry& telemetry) {
  if (grads.size() == 0 && total.size() != 0) {
    ParamStore micro(total.kind(), total.size());
    return loss_and_grad_accumulate_stored(b, master, loss_scale, micro, total, first, telemetry);
  }
  std::vector<double> w, g, t;
  const std::span<double> gs = widened(grads, g), ts = widened(total, t);
  const double loss = loss_and_grad_accumulate(b, widened(master, w), loss_scale, gs, ts, first, telemetry);
  grads.store_from(0, gs);
  total.store_from(0, ts);
  return loss;
}

void Model::update_tensor_stored(ParamTensor tensor, ParamStore& master, ParamStore& m, ParamStore& v,
                                 const ParamStore& grads, const Recipe& recipe, double lr, std::int64_t t,
                                 double coef) {
  std::vector<double> w, g;
  const std::span<double> ws = widened(master, w);
  update_tensor(tensor, ws, m, v, widened(grads, g), recipe, lr, t, coef);
  master.store_from(0, ws);
}

}  // namespace roundoff::studies::train
