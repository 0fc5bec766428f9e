"""Bad input is refused with one clear line: wrong dtypes, shapes, values outside the format, unknown names."""
from __future__ import annotations

import numpy as np
import pytest

import roundoff


def one_line(excinfo):
    assert "\n" not in str(excinfo.value)
    return str(excinfo.value)


def test_wrong_dtype():
    with pytest.raises(TypeError, match="complex128 is not supported") as e:
        roundoff.round(np.ones(3, dtype=complex), "fp16")
    one_line(e)
    with pytest.raises(TypeError, match="dtype <U1"):
        roundoff.round(np.array(["a"]), "fp16")
    with pytest.raises(ValueError, match="2\\*\\*53"):
        roundoff.round(np.array([2**60 + 1], dtype=np.int64), "fp64")
    assert roundoff.round(np.array([1, 2, 3], dtype=np.int16), "fp16").dtype == np.float64


def test_non_contiguous_inputs_are_read_correctly():
    x = np.arange(20.0).reshape(4, 5)[:, ::2] * 0.1
    assert np.array_equal(roundoff.round(x, "fp16"), roundoff.round(np.ascontiguousarray(x), "fp16"))


def test_out_arrays():
    x = np.linspace(0, 1, 10)
    buf = np.empty(10)
    r = roundoff.round(x, "fp16", out=buf)
    assert r is buf or np.shares_memory(r, buf)
    assert np.array_equal(buf, roundoff.round(x, "fp16"))
    roundoff.round(x, "fp16", out=x)  # in place
    assert np.array_equal(x, buf)
    with pytest.raises(ValueError, match="C-contiguous"):
        roundoff.round(np.ones(5), "fp16", out=np.empty(10)[::2])
    with pytest.raises(TypeError, match="float64"):
        roundoff.round(np.ones(5), "fp16", out=np.empty(5, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        roundoff.round(np.ones(5), "fp16", out=np.empty(6))
    y = np.ones(4, dtype=np.float32)
    assert roundoff.round(y, "bf16", out=np.empty(4, dtype=np.float32)).dtype == np.float32


def test_mismatched_shapes():
    with pytest.raises(ValueError, match="inner dimensions differ"):
        roundoff.gemm(np.ones((2, 3)), np.ones((2, 3)), inputs="fp16", accumulation="fp16-seq")
    with pytest.raises(ValueError, match="same shape"):
        roundoff.dot(np.ones(3), np.ones(4), inputs="fp16", accumulation="fp16-seq")
    with pytest.raises(ValueError, match="must be 2-D"):
        roundoff.gemm(np.ones(3), np.ones((3, 1)), inputs="fp16", accumulation="fp16-seq")
    with pytest.raises(ValueError, match="c must be 2x1"):
        roundoff.gemm(np.ones((2, 3)), np.ones((3, 1)), np.ones((1, 1)), inputs="fp16", accumulation="fp16-seq")
    with pytest.raises(ValueError, match="do not broadcast"):
        roundoff.arith("add", np.ones(3), np.ones(4), format="fp16")


def test_values_outside_the_format():
    with pytest.raises(ValueError, match=r"x\[1\] = 0.1 .* is not a value of fp16; round it first") as e:
        roundoff.dot([1.0, 0.1], [1.0, 1.0], inputs="fp16", accumulation="fp32-seq")
    one_line(e)
    a = np.ones((3, 4))
    a[2, 1] = 1 + 2.0**-20
    with pytest.raises(ValueError, match=r"a\[2, 1\]"):
        roundoff.gemm(a, np.ones((4, 2)), inputs="fp16", accumulation="fp32-seq")
    with pytest.raises(ValueError, match=r"a\[2, 1\]"):  # the same index when a is read as a transpose
        roundoff.gemm(np.asfortranarray(a), np.ones((4, 2)), inputs="fp16", accumulation="fp32-seq")
    with pytest.raises(ValueError, match="not a value of e4m3"):
        roundoff.to_bits([500.0], "e4m3")
    with pytest.raises(ValueError, match="more than the 16 bits"):
        roundoff.from_bits([1 << 16], "fp16")


def test_unknown_names():
    for call, pat in [(lambda: roundoff.Format("fp9"), "fp9"),
                      (lambda: roundoff.Accumulation("tc-b300"), "tc-b300"),
                      (lambda: roundoff.Policy("ane-fp64"), "ane-fp64"),
                      (lambda: roundoff.round(1.0, "fp16", "nearest"), "nearest"),
                      (lambda: roundoff.arith("pow", 1.0, 2.0, format="fp16"), "pow"),
                      (lambda: roundoff.op_error("relu", "fp32"), "relu")]:
        with pytest.raises(ValueError, match=pat) as e:
            call()
        one_line(e)
    with pytest.raises(ValueError, match="specials 'inf' is not one of"):
        roundoff.Format(p=5, emin=-3, emax=4, specials="inf")
    with pytest.raises(ValueError):
        roundoff.Format(p=80, emin=-3, emax=4)
    with pytest.raises(TypeError, match="expected a roundoff.Format"):
        roundoff.round(1.0, 16)


def test_nan_for_a_format_without_nan_is_refused(cli):
    f = "p5:emin-6:emax7:nospecials"
    with pytest.raises(ValueError, match=r"x\[1\] is NaN, which p5:emin-6:emax7:nospecials cannot encode"):
        roundoff.round([1.0, np.nan], f)
    with pytest.raises(ValueError, match=r"result\[1\] of div is NaN"):
        roundoff.arith("div", [1.0, 0.0], [1.0, 0.0], format=f)
    assert roundoff.arith("div", 1.0, 0.0, format=f) == roundoff.Format(f).max_finite  # saturates: a value
    assert cli("round", "-f", f, "nan", ok=False).returncode == 2  # the CLI refuses it too
    assert np.isnan(roundoff.round(np.nan, "e4m3"))  # a NaN-only format keeps it


def test_arity_and_seed_errors():
    with pytest.raises(ValueError, match="fma takes 3 operands"):
        roundoff.arith("fma", 1.0, 2.0, format="fp16")
    with pytest.raises(ValueError, match="seed"):
        roundoff.round(0.1, "fp16", "stochastic")
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        roundoff.round(0.1, "fp16", "stochastic", seed=-1)
