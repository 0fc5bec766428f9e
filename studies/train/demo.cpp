// The training demo: fp32 vs ane-fp16 on the same init and batches, the validation gap and the per-op
// attribution from the MPFR shadow.
#include "studies/train/demo.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "numerics/csv.hpp"
#include "ops/policy.hpp"
#include "studies/common/provenance.hpp"
#include "studies/train/session.hpp"

namespace roundoff::studies::train {
namespace {

/// The demo's run: T0 itself (d 64, 2 layers, 4 heads, seq 64, batch 4, bytes), kept to a couple of minutes.
ModelConfig demo_config() { return t0_config(); }
constexpr std::int64_t kSteps = 150;
constexpr std::int64_t kEvalTokens = 2048;
constexpr std::uint64_t kSeed = 1;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream s(line);
  std::string cell;
  while (std::getline(s, cell, ',')) out.push_back(cell);
  return out;
}

/// One (op, pass) row of the attribution table: local error (MPFR shadow, the op's own rounding) and global
/// error (the op's output against a full fp64 run of the model on the same weights and batch).
struct Attribution {
  double median_ulp = 0, p95_ulp = 0, max_ulp = 0, norm_rel = 0;
  int calls = 0;
  double global_median_ulp = 0, global_norm_rel = 0;
  int global_calls = 0;
};

constexpr const char* kPlotScript = R"PY(
import sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import csv
except Exception as e:
    print("plot skipped: matplotlib unavailable (%s)" % e)
    sys.exit(0)
rows = list(csv.DictReader(open(sys.argv[1])))
fig, ax = plt.subplots(1, 1, figsize=(7, 4))
for policy in sorted({r["policy"] for r in rows}):
    pts = [(int(r["step"]), float(r["value"])) for r in rows if r["policy"] == policy and r["metric"] == "train_loss"]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], label=policy + " train loss", lw=1)
    val = [(int(r["step"]), float(r["value"])) for r in rows if r["policy"] == policy and r["metric"] == "val_loss_fp32"]
    ax.plot([p[0] for p in val], [p[1] for p in val], "o", label=policy + " val loss (fp32 eval)")
ax.set_xlabel("step"); ax.set_ylabel("loss (nats/token)"); ax.legend(); ax.grid(alpha=0.3)
fig.tight_layout(); fig.savefig(sys.argv[2], dpi=120)
print("figure: " + sys.argv[2])
)PY";

}  // namespace

void clear_previous_run(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir)) return;
  static const std::set<std::string> ours = {"summary.json", "curves.csv", "telemetry.csv", "events.csv",
                                             "checkpoint.bin", ".roundoff.lock"};
  std::vector<std::filesystem::path> mine;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || !ours.contains(e.path().filename().string()))
      throw std::runtime_error("demo: " + dir.string() + " holds " + e.path().filename().string() +
                               ", which a training run does not write; the demo replaces only its own runs: choose "
                               "another --out or move it away");
    mine.push_back(e.path());
  }
  for (const auto& p : mine) std::filesystem::remove(p);
}

