"""Reading a sweep study's runs.csv tables and its runs' files, and writing tables atomically; shared by
analyze_study.py and telemetry_summary.py. Bad input raises InputError with a message that names the file and
what was wrong; each script prints it with its own name and exits 2."""
import os

import pandas as pd


class InputError(Exception):
    pass


def load_runs(paths, arm_col, seed_col):
    """The rows of every runs.csv in paths, concatenated; one run per (arm, seed)."""
    frames = []
    for p in paths:
        if not os.path.isfile(p):
            raise InputError(f"{p} not found (a runs.csv written by `roundoff sweep`)")
        t = pd.read_csv(p)
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
