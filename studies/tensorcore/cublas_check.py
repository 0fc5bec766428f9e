#!/usr/bin/env python3
"""Check the output of studies/tensorcore/cublas_probe.py (a GPU run) against roundoff's tensor-core models.

Per input format, shape and output variant: the model of the call (`tc-h100`, `tc-h100-bf16`, `tc-h100-tf32`,
`tc-h100-fp8` for e4m3 with use_fast_accum, `tc-h100-fp8,promote=128:fp32` without), and, where the call
launched cuBLAS's split-K reduction (`splitKreduce_kernel`), the same with `splitk=S:G` for the smallest S in
1..64 that reproduces every output (G: the kernels' k-tile, 64 for fp16/bf16, 32 for tf32, 128 for e4m3, as
found on the H200 fixtures). One CSV row per call: the kernels, the model, the outputs and how many differ.

    PYTHONPATH=build/python /usr/bin/python3 studies/tensorcore/cublas_check.py PROBE_DIR [--csv OUT.csv]
        [--segment-k SEGK_DIR_OR_JSON ...]

PROBE_DIR holds <fmt>.npz (and any tf32_<shape>.npz) in the probe's layout, whole or cut by cublas_subset.py.
--segment-k takes the segment-K probe's segment_k.json files (the .npz beside each), regenerates the designed
operands with cublas_probe.py's functions and compares every output of the rows of the split tiles (and of the
last 128 rows) with the model: the split tiles 15 pieces summed as segment_k.py's `tree_sum`, the rest the chain.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np

import roundoff

HERE = Path(__file__).resolve().parent
GRANULE = {"f16": 64, "bf16": 64, "tf32": 32, "e4m3": 128}
INPUT = {"f16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "e4m3"}
KT = 32  # the segment-K kernel's k-tile


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Raw operand bits (the probe's layout) as float64 values."""
    if fmt == "f16":
        return bits.view(np.float16).astype(np.float64)
    if fmt == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if fmt == "tf32":
        return bits.view(np.float32).astype(np.float64)
    return roundoff.from_bits(bits.astype(np.uint64).ravel(), "e4m3").reshape(bits.shape)


def base_model(fmt: str, variant: str) -> str:
    if fmt == "e4m3":  # torch._scaled_mm: use_fast_accum=True is the bare wgmma chain, False promotes every 128
        return "tc-h100-fp8" if variant.endswith("fast") else "tc-h100-fp8,promote=128:fp32"
    return {"f16": "tc-h100", "bf16": "tc-h100-bf16", "tf32": "tc-h100-tf32"}[fmt]


def output_bits(d: np.ndarray, ref: np.ndarray, variant: str) -> np.ndarray:
    """The model's binary32 result as the call's output bits (narrow outputs: rounded once to nearest-even)."""
    if ref.dtype == np.uint32:
        return np.asarray(d, dtype=np.float32).view(np.uint32)
    out = "fp16" if variant.startswith("f16") else "bf16"
    return roundoff.to_bits(roundoff.round(d, out), out).astype(np.uint16)


def check_call(a, b, ref, fmt: str, variant: str, kernels) -> dict:
    """The model of one call and how many of its outputs differ: the plain chain, or with split-K the smallest S."""
    split = any("splitKreduce_kernel" in k for k in kernels)
    spec0 = base_model(fmt, variant)
    specs = [spec0] if not split else [f"{spec0},splitk={S}:{GRANULE[fmt]}" for S in range(1, 65)]
    best = None
    for spec in specs:
        got = output_bits(roundoff.gemm(a, b, inputs=INPUT[fmt], accumulation=spec), ref, variant)
        wrong = int((got != ref).sum())
        if best is None or wrong < best[1]:
            best = (spec, wrong)
        if wrong == 0:
            break
    return {"model": best[0], "outputs": int(ref.size), "differing": best[1], "split_k_kernel": split}


