"""cuBLAS on an H200, probed by studies/tensorcore/cublas_probe.py (2026-11-30), against the tensor-core models.

notebooks-data/cublas-h200-probe-2026-11-30 (README there): the operand-class probe's outputs (a subset) and the
segment-K probe's designed GEMMs, measured on a lent H200 with PyTorch 2.11 / CUDA 13.0. Every committed output
must be the model's, bit for bit: the preset chained over K, with ``splitk=S:G`` where the call launched cuBLAS's
split-K reduction (S as found on the whole probe output, summary-full.csv), and in the tiles the tf32 segment-K
kernel splits, 15 pieces summed as a right-aligned pairwise tree.
"""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from conftest import REPO
from test_cublas_h200 import _check  # the loader of studies/tensorcore/cublas_check.py

DATA = REPO / "notebooks-data" / "cublas-h200-probe-2026-11-30"


def _full_summary():
    with open(DATA / "summary-full.csv") as f:
        return {(r["file"], r["shape"], r["variant"]): r for r in csv.DictReader(f)}


def _calls():
    for path in sorted((DATA / "subset").glob("*.npz")):
        z = np.load(path)
        for shape, variants in json.loads(str(z["meta"])).items():
            for v in variants:
                if not v.endswith("_repeat_differing") and f"{shape}__d_{v}" in z.files:
                    yield pytest.param(path.name, shape, v, id=f"{path.stem}-{shape}-{v}")


def test_the_whole_probe_output_was_reproduced_and_deterministic():
    rows = list(_full_summary().values())
    assert len(rows) == 53
    assert all(r["differing"] == "0" for r in rows)
    assert all(json.loads(r["repeat_differing"]) in (None, [0, 0]) for r in rows)
    # split-K is modelled exactly where cuBLAS launched its reduction
    assert all(("splitk=" in r["model"]) == (r["split_k_kernel"] == "True") for r in rows)


@pytest.mark.parametrize("name,shape,variant", list(_calls()))
def test_every_committed_output_is_the_models(name, shape, variant):
    ck = _check()
    z = np.load(DATA / "subset" / name)
    fmt = name.split("_")[0].removesuffix(".npz")
    kernels = json.loads(str(z["meta"]))[shape][variant]
    row = _full_summary()[(name, shape, variant)]
    assert ("splitKreduce_kernel" in " ".join(kernels)) == (row["split_k_kernel"] == "True")
    a, b = ck.decode(z[f"{shape}__a"], fmt), ck.decode(z[f"{shape}__b"], fmt)
    ref = z[f"{shape}__d_{variant}"]
    got = ck.output_bits(ck.roundoff.gemm(a, b, inputs=ck.INPUT[fmt], accumulation=row["model"]), ref, variant)
    wrong = np.argwhere(got != ref)
    assert wrong.size == 0, f"{len(wrong)} of {ref.size} differ under {row['model']}"


def test_a_split_k_call_needs_its_split():
    # The test can fail: the plain chain misses the split-K calls (tf32 128x128x16384: S = 32 on the whole data).
    ck = _check()
    z = np.load(DATA / "subset" / "tf32.npz")
    shape = "128x128x16384"
    a, b = ck.decode(z[f"{shape}__a"], "tf32"), ck.decode(z[f"{shape}__b"], "tf32")
    ref = z[f"{shape}__d_tf32"]
    plain = ck.output_bits(ck.roundoff.gemm(a, b, inputs="tf32", accumulation="tc-h100-tf32"), ref, "tf32")
    assert np.mean(plain == ref) < 0.1
    assert _full_summary()[("tf32.npz", shape, "tf32")]["model"] == "tc-h100-tf32,splitk=32:32"


# Split tiles per shape where the segment-K kernel split any (the boundary probe's decoding): rows x columns of the
# torch output, in 128 x 64 probe tiles. Pieces are 15 everywhere (K = 4096: 8 or 9 k-iterations, 6144: 12 or 13,
# 8192: 17 or 18, the spare ones last).
SPLIT = {
    "run1_1024x1024x4096": ((0, 128), (768, 832, 896, 960)),
    "run2_1024x1024x8192": ((0, 128), (768, 832, 896, 960)),
    "run3_1024x1024x6144": ((0, 128), (768, 832, 896, 960)),
    "run3_1024x896x4096": ((0, 128), (768, 832)),
    "run3_1024x960x4096": ((0, 128), (768, 832, 896)),
    "run3_512x2048x4096": ((0, 128), (1792, 1856, 1920, 1984)),
}


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_segment_k_designed_probes_are_the_tree_model(name):
    ck = _check()
    rows = ck.check_segment_k(DATA / "segment-k" / f"{name}.json")
    rs, cs = SPLIT[name]
    assert {r["probe"] for r in rows} == {"boundary", "order"}
    for r in rows:
        assert r["split_tiles"] == len(rs) * len(cs) and r["split_outputs"] == 128 * 64 * len(rs) * len(cs)
        assert r["differing"] == 0, r
    rep = json.loads((DATA / "segment-k" / f"{name}.json").read_text())
    shape = next(iter(rep))
    tiles = rep[shape]["boundaries"]["tiles"]
    assert sorted(t for t, b in tiles.items() if len(b) > 2) == sorted(f"{r},{c}" for r in rs for c in cs)
    assert rep[shape]["boundary_kernels"][-1]["grid"] == [30, 4, 1]  # 120 CTAs
    assert all(v["fixed"] for v in rep[shape]["order"].values())  # one order per pair: no race
    assert rep[shape]["boundary_runs_differing"] == [0] * len(rep[shape]["boundary_runs_differing"])


def test_the_other_probed_shapes_split_nothing_and_are_the_chain():
    ck = _check()
    others = [p for p in sorted((DATA / "segment-k").glob("*.json"))
              if p.stem not in SPLIT and p.stem != "run2_1024x1024x4096"]
    assert len(others) == 26
    for p in others[::5]:  # a sample (every output of all: studies/tensorcore/cublas_check.py --segment-k)
        for r in ck.check_segment_k(p):
            assert r["split_tiles"] == 0 and r["differing"] == 0, r


def test_the_order_probe_counts_are_the_trees():
    # The order probe's counts (pieces added after both marked ones) for a right-aligned pairwise tree, derived
    # here from the tree alone, equal what the GPU gave; a chain in k order gives other counts.
    rep = json.loads((DATA / "segment-k" / "run1_1024x1024x4096.json").read_text())["1024x1024x4096"]
    S = 15
    leaves = [None] + list(range(S))  # 16 slots, the first empty

    def after_both(p, q):
        # The ones in subtrees that meet no uncancelled marker survive: count them by simulating the tree on
        # symbolic values (marker +, marker -, one), in exact arithmetic with the binary32 absorption of ones.
        def val(i):
            return 0.0 if i is None else (2.0 ** 29 if i == p else -(2.0 ** 29) if i == q else 1.0)
        L = [np.float32(val(i)) for i in leaves]
        while len(L) > 1:
            L = [np.float32(L[i] + L[i + 1]) for i in range(0, len(L), 2)]
        return int(L[0])

    for tile in rep["order"].values():
        for pq, vals in tile["values_per_pair"].items():
            p, q = (int(x) for x in pq.split(","))
            assert vals == [after_both(p, q)], pq
    # a chain in k order: D(p, q) = S - 1 - max(p, q); the GPU's D(0, 7) = 0 is not that (7)
    first = next(iter(rep["order"].values()))["values_per_pair"]
    assert first["0,7"] == [0] and S - 1 - 7 != 0
