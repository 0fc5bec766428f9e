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
