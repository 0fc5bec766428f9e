#!/usr/bin/env python3
"""Cut the committed subset tests/fixtures/cublas-h200/ out of the full cuBLAS-on-H200 fixtures.

The full fixtures (46 MB: per shape M x N x K, a few 64 x 64 output tiles with their operands' bits and every
output variant, see their README) are too large for the repository. This keeps, per shape, 3 rows of every
64-row block of A's selected rows and 8 columns of every 64-column block of B's selected columns, with the
outputs at those rows and columns, in the same layout (raw bits) plus the global row and column indices:

    python3 studies/tensorcore/cublas_subset.py FULL_DIR tests/fixtures/cublas-h200

Keys per shape S: S__a (rows of A), S__b (columns of B), S__rows / S__cols (int32: their indices in the M x N
output), S__d_<variant> (the outputs there), and meta (the original JSON: kernels launched per variant).
"""
import json
import sys
from pathlib import Path

import numpy as np

ROWS = (0, 21, 45)                   # in each 64-row block
COLS = (0, 9, 17, 26, 33, 40, 51, 63)  # in each 64-column block
FILES = ("f16_1", "f16_2", "bf16_1", "bf16_2", "tf32_1", "tf32_2", "e4m3")


def unique_in_order(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def subset(src: Path, dst: Path) -> None:
    z = np.load(src)
    meta = json.loads(str(z["meta"]))
    out = {"meta": np.array(json.dumps(meta))}
    for shape in meta:
        tiles = z[f"{shape}__tiles"]
        trows = unique_in_order(int(t) for t in tiles[:, 0])
        tcols = unique_in_order(int(t) for t in tiles[:, 1])
        local_r = [b * 64 + r for b in range(len(trows)) for r in ROWS]
        local_c = [b * 64 + c for b in range(len(tcols)) for c in COLS]
        out[f"{shape}__a"] = z[f"{shape}__a"][local_r]
        out[f"{shape}__b"] = np.ascontiguousarray(z[f"{shape}__b"][:, local_c])
        out[f"{shape}__rows"] = np.array([trows[b] * 64 + r for b in range(len(trows)) for r in ROWS], np.int32)
        out[f"{shape}__cols"] = np.array([tcols[b] * 64 + c for b in range(len(tcols)) for c in COLS], np.int32)
        for key in z.files:
            if key.startswith(f"{shape}__d_"):
                out[key] = z[key][np.ix_(local_r, local_c)]
    np.savez_compressed(dst, **out)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: cublas_subset.py FULL_DIR OUT_DIR")
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        subset(src / f"{name}.npz", dst / f"{name}.npz")


if __name__ == "__main__":
    main()
