// Tidy run records.
#include "studies/train/run_log.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "numerics/csv.hpp"

namespace roundoff::studies::train {

std::string format_value(double v) { return numerics::shortest_decimal(v); }

namespace {
std::string join(const std::string& header, const std::vector<std::string>& rows) {
  std::string s = header + "\n";
  for (const auto& r : rows) s += r + "\n";
  return s;
}
}  // namespace

void RunLog::curve(std::int64_t step, std::string_view metric, double value) {
  curves_.push_back((numerics::CsvRow() << step << metric << value).str());
}

void RunLog::telemetry(std::int64_t step, int layer, std::string_view op, std::string_view pass,
                       std::string_view tensor, std::string_view metric, double value) {
  telemetry_.push_back((numerics::CsvRow() << step << layer << op << pass << tensor << metric << value).str());
}

void RunLog::event(std::int64_t step, std::string_view kind, std::string_view detail) {
  events_.push_back((numerics::CsvRow() << step << kind << detail).str());
}

std::string RunLog::curves_csv() const { return join("step,metric,value", curves_); }
std::string RunLog::telemetry_csv() const { return join("step,layer,op,pass,tensor,metric,value", telemetry_); }
std::string RunLog::events_csv() const { return join("step,kind,detail", events_); }

double RunLog::last(std::string_view metric) const {
  const std::string key = "," + std::string(metric) + ",";
  for (auto it = curves_.rbegin(); it != curves_.rend(); ++it) {
    const auto pos = it->find(key);
    if (pos != std::string::npos) return std::strtod(it->c_str() + pos + key.size(), nullptr);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json RunLog::to_json() const {
  return {{"curves", curves_}, {"telemetry", telemetry_}, {"events", events_}};
}

RunLog RunLog::from_json(const nlohmann::json& j) {
  RunLog log;
  log.curves_ = j.at("curves").get<std::vector<std::string>>();
  log.telemetry_ = j.at("telemetry").get<std::vector<std::string>>();
  log.events_ = j.at("events").get<std::vector<std::string>>();
  return log;
}

}  // namespace roundoff::studies::train
