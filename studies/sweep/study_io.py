"""Reading a sweep study's runs.csv tables and its runs' files, and writing tables atomically; shared by
analyze_study.py and telemetry_summary.py. Bad input raises InputError with a message that names the file and
what was wrong; each script prints it with its own name and exits 2."""
import datetime
import hashlib
import json
import os
import subprocess
import sys

import pandas as pd


class InputError(Exception):
    pass


def read_csv(path):
    """A CSV table with every number parsed exactly as written (pandas' default parser can be off in the last bit)."""
    return pd.read_csv(path, float_precision="round_trip")


def load_runs(paths, arm_col, seed_col):
    """The rows of every runs.csv in paths, concatenated; one run per (arm, seed)."""
    frames = []
    for p in paths:
        if not os.path.isfile(p):
            raise InputError(f"{p} not found (a runs.csv written by `roundoff sweep`)")
        t = read_csv(p)
        for c in (arm_col, seed_col, "run", "study"):
            if c not in t.columns:
                raise InputError(f"{p} has no column '{c}' (columns: {', '.join(t.columns[:8])}, ...)")
        frames.append(t)
    runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    dup = runs[runs.duplicated([arm_col, seed_col], keep=False)]
    if not dup.empty:
        raise InputError(f"two runs for arm '{dup[arm_col].iloc[0]}' seed {dup[seed_col].iloc[0]} "
                         f"({', '.join(dup.run)}): analyse one config and corpus at a time")
    return runs


def run_file(run, runs_dirs, name):
    """<dir>/<study>/<run>/<name> or <dir>/<run>/<name>, the first that exists over runs_dirs; None if none."""
    for d in runs_dirs:
        for p in (os.path.join(d, run["study"], run["run"], name), os.path.join(d, run["run"], name)):
            if os.path.isfile(p):
                return p
    return None


def write_csv(frame, path):
    """frame to path through a temporary file and a rename, floats with 17 significant digits."""
    tmp = f"{path}.tmp.{os.getpid()}"
    frame.to_csv(tmp, index=False, float_format="%.17g")
    os.replace(tmp, path)


def write_provenance(path, script, inputs, **extra):
    """path (JSON, atomically): the script, the git revision of its checkout, the time, the command line, each
    input file's sha256, and extra's keys."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        rev = "unknown"
    meta = {"script": script, "git_revision": rev,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(sys.argv), **extra, "inputs": {p: sha256_of(p) for p in inputs}}
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
