// Parsing a sweep grid and expanding it into runs.
#include "studies/sweep/grid.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "studies/data/sha256.hpp"

namespace roundoff::studies::sweep {

namespace {

using Json = nlohmann::ordered_json;

/// Flags the sweep sets itself for every invocation.
const std::set<std::string> kOwnedFlags = {"out", "resume", "stop-after", "threads"};

/// Keys a grid file may hold at its top level.
constexpr const char* kTopKeys = "study, fixed, axes, shard";

std::string type_name(const Json& j) { return j.type_name(); }

bool safe_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '+' ||
         c == '-';
}

std::string slug(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (!safe_char(c)) c = '-';
  return out;
}

std::string valid_flag_list(const TrainFlags& train_flags) {
  std::string out;
  for (const auto& [name, kind] : train_flags) {
    if (kOwnedFlags.count(name)) continue;
    out += (out.empty() ? "" : " ") + name;
  }
  return out;
}

class Parser {
 public:
  Parser(std::string source, const TrainFlags& train_flags) : source_(std::move(source)), flags_(train_flags) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("grid " + source_ + ": " + what);
  }

  /// One flag and its JSON value, checked against the train command; `where` names its place in the grid.
  FlagValue flag_value(const std::string& name, const Json& v, const std::string& where) const {
    if (!name.empty() && name[0] == '-')
      fail(where + ": write flag names without the leading dashes ('" + name.substr(name.find_first_not_of('-')) +
           "', not '" + name + "')");
    if (kOwnedFlags.count(name))
      fail(where + ": --" + name + " is set by the sweep itself (it owns --out, --resume, --stop-after, --threads)");
    const auto it = flags_.find(name);
    if (it == flags_.end())
      fail(where + ": '" + name + "' is not a `roundoff train` flag (valid: " + valid_flag_list(flags_) + ")");
    FlagValue out;
    switch (it->second) {
      case FlagKind::Switch:
        if (!v.is_boolean())
          fail(where + ": --" + name + " is a switch; give true (on) or false (off), not " + type_name(v) + " " +
               v.dump());
        out.type = FlagValue::Type::Switch;
        out.on = v.get<bool>();
        return out;
      case FlagKind::Value:
        if (v.is_string()) {
          out.text = v.get<std::string>();
          if (out.text.empty()) fail(where + ": --" + name + " has an empty value (give a non-empty string)");
          for (const char c : out.text)
            if (static_cast<unsigned char>(c) < 0x20)
              fail(where + ": --" + name + "'s value holds a control character (give printable text)");
        } else if (v.is_number()) {
          out.text = v.dump();
        } else {
          fail(where + ": --" + name + " takes a value; give a string or a number, not " + type_name(v) + " " +
               v.dump());
        }
        return out;
    }
    fail(where + ": unhandled flag kind");
  }

  std::map<std::string, FlagValue> flag_set(const Json& j, const std::string& where) const {
    if (!j.is_object()) fail(where + " must be an object of train flags, e.g. {\"precision\": \"fp32\"}");
    std::map<std::string, FlagValue> out;
    for (const auto& [name, v] : j.items()) out[name] = flag_value(name, v, where);
    return out;
  }

  Axis axis(const std::string& name, const Json& j) const {
    const std::string where = "axis '" + name + "'";
    if (name.empty()) fail("an axis has an empty name");
    if (name == "study" || name == "run")
      fail("an axis may not be named '" + name + "' (runs.csv has columns of that name); rename it");
    Axis a;
    a.name = name;
    std::set<std::string> seen;
    if (j.is_array()) {
      if (j.empty()) fail(where + " has no values (give at least one)");
      for (const auto& v : j) {
        AxisValue av;
        FlagValue fv = flag_value(name, v, where);
        av.label = fv.type == FlagValue::Type::Switch ? (fv.on ? "on" : "off") : fv.text;
        av.flags[name] = std::move(fv);
        if (!seen.insert(av.label).second) fail(where + " lists the value '" + av.label + "' twice");
        a.values.push_back(std::move(av));
      }
    } else if (j.is_object()) {
      if (j.empty()) fail(where + " has no variants (give at least one)");
      for (const auto& [label, flags] : j.items()) {
        if (label.empty()) fail(where + " has a variant with an empty name");
        a.values.push_back({label, flag_set(flags, where + " variant '" + label + "'")});
      }
    } else {
      fail(where + " must be a list of values of flag --" + name +
           " or an object of named variants {\"name\": {flags}}, not " + type_name(j));
    }
    return a;
  }

