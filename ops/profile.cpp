#include "ops/profile.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <ostream>
#include <vector>

#include "numerics/csv.hpp"

namespace roundoff::ops {

namespace {

struct Row {
  std::string op, pass;
  double seconds;
  std::int64_t calls;  ///< -1: a phase or "other" (no call count)
};

std::vector<Row> rows_of(const std::array<double, kOpCount * kPassCount>& seconds,
                         const std::array<std::int64_t, kOpCount * kPassCount>& calls,
                         const std::map<std::string, double>& phases, double step_seconds) {
  std::vector<Row> r;
  double covered = 0;
  for (OpKind k : kAllOps)
    for (Pass p : kAllPasses) {
      const std::size_t i = index_of(k) * kPassCount + index_of(p);
      if (calls[i] == 0) continue;
      r.push_back({std::string(name_of(k)), std::string(name_of(p)), seconds[i], calls[i]});
      covered += seconds[i];
    }
  std::sort(r.begin(), r.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  for (const auto& [name, s] : phases) {
    r.push_back({name, "", s, -1});
    covered += s;
  }
  r.push_back({"other", "", std::max(0.0, step_seconds - covered), -1});
  return r;
}

}  // namespace

namespace {

double median_of(std::vector<double> t) {
  if (t.empty()) return 0;
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  return n % 2 == 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

}  // namespace

double Profile::median_step_seconds() const { return median_of(step_times_); }

double Profile::median_step_cpu_seconds() const { return median_of(step_cpu_times_); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Profile::outside_seconds(const std::string& name) const {
  const auto it = outside_.find(name);
  return it == outside_.end() ? 0.0 : it->second.seconds;
}

std::int64_t Profile::outside_units(const std::string& name) const {
  const auto it = outside_.find(name);
  return it == outside_.end() ? 0 : it->second.units;
}

void Profile::print(std::ostream& os) const {
  const double n = static_cast<double>(std::max<std::int64_t>(1, steps_));
  char line[160];
  std::snprintf(line, sizeof line,
                "profile: %lld steps, %.1f ms per step (mean), %.1f ms (median), process CPU %.1f ms (median)\n",
                static_cast<long long>(steps_), 1e3 * step_seconds_ / n, 1e3 * median_step_seconds(),
                1e3 * median_step_cpu_seconds());
  os << line;
  std::snprintf(line, sizeof line, "  %-28s %-11s %9s %12s %7s\n", "op", "pass", "calls/step", "ms/step", "%");
  os << line;
  for (const Row& r : rows_of(seconds_, calls_, phases_, step_seconds_)) {
    const double pct = step_seconds_ > 0 ? 100.0 * r.seconds / step_seconds_ : 0.0;
    if (r.calls >= 0)
      std::snprintf(line, sizeof line, "  %-28s %-11s %9.1f %12.2f %6.1f%%\n", r.op.c_str(), r.pass.c_str(),
                    static_cast<double>(r.calls) / n, 1e3 * r.seconds / n, pct);
    else
      std::snprintf(line, sizeof line, "  %-28s %-11s %9s %12.2f %6.1f%%\n", r.op.c_str(), r.pass.c_str(), "",
                    1e3 * r.seconds / n, pct);
    os << line;
  }
  if (outside_.empty()) return;
  std::snprintf(line, sizeof line, "  outside the steps            %11s %9s %12s %7s\n", "", "units", "s", "ms/unit");
  os << line;
  for (const auto& [name, o] : outside_) {
    std::snprintf(line, sizeof line, "  %-28s %-11s %9lld %12.2f %7.1f\n", name.c_str(), "",
                  static_cast<long long>(o.units), o.seconds,
                  1e3 * o.seconds / static_cast<double>(std::max<std::int64_t>(1, o.units)));
    os << line;
  }
}

void Profile::write_csv(std::ostream& os) const {
  const double n = static_cast<double>(std::max<std::int64_t>(1, steps_));
  os << "op,pass,calls_per_step,ms_per_step,percent\n";
  os << (numerics::CsvRow() << "step" << "" << 1 << 1e3 * step_seconds_ / n << 100).str() << '\n';
  os << (numerics::CsvRow() << "step-median" << "" << 1 << 1e3 * median_step_seconds() << "").str() << '\n';
  os << (numerics::CsvRow() << "step-cpu-median" << "" << 1 << 1e3 * median_step_cpu_seconds() << "").str()
     << '\n';
  for (const Row& r : rows_of(seconds_, calls_, phases_, step_seconds_)) {
    numerics::CsvRow row;
    row << r.op << r.pass;
    if (r.calls >= 0)
      row << static_cast<double>(r.calls) / n;
    else
      row << "";
    row << 1e3 * r.seconds / n << (step_seconds_ > 0 ? 100.0 * r.seconds / step_seconds_ : 0.0);
    os << row.str() << '\n';
  }
  for (const auto& [name, o] : outside_)
    os << (numerics::CsvRow() << name << "outside" << o.units
                              << 1e3 * o.seconds / static_cast<double>(std::max<std::int64_t>(1, o.units)) << "")
              .str()
       << '\n';
}

}  // namespace roundoff::ops
