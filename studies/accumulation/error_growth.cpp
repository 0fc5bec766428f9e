#include "studies/accumulation/error_growth.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>

#include <boost/math/distributions/students_t.hpp>
#include <nlohmann/json.hpp>

#include "numerics/accumulate.hpp"
#include "numerics/csv.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/quantile.hpp"
#include "numerics/round.hpp"
#include "studies/common/provenance.hpp"

namespace roundoff::studies {

using namespace numerics;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class Data : std::uint8_t { ZeroMean, SumSq, Softmax };
constexpr Data kAllData[] = {Data::ZeroMean, Data::SumSq, Data::Softmax};
const char* name_of(Data d) {
  switch (d) {
    case Data::ZeroMean: return "zero-mean";
    case Data::SumSq: return "sumsq";
    case Data::Softmax: return "softmax";
  }
  return "?";
}

/// Standard normal deviates from a counter-based stream (Box–Muller on 53-bit uniforms).
class Normals {
 public:
  explicit Normals(StochasticBits bits) : bits_(bits) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(bits_.draw(k_++) >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits_.draw(k_++) >> 11) * 0x1p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    have_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  StochasticBits bits_;
  std::uint64_t k_ = 0;
  bool have_spare_ = false;
  double spare_ = 0;
};

/// The stream of one (input format, data, n, trial) cell: a pure function of the seed and the cell.
StochasticBits cell_bits(std::uint64_t seed, int format_index, Data d, std::size_t n, int trial) {
  const std::uint64_t id = (static_cast<std::uint64_t>(format_index) << 56) ^
                           (static_cast<std::uint64_t>(d) << 48) ^ (static_cast<std::uint64_t>(n) << 24) ^
                           static_cast<std::uint64_t>(trial);
  return StochasticBits{seed, mix64(id)};
}

struct Inputs {
  std::vector<double> x, y;  // y empty: a plain sum of x
};

Inputs make_inputs(const RoundingPlan& plan, Data d, std::size_t n, StochasticBits bits) {
  Normals g(bits);
  Inputs in;
  in.x.resize(n);
  for (auto& v : in.x) v = round_to(plan, Rounding::NearestEven, g.next());
  switch (d) {
    case Data::ZeroMean:
      in.y.resize(n);
      for (auto& v : in.y) v = round_to(plan, Rounding::NearestEven, g.next());
      break;
    case Data::SumSq: in.y = in.x; break;
    case Data::Softmax: {
      const double m = *std::max_element(in.x.begin(), in.x.end());
      for (auto& v : in.x) v = round_to(plan, Rounding::NearestEven, std::exp(v - m));
      break;
    }
  }
  return in;
}

/// Deterministic (γ) and first-order probabilistic bounds on |ŝ − s| in units of u·Σ|x_i y_i|.
std::pair<double, double> bounds(const Accumulation& a, std::size_t n, bool is_dot) {
  const double u = unit_roundoff(a.format);
  const double nn = static_cast<double>(n);
  const double m = a.rounding == Rounding::NearestEven ? 1.0 : 2.0;  // |δ| < 2u for directed and stochastic
  auto gamma = [](double k, double uu) { return k * uu < 1 ? k * uu / (1 - k * uu) : kNaN; };
  // No bound derived for these (a step flush adds absolute errors up to 2^emin per step: no relative bound).
  if (a.adder.group > 0 || a.tile.size > 0 || a.splitk.count > 0 || a.flush.step) return {kNaN, kNaN};
  switch (a.order) {
    case Order::Sequential:
    case Order::Reverse: {
      const double k = is_dot ? nn : nn - 1;
      return {gamma(k, m * u) / u, kLambda * m * std::sqrt(k)};
    }
    case Order::Pairwise: {
      const double k = std::ceil(std::log2(nn)) + (is_dot ? 1 : 0);
      return {gamma(k, m * u) / u, kLambda * m * std::sqrt(k)};
    }
    case Order::Blocked: {
      const double b = static_cast<double>(a.block);
      const double k1 = std::min(b, nn) - (is_dot ? 0 : 1), k2 = std::ceil(nn / b) - 1;
      const double uo = unit_roundoff(a.outer_format);
      const double g = std::pow(1 + m * u, k1) * std::pow(1 + m * uo, k2) - 1;
      return {g / u, kLambda * m * std::sqrt(k1 + k2 * (uo / u) * (uo / u))};
    }
    case Order::Kahan: return {(is_dot ? 3.0 : 2.0) + 4.0 * nn * u, kNaN};
  }
  return {kNaN, kNaN};
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? kNaN : s / static_cast<double>(v.size());
}

std::vector<std::string> accumulations_for(const std::string& in) {
  std::vector<std::string> v = {in + "-seq",          in + "-unfused-seq",  in + "-pairwise",
                                in + "-splitk16-fp32", in + "-splitk32-fp32", in + "-splitk64-fp32",
                                in + "-kahan",        "fp32-seq",           in + "-sr"};
  if (in == "fp16") v.push_back("fasi-v100");  // named tc-v100 in results committed before the GPU presets
  return v;
}


}  // namespace

