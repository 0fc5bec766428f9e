"""Exploratory (not preregistered): GUIDE-D's cross-mode gap split into its head-map and precision parts.

For each seed, three evaluations of the same final GUIDE-D weights on the validation split:
  block   fp32 arithmetic, block head map (the run's own fp32 evaluation = AutoANE's CPU validation; runs.csv)
  train   fp32 arithmetic, the training forward head map (gqa-mismatch): `roundoff train --precision fp32
          --defect gqa-mismatch --eval-checkpoint RUN/checkpoint.bin` (eval-s<seed>.json here)
  own     ane-guide arithmetic, the training forward head map (the run's own-precision evaluation; runs.csv)
and CPU's fp32 validation loss of the same seed. head-map part = block - train, precision part = train - own.
Usage: /usr/bin/python3 decompose.py  (from this directory; writes decomposition.csv)
"""
import csv
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
runs = {}
with open(os.path.join(here, "..", "runs.csv")) as f:
    for r in csv.DictReader(f):
        runs[(r["arm"], int(r["seed"]))] = r
rows = []
for seed in (1, 2, 3):
    path = os.path.join(here, f"eval-s{seed}.json")
    if not os.path.exists(path):
        continue
    e = json.load(open(path))
    g, c = runs[("GUIDE-D", seed)], runs[("CPU", seed)]
    block, own, cpu = float(g["val_loss_fp32"]), float(g["val_loss_own"]), float(c["val_loss_fp32"])
    train = e["val_loss"]
    assert e["weights_sha256"] == g["weights_sha256"], f"seed {seed}: the checkpoint is not the run's final weights"
    assert e["checkpoint_step"] == 130 and e["defects"] == "gqa-mismatch" and e["policy"] == "fp32", path
    rows.append({"seed": seed, "cpu_fp32": cpu, "guide_d_block_fp32": block, "guide_d_trainmap_fp32": train,
                 "guide_d_own": own, "head_map_part": block - train, "precision_part": train - own,
                 "gap_block_pct": 100 * (block - cpu) / cpu, "gap_trainmap_fp32_pct": 100 * (train - cpu) / cpu,
                 "gap_own_pct": 100 * (own - cpu) / cpu, "weights_sha256": e["weights_sha256"]})
with open(os.path.join(here, "decomposition.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
for r in rows:
    print(r)