  Grid grid(const Json& top) const {
    if (!top.is_object()) fail("the grid must be a JSON object with keys " + std::string(kTopKeys));
    for (const auto& [key, v] : top.items())
      if (key != "study" && key != "fixed" && key != "axes" && key != "shard")
        fail("unknown key '" + key + "' (valid: " + kTopKeys + ")");
    Grid g;
    if (!top.contains("study") || !top["study"].is_string())
      fail("\"study\" must be given as a string (it names runs/<study>/ and notebooks-data/<study>/)");
    g.study = top["study"].get<std::string>();
    if (g.study.empty() || g.study[0] == '.' || slug(g.study) != g.study)
      fail("study '" + g.study + "' must be letters, digits, '.', '+' or '-', not starting with '.'");
    if (top.contains("fixed")) g.fixed = flag_set(top["fixed"], "\"fixed\"");
    if (top.contains("axes")) {
      if (!top["axes"].is_object())
        fail("\"axes\" must be an object {\"flag\": [values], \"name\": {variants}}, not " +
             type_name(top["axes"]));
      for (const auto& [name, v] : top["axes"].items()) g.axes.push_back(axis(name, v));
    }
    if (top.contains("shard")) {
      const Json& s = top["shard"];
      if (!s.is_number_integer() || s.get<std::int64_t>() < 1)
        fail("\"shard\" must be a whole number of steps >= 1 (steps per train invocation), not " + s.dump());
      g.shard = s.get<std::int64_t>();
    }
    return g;
  }

 private:
  std::string source_;
  const TrainFlags& flags_;
};

}  // namespace

std::vector<std::string> Run::train_args() const {
  std::vector<std::string> args;
  for (const auto& [flag, v] : flags) {
    switch (v.type) {
      case FlagValue::Type::Switch:
        if (v.on) args.push_back("--" + flag);
        break;
      case FlagValue::Type::Text:
        args.push_back("--" + flag);
        args.push_back(v.text);
        break;
    }
  }
  return args;
}

namespace {

/// Every flag the run gets, sorted, "--flag value" one per line (a switch that is off is not given).
std::string canonical_args(const std::map<std::string, FlagValue>& flags) {
  std::string canonical;
  for (const auto& [flag, v] : flags) {
    switch (v.type) {
      case FlagValue::Type::Switch:
        if (v.on) canonical += "--" + flag + "\n";
        break;
      case FlagValue::Type::Text:
        canonical += "--" + flag + " " + v.text + "\n";
        break;
    }
  }
  return canonical;
}

}  // namespace

std::string run_name(const std::vector<std::pair<std::string, std::string>>& labels,
                     const std::map<std::string, FlagValue>& flags) {
  std::string name;
  for (const auto& [axis, label] : labels) name += slug(axis) + "-" + slug(label) + "_";
  constexpr std::size_t kMaxSlug = 180;
  if (name.size() > kMaxSlug) name.resize(kMaxSlug);
  return name + data::sha256_hex(canonical_args(flags)).substr(0, 8);
}

std::vector<Run> Grid::expand() const {
  std::vector<Run> runs;
  std::vector<std::size_t> index(axes.size(), 0);
  for (const Axis& a : axes)
    if (a.values.empty()) return runs;
  std::map<std::string, std::string> seen;  // canonical arguments -> run name
  for (;;) {
    Run r;
    std::map<std::string, std::string> source;
    for (const auto& [flag, v] : fixed) {
      r.flags[flag] = v;
      source[flag] = "\"fixed\"";
    }
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const AxisValue& av = axes[k].values[index[k]];
      r.labels.emplace_back(axes[k].name, av.label);
      for (const auto& [flag, v] : av.flags) {
        const std::string here = "axis '" + axes[k].name + "'";
        if (const auto it = source.find(flag); it != source.end())
          throw std::invalid_argument("grid for study " + study + ": flag --" + flag + " is set by both " +
                                      it->second + " and " + here + " (set each flag in one place)");
        r.flags[flag] = v;
        source[flag] = here;
      }
    }
    r.name = run_name(r.labels, r.flags);
    const auto [it, fresh] = seen.emplace(canonical_args(r.flags), r.name);
    if (!fresh)
      throw std::invalid_argument("grid for study " + study + ": runs " + it->second + " and " + r.name +
                                  " get the same arguments; make the variants of each axis differ");
    runs.push_back(std::move(r));
    std::size_t k = axes.size();
    while (k > 0) {
      --k;
      if (++index[k] < axes[k].values.size()) break;
      index[k] = 0;
      if (k == 0) return runs;
    }
    if (axes.empty()) return runs;
  }
}

Grid parse_grid(const std::string& text, const std::string& source, const TrainFlags& train_flags) {
  Json top;
  // A key given twice in one object (a variant label, a flag) is refused: JSON parsers keep the last one, so
  // one of the two silently vanished.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const Json::parser_callback_t check = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    else if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == Json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    top = Json::parse(text, check);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (const auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    for (char& c : what)
      if (c == '\n' || c == '\r') c = ' ';
    throw std::invalid_argument("grid " + source + ": not valid JSON: " + what);
  }
  if (!duplicate.empty())
    throw std::invalid_argument("grid " + source + ": the key '" + duplicate +
                                "' is given twice in one object (JSON keeps only the last); give each key once");
  Grid g = Parser(source, train_flags).grid(top);
  try {
    g.expand();
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    what = what.substr(what.find(": ") + 2);
    throw std::invalid_argument("grid " + source + ": " + what);
  }
  return g;
}

Grid load_grid(const std::filesystem::path& path, const TrainFlags& train_flags) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("grid " + path.string() + ": no such file (give the path of a JSON grid file)");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) throw std::invalid_argument("grid " + path.string() + ": cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_grid(text.str(), path.string(), train_flags);
}

}  // namespace roundoff::studies::sweep