ErrorGrowthResult run_error_growth(const ErrorGrowthOptions& opt, std::ostream* progress) {
  const int trials = opt.trials > 0 ? opt.trials : (opt.quick ? 8 : 1000);
  const std::size_t n_max = opt.quick ? 1024 : 4096;
  ErrorGrowthResult res;
  const std::pair<std::string, Format> input_formats[] = {{"fp16", formats::fp16}, {"bf16", formats::bf16}};
  for (int fi = 0; fi < 2; ++fi) {
    const auto& [in_name, in_fmt] = input_formats[fi];
    const RoundingPlan in_plan(in_fmt);
    std::vector<std::pair<std::string, Accumulation>> accs;
    for (const auto& name : accumulations_for(in_name)) accs.emplace_back(name, parse_accumulation(name));
    for (const Data d : kAllData) {
      const bool is_dot = d != Data::Softmax;
      const std::size_t row0 = res.rows.size();
      for (std::size_t n = 16; n <= n_max; n *= 2) {
        if (progress) *progress << "  " << in_name << " " << name_of(d) << " n=" << n << "\n" << std::flush;
        struct Acc {
          std::vector<double> ulps, norm, signed_norm, signed_rel;
          std::int64_t overflows = 0;
        };
        std::vector<Acc> per(accs.size());
        for (int t = 0; t < trials; ++t) {
          const StochasticBits bits = cell_bits(opt.seed, fi, d, n, t);
          const Inputs inp = make_inputs(in_plan, d, n, bits);
          const double* y = is_dot ? inp.y.data() : nullptr;
          const ExactSum exact = is_dot ? exact_dot(in_fmt, inp.x.data(), 1, y, 1, n) : exact_sum(inp.x.data(), 1, n);
          const double scale =
              is_dot ? exact_abs_dot(inp.x.data(), 1, y, 1, n).to_double() : exact_sum(inp.x.data(), 1, n).to_double();
          const double exact_d = exact.to_double();
          for (std::size_t k = 0; k < accs.size(); ++k) {
            const Accumulation& a = accs[k].second;
            AccumStats st;
            const StochasticBits sr{opt.seed ^ 0x5eed, bits.stream};
            const double r = is_dot ? dot(a, inp.x.data(), 1, y, 1, n, sr, &st) : sum(a, inp.x, sr, &st);
            const double u = unit_roundoff(a.format);
            const double err = signed_error(exact, r);
            per[k].ulps.push_back(error_ulps(in_fmt, exact, r));
            per[k].norm.push_back(std::fabs(err) / (u * scale));
            per[k].signed_norm.push_back(err / (u * scale));
            if (d != Data::ZeroMean) per[k].signed_rel.push_back(err / exact_d);
            per[k].overflows += st.overflows;
          }
        }
        for (std::size_t k = 0; k < accs.size(); ++k) {
          ErrorGrowthRow row;
          row.inputs = in_name;
          row.accumulation = accs[k].first;
          row.data = name_of(d);
          row.n = n;
          row.trials = trials;
          const Acc& p = per[k];
          row.median_ulps = numerics::quantile(p.ulps, 0.5);
          row.p95_ulps = numerics::quantile(p.ulps, 0.95);
          row.max_ulps = numerics::quantile(p.ulps, 1.0);
          row.mean_ulps = mean(p.ulps);
          row.median_norm = numerics::quantile(p.norm, 0.5);
          row.p95_norm = numerics::quantile(p.norm, 0.95);
          row.max_norm = numerics::quantile(p.norm, 1.0);
          row.mean_signed_norm = mean(p.signed_norm);
          row.mean_signed_rel = d == Data::ZeroMean ? kNaN : mean(p.signed_rel);
          std::tie(row.gamma_norm, row.prob_norm) = bounds(accs[k].second, n, is_dot);
          int over = 0;
          for (double e : p.norm) over += e > row.prob_norm ? 1 : 0;
          row.frac_over_prob = std::isnan(row.prob_norm) ? kNaN : over / static_cast<double>(trials);
          row.overflows = p.overflows;
          res.rows.push_back(row);
        }
      }
      for (const auto& [name, a] : accs) {
        for (const std::string metric : {"median_ulps", "p95_ulps", "median_norm"}) {
          std::vector<std::pair<double, double>> pts;
          for (std::size_t r = row0; r < res.rows.size(); ++r) {
            const auto& row = res.rows[r];
            if (row.accumulation != name) continue;
            const double y = metric == "median_ulps" ? row.median_ulps
                             : metric == "p95_ulps"  ? row.p95_ulps
                                                     : row.median_norm;
            pts.emplace_back(static_cast<double>(row.n), y);
          }
          ErrorGrowthFit f = fit_growth(pts);
          f.inputs = in_name;
          f.accumulation = name;
          f.data = name_of(d);
          f.metric = metric;
          res.fits.push_back(f);
        }
      }
    }
  }
  return res;
}

