"""studies/tensorcore/fp8_gemm_error.py: its exact reference, its metrics and a small run."""
from __future__ import annotations

import csv
import importlib.util
from fractions import Fraction

import numpy as np

import roundoff
from conftest import REPO


def _script():
    spec = importlib.util.spec_from_file_location("fp8_gemm_error", REPO / "studies" / "tensorcore" / "fp8_gemm_error.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fp64_is_the_exact_sum_of_e4m3_products():
    # The largest and the smallest (subnormal) products together: the sum needs 17.6 + 18 bits, exact in binary64.
    rng = np.random.default_rng(2)
    a = roundoff.round(np.clip(rng.standard_normal((3, 512)) * 300, -448, 448), "e4m3")
    b = roundoff.round(np.clip(rng.standard_normal((512, 2)) * 300, -448, 448), "e4m3")
    a[0, :4] = [448, 2.0 ** -9, -448, 2.0 ** -9]
    b[:4, 0] = [448, 2.0 ** -9, 448, 3 * 2.0 ** -9]
    d = roundoff.gemm(a, b, inputs="e4m3", accumulation="fp64-seq")
    for i in range(3):
        for j in range(2):
            assert d[i, j] == float(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[i], b[:, j])))


def test_summary_metrics_by_hand():
    s = _script().summarize(np.array([1.0, 1.5, -0.0005, 4.0]), np.array([1.0, 2.0, 0.0, -4.0]))
    # |exact| >= 1e-3 · 4 keeps 1, 2 and -4: relative errors 0, 0.25, 2.
    assert s["n_rel"] == 3 and s["rel_max"] == 2.0 and s["rel_median"] == 0.25
    assert s["frac_below_exact"] == 0.25 and s["exact_outputs"] == 1


def test_small_run_writes_the_table(tmp_path):
    _script().main(["--out", str(tmp_path), "--m", "8", "--n", "8", "--ks", "32,512", "--classes", "positive"])
    rows = list(csv.DictReader(open(tmp_path / "errors.csv")))
    assert [(r["K"], r["accumulation"]) for r in rows] == [
        ("32", "tc-h100-fp8"), ("32", "tc-h100-fp8,promote=128:fp32"),
        ("512", "tc-h100-fp8"), ("512", "tc-h100-fp8,promote=128:fp32")]
    assert rows[0]["rel_max"] == rows[1]["rel_max"]  # K <= 128: promotion changes nothing
    assert float(rows[2]["normwise"]) > 5 * float(rows[3]["normwise"])  # one-signed data: truncation bias grows
    assert float(rows[2]["frac_below_exact"]) == 1.0
    assert (tmp_path / "provenance.json").exists()
