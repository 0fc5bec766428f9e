#include "studies/op_error/study.hpp"

#include "numerics/csv.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "studies/common/memory.hpp"
#include "studies/common/provenance.hpp"
#include "studies/op_error/experiments.hpp"

namespace roundoff::studies::op_error {

using ops::OpKind;
using ops::Pass;

namespace {

std::string num(double x) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

/// JSON-safe number (NaN → null).
nlohmann::json jnum(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

struct StudyCase {
  OpKind op;
  std::string tensor;
  OpShape shape;
};

std::vector<StudyCase> study_cases(const std::vector<OpKind>& only) {
  std::vector<StudyCase> cases;
  auto want = [&](OpKind k) { return only.empty() || std::find(only.begin(), only.end(), k) != only.end(); };
  for (OpKind k : ops::kAllOps) {
    if (!want(k)) continue;
    if (k == OpKind::Matmul) {
      cases.push_back({k, "q", parse_shape(k, "in=1024,out=1024")});
      cases.push_back({k, "w1", parse_shape(k, "in=1024,out=2816")});
      cases.push_back({k, "w2", parse_shape(k, "in=2816,out=1024")});
    } else {
      cases.push_back({k, std::string(ops::name_of(k)), default_shape(k)});
    }
  }
  return cases;
}

/// Ops the study runs at one scale only (no activation scale of ours enters their error).
bool unswept(OpKind k) { return k == OpKind::Embedding || k == OpKind::RopeAngles || k == OpKind::AdamW; }

CaseResult make_result(const std::string& preset, const ops::Policy& p, const CaseConfig& c,
                       std::vector<ops::OpRecord> records) {
  CaseResult r{preset, c, {}, std::move(records)};
  for (Pass ps : ops::kAllPasses) r.precision[ops::index_of(ps)] = ops::to_string(p.at(c.op, ps));
  return r;
}

nlohmann::json record_json(const CaseResult& c, const ops::OpRecord& r) {
  return {{"preset", c.preset},
          {"op", ops::name_of(r.op)},
          {"tensor", r.tensor},
          {"pass", ops::name_of(r.pass)},
          {"precision", c.precision[ops::index_of(r.pass)]},
          {"scale", c.config.scale},
          {"median_ulp", jnum(r.error.median_ulp)},
          {"p95_ulp", jnum(r.error.p95_ulp)},
          {"max_ulp", jnum(r.error.max_ulp)},
          {"max_rel", jnum(r.error.max_rel)},
          {"norm_rel", jnum(r.error.norm_rel)},
          {"dot_ratio", jnum(r.error.dot_ratio)},
          {"inf", r.range.inf},
          {"nan", r.range.nan},
          {"underflow", r.error.underflow},
          {"subnormal", r.range.subnormal}};
}

std::string csv_of(const std::vector<CaseResult>& results) {
  std::ostringstream s;
  write_cases_csv(s, results);
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void write_cases_csv(std::ostream& out, const std::vector<CaseResult>& results) {
  out << "preset,op,tensor,pass,scale_kind,scale,shape,rows,precision,count,median_ulp,p95_ulp,max_ulp,above_1ulp,"
         "max_rel,norm_rel,dot_ratio,underflow,elements,inf,nan,subnormal,zero,max_abs\n";
  for (const CaseResult& c : results) {
    for (const ops::OpRecord& r : c.records) {
      ops::ErrorStats e = r.error;
      const ops::RangeEvents& g = r.range;
      // Non-finite outputs are not compared (the inf and nan columns count them); when no output was, there is
      // no error to report: the statistics are NaN, never a perfect 0.
      if (e.count == 0) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        e.median_ulp = e.p95_ulp = e.max_ulp = e.max_rel = e.norm_rel = nan;
      }
      out << (numerics::CsvRow() << c.preset << ops::name_of(r.op) << r.tensor << ops::name_of(r.pass)
                                 << name_of(scale_kind_of(c.config.op)) << c.config.scale << c.config.shape.text()
                                 << c.config.rows << c.precision[ops::index_of(r.pass)] << e.count << e.median_ulp
                                 << e.p95_ulp << e.max_ulp << e.above_1ulp << e.max_rel << e.norm_rel << e.dot_ratio
                                 << e.underflow << g.elements << g.inf << g.nan << g.subnormal << g.zero << g.max_abs)
                 .str()
          << '\n';
    }
  }
}

std::filesystem::path run_single(const SingleOptions& opt) {
  const OpKind op = parse_op(opt.op);
  const OpShape shape = parse_shape(op, opt.shape);
  if (opt.rows <= 0) throw std::invalid_argument("--rows must be positive");
  {  // a lower bound of what run_case allocates: its largest tensor (a product of two dims, or heads·T·T for
     // attention), as input and output, 8 bytes per element; in floating point so nothing overflows
    double largest = 0;
    for (const auto& [k1, v1] : shape.dims) {
      largest = std::max(largest, static_cast<double>(v1));
      for (const auto& [k2, v2] : shape.dims)
        if (k1 < k2) largest = std::max(largest, static_cast<double>(v1) * static_cast<double>(v2));
    }
    if (shape.dims.contains("heads") && shape.dims.contains("T"))
      largest = std::max(largest, static_cast<double>(shape.at("heads")) * static_cast<double>(shape.at("T")) *
                                      static_cast<double>(shape.at("T")));
    char count[32];
    std::snprintf(count, sizeof count, "%.3g", largest);
    require_memory(largest * 2 * 8, "op-error --op " + opt.op + " --shape " + shape.text(),
                   "its largest tensor holds " + std::string(count) + " elements, as input and output at 8 bytes each",
                   "valid: smaller --shape values");
  }
  const ops::Policy pol = ops::load_policy(opt.precision);
  std::vector<CaseResult> results;
  for (double s : opt.scales) {
    if (!(s > 0) || !std::isfinite(s)) throw std::invalid_argument("--sigma values must be positive and finite");
    CaseConfig c;
    c.op = op;
    c.shape = shape;
    c.rows = opt.rows;
    c.scale = s;
    c.seed = opt.seed;
    results.push_back(make_result(opt.precision, pol, c, run_case(pol, c)));
  }
  for (const CaseResult& c : results)
    for (const ops::OpRecord& r : c.records)
      if (const std::int64_t bad = r.range.inf + r.range.nan; bad > 0)
        std::cerr << "op-error: " << ops::name_of(r.op) << " " << r.tensor << " " << ops::name_of(r.pass) << " at "
                  << name_of(scale_kind_of(op)) << " " << c.config.scale << ": " << bad << " of " << r.range.elements
                  << " outputs are not finite (" << r.range.inf << " inf, " << r.range.nan
                  << " nan); the error statistics cover the other " << r.error.count
                  << (r.error.count == 0 ? " (none: written as nan)" : "") << "\n";
  const std::string name(ops::name_of(op));
  const std::filesystem::path csv = opt.out / (name + ".csv");
  write_file_atomic(csv, csv_of(results));
  nlohmann::json j = provenance(opt.command);
  j["op"] = name;
  j["policy"] = pol.canonical();
  j["seed"] = opt.seed;
  j["shape"] = shape.text();
  j["rows"] = opt.rows;
  j["scale_kind"] = name_of(scale_kind_of(op));
  j["scales"] = opt.scales;
  j["csv"] = csv.filename().string();
  write_json_atomic(opt.out / (name + ".json"), j);
  return csv;
}

std::vector<double> overflow_sigmas() {
  std::vector<double> s{1.0, 2.0, 4.0};
  for (int k = 48; k <= 80; ++k) s.push_back(k / 8.0);
  s.push_back(12.0);
  s.push_back(16.0);
  return s;
}

void run_study(const StudyOptions& opt, std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json j = provenance(opt.command);
  j["seed"] = opt.seed;
  j["rows"] = opt.rows;
  j["ref_budget"] = opt.ref_budget;
  j["sigmas"] = opt.sigmas;
  j["logit_stds"] = opt.logit_stds;

  // ---- per-op local error under every preset ---------------------------------------------------------------
  std::vector<CaseResult> results;
  std::map<std::string, std::vector<ops::OpRecord>> cache;  // identical op precision + inputs → same records
  const std::vector<StudyCase> cases = study_cases(opt.ops);
  for (const std::string& preset : opt.presets) {
    const ops::Policy pol = ops::Policy::parse(preset);
    j["policies"][preset] = pol.canonical();
    const auto tp = std::chrono::steady_clock::now();
    for (const StudyCase& sc : cases) {
      std::vector<double> scales = scale_kind_of(sc.op) == ScaleKind::Logit ? opt.logit_stds : opt.sigmas;
      if (unswept(sc.op)) scales = {1.0};
      for (double s : scales) {
        CaseConfig c;
        c.op = sc.op;
        c.shape = sc.shape;
        c.tensor = sc.tensor;
        c.rows = opt.rows;
        c.scale = s;
        c.seed = opt.seed;
        c.ref_budget = opt.ref_budget;
        const std::string key = precision_key(pol, sc.op) + "|" + sc.tensor + "|" + num(s);
        auto it = cache.find(key);
        if (it == cache.end()) it = cache.emplace(key, run_case(pol, c)).first;
        results.push_back(make_result(preset, pol, c, it->second));
      }
    }
    log << "op-error: " << preset << " done in " << num(seconds_since(tp)) << " s\n" << std::flush;
  }
  write_file_atomic(opt.out / "op_error.csv", csv_of(results));

  // Ranked table: ane-fp16 at unit scale, by normwise relative error.
  std::vector<std::pair<const CaseResult*, const ops::OpRecord*>> ranked;
  for (const CaseResult& c : results)
    if (c.preset == "ane-fp16" && c.config.scale == 1.0)
      for (const ops::OpRecord& r : c.records) ranked.emplace_back(&c, &r);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second->error.norm_rel > b.second->error.norm_rel;
  });
  j["ranked_ane_fp16"] = nlohmann::json::array();
  for (const auto& [c, r] : ranked) j["ranked_ane_fp16"].push_back(record_json(*c, *r));

