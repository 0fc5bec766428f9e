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
  for (const auto& [run, values] : rows) c.runs.push_back(run->name);
  return c;
}

std::vector<std::string> tabled_runs(const std::string& csv) {
  std::vector<std::vector<std::string>> records(1, std::vector<std::string>(1));
  bool quoted = false;
  for (std::size_t i = 0; i < csv.size(); ++i) {
    const char ch = csv[i];
    std::string& field = records.back().back();
    if (quoted) {
      if (ch != '"') field += ch;
      else if (i + 1 < csv.size() && csv[i + 1] == '"') field += csv[++i];
      else quoted = false;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      records.back().emplace_back();
    } else if (ch == '\n') {
      if (i + 1 < csv.size()) records.emplace_back(1);
    } else if (ch != '\r') {
      field += ch;
    }
  }
  const std::vector<std::string>& header = records.front();
  if (header.size() < 2 || header[0] != "study" || header[1] != "run")
    throw std::invalid_argument("not a runs table (its header does not start with study,run)");
  std::vector<std::string> runs;
  for (std::size_t r = 1; r < records.size(); ++r)
    if (records[r].size() >= 2) runs.push_back(records[r][1]);
  return runs;
}

}  // namespace roundoff::studies::sweep
