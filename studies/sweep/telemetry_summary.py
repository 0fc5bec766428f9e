#!/usr/bin/python3
"""Range, underflow and swamping telemetry of a sweep study, per run and per arm (preregistration §4,
secondary 4: the fp16 backward's gradient underflow, the stream's size and the swamping ratio per residual add).

Reads one or more `runs.csv` tables written by `roundoff sweep` and each run's telemetry.csv
(`step,layer,op,pass,tensor,metric,value`; docs/trainer.md). Writes into --out:

  telemetry_runs.csv  one row per run: arm, seed, run and the quantities below
  telemetry_arms.csv  one row per (arm, quantity): n seeds, mean, min and max over the seeds
  telemetry_ops.csv   one row per (arm, op, pass) at the final sample: subnormal outputs (summed over layers) and
                      the share of exact zeros (mean over layers), each the mean over the arm's seeds; against
                      the fp32 arm, the extra zeros of a backward op are activation gradients that underflowed
  telemetry_summary.json  provenance: the inputs' sha256, the git revision, the command, the time
  telemetry.png       four panels over training, per arm (mean over seeds, band seed min..max): the stream's max
                      |x|, the median swamping ratio, backward subnormal outputs, softmax outputs rounded to 0

Units of telemetry.csv's `step`: the op rows (range events, stream, swamping, max_logit, collapsed rows) are
logged at the micro-step index (update × accum, the update's first micro-step); the `grad` and `adamw` rows and
the attribution runs' `shadow_*` and `global_*` rows (not summarised here) at the update index. Each quantity below reads one family of rows only, so the two never meet; "final" is the
family's last logged step, "max" the largest value over every logged step.

  stream_max_abs_final / _max       max |x| of the residual stream over layers (fp16 max is 65504)
  stream_rms_final                  largest per-layer rms of the stream at the final sample
  op_max_abs_max                    largest max |x| of any op output (forward and backward, any storage format)
                                    at any sample
  fp16_op_max_abs_max               the same over the outputs the run's policy stores in fp16 (empty when none)
  fp16_headroom_bits                min over those (op, pass) of log2(limit / max |x|), limit = 65504 or the op's
                                    `saturate` if smaller (the ANE's matmul port: 32768): how many doublings the
                                    fp16 output nearest its limit had left; telemetry_runs.csv names it in
                                    fp16_headroom_at (op pass tensor layer step)
  max_logit_final / _max            largest attention logit over layers (attn-scores fwd)
  classifier_max_abs_max            largest |logit| of the classifier (fwd)
  swamping_attn_median_final        median over layers of rms(x)/rms(α·F) at residual-attn, final sample
  swamping_ffn_median_final         the same at residual-ffn
  swamping_max                      largest swamping ratio at any residual add and sample
  softmax_zero_fraction_final       mean over layers of the share of softmax outputs that are exactly 0
  masked_zero_fraction_final        the same share in the attention scores (the causal mask's zeros)
  softmax_underflow_final           the difference of the two: probabilities that underflowed to 0
  subnormal_fwd_per_sample          subnormal op outputs per sampled micro-step, forward ops
  subnormal_bwd_per_sample          the same for the backward (bwd-data and bwd-weight) ops
  nonfinite_values                  inf + nan op outputs over all samples
  collapsed_rows                    RMSNorm rows whose sum of squares overflowed, over all samples
  grad_underflow_max                largest share of a weight-gradient tensor that is 0 in the run's precision
                                    and non-zero in the fp32 pass on the same batch and weights, any update
  grad_underflow_mean_final         mean of that share over the tensors at the last sampled update
  stagnation_mean_final             mean over tensors of the share of weights with a non-zero gradient that
                                    the update left unchanged, last sampled update
  stagnation_max                    the largest such share, any tensor and update

Which outputs are fp16, and each op's limit, come from --policy-tables (policy_tables.py: the tables `roundoff
policy show --table` prints for each run's `policy`), not from the telemetry: a study's fp32 outputs (under
ane-guide the embedding, RMSNorm, classifier and weight gradients) are no fp16 value's headroom.
A run without telemetry.csv, or with no rows of a family, gets empty cells for that family. Nothing here holds a
result: every number comes from the inputs. Run with the system python (pandas):

    /usr/bin/python3 studies/sweep/telemetry_summary.py --runs notebooks-data/autoane-gap-e11/runs.csv \
        --runs-dir notebooks-data/autoane-gap-e11/runs --policy-tables notebooks-data/autoane-gap/policy-tables.json \
        --out notebooks-data/autoane-gap-e11/analysis
"""
import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from policy_tables import read_tables  # noqa: E402
from study_io import InputError, load_runs, read_csv, run_file, write_csv, write_provenance  # noqa: E402