ErrorGrowthFit fit_growth(const std::vector<std::pair<double, double>>& pts) {
  ErrorGrowthFit f;
  std::vector<std::pair<double, double>> logs;  // (log n, log y)
  for (const auto& [n, y] : pts)
    if (y > 0 && std::isfinite(y)) logs.emplace_back(std::log(n), std::log(y));
  f.points = static_cast<int>(logs.size());
  if (logs.size() < 3) {
    f.exponent = f.exponent_se = f.exponent_ci95 = f.constant = f.r2 = kNaN;
    return f;
  }
  const double k = static_cast<double>(logs.size());
  double mx = 0, my = 0;
  for (const auto& [x, y] : logs) mx += x, my += y;
  mx /= k, my /= k;
  double sxx = 0, sxy = 0, syy = 0;
  for (const auto& [x, y] : logs) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my), syy += (y - my) * (y - my);
  f.exponent = sxy / sxx;
  const double b = my - f.exponent * mx;
  f.constant = std::exp(b);
  double ss_res = 0;
  for (const auto& [x, y] : logs) ss_res += (y - b - f.exponent * x) * (y - b - f.exponent * x);
  f.r2 = syy > 0 ? 1 - ss_res / syy : 1.0;
  f.exponent_se = std::sqrt(ss_res / (k - 2) / sxx);
  const boost::math::students_t t(k - 2);
  f.exponent_ci95 = boost::math::quantile(t, 0.975) * f.exponent_se;
  return f;
}

ErrorGrowthResult run_and_write_error_growth(const ErrorGrowthOptions& opt, std::ostream* progress) {
  const ErrorGrowthResult res = run_error_growth(opt, progress);
  std::ostringstream csv;
  csv << "inputs,accumulation,data,n,trials,ulp_format,median_ulps,p95_ulps,max_ulps,mean_ulps,median_norm,p95_norm,"
         "max_norm,mean_signed_norm,mean_signed_rel,gamma_norm,prob_norm,frac_over_prob,overflows\n";
  for (const auto& r : res.rows)
    csv << (numerics::CsvRow() << r.inputs << r.accumulation << r.data << r.n << r.trials << r.inputs << r.median_ulps
                               << r.p95_ulps << r.max_ulps << r.mean_ulps << r.median_norm << r.p95_norm << r.max_norm
                               << r.mean_signed_norm << r.mean_signed_rel << r.gamma_norm << r.prob_norm
                               << r.frac_over_prob << r.overflows)
                  .str()
        << "\n";
  std::ostringstream fits;
  fits << "inputs,accumulation,data,metric,exponent,exponent_se,exponent_ci95,constant,r2,points\n";
  for (const auto& f : res.fits)
    fits << (numerics::CsvRow() << f.inputs << f.accumulation << f.data << f.metric << f.exponent << f.exponent_se
                                << f.exponent_ci95 << f.constant << f.r2 << f.points)
                .str()
         << "\n";
  write_file_atomic(opt.out / "error_growth.csv", csv.str());
  write_file_atomic(opt.out / "error_growth_fits.csv", fits.str());
  nlohmann::json j = provenance(opt.command);
  j["study"] = "accumulation error growth";
  j["seed"] = opt.seed;
  j["trials"] = res.rows.empty() ? 0 : res.rows.front().trials;
  j["quick"] = opt.quick;
  j["lambda"] = kLambda;
  j["files"] = {"error_growth.csv", "error_growth_fits.csv"};
  j["columns"] = {
      {"median_ulps/p95_ulps/max_ulps/mean_ulps", "|result − exact| / ulp_F(exact), F = ulp_format (the inputs' format)"},
      {"median_norm/p95_norm/max_norm", "|result − exact| / (u·Σ|x_i y_i|), u = unit roundoff of the accumulator format"},
      {"mean_signed_norm", "mean (result − exact) / (u·Σ|x_i y_i|)"},
      {"mean_signed_rel", "mean (result − exact) / exact (same-sign data only)"},
      {"gamma_norm", "Higham's deterministic bound in units of u·Σ|x_i y_i| (γ_n sequential, γ_(⌈log2 n⌉+1) pairwise, "
                     "(1+u)^b(1+u_outer)^(n/b−1)−1 blocked, 2u/3u + 4nu² Kahan; 2u per rounding for stochastic)"},
      {"prob_norm", "first-order probabilistic bound λ√k·u (Higham & Mary 2019) in the same unit, k = roundings per term"},
      {"frac_over_prob", "fraction of runs above prob_norm"},
      {"overflows", "overflow events summed over the trials"}};
  nlohmann::json accs = nlohmann::json::object();
  for (const auto& r : res.rows) accs[r.accumulation] = spec_text(parse_accumulation(r.accumulation));
  j["accumulations"] = accs;
  write_json_atomic(opt.out / "error_growth.json", j);
  return res;
}

}  // namespace roundoff::studies
