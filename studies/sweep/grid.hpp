#pragma once
/// \file grid.hpp
/// A sweep grid: `roundoff train` flags that every run shares, and axes whose values multiply into runs
/// (docs/sweep.md). The grid file is JSON:
///
///   { "study": "sweep-pilot",                         // names runs/<study>/ and notebooks-data/<study>/
///     "fixed": { "config": "T0", "eval-tokens": 4096 }, // train flags (no leading --) given to every run
///     "axes": {                                       // cartesian product, first axis outermost
///       "precision": ["fp32", "ane-fp16"],            // a flag axis: one train flag, one value per run
///       "arm": { "plain": {}, "scaled": { "residual-scale": "inv-sqrt-2L" } },  // named variants
///       "seed": [1, 2] },
///     "shard": 50 }                                   // optional: --stop-after per invocation
///
/// Values are strings, numbers or booleans; a boolean sets a value-less switch (true: given, false: left
/// out). The sweep itself owns --out, --resume, --stop-after and --threads. Flags are checked against the
/// train command's own option table (TrainFlags), so flags added to `train` later need no change here.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace roundoff::studies::sweep {

/// How `roundoff train` takes a flag: as a value-less switch, or with one value.
enum class FlagKind { Switch, Value };

/// The flags `roundoff train` accepts, by name without the leading "--".
using TrainFlags = std::map<std::string, FlagKind>;

/// One flag value as written in the grid: text for the command line, or a switch's on/off.
struct FlagValue {
  enum class Type { Text, Switch };
  Type type = Type::Text;
  std::string text;  ///< Text: the argument after --flag (numbers as JSON writes them)
  bool on = false;   ///< Switch: given (true) or left out (false)
};

/// One value of one axis: its label (in the run name and the table) and the flags it sets.
struct AxisValue {
  std::string label;
  std::map<std::string, FlagValue> flags;
};

/// One axis: a flag axis (one flag, label = value) or a named-variants axis (label -> set of flags).
struct Axis {
  std::string name;
  std::vector<AxisValue> values;
};

/// One run of the grid: its axis labels (in axis order), its train flags, and its directory name.
struct Run {
  std::string name;                                      ///< <axis>-<label>_..._<8 hex>, see run_name
  std::vector<std::pair<std::string, std::string>> labels;  ///< (axis, label) in axis order
  std::map<std::string, FlagValue> flags;                 ///< fixed flags merged with each axis's flags
  /// The train arguments (without --out, --resume, --stop-after, --threads), flags in sorted order.
  std::vector<std::string> train_args() const;
};

/// A parsed grid file.
struct Grid {
  std::string study;
  std::map<std::string, FlagValue> fixed;
  std::vector<Axis> axes;
  std::int64_t shard = 0;  ///< steps per train invocation (--stop-after); 0: the whole run at once
  /// Every run, first axis outermost. Throws std::invalid_argument if two sources set one flag of a run or
  /// two runs get the same arguments.
  std::vector<Run> expand() const;
};

/// Parses grid JSON text; `source` names the file in errors. Every error is one line naming what is wrong
/// and what is valid (std::invalid_argument).
Grid parse_grid(const std::string& text, const std::string& source, const TrainFlags& train_flags);
/// Reads and parses a grid file.
Grid load_grid(const std::filesystem::path& path, const TrainFlags& train_flags);

/// The run directory name: "<axis>-<label>" per axis joined by '_' (characters other than letters, digits,
/// '.', '+' and '-' become '-'), then '_' and the first 8 hex digits of the sha256 of the run's canonical
/// train arguments (every flag it gets, sorted, "--flag value" one per line). Two runs share a name only if
/// they get the same arguments; the hash depends on the arguments alone, not on how the grid lays them out.
std::string run_name(const std::vector<std::pair<std::string, std::string>>& labels,
                     const std::map<std::string, FlagValue>& flags);

}  // namespace roundoff::studies::sweep
