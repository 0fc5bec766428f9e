#!/usr/bin/python3
"""The pre-registered analysis of a sweep study (notebooks-data/autoane-gap/preregistration.md §4-§5).

Reads one or more `runs.csv` tables written by `roundoff sweep` (rows: complete runs; the arm and the seed are
axis columns) and each run's curves.csv, and an analysis spec (JSON: which contrasts, which family, margins;
notebooks-data/autoane-gap/analysis-spec.json). Writes into --out:

  paired.csv     one row per (metric, contrast, seed): L_ref, L_arm, D = L_arm - L_ref, 100 D / L_ref
  contrasts.csv  one row per (metric, contrast): where its runs ran (config/corpus), n, mean D with its 95 % t CI (df n - 1), two-sided paired t-test
                 (only from the spec's min_seeds paired seeds on, default 2; below it the row has no test),
                 Holm-adjusted p over the family (primary metric only), the relative gap (mean of the per-seed
                 100 D / L_ref) with its 95 % t CI, and TOST on the relative gaps for each margin
  closures.csv   gap-closure fraction of each remedy, with the exhaustive seed-bootstrap percentile CI
  trajectory.csv same-seed agreement of loss trajectories (C4's |ΔL| < 5e-5 up to update 10): per contrast of the
                 spec's trajectory_agreement and seed, the largest early |ΔL|, whether it holds, and the first
                 update at which |ΔL| reaches the threshold
  single_seed.csv exploratory (not preregistered): per decomposition contrast and metric, the smallest and largest
                 relative gap of a same-seed pair and of a pair of different seeds (what one run per arm, as
                 AutoANE compared, could show), and the reference arm's between-seed sd in % of its mean
  penalties.csv  claim D's "the same penalty" (amendment 9) and C6's fp16 cost of alpha = 1 (amendment 11): per
                 entry of the spec's penalty_comparison and metric, two contrasts' mean penalties on their common
                 seeds, their ratio and whether it lies within the entry's ratio_bounds, the per-seed difference of
                 the penalties with its 95 % t CI and p, and on the primary metric the first contrast's (Holm)
                 significance and same_penalty; with the entry's diff_margin and range_events (amendment 11) also
                 the margin, whether the difference's upper bound is below it, the seeds with range events, no_worse
  claims.csv     the verdict of each claim of §6 (amendment 12): per entry of the spec's claims (C1 per arm), where
                 it ran, its seeds, whether the confirmation and the refutation rule hold, the verdict (confirmed,
                 refuted, undetermined, or incomplete while an input lacks its seeds), the numbers it rests on and why
  analysis.json  provenance: inputs and their sha256, the spec, the git revision, the time
  loss_curves.png, gap_decomposition.png, and with the spec's remedies_figure remedies.png (or --figures DIR)

Metrics: every `metrics` entry of the spec is a runs.csv column (e.g. val_loss_fp32, our primary endpoint at
equal steps; autoane_train_loss, AutoANE's own-precision training loss over the final 200 micro-steps;
val_loss_own). The spec's `equal_wall_time` adds AutoANE's equal-wall-time metric `autoane_equal_wall_time`:
each arm's mean training loss over the window of window/accum updates ending at the update boundary nearest to
its step count: ref_micro_steps for the arms in AutoANE's CPU mode (`ref_arms`, default the reference alone),
arm_micro_steps for its ANE-full arms (`arms`); curves.csv logs one mean per update, so AutoANE's 1041 and 1297
micro-steps become 1040 and 1300 at accum 10. A contrast has this metric when its arm is ANE-full and its
reference has a window (R-GUIDE-D - R-CPU: 1300 against 1040; GUIDE-D - GUIDE: 1300 against 1300).

Nothing here holds a result: every number comes from the inputs. Contrasts whose runs are absent are written
with n = 0 and empty statistics. Run with the system python (numpy, scipy, pandas, matplotlib):

    /usr/bin/python3 studies/sweep/analyze_study.py --spec notebooks-data/autoane-gap/analysis-spec.json \
        --runs notebooks-data/autoane-gap-e11/runs.csv --runs-dir out/sweep --out notebooks-data/autoane-gap-e11/analysis
"""
import argparse
import functools
import itertools
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402
from study_io import InputError, load_runs, read_csv, run_file, write_csv, write_provenance  # noqa: E402

EQUAL_WALL_TIME = "autoane_equal_wall_time"