  // ---- RMSNorm Σx² overflow ------------------------------------------------------------------------------
  const std::int64_t d = 1024;
  {
    std::ostringstream s;
    s << "format,d,sigma,rows,mean_rms,overflow_fraction\n";
    for (const char* arm : {"pure-fp16", "pure-bf16"}) {
      const ops::OpPrecision prec = ops::Policy::parse(arm).at(OpKind::RmsNorm, Pass::Forward);
      const auto pts = rmsnorm_overflow(prec, d, overflow_sigmas(), opt.overflow_rows, opt.seed);
      const std::string f = numerics::name_of(prec.storage);
      for (const auto& p : pts)
        s << (numerics::CsvRow() << f << d << p.sigma << p.rows << p.mean_rms << p.overflow_fraction).str() << '\n';
      j["rmsnorm_overflow"][f] = {{"precision", ops::to_string(prec)},
                                  {"threshold_rms", jnum(overflow_threshold_rms(pts))},
                                  {"predicted_rms", std::sqrt(numerics::max_finite(prec.storage) / double(d))},
                                  {"sigma_step", 0.125}};
    }
    write_file_atomic(opt.out / "rmsnorm_overflow.csv", s.str());
  }
  // ---- residual-add swamping -----------------------------------------------------------------------------
  {
    std::vector<double> ratios;
    for (int k = 0; k <= 40; ++k) ratios.push_back(std::pow(2.0, k / 2.0));
    std::ostringstream s;
    s << "format,d,ratio,measured_ratio,rel_error,lost_fraction\n";
    for (const auto& f : {numerics::formats::fp16, numerics::formats::bf16}) {
      const auto pts = residual_swamping(ops::uniform(f), d, 16, ratios, opt.seed);
      for (const auto& p : pts)
        s << (numerics::CsvRow() << numerics::name_of(f) << d << p.ratio << p.measured_ratio << p.rel_error
                                 << p.lost_fraction)
                 .str()
          << '\n';
      j["residual_swamping"][numerics::name_of(f)] = {{"ratio_rel_error_half", jnum(swamping_ratio(pts, false))},
                                                      {"ratio_lost_half", jnum(swamping_ratio(pts, true))},
                                                      {"unit_roundoff", numerics::unit_roundoff(f)}};
    }
    write_file_atomic(opt.out / "residual_swamping.csv", s.str());
  }
  // ---- softmax denominator bias vs sequence length ---------------------------------------------------------
  {
    std::vector<std::int64_t> lengths;
    for (std::int64_t S = 16; S <= opt.softmax_max_len; S *= 2) lengths.push_back(S);
    std::ostringstream s;
    s << "arm,precision,S,logit_std,rows,mean_rel_bias,max_abs_rel,mean_Z\n";
    for (const char* arm : {"ane-fp16", "ane-fp16-acc32", "pure-bf16", "fp32"}) {
      const ops::OpPrecision prec = ops::Policy::parse(arm).at(OpKind::Softmax, Pass::Forward);
      for (double ls : {1.0, 4.0}) {
        const auto pts = softmax_bias(prec, lengths, ls, opt.seed);
        for (const auto& p : pts) {
          s << (numerics::CsvRow() << arm << ops::to_string(prec) << p.S << ls << p.rows << p.mean_rel_bias
                                   << p.max_abs_rel << p.mean_Z)
                   .str()
            << '\n';
          if (ls == 1.0) j["softmax_bias"][arm][std::to_string(p.S)] = jnum(p.mean_rel_bias);
        }
      }
    }
    write_file_atomic(opt.out / "softmax_bias.csv", s.str());
  }
  // ---- RoPE angle error vs position ----------------------------------------------------------------------
  {
    struct Arm {
      const char* name;
      ops::OpPrecision prec;
    };
    ops::OpPrecision fp32_to_fp16 = ops::uniform(numerics::formats::fp32);
    fp32_to_fp16.storage = numerics::formats::fp16;
    const std::vector<Arm> arms{{"fp32-angles-fp16-table", fp32_to_fp16},
                                {"fp16-angles", ops::uniform(numerics::formats::fp16)},
                                {"bf16-angles", ops::uniform(numerics::formats::bf16)},
                                {"fp32", ops::uniform(numerics::formats::fp32)}};
    std::ostringstream s;
    s << "arm,precision,position,max_angle_error,mean_angle_error,max_table_error\n";
    for (const Arm& a : arms) {
      const auto pts = rope_angle_error(a.prec, opt.rope_positions, 64, 16);
      for (const auto& p : pts)
        s << (numerics::CsvRow() << a.name << ops::to_string(a.prec) << p.position << p.max_angle_error
                                 << p.mean_angle_error << p.max_table_error)
                 .str()
          << '\n';
      double m256 = 0, mall = 0;
      for (const auto& p : pts) {
        if (p.position < 256) m256 = std::max(m256, p.max_angle_error);
        mall = std::max(mall, p.max_angle_error);
      }
      j["rope"][a.name] = {{"max_angle_error_T256", m256}, {"max_angle_error_all", mall}};
    }
    write_file_atomic(opt.out / "rope_angles.csv", s.str());
  }
  j["elapsed_seconds"] = seconds_since(t0);
  write_json_atomic(opt.out / "op_error.json", j);
  log << "op-error: study written to " << opt.out.string() << " in " << num(seconds_since(t0)) << " s\n";
}

}  // namespace roundoff::studies::op_error
