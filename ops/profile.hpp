#pragma once
/// \file profile.hpp
/// Where the time of a training step goes: wall-clock seconds and call counts per (op, pass), filled by
/// ops::Runner around each emulated op call when a Profile is attached (Runner::enable_profile), plus named
/// phases outside the ops that the caller times itself (the trainer's unscale/clip, etc.), plus passes outside
/// the steps (the evaluations: seconds and the units, e.g. windows, they covered).
/// Timing only: attaching a Profile changes no computed bit.
#include <array>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "ops/op_kind.hpp"

namespace roundoff::ops {

class Profile {
 public:
  using Clock = std::chrono::steady_clock;

  void add(OpKind op, Pass pass, double seconds) {
    const std::size_t i = index_of(op) * kPassCount + index_of(pass);
    seconds_[i] += seconds;
    ++calls_[i];
  }
  /// Time outside the ops, under a name (e.g. "trainer: unscale+clip").
  void add_phase(const std::string& name, double seconds) { phases_[name] += seconds; }
  /// Work outside the steps (not in any step's time): `seconds` over `units` units (e.g. evaluation windows),
  /// summed per name; the table lists each with its seconds per unit.
  void add_outside(const std::string& name, double seconds, std::int64_t units) {
    Outside& o = outside_[name];
    o.seconds += seconds;
    o.units += units;
  }
  /// One whole step took `seconds` of wall time (the table's denominator) and `cpu_seconds` of the process's
  /// CPU time (all its threads, user + system; see process_cpu_seconds).
  void add_step(double seconds, double cpu_seconds) {
    step_seconds_ += seconds;
    step_times_.push_back(seconds);
    step_cpu_times_.push_back(cpu_seconds);
    ++steps_;
  }
  /// Median wall time of one step (0 before any step).
  double median_step_seconds() const;
  /// Median process CPU time of one step (0 before any step). On a shared machine this is the figure that
  /// other processes' load does not stretch (cache sharing still does).
  double median_step_cpu_seconds() const;

  double seconds(OpKind op, Pass pass) const { return seconds_[index_of(op) * kPassCount + index_of(pass)]; }
  std::int64_t calls(OpKind op, Pass pass) const { return calls_[index_of(op) * kPassCount + index_of(pass)]; }
  std::int64_t steps() const { return steps_; }
  double step_seconds() const { return step_seconds_; }

  /// Seconds and units of the work outside the steps named `name` (0, 0 when none was added).
  double outside_seconds(const std::string& name) const;
  std::int64_t outside_units(const std::string& name) const;

  /// The table: one row per (op, pass) that ran, slowest first, then the phases and "other" (step time not
  /// in any row), each as ms per step and % of the step; ops' rows also give calls per step. Then the work
  /// outside the steps: seconds, units and ms per unit.
  void print(std::ostream& os) const;
  /// The same rows as CSV: op,pass,calls_per_step,ms_per_step,percent; the first rows are the mean step
  /// (op "step"), the median step (op "step-median", wall time) and the median step's process CPU time (op
  /// "step-cpu-median"). The work outside the steps follows with pass
  /// "outside": calls_per_step holds its units (e.g. windows), ms_per_step the ms per unit, percent is empty.
  void write_csv(std::ostream& os) const;

 private:
  std::array<double, kOpCount * kPassCount> seconds_{};
  std::array<std::int64_t, kOpCount * kPassCount> calls_{};
  std::map<std::string, double> phases_;
  struct Outside {
    double seconds = 0;
    std::int64_t units = 0;
  };
  std::map<std::string, Outside> outside_;
  double step_seconds_ = 0;
  std::vector<double> step_times_;
  std::vector<double> step_cpu_times_;
  std::int64_t steps_ = 0;
};

/// Seconds since `t0`.
inline double seconds_since(Profile::Clock::time_point t0) {
  return std::chrono::duration<double>(Profile::Clock::now() - t0).count();
}

/// CPU time consumed so far by this process, all threads, user + system (CLOCK_PROCESS_CPUTIME_ID).
double process_cpu_seconds();

/// Runs f(), timed as the phase `name` of `profile` (just runs it when `profile` is null).
template <class F>
void timed_phase(Profile* profile, const char* name, F&& f) {
  if (profile == nullptr) {
    f();
    return;
  }
  const auto t0 = Profile::Clock::now();
  f();
  profile->add_phase(name, seconds_since(t0));
}

}  // namespace roundoff::ops
