"""roundoff.Format, round, representable, to_bits/from_bits, arith: bit for bit against the C++ library (the
CLI) and against an exact rational reference written here, on random and edge-class inputs, every mode."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import roundoff
from conftest import assert_same_bits, cli_json, edge_values, exact_round, exact_round_value, hex_value

DETERMINISTIC = ["nearest-even", "nearest-away", "toward-zero", "up", "down", "odd"]
FORMATS = ["fp16", "bf16", "e4m3", "e5m2", "tf32", "fp32", "p5:emin-3:emax4:sat", "p3:emin-2:emax3:nospecials"]


def test_format_constants_and_names():
    f = roundoff.Format("fp16")
    assert (f.p, f.emin, f.emax, f.subnormals, f.specials, f.saturate) == (11, -14, 15, True, "ieee", False)
    assert f.max_finite == 65504.0 and f.min_normal == 2.0**-14 and f.min_positive == 2.0**-24
    assert f.unit_roundoff == 2.0**-11 and f.encoding == (5, 10, 15)
    assert roundoff.Format(p=4, emin=-6, emax=8, specials="nan-only") == roundoff.Format("e4m3")
    assert roundoff.Format("e4m3").max_finite == 448.0
    assert [g.name for g in roundoff.formats()][:3] == ["fp64", "fp32", "tf32"]
    custom = roundoff.Format("p5:emin-3:emax4:nosub:sat")
    assert (custom.p, custom.subnormals, custom.saturate) == (5, False, True)
    assert roundoff.Format(custom.name) == custom and hash(custom) == hash(roundoff.Format(custom.name))
    import pickle
    assert pickle.loads(pickle.dumps(custom)) == custom


def test_formats_match_cli_table(cli):
    text = "\n".join(cli("formats"))
    for f in roundoff.formats():
        assert f.name in text


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", DETERMINISTIC + ["stochastic"])
def test_round_matches_cli(cli, fmt, mode):
    f = roundoff.Format(fmt)
    rng = np.random.default_rng(abs(hash((fmt, mode))) % 2**32)
    x = edge_values(f, rng, 60)
    x = np.concatenate([x, [np.inf, -np.inf, -0.0] + ([np.nan] if f.specials != "none" else [])])
    got = roundoff.round(x, f, mode, seed=11 if mode == "stochastic" else None)
    args = ["round", "-f", fmt, "-m", mode, "--json"] + (["--seed", "11"] if mode == "stochastic" else [])
    want = [hex_value(j["result"]) for j in cli_json(cli(*args, "--", *[v.hex() for v in x]))]
    assert_same_bits(got, want, f"round {fmt} {mode}")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "e4m3", "e5m2", "tf32", "p5:emin-3:emax4:sat",
                                 "p3:emin-2:emax3:nospecials"])
@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_round_matches_exact_reference(fmt, mode):
    f = roundoff.Format(fmt)
    x = edge_values(f, np.random.default_rng(5), 400)
    want = [exact_round_value(v, f, mode) for v in x]
    assert_same_bits(roundoff.round(x, f, mode), want, f"{fmt} {mode}")


def test_round_every_fp16_encoding_is_fixed_and_bits_round_trip():
    bits = np.arange(0, 1 << 16, dtype=np.uint64)
    v = roundoff.from_bits(bits, "fp16")
    assert_same_bits(v, np.frombuffer(bits.astype(np.uint16).tobytes(), dtype=np.float16).astype(np.float64))
    finite = np.isfinite(v) | np.isinf(v)
    for mode in DETERMINISTIC + ["stochastic"]:
        assert_same_bits(roundoff.round(v, "fp16", mode, seed=3), v, mode)
    assert np.array_equal(roundoff.to_bits(v[finite], "fp16"), bits[finite])


def test_float32_path_matches_float64_path():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(100_003) * 2.0 ** rng.integers(-30, 20, 100_003)).astype(np.float32)
    for fmt in ["fp16", "bf16", "e4m3", "tf32"]:
        for mode in DETERMINISTIC + ["stochastic"]:
            r32 = roundoff.round(x, fmt, mode, seed=9, stream=2)
            r64 = roundoff.round(x.astype(np.float64), fmt, mode, seed=9, stream=2)
            assert r32.dtype == np.float32 and r64.dtype == np.float64
            assert_same_bits(r32.astype(np.float64), r64, f"{fmt} {mode}")
    assert roundoff.round(x, "fp64").dtype == np.float64


def test_stochastic_is_reproducible_and_index_based():
    x = np.full(10_000, 0.1)
    a = roundoff.round(x, "bf16", "stochastic", seed=42)
    b = roundoff.round(x, "bf16", "stochastic", seed=42)
    assert_same_bits(a, b)
    # element i uses draw i: rounding a slice with first index 0 equals the head of the whole
    assert_same_bits(roundoff.round(x[:100], "bf16", "stochastic", seed=42), a[:100])
    assert not np.array_equal(a, roundoff.round(x, "bf16", "stochastic", seed=43))
    assert not np.array_equal(a, roundoff.round(x, "bf16", "stochastic", seed=42, stream=1))
    # unbiased: the mean is within 5 standard errors of 0.1
    lo, hi = np.unique(a)
    p = (0.1 - lo) / (hi - lo)
    assert abs(np.mean(a == hi) - p) < 5 * np.sqrt(p * (1 - p) / x.size)
    # the draw is SplitMix64 from (seed, stream, index), as documented in numerics/rounding.hpp
    assert roundoff._roundoff.draw(42, 0, 0) != roundoff._roundoff.draw(42, 0, 1)


def test_round_to_odd_and_scalars():
    assert roundoff.round(1 + 2.0**-11, "fp16", "odd") == 1 + 2.0**-10
    assert roundoff.round(1.0, "fp16", "odd") == 1.0
    assert isinstance(roundoff.round(0.1, "fp16"), np.floating)
    assert np.signbit(roundoff.round(-1e-30, "fp16"))


ARITH = ["add", "sub", "mul", "div", "fma", "sqrt", "exp", "log", "sigmoid", "tanh", "rsqrt", "sin", "cos", "erf"]


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("mode", ["nearest-even", "toward-zero", "up", "odd", "stochastic"])
def test_arith_matches_cli(cli, op, mode):
    n = {"fma": 3, "sqrt": 1}.get(op, 2 if op in ("add", "sub", "mul", "div") else 1)
    rng = np.random.default_rng(len(op) * 7 + len(mode))
    # operands that are values of every format tested (the CLI refuses others; the Python API takes any double)
    ops = [roundoff.round(rng.standard_normal(6) * 2.0 ** rng.integers(-8, 8, 6), "e4m3") for _ in range(n)]
    if op in ("sqrt", "log", "rsqrt"):
        ops[0] = np.abs(ops[0])
    ops[0][0] = 0.0
    seed = 5 if mode == "stochastic" else None
    for fmt in ["fp16", "bf16", "e4m3"]:
        got = roundoff.arith(op, *ops, format=fmt, mode=mode, seed=seed, stream=0)
        for i in range(6):
            # the CLI's arith rounds one operation with draw 0 of stream 0; Python's element i uses draw i
            one = roundoff.arith(op, *[o[i:i + 1] for o in ops], format=fmt, mode=mode, seed=seed)
            args = ["arith", "-f", fmt, "-m", mode, "--json"] + (["--seed", "5"] if seed else [])
            want = hex_value(cli_json(cli(*args, op, "--", *[o[i].hex() for o in ops]))[0]["result"])
            assert_same_bits(one, [want], f"{op} {fmt} {mode} element {i}")
            if mode != "stochastic":
                assert_same_bits(got[i:i + 1], [want], f"{op} {fmt} {mode} element {i}")


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "fma"])
@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_arith_matches_exact_reference(op, mode):
    rng = np.random.default_rng(3)
    f = roundoff.Format("bf16")
    x, y, z = (roundoff.round(rng.standard_normal(300) * 2.0 ** rng.integers(-60, 60, 300), "fp32")
               for _ in range(3))
    got = roundoff.arith(op, x, y, z if op == "fma" else None, format=f, mode=mode)
    for i in range(300):
        a, b, c = Fraction(x[i]), Fraction(y[i]), Fraction(z[i])
        q = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b if b else None, "fma": a * b + c}[op]
        if q is None or q == 0:
            continue
        want = exact_round(abs(q), q < 0, f.p, f.emin, f.emax, f.max_finite, f.specials, f.saturate, mode)
        assert_same_bits([got[i]], [want], f"{op} {mode} {x[i]!r} {y[i]!r} {z[i]!r}")


def test_arith_broadcasts():
    r = roundoff.arith("add", np.ones((3, 1)), np.array([2.0**-11, 2.0**-10]), format="fp16")
    assert r.shape == (3, 2) and r[0, 0] == 1.0 and r[0, 1] == 1 + 2.0**-10


@pytest.mark.parametrize("fmt", FORMATS + ["fp64", "p5:emin-3:emax4:nosub", "e4m3"])
def test_fast_membership_check_agrees_with_the_definition(fmt):
    """gemm/dot's operand check (first_not_representable, a bit test) against is_representable per element."""
    f = roundoff.Format(fmt)
    rng = np.random.default_rng(12)
    vals = np.concatenate([edge_values(f, rng, 300), roundoff.round(edge_values(f, rng, 300), f),
                           [np.inf, -np.inf, np.nan, 5e-324, -0.0, f.max_finite, -f.max_finite]])
    mask = roundoff.representable(vals, f)
    for i in range(vals.size):
        got = roundoff._roundoff.first_not_representable(vals[i:i + 1].copy(), f)
        assert got == (-1 if mask[i] else 0), (fmt, vals[i].hex(), bool(mask[i]))