def check_dir(probe_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(probe_dir.glob("*.npz")):
        fmt = path.stem.split("_")[0]
        if fmt not in INPUT:
            continue
        z = np.load(path)
        meta = json.loads(str(z["meta"]))
        for shape in meta:
            a, b = decode(z[f"{shape}__a"], fmt), decode(z[f"{shape}__b"], fmt)
            for variant, kernels in meta[shape].items():
                if variant.endswith("_repeat_differing") or f"{shape}__d_{variant}" not in z.files:
                    continue
                r = check_call(a, b, z[f"{shape}__d_{variant}"], fmt, variant, kernels)
                rows.append({"file": path.name, "format": fmt, "shape": shape, "variant": variant, **r,
                             "repeat_differing": json.dumps(meta[shape].get(f"{variant}_repeat_differing")),
                             "kernels": " | ".join(re.sub(r"\s+", " ", k) for k in kernels)})
    return rows


def segk_model(A: np.ndarray, B: np.ndarray, split_rows: np.ndarray, split_cols: np.ndarray, S: int = 15):
    """The segment-K kernel's outputs for A's rows: `tc-h100-tf32` chained over K, except at split_rows x
    split_cols (boolean masks), where the k-iterations are cut into S balanced pieces (the spare ones last),
    each chained from zero, and summed by segment_k.py's tree_sum."""
    sk = _module("segment_k")
    n = A.shape[1] // KT
    d = roundoff.gemm(A, B, inputs="tf32", accumulation="tc-h100-tf32")
    bounds = sk.balanced(S, "last", n)
    As, Bs = A[split_rows], B[:, split_cols]
    P = np.array([roundoff.gemm(As[:, KT * i:KT * j], Bs[KT * i:KT * j], inputs="tf32", accumulation="tc-h100-tf32")
                  for i, j in zip(bounds[:-1], bounds[1:])])
    d[np.ix_(split_rows, split_cols)] = sk.tree_sum(P)
    return d


def check_segment_k(json_path: Path) -> list[dict]:
    """Every designed-probe output (boundary and order GEMMs, every repeat) of the rows of the split tiles and
    of the last 128 rows against segk_model; the split tiles as the boundary probe decoded them."""
    cp = _module("cublas_probe")
    report = json.loads(json_path.read_text())
    z = np.load(json_path.with_suffix(".npz"))
    out = []
    for shape, rep in report.items():
        M, N, K = (int(v) for v in shape.split("x"))
        split = [t for t, bd in rep["boundaries"]["tiles"].items() if len(bd) > 2]
        rows = np.zeros(M, bool)
        cols = np.zeros(N, bool)
        for t in split:
            r0, c0 = (int(v) for v in t.split(","))
            rows[r0:r0 + 128], cols[c0:c0 + 64] = True, True
        keep = rows.copy()
        keep[M - 128:] = True
        probes = [("boundary", *cp.segk_boundary_operands(M, N, K))]
        if "order_bounds" in rep:
            probes.append(("order", *cp.segk_order_operands(M, N, K, rep["order_bounds"])[:2]))
        for name, ab, bb in probes:
            A = ab.view(np.float32).astype(np.float64)[keep]
            B = bb.view(np.float32).astype(np.float64)
            model = segk_model(A, B, rows[keep], cols)
            inside = rows[keep][:, None] & cols[None, :]
            k = 0
            while f"{shape}__{name}_{k}" in z.files:
                meas = z[f"{shape}__{name}_{k}"].view(np.float32).astype(np.float64)[keep]
                out.append({"file": json_path.name, "shape": shape, "probe": name, "run": k,
                            "split_tiles": len(split), "outputs": int(meas.size), "split_outputs": int(inside.sum()),
                            "differing": int((model != meas).sum())})
                k += 1
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("probe_dir", type=Path)
    p.add_argument("--csv", type=Path)
    p.add_argument("--segment-k", nargs="*", type=Path, default=[])
    a = p.parse_args(argv)
    if not a.probe_dir.is_dir():
        p.error(f"probe_dir: {a.probe_dir} is not a directory; valid: the --out folder of cublas_probe.py")
    rows = check_dir(a.probe_dir)
    for r in rows:
        print(f"{r['format']:5} {r['shape']:15} {r['variant']:17} {r['model']:40} {r['differing']:6} of {r['outputs']}")
    if a.csv:
        fields = ["file", "format", "shape", "variant", "model", "outputs", "differing", "split_k_kernel",
                  "repeat_differing", "kernels"]
        tmp = a.csv.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(a.csv)
    seg = []
    for j in a.segment_k:
        for r in check_segment_k(j if j.suffix == ".json" else j / "segment_k.json"):
            seg.append(r)
            print(f"segment-K {r['file']} {r['shape']} {r['probe']} run {r['run']}: split tiles {r['split_tiles']}, "
                  f"{r['differing']} of {r['outputs']} outputs differ ({r['split_outputs']} in split tiles)")
    if a.csv and seg:
        tmp = a.csv.with_name(a.csv.stem + "_segment_k.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(seg[0]))
            w.writeheader()
            w.writerows(seg)
        tmp.replace(a.csv.with_name(a.csv.stem + "_segment_k.csv"))
    bad = [r for r in rows if r["differing"]] + [r for r in seg if r["differing"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
