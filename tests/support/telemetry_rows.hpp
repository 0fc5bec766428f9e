#pragma once
/// \file telemetry_rows.hpp
/// The rows of a run's telemetry.csv that tests compare, shared by the CLI and the trainer tests.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace roundoff::test {

/// The MPFR-shadow rows (metrics shadow_* and global_*) of telemetry.csv at `step`, in file order, header excluded.
inline std::vector<std::string> shadow_rows(const std::filesystem::path& telemetry, std::int64_t step) {
  std::ifstream in(telemetry);
  std::vector<std::string> rows;
  const std::string prefix = std::to_string(step) + ",";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0 &&
        (line.find(",shadow_") != std::string::npos || line.find(",global_") != std::string::npos))
      rows.push_back(line);
  return rows;
}

}  // namespace roundoff::test
