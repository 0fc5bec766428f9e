#!/usr/bin/env python3
"""Collects the T1 runs under the GPU autocast presets (issue 40 item 5) into runs.csv.

    /usr/bin/python3 notebooks-data/gpu-amp-t1/collect.py RUN_DIR... > notebooks-data/gpu-amp-t1/runs.csv

Each RUN_DIR is a `roundoff train --config T1 --precision P --seed S --threads 1 --out RUN_DIR` output; the
summary.json and curves.csv of each are copied beside this script under runs/<policy>-s<seed>/.
"""
import csv
import json
import os
import shutil
import sys

here = os.path.dirname(os.path.abspath(__file__))
w = csv.writer(sys.stdout)
w.writerow(["policy", "seed", "val_loss_fp32", "val_loss_own", "autoane_train_loss", "skipped_steps", "git_revision",
            "weights_sha256"])
for d in sys.argv[1:]:
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    if not s.get("complete"):
        sys.exit(f"{d}: the run is not complete")
    dest = os.path.join(here, "runs", f"{s['policy']}-s{s['seed']}")
    os.makedirs(dest, exist_ok=True)
    for name in ("summary.json", "curves.csv"):
        shutil.copyfile(os.path.join(d, name), os.path.join(dest, name))
    w.writerow([s["policy"], s["seed"], s["val_loss_fp32"], s["val_loss_own"], s["autoane_train_loss"],
                s["skipped_steps"], s["git_revision"], s["weights_sha256"]])
