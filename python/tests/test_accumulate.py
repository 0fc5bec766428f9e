"""roundoff.Accumulation, dot and gemm: against the C++ library (the CLI's dot), against an exact rational
implementation of the sequential/pairwise/blocked orders written here, and gemm against dot per output."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import roundoff
from conftest import assert_same_bits, cli_json, exact_round, hex_value

PRESETS = ["fp16-seq", "fp16-unfused-seq", "fp16-pairwise", "fp16-kahan", "fp16-splitk32-fp32", "bf16-seq",
           "fp32-seq", "fp32-pairwise", "tc-v100", "tc-a100", "tc-h100", "tc-h100-f16acc", "ane-tile4",
           "fp16-promote128-fp32"]


def fp16_vector(rng, n, spread=8):
    return roundoff.round(rng.standard_normal(n) * 2.0 ** rng.integers(-spread, spread, n), "fp16")


def test_accumulation_values():
    a = roundoff.Accumulation("fp16-seq")
    assert a.canonical == "fp16-seq" and a.format.name == "fp16" and a.order == "seq" and a.fused
    assert roundoff.Accumulation(a.spec) == a
    b = roundoff.Accumulation("tc-h100-fp8,promote=128:fp32")
    assert b.promote_every == 128 and b.result_format.name == "fp32"
    assert set(PRESETS) <= set(roundoff.accumulations())


def test_accumulation_flush():
    # The M1 Neural Engine's subnormal flush (accumulate.hpp `flush`): two fp16 denormals summed in a matmul give
    # +0 under ane-tile4-ftz, the denormal under ane-tile4.
    ftz = roundoff.Accumulation("ane-tile4-ftz")
    assert ftz.flush == "tile" and ftz == roundoff.Accumulation("ane-tile4,flush=tile")
    assert roundoff.Accumulation("ane-tile4").flush == "none" and "ane-tile4-ftz" in roundoff.accumulations()
    step = roundoff.Accumulation("ane-tile4,flush=tile+step:fp16")
    assert step.flush == "tile+step:fp16" and roundoff.Accumulation(step.canonical) == step
    x, ones = np.array([3 * 2.0 ** -24, 5 * 2.0 ** -24]), np.ones(2)
    assert roundoff.dot(x, ones, inputs="fp16", accumulation="ane-tile4") == 2.0 ** -21
    got = roundoff.dot(x, ones, inputs="fp16", accumulation="ane-tile4-ftz")
    assert got == 0.0 and not np.signbit(got)
    with pytest.raises(ValueError, match="sideways"):
        roundoff.Accumulation("ane-tile4,flush=sideways")


@pytest.mark.parametrize("acc", PRESETS)
def test_dot_matches_cli(cli, acc):
    rng = np.random.default_rng(len(acc))
    for n in (1, 7, 33, 300):
        x, y = fp16_vector(rng, n), fp16_vector(rng, n)
        got = roundoff.dot(x, y, inputs="fp16", accumulation=acc)
        out = cli("dot", "--inputs", "fp16", "--accumulation", acc, "--json",
                  "--x", ",".join(v.hex() for v in x), "--y", ",".join(v.hex() for v in y))
        want = hex_value(cli_json(out)[0]["result"])
        assert_same_bits([got], [want], f"{acc} n={n}")
        got_sum = roundoff.dot(x, inputs="fp16", accumulation=acc)
        out = cli("dot", "--inputs", "fp16", "--accumulation", acc, "--json", "--x", ",".join(v.hex() for v in x))
        assert_same_bits([got_sum], [hex_value(cli_json(out)[0]["result"])], f"sum {acc} n={n}")


def test_stochastic_dot_matches_cli_and_is_reproducible(cli):
    rng = np.random.default_rng(2)
    x, y = fp16_vector(rng, 200), fp16_vector(rng, 200)
    a = roundoff.dot(x, y, inputs="fp16", accumulation="fp16-sr", seed=7, stream=3)
    assert a == roundoff.dot(x, y, inputs="fp16", accumulation="fp16-sr", seed=7, stream=3)
    out = cli("dot", "--inputs", "fp16", "--accumulation", "fp16-sr", "--seed", "7", "--stream", "3", "--json",
              "--x", ",".join(v.hex() for v in x), "--y", ",".join(v.hex() for v in y))
    assert_same_bits([a], [hex_value(cli_json(out)[0]["result"])])
    with pytest.raises(ValueError, match="seed"):
        roundoff.dot(x, y, inputs="fp16", accumulation="fp16-sr")


# ---- an exact implementation of the orders (fused products, nearest-even), independent of the library ----

def _rnd(q: Fraction, fmt) -> Fraction:
    if q == 0:
        return Fraction(0)
    return Fraction(exact_round(abs(q), q < 0, fmt.p, fmt.emin, fmt.emax, fmt.max_finite, fmt.specials,
                                fmt.saturate, "nearest-even"))


def ref_seq(terms, fmt, start=None):
    s = _rnd(terms[0], fmt) if start is None else _rnd(start + terms[0], fmt)
    for t in terms[1:]:
        s = _rnd(s + t, fmt)
    return s


def ref_pairwise(terms, fmt):
    if len(terms) == 1:
        return _rnd(terms[0], fmt)
    h = len(terms) // 2
    return _rnd(ref_pairwise(terms[:h], fmt) + ref_pairwise(terms[h:], fmt), fmt)


def ref_blocked(terms, fmt, block, outer):
    sums = [ref_seq(terms[i:i + block], fmt) for i in range(0, len(terms), block)]
    return ref_seq(sums, outer)


@pytest.mark.parametrize("acc", ["fp16-seq", "bf16-seq", "fp32-seq", "fp16-pairwise", "fp16-splitk16-fp32",
                                 "acc=bf16,order=blocked:8,outer=fp16"])
def test_dot_matches_exact_orders(acc):
    a = roundoff.Accumulation(acc)
    rng = np.random.default_rng(4)
    for n in (1, 2, 5, 16, 17, 100):
        x, y = fp16_vector(rng, n, 6), fp16_vector(rng, n, 6)
        terms = [Fraction(u) * Fraction(v) for u, v in zip(x, y)]
        if a.order == "seq":
            want = ref_seq(terms, a.format)
        elif a.order == "pairwise":
            want = ref_pairwise(terms, a.format)
        else:
            want = ref_blocked(terms, a.format, a.block, a.outer_format)
        assert roundoff.dot(x, y, inputs="fp16", accumulation=a) == float(want), f"{acc} n={n}"


@pytest.mark.parametrize("acc", ["fp16-seq", "fp32-seq", "tc-h100", "tc-a100", "ane-tile4", "fp16-splitk32-fp32",
                                 "fp32-pairwise", "fp16-kahan"])
def test_gemm_is_dot_per_output_and_thread_independent(acc):
    rng = np.random.default_rng(8)
    M, K, N = 9, 70, 11
    A = roundoff.round(rng.standard_normal((M, K)), "fp16")
    B = roundoff.round(rng.standard_normal((K, N)), "fp16")
    C1 = roundoff.gemm(A, B, inputs="fp16", accumulation=acc, threads=1)
    C2 = roundoff.gemm(A, B, inputs="fp16", accumulation=acc, threads=2)
    assert_same_bits(C1, C2, "threads")
    for i in range(M):
        for j in range(N):
            assert_same_bits([C1[i, j]], [roundoff.dot(A[i], B[:, j].copy(), inputs="fp16", accumulation=acc)],
                             f"{acc} ({i}, {j})")
    # F-contiguous operands are read in place as transposes: the same bits
    assert_same_bits(roundoff.gemm(np.asfortranarray(A), np.asfortranarray(B), inputs="fp16", accumulation=acc), C1)
    # a non-contiguous view is copied: the same bits
    assert_same_bits(roundoff.gemm(np.repeat(A, 2, axis=1)[:, ::2], B, inputs="fp16", accumulation=acc), C1)


def test_gemm_starting_values_enter_exactly():
    rng = np.random.default_rng(9)
    A = roundoff.round(rng.standard_normal((4, 30)), "fp16")
    B = roundoff.round(rng.standard_normal((30, 5)), "fp16")
    Cin = roundoff.round(rng.standard_normal((4, 5)) * 100, "fp32")
    C = roundoff.gemm(A, B, Cin, inputs="fp16", accumulation="fp32-seq")
    fp32 = roundoff.Format("fp32")
    for i in range(4):
        for j in range(5):
            terms = [Fraction(A[i, k]) * Fraction(B[k, j]) for k in range(30)]
            assert C[i, j] == float(ref_seq(terms, fp32, start=Fraction(Cin[i, j])))


def test_gemm_mixed_inputs_and_overflows():
    a = np.array([[448.0, 448.0]])
    b = np.array([[57344.0], [57344.0]])
    c, ov = roundoff.gemm(a, b, inputs=("e4m3", "e5m2"), accumulation="fp16-seq", return_overflows=True)
    assert np.isinf(c[0, 0]) and ov >= 1
    with pytest.raises(ValueError, match=r"b\[0, 0\] = 57344.0 .* is not a value of e4m3"):
        roundoff.gemm(a, b, inputs="e4m3", accumulation="fp32-seq")


def test_gemm_stochastic_reproducible():
    rng = np.random.default_rng(10)
    A = roundoff.round(rng.standard_normal((6, 64)), "bf16")
    B = roundoff.round(rng.standard_normal((64, 6)), "bf16")
    c1 = roundoff.gemm(A, B, inputs="bf16", accumulation="bf16-sr", seed=1, threads=1)
    c2 = roundoff.gemm(A, B, inputs="bf16", accumulation="bf16-sr", seed=1, threads=2)
    assert_same_bits(c1, c2)
    assert not np.array_equal(c1, roundoff.gemm(A, B, inputs="bf16", accumulation="bf16-sr", seed=2))


def test_gemm_out_and_in_place_accumulation():
    rng = np.random.default_rng(11)
    A = roundoff.round(rng.standard_normal((5, 20)), "fp16")
    B = roundoff.round(rng.standard_normal((20, 3)), "fp16")
    C0 = roundoff.round(rng.standard_normal((5, 3)), "fp32")
    want = roundoff.gemm(A, B, C0, inputs="fp16", accumulation="fp32-seq")
    buf = np.empty((5, 3))
    assert roundoff.gemm(A, B, C0, inputs="fp16", accumulation="fp32-seq", out=buf) is buf
    assert_same_bits(buf, want)
    C = C0.copy()
    roundoff.gemm(A, B, C, inputs="fp16", accumulation="fp32-seq", out=C)  # C <- A.B + C
    assert_same_bits(C, want)
    with pytest.raises(ValueError, match="C-contiguous"):
        roundoff.gemm(A, B, inputs="fp16", accumulation="fp32-seq", out=np.empty((3, 5)).T)
    with pytest.raises(ValueError, match="shape"):
        roundoff.gemm(A, B, inputs="fp16", accumulation="fp32-seq", out=np.empty((5, 4)))