QUANTITIES = [
    "stream_max_abs_final", "stream_max_abs_max", "stream_rms_final", "op_max_abs_max", "fp16_op_max_abs_max",
    "fp16_headroom_bits",
    "max_logit_final", "max_logit_max", "classifier_max_abs_max", "swamping_attn_median_final",
    "swamping_ffn_median_final", "swamping_max", "softmax_zero_fraction_final", "masked_zero_fraction_final",
    "softmax_underflow_final", "subnormal_fwd_per_sample", "subnormal_bwd_per_sample", "nonfinite_values",
    "collapsed_rows", "grad_underflow_max", "grad_underflow_mean_final", "stagnation_mean_final", "stagnation_max",
]
STREAM = "stream"  # the residual stream's rows: values that the residual adds' own rows already cover
UPDATE_OPS = {"grad", "adamw"}  # with the shadow_* and global_* metrics: rows logged at the update index
COLUMNS = ["step", "layer", "op", "pass", "tensor", "metric", "value"]


def fail(msg):
    print(f"telemetry_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def nan_if_empty(series, how):
    return float(getattr(series, how)()) if len(series) else math.nan


def split_by_step_unit(t):
    """One run's telemetry frame t (columns COLUMNS) as (op rows at the micro-step index, rows at the update index)."""
    at_update = t.op.isin(UPDATE_OPS) | t.metric.str.startswith(("shadow_", "global_"))
    return t[~at_update], t[at_update]


def fp16_headroom(ops, table):
    """(largest max |x| of an fp16-stored output, min log2(limit / max |x|) over them, where that was) of one run's
    op rows under its policy's table {(op, pass): Entry}; (nan, nan, "") when no sampled output is stored in fp16."""
    m = ops[(ops.metric == "max_abs") & (ops.value > 0) & (ops.op != STREAM)]
    entries = [table.get(k) for k in zip(m.op, m["pass"])]
    missing = sorted({k for k, e in zip(zip(m.op, m["pass"]), entries) if e is None})
    if missing:
        raise InputError(f"the run's policy table has no entry for {missing[0][0]} {missing[0][1]}, which its "
                         f"telemetry logs")
    fp16 = [e is not None and e.storage == "fp16" for e in entries]
    m = m[fp16]
    if m.empty:
        return math.nan, math.nan, ""
    limit = pd.Series([e.limit for e, f in zip(entries, fp16) if f], index=m.index)
    bits = (limit / m.value).map(math.log2)
    r = m.loc[bits.idxmin()]
    return float(m.value.max()), float(bits.min()), f"{r.op} {r['pass']} {r.tensor} layer {r.layer} step {r.step}"


def summarise(ops, upd, table):
    """The quantities of the module doc for one run's telemetry, split by split_by_step_unit, under its policy's
    table {(op, pass): Entry}; and where the fp16 headroom was smallest."""
    q = dict.fromkeys(QUANTITIES, math.nan)

    def rows(frame, op=None, metric=None, passes=None):
        r = frame
        if op is not None:
            r = r[r.op == op]
        if metric is not None:
            r = r[r.metric == metric]
        if passes is not None:
            r = r[r["pass"].isin(passes)]
        return r

    def at_final(r):
        return r[r.step == r.step.max()] if len(r) else r

    stream = rows(ops, "stream", "max_abs")
    q["stream_max_abs_final"] = nan_if_empty(at_final(stream).value, "max")
    q["stream_max_abs_max"] = nan_if_empty(stream.value, "max")
    q["stream_rms_final"] = nan_if_empty(at_final(rows(ops, "stream", "rms")).value, "max")
    q["op_max_abs_max"] = nan_if_empty(rows(ops, metric="max_abs").value, "max")
    q["fp16_op_max_abs_max"], q["fp16_headroom_bits"], at = fp16_headroom(ops, table)
    logit = rows(ops, "attn-scores", "max_logit")
    q["max_logit_final"] = nan_if_empty(at_final(logit).value, "max")
    q["max_logit_max"] = nan_if_empty(logit.value, "max")
    q["classifier_max_abs_max"] = nan_if_empty(rows(ops, "classifier", "max_abs", ["fwd"]).value, "max")
    q["swamping_attn_median_final"] = nan_if_empty(at_final(rows(ops, "residual-attn", "swamping_ratio")).value,
                                                   "median")
    q["swamping_ffn_median_final"] = nan_if_empty(at_final(rows(ops, "residual-ffn", "swamping_ratio")).value,
                                                  "median")
    q["swamping_max"] = nan_if_empty(rows(ops, metric="swamping_ratio").value, "max")
    smax = at_final(rows(ops, "softmax", "zero_fraction", ["fwd"]))
    mask = at_final(rows(ops, "attn-scores", "zero_fraction", ["fwd"]))
    q["softmax_zero_fraction_final"] = nan_if_empty(smax.value, "mean")
    q["masked_zero_fraction_final"] = nan_if_empty(mask.value, "mean")
    q["softmax_underflow_final"] = q["softmax_zero_fraction_final"] - q["masked_zero_fraction_final"]
    sub = rows(ops, metric="subnormal")
    samples = ops.step.nunique()
    if samples:
        q["subnormal_fwd_per_sample"] = float(sub[sub["pass"] == "fwd"].value.sum()) / samples
        q["subnormal_bwd_per_sample"] = float(sub[sub["pass"] != "fwd"].value.sum()) / samples
        q["nonfinite_values"] = float(rows(ops, metric="inf").value.sum() + rows(ops, metric="nan").value.sum())
        q["collapsed_rows"] = float(rows(ops, metric="collapsed_rows").value.sum())
    under = rows(upd, "grad", "underflow_fraction")
    q["grad_underflow_max"] = nan_if_empty(under.value, "max")
    q["grad_underflow_mean_final"] = nan_if_empty(at_final(under).value, "mean")
    stag = rows(upd, "adamw", "stagnation_fraction")
    q["stagnation_mean_final"] = nan_if_empty(at_final(stag).value, "mean")
    q["stagnation_max"] = nan_if_empty(stag.value, "max")
    return q, at


def final_ops(ops):
    """Per (op, pass) at the final op sample: subnormal count summed over layers, zero_fraction mean over layers."""
    if ops.empty:
        return pd.DataFrame(columns=["op", "pass", "subnormal", "zero_fraction"])
    f = ops[ops.step == ops.step.max()]
    sub = f[f.metric == "subnormal"].groupby(["op", "pass"]).value.sum().rename("subnormal")
    zero = f[f.metric == "zero_fraction"].groupby(["op", "pass"]).value.mean().rename("zero_fraction")
    return pd.concat([sub, zero], axis=1).reset_index()


def over_training(ops):
    """Per op sample (micro-step index): the four series of telemetry.png."""

    def series(op, metric, how):
        r = ops[(ops.op == op) & (ops.metric == metric) & (ops["pass"] == "fwd")]
        return getattr(r.groupby("step").value, how)()

    sub = ops[(ops.metric == "subnormal") & (ops["pass"] != "fwd")].groupby("step").value.sum()
    under = series("softmax", "zero_fraction", "mean") - series("attn-scores", "zero_fraction", "mean")
    return {"stream max |x| (max over layers)": series("stream", "max_abs", "max"),
            "swamping ratio rms(x)/rms(a*F), median over adds": ops[ops.metric == "swamping_ratio"]
            .groupby("step").value.median(),
            "backward subnormal outputs per sampled micro-step": sub,
            "softmax outputs rounded to 0 (share beyond the causal mask)": under}


def fig_over_training(series_by_run, arms_of_run, path):
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    titles = None
    arms = list(dict.fromkeys(arms_of_run.values()))
    for k, arm in enumerate(arms):
        runs = [r for r, a in arms_of_run.items() if a == arm and r in series_by_run]
        if not runs:
            continue
        titles = list(series_by_run[runs[0]])
        for ax, name in zip(axes.flat, titles):
            table = pd.concat([series_by_run[r][name] for r in runs], axis=1).dropna()
            if table.empty:
                continue
            ax.plot(table.index, table.mean(axis=1), color=f"C{k % 10}", label=f"{arm} (n={table.shape[1]})")
            ax.fill_between(table.index, table.min(axis=1), table.max(axis=1), color=f"C{k % 10}", alpha=0.18, lw=0)
    for ax, name in zip(axes.flat, titles or [""] * 4):
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("micro-step (telemetry sample)")
        ax.grid(alpha=0.3)
        if arms:
            ax.legend(fontsize=7)
    if titles is None:
        fig.suptitle("no telemetry")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def telemetry_of(run, runs_dirs):
    """telemetry.csv of one run: <dir>/<study>/<run>/ or <dir>/<run>/, first found; None when absent."""
    p = run_file(run, runs_dirs, "telemetry.csv")
    if p is None:
        return None
    t = read_csv(p)
    missing = [c for c in COLUMNS if c not in t.columns]
    if missing:
        fail(f"{p} has no column(s) {', '.join(missing)} (expected {','.join(COLUMNS)})")
    return t


def per_arm(per_run, arm_col):
    out = []
    for arm, g in per_run.groupby(arm_col, sort=False):
        for name in QUANTITIES:
            v = g[name].dropna()
            out.append({arm_col: arm, "quantity": name, "n": int(len(v)),
                        "mean": float(v.mean()) if len(v) else math.nan,
                        "min": float(v.min()) if len(v) else math.nan,
                        "max": float(v.max()) if len(v) else math.nan})
    return pd.DataFrame(out, columns=[arm_col, "quantity", "n", "mean", "min", "max"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", action="append", default=[], help="runs.csv (repeatable)")
    ap.add_argument("--runs-dir", action="append", default=[],
                    help="where the runs' directories are (<dir>/<study>/<run>/ or <dir>/<run>/); default out/sweep")
    ap.add_argument("--policy-tables", required=True,
                    help="policy_tables.py's file: the (op, pass) storage and limit of every run's policy")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--arm-column", default="arm")
    ap.add_argument("--seed-column", default="seed")
    a = ap.parse_args(argv)
    if not a.runs:
        fail("give at least one --runs runs.csv")
    try:
        runs = load_runs(a.runs, a.arm_column, a.seed_column)
        tables = read_tables(a.policy_tables)
    except InputError as e:
        fail(str(e))
    if "policy" not in runs.columns:
        fail(f"no 'policy' column in {', '.join(a.runs)}: the fp16 headroom needs each run's policy")
    unknown = sorted(set(runs.policy) - set(tables))
    if unknown:
        fail(f"{a.policy_tables} has no table for policy '{unknown[0]}' (it has: {', '.join(sorted(tables))}); "
             f"re-write it with studies/sweep/policy_tables.py write")
    runs_dirs = a.runs_dir or ["out/sweep"]
    rows, op_rows, series_by_run, arms_of_run = [], [], {}, {}
    for _, run in runs.iterrows():
        t = telemetry_of(run, runs_dirs)
        q, at = dict.fromkeys(QUANTITIES, math.nan), ""
        arms_of_run[run["run"]] = run[a.arm_column]
        if t is not None:
            ops, upd = split_by_step_unit(t)
            try:
                q, at = summarise(ops, upd, tables[run["policy"]])
            except InputError as e:
                fail(f"run {run['run']} (policy '{run['policy']}'): {e}")
            op_rows.append(final_ops(ops).assign(**{a.arm_column: run[a.arm_column]}))
            series_by_run[run["run"]] = over_training(ops)
        rows.append({a.arm_column: run[a.arm_column], a.seed_column: int(run[a.seed_column]), "run": run["run"],
                     "telemetry": t is not None, **q, "fp16_headroom_at": at})
    per_run = pd.DataFrame(rows).sort_values([a.arm_column, a.seed_column], kind="stable")
    os.makedirs(a.out, exist_ok=True)
    write_csv(per_run, os.path.join(a.out, "telemetry_runs.csv"))
    write_csv(per_arm(per_run, a.arm_column), os.path.join(a.out, "telemetry_arms.csv"))
    ops = pd.concat(op_rows, ignore_index=True) if op_rows else pd.DataFrame(
        columns=[a.arm_column, "op", "pass", "subnormal", "zero_fraction"])
    ops = ops.groupby([a.arm_column, "op", "pass"], sort=True).agg(
        n=("subnormal", "size"), subnormal=("subnormal", "mean"), zero_fraction=("zero_fraction", "mean"))
    write_csv(ops.reset_index(), os.path.join(a.out, "telemetry_ops.csv"))
    fig_over_training(series_by_run, arms_of_run, os.path.join(a.out, "telemetry.png"))
    write_provenance(os.path.join(a.out, "telemetry_summary.json"), "studies/sweep/telemetry_summary.py",
                     a.runs + [a.policy_tables],
                     runs_dirs=runs_dirs, runs=int(len(per_run)), with_telemetry=int(per_run.telemetry.sum()))
    print(f"telemetry_summary: {len(per_run)} runs ({int(per_run.telemetry.sum())} with telemetry) -> {a.out}")


if __name__ == "__main__":
    main()
