"""The registered analysis of the fp8-recipes study (issue 44 item 4; docs/studies/fp8-recipes.md).

Reads one config's sweep table (runs.csv: arm, seed, val_loss_fp32, val_loss_own, diverged, policy, ...) and each
run's telemetry.csv (the MPFR shadow's rows and the fp8 casts' share rows), and writes tidy CSV to --out:

- runs.csv, arms.csv, paired.csv, contrasts.csv, ordering.csv  as studies/formats/analyze_formats.py writes them
                    (the margin X is 0.5 % of the BF16 arm's mean loss; 2 % beside it);
- claims.csv        the registered claims: R(A) "A matches bf16" for each recipe and format, D "delayed scaling
                    costs nothing against current scaling", P "DeepSeek's promotion buys loss at this model's K";
                    amendment 2's P' (the same with DS-NOPROMOTE-R, the unpromoted GEMM on operands rescaled by
                    powers of two into E4M3's range) and R(DS-NOPROMOTE-R); each confirmed / refuted /
                    undetermined, with the rule and the reason;
- attribution.csv, attribution_top.csv, attribution_contrasts.csv, attribution_detail.csv  as formats-training's;
- attribution_largest_gap.csv  the arm with the largest mean gap to BF16 among the seven registered arms (the
                    amendment's arm is not a candidate: registered before it) and the three (op, pass) whose mean
                    local error grew most from BF16 to it (descriptive);
- cast_shares.csv   per arm, share metric (fp8_saturated_share, fp8_underflow_share) and tensor (layer, op, module.role):
                    the mean over the run's telemetry steps, then over seeds; the largest value at any step; the
                    mean at the first telemetry step (step 0: under delayed scaling every scale is still 1);
- cast_shares_role.csv  the same per arm, metric and role (x, w, dy), over every tensor of the role;
- summary.md        the primary metric's arms, contrasts and claims, the attribution and the shares as Markdown.

Statistics are formats-training's (the functions are imported from studies/formats/analyze_formats.py): paired by
seed, 95 % t-intervals, a diverged run left out of means and counted worse than its seed's reference. No multiple-
comparison correction (registered). Standard library + numpy only:
/usr/bin/python3 studies/fp8/analyze_fp8.py --runs notebooks-data/fp8-recipes-t1/runs.csv \
    --runs-dir notebooks-data/fp8-recipes-t1/runs --out notebooks-data/fp8-recipes-t1/analysis
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "analyze_formats", os.path.join(_HERE, os.pardir, "formats", "analyze_formats.py"))
F = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(F)

REGISTERED_ARMS = ["BF16", "TE-DELAYED", "TE-CURRENT", "DS", "DS-NOPROMOTE", "MXFP8", "NVFP4"]
# Amendment 2 (docs/studies/fp8-recipes.md): deepseek-fp8-nopromote-rescaled, the faithful "no promotion" arm.
AMENDMENT_ARMS = ["DS-NOPROMOTE-R"]
ARMS = REGISTERED_ARMS + AMENDMENT_ARMS
REFERENCE = "BF16"
RECIPES = [a for a in ARMS if a != REFERENCE]
# Registered contrasts: every arm against BF16, delayed against current scaling, DeepSeek without promotion against
# with (P; amendment 2's P' with the rescaled arm); descriptive beside them: the two recipes against each other, the
# block formats against DS, and the two unpromoted arms against each other (what the flush of amendment 1 costs).
CONTRASTS = ([(a, REFERENCE) for a in RECIPES]
             + [("TE-DELAYED", "TE-CURRENT"), ("DS-NOPROMOTE", "DS"), ("DS", "TE-CURRENT"), ("MXFP8", "DS"),
                ("NVFP4", "DS"), ("DS-NOPROMOTE-R", "DS"), ("DS-NOPROMOTE", "DS-NOPROMOTE-R")])
METRICS = F.METRICS
PRIMARY = F.PRIMARY
MARGIN_PCT = 0.5   # X = 0.5 % of the BF16 arm's mean loss (registered; docs/studies/fp8-recipes.md)
LENIENT_PCT = 2.0  # reported beside it
ATTR_METRICS = F.ATTR_METRICS
SHARE_METRICS = ["fp8_saturated_share", "fp8_underflow_share"]
ROLES = ["x", "w", "dy"]


def read_runs(paths) -> list[dict]:
    runs, seen = [], set()
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                arm, seed = r["arm"], int(r["seed"])
                if arm not in ARMS:
                    sys.exit(f"analyze_fp8: {p}: unknown arm '{arm}' (valid: {' '.join(ARMS)})")
                if (arm, seed) in seen:
                    sys.exit(f"analyze_fp8: arm {arm} seed {seed} appears twice (give one config's tables)")
                seen.add((arm, seed))
                row = {"arm": arm, "seed": seed, "run": r["run"], "diverged": F._truthy(r.get("diverged", "false")),
                       "policy": r.get("policy", ""), "git_revision": r.get("git_revision", ""),
                       "weights_sha256": r.get("weights_sha256", ""), "config": r.get("config.name", "")}
                for m in METRICS:
                    row[m] = F._float(r.get(m))
                runs.append(row)
    configs = {r["config"] for r in runs}
    if len(configs) > 1:
        sys.exit(f"analyze_fp8: the tables hold more than one config ({' '.join(sorted(configs))}); give one")
    return sorted(runs, key=lambda r: (ARMS.index(r["arm"]), r["seed"]))


def read_shares(runs: list[dict], runs_dir: str | None) -> dict:
    """(arm, metric, layer, op, tensor) -> list over runs of (mean over steps, max over steps, value at step 0)."""
    out: dict = {}
    if not runs_dir:
        return out
    for r in runs:
        p = os.path.join(runs_dir, r["run"], "telemetry.csv")
        if not os.path.exists(p):
            continue
        acc: dict = {}
        with open(p, newline="") as f:
            for t in csv.DictReader(f):
                if t["metric"] in SHARE_METRICS:
                    v = F._float(t["value"])
                    if math.isfinite(v):
                        acc.setdefault((t["metric"], int(t["layer"]), t["op"], t["tensor"]), []).append(
                            (int(t["step"]), v))
        for k, sv in acc.items():
            vals = [v for _, v in sv]
            first = [v for s, v in sv if s == 0]
            out.setdefault((r["arm"], *k), []).append(
                (float(np.mean(vals)), float(np.max(vals)), first[0] if first else float("nan")))
    return out


def _verdict_equivalence(c: dict) -> tuple[str, str]:
    """confirmed: interval inside [-X, X]; refuted: wholly outside it or the arm diverged; else undetermined."""
    if c["diverged_pairs"]:
        return "refuted", f"{c['diverged_pairs']} seed(s) diverged where the reference did not"
    if c["n"] < 2:
        return "undetermined", f"n = {c['n']} paired seeds: no interval"
    if c["equivalent"]:
        return "confirmed", "interval inside [-X, X]"
    if c["ci_low"] > c["margin"] or c["ci_high"] < -c["margin"]:
        return "refuted", "interval wholly outside [-X, X]"
    return "undetermined", "interval straddles a margin boundary"


def _verdict_needed(c: dict) -> tuple[str, str]:
    """confirmed: interval above 0 (or diverged); refuted: inside [-X, X] or below 0; else undetermined."""
    if c["diverged_pairs"]:
        return "confirmed", f"{c['diverged_pairs']} seed(s) diverged without it"
    if c["n"] < 2:
        return "undetermined", f"n = {c['n']} paired seeds: no interval"
    if c["ci_low"] > 0:
        return "confirmed", "interval above 0"
    if c["equivalent"]:
        return "refuted", "interval inside [-X, X]: not needed at this K"
    if c["ci_high"] < 0:
        return "refuted", "interval below 0: removing it helps"
    return "undetermined", "interval holds 0 and leaves [-X, X]"


def _contrast_rows(runs: list[dict], tables: dict) -> dict:
    """arms, ordering, paired and contrasts tables (formats-training's statistics, BF16 the margin's reference)."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    margins = {}
    for m in METRICS:
        ref = [r[m] for r in runs if r["arm"] == REFERENCE and F.usable(r, m)]
        ref_mean = float(np.mean(ref)) if ref else float("nan")
        margins[m] = (MARGIN_PCT / 100 * ref_mean, LENIENT_PCT / 100 * ref_mean)
        for a in ARMS:
            rs = [r for r in runs if r["arm"] == a]
            if not rs:
                continue
            s = F.mean_interval([r[m] for r in rs if F.usable(r, m)])
            tables["arms"].append({"arm": a, "metric": m, **s, "diverged": sum(not F.usable(r, m) for r in rs),
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
                ok = F.usable(x, m) and F.usable(y, m)
                d = x[m] - y[m] if ok else float("nan")
                if not F.usable(x, m) and F.usable(y, m):
                    diverged_pairs += 1
                tables["paired"].append({"arm": a, "ref": ref, "metric": m, "seed": s, "arm_value": x[m],
                                         "ref_value": y[m], "diff": d})
                if ok:
                    diffs.append(d)
            st = F.mean_interval(diffs)
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
            ok_n = st["n"] >= 2 and not diverged_pairs
            row = {"arm": a, "ref": ref, "metric": m, **st, "diverged_pairs": diverged_pairs,
                   "margin": x_margin, "equivalent": ok_n and -x_margin <= st["ci_low"] and st["ci_high"] <= x_margin,
                   "margin_lenient": x_lenient,
                   "equivalent_lenient": ok_n and -x_lenient <= st["ci_low"] and st["ci_high"] <= x_lenient,
                   "direction": direction}
            tables["contrasts"].append(row)
            cstat[(a, ref, m)] = row
    return cstat


def analyse(runs: list[dict], attribution: dict, detail: dict | None = None, shares: dict | None = None) -> dict:
    tables: dict = {k: [] for k in ("runs", "arms", "paired", "contrasts", "ordering", "claims", "attribution",
                                    "attribution_top", "attribution_contrasts", "attribution_detail",
                                    "attribution_largest_gap", "cast_shares", "cast_shares_role")}
    for r in runs:
        tables["runs"].append({k: r[k] for k in ("arm", "seed", *METRICS, "diverged", "policy", "git_revision",
                                                 "weights_sha256", "run")})
    cstat = _contrast_rows(runs, tables)
    m = PRIMARY

    def claim(cid, statement, a, ref, rule, judge):
        c = cstat.get((a, ref, m))
        if c is None:
            return
        verdict, reason = judge(c)
        tables["claims"].append({"claim": cid, "statement": statement, "arm": a, "ref": ref, "n": c["n"],
                                 "mean": c["mean"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                                 "margin": c["margin"], "direction": c["direction"], "verdict": verdict,
                                 "reason": reason, "rule": rule})

    for a in RECIPES:
        claim(f"R({a})", f"{a} matches bf16", a, REFERENCE,
              f"confirmed if the 95 % interval of {a} - BF16 lies inside [-X, X]; refuted if it lies wholly outside "
              f"it or {a} diverged where BF16 did not; else undetermined", _verdict_equivalence)
    claim("D", "delayed scaling costs nothing against current scaling", "TE-DELAYED", "TE-CURRENT",
          "confirmed if the 95 % interval of TE-DELAYED - TE-CURRENT lies inside [-X, X]; refuted if it lies wholly "
          "outside it or TE-DELAYED diverged where TE-CURRENT did not; else undetermined", _verdict_equivalence)
    claim("P", "DeepSeek's promotion buys loss at this model's K", "DS-NOPROMOTE", "DS",
          "confirmed if the 95 % interval of DS-NOPROMOTE - DS lies above 0 or DS-NOPROMOTE diverged where DS did "
          "not; refuted if it lies inside [-X, X] or below 0; else undetermined", _verdict_needed)
    claim("P'", "DeepSeek's promotion buys loss at this model's K (operands rescaled into range, amendment 2)",
          "DS-NOPROMOTE-R", "DS",
          "confirmed if the 95 % interval of DS-NOPROMOTE-R - DS lies above 0 or DS-NOPROMOTE-R diverged where DS "
          "did not; refuted if it lies inside [-X, X] or below 0; else undetermined", _verdict_needed)

    # Attribution (formats-training's tables, on this study's arms and contrasts).
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

    def grew(a, ref, am):
        keys = {(op, ps) for (a2, m2, op, ps) in means if a2 == a and m2 == am}
        keys &= {(op, ps) for (a2, m2, op, ps) in means if a2 == ref and m2 == am}
        inc = sorted(((op, ps, means[(a, am, op, ps)], means[(ref, am, op, ps)]) for op, ps in keys),
                     key=lambda t: (-(t[2] - t[3]), t[0], t[1]))
        return inc[:3]

    for a, ref in CONTRASTS:
        for am in ATTR_METRICS:
            for i, (op, ps, va, vr) in enumerate(grew(a, ref, am)):
                tables["attribution_contrasts"].append({"arm": a, "ref": ref, "metric": am, "rank": i + 1, "op": op,
                                                        "pass": ps, "arm_value": va, "ref_value": vr,
                                                        "increase": va - vr})
    gaps = [c for c in tables["contrasts"]
            if c["ref"] == REFERENCE and c["metric"] == m and c["n"] > 0 and c["arm"] in REGISTERED_ARMS]
    if gaps:
        big = max(gaps, key=lambda c: c["mean"])
        for am in ATTR_METRICS:
            for i, (op, ps, va, vr) in enumerate(grew(big["arm"], REFERENCE, am)):
                tables["attribution_largest_gap"].append(
                    {"arm": big["arm"], "gap_mean": big["mean"], "gap_n": big["n"], "metric": am, "rank": i + 1,
                     "op": op, "pass": ps, "arm_value": va, "ref_value": vr, "increase": va - vr})
    for k in sorted(detail or {}, key=lambda k: (ARMS.index(k[0]), *k[1:])):
        a, am, op, ps, layer, tensor = k
        tables["attribution_detail"].append({"arm": a, "metric": am, "op": op, "pass": ps, "layer": layer,
                                             "tensor": tensor, "runs": len(detail[k]),
                                             "mean": float(np.mean(detail[k]))})

    # The fp8 casts' saturation and underflow shares per tensor and per role.
    shares = shares or {}
    by_role: dict = {}
    for k in sorted(shares, key=lambda k: (ARMS.index(k[0]), *k[1:])):
        a, sm, layer, op, tensor = k
        v = shares[k]
        role = tensor.rsplit(".", 1)[-1]
        mean = float(np.mean([x[0] for x in v]))
        mx = float(np.max([x[1] for x in v]))
        first = [x[2] for x in v if math.isfinite(x[2])]
        tables["cast_shares"].append({"arm": a, "metric": sm, "layer": layer, "op": op, "tensor": tensor,
                                      "role": role, "runs": len(v), "mean": mean, "max": mx,
                                      "step0_mean": float(np.mean(first)) if first else float("nan")})
        d = by_role.setdefault((a, sm, role), {"mean": [], "max": [], "first": [], "runs": set()})
        d["mean"].append(mean)
        d["max"].append(mx)
        d["first"] += first
        d["runs"].add(len(v))
    for (a, sm, role) in sorted(by_role, key=lambda k: (ARMS.index(k[0]), k[1], ROLES.index(k[2])
                                                         if k[2] in ROLES else 99, k[2])):
        d = by_role[(a, sm, role)]
        tables["cast_shares_role"].append({"arm": a, "metric": sm, "role": role, "tensors": len(d["mean"]),
                                           "runs": max(d["runs"]), "mean": float(np.mean(d["mean"])),
                                           "max": float(np.max(d["max"])),
                                           "step0_mean": float(np.mean(d["first"])) if d["first"] else float("nan")})
    return tables


def markdown(tables: dict) -> str:
    m = PRIMARY
    out = [f"Primary metric {m}; 95 % t-intervals over seeds, paired by seed; X = 0.5 % of BF16's mean. "
           "Written by analyze_fp8.py.", ""]
    out += ["| arm | n | diverged | mean | 95 % interval |", "|---|---:|---:|---:|---|"]
    for r in tables["arms"]:
        if r["metric"] == m:
            ci = "—" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
            out.append(f"| {r['arm']} | {r['n']} | {r['diverged']} | {F._num(r['mean'])} | {ci} |")
    out += ["", "| arm − ref | n | mean difference | 95 % interval | inside ±X (X) | direction |",
            "|---|---:|---:|---|---|---|"]
    for r in tables["contrasts"]:
        if r["metric"] == m and r["n"] + r["diverged_pairs"] > 0:
            ci = "—" if math.isnan(r["ci_low"]) else f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
            mean = "—" if math.isnan(r["mean"]) else f"{r['mean']:+.4f}"
            out.append(f"| {r['arm']} − {r['ref']} | {r['n']} | {mean} | {ci} | "
                       f"{('yes' if r['equivalent'] else 'no') if r['n'] >= 2 else '—'} ({r['margin']:.4f}) | "
                       f"{r['direction']} |")
    out += ["", "| claim | n | verdict | reason |", "|---|---:|---|---|"]
    for c in tables["claims"]:
        out.append(f"| {c['claim']} {c['statement']} | {c['n']} | {c['verdict']} | {c['reason']} |")
    out += ["", "| arm | largest local error (op, pass) | mean shadow_norm_rel |", "|---|---|---:|"]
    for r in tables["attribution_top"]:
        if r["metric"] == "shadow_norm_rel":
            out.append(f"| {r['arm']} | {r['op']} {r['pass']} | {r['mean']:.3g} |")
    out += ["", "| largest gap: arm (mean gap) | op, pass | arm | BF16 | increase |", "|---|---|---:|---:|---:|"]
    for r in tables["attribution_largest_gap"]:
        if r["metric"] == "shadow_norm_rel":
            out.append(f"| {r['arm']} ({r['gap_mean']:+.4f}) | {r['op']} {r['pass']} | {r['arm_value']:.3g} | "
                       f"{r['ref_value']:.3g} | {r['increase']:+.3g} |")
    if tables["cast_shares_role"]:
        out += ["", "| arm | share | role | tensors | mean | max | at step 0 |", "|---|---|---|---:|---:|---:|---:|"]
        for r in tables["cast_shares_role"]:
            out.append(f"| {r['arm']} | {r['metric']} | {r['role']} | {r['tensors']} | {r['mean']:.3g} | "
                       f"{r['max']:.3g} | {r['step0_mean']:.3g} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", action="append", required=True, help="a sweep table runs.csv (repeatable)")
    ap.add_argument("--runs-dir", help="directory of the runs' telemetry (RUNS_DIR/<run>/telemetry.csv)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    for p in a.runs:
        if not os.path.isfile(p):
            print(f"analyze_fp8: --runs {p}: no such file", file=sys.stderr)
            return 2
    runs = read_runs(a.runs)
    tables = analyse(runs, *F.read_attribution(runs, a.runs_dir), shares=read_shares(runs, a.runs_dir))
    F.write_tables(tables, a.out)
    tmp = os.path.join(a.out, f"summary.md.roundoff-tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(markdown(tables))
    os.replace(tmp, os.path.join(a.out, "summary.md"))
    for c in tables["claims"]:
        print(f"{c['claim']} {c['statement']}: {c['verdict']} (n {c['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
