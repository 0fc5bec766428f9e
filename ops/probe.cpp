#include "ops/probe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "numerics/csv.hpp"
#include "numerics/quantile.hpp"

namespace roundoff::ops {

namespace {

struct Accum {
  std::vector<double> ulps;
  double err2 = 0, ref2 = 0, cross = 0, max_rel = 0, dot_ratio = -1;
  std::int64_t underflow = 0;
  void add(double y, double r, double diff, const numerics::Format& f) {
    if (!std::isfinite(y) || !std::isfinite(r)) return;
    const double u = std::fabs(diff) / numerics::ulp(f, r);
    ulps.push_back(u);
    err2 += diff * diff;
    ref2 += r * r;
    cross += diff * r;
    if (r != 0) max_rel = std::max(max_rel, std::fabs(diff / r));
    if (r != 0 && y == 0) ++underflow;
  }
  ErrorStats finish() {
    ErrorStats s;
    s.count = static_cast<std::int64_t>(ulps.size());
    if (!ulps.empty()) {
      std::sort(ulps.begin(), ulps.end());
      s.median_ulp = numerics::quantile_sorted(ulps, 0.5);
      s.p95_ulp = numerics::quantile_sorted(ulps, 0.95);
      s.max_ulp = ulps.back();
      s.above_1ulp = ulps.end() - std::upper_bound(ulps.begin(), ulps.end(), 1.0);
    }
    s.max_rel = max_rel;
    s.norm_rel = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
    s.signed_rel = ref2 > 0 ? cross / ref2 : 0.0;
    if (dot_ratio >= 0) s.dot_ratio = dot_ratio;
    s.underflow = underflow;
    return s;
  }
};

}  // namespace

ErrorStats compare(std::span<const double> y, std::span<const Ref> r, const numerics::Format& storage,
                   std::span<const std::size_t> elements, std::span<const Ref> abs_dot, double u_acc) {
  Accum a;
  auto one = [&](std::size_t e) {
    const Ref d = Ref(y[e]) - r[e];
    const double diff = static_cast<double>(d);
    a.add(y[e], static_cast<double>(r[e]), diff, storage);
    if (!abs_dot.empty() && std::isfinite(y[e])) {
      const double den = u_acc * static_cast<double>(abs_dot[e]);
      const double ratio = den > 0 ? std::fabs(diff) / den : (diff == 0 ? 0.0 : INFINITY);
      a.dot_ratio = std::max(a.dot_ratio, ratio);
    }
  };
  if (elements.empty()) {
    for (std::size_t e = 0; e < y.size(); ++e) one(e);
  } else {
    for (std::size_t e : elements) one(e);
  }
  return a.finish();
}

ErrorStats compare(std::span<const double> y, std::span<const double> r, const numerics::Format& storage) {
  Accum a;
  for (std::size_t e = 0; e < y.size(); ++e) a.add(y[e], r[e], static_cast<double>(Ref(y[e]) - Ref(r[e])), storage);
  return a.finish();
}

AccError compare_units(std::span<const double> y, std::span<const Ref> r, std::size_t width,
                       const numerics::Format& storage) {
  AccError a;
  a.error = compare(y, r, storage);
  if (width == 0 || y.empty()) return a;
  std::vector<double> unit;
  for (std::size_t u0 = 0; u0 < y.size(); u0 += width)
    unit.push_back(compare(y.subspan(u0, width), r.subspan(u0, width), storage).norm_rel);
  std::sort(unit.begin(), unit.end());
  a.units = static_cast<std::int64_t>(unit.size());
  a.unit_median = numerics::quantile_sorted(unit, 0.5);
  a.unit_p95 = numerics::quantile_sorted(unit, 0.95);
  a.unit_max = unit.back();
  return a;
}

namespace {
template <class T>
RangeEvents range_events_of(std::span<const T> y, const numerics::Format& storage) {
  RangeEvents ev;
  const double tiny = numerics::min_normal(storage);
  ev.elements = static_cast<std::int64_t>(y.size());
  for (const T e : y) {
    const double v = e;
    if (std::isnan(v)) {
      ++ev.nan;
    } else if (std::isinf(v)) {
      ++ev.inf;
    } else {
      const double a = std::fabs(v);
      ev.max_abs = std::max(ev.max_abs, a);
      if (a == 0) ++ev.zero;
      else if (a < tiny) ++ev.subnormal;
    }
  }
  return ev;
}
}  // namespace

RangeEvents range_events(std::span<const double> y, const numerics::Format& storage) {
  return range_events_of(y, storage);
}

RangeEvents range_events(std::span<const float> y, const numerics::Format& storage) {
  return range_events_of(y, storage);
}

std::string_view name_of(RecordKind k) {
  switch (k) {
    case RecordKind::Local: return "local";
    case RecordKind::Global: return "global";
  }
  return "";
}

void Tape::write_csv(std::ostream& out) const {
  out << "step,layer,op,pass,tensor,kind,count,median_ulp,p95_ulp,max_ulp,above_1ulp,max_rel,norm_rel,dot_ratio,"
         "underflow,elements,inf,nan,subnormal,zero,max_abs\n";
  for (const OpRecord& r : records_) {
    const ErrorStats& e = r.error;
    const RangeEvents& g = r.range;
    out << (numerics::CsvRow() << r.step << r.layer << name_of(r.op) << name_of(r.pass) << r.tensor << name_of(r.kind)
                               << e.count << e.median_ulp << e.p95_ulp << e.max_ulp << e.above_1ulp << e.max_rel
                               << e.norm_rel << e.dot_ratio << e.underflow << g.elements << g.inf << g.nan
                               << g.subnormal << g.zero << g.max_abs)
               .str()
        << "\n";
  }
}

void Tape::print_table(std::ostream& out) const {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-14s %-10s %-10s %6s %8s %8s %8s %6s %9s %8s %4s %4s %6s %6s %10s\n", "op", "pass",
                "tensor", "n", "med ulp", "p95 ulp", "max ulp", ">1ulp", "norm rel", "dot rat", "inf", "nan", "subn",
                "uflow", "max|y|");
  out << buf;
  for (const OpRecord& r : records_) {
    const ErrorStats& e = r.error;
    const RangeEvents& g = r.range;
    std::snprintf(buf, sizeof buf, "%-14s %-10s %-10s %6lld %8.3g %8.3g %8.3g %6lld %9.2e %8.3g %4lld %4lld %6lld %6lld %10.4g\n",
                  std::string(name_of(r.op)).c_str(), std::string(name_of(r.pass)).c_str(), r.tensor.c_str(),
                  static_cast<long long>(e.count), e.median_ulp, e.p95_ulp, e.max_ulp,
                  static_cast<long long>(e.above_1ulp), e.norm_rel, e.dot_ratio, static_cast<long long>(g.inf),
                  static_cast<long long>(g.nan), static_cast<long long>(g.subnormal),
                  static_cast<long long>(e.underflow), g.max_abs);
    out << buf;
  }
}

}  // namespace roundoff::ops
