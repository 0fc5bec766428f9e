#!/usr/bin/python3
"""Where each op's output lives under a study's precision policies: the (op, pass) tables that `roundoff policy
show POLICY --table` prints, and each storage format's largest finite value from `roundoff formats`, kept in one
committed JSON file so that an analysis reads them without a build (telemetry_summary.py: a range headroom is
measured against the format an output is stored in and the limit of the op that writes it, never against fp16 for
an output kept in fp32).

    policy_tables.py write --roundoff BIN --runs A/runs.csv [--runs ...] --out FILE
        the table of every distinct `policy` of the runs (canonical text, as runs.csv holds it), from BIN
    policy_tables.py check --roundoff BIN FILE
        exit 1, naming each difference, when BIN no longer prints what FILE holds (ctest PolicyTablesCurrent)

FILE: {"generated_by", "formats": {format: max finite}, "policies": {policy: [table lines]}}. read_tables(FILE)
gives {policy: {(op, pass): Entry(storage, limit)}}, limit = the smaller of the storage format's largest finite
value and the entry's `saturate` (the ANE's matmul output port: magnitudes ≥ 32768 become inf, docs/policy.md).
"""
import argparse
import json
import os
import subprocess
import sys
from typing import NamedTuple

from study_io import InputError, read_csv

PASSES = ("fwd", "bwd-data", "bwd-weight")


class Entry(NamedTuple):
    storage: str
    limit: float


def run_roundoff(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise InputError(f"`{binary} {' '.join(args)}` exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def formats_of(binary):
    """{format: largest finite value} from `roundoff formats` (columns: format p emin emax subnorm u max ...)."""
    lines = run_roundoff(binary, "formats").splitlines()
    header = lines[0].split()
    if header[:7] != ["format", "p", "emin", "emax", "subnorm", "u", "max"]:
        raise InputError(f"`{binary} formats` prints an unexpected header: {lines[0]!r}")
    return {f[0]: float(f[6]) for f in (line.split() for line in lines[1:]) if len(f) > 6}


def table_of(binary, policy):
    """The lines of `roundoff policy show POLICY --table`, the canonical name line first."""
    return run_roundoff(binary, "policy", "show", policy, "--table").splitlines()


def parse_table(policy, lines, formats):
    """{(op, pass): Entry} of one policy's table lines."""
    if not lines or lines[0] != policy:
        raise InputError(f"policy '{policy}': its table does not start with its canonical text "
                         f"(first line {lines[0] if lines else 'none'!r})")
    out = {}
    for line in lines[1:]:
        f = line.split()
        if len(f) < 3 or f[1] not in PASSES:
            continue  # the header, the tensor roles and the loss-scale default
        prec = f[2].split("/")
        if len(prec) != 4:
            raise InputError(f"policy '{policy}': entry {line!r} has no storage/compute/accumulation/rounding")
        if prec[0] not in formats:
            raise InputError(f"policy '{policy}': storage format '{prec[0]}' of {f[0]} {f[1]} is not one of "
                             f"the formats ({', '.join(formats)})")
        limit = formats[prec[0]]
        for extra in f[3:]:
            key, _, value = extra.partition("=")
            if key == "saturate" and value != "none":
                limit = min(limit, float(value))
        out[(f[0], f[1])] = Entry(prec[0], limit)
    if not out:
        raise InputError(f"policy '{policy}': its table has no (op, pass) entry")
    return out


def read_doc(path):
    """The JSON document of a file written by `write`, with its two keys checked."""
    if not os.path.isfile(path):
        raise InputError(f"{path} not found (write it with studies/sweep/policy_tables.py write)")
    with open(path) as f:
        doc = json.load(f)
    for key in ("formats", "policies"):
        if key not in doc:
            raise InputError(f"{path} has no '{key}' (write it with studies/sweep/policy_tables.py write)")
    return doc


def read_tables(path):
    """{policy: {(op, pass): Entry}} from a file written by `write`."""
    doc = read_doc(path)
    return {p: parse_table(p, lines, doc["formats"]) for p, lines in doc["policies"].items()}


def write(binary, runs_paths, out):
    policies = set()
    for path in runs_paths:
        if not os.path.isfile(path):
            raise InputError(f"{path} not found (a runs.csv written by `roundoff sweep`)")
        runs = read_csv(path)
        if "policy" not in runs.columns:
            raise InputError(f"{path} has no column 'policy' (a runs.csv written by `roundoff sweep`)")
        policies |= set(runs.policy)
    policies = sorted(policies)
    formats = formats_of(binary)
    doc = {"generated_by": f"roundoff formats; roundoff policy show POLICY --table ({os.path.basename(binary)})",
           "formats": formats, "policies": {p: table_of(binary, p) for p in policies}}
    for p, lines in doc["policies"].items():
        parse_table(p, lines, formats)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, out)
    print(f"policy_tables: {len(policies)} policies -> {out}")


def check(binary, path):
    doc = read_doc(path)
    diffs = []
    formats = formats_of(binary)
    for name, value in doc["formats"].items():
        if formats.get(name) != value:
            diffs.append(f"format {name}: file {value}, {binary} {formats.get(name)}")
    for p, lines in doc["policies"].items():
        now = table_of(binary, p)
        if now != lines:
            first = next((i for i, (a, b) in enumerate(zip(lines, now)) if a != b), min(len(lines), len(now)))
            diffs.append(f"policy '{p}' line {first + 1}: file {lines[first] if first < len(lines) else 'none'!r}, "
                         f"{binary} {now[first] if first < len(now) else 'none'!r}")
    for d in diffs:
        print(f"policy_tables: {d}", file=sys.stderr)
    if diffs:
        print(f"policy_tables: {path} is stale: re-write it with `policy_tables.py write`", file=sys.stderr)
        return 1
    print(f"policy_tables: {path} matches {binary} ({len(doc['policies'])} policies)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("write")
    w.add_argument("--roundoff", required=True)
    w.add_argument("--runs", action="append", required=True)
    w.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--roundoff", required=True)
    c.add_argument("file")
    a = ap.parse_args(argv)
    try:
        if a.verb == "write":
            write(a.roundoff, a.runs, a.out)
            return 0
        return check(a.roundoff, a.file)
    except InputError as e:
        print(f"policy_tables: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
