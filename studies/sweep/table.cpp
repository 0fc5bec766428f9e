// Building runs.csv from the summaries of a sweep's complete runs.
#include "studies/sweep/table.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "numerics/csv.hpp"

namespace roundoff::studies::sweep {

namespace {

/// Provenance columns, last and in this order.
const std::vector<std::string> kProvenance = {"policy",        "loss_scale",    "data_source", "git_revision",
                                              "build_flags",   "weights_sha256", "created_utc", "command",
                                              "segments"};

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();  // numbers (shortest round-trip text), booleans, and arrays as JSON
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [key, v] : j.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (v.is_object())
      flatten(v, name, out);
    else
      out[name] = cell(v);
  }
}

}  // namespace

Collected collect(const Grid& g, const Store& store, const std::vector<Run>& runs) {
  Collected c;
  c.total = runs.size();
  std::vector<std::pair<const Run*, std::map<std::string, std::string>>> rows;
  std::set<std::string> fields;
  for (const Run& r : runs) {
    if (run_status(store.run_dir(r)).state != RunState::Complete) continue;
    std::ifstream in(store.run_dir(r) / "summary.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object())
      throw std::runtime_error("sweep: " + (store.run_dir(r) / "summary.json").string() + " is not a JSON object");
    std::map<std::string, std::string> values;
    flatten(j, "", values);
    for (const auto& [k, v] : values) fields.insert(k);
    rows.emplace_back(&r, std::move(values));
  }
  std::vector<std::string> header{"study", "run"};
  for (const Axis& a : g.axes) header.push_back(a.name);
  const std::set<std::string> taken(header.begin(), header.end());
  for (const std::string& f : fields)
    if (!taken.count(f) && std::find(kProvenance.begin(), kProvenance.end(), f) == kProvenance.end())
      header.push_back(f);
  for (const std::string& f : kProvenance)
    if (!taken.count(f)) header.push_back(f);

  auto line = [](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t k = 0; k < cells.size(); ++k) s += (k ? "," : "") + numerics::csv_field(cells[k]);
    return s + "\n";
  };
  c.csv = line(header);
  for (const auto& [run, values] : rows) {
    std::vector<std::string> cells{g.study, run->name};
    for (const auto& [axis, label] : run->labels) cells.push_back(label);
    for (std::size_t k = cells.size(); k < header.size(); ++k) {
      const auto it = values.find(header[k]);
      cells.push_back(it == values.end() ? "" : it->second);
    }
    c.csv += line(cells);
  }
  c.complete = rows.size();
  return c;
}

}  // namespace roundoff::studies::sweep
