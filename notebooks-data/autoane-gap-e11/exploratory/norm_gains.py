"""RMSNorm gains of finished runs' checkpoints (exploratory; docs/studies/autoane-gap.md, R-CPU).

AutoANE's RMSNorm-backward defect (--defect rmsnorm-bwd) differs from the correct gradient by (w_i - 1) times the
x·dot term, so its size is set by how far the gains w have moved from their initial 1. This reads the master
weights of each checkpoint given (layout: studies/train/checkpoint.cpp and params.hpp, the model config from the
checkpoint's meta JSON) and writes one row per run and norm (ln1w, ln2w: all layers; lnfw) with min, max and mean
|w - 1|.

    /usr/bin/python3 norm_gains.py RUN/checkpoint.bin ... > norm_gains.csv
"""
import array
import csv
import json
import struct
import sys


def read_doubles(f, base, offset, n):
    f.seek(base + 8 * offset)
    a = array.array("d")
    a.frombytes(f.read(8 * n))
    if sys.byteorder != "little":
        a.byteswap()
    return a


def gains(path):
    with open(path, "rb") as f:
        if f.readline() != b"roundoff-checkpoint 1\n":
            sys.exit(f"{path}: not a version-1 roundoff checkpoint")
        f.readline()  # sha256 line
        (n_meta,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n_meta))
        (n_master,) = struct.unpack("<Q", f.read(8))
        base = f.tell()
        c = meta["identity"]["config"]
        L, C, H, V = c["layers"], c["d"], c["hidden"], c["vocab"]
        kvd = c["kv_heads"] * (C // c["heads"])
        ln1 = V * C
        ln2 = ln1 + L * C + L * C * C + 2 * L * kvd * C + L * C * C
        lnf = ln2 + L * C + 3 * L * H * C
        wcls = 0 if c["tie_embeddings"] else V * C
        if lnf + C + wcls != n_master:
            sys.exit(f"{path}: {n_master} master weights, the layout expects {lnf + C + wcls}")
        for name, off, n in (("ln1w", ln1, L * C), ("ln2w", ln2, L * C), ("lnfw", lnf, C)):
            w = read_doubles(f, base, off, n)
            dev = [abs(x - 1.0) for x in w]
            yield {"checkpoint": path, "policy": meta["identity"]["policy"], "defects": c["defects"],
                   "seed": meta["identity"]["seed"], "norm": name, "n": n, "min": min(w), "max": max(w),
                   "mean_abs_dev": sum(dev) / n, "max_abs_dev": max(dev)}


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: norm_gains.py CHECKPOINT... (writes CSV to stdout)")
    out = csv.DictWriter(sys.stdout, ["checkpoint", "policy", "defects", "seed", "norm", "n", "min", "max",
                                      "mean_abs_dev", "max_abs_dev"], lineterminator="\n")
    out.writeheader()
    for path in sys.argv[1:]:
        for row in gains(path):
            out.writerow(row)


if __name__ == "__main__":
    main()
