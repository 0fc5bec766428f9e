"""studies/tensorcore/cublas_probe.py without a GPU: its operand rounding against roundoff, its operand classes and
its file layout (--dry-run). The GPU path itself runs only on an NVIDIA machine."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

import roundoff
from conftest import REPO


def _probe():
    spec = importlib.util.spec_from_file_location("cublas_probe", REPO / "studies" / "tensorcore" / "cublas_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("fmt,name", [("f16", "fp16"), ("bf16", "bf16"), ("tf32", "tf32"), ("e4m3", "e4m3")])
def test_operand_rounding_is_roundoffs(fmt, name):
    pr = _probe()
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(2000) * 2.0 ** rng.integers(-14, 10, 2000),
                        [0.0, -0.0, 448.0, 500.0, -1e4, 2.0 ** -9, 3 * 2.0 ** -10, 1 + 2.0 ** -4]])
    if fmt == "f16":
        x = x[np.abs(x) < 65504]
    want = roundoff.round(np.clip(x, -448, 448) if fmt == "e4m3" else x.astype(np.float32).astype(np.float64), name)
    got = pr.decode(pr.round_bits(x, fmt), fmt)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


def test_dry_run_layout_and_operand_classes(tmp_path):
    pr = _probe()
    pr.main(["--out", str(tmp_path), "--formats", "bf16,e4m3", "--shapes", "256x128x32", "--tiles", "3",
             "--dry-run"])
    for fmt in ("bf16", "e4m3"):
        z = np.load(tmp_path / f"{fmt}.npz")
        meta = json.loads(str(z["meta"]))
        assert list(meta) == ["256x128x32"] and set(meta["256x128x32"]) == set(pr.VARIANTS[fmt])
        tiles = z["256x128x32__tiles"]
        nr, nc = len(set(tiles[:, 0])), len(set(tiles[:, 1]))
        a, b = z["256x128x32__a"], z["256x128x32__b"]
        assert a.shape == (64 * nr, 32) and b.shape == (32, 64 * nc)
        for v in pr.VARIANTS[fmt]:
            assert z[f"256x128x32__d_{v}"].shape == (64 * nr, 64 * nc)
    # Operand classes: B's columns >= N/2 repeat each even k-row in the next odd one; A's class-3 rows are 2^-9 scale.
    ab, bb = pr.operands(np.random.default_rng(1), 256, 128, 32, "f16")
    B = pr.decode(bb, "f16")
    assert np.array_equal(B[1::2, 64:], B[0::2, 64:]) and not np.array_equal(B[1::2, :64], B[0::2, :64])
    A = pr.decode(ab, "f16")
    assert np.abs(A[192:256]).max() < 2.0 ** -9 * 8 < np.abs(A[0:64]).max()
    with pytest.raises(SystemExit):
        pr.main(["--out", str(tmp_path), "--shapes", "100x64x8", "--dry-run"])


def test_segment_k_probe_decodes_the_split_and_the_order(tmp_path):
    # --segment-k --dry-run runs the designed GEMMs through the model on the CPU (the last 64 columns split into 15
    # pieces chained under tc-h100-tf32 by roundoff, summed in binary32 in a random order per output; the rest the
    # plain chain): the decoders must give back that split exactly, and see that the order is not fixed.
    pr = _probe()
    rep = pr.main(["--out", str(tmp_path), "--segment-k", "--dry-run", "--shapes", "256x128x1024", "--repeat", "2"])
    r = rep["256x128x1024"]
    split = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 29, 32]  # 32 k-iterations: 13 x 2, then 2 x 3
    assert r["boundaries"] == {"tiles": {"0,0": [0, 32], "0,64": split, "128,0": [0, 32], "128,64": split},
                               "inconsistent": []}
    assert r["boundary_runs_differing"] == [0]  # exact integers: any order gives the same bits
    assert r["order_bounds"] == split and set(r["order"]) == {"0,64", "128,64"}
    for o in r["order"].values():
        assert o["valid"] == o["outputs"] == 128 * 64 and not o["fixed"]
    assert r["order_runs_differing"][0] > 0
    z = np.load(tmp_path / "segment_k.npz")
    assert z["256x128x1024__boundary_1"].shape == (256, 128)


def test_segment_k_order_probe_recovers_a_fixed_order():
    # The same operands summed in one fixed order for every output: one value per pair, and the order back.
    pr = _probe()
    M, N, K = 128, 64, 512
    bounds = [0, 3, 5, 9, 12, 16]  # 5 pieces of k-iterations
    ab, bb, pairs = pr.segk_order_operands(M, N, K, bounds)
    A, B = pr.decode(ab, "tf32"), pr.decode(bb, "tf32")
    P = [roundoff.gemm(A[:, 32 * i:32 * j], B[32 * i:32 * j], inputs="tf32", accumulation="tc-h100-tf32")
         for i, j in zip(bounds[:-1], bounds[1:])]
    order = [3, 0, 4, 2, 1]
    d = np.zeros((M, N), np.float32)
    for p in order:
        d = d + P[p].astype(np.float32)
    res = pr.segk_orders(d.view(np.uint32), bounds, np.arange(M), np.arange(N))
    assert res["fixed"] and res["valid"] == M * N
    rank = [order.index(p) for p in range(5)]
    assert [max(x, 1) for x in res["ranks"]] == [max(x, 1) for x in rank]  # the first two are interchangeable
    with pytest.raises(SystemExit):
        pr.main(["--out", "unused", "--segment-k", "--dry-run", "--shapes", "128x64x512", "--segk-bounds", "0,3,20"])
