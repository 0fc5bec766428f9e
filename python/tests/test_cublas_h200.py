"""cuBLAS GEMMs measured on an H200 against the tc-h100 models, bit for bit, split-K included.

tests/fixtures/cublas-h200 is a subset of the project's probe (PyTorch 2.11 / CUDA 13.0 on one H200; README
there): per shape M x N x K, some rows of A and columns of B with the outputs cuBLAS gave there, for every
output variant, and the kernels each call launched. A call without split-K is the preset chained over K; a
split-K call (a ``..._splitK_...`` kernel followed by ``splitKreduce_kernel``) is the same preset with
``splitk=S:G``; narrow outputs are the binary32 result rounded once to nearest-even. docs/studies/tensorcore.md,
"cuBLAS on H200", tells how S and G were found.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import roundoff

from conftest import REPO, cli_path

FIX = REPO / "tests" / "fixtures" / "cublas-h200"
FILES = {"f16": ("f16_1", "f16_2"), "bf16": ("bf16_1", "bf16_2"), "tf32": ("tf32_1", "tf32_2"), "e4m3": ("e4m3",)}
INPUT = {"f16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "e4m3"}

# The split-K count S and granule G (the kernel's k-tile) each split-K call used, found from the full fixtures.
SPLITK = {
    ("f16", "256x256x4096"): "3:64",
    ("f16", "128x128x16384"): "12:64",
    ("bf16", "256x256x4096"): "3:64",
    ("bf16", "128x128x16384"): "11:64",
    ("tf32", "256x256x1024"): "8:32",
    ("tf32", "256x256x4096"): "12:32",
    ("tf32", "64x2816x1024"): "6:32",
    ("e4m3", "128x128x16384"): "6:128",
}
# The tf32 sm90_xmma "segment_k_on" kernel (a device memset first) at 1024x1024x4096: its whole tiles are the plain
# chain; the tiles it splits (tile column 15 here) are 15 pieces of k summed in binary32 as a pairwise tree over 16
# slots, the pieces right-aligned (test_segment_k_tiles_are_15_pieces_summed_as_a_right_aligned_tree;
# docs/studies/tensorcore.md).
SEGMENT_K = ("tf32", "1024x1024x4096")


def _check():
    spec = importlib.util.spec_from_file_location("cublas_check", REPO / "studies" / "tensorcore" / "cublas_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The raw operand bits as float64 values, and the model's result as the call's output bits: cublas_check.py's, the
# script that checks a probe's output (one definition for the script and the tests).
decode = _check().decode
expected_bits = _check().output_bits


def cases():
    for fmt, names in FILES.items():
        for name in names:
            z = np.load(FIX / f"{name}.npz")
            meta = json.loads(str(z["meta"]))
            for shape in meta:
                for key in z.files:
                    if key.startswith(f"{shape}__d_"):
                        yield pytest.param(fmt, name, shape, key.split("__d_")[1], id=f"{fmt}-{shape}-{key.split('__d_')[1]}")


def model(fmt: str, shape: str, variant: str) -> str:
    spec = {"f16": "tc-h100", "bf16": "tc-h100-bf16", "tf32": "tc-h100-tf32"}.get(fmt)
    if fmt == "e4m3":  # torch._scaled_mm: use_fast_accum=True is the bare wgmma chain, False promotes every 128
        spec = "tc-h100-fp8" if variant.endswith("fast") else "tc-h100-fp8,promote=128:fp32"
    if (fmt, shape) in SPLITK:
        spec += ",splitk=" + SPLITK[(fmt, shape)]
    return spec


@pytest.mark.parametrize("fmt,name,shape,variant", list(cases()))
def test_every_committed_output_is_reproduced(fmt, name, shape, variant):
    z = np.load(FIX / f"{name}.npz")
    meta = json.loads(str(z["meta"]))
    kernels = meta[shape][variant]
    # The split-K table agrees with the kernels the call launched.
    assert any("splitKreduce_kernel" in k for k in kernels) == ((fmt, shape) in SPLITK), kernels
    a, b = decode(z[f"{shape}__a"], fmt), decode(z[f"{shape}__b"], fmt)
    ref = z[f"{shape}__d_{variant}"]
    d = roundoff.gemm(a, b, inputs=INPUT[fmt], accumulation=model(fmt, shape, variant))
    got = expected_bits(d, ref, variant)
    if (fmt, shape) == SEGMENT_K:
        assert kernels[0] == "Memset (Device)"
        cols = z[f"{shape}__cols"]
        plain = cols < 64  # output tile column 0: one CTA, the plain chain; tile column 15 is split
        assert np.array_equal(got[:, plain], ref[:, plain])
        assert np.mean(got[:, ~plain] == ref[:, ~plain]) < 0.1  # the split tiles: the test below
        return
    wrong = np.argwhere(got != ref)
    assert wrong.size == 0, (f"{len(wrong)} of {ref.size} outputs differ under {model(fmt, shape, variant)}; "
                             f"first at {wrong[0].tolist()}: {got[tuple(wrong[0])]:#x} vs {ref[tuple(wrong[0])]:#x}")


def test_split_k_matters_on_these_data():
    # The plain chain and a wrong S both miss the split-K outputs (so the test above can fail).
    z = np.load(FIX / "bf16_1.npz")
    shape = "256x256x4096"
    a, b = decode(z[f"{shape}__a"], "bf16"), decode(z[f"{shape}__b"], "bf16")
    ref = z[f"{shape}__d_f32out"]
    for spec in ("tc-h100-bf16", "tc-h100-bf16,splitk=4:64", "tc-h100-bf16,splitk=3:1"):
        got = np.asarray(roundoff.gemm(a, b, inputs="bf16", accumulation=spec), np.float32).view(np.uint32)
        assert np.mean(got == ref) < 0.5, spec


def test_roundoff_gemm_reproduces_a_split_k_call(tmp_path: Path):
    # The CLI as a user would run it: the operands and cuBLAS's output as .npy, --like cublas-h100 --splitk 3.
    z = np.load(FIX / "bf16_1.npz")
    shape = "256x256x4096"
    np.save(tmp_path / "a.npy", decode(z[f"{shape}__a"], "bf16").astype(np.float32))
    np.save(tmp_path / "b.npy", decode(z[f"{shape}__b"], "bf16").astype(np.float32))
    np.save(tmp_path / "e.npy", z[f"{shape}__d_f32out"].view(np.float32))
    np.save(tmp_path / "e16.npy", (z[f"{shape}__d_bf16out_noreduced"].astype(np.uint32) << 16).view(np.float32))

    def gemm(*args):
        return subprocess.run([str(cli_path()), "gemm", "a.npy", "b.npy", "--inputs", "bf16", "--json", *args],
                              capture_output=True, text=True, cwd=tmp_path)

    for out, expect in (("d.npy", ["e.npy"]), ("d16.npy", ["e16.npy", "--expect-format", "bf16"])):
        r = gemm("--like", "cublas-h100", "--splitk", "3", "--out", out, "--expect", *expect)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["accumulation"] == "acc=fp32:toward-zero,order=seq,outer=fp32,fused,group=16,extra=2," \
            "align=toward-zero,normalize=toward-zero,carry=6,anchor=exp-sum:-126,edges=inf-pos-zero,splitk=3:64:nearest-even"
        assert j["expect"]["differing_elements"] == 0 and j["out_dtype"] == "float32"
    assert np.array_equal(np.load(tmp_path / "d.npy").view(np.uint32), z[f"{shape}__d_f32out"])
    r = gemm("--like", "cublas-h100", "--splitk", "4", "--out", "d4.npy", "--expect", "e.npy")
    assert r.returncode == 1
    j = json.loads(r.stdout)
    assert j["expect"]["differing_elements"] > 0 and j["expect"]["first_difference"] is not None
    # --splitk auto finds S: 1 (no split) and 2 miss, 3 reproduces the call.
    r = gemm("--like", "cublas-h100", "--splitk", "auto", "--out", "da.npy", "--expect", "e.npy")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [t["splitk"] for t in j["splitk_search"]] == [1, 2, 3]
    assert [t["differing_elements"] > 0 for t in j["splitk_search"]] == [True, True, False]
    assert j["spec"].endswith("splitk=3:64:nearest-even") and j["expect"]["differing_elements"] == 0


def _segment_k():
    spec = importlib.util.spec_from_file_location("segment_k", REPO / "studies" / "tensorcore" / "segment_k.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_segment_k_tiles_are_15_pieces_summed_as_a_right_aligned_tree():
    # The segment-K kernel's split tiles (tile column 15): the 128 k-iterations of 32 cut into 15 pieces, 7 of 8
    # then 8 of 9, each tc-h100-tf32 chained from zero, the 15 results added in binary32 (nearest-even) as a
    # pairwise tree over 16 slots with the first slot empty: every committed output, bit for bit (the tree was
    # read off the order probe on an H200, notebooks-data/cublas-h200-probe-2026-11-30).
    sk = _segment_k()
    a, b, d, rows, cols, kernels = sk.load(FIX / "tf32_2.npz")
    assert kernels[0] == "Memset (Device)" and "segment_k_on" in kernels[1]
    split = cols >= 960
    meas = d[:, split]
    pieces = sk.Pieces(a, b[:, split])
    bounds = sk.balanced(15, "last")
    assert bounds == [0, 8, 16, 24, 32, 40, 48, 56, 65, 74, 83, 92, 101, 110, 119, 128]
    P = pieces.split(bounds)
    got = sk.tree_sum(P)
    wrong = np.argwhere(got != meas)
    assert wrong.size == 0, f"{len(wrong)} of {meas.size} split outputs differ, first at {wrong[0].tolist()}"
    assert sk.within_bound(P, meas).all()  # the error bound of any order of 14 binary32 additions
    # The test can fail: the other orders and the neighbouring splits each leave many outputs unexplained.
    for other in (sk.pairwise_sum(P), sk.seq_sum(P), sk.seq_sum(P, range(14, -1, -1)),
                  sk.tree_sum(P[::-1]), sk.tree_sum(np.concatenate([P, np.zeros_like(P[:1])]))):
        assert np.mean(other == meas) < 0.8
    for split_ in (sk.balanced(15, "first"), sk.balanced(16, "last"), sk.balanced(14, "last")):
        assert np.mean(sk.tree_sum(pieces.split(split_)) == meas) < 0.8, split_


def test_every_order_enumerates_the_sums_of_all_orders():
    # The subset DP behind "every order enumerated" against brute force over all 6! orders, both roundings.
    import itertools
    from fractions import Fraction
    sk = _segment_k()
    rng = np.random.default_rng(3)
    for _ in range(10):
        p = (rng.standard_normal(6) * 2.0 ** rng.integers(-3, 3, 6)).astype(np.float32).astype(np.float64)
        for toward_zero in (False, True):
            brute = {float(sk.seq_sum(p[:, None], o, toward_zero=toward_zero)[0])
                     for o in itertools.permutations(range(6))}
            assert brute == sk.every_order(p, toward_zero)
    # Truncated binary32 addition against exact rationals: toward zero, and the last binary32 value that is.
    x = (rng.standard_normal(3000) * 2.0 ** rng.integers(-40, 40, 3000)).astype(np.float32).astype(np.float64)
    y = (rng.standard_normal(3000) * 2.0 ** rng.integers(-40, 40, 3000)).astype(np.float32).astype(np.float64)
    y[:500] = -x[:500] * (1 + 2.0 ** -23)
    y[500:600] = -x[500:600]
    got = sk.add_toward_zero(x, y)
    assert np.array_equal(got, got.astype(np.float32).astype(np.float64))
    for u, v, g in zip(x, y, got):
        exact = Fraction(u) + Fraction(v)
        assert abs(Fraction(g)) <= abs(exact) and (g == 0 or np.sign(g) == np.sign(exact))
        if Fraction(g) != exact:
            nxt = np.nextafter(np.float32(g), np.float32(np.inf if exact > 0 else -np.inf))
            assert abs(Fraction(float(nxt))) > abs(exact)
