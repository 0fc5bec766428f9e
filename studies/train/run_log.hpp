#pragma once
/// \file run_log.hpp
/// Everything a run records while it trains, kept as tidy rows so it can be checkpointed and written
/// as CSV: curves (step, metric, value), telemetry (step, layer, op, pass, tensor, metric, value) and
/// events (step, kind, detail) such as loss-scale changes, skipped steps and the first non-finite value.
/// Rows are written by numerics::CsvRow (RFC 4180 quoting: a detail with a comma stays one field).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace roundoff::studies::train {

class RunLog {
 public:
  /// A scalar curve point, e.g. ("train_loss", 3.2).
  void curve(std::int64_t step, std::string_view metric, double value);
  /// A telemetry value. layer = -1 for model-wide values; op/pass/tensor may be empty.
  void telemetry(std::int64_t step, int layer, std::string_view op, std::string_view pass,
                 std::string_view tensor, std::string_view metric, double value);
  /// A discrete event ("loss_scale", "skip", "nonfinite", …) with a free-text detail (no commas/newlines).
  void event(std::int64_t step, std::string_view kind, std::string_view detail);

  /// "step,metric,value" rows; values printed with 17 significant digits (round-trip exact).
  std::string curves_csv() const;
  std::string telemetry_csv() const;
  std::string events_csv() const;

  /// The last value of a curve metric, or NaN if it was never recorded.
  double last(std::string_view metric) const;
  /// Rows for checkpoints (exact round trip).
  nlohmann::json to_json() const;
  static RunLog from_json(const nlohmann::json& j);
  friend bool operator==(const RunLog&, const RunLog&) = default;

 private:
  std::vector<std::string> curves_, telemetry_, events_;
};

/// The shortest decimal that reads back to v, "nan", "inf", "-inf" (numerics::shortest_decimal).
std::string format_value(double v);

}  // namespace roundoff::studies::train
