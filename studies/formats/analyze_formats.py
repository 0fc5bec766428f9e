"""The registered analysis of the formats-in-training study (issue 41 item 4(a); docs/studies/formats-training.md).

Reads one config's sweep table (runs.csv, one row per finished run: arm, seed, val_loss_fp32, val_loss_own, diverged,
policy, ...) and each run's telemetry.csv (the MPFR shadow's rows), and writes tidy CSV to --out:

- runs.csv          one row per run: arm, seed, the two metrics, diverged, policy, git revision, weights hash;
- arms.csv          per arm and metric: n (finite runs), diverged runs, mean, sd, 95 % t-interval of the mean;
- paired.csv        per contrast, metric and common seed: arm value, reference value, difference (arm - ref);
- contrasts.csv     per contrast and metric: n paired seeds, mean difference, sd, 95 % t-interval, the margin X,
                    `equivalent` (the interval inside [-X, X]), `direction` (worse: interval above 0; better: below
                    0; none: it holds 0; n<2: no interval);
- ordering.csv      per metric: the arms ranked by mean (rank 1 = lowest loss);
- claims.csv        the three published claims judged by the registered rules (docs/studies/formats-training.md):
                    C1 "MXFP8 ~ fp32", C2 "NVFP4 needs each recipe switch" (one row per switch), C3 "plain MXFP4 is
                    worst"; each holds / fails / undetermined (with the reason);
- attribution.csv   per arm, attribution metric (shadow_norm_rel: the op's local normwise error against MPFR on its
                    own rounded inputs; global_norm_rel: the error the run carries there against an fp64 twin) and
                    (op, pass): the mean over the run's shadowed steps, layers and tensors, then over seeds, and its
                    rank within the arm (1 = largest);
- attribution_top.csv  per arm and attribution metric, the (op, pass) of rank 1;
- attribution_contrasts.csv  per contrast and attribution metric, the three (op, pass) whose mean error grew most
                    from the reference arm to the arm (arm - ref): the op whose error explains the gap;
- attribution_detail.csv  the same means per (op, pass, layer, tensor): which projection, which block;
- attribution_signed.csv  descriptive, outside the registered analysis, written only when the runs' telemetry has
                    the shadow's signed error (A512 onwards; docs/trainer.md): per arm, signed metric
                    (shadow_signed_rel = sum (y - r) r / sum r^2 of the op's own rounding, global_signed_rel the
                    same against the fp64 twin) and (op, pass), the mean as for attribution.csv, the matching
                    normwise mean, and `along` = signed / normwise (in [-1, 1]: near -1 the error is a shrinkage
                    toward zero, a bias; near 0 it is orthogonal to the exact output, as unbiased noise is);
- summary.md        the primary metric's arms, contrasts and claims and the attribution's first ranks as Markdown.

Statistics: paired by seed (every arm of a seed starts from the same weights and sees the same batches); the 95 %
interval is mean +- t(0.975, n-1) sd/sqrt(n), t from the regularized incomplete beta (no scipy). A run that
diverged, or whose metric is not finite, is left out of means and intervals and counted in `diverged`; a contrast
with a diverged arm run on a seed whose reference is finite is judged `worse` on that seed (recorded as
`diverged_pairs`). Standard library + numpy only: /usr/bin/python3 studies/formats/analyze_formats.py --runs
notebooks-data/formats-training-t1/runs.csv --runs-dir notebooks-data/formats-training-t1/runs --out DIR
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys

import numpy as np

ARMS = ["fp32", "bf16", "mxfp8", "mxfp6", "mxfp4", "nvfp4", "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-1x16w",
        "nvfp4-no-keep"]
REFERENCE = "fp32"
SWITCHES = {"nvfp4-no-rht": "random Hadamard transform on wgrad", "nvfp4-no-sr": "stochastic rounding of gradients",
            "nvfp4-1x16w": "16x16 weight blocks", "nvfp4-no-keep": "last block kept in bf16"}
# Every arm against fp32; the quantized arms against bf16 (their own base: every block preset is amp-bf16 plus
# quantized GEMM operands); each recipe switch removed against nvfp4; mxfp4 against the other formats.
CONTRASTS = ([(a, "fp32") for a in ARMS if a != "fp32"]
             + [(a, "bf16") for a in ARMS if a not in ("fp32", "bf16")]
             + [(a, "nvfp4") for a in SWITCHES]
             + [("mxfp4", a) for a in ARMS if a not in ("mxfp4", "fp32", "bf16")])
METRICS = ["val_loss_fp32", "val_loss_own"]
PRIMARY = "val_loss_fp32"
MARGIN_PCT = 0.5   # X = 0.5 % of the fp32 arm's mean loss (registered; docs/studies/formats-training.md)
LENIENT_PCT = 2.0  # reported beside it
ATTR_METRICS = ["shadow_norm_rel", "global_norm_rel"]
SIGNED_METRICS = {"shadow_signed_rel": "shadow_norm_rel", "global_signed_rel": "global_norm_rel"}


# ---------------------------------------------------------------- Student's t quantile (no scipy)
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    p = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - p if t > 0 else p


def t_quantile(q: float, df: int) -> float:
    """The q quantile (q > 0.5) of Student's t with df degrees of freedom, by bisection on the CDF."""
    if df < 1:
        raise ValueError(f"t quantile: df must be >= 1, got {df}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def mean_interval(values) -> dict:
    """n, mean, sd and the 95 % t-interval of the mean (NaN where n < 2)."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    nan = float("nan")
    if n == 0:
        return {"n": 0, "mean": nan, "sd": nan, "ci_low": nan, "ci_high": nan}
    m = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": m, "sd": nan, "ci_low": nan, "ci_high": nan}
    sd = float(x.std(ddof=1))
    h = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "sd": sd, "ci_low": m - h, "ci_high": m + h}


# ---------------------------------------------------------------- inputs
def _truthy(v) -> bool:
    return str(v).strip().lower() in ("true", "1")


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def read_runs(paths) -> list[dict]:
    runs, seen = [], set()
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                arm, seed = r["arm"], int(r["seed"])
                if arm not in ARMS:
                    sys.exit(f"analyze_formats: {p}: unknown arm '{arm}' (valid: {' '.join(ARMS)})")
                if (arm, seed) in seen:
                    sys.exit(f"analyze_formats: arm {arm} seed {seed} appears twice (give one config's tables)")
                seen.add((arm, seed))
                row = {"arm": arm, "seed": seed, "run": r["run"], "diverged": _truthy(r.get("diverged", "false")),
                       "policy": r.get("policy", ""), "git_revision": r.get("git_revision", ""),
                       "weights_sha256": r.get("weights_sha256", ""), "config": r.get("config.name", "")}
                for m in METRICS:
                    row[m] = _float(r.get(m))
                runs.append(row)
    configs = {r["config"] for r in runs}
    if len(configs) > 1:
        sys.exit(f"analyze_formats: the tables hold more than one config ({' '.join(sorted(configs))}); give one")
    return sorted(runs, key=lambda r: (ARMS.index(r["arm"]), r["seed"]))


def usable(r: dict, metric: str) -> bool:
    return not r["diverged"] and math.isfinite(r[metric])


def read_attribution(runs: list[dict], runs_dir: str | None, metrics=ATTR_METRICS) -> tuple[dict, dict]:
    """(arm, metric, op, pass) -> list of per-run means (one per run with telemetry), and the same per
    (arm, metric, op, pass, layer, tensor), for the telemetry metrics named in `metrics`."""
    out: dict = {}
    detail: dict = {}
    if not runs_dir:
        return out, detail
    for r in runs:
        p = os.path.join(runs_dir, r["run"], "telemetry.csv")
        if not os.path.exists(p):
            continue
        acc: dict = {}
        acc_d: dict = {}
        with open(p, newline="") as f:
            for t in csv.DictReader(f):
                if t["metric"] not in metrics:
                    continue
                v = _float(t["value"])
                if math.isfinite(v):
                    acc.setdefault((t["metric"], t["op"], t["pass"]), []).append(v)
                    acc_d.setdefault((t["metric"], t["op"], t["pass"], int(t["layer"]), t["tensor"]), []).append(v)
        for (m, op, ps), vals in acc.items():
            out.setdefault((r["arm"], m, op, ps), []).append(float(np.mean(vals)))
        for k, vals in acc_d.items():
            detail.setdefault((r["arm"], *k), []).append(float(np.mean(vals)))
    return out, detail


# ---------------------------------------------------------------- analysis
def analyse(runs: list[dict], attribution: dict, detail: dict | None = None) -> dict:
    by = {(r["arm"], r["seed"]): r for r in runs}
    tables: dict = {k: [] for k in ("runs", "arms", "paired", "contrasts", "ordering", "claims", "attribution",
                                    "attribution_top", "attribution_contrasts", "attribution_detail")}
    for r in runs:
        tables["runs"].append({k: r[k] for k in ("arm", "seed", *METRICS, "diverged", "policy", "git_revision",
                                                 "weights_sha256", "run")})
    margins = {}
    for m in METRICS:
        ref = [r[m] for r in runs if r["arm"] == REFERENCE and usable(r, m)]
        ref_mean = float(np.mean(ref)) if ref else float("nan")
        margins[m] = (MARGIN_PCT / 100 * ref_mean, LENIENT_PCT / 100 * ref_mean)
        for a in ARMS:
            rs = [r for r in runs if r["arm"] == a]
            if not rs:
                continue
            s = mean_interval([r[m] for r in rs if usable(r, m)])
            tables["arms"].append({"arm": a, "metric": m, **s, "diverged": sum(not usable(r, m) for r in rs),
                                   "seeds": " ".join(str(r["seed"]) for r in rs)})
        ranked = sorted((row for row in tables["arms"] if row["metric"] == m and row["n"] > 0),
                        key=lambda row: row["mean"])
        for i, row in enumerate(ranked):
            tables["ordering"].append({"metric": m, "rank": i + 1, "arm": row["arm"], "mean": row["mean"],
                                       "n": row["n"], "diverged": row["diverged"]})
    cstat = {}
    for a, ref in CONTRASTS:
        for m in METRICS:
            seeds = sorted(s for (arm, s) in by if arm == a and (ref, s) in by)
            diffs, diverged_pairs = [], 0
            for s in seeds:
                x, y = by[(a, s)], by[(ref, s)]
                ok = usable(x, m) and usable(y, m)
                d = x[m] - y[m] if ok else float("nan")
                if not usable(x, m) and usable(y, m):
                    diverged_pairs += 1
                tables["paired"].append({"arm": a, "ref": ref, "metric": m, "seed": s, "arm_value": x[m],
                                         "ref_value": y[m], "diff": d})
                if ok:
                    diffs.append(d)
            st = mean_interval(diffs)
            x_margin, x_lenient = margins[m]
            if diverged_pairs:
                direction = "worse (diverged)"
            elif st["n"] < 2:
                direction = "n<2"
            elif st["ci_low"] > 0:
                direction = "worse"
            elif st["ci_high"] < 0:
                direction = "better"
            else:
                direction = "none"
            inside = st["n"] >= 2 and not diverged_pairs and -x_margin <= st["ci_low"] and st["ci_high"] <= x_margin
            inside_l = st["n"] >= 2 and not diverged_pairs and -x_lenient <= st["ci_low"] and st["ci_high"] <= x_lenient
            row = {"arm": a, "ref": ref, "metric": m, **st, "diverged_pairs": diverged_pairs,
                   "margin": x_margin, "equivalent": inside, "margin_lenient": x_lenient,
                   "equivalent_lenient": inside_l, "direction": direction}
            tables["contrasts"].append(row)
            cstat[(a, ref, m)] = row
    # The claims, judged on the primary metric.
    m = PRIMARY
    c = cstat.get(("mxfp8", "fp32", m))
    if c is not None:
        outside = c["n"] >= 2 and (c["ci_low"] > c["margin"] or c["ci_high"] < -c["margin"])
        verdict = ("holds" if c["equivalent"] else "fails" if c["diverged_pairs"] or outside else "undetermined")
        tables["claims"].append({"claim": "C1", "statement": "MXFP8 ~ fp32", "arm": "mxfp8", "ref": "fp32",
                                 "n": c["n"], "mean": c["mean"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                                 "margin": c["margin"], "verdict": verdict,
                                 "rule": "holds if the 95 % interval of mxfp8 - fp32 lies inside [-X, X]; fails if "
                                         "it lies wholly outside it or mxfp8 diverged; else undetermined"})
    for a, what in SWITCHES.items():
        c = cstat.get((a, "nvfp4", m))
        if c is None:
            continue
        if c["direction"].startswith("worse"):
            verdict = "holds (needed)"
        elif c["equivalent"]:
            verdict = "fails (not needed at this scale)"
        elif c["direction"] == "better":
            verdict = "fails (removing it helps)"
        else:
            verdict = "undetermined"
        tables["claims"].append({"claim": "C2", "statement": f"NVFP4 needs its {what}", "arm": a, "ref": "nvfp4",
                                 "n": c["n"], "mean": c["mean"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                                 "margin": c["margin"], "verdict": verdict,
                                 "rule": "holds if the 95 % interval of (switch removed) - nvfp4 lies above 0; fails "
                                         "if it lies inside [-X, X] or below 0; else undetermined"})
    others = [a for a in ARMS if a != "mxfp4" and ("mxfp4", a, m) in cstat]
    if others:
        worse_than_all = all(cstat[("mxfp4", a, m)]["direction"].startswith("worse") for a in others)
        beaten = [a for a in others if cstat[("mxfp4", a, m)]["direction"] == "better"]
        verdict = ("holds" if worse_than_all else f"fails ({' '.join(beaten)} worse than mxfp4)" if beaten
                   else "undetermined")
        ns = [cstat[("mxfp4", a, m)]["n"] for a in others]
        tables["claims"].append({"claim": "C3", "statement": "plain MXFP4 is worst", "arm": "mxfp4",
                                 "ref": " ".join(others), "n": min(ns), "mean": float("nan"),
                                 "ci_low": float("nan"), "ci_high": float("nan"),
                                 "margin": margins[m][0], "verdict": verdict,
                                 "rule": "holds if the 95 % interval of mxfp4 - A lies above 0 for every other arm A; "
                                         "fails if it lies below 0 for some A; else undetermined"})
    # Attribution.
    means = {k: float(np.mean(v)) for k, v in attribution.items()}
    for a in ARMS:
        for am in ATTR_METRICS:
            rows = sorted(((op, ps, v, len(attribution[(a2, m2, op, ps)])) for (a2, m2, op, ps), v in means.items()
                           if a2 == a and m2 == am), key=lambda t: -t[2])
            for i, (op, ps, v, nr) in enumerate(rows):
                row = {"arm": a, "metric": am, "op": op, "pass": ps, "runs": nr, "mean": v, "rank": i + 1}
                tables["attribution"].append(row)
                if i == 0:
                    tables["attribution_top"].append(row)
    for a, ref in CONTRASTS:
        for am in ATTR_METRICS:
            keys = {(op, ps) for (a2, m2, op, ps) in means if a2 == a and m2 == am}
            keys &= {(op, ps) for (a2, m2, op, ps) in means if a2 == ref and m2 == am}
            inc = sorted(((op, ps, means[(a, am, op, ps)], means[(ref, am, op, ps)]) for op, ps in keys),
                         key=lambda t: -(t[2] - t[3]))
            for i, (op, ps, va, vr) in enumerate(inc[:3]):
                tables["attribution_contrasts"].append({"arm": a, "ref": ref, "metric": am, "rank": i + 1, "op": op,
                                                        "pass": ps, "arm_value": va, "ref_value": vr,
                                                        "increase": va - vr})
    for k in sorted(detail or {}, key=lambda k: (ARMS.index(k[0]), *k[1:])):
        a, am, op, ps, layer, tensor = k
        tables["attribution_detail"].append({"arm": a, "metric": am, "op": op, "pass": ps, "layer": layer,
                                             "tensor": tensor, "runs": len(detail[k]),
                                             "mean": float(np.mean(detail[k]))})
    return tables


def signed_table(signed: dict, attribution: dict) -> list[dict]:
    """attribution_signed.csv: per arm, signed metric and (op, pass), the mean signed error (per run over steps,
    layers and tensors, then over runs), the normwise mean of the same runs' attribution, and their ratio."""
    rows = []
    for a in ARMS:
        for sm, nm in SIGNED_METRICS.items():
            keys = sorted(((op, ps) for (a2, m2, op, ps) in signed if a2 == a and m2 == sm),
                          key=lambda k: -abs(float(np.mean(signed[(a, sm, *k)]))))
            for i, (op, ps) in enumerate(keys):
                v = float(np.mean(signed[(a, sm, op, ps)]))
                n = attribution.get((a, nm, op, ps))
                nv = float(np.mean(n)) if n else float("nan")
                rows.append({"arm": a, "metric": sm, "op": op, "pass": ps, "runs": len(signed[(a, sm, op, ps)]),
                             "mean": v, "norm_mean": nv, "along": v / nv if nv > 0 else float("nan"),
                             "rank": i + 1})
    return rows


def _fmt(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def write_tables(tables: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for name, rows in tables.items():
        path = os.path.join(out, name + ".csv")
        cols = list(rows[0].keys()) if rows else ["empty"]
        tmp = f"{path}.roundoff-tmp.{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(cols)
            for r in rows:
                w.writerow([_fmt(r[c]) for c in cols])
        os.replace(tmp, path)


def _num(v, digits=4) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:+.{digits}f}" if digits < 0 else f"{v:.{digits}f}"
    return str(v)


def markdown(tables: dict) -> str:
    """The tables a reader needs first, as Markdown (analysis/summary.md; the CSVs hold everything)."""
    m = PRIMARY
    out = [f"Primary metric {m}; 95 % t-intervals over seeds, paired by seed. Written by analyze_formats.py.", ""]
    out += ["| arm | n | diverged | mean | 95 % interval |", "|---|---:|---:|---:|---|"]
    for r in tables["arms"]:
        if r["metric"] == m:
            ci = "—" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
            out.append(f"| {r['arm']} | {r['n']} | {r['diverged']} | {_num(r['mean'])} | {ci} |")
    out += ["", "| arm − ref | n | mean difference | 95 % interval | inside ±X (X) | direction |",
            "|---|---:|---:|---|---|---|"]
    for r in tables["contrasts"]:
        if r["metric"] == m and r["n"] + r["diverged_pairs"] > 0:
            ci = "—" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
            out.append(f"| {r['arm']} − {r['ref']} | {r['n']} | {r['mean']:+.4f} | {ci} | "
                       f"{('yes' if r['equivalent'] else 'no') if r['n'] >= 2 else '—'} ({r['margin']:.4f}) | {r['direction']} |")
    out += ["", "| claim | n | verdict |", "|---|---:|---|"]
    for c in tables["claims"]:
        out.append(f"| {c['claim']} {c['statement']} | {c['n']} | {c['verdict']} |")
    out += ["", "| arm | largest local error (op, pass) | mean shadow_norm_rel |", "|---|---|---:|"]
    for r in tables["attribution_top"]:
        if r["metric"] == "shadow_norm_rel":
            out.append(f"| {r['arm']} | {r['op']} {r['pass']} | {r['mean']:.3g} |")
    out += ["", "| arm − ref | op, pass whose local error grew most | arm | ref | increase |",
            "|---|---|---:|---:|---:|"]
    for r in tables["attribution_contrasts"]:
        if r["metric"] == "shadow_norm_rel" and r["rank"] == 1:
            out.append(f"| {r['arm']} − {r['ref']} | {r['op']} {r['pass']} | {r['arm_value']:.3g} | "
                       f"{r['ref_value']:.3g} | {r['increase']:+.3g} |")
    if tables.get("attribution_signed"):
        out += ["", "Descriptive (not registered): the shadow's signed local error of each arm's three largest "
                "(op, pass), and its share along the exact output (−1: shrinkage toward zero).", "",
                "| arm | op, pass | mean shadow_signed_rel | mean shadow_norm_rel | along |", "|---|---|---:|---:|---:|"]
        for r in tables["attribution_signed"]:
            if r["metric"] == "shadow_signed_rel" and r["rank"] <= 3:
                out.append(f"| {r['arm']} | {r['op']} {r['pass']} | {r['mean']:+.3g} | {r['norm_mean']:.3g} | "
                           f"{_num(r['along'], 3)} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", action="append", required=True, help="a sweep table runs.csv (repeatable)")
    ap.add_argument("--runs-dir", help="directory of the runs' telemetry (RUNS_DIR/<run>/telemetry.csv)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    for p in a.runs:
        if not os.path.isfile(p):
            print(f"analyze_formats: --runs {p}: no such file", file=sys.stderr)
            return 2
    runs = read_runs(a.runs)
    attribution, detail = read_attribution(runs, a.runs_dir)
    tables = analyse(runs, attribution, detail)
    signed = signed_table(read_attribution(runs, a.runs_dir, tuple(SIGNED_METRICS))[0], attribution)
    if signed:  # only where the telemetry has it: the T1 tables stay as they were
        tables["attribution_signed"] = signed
    write_tables(tables, a.out)
    tmp = os.path.join(a.out, f"summary.md.roundoff-tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(markdown(tables))
    os.replace(tmp, os.path.join(a.out, "summary.md"))
    for c in tables["claims"]:
        print(f"{c['claim']} {c['statement']}: {c['verdict']} (n {c['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