int run_training_demo(std::ostream& out, const std::filesystem::path& out_dir) {
  omp_set_num_threads(std::max(1, std::min(2, omp_get_num_procs())));
  const ModelConfig c = demo_config();
  out << "\n== Training: fp32 vs ane-fp16, same seed, init and batches ==\n";
  const TrainData data = load_train_data(c, std::nullopt, kEvalTokens);
  out << "model: d " << c.d << ", " << c.layers << " layers, " << c.heads << " heads, seq " << c.seq << ", batch "
      << c.batch << ", " << data.tokenizer << "; data: " << data.source << "; " << kSteps << " steps, seed " << kSeed
      << "; eval on the first " << data.val.tokens << " val tokens\n";
  std::map<std::string, nlohmann::json> summaries;
  std::string curves = "policy,step,metric,value\n";
  for (const char* policy : {"fp32", "ane-fp16"}) clear_previous_run(out_dir / policy);
  for (const std::string policy : {"fp32", "ane-fp16"}) {
    SessionSpec spec;
    spec.policy = ops::Policy::preset(policy);
    TrainOptions& o = spec.options;
    o.config = c;
    o.steps = kSteps;
    o.seed = kSeed;
    o.recipe.lr = 3e-3;
    o.recipe.warmup = 10;
    o.eval_every = 50;
    o.telemetry_every = 50;
    o.shadow_every = policy == "fp32" ? 0 : kSteps - 1;  // step 0 and the last step
    o.progress_every = 25;
    o.loss_scale = resolve_loss_scale("auto", spec.policy);
    o.out = out_dir / policy;
    spec.eval_tokens = kEvalTokens;
    std::fprintf(stderr, "demo: training under %s\n", policy.c_str());
    summaries[policy] = run_session(spec, data, &std::cerr);
    std::stringstream rows(read_file(o.out / "curves.csv"));
    std::string line;
    std::getline(rows, line);
    while (std::getline(rows, line)) curves += policy + "," + line + "\n";
  }
  const auto& a = summaries["fp32"];
  const auto& b = summaries["ane-fp16"];
  const double l32 = a["val_loss_fp32"].get<double>(), l16 = b["val_loss_fp32"].get<double>();
  char line[256];
  out << "policy      val_loss(fp32 eval)  val_loss(own)  val_bpb  skipped  first_nonfinite\n";
  for (const auto* s : {&a, &b}) {
    std::snprintf(line, sizeof line, "%-11s %19.4f %14.4f %8.4f %8lld  %s\n",
                  (*s)["policy"].get<std::string>() == a["policy"].get<std::string>() ? "fp32" : "ane-fp16",
                  (*s)["val_loss_fp32"].get<double>(), (*s)["val_loss_own"].get<double>(),
                  (*s)["val_bpb_fp32"].get<double>(), static_cast<long long>((*s)["skipped_steps"].get<std::int64_t>()),
                  (*s)["first_nonfinite_step"].is_null() ? "none" : (*s)["first_nonfinite_op"].get<std::string>().c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "validation gap (ane-fp16 - fp32, fp32 eval): %+.6f nats (%+.4f %%); eval-precision "
                "gap of ane-fp16: %+.6f nats\n",
                l16 - l32, 100.0 * (l16 - l32) / l32, b["val_loss_own"].get<double>() - l16);
  out << line;

  // Per-op attribution: the shadow's local error of every ane-fp16 op at the last shadowed step.
  std::map<std::pair<std::string, std::string>, Attribution> table;
  std::stringstream tel(read_file(out_dir / "ane-fp16" / "telemetry.csv"));
  std::string row;
  std::getline(tel, row);
  std::int64_t last = -1;
  std::vector<std::vector<std::string>> shadow_rows;
  while (std::getline(tel, row)) {
    auto cells = split(row);
    if (cells.size() != 7 || (cells[5].rfind("shadow_", 0) != 0 && cells[5].rfind("global_", 0) != 0)) continue;
    last = std::max<std::int64_t>(last, std::stoll(cells[0]));
    shadow_rows.push_back(std::move(cells));
  }
  std::string attribution =
      "op,pass,calls,max_median_ulp,max_p95_ulp,max_ulp,mean_norm_rel,global_max_median_ulp,global_mean_norm_rel\n";
  for (const auto& cells : shadow_rows) {
    if (std::stoll(cells[0]) != last) continue;
    Attribution& at = table[{cells[2], cells[3]}];
    const double v = std::strtod(cells[6].c_str(), nullptr);
    if (cells[5] == "shadow_median_ulp") {
      at.median_ulp = std::max(at.median_ulp, v);
      ++at.calls;
    }
    if (cells[5] == "shadow_p95_ulp") at.p95_ulp = std::max(at.p95_ulp, v);
    if (cells[5] == "shadow_max_ulp") at.max_ulp = std::max(at.max_ulp, v);
    if (cells[5] == "shadow_norm_rel" && std::isfinite(v)) at.norm_rel += v;
    if (cells[5] == "global_median_ulp") {
      at.global_median_ulp = std::max(at.global_median_ulp, v);
      ++at.global_calls;
    }
    if (cells[5] == "global_norm_rel" && std::isfinite(v)) at.global_norm_rel += v;
  }
  out << "\nPer-op error of ane-fp16 at step " << last
      << " on the fixed probe batch (ulps of each op's storage format). Local: the op's own rounding, against MPFR\n"
         "on the same rounded inputs. Global: the op's output against a full fp64 run of the model (forward\n"
         "activations and weight gradients), i.e. including everything earlier ops passed down; '-' = not recorded.\n";
  std::snprintf(line, sizeof line, "%-14s %-11s %6s %12s %10s %10s %14s | %12s %14s\n", "op", "pass", "calls",
                "median(ulp)", "p95(ulp)", "max(ulp)", "mean normwise", "glob median", "glob normwise");
  out << line;
  for (const auto& [key, at] : table) {
    const double mean_rel = at.calls ? at.norm_rel / at.calls : 0.0;
    const double g_rel = at.global_calls ? at.global_norm_rel / at.global_calls : 0.0;
    char glob[64] = "           -              -";
    if (at.global_calls) std::snprintf(glob, sizeof glob, "%12.3g %14.3g", at.global_median_ulp, g_rel);
    std::snprintf(line, sizeof line, "%-14s %-11s %6d %12.3g %10.3g %10.3g %14.3g | %s\n", key.first.c_str(),
                  key.second.c_str(), at.calls, at.median_ulp, at.p95_ulp, at.max_ulp, mean_rel, glob);
    out << line;
    numerics::CsvRow rec;
    rec << key.first << key.second << at.calls << at.median_ulp << at.p95_ulp << at.max_ulp << mean_rel;
    if (at.global_calls)
      rec << at.global_median_ulp << g_rel;
    else
      rec << "" << "";
    attribution += rec.str() + "\n";
  }
  write_file_atomic(out_dir / "demo_curves.csv", curves);
  write_file_atomic(out_dir / "demo_attribution.csv", attribution);
  write_file_atomic(out_dir / "plot_demo.py", kPlotScript);
  out << "wrote " << (out_dir / "demo_curves.csv").string() << ", " << (out_dir / "demo_attribution.csv").string()
      << " and the two run directories\n" << std::flush;
  const std::string cmd = "/usr/bin/python3 '" + (out_dir / "plot_demo.py").string() + "' '" +
                          (out_dir / "demo_curves.csv").string() + "' '" + (out_dir / "demo_training.png").string() +
                          "' 2>&1";
  if (std::filesystem::exists("/usr/bin/python3")) {
    if (std::system(cmd.c_str()) != 0) out << "plot skipped (python failed)\n";
  } else {
    out << "plot skipped: /usr/bin/python3 not found\n";
  }
  return 0;
}

}  // namespace roundoff::studies::train
