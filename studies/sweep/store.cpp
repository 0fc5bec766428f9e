// The state of a sweep's runs, read from what `roundoff train` left in each run directory.
#include "studies/sweep/store.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

namespace roundoff::studies::sweep {

RunStatus run_status(const std::filesystem::path& dir) {
  RunStatus s;
  std::error_code ec;
  bool complete = false;
  if (std::ifstream in(dir / "summary.json"); in) {
    // summary.json is written atomically, so a readable one is whole; anything else counts as absent.
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object()) {
      if (const auto it = j.find("steps_completed"); it != j.end() && it->is_number_integer())
        s.steps_completed = it->get<std::int64_t>();
      if (const auto it = j.find("steps"); it != j.end() && it->is_number_integer()) s.steps = it->get<std::int64_t>();
      if (const auto it = j.find("complete"); it != j.end() && it->is_boolean()) complete = it->get<bool>();
      if (const auto it = j.find("diverged"); it != j.end() && it->is_boolean()) complete = complete || it->get<bool>();
    }
  }
  if (complete)
    s.state = RunState::Complete;
  else if (std::filesystem::exists(dir / "checkpoint.bin", ec))
    s.state = RunState::Partial;
  return s;
}

std::string describe(const RunStatus& s) {
  switch (s.state) {
    case RunState::New:
      return "new";
    case RunState::Partial:
      return "partial " + std::to_string(s.steps_completed) + "/" + std::to_string(s.steps);
    case RunState::Complete:
      return "complete";
  }
  return "unknown";
}

}  // namespace roundoff::studies::sweep