def fail(msg):
    print(f"analyze_study: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------- statistics


def paired_t(d, alpha=0.05):
    """Mean of the paired differences d with its two-sided (1 - alpha) t interval and t-test against 0.

    Returns dict(n, mean, sd, se, t, df, p, ci_low, ci_high); with n < 2 only n and mean. sd has ddof 1;
    se = sd / sqrt(n); t = mean / se; p = 2 (1 - F_t(|t|; n - 1)); CI = mean -/+ t_{1 - alpha/2, n - 1} se.
    With se == 0: p = 1 if mean == 0 else 0, and the CI is the point.
    """
    d = np.asarray(d, dtype=float)
    n = len(d)
    out = {"n": n, "mean": float(d.mean()) if n else math.nan}
    for k in ("sd", "se", "t", "df", "p", "ci_low", "ci_high"):
        out[k] = math.nan
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    q = float(stats.t.ppf(1 - alpha / 2, df))
    if se == 0:
        t, p = (0.0, 1.0) if out["mean"] == 0 else (math.copysign(math.inf, out["mean"]), 0.0)
    else:
        t = out["mean"] / se
        p = float(2 * stats.t.sf(abs(t), df))
    out.update(sd=sd, se=se, t=t, df=df, p=p, ci_low=out["mean"] - q * se, ci_high=out["mean"] + q * se)
    return out


def tost(d, margin, alpha=0.05):
    """Two one-sided t-tests of |mean(d)| < margin (equivalence), d paired differences.

    H01: mu <= -margin, rejected when t1 = (mean + margin)/se is large (p1 = 1 - F(t1));
    H02: mu >= +margin, rejected when t2 = (mean - margin)/se is small (p2 = F(t2)).
    p = max(p1, p2); equivalent when p < alpha (the same as the 1 - 2 alpha CI inside +-margin).
    """
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2:
        return math.nan, None
    mean = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
    else:
        p1 = float(stats.t.sf((mean + margin) / se, n - 1))
        p2 = float(stats.t.cdf((mean - margin) / se, n - 1))
        p = max(p1, p2)
    return p, bool(p < alpha)


def holm(pvalues, alpha=0.05):
    """Holm-Bonferroni step-down: adjusted p_(k) = max_{j <= k} min(1, (m - j + 1) p_(j)) over the ascending
    p-values; a hypothesis is rejected when its adjusted p < alpha. NaN p-values are left out of m."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted, [None if math.isnan(a) else bool(a < alpha) for a in adjusted]


def find_contrast(contrasts, metric, arm, ref):
    """The contrasts row of arm - ref in metric, or None when the spec has no such contrast."""
    if contrasts.empty:
        return None
    rows = contrasts[(contrasts.metric == metric) & (contrasts.arm == arm) & (contrasts.ref == ref)]
    return None if rows.empty else rows.iloc[0]


def gap_significant(row, alpha):
    """Whether a tested contrast's gap is significant: Holm-adjusted when it is a family member, else p < alpha."""
    return bool(row.significant_holm) if row.in_family else bool(row.p < alpha)


def closure_fraction(ref, parent, remedy):
    """(gap(parent) - gap(remedy)) / gap(parent), gaps = mean over seeds of the arm minus the reference."""
    gp = float(np.mean(parent - ref))
    gr = float(np.mean(remedy - ref))
    return (gp - gr) / gp if gp != 0 else math.nan


def bootstrap_closure(ref, parent, remedy, alpha=0.05):
    """The closure fraction and its percentile CI over all n^n resamples of the seeds (exhaustive bootstrap:
    deterministic, no random draws). Resamples whose parent gap is 0 are left out."""
    n = len(ref)
    values = []
    for pick in itertools.product(range(n), repeat=n):
        p = list(pick)
        v = closure_fraction(ref[p], parent[p], remedy[p])
        if not math.isnan(v):
            values.append(v)
    point = closure_fraction(ref, parent, remedy)
    if not values:
        return point, math.nan, math.nan
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return point, float(lo), float(hi)


# ---------------------------------------------------------------------------------------------- data


def curves_of(run, runs_dirs):
    """curves.csv of one run: <dir>/<study>/<run>/curves.csv or <dir>/<run>/curves.csv, first found. Read once per
    file (the analysis, the trajectory table and the figure all ask); callers must not modify the frame."""
    p = run_file(run, runs_dirs, "curves.csv")
    if p is None:
        fail(f"no curves.csv for run {run['run']} under {', '.join(runs_dirs)} (give --runs-dir)")
    return read_curves(p), p


@functools.lru_cache(maxsize=None)
def read_curves(path):
    return read_csv(path)


def wall_time_ends(spec):
    """Arm -> the micro-step at which its equal-wall-time window ends: ref_micro_steps for the arms in AutoANE's
    CPU mode (the spec's equal_wall_time ref_arms, default the reference alone), arm_micro_steps for its ANE-full
    arms (arms). An arm in neither has no window: AutoANE measured no step time for it. Empty without the entry."""
    ewt = spec.get("equal_wall_time")
    if not ewt:
        return {}
    cpu, ane = list(ewt.get("ref_arms", [spec["reference"]])), list(ewt.get("arms", []))
    both = sorted(set(cpu) & set(ane))
    if both:
        fail(f"equal_wall_time: {', '.join(both)} in both ref_arms (CPU mode, {ewt['ref_micro_steps']} micro-steps) "
             f"and arms (ANE-full, {ewt['arm_micro_steps']}); each arm has one step time")
    return {**{a: ewt["ref_micro_steps"] for a in cpu}, **{a: ewt["arm_micro_steps"] for a in ane}}


def wall_time_applies(ends, spec, arm, ref):
    """Whether a contrast has an equal-wall-time value: its arm is one of the ANE-full arms and its reference has
    a window of its own (a CPU-mode arm at the CPU's step count, or another ANE-full arm)."""
    return arm in spec.get("equal_wall_time", {}).get("arms", []) and ref in ends


def window_mean(curves, end_micro, window_micro, accum):
    """Mean training loss of the window of window/accum updates ending at the update nearest end_micro;
    curves.csv step k holds update k + 1. NaN when the run has not reached that update."""
    end_update = int(round(end_micro / accum))
    n_updates = max(1, int(round(window_micro / accum)))
    tl = curves[curves.metric == "train_loss"].set_index("step")["value"]
    steps = range(end_update - n_updates, end_update)
    if steps.start < 0 or any(s not in tl.index for s in steps):
        return math.nan
    return float(np.mean([tl[s] for s in steps]))


# ---------------------------------------------------------------------------------------------- analysis


def analyse(spec, runs, runs_dirs):
    arm_col, seed_col = spec.get("arm_column", "arm"), spec.get("seed_column", "seed")
    alpha = float(spec.get("alpha", 0.05))
    margins = [float(m) for m in spec.get("tost_margins_pct", [])]
    # Below min_seeds paired seeds a contrast is incomplete (preregistration amendment 7): its mean difference and
    # interval are reported, its tests (t, p, TOST) are not, and it stays out of the Holm family.
    min_seeds = int(spec.get("min_seeds", 2))
    metrics = list(spec["metrics"])
    for m in metrics:
        if not runs.empty and m not in runs.columns:
            fail(f"metric '{m}' is not a runs.csv column")
    ewt = spec.get("equal_wall_time")
    paired_rows, contrast_rows = [], []
    values = {}  # (metric, arm) -> {seed: value}
    for _, r in runs.iterrows():
        for m in metrics:
            values.setdefault((m, r[arm_col]), {})[r[seed_col]] = float(r[m])
    ends = wall_time_ends(spec)
    if ewt:
        for _, r in runs.iterrows():
            if r[arm_col] not in ends:
                continue
            accum = float(r["recipe.accum"]) if "recipe.accum" in runs.columns else 1.0
            end = ends[r[arm_col]]
            curves, _ = curves_of(r, runs_dirs)
            values.setdefault((EQUAL_WALL_TIME, r[arm_col]), {})[r[seed_col]] = window_mean(
                curves, end, ewt["window_micro_steps"], accum)
        metrics = metrics + [EQUAL_WALL_TIME]

    where = {}  # arm -> {(config, corpus)}: which config and corpus each arm ran at
    for _, r in runs.iterrows():
        where.setdefault(r[arm_col], set()).add((str(r.get("config.name", "?")), str(r.get("data_source", "?"))))

    def ran_at(*arms):
        pairs = set().union(*(where.get(a, set()) for a in arms))
        return " ".join(sorted(f"{c}/{d}" for c, d in pairs))

    family = set(spec.get("family", []))
    for m in metrics:
        for c in spec["contrasts"]:
            arm, ref = c["arm"], c["ref"]
            if m == EQUAL_WALL_TIME and not wall_time_applies(ends, spec, arm, ref):
                continue
            a, b = values.get((m, arm), {}), values.get((m, ref), {})
            seeds = sorted(s for s in set(a) & set(b) if not (math.isnan(a[s]) or math.isnan(b[s])))
            d = np.array([a[s] - b[s] for s in seeds])
            rel = np.array([100 * (a[s] - b[s]) / b[s] for s in seeds])
            for s, x, y in zip(seeds, d, rel):
                paired_rows.append({"metric": m, "arm": arm, "ref": ref, "seed": s, "L_ref": b[s], "L_arm": a[s],
                                    "diff": x, "rel_gap_pct": y})
            st, sr = paired_t(d, alpha), paired_t(rel, alpha)
            row = {"metric": m, "arm": arm, "ref": ref, "in_family": arm in family and ref == spec["reference"]
                   and m == spec["primary"], "ran_at": ran_at(arm, ref), "n": st["n"], "seeds": " ".join(str(s) for s in seeds),
                   "mean_diff": st["mean"], "sd_diff": st["sd"], "ci_low": st["ci_low"], "ci_high": st["ci_high"],
                   "t": st["t"], "df": st["df"], "p": st["p"], "rel_gap_pct": sr["mean"],
                   "rel_ci_low": sr["ci_low"], "rel_ci_high": sr["ci_high"]}
            tested = st["n"] >= min_seeds
            if not tested:
                row.update({"t": math.nan, "p": math.nan})
            for mg in margins:
                p, eq = tost(rel, mg, alpha) if tested else (math.nan, None)
                row[f"tost_p_{mg:g}pct"], row[f"equivalent_{mg:g}pct"] = p, eq
            contrast_rows.append(row)
    contrasts = pd.DataFrame(contrast_rows)
    if not contrasts.empty:
        fam = contrasts.in_family
        adj, rej = holm(list(contrasts.loc[fam, "p"]), alpha)
        contrasts["p_holm"], contrasts["significant_holm"] = math.nan, None
        contrasts.loc[fam, "p_holm"] = adj
        contrasts.loc[fam, "significant_holm"] = rej

    closure_rows = []
    prim = spec["primary"]
    for c in spec.get("closures", []):
        rem, par, ref = c["remedy"], c["parent"], c.get("ref", spec["reference"])
        a, p, r = (values.get((prim, x), {}) for x in (rem, par, ref))
        seeds = sorted(set(a) & set(p) & set(r))
        row = {"remedy": rem, "parent": par, "ref": ref, "n": len(seeds), "parent_gap_significant": None,
               "closure": math.nan, "ci_low": math.nan, "ci_high": math.nan}
        pc = find_contrast(contrasts, prim, par, ref)
        if len(seeds) >= 2 and pc is not None:
            sig = gap_significant(pc, alpha)
            row["parent_gap_significant"] = sig
            if sig:  # §5: only computed when the parent's gap is significant
                arr = [np.array([v[s] for s in seeds]) for v in (r, p, a)]
                row["closure"], row["ci_low"], row["ci_high"] = bootstrap_closure(*arr, alpha=alpha)
        closure_rows.append(row)
    closure_cols = ["remedy", "parent", "ref", "n", "parent_gap_significant", "closure", "ci_low", "ci_high"]
    paired_cols = ["metric", "arm", "ref", "seed", "L_ref", "L_arm", "diff", "rel_gap_pct"]
    return (pd.DataFrame(paired_rows, columns=paired_cols), contrasts,
            pd.DataFrame(closure_rows, columns=closure_cols), values)


def single_seed_spread(spec, values):
    """Exploratory, not preregistered: what a single-seed comparison like AutoANE's could have shown. For each
    contrast of spec["single_seed"] (default: the decomposition's) and each metric there (default: the primary and
    decomposition_also), the relative gap 100 (L_arm - L_ref) / L_ref of every same-seed pair (paired: the seed
    fixes init and batches in both arms) and of every pair of different seeds (unpaired: what two independent
    single runs compare), as min and max; and the reference arm's between-seed spread, 100 sd / mean (sd with
    n - 1). `values` maps (metric, arm) to {seed: value}."""
    ss = spec.get("single_seed", {})
    comps = ss.get("contrasts", spec.get("decomposition", []))
    metrics = ss.get("metrics", [spec["primary"]] + list(spec.get("decomposition_also", [])))
    ends = wall_time_ends(spec)
    rows = []
    for m in metrics:
        for c in comps:
            if m == EQUAL_WALL_TIME and not wall_time_applies(ends, spec, c["arm"], c["ref"]):  # as in analyse()
                continue
            a, b = values.get((m, c["arm"]), {}), values.get((m, c["ref"]), {})
            a = {s: v for s, v in a.items() if not math.isnan(v)}
            b = {s: v for s, v in b.items() if not math.isnan(v)}
            paired = [100 * (a[s] - b[s]) / b[s] for s in sorted(set(a) & set(b))]
            unpaired = [100 * (a[i] - b[j]) / b[j] for i in sorted(a) for j in sorted(b) if i != j]
            ref = np.array([b[s] for s in sorted(b)])
            rows.append({"metric": m, "arm": c["arm"], "ref": c["ref"], "n_paired": len(paired),
                         "paired_min_pct": min(paired, default=math.nan),
                         "paired_max_pct": max(paired, default=math.nan), "n_unpaired": len(unpaired),
                         "unpaired_min_pct": min(unpaired, default=math.nan),
                         "unpaired_max_pct": max(unpaired, default=math.nan), "ref_seeds": len(ref),
                         "ref_between_seed_sd_pct": float(100 * ref.std(ddof=1) / ref.mean()) if len(ref) >= 2
                         else math.nan})
    cols = ["metric", "arm", "ref", "n_paired", "paired_min_pct", "paired_max_pct", "n_unpaired", "unpaired_min_pct",
            "unpaired_max_pct", "ref_seeds", "ref_between_seed_sd_pct"]
    return pd.DataFrame(rows, columns=cols)


def penalty_comparison(spec, values, contrasts, runs):
    """Preregistration amendments 9 and 11 (claim D's second condition; C6's fp16 cost of alpha = 1, the difference of
    the penalties): does contrast a (e.g. CPU-D - CPU, the defect without fp16) show the same penalty as contrast b
    (GUIDE-D - GUIDE)? For each entry {"label", "a": {"arm", "ref"},
    "b": {"arm", "ref"}, "ratio_bounds": [lo, hi], "metrics": [...] (default: the primary)} of
    spec["penalty_comparison"] and each metric, on the seeds all four arms have: the mean penalty of a and of b
    (L_arm - L_ref, nats), ratio = mean_a / mean_b and whether lo <= ratio <= hi, and the per-seed difference of the
    penalties (a - b) with its 95 % t CI and two-sided p (no p below min_seeds). On the primary metric also a's
    significance as contrasts.csv has it (Holm-adjusted when a is in the family, else p < alpha) and
    same_penalty = significant and within the bounds (empty while a has no test).

    Amendment 11 (C6) adds two optional fields. "diff_margin": {"pct": P, "of": ARM}: margin = P/100 x the mean of
    ARM's values on the common seeds (ARM one of the four arms), and diff_below_margin = the upper bound of the
    difference's interval < margin (empty below min_seeds). "range_events": true: on the primary metric the seeds of
    a's arm and of a's reference whose run had a range event (a skipped update, a non-finite value, a collapsed
    norm; range_events()), over all their runs, and no_worse = no range event in a's arm and diff_below_margin."""
    cols = ["label", "metric", "a_arm", "a_ref", "b_arm", "b_ref", "n", "seeds", "mean_a", "mean_b", "ratio",
            "ratio_low", "ratio_high", "ratio_within", "diff_mean", "diff_ci_low", "diff_ci_high", "diff_p",
            "a_p", "a_p_holm", "a_significant", "same_penalty", "margin", "diff_below_margin",
            "range_event_seeds_a_arm", "range_event_seeds_a_ref", "no_worse"]
    alpha = float(spec.get("alpha", 0.05))
    min_seeds = int(spec.get("min_seeds", 2))
    rows = []
    for e in spec.get("penalty_comparison", []):
        lo, hi = (float(x) for x in e["ratio_bounds"])
        for m in e.get("metrics", [spec["primary"]]):
            a1, a0 = values.get((m, e["a"]["arm"]), {}), values.get((m, e["a"]["ref"]), {})
            b1, b0 = values.get((m, e["b"]["arm"]), {}), values.get((m, e["b"]["ref"]), {})
            seeds = sorted(s for s in set(a1) & set(a0) & set(b1) & set(b0)
                           if not any(math.isnan(v[s]) for v in (a1, a0, b1, b0)))
            pa = np.array([a1[s] - a0[s] for s in seeds])
            pb = np.array([b1[s] - b0[s] for s in seeds])
            st = paired_t(pa - pb, alpha)
            mean_a = float(pa.mean()) if len(seeds) else math.nan
            mean_b = float(pb.mean()) if len(seeds) else math.nan
            ratio = mean_a / mean_b if len(seeds) and mean_b != 0 else math.nan
            row = {"label": e.get("label", ""), "metric": m, "a_arm": e["a"]["arm"], "a_ref": e["a"]["ref"],
                   "b_arm": e["b"]["arm"], "b_ref": e["b"]["ref"], "n": len(seeds),
                   "seeds": " ".join(str(s) for s in seeds), "mean_a": mean_a, "mean_b": mean_b, "ratio": ratio,
                   "ratio_low": lo, "ratio_high": hi,
                   "ratio_within": bool(lo <= ratio <= hi) if not math.isnan(ratio) else None,
                   "diff_mean": st["mean"], "diff_ci_low": st["ci_low"], "diff_ci_high": st["ci_high"],
                   "diff_p": st["p"] if st["n"] >= min_seeds else math.nan,
                   "a_p": math.nan, "a_p_holm": math.nan, "a_significant": None, "same_penalty": None}
            if m == spec["primary"] and not contrasts.empty:
                c = find_contrast(contrasts, m, e["a"]["arm"], e["a"]["ref"])
                if c is None:
                    fail(f"penalty_comparison: {e['a']['arm']} - {e['a']['ref']} is not a contrast of the spec")
                row["a_p"] = float(c.p)
                if not math.isnan(c.p):
                    row["a_p_holm"] = float(c.p_holm) if c.in_family else math.nan
                    row["a_significant"] = gap_significant(c, alpha)
                    if row["ratio_within"] is not None:
                        row["same_penalty"] = row["a_significant"] and row["ratio_within"]
            row.update({"margin": math.nan, "diff_below_margin": None, "range_event_seeds_a_arm": "",
                        "range_event_seeds_a_ref": "", "no_worse": None})
            if "diff_margin" in e:
                of = e["diff_margin"]["of"]
                if of not in (e["a"]["arm"], e["a"]["ref"], e["b"]["arm"], e["b"]["ref"]):
                    fail(f"penalty_comparison: diff_margin's arm '{of}' is not one of the entry's four arms")
                ref_values = values.get((m, of), {})
                if seeds:
                    ref_mean = float(np.mean([ref_values[s] for s in seeds]))
                    row["margin"] = float(e["diff_margin"]["pct"]) / 100 * ref_mean
                if len(seeds) >= min_seeds:
                    row["diff_below_margin"] = bool(st["ci_high"] < row["margin"])
            if e.get("range_events") and m == spec["primary"]:
                events = range_events(spec, runs)
                ev_arm, ev_ref = events.get(e["a"]["arm"], []), events.get(e["a"]["ref"], [])
                row["range_event_seeds_a_arm"] = " ".join(str(s) for s in ev_arm)
                row["range_event_seeds_a_ref"] = " ".join(str(s) for s in ev_ref)
                if row["diff_below_margin"] is not None:
                    row["no_worse"] = not ev_arm and row["diff_below_margin"]
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def range_events(spec, runs):
    """Preregistration amendment 11: arm -> sorted seeds whose run had a range event in its summary: a skipped update
    (skipped_steps > 0), a non-finite loss or gradient (first_nonfinite_step set) or a collapsed norm
    (collapsed_norm_steps > 0)."""
    arm_col, seed_col = spec.get("arm_column", "arm"), spec.get("seed_column", "seed")
    need = ("skipped_steps", "first_nonfinite_step", "collapsed_norm_steps")
    if runs.empty:
        return {}
    for c in need:
        if c not in runs.columns:
            fail(f"range events: runs.csv has no '{c}' column (needed by a penalty_comparison with range_events)")
    out = {}
    for _, r in runs.iterrows():
        if (float(r["skipped_steps"]) > 0 or not pd.isna(r["first_nonfinite_step"])
                or float(r["collapsed_norm_steps"]) > 0):
            out.setdefault(r[arm_col], []).append(r[seed_col])
    return {a: sorted(s) for a, s in out.items()}


def trajectory_agreement(spec, runs, runs_dirs):
    """Same-seed agreement of two arms' loss trajectories (preregistration §6, C4's literal claim: |ΔL| < 5e-5 up
    to update 10). For each contrast of spec["trajectory_agreement"] and each seed both arms have: the largest
    |L_arm - L_ref| of the per-update metric (curves.csv, step k = update k + 1) over updates 1..updates, whether
    it stays below threshold there, and the first update of the whole run at which |ΔL| reaches the threshold
    (empty if none)."""
    ta = spec.get("trajectory_agreement")
    cols = ["metric", "arm", "ref", "seed", "updates", "threshold", "max_abs_diff", "holds",
            "first_update_at_threshold", "updates_compared"]
    if not ta:
        return pd.DataFrame(columns=cols)
    arm_col, seed_col = spec.get("arm_column", "arm"), spec.get("seed_column", "seed")
    metric, n_up, thr = ta.get("metric", "train_loss"), int(ta["updates"]), float(ta["threshold"])

    def series(arm):
        out = {}
        for _, r in runs[runs[arm_col] == arm].iterrows():
            c, _ = curves_of(r, runs_dirs)
            out[int(r[seed_col])] = c[c.metric == metric].set_index("step")["value"]
        return out

    rows = []
    for c in ta["contrasts"]:
        a, b = series(c["arm"]), series(c["ref"])
        for seed in sorted(set(a) & set(b)):
            d = (a[seed] - b[seed]).dropna().abs().sort_index()
            early = d[d.index < n_up]
            over = d[d >= thr]
            rows.append({"metric": metric, "arm": c["arm"], "ref": c["ref"], "seed": seed, "updates": n_up,
                         "threshold": thr, "max_abs_diff": float(early.max()) if len(early) else math.nan,
                         "holds": bool(len(early) == n_up and early.max() < thr),
                         "first_update_at_threshold": int(over.index[0]) + 1 if len(over) else None,
                         "updates_compared": int(len(d))})
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------------------------- claims


class ClaimInputs:
    """What the claim rules read: the primary-metric rows of contrasts.csv, closures.csv, penalties.csv and
    trajectory.csv, and the spec's alpha, min_seeds and TOST margins. Asking for a contrast, closure or penalty
    row that the spec does not produce is a spec error (the rule could never be decided), not a missing run."""

    def __init__(self, spec, contrasts, closures, penalties, trajectory):
        self.primary = spec["primary"]
        self.alpha = float(spec.get("alpha", 0.05))
        self.min_seeds = int(spec.get("min_seeds", 2))
        self.margins = [float(m) for m in spec.get("tost_margins_pct", [])]
        self.contrasts, self.closures = contrasts, closures
        self.penalties, self.trajectory = penalties, trajectory

    def contrast(self, arm, ref, metric=None):
        m = metric or self.primary
        row = find_contrast(self.contrasts, m, arm, ref)
        if row is None:
            fail(f"claims: {arm} - {ref} ({m}) is not a contrast of the spec")
        return row

    def complete(self, row):
        return int(row.n) >= self.min_seeds

    def significant(self, row):
        """As closures.csv judges a gap: Holm-adjusted within the family, else p < alpha; None while untested."""
        if not self.complete(row) or pd.isna(row.p):
            return None
        return gap_significant(row, self.alpha)

    def equivalent(self, row, margin):
        if float(margin) not in self.margins:
            fail(f"claims: TOST margin {margin:g} % is not one of the spec's tost_margins_pct {self.margins}")
        v = row[f"equivalent_{float(margin):g}pct"]
        return None if not self.complete(row) or pd.isna(v) else bool(v)

    def closure(self, remedy, parent):
        c = self.closures
        rows = c[(c.remedy == remedy) & (c.parent == parent)] if not c.empty else c
        if rows.empty:
            fail(f"claims: no closure of {remedy} against {parent} in the spec's closures")
        return rows.iloc[0]

    def penalty(self, arm, ref):
        p = self.penalties
        rows = p[(p.metric == self.primary) & (p.a_arm == arm) & (p.a_ref == ref)] if not p.empty else p
        if rows.empty:
            fail(f"claims: no penalty_comparison entry with a = {arm} - {ref} in the spec")
        return rows.iloc[0]


def fmt_gap(row):
    """'+0.02 % [-0.34 %, +0.39 %] n 3' from a contrasts.csv row (relative gap and its 95 % t interval)."""
    if int(row.n) == 0:
        return "n 0"
    if pd.isna(row.rel_ci_low):
        return f"{row.rel_gap_pct:+.2f} % n {int(row.n)}"
    return f"{row.rel_gap_pct:+.2f} % [{row.rel_ci_low:+.2f} %, {row.rel_ci_high:+.2f} %] n {int(row.n)}"


def yes(v):
    return v is True


def claim_c1(ci, rule):
    """§6 C1 per arm: confirmed when the relative gap >= confirm_gap_pct with its CI lower bound > confirm_ci_low_pct;
    refuted when the CI upper bound < refute_ci_high_pct, or TOST-equivalent within refute_tost_pct. §6's third
    refutation, a gap that appears only in AutoANE's metrics, is read as: the primary metric has no gap by one of
    the first two, while one of autoane_metrics has a significant positive gap; it names the refutation a
    measurement artefact (amendment 12). A primary gap that is merely not significant is not 'no gap'."""
    rows = []
    for arm in rule["arms"]:
        c = ci.contrast(arm, rule["ref"])
        done = ci.complete(c)
        eq = ci.equivalent(c, rule["refute_tost_pct"])
        auto = [ci.contrast(arm, rule["ref"], m) for m in rule.get("autoane_metrics", [])]
        auto_gap = [m.metric for m in auto if ci.significant(m) and m.mean_diff > 0]
        confirmed = done and c.rel_gap_pct >= rule["confirm_gap_pct"] and c.rel_ci_low > rule["confirm_ci_low_pct"]
        reasons = []
        if done and c.rel_ci_high < rule["refute_ci_high_pct"]:
            reasons.append(f"CI upper bound < {rule['refute_ci_high_pct']:g} %")
        if eq:
            tost_p = c[f"tost_p_{float(rule['refute_tost_pct']):g}pct"]
            reasons.append(f"TOST-equivalent within ±{rule['refute_tost_pct']:g} % (p {tost_p:.2g})")
        refuted = bool(reasons)
        if refuted and auto_gap:
            reasons.append("a gap only in AutoANE's metrics (" + ", ".join(auto_gap) + "): a measurement artefact")
        if done and not confirmed and not refuted:
            reasons.append(f"neither rule: CI lower bound {c.rel_ci_low:+.2f} % <= {rule['confirm_ci_low_pct']:g} % "
                           f"or gap < {rule['confirm_gap_pct']:g} %; upper bound {c.rel_ci_high:+.2f} % >= "
                           f"{rule['refute_ci_high_pct']:g} %; not TOST-equivalent within "
                           f"±{rule['refute_tost_pct']:g} %")
        evidence = f"{arm} - {rule['ref']} {fmt_gap(c)}" + "".join(f"; {m.metric} {fmt_gap(m)}" for m in auto)
        rows.append(claim_row("C1", arm, c.ran_at, int(c.n), confirmed, refuted, done, evidence, "; ".join(reasons)))
    return rows


def claim_c2(ci, rule):
    """§6 C2: confirmed when the arm's gap is significant and `closer` closes >= confirm_closure of it (closures.csv
    point estimate); refuted when the gap is not significant, or the closer closes < refute_closure of it."""
    c = ci.contrast(rule["arm"], rule["ref"])
    sig = ci.significant(c)
    cl = ci.closure(rule["closer"], rule["arm"])
    frac = float(cl.closure)
    done = sig is not None and (sig is False or not math.isnan(frac))
    confirmed = sig is True and frac >= rule["confirm_closure"]
    refuted = sig is False or (sig is True and frac < rule["refute_closure"])
    reason = ("no significant gap" if sig is False else
              f"{rule['closer']} closes {frac:.0%} < {rule['refute_closure']:.0%}" if refuted else "")
    evidence = (f"{rule['arm']} - {rule['ref']} {fmt_gap(c)}, p {c.p:.2g}" +
                (f" (Holm {c.p_holm:.2g})" if c.in_family and not pd.isna(c.p_holm) else "") +
                (f"; closure by {rule['closer']} {frac:.2f} [{cl.ci_low:.2f}, {cl.ci_high:.2f}]"
                 if not math.isnan(frac) else ""))
    return [claim_row("C2", rule["arm"], c.ran_at, int(c.n), confirmed, refuted, done, evidence, reason)]


def claim_c3(ci, rule):
    """§6 C3 over the remedies: refuted when any remedy is TOST-equivalent to the reference within tost_pct;
    confirmed when every remedy is complete and its gap's CI lies wholly outside +-tost_pct. The parents
    TOST-equivalent to the reference are named in the note: a remedy of a parent with no gap meets the refutation
    rule without having repaired anything."""
    margin = rule["tost_pct"]
    rows = [(r, ci.contrast(r, rule["ref"])) for r in rule["remedies"]]
    eq = {r: ci.equivalent(c, margin) for r, c in rows}
    done = all(ci.complete(c) for _, c in rows)
    outside = done and all(c.rel_ci_low > margin or c.rel_ci_high < -margin for _, c in rows)
    no_gap = [p for p in rule.get("parents", []) if ci.equivalent(ci.contrast(p, rule["ref"]), margin)]
    reason = ", ".join(r for r, v in eq.items() if v)
    reason = f"TOST-equivalent to {rule['ref']} within ±{margin:g} %: {reason}" if reason else ""
    if no_gap:
        reason += ("; " if reason else "") + (", ".join(no_gap) + f" already TOST-equivalent to {rule['ref']} "
                                               f"within ±{margin:g} % (no gap to close)")
    evidence = "; ".join(f"{r} - {rule['ref']} {fmt_gap(c)}" for r, c in rows)
    ran = " ".join(sorted({w for _, c in rows for w in str(c.ran_at).split() if w and w != "nan"}))
    refuted = any(yes(v) for v in eq.values())
    # Issue 42: C3 ("irreducible by software") presupposes a gap. When every parent is itself TOST-equivalent to
    # the reference there is nothing to repair, and a remedy equivalent to the reference meets the refutation rule
    # only by its letter: the verdict is "not applicable" (the rule's outcome stays in the refuted column).
    parents = rule.get("parents", [])
    nothing = bool(parents) and len(no_gap) == len(parents)
    if nothing:
        reason += "; not applicable: every parent is already equivalent to " + rule["ref"] + ", nothing to repair"
    return [claim_row("C3", " ".join(rule["remedies"]), ran, min(int(c.n) for _, c in rows), outside and not nothing,
                      refuted, done, evidence, reason, not_applicable=nothing)]


def claim_c4(ci, rule):
    """§6 C4: confirmed when the arm is TOST-equivalent to the reference within tost_pct and every seed's
    trajectory agreement holds (trajectory.csv, amendment 8); refuted when its gap is significant and
    >= refute_gap_pct."""
    c = ci.contrast(rule["arm"], rule["ref"])
    done = ci.complete(c)
    t = ci.trajectory
    t = t[(t.arm == rule["arm"]) & (t.ref == rule["ref"])] if not t.empty else t
    holds = done and len(t) >= ci.min_seeds and bool(t.holds.astype(str).eq("True").all())
    eq = ci.equivalent(c, rule["tost_pct"])
    confirmed = bool(eq) and holds
    refuted = ci.significant(c) is True and c.rel_gap_pct >= rule["refute_gap_pct"]
    failing = [str(int(s)) for s, h in zip(t.seed, t.holds.astype(str)) if h != "True"] if len(t) else []
    reason = "; ".join(x for x in (
        f"TOST-equivalent within ±{rule['tost_pct']:g} %" if eq else "",
        f"trajectory |ΔL| reaches the threshold early in seed(s) {' '.join(failing)}" if failing else "") if x)
    evidence = (f"{rule['arm']} - {rule['ref']} {fmt_gap(c)}; trajectory holds in {len(t) - len(failing)} of "
                f"{len(t)} seeds")
    return [claim_row("C4", rule["arm"], c.ran_at, int(c.n), confirmed, refuted, done, evidence, reason)]


def claim_c5(ci, rule):
    """§6 C5 (amendment 12): the non-linear ops' share of the gap of the ANE with its lookup tables is the closure of
    rule["closure"] = {remedy: the fp32-softmax arm, parent: the LUT arm} (telescoping: LUT - ref = (LUT - parent
    of both) + (parent - remedy) + (remedy - ref), the first two being the LUT and softmax contrasts). Computed only
    when the LUT arm's gap is significant; confirmed when the share >= confirm_share, refuted when < refute_share
    (the dominant share is elsewhere). With no significant gap there is nothing to explain: undetermined."""
    rem, par = rule["closure"]["remedy"], rule["closure"]["parent"]
    cl = ci.closure(rem, par)
    c = ci.contrast(par, cl.ref)
    cr = ci.contrast(rem, cl.ref)
    sig = ci.significant(c)
    share = float(cl.closure)
    done = ci.complete(c) and ci.complete(cr)
    # Amendment 12: "Without a significant gap C5 is undetermined, with nothing to explain." A gap is a deficit
    # (the arm worse than the reference); a significant difference of the wrong sign is no gap to explain
    # (issue 42: RM-LUT - CPU -0.05 % at A512 had been read as a gap, and C5 refuted on it).
    gap = sig is True and c.mean_diff > 0
    confirmed = gap and share >= rule["confirm_share"]
    refuted = gap and share < rule["refute_share"]
    note = (f"{par} - {cl.ref} not significant: no gap to explain" if sig is False else
            f"{par} - {cl.ref} significant but negative ({par} below {cl.ref}): no gap to explain"
            if sig is True and not gap else "")
    evidence = (f"{par} - {cl.ref} {fmt_gap(c)}; {rem} - {cl.ref} {fmt_gap(cr)}" +
                (f"; share {share:.2f} [{cl.ci_low:.2f}, {cl.ci_high:.2f}]" if not math.isnan(share) else ""))
    return [claim_row("C5", f"{rem} {par}", c.ran_at, min(int(c.n), int(cr.n)), done and confirmed,
                      done and refuted, done, evidence, note)]


def claim_c6(ci, rule):
    """§6 C6 with amendment 11: confirmed when an arm's seed has a range event that the reference's same seed does
    not; refuted when penalties.csv's no_worse holds (no range event in the arm, fp16's extra cost below the
    margin)."""
    p = ci.penalty(rule["arm"], rule["ref"])
    ev_arm = set(str(p.range_event_seeds_a_arm).split()) if not pd.isna(p.range_event_seeds_a_arm) else set()
    ev_ref = set(str(p.range_event_seeds_a_ref).split()) if not pd.isna(p.range_event_seeds_a_ref) else set()
    own = sorted(ev_arm - ev_ref)
    nw = None if pd.isna(p.no_worse) else str(p.no_worse) == "True"
    c = ci.contrast(rule["arm"], rule["ref"])
    cost = ("no seed with all four arms" if int(p.n) == 0 else
            f"fp16's extra cost {p.diff_mean:+.4f} nats" +
            (f" [{p.diff_ci_low:+.4f}, {p.diff_ci_high:+.4f}]" if not pd.isna(p.diff_ci_high) else "") +
            f" against a margin of {p.margin:.4f} (n {int(p.n)})")
    evidence = (f"range events in {rule['arm']}: seeds {' '.join(sorted(ev_arm)) or 'none'}; {cost}; "
                f"{rule['arm']} - {rule['ref']} {fmt_gap(c)}")
    reason = (f"range event in seed(s) {' '.join(own)} only" if own else
              "no range event, extra cost below the margin" if nw else "")
    return [claim_row("C6", rule["arm"], c.ran_at, int(p.n), bool(own), nw is True, nw is not None or bool(own),
                      evidence, reason)]


def claim_d(ci, rule):
    """§6 D with amendment 9: confirmed when arm - ref is significant and >= share of the arm's gap against ref0,
    and penalties.csv's same_penalty holds for the entry whose b is arm - ref; refuted when arm - ref is
    TOST-equivalent within tost_pct (arm ≈ ref). Significant but without the same penalty because the fp32 contrast
    is not significant after Holm: undetermined (amendment 9)."""
    c = ci.contrast(rule["arm"], rule["ref"])
    g = ci.contrast(rule["arm"], rule["ref0"])
    pens = ci.penalties
    pens = pens[(pens.metric == ci.primary) & (pens.b_arm == rule["arm"]) & (pens.b_ref == rule["ref"])] \
        if not pens.empty else pens
    if pens.empty:
        fail(f"claims: no penalty_comparison entry with b = {rule['arm']} - {rule['ref']} in the spec")
    p = pens.iloc[0]
    done = ci.complete(c) and ci.complete(g) and not pd.isna(p.same_penalty)
    share = c.mean_diff / g.mean_diff if ci.complete(g) and g.mean_diff != 0 else math.nan
    first = ci.significant(c) is True and share >= rule["share"]
    same = str(p.same_penalty) == "True"
    confirmed = done and first and same
    refuted = ci.equivalent(c, rule["tost_pct"]) is True
    ca = find_contrast(ci.contrasts, ci.primary, p.a_arm, p.a_ref)
    a_ci = ""
    if ca is not None and not pd.isna(ca.rel_ci_low) and ca.rel_ci_low <= 0 <= ca.rel_ci_high:
        a_ci = f" its interval [{ca.rel_ci_low:+.1f} %, {ca.rel_ci_high:+.1f} %] contains 0"
        if ca.rel_ci_low <= c.rel_gap_pct <= ca.rel_ci_high:
            a_ci += (f" and {rule['arm']} - {rule['ref']}'s {c.rel_gap_pct:+.1f} %: no penalty and the same penalty"
                     " are both within it")
    reason = ("" if not done else
              f"TOST-equivalent within ±{rule['tost_pct']:g} %" if refuted else
              "first condition holds; second fails: " + ("the penalties differ beyond the ratio bounds"
                                                          if str(p.ratio_within) != "True" else
                                                          f"{p.a_arm} - {p.a_ref} not significant" +
                                                          (f" after Holm;{a_ci}" if a_ci else ""))
              if first and not same else "")
    evidence = (f"{rule['arm']} - {rule['ref']} {fmt_gap(c)}, p {c.p:.2g}, {share:.0%} of {rule['arm']} - "
                f"{rule['ref0']}; {p.a_arm} - {p.a_ref} " + (f"{fmt_gap(ca)}, " if ca is not None else "") +
                f"p {p.a_p:.2g}" +
                (f" (Holm {p.a_p_holm:.2g})" if not pd.isna(p.a_p_holm) else "") + f", ratio {p.ratio:.2f}")
    return [claim_row("D", rule["arm"], c.ran_at, min(int(c.n), int(g.n)), confirmed, refuted, done, evidence,
                      reason)]


def claim_f(ci, rule):
    """Amendment 15's F (not AutoANE's claim: a subnormal flush costs loss, i.e. explains part of the gap), per flush
    model: the flush's own cost arm - parent (e.g. GUIDE-FTZ - GUIDE) on the primary metric. The pairs' p-values are
    Holm-adjusted together, over the pairs that have their seeds (a pair's own p is never read without the others
    it is tested with: while one pair lacks seeds, every pair is incomplete). Confirmed when the cost is
    Holm-significant, positive and at least confirm_gap_pct; refuted when TOST-equivalent to the parent within
    tost_pct; undetermined otherwise. The evidence adds the cost in AutoANE's metric (rule's autoane_metric), the
    number the decomposition compares with AutoANE's published gap."""
    rows = [(p["arm"], p["parent"], ci.contrast(p["arm"], p["parent"])) for p in rule["pairs"]]
    done = all(ci.complete(c) and not pd.isna(c.p) for _, _, c in rows)
    adjusted, rejected = holm([float(c.p) if done else math.nan for _, _, c in rows], ci.alpha)
    out = []
    for (arm, parent, c), p_holm, rej in zip(rows, adjusted, rejected):
        eq = ci.equivalent(c, rule["tost_pct"]) if done else None
        confirmed = done and rej is True and c.mean_diff > 0 and c.rel_gap_pct >= rule["confirm_gap_pct"]
        refuted = eq is True
        auto = find_contrast(ci.contrasts, rule.get("autoane_metric", ""), arm, parent)
        evidence = f"{arm} - {parent} {fmt_gap(c)}" + (f", p {c.p:.2g} (Holm over {len(rows)}: {p_holm:.2g})"
                                                      if done else "")
        if auto is not None:
            evidence += f"; in {rule['autoane_metric']} {fmt_gap(auto)}" + (
                f" ({auto.mean_diff:+.4f} nats)" if int(auto.n) > 0 else "")
        reason = ("" if not done else
                  f"TOST-equivalent to {parent} within ±{rule['tost_pct']:g} %" if refuted else
                  "" if confirmed else
                  "Holm-significant but below the size rule" if rej is True and c.mean_diff > 0 else
                  "not significant after Holm and not equivalent" if rej is not True else "significant with the wrong sign")
        out.append(claim_row("F", arm, c.ran_at, int(c.n), confirmed, refuted, done, evidence, reason))
    return out


CLAIM_COLUMNS = ["claim", "subject", "ran_at", "scope", "n", "confirmed", "refuted", "verdict", "evidence", "reason"]


def claim_row(claim, subject, ran_at, n, confirmed, refuted, complete, evidence, reason, not_applicable=False):
    """One claims.csv row. verdict: confirmed / refuted by the rule; undetermined when every input has its seeds
    and neither rule holds; incomplete when an input lacks its min_seeds seeds and neither rule holds yet; not
    applicable when the claim's premise fails (C3 with nothing to repair; the rule's outcome stays in its column).
    scope is filled by claims(): where the verdict holds (amendment 5: "a verdict *at A512*")."""
    confirmed, refuted = bool(confirmed), bool(refuted)
    if confirmed and refuted:
        fail(f"claims: {claim} ({subject}) is both confirmed and refuted by the spec's rules")
    verdict = ("not applicable" if not_applicable and complete else "confirmed" if confirmed else
               "refuted" if refuted else "undetermined" if complete else "incomplete")
    return {"claim": claim, "subject": subject, "ran_at": "" if pd.isna(ran_at) else ran_at, "scope": "", "n": n,
            "confirmed": confirmed, "refuted": refuted, "verdict": verdict, "evidence": evidence, "reason": reason}


def claim_scope(ran_at, updates):
    """'at A512, 130 updates' from a claims row's ran_at ('A512/brown-1.9.80 ...') and updates, config name ->
    the runs' update counts (runs.csv `steps`). Amendment 5: a verdict decided on A512 runs is a verdict at A512."""
    configs = sorted({w.split("/")[0] for w in str(ran_at).split() if w and w != "nan"})
    if not configs:
        return ""
    parts = []
    for cfg in configs:
        u = sorted(updates.get(cfg, set()))
        parts.append(f"{cfg}, {'/'.join(str(x) for x in u)} updates" if u else cfg)
    return "at " + "; ".join(parts)


def updates_by_config(runs):
    """config name -> the set of update counts (runs.csv `steps`) of the runs at it."""
    out = {}
    if runs is None or runs.empty or "steps" not in runs.columns:
        return out
    for _, r in runs.iterrows():
        out.setdefault(str(r.get("config.name", "?")), set()).add(int(r["steps"]))
    return out


def claims(spec, contrasts, closures, penalties, trajectory, updates=None):
    """claims.csv (preregistration amendment 12): §6's rules, with amendments 9 and 11, applied to this analysis's
    own tables for each entry of spec["claims"]. A claim whose arms this runs.csv lacks comes out incomplete."""
    rules = spec.get("claims", {})
    if not rules:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    ci = ClaimInputs(spec, contrasts, closures, penalties, trajectory)
    evaluate = {"C1": lambda r: claim_c1(ci, r), "C2": lambda r: claim_c2(ci, r), "C3": lambda r: claim_c3(ci, r),
                "C4": lambda r: claim_c4(ci, r), "C5": lambda r: claim_c5(ci, r),
                "C6": lambda r: claim_c6(ci, r), "D": lambda r: claim_d(ci, r),
                "F": lambda r: claim_f(ci, r)}
    rows = []
    for name, rule in rules.items():
        if name == "about":
            continue
        if name not in evaluate:
            fail(f"claims: unknown claim '{name}' in the spec (known: {', '.join(evaluate)})")
        rows.extend(evaluate[name](rule))
    for r in rows:
        r["scope"] = claim_scope(r["ran_at"], updates or {})
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


REPLICATION_COLUMNS = ["arm", "ref", "n", "rel_gap_pct", "rel_ci_low", "rel_ci_high", "p", "p_holm", "significant",
                       "equivalent_0.5pct", "orig_n", "orig_rel_gap_pct", "orig_rel_ci_low", "orig_rel_ci_high",
                       "orig_p", "orig_p_holm", "orig_significant", "orig_equivalent_0.5pct", "orig_p_holm_family",
                       "orig_significant_family", "sign_agrees", "significance_agrees", "equivalence_agrees",
                       "agrees", "agrees_in_orig_family", "replicates", "replicates_in_orig_family"]


def replication(spec, contrasts, orig):
    """Amendment 1: "the replication's statistics are those of §5 for its two contrasts (GUIDE − CPU, GUIDE-D −
    CPU), Holm over these two, TOST at ±0.5 % and ±2 % of L_CPU. It replicates the Brown result if the sign and the
    significance (or the TOST equivalence) of each contrast agree with Brown's at the same config."

    The contrasts are this analysis's family members with a test (the KJV's two); both corpora are judged with Holm
    over those same contrasts (the family amendment 1 names), and beside it the original's Holm p in its own §5
    family (Brown's five) and whether the agreement holds under that reading too. A contrast agrees when the signs
    of the mean gaps agree and either the significance agrees or both are TOST-equivalent within ±0.5 %."""
    alpha = float(spec.get("alpha", 0.05))
    prim = spec["primary"]
    if contrasts.empty:
        return pd.DataFrame(columns=REPLICATION_COLUMNS)
    mine = contrasts[(contrasts.metric == prim) & contrasts.in_family & contrasts.p.notna()]
    pairs = [(r.arm, r.ref) for _, r in mine.iterrows()]
    orig_rows = [find_contrast(orig, prim, a, b) for a, b in pairs]
    for (a, b), o in zip(pairs, orig_rows):
        if o is None:
            fail(f"replication: {a} - {b} is not in the original study's contrasts.csv")
    orig_p = [float(o.p) for o in orig_rows]
    orig_adj, orig_sig = holm(orig_p, alpha)
    my_adj, my_sig = holm([float(p) for p in mine.p], alpha)

    def truth(v):
        return None if pd.isna(v) else str(v) == "True"

    rows = []
    for k, ((_, r), o) in enumerate(zip(mine.iterrows(), orig_rows)):
        eq, oeq = truth(r["equivalent_0.5pct"]), truth(o["equivalent_0.5pct"])
        fam_sig = truth(o.significant_holm) if truth(o.in_family) else None
        sign = bool(np.sign(r.mean_diff) == np.sign(float(o.mean_diff)))
        sig_agree = my_sig[k] == orig_sig[k]
        eq_agree = bool(eq) and bool(oeq)
        fam_agree = fam_sig is not None and my_sig[k] == fam_sig
        rows.append({"arm": r.arm, "ref": r.ref, "n": int(r.n), "rel_gap_pct": r.rel_gap_pct,
                     "rel_ci_low": r.rel_ci_low, "rel_ci_high": r.rel_ci_high, "p": r.p, "p_holm": my_adj[k],
                     "significant": my_sig[k], "equivalent_0.5pct": eq, "orig_n": int(o.n),
                     "orig_rel_gap_pct": o.rel_gap_pct, "orig_rel_ci_low": o.rel_ci_low,
                     "orig_rel_ci_high": o.rel_ci_high, "orig_p": float(o.p), "orig_p_holm": orig_adj[k],
                     "orig_significant": orig_sig[k], "orig_equivalent_0.5pct": oeq,
                     "orig_p_holm_family": float(o.p_holm) if truth(o.in_family) else math.nan,
                     "orig_significant_family": fam_sig, "sign_agrees": sign, "significance_agrees": sig_agree,
                     "equivalence_agrees": eq_agree, "agrees": sign and (sig_agree or eq_agree),
                     "agrees_in_orig_family": sign and (fam_agree or eq_agree)})
    out = pd.DataFrame(rows, columns=REPLICATION_COLUMNS)
    out["replicates"] = bool(len(rows)) and bool(out.agrees.all())
    out["replicates_in_orig_family"] = bool(len(rows)) and bool(out.agrees_in_orig_family.all())
    return out


# ---------------------------------------------------------------------------------------------- figures


def arm_styles(n):
    """(colour, line style, marker) for n arms, no two alike: the first ten take tab10's colours with solid lines
    and round markers, the next ten the light tab20 shade of the same hues with dashed lines and squares, and any
    further arms evenly spaced hues, dotted, with triangles (cycling tab10 alone made the 11th arm the 1st's twin)."""
    tab20 = plt.get_cmap("tab20")
    hsv = plt.get_cmap("hsv")
    styles = []
    for k in range(n):
        if k < 10:
            styles.append((f"C{k}", "-", "o"))
        elif k < 20:
            styles.append((tab20(2 * (k - 10) + 1), "--", "s"))
        else:
            styles.append((hsv((k - 20) / max(1, n - 20)), ":", "^"))
    return styles


def fig_curves(spec, runs, runs_dirs, path):
    """Left: own-precision training loss per update (mean over seeds, seed min..max band). Right: fp32 validation
    loss; as curves when the runs evaluated more than once, else (a study that evaluates only at the end) each
    seed's final value per arm, filled for the fp32 evaluation and open for the run's own precision."""
    arm_col, seed_col = spec.get("arm_column", "arm"), spec.get("seed_column", "seed")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    arms = list(dict.fromkeys(runs[arm_col])) if not runs.empty else []
    curves = {}
    for _, r in runs.iterrows():
        curves[r["run"]] = curves_of(r, runs_dirs)[0]
    val_points = max((int((c.metric == "val_loss_fp32").sum()) for c in curves.values()), default=0)
    val_as_curves = val_points > 1
    styles = arm_styles(len(arms))
    for k, arm in enumerate(arms):
        color, line, marker = styles[k]
        sub = runs[runs[arm_col] == arm]
        for ax, metric in zip(axes, ["train_loss", "val_loss_fp32"]):
            if metric != "train_loss" and not val_as_curves:
                continue
            series = [curves[r["run"]][curves[r["run"]].metric == metric].set_index("step")["value"]
                      for _, r in sub.iterrows()]
            if not series:
                continue
            table = pd.concat(series, axis=1).dropna()
            if table.empty:
                continue
            x = table.index + (1 if metric == "train_loss" else 0)  # train_loss at step k is update k + 1
            ax.plot(x, table.mean(axis=1), color=color, ls=line, label=f"{arm} (n={table.shape[1]})",
                    marker=marker if metric != "train_loss" else None, ms=3)
            ax.fill_between(x, table.min(axis=1), table.max(axis=1), color=color, alpha=0.18, lw=0)
        if not val_as_curves and "val_loss_fp32" in sub.columns:
            ax = axes[1]
            fp32 = sub["val_loss_fp32"].astype(float)
            own = sub["val_loss_own"].astype(float) if "val_loss_own" in sub.columns else None
            jitter = np.linspace(-0.15, 0.15, len(sub)) if len(sub) > 1 else np.zeros(1)
            ax.scatter(k + jitter, fp32, color=color, marker=marker, s=28, zorder=3)
            if own is not None:
                ax.scatter(k + jitter, own, marker=marker, facecolors="none", edgecolors=color, s=46, zorder=3)
            for xj, y, seed in zip(k + jitter, fp32, sub[seed_col]):
                ax.annotate(str(seed), (xj, y), textcoords="offset points", xytext=(4, -3), fontsize=6)
            ax.hlines(fp32.mean(), k - 0.3, k + 0.3, color=color, lw=1.2)
    axes[0].set_title("training loss, own precision (mean per update)\nline: mean over seeds; band: seed min..max")
    axes[0].set_xlabel("update")
    if val_as_curves:
        axes[1].set_title("validation loss, fp32\nline: mean over seeds; band: seed min..max")
        axes[1].set_xlabel("update")
    else:
        axes[1].set_title("final validation loss per seed (number = seed; bar = mean)\n"
                          "filled: fp32 evaluation (primary); open: the run's own precision")
        axes[1].set_xticks(range(len(arms)))
        axes[1].set_xticklabels([f"{arm} (n={int((runs[arm_col] == arm).sum())})" for arm in arms],
                                fontsize=8, rotation=35, ha="right")
        axes[1].set_xlim(-0.6, len(arms) - 0.4)
    for ax in axes:
        ax.set_ylabel("nats / token")
        ax.grid(alpha=0.3)
    # The per-seed panel names its arms (and seeds) on its x axis and has no legend: with more than a handful of
    # arms a legend there hid points. The curves' legend takes a second column from nine arms on.
    if arms:
        axes[0].legend(fontsize=7, ncol=1 + len(arms) // 9, loc="upper right")
        if val_as_curves:
            axes[1].legend(fontsize=7, ncol=1 + len(arms) // 9, loc="upper right")
    if not arms:
        fig.suptitle("no complete runs yet")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def missing_bar_label(spec, arms_run, ends, metric, arm, ref):
    """What a decomposition bar without a value says: "n/a" where the metric does not apply (equal wall time
    without a window on both sides), "no runs of X" naming the contrast's arm(s) with no run in the table (not in
    this study's grid, or not run yet), else "no data" (both arms ran, but no seed of them is paired)."""
    if metric == EQUAL_WALL_TIME and not wall_time_applies(ends, spec, arm, ref):
        return "n/a"
    absent = [a for a in (arm, ref) if a not in arms_run]
    return f"no runs of {' or '.join(absent)}" if absent else "no data"


def fig_decomposition(spec, contrasts, path, arms_run):
    comps = spec.get("decomposition", [])
    metrics = [spec["primary"]] + [m for m in spec.get("decomposition_also", [])]
    ends = wall_time_ends(spec)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(comps) + 2), 5))
    width = 0.8 / max(1, len(metrics))
    # The published gaps this study tests (spec "published_gaps"), as reference lines.
    for k, g in enumerate(spec.get("published_gaps", [])):
        ax.axhline(float(g["pct"]), color="grey", ls="--" if k % 2 == 0 else ":", lw=0.9, label=g["label"])
    for j, m in enumerate(metrics):
        ys, lo, hi, ns = [], [], [], []
        for c in comps:
            row = contrasts[(contrasts.metric == m) & (contrasts.arm == c["arm"]) & (contrasts.ref == c["ref"])] \
                if not contrasts.empty else contrasts
            y = float(row.rel_gap_pct.iloc[0]) if not row.empty else math.nan
            ys.append(y)
            lo.append(y - float(row.rel_ci_low.iloc[0]) if not row.empty else math.nan)
            hi.append(float(row.rel_ci_high.iloc[0]) - y if not row.empty else math.nan)
            ns.append(int(row.n.iloc[0]) if not row.empty and not pd.isna(row.n.iloc[0]) else 0)
        x = np.arange(len(comps)) + (j - (len(metrics) - 1) / 2) * width
        ax.bar(x, np.nan_to_num(ys), width, color=f"C{j}", label=m)
        # Error bars only where the interval exists (n >= 2); each bar says its number of paired seeds.
        has_ci = [not (math.isnan(a) or math.isnan(b)) for a, b in zip(lo, hi)]
        if any(has_ci):
            xs = [xi for xi, h in zip(x, has_ci) if h]
            ax.errorbar(xs, [y for y, h in zip(ys, has_ci) if h],
                        yerr=[[v for v, h in zip(lo, has_ci) if h], [v for v, h in zip(hi, has_ci) if h]],
                        fmt="none", ecolor="black", capsize=3, lw=0.8)
        for xi, y, n, c in zip(x, ys, ns, comps):
            if math.isnan(y):
                ax.text(xi, 0, missing_bar_label(spec, arms_run, ends, m, c["arm"], c["ref"]), rotation=90,
                        ha="center", va="bottom", fontsize=7)
            else:
                ax.text(xi, 0.01, f"n={n}", transform=blended_transform_factory(ax.transData, ax.transAxes),
                        ha="center", va="bottom", fontsize=6)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(comps)))
    ax.set_xticklabels([c["label"] for c in comps], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("gap, % of the reference's loss\n(mean of paired seeds; 95 % t CI where n >= 2)")
    ax.set_title("gap decomposition")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_remedies_figure(spec, spec_path):
    """Refuses a remedies_figure row that is not one of the spec's contrasts (it could only ever say "no data"),
    before anything is written."""
    listed = {(c["arm"], c["ref"]) for c in spec["contrasts"]}
    for r in spec.get("remedies_figure", {}).get("rows", []):
        if (r["arm"], r["ref"]) not in listed:
            fail(f"spec {spec_path}: remedies_figure row {r['arm']} - {r['ref']} is not one of the spec's contrasts; "
                 f"valid: {', '.join(f'{a} - {b}' for a, b in sorted(listed))}")


def fig_remedies(spec, contrasts, path):
    """A forest plot of the spec's remedies_figure rows: each contrast's relative gap on the primary metric (mean of
    the paired seeds' 100 D / L_ref) with its 95 % t CI where n >= 2, the number of seeds and the interval written
    beside it, and the band of +-band_pct shaded (C3's equivalence margin). Descriptive: the verdicts are
    claims.csv's."""
    fig_spec = spec["remedies_figure"]
    rows, band, metric = fig_spec["rows"], float(fig_spec["band_pct"]), spec["primary"]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.6))
    ax.axvspan(-band, band, color="grey", alpha=0.15, lw=0, label=f"+-{band:g} % (C3's equivalence margin)")
    ax.axvline(0, color="black", lw=0.8)
    labels = []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        labels.append(f"{r['arm']} - {r['ref']}")
        c = find_contrast(contrasts, metric, r["arm"], r["ref"])
        n = 0 if c is None or pd.isna(c["n"]) else int(c["n"])
        if n == 0:
            ax.text(0, y, "  no data", va="center", fontsize=7)
            continue
        g = float(c["rel_gap_pct"])
        lo, hi = float(c["rel_ci_low"]), float(c["rel_ci_high"])
        if n >= 2 and not (math.isnan(lo) or math.isnan(hi)):
            ax.errorbar([g], [y], xerr=[[g - lo], [hi - g]], fmt="o", color="C0", ecolor="black", capsize=3,
                        lw=0.8, ms=5)
            note = f"n={n}: {g:+.2f} % [{lo:+.2f}, {hi:+.2f}]"
        else:
            ax.plot([g], [y], "o", color="C0", mfc="none", ms=5)
            note = f"n={n}: {g:+.2f} % (no interval)"
        ax.annotate(note, (1.0, y), xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=7)
    ax.set_yticks(range(len(rows) - 1, -1, -1))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"gap on {metric}, % of the reference's loss (mean of paired seeds; 95 % t CI where n >= 2)")
    ax.set_title("remedies: each against its parent and against the reference")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="analysis spec JSON")
    ap.add_argument("--runs", action="append", default=[], help="runs.csv (repeatable: e.g. primary + remedies)")
    ap.add_argument("--runs-dir", action="append", default=[],
                    help="where the runs' directories are (<dir>/<study>/<run>/ or <dir>/<run>/); default out/sweep")
    ap.add_argument("--out", required=True, help="output directory for the tables and analysis.json")
    ap.add_argument("--figures", help="directory for the figures (default: --out)")
    ap.add_argument("--prefix", default="", help="prefix of the figure file names")
    ap.add_argument("--replication-of", help="the contrasts.csv of the study this one replicates (amendment 1: the "
                    "KJV against Brown at the same config); writes replication.csv")
    a = ap.parse_args(argv)
    if not a.runs:
        fail("give at least one --runs runs.csv")
    with open(a.spec) as f:
        spec = json.load(f)
    for k in ("reference", "primary", "metrics", "contrasts"):
        if k not in spec:
            fail(f"spec {a.spec} has no '{k}'")
    check_remedies_figure(spec, a.spec)
    runs_dirs = a.runs_dir or ["out/sweep"]
    try:
        runs = load_runs(a.runs, spec.get("arm_column", "arm"), spec.get("seed_column", "seed"))
    except InputError as e:
        fail(str(e))
    paired, contrasts, closures, values = analyse(spec, runs, runs_dirs)
    os.makedirs(a.out, exist_ok=True)
    figdir = a.figures or a.out
    os.makedirs(figdir, exist_ok=True)
    write_csv(paired, os.path.join(a.out, "paired.csv"))
    write_csv(contrasts, os.path.join(a.out, "contrasts.csv"))
    write_csv(closures, os.path.join(a.out, "closures.csv"))
    trajectory = trajectory_agreement(spec, runs, runs_dirs)
    penalties = penalty_comparison(spec, values, contrasts, runs)
    write_csv(trajectory, os.path.join(a.out, "trajectory.csv"))
    write_csv(single_seed_spread(spec, values), os.path.join(a.out, "single_seed.csv"))
    write_csv(penalties, os.path.join(a.out, "penalties.csv"))
    write_csv(claims(spec, contrasts, closures, penalties, trajectory, updates_by_config(runs)),
              os.path.join(a.out, "claims.csv"))
    if a.replication_of:
        try:
            brown = read_csv(a.replication_of)
        except (OSError, InputError) as e:
            fail(f"--replication-of {a.replication_of}: {e}")
        write_csv(replication(spec, contrasts, brown), os.path.join(a.out, "replication.csv"))
    fig_curves(spec, runs, runs_dirs, os.path.join(figdir, f"{a.prefix}loss_curves.png"))
    fig_decomposition(spec, contrasts, os.path.join(figdir, f"{a.prefix}gap_decomposition.png"),
                      set(runs[spec.get("arm_column", "arm")]) if not runs.empty else set())
    if "remedies_figure" in spec:
        fig_remedies(spec, contrasts, os.path.join(figdir, f"{a.prefix}remedies.png"))
    write_provenance(os.path.join(a.out, "analysis.json"), "studies/sweep/analyze_study.py", a.runs + [a.spec],
                     spec=spec, runs=int(len(runs)), contrasts=int(len(contrasts)))
    print(f"analyze_study: {len(runs)} runs, {len(contrasts)} contrast rows -> {a.out}")


if __name__ == "__main__":
    main()
