// The checkpoint's fp8_scaling section: written by the trainer, read by resume and by checkpoint evaluations.
#include "studies/train/fp8_checkpoint.hpp"

#include <bit>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <vector>

namespace roundoff::studies::train {

nlohmann::json fp8_state_json(const ops::Fp8ScalingState& st) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [key, t] : st.tensors()) {
    std::vector<std::uint32_t> h(t.history.size());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::bit_cast<std::uint32_t>(t.history[i]);
    tensors[key] = {{"elem", std::string(ops::name_of(t.elem))},
                    {"scale", std::bit_cast<std::uint32_t>(t.scale)},
                    {"history", h}};
  }
  return {{"scaling", ops::to_string(st.config())}, {"tensors", tensors}};
}

void load_fp8_state(const nlohmann::json& section, ops::Fp8ScalingState& st, const std::filesystem::path& ckpt) {
  const std::string scaling = section.at("scaling").get<std::string>();
  if (scaling != ops::to_string(st.config()))
    throw std::runtime_error("checkpoint " + ckpt.string() + " holds fp8 scaling state for " + scaling +
                             ", this run uses " + ops::to_string(st.config()));
  std::map<std::string, ops::Fp8TensorState> tensors;
  for (const auto& [key, t] : section.at("tensors").items()) {
    ops::Fp8TensorState s;
    const std::string e = t.at("elem").get<std::string>();
    s.elem = e == "e4m3" ? ops::Fp8Elem::E4M3 : e == "e5m2" ? ops::Fp8Elem::E5M2 : ops::Fp8Elem::Off;
    s.scale = std::bit_cast<float>(t.at("scale").get<std::uint32_t>());
    for (const std::uint32_t b : t.at("history").get<std::vector<std::uint32_t>>())
      s.history.push_back(std::bit_cast<float>(b));
    tensors.emplace(key, std::move(s));
  }
  try {
    st.assign(std::move(tensors));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("checkpoint " + ckpt.string() + ": " + e.what());
  }
}

std::set<std::string> load_fp8_state_for_evaluation(const nlohmann::json& meta, ops::Fp8ScalingState& st,
                                                    const std::filesystem::path& ckpt) {
  std::set<std::string> keys;
  if (st.config().mode != ops::Fp8ScaleMode::Delayed || !meta.contains("fp8_scaling")) return keys;
  const nlohmann::json& section = meta.at("fp8_scaling");
  const std::string scaling = section.at("scaling").get<std::string>();
  if (scaling != ops::to_string(st.config()))
    throw std::runtime_error("checkpoint " + ckpt.string() + " holds fp8 scales for fp8-scaling=" + scaling +
                             ", this command uses fp8-scaling=" + ops::to_string(st.config()) +
                             " (valid: the checkpoint's fp8-scaling, or fp8-scaling=current)");
  load_fp8_state(section, st, ckpt);
  for (const auto& [key, t] : st.tensors()) keys.insert(key);
  return keys;
}

void check_fp8_state_covered(const ops::Fp8ScalingState& st, const std::set<std::string>& loaded,
                             const std::filesystem::path& ckpt) {
  if (st.config().mode != ops::Fp8ScaleMode::Delayed) return;
  for (const auto& [key, t] : st.tensors())
    if (!loaded.contains(key))
      throw std::runtime_error("checkpoint " + ckpt.string() + " has no fp8 amax history for " + key +
                               ", which this command's delayed scaling casts (its scale would be the initial 1; "
                               "valid: a checkpoint of a run under the same delayed-scaled operands, or "
                               "fp8-scaling=current)");
}

}  // namespace roundoff::studies::train
