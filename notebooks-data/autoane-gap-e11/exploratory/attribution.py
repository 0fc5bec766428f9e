"""Exploratory (not preregistered): per-op rounding error of the ANE-full arms at E11, on initial and final weights.

Preregistration §4 item 4 asks for per-op attribution only for arms with a significant gap, and no arm has one in
the primary family so far; this is a description of where the emulated ANE's rounding error enters, not a test.
Each attribution/<arm>-s<seed>-u<update>/ holds the telemetry.csv of one MPFR-shadowed forward+backward on the
fixed probe batch (the first validation window), and either

- summary.json, for the initial weights (update 0; the weights every arm of that seed starts from):

      roundoff train --config E11 --recipe autoane --precision P --seed S --accum 1 --steps 1 --shadow-every 1 \
          --shadow-units 1 --telemetry-every 1 --eval-tokens 256 --threads 1 --out DIR

- or shadow.json, for a finished run's final weights (update 130), under the run's own policy and defects:

      roundoff train --config E11 --recipe autoane --precision P [--defect D] --seed S --shadow-units 1 \
          --eval-tokens 256 --threads 1 --shadow-checkpoint RUN/checkpoint.bin --out DIR

For each op call the telemetry has its local error (shadow_*: the op against MPFR on the same rounded inputs, in
ulps of its output format, and normwise) and, for forward activations and weight gradients, its global error
(global_*: against a full fp64 run of the model).

Writes attribution.csv: per arm, weights (update), op, pass and tensor, the number of calls (layers), the largest
median and p95 local ulp error over the calls, the largest local max ulp, the mean local normwise error, and the
global normwise error at the first and the last layer (or the single call). Usage: /usr/bin/python3
attribution.py (from this directory).
"""
import csv
import json
import math
import os

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "attribution")
out_rows = []
for name in sorted(os.listdir(root)):
    d = os.path.join(root, name)
    if os.path.exists(os.path.join(d, "shadow.json")):
        with open(os.path.join(d, "shadow.json")) as f:
            s = json.load(f)
        # the run's own model, policy and defects
        assert s["checkpoint_config"]["name"] == "E11" and s["seed"] == s["checkpoint_seed"], name
        assert s["policy"] == s["checkpoint_policy"] and s["defects"] == s["checkpoint_config"]["defects"], name
        step = s["step"]
    else:
        with open(os.path.join(d, "summary.json")) as f:
            s = json.load(f)
        assert s["complete"] and s["micro_steps_completed"] == 1 and s["config"]["name"] == "E11", name
        step = 0
    assert name.endswith(f"-s{s['seed']}-u{step}"), name
    calls = {}  # (op, pass, tensor) -> {layer: {metric: value}}
    with open(os.path.join(d, "telemetry.csv")) as f:
        for r in csv.DictReader(f):
            m = r["metric"]
            if not (m.startswith("shadow_") or m.startswith("global_")) or int(r["step"]) != step:
                continue
            calls.setdefault((r["op"], r["pass"], r["tensor"]), {}).setdefault(int(r["layer"]), {})[m] = float(r["value"])
    # Local rows are keyed by the op's output tensor; a global row may name the same op's output without its
    # sub-name (rmsnorm "ln1" against the local "ln1.y"): match by op, pass and the tensor's first part.
    glob = {}
    for (op, ps, tensor), by_layer in calls.items():
        if any("global_norm_rel" in v for v in by_layer.values()):
            glob[(op, ps, tensor)] = by_layer
    for (op, ps, tensor), by_layer in sorted(calls.items()):
        local = {k: v for k, v in by_layer.items() if "shadow_norm_rel" in v}
        if not local:
            continue
        g = glob.get((op, ps, tensor)) or glob.get((op, ps, tensor.split(".")[0]))
        layers = sorted(local)
        gl = sorted(g) if g else []
        finite = [local[k]["shadow_norm_rel"] for k in layers if math.isfinite(local[k]["shadow_norm_rel"])]
        out_rows.append({
            "arm": name.rsplit("-s", 1)[0], "policy": s["policy"], "seed": s["seed"], "update": step, "op": op,
            "pass": ps,
            "tensor": tensor, "calls": len(layers),
            "local_median_ulp_max": max(local[k]["shadow_median_ulp"] for k in layers),
            "local_p95_ulp_max": max(local[k]["shadow_p95_ulp"] for k in layers),
            "local_max_ulp": max(local[k]["shadow_max_ulp"] for k in layers),
            "local_norm_rel_mean": sum(finite) / len(finite) if finite else math.nan,
            "global_norm_rel_first": g[gl[0]]["global_norm_rel"] if g else math.nan,
            "global_norm_rel_last": g[gl[-1]]["global_norm_rel"] if g else math.nan,
        })
with open(os.path.join(here, "attribution.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(out_rows[0]), lineterminator="\n")
    w.writeheader()
    for r in out_rows:
        w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in r.items()})
print(f"attribution.py: {len(out_rows)} rows from {len(os.listdir(root))} runs -> attribution.csv")
