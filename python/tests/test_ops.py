"""roundoff.Policy, Runner and op_error: against the CLI (same canonical text, same one-line errors, same
op-error records) and the Runner's matmul against the package's own gemm + round composition."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

import roundoff
from conftest import assert_same_bits


def test_policy_canonical_matches_cli(cli):
    for spec in ["ane-fp16", "ane-fp16,softmax=fp32", "amp-bf16,matmul.acc=tc-h100", "pure-fp16,attention=online"]:
        p = roundoff.Policy(spec)
        assert roundoff.Policy(p.canonical) == p
        out = "\n".join(cli("policy", "show", spec))
        assert p.canonical in out, spec


def test_policy_table_and_roles():
    p = roundoff.Policy("ane-fp16")
    rows = p.table()
    assert len(rows) == 3 * len(roundoff.ops())
    e = p.entry("matmul", "fwd")
    assert e["storage"].name == "fp16" and isinstance(e["accumulation"], roundoff.Accumulation)
    assert set(p.roles()) == {"weights", "master", "adam-m", "adam-v", "grads"}
    assert "ane-fp16" in roundoff.policies()


def test_policy_ftz_daz_fields(cli):
    p = roundoff.Policy("ane-guide,all.ftz=out,all.daz=on,softmax.fwd.ftz=all")
    e = p.entry("matmul", "fwd")
    assert (e["ftz"], e["daz"]) == ("out", "on")
    assert e["extras"] == "saturate=32768 nan=ane-inf ftz=out daz=on"
    assert p.entry("softmax", "fwd")["ftz"] == "all" and p.entry("softmax", "bwd-data")["ftz"] == "out"
    f = roundoff.Policy("fp32").entry("matmul")
    assert (f["ftz"], f["daz"], f["extras"]) == ("off", "off", "")
    assert roundoff.Policy(p.canonical) == p
    assert p.canonical.startswith("ane-guide,all.daz=on,") and "softmax.fwd.ftz=all" in p.canonical
    assert p.canonical in "\n".join(cli("policy", "show", p.canonical))


@pytest.mark.parametrize("bad", ["fp32,all.ftz=yes", "fp32,matmul.daz=all", "fp32,matmul=fp99", "fp32,nosuchop=fp16", "fp32,matmul.acc=[order=zig]"])
def test_policy_errors_are_the_cli_messages(cli, bad):
    with pytest.raises(ValueError) as e:
        roundoff.Policy(bad)
    r = cli("policy", "show", bad, ok=False)
    assert r.returncode == 2
    assert r.stderr.strip() == f"roundoff: {e.value}"


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError) as e:
        roundoff.Policy("ane-fp17")
    assert "ane-fp17" in str(e.value) and "ane-guide" in str(e.value) and "\n" not in str(e.value)


def test_format_and_accumulation_errors_are_one_line():
    for call, pat in [(lambda: roundoff.Format("fp17"), "fp17"),
                      (lambda: roundoff.Accumulation("tc-h999"), "tc-h999"),
                      (lambda: roundoff.round([1.0], "fp16", "sideways"), "sideways")]:
        with pytest.raises(ValueError, match=pat) as e:
            call()
        assert "\n" not in str(e.value)


def _fp16_policy_parts(policy, pass_):
    e = roundoff.Policy(policy).entry("matmul", pass_)
    return e["storage"], e["compute"], e["rounding"], e["accumulation"]


@pytest.mark.parametrize("policy", ["ane-fp16", "amp-bf16", "fp32,matmul=fp16/fp32/tc-h100", "ane-guide",
                                    "pure-fp16"])
def test_runner_matmul_equals_gemm_and_round(policy):
    rng = np.random.default_rng(0)
    x, w, dy = rng.standard_normal((6, 40)), rng.standard_normal((12, 40)) / 6, rng.standard_normal((6, 12))
    run = roundoff.Runner(policy)
    st, co, mo, acc = _fp16_policy_parts(policy, "fwd")
    xq, wq = roundoff.round(x, st, mo), roundoff.round(w, st, mo)
    want = roundoff.round(roundoff.round(roundoff.gemm(xq, wq.T, inputs=st, accumulation=acc), co, mo), st, mo)
    assert_same_bits(run.matmul_forward(x, w), want, "fwd")
    st, co, mo, acc = _fp16_policy_parts(policy, "bwd-data")
    dyq, wq = roundoff.round(dy, st, mo), roundoff.round(w, st, mo)
    want = roundoff.round(roundoff.round(roundoff.gemm(dyq, wq, inputs=st, accumulation=acc), co, mo), st, mo)
    assert_same_bits(run.matmul_backward_data(dy, w), want, "bwd-data")
    st, co, mo, acc = _fp16_policy_parts(policy, "bwd-weight")
    dyq, xq = roundoff.round(dy, st, mo), roundoff.round(x, st, mo)
    want = roundoff.round(roundoff.round(roundoff.gemm(dyq.T, xq, inputs=st, accumulation=acc), co, mo), st, mo)
    assert_same_bits(run.matmul_backward_weight(dy, x), want, "bwd-weight")


def test_runner_shadow_records_and_ops():
    rng = np.random.default_rng(1)
    B, T, NH, hs = 1, 8, 2, 4
    q, k, v = (rng.standard_normal((B, T, NH * hs)) for _ in range(3))
    run = roundoff.Runner("ane-fp16", shadow=True)
    pre = run.attn_scores_forward(q, k, heads=NH)
    att = run.softmax_forward(pre)
    out = run.attn_values_forward(att, v)
    assert pre.shape == (B, NH, T, T) and out.shape == q.shape
    assert np.allclose(att.sum(-1), 1, atol=T * 2.0**-10)
    x = rng.standard_normal((4, 16))
    y, rstd = run.rmsnorm_forward(x, np.ones(16), eps=1e-5)
    assert np.allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5), rtol=2e-3)
    mean, losses, probs = run.cross_entropy_forward(rng.standard_normal((4, 10)), [1, 2, 3, 9])
    assert math.isclose(mean, losses.mean(), rel_tol=1e-12)
    dl = run.cross_entropy_backward_data(probs, [1, 2, 3, 9], grad_scale=0.25)
    assert dl.shape == (4, 10)
    recs = run.records()
    assert {(r["op"], r["pass"]) for r in recs} >= {("attn-scores", "fwd"), ("softmax", "fwd"),
                                                    ("attn-values", "fwd"), ("rmsnorm", "fwd"),
                                                    ("cross-entropy", "fwd")}
    assert all(r["count"] > 0 and r["max_ulp"] <= 64 for r in recs if r["pass"] == "fwd")
    with pytest.raises(ValueError, match="heads = 3 does not divide"):
        run.attn_scores_forward(q, k, heads=3)
    with pytest.raises(ValueError, match="outside"):
        run.cross_entropy_forward(rng.standard_normal((2, 10)), [0, 10])
    with pytest.raises(AttributeError, match="ops:"):
        run.no_such_op


def test_op_error_matches_cli(cli, tmp_path):
    recs = roundoff.op_error("matmul", "ane-fp16", shape="tokens=32,in=128,out=64", rows=4, scale=1.0, seed=3)
    out = tmp_path / "oe"
    cli("op-error", "--op", "matmul", "--precision", "ane-fp16", "--shape", "tokens=32,in=128,out=64",
        "--sigma", "1", "--rows", "4", "--seed", "3", "--out", str(out))
    csvs = [p for p in Path(out).rglob("*.csv")]
    rows = [r for p in csvs for r in csv.DictReader(open(p)) if "max_ulp" in r]
    assert rows, f"no op-error rows in {csvs}"
    by = {(r["pass"], r["tensor"]): r for r in rows}
    for r in recs:
        c = by[(r["pass"], r["tensor"])]
        for key in ("count", "above_1ulp", "underflow"):
            assert int(c[key]) == r[key], (r["pass"], key)
        for key in ("median_ulp", "p95_ulp", "max_ulp", "norm_rel"):
            assert math.isclose(float(c[key]), r[key], rel_tol=1e-9, abs_tol=1e-300), (r["pass"], key)


def test_runner_records_the_accumulation_error_of_quantized_gemms():
    # mxfp8: x and w stored in bf16, then quantized to MX E4M3 blocks of 32 along K; fp32-seq accumulation, bf16 out.
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((8, 64)), rng.standard_normal((16, 64)) / 8
    run = roundoff.Runner("mxfp8", shadow=True)
    y = run.matmul_forward(x, w)
    rec = run.records()[0]
    acc = rec["acc"]
    assert acc is not None and acc["count"] == y.size and acc["units"] == 8
    # The written-out reference: the product of the decoded operands, exact in binary64 here (E4M3 significands of
    # 4 bits, 64 products of 8 bits within a few binades), against the op's output.
    xq = roundoff.quantize(roundoff.round(x, "bf16"), "mxfp8-e4m3").values
    wq = roundoff.quantize(roundoff.round(w, "bf16"), "mxfp8-e4m3").values
    r = xq @ wq.T
    want = np.linalg.norm(y - r) / np.linalg.norm(r)
    assert math.isclose(acc["norm_rel"], want, rel_tol=1e-9), (acc["norm_rel"], want)
    assert math.isclose(acc["signed_rel"], float(((y - r) * r).sum() / (r * r).sum()), rel_tol=1e-9, abs_tol=1e-15)
    # Only the fp32 accumulation and the bf16 output rounding are left: at most u_bf16 = 2^-8 (+ K·2^-24) normwise,
    # while the top-level error, against the unquantized operands' product, carries the E4M3 quantization too.
    assert 0 < acc["norm_rel"] <= 2.0**-8 + 64 * 2.0**-24
    assert rec["norm_rel"] > acc["norm_rel"]
    assert set(acc) >= {"median_ulp", "p95_ulp", "max_ulp", "max_rel", "unit_median", "unit_p95", "unit_max"}
    assert acc["unit_median"] <= acc["unit_p95"] <= acc["unit_max"]
    # An unquantized GEMM has no such record.
    plain = roundoff.Runner("ane-fp16", shadow=True)
    plain.matmul_forward(x, w)
    assert plain.records()[0]["acc"] is None and "signed_rel" in plain.records()[0]
