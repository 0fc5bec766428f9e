#!/usr/bin/env python3
"""The promotion inside the trained model's own GEMMs (docs/studies/fp8-recipes.md, "K of the model's GEMMs",
item 2): tabulates the shadow's error against the exact product of each GEMM's quantized operands
(`shadow_acc_*`, docs/trainer.md) from `roundoff train --shadow-checkpoint` runs of one checkpoint under several
presets and micro-batch sizes.

    k4096_table.py --run LABEL:BATCH:DIR ... --config T1 --out DIR

Each DIR holds a --shadow-checkpoint output (telemetry.csv, shadow.json). Writes
  gemms.csv   one row per shadowed linear-layer GEMM call: label, preset, batch, tokens, layer, pass, module, tensor,
              K, units, acc_norm_rel, acc_signed_rel, acc_max_ulp, acc_unit_median, acc_unit_p95, acc_unit_max,
              shadow_norm_rel (the error against the unquantized operands' product, for comparison)
  table.md    per (batch, pass, module, K): the layers' median acc_norm_rel, median of the per-unit medians, and the
              largest per-unit p95 and max over the layers, one column group per label
Only stdlib; descriptive, no test of anything.
"""
import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# The backward-data calls write the output gradient of their input, several modules into one tensor (added into);
# within a layer they come in this order (studies/train/model.cpp), so the n-th row of a tensor is that module.
BWD_DATA_MODULES = {"dz": ["w2"], "dh2": ["w1", "w3"], "dy": ["o"], "dh1": ["q", "k", "v"]}
WGRAD_MODULES = {"wq": "q", "wk": "k", "wv": "v", "wo": "o", "w1": "w1", "w3": "w3", "w2": "w2"}
ACC = ["acc_norm_rel", "acc_signed_rel", "acc_max_ulp", "acc_units", "acc_unit_median", "acc_unit_p95", "acc_unit_max"]


def model_dims(config):
    """(d, hidden, kv) of the presets this study uses (studies/train/config.cpp)."""
    return {"T1": (128, 352, 128), "A512": (512, 1408, 128)}[config]


def contraction(pass_, module, tokens, dims):
    d, hidden, kv = dims
    if pass_ == "bwd-weight":
        return tokens
    if pass_ == "fwd":
        return hidden if module == "w2" else d
    # bwd-data: K = the module's out-features
    return {"q": d, "k": kv, "v": kv, "o": d, "w1": hidden, "w3": hidden, "w2": d}[module]


def read_run(label, batch, run_dir, dims, seq):
    meta = json.loads((Path(run_dir) / "shadow.json").read_text())
    rows, seen = [], defaultdict(int)
    cur = {}
    order = []
    with open(Path(run_dir) / "telemetry.csv") as f:
        for r in csv.DictReader(f):
            if r["op"] != "matmul" or not r["metric"].startswith("shadow_"):
                continue
            m = r["metric"][len("shadow_"):]
            if m == "median_ulp":  # the first metric of every record: a new GEMM call
                cur = {"layer": int(r["layer"]), "pass": r["pass"], "tensor": r["tensor"]}
                order.append(cur)
            cur[m] = float(r["value"])
    for g in order:
        if "acc_norm_rel" not in g:
            continue
        if g["pass"] == "bwd-data":
            key = (g["layer"], g["tensor"])
            module = BWD_DATA_MODULES[g["tensor"]][seen[key]]
            seen[key] += 1
        elif g["pass"] == "bwd-weight":
            module = WGRAD_MODULES[g["tensor"]]
        else:
            module = g["tensor"]
        tokens = batch * seq
        rows.append({"label": label, "preset": meta["policy"], "batch": batch, "tokens": tokens, "layer": g["layer"],
                     "pass": g["pass"], "module": module, "tensor": g["tensor"],
                     "K": contraction(g["pass"], module, tokens, dims),
                     "units": int(g["acc_units"]), **{k: g[k] for k in ACC if k != "acc_units"},
                     "shadow_norm_rel": g["norm_rel"]})
    return rows, meta


def fmt(v):
    return f"{v:.2e}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, help="LABEL:BATCH:DIR")
    ap.add_argument("--config", default="T1")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    dims = model_dims(a.config)
    rows, labels = [], []
    for spec in a.run:
        label, batch, d = spec.split(":", 2)
        r, _ = read_run(label, int(batch), d, dims, a.seq)
        if not r:
            sys.exit(f"{d}: no shadow_acc_* rows (a build before the metric, or a preset without quantized GEMMs)")
        rows += r
        if label not in labels:
            labels.append(label)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0].keys())
    with open(out / "gemms.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    groups = defaultdict(list)
    for r in rows:
        groups[(r["batch"], r["pass"], r["module"], r["K"], r["label"])].append(r)
    pass_order = {"fwd": 0, "bwd-data": 1, "bwd-weight": 2}
    mod_order = {m: i for i, m in enumerate(["q", "k", "v", "o", "w1", "w3", "w2"])}
    keys = sorted({k[:4] for k in groups}, key=lambda k: (k[0], pass_order[k[1]], mod_order[k[2]]))
    head = "| batch (tokens) | pass | module | K | layers × units |"
    sep = "|---|---|---|---:|---:|"
    for lab in labels:
        head += f" {lab}: normwise | {lab}: unit median | {lab}: unit p95 | {lab}: unit max |"
        sep += "---:|---:|---:|---:|"
    lines = [head, sep]
    for k in keys:
        first = next(groups[k + (lab,)] for lab in labels if groups.get(k + (lab,)))
        line = f"| {k[0]} ({k[0] * a.seq}) | {k[1]} | {k[2]} | {k[3]} | {len(first)} × {first[0]['units']} |"
        for lab in labels:
            g = groups.get(k + (lab,), [])
            if not g:
                line += " – | – | – | – |"
                continue
            line += (f" {fmt(statistics.median(x['acc_norm_rel'] for x in g))} |"
                     f" {fmt(statistics.median(x['acc_unit_median'] for x in g))} |"
                     f" {fmt(max(x['acc_unit_p95'] for x in g))} | {fmt(max(x['acc_unit_max'] for x in g))} |")
        lines.append(line)
    (out / "table.md").write_text(
        "normwise: median over the layers of each GEMM's shadow_acc_norm_rel; unit median: median over the layers "
        "of shadow_acc_unit_median; unit p95 / max: the largest over the layers of shadow_acc_unit_p95 / "
        "shadow_acc_unit_max (per-unit normwise errors, a unit an output row).\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
