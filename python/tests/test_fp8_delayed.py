"""Delayed fp8 scaling (Transformer Engine's DelayedScaling, ops/fp8_scaling.hpp) on the Python Runner: the per-step
protocol of the trainer (Runner.train_step: record every cast's amax, update the scales at the step's end) gives the
scales of TE's rule, written out here independently of the C++ code, and the GEMMs cast with them."""
from __future__ import annotations

import numpy as np
import pytest

import roundoff

FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
F32 = np.float32


def amax(v) -> np.float32:
    """TE's amax: max |fp32(v_i)| (fp32 rounding is monotone, so fp32 of the binary64 max)."""
    return F32(np.max(np.abs(v)))


def te_scales(step_amaxes, H: int, algo: str, margin: int, elem: str):
    """TE's DelayedScaling, written out as its documentation states it: after the update ending step k the amax is
    the max of the amaxes of the last H steps (algo "max") or step k's own ("most-recent"); the scale is
    fp8_max / amax / 2^margin in binary32 (unchanged while that amax is 0); scale 1 before the first update.
    Returns the scale after each step."""
    scale, out = F32(1.0), []
    for k in range(len(step_amaxes)):
        window = step_amaxes[max(0, k - H + 1):k + 1] if algo == "max" else [step_amaxes[k]]
        a = F32(max(window))
        if np.isfinite(a) and a > 0:
            scale = F32(F32(FP8_MAX[elem] * 2.0 ** -margin) / a)
        out.append(scale)
    return out


def bf16(v):
    return roundoff.round(np.asarray(v, dtype=np.float64), "bf16")


def steps_data(n_steps: int, seed: int = 0):
    """Per step x (8, 32), w (16, 32), dy (8, 16), bf16 values (the presets' storage), whose amaxes change from step
    to step by factors up to 50 (up and down, so that the window's maximum both grows and is dropped)."""
    rng = np.random.default_rng(seed)
    factors = [1.0, 6.0, 0.25, 0.5, 3.0, 0.125, 0.75][:n_steps]
    out = []
    for f in factors:
        x = bf16(rng.standard_normal((8, 32)) * f)
        w = bf16(rng.standard_normal((16, 32)) / 8 * (2.0 - f / 8))
        dy = bf16(rng.standard_normal((8, 16)) * f / 1000)
        out.append((x, w, dy))
    return out


def train(run: roundoff.Runner, data, name="fc1"):
    """One train_step per element of data: the three GEMMs of a linear layer, forward and backward."""
    for k, (x, w, dy) in enumerate(data):
        with run.train_step(k):
            run.matmul_forward(x, w, name=name)
            run.matmul_backward_data(dy, w, name=name)
            run.matmul_backward_weight(dy, x, name=name)


@pytest.mark.parametrize("policy,H,algo,margin", [
    ("te-fp8-delayed", 1024, "max", 0),                                # TE's defaults: the history outlasts the run
    ("te-fp8-delayed,fp8-scaling=delayed:3:max:1", 3, "max", 1),       # the window slides; a margin
    ("te-fp8-delayed,fp8-scaling=delayed:4:most-recent:0", 4, "most-recent", 0),
])
def test_scales_follow_te_rule_step_by_step(policy, H, algo, margin):
    data = steps_data(7)
    run = roundoff.Runner(policy)
    assert run.fp8_scaling == f"delayed:{H}:{algo}:{margin}"
    roles = {"x": ("e4m3", 0), "w": ("e4m3", 1), "dy": ("e5m2", 2)}
    expected = {r: te_scales([amax(d[i]) for d in data], H, algo, margin, e) for r, (e, i) in roles.items()}
    for k, step in enumerate(data):
        train(run, [step])
        st = run.fp8_state()
        assert sorted(st) == [f"L-1.matmul.fc1.{r}" for r in ("dy", "w", "x")]
        for r, (elem, i) in roles.items():
            t = st[f"L-1.matmul.fc1.{r}"]
            assert t["elem"] == elem
            assert F32(t["scale"]) == expected[r][k], (r, k)
            assert t["scale"] != 1.0  # from the first update on
            assert F32(t["scale_inv"]) == F32(1) / F32(t["scale"])
            # the stored window: 0 (the next step's slot), then the last H-1 amaxes, oldest first
            hist = [amax(d[i]) for d in data[:k + 1]][-(H - 1):]
            want = np.zeros(H, dtype=np.float32)
            want[H - len(hist):] = hist
            np.testing.assert_array_equal(t["history"], want)
    # the scales changed across steps: up once when H outlasts the run, also down when the window drops the maximum
    assert len(set(expected["x"])) >= (2 if H > len(data) else 3)


def expected_forward(x, w, sx, sw):
    """The forward GEMM of te-fp8-delayed with per-tensor scales sx, sw, written out: codes q = e4m3(fp32(x)·s)
    (nearest-even, saturating at ±448), the tc-h100-fp8 GEMM of the codes, D = fp32(P · fp32(ix·iw)) with
    i = fp32(1/s) (the exact per-tensor model, docs/policy.md), stored in bf16."""
    def codes(v, s):
        scaled = np.clip(F32(v.astype(np.float32) * F32(s)), -448.0, 448.0)
        return roundoff.round(scaled.astype(np.float64), "e4m3")
    P = roundoff.gemm(codes(x, sx), codes(w, sw).T, inputs="e4m3", accumulation="tc-h100-fp8")
    ab = F32(F32(1) / F32(sx)) * F32(F32(1) / F32(sw))
    return bf16((P.astype(np.float32) * ab).astype(np.float64))


def test_gemms_cast_with_the_updated_scales():
    data = steps_data(3, seed=1)
    run = roundoff.Runner("te-fp8-delayed")
    x, w, _ = data[0]
    fresh = run.matmul_forward(x, w, name="fc1")  # before any update: scale 1
    np.testing.assert_array_equal(fresh, expected_forward(x, w, 1.0, 1.0))
    train(run, data)
    st = run.fp8_state()
    sx, sw = st["L-1.matmul.fc1.x"]["scale"], st["L-1.matmul.fc1.w"]["scale"]
    assert sx != 1.0 and sw != 1.0
    y = run.matmul_forward(x, w, name="fc1")  # evaluation: reads the scales
    np.testing.assert_array_equal(y, expected_forward(x, w, sx, sw))
    assert not np.array_equal(y, fresh)


def test_evaluation_records_nothing_and_names_keep_separate_histories():
    data = steps_data(2, seed=2)
    run = roundoff.Runner("te-fp8-delayed,fp8-scaling=delayed:3:max:0")
    train(run, data[:1], name="a")
    before = run.fp8_state()
    x, w, dy = data[1]
    run.matmul_forward(x * 100, w, name="a")  # outside train_step: no amax recorded, no update
    run.matmul_backward_data(dy, w, name="a")
    run.update_scales()  # an update without a recorded amax: the window moves, the scale stays (amax = step 0's)
    after = run.fp8_state()
    for k in before:
        assert after[k]["scale"] == before[k]["scale"]
    np.testing.assert_array_equal(after["L-1.matmul.a.x"]["history"], [0, amax(data[0][0]), 0])
    train(run, data[1:], name="b")  # another layer: its own tensors, layer "a" unchanged
    st = run.fp8_state()
    assert {k.split(".")[2] for k in st} == {"a", "b"}
    assert st["L-1.matmul.a.x"]["scale"] == after["L-1.matmul.a.x"]["scale"]
    assert F32(st["L-1.matmul.b.x"]["scale"]) == F32(F32(448) / amax(data[1][0]))
    with run.train_step():
        run.matmul_forward(x, w, name="q", layer=3)
    assert "L3.matmul.q.x" in run.fp8_state()


def test_train_step_protocol_and_errors():
    run = roundoff.Runner("te-fp8-delayed")
    x, w, dy = steps_data(1)[0]
    assert not run.record_amax
    with run.train_step(5):
        assert run.record_amax and run.step == 5
        with pytest.raises(RuntimeError, match="already inside a train_step"):
            with run.train_step():
                pass
    assert not run.record_amax
    # an exception inside the block: recording stops, no update (the amax stays in the slot of the open step)
    with pytest.raises(KeyError):
        with run.train_step():
            run.matmul_forward(x, w, name="fc1")
            raise KeyError("boom")
    assert not run.record_amax
    t = run.fp8_state()["L-1.matmul.fc1.x"]
    assert t["scale"] == 1.0 and t["history"][0] == amax(x)
    # the two-piece form is the same protocol
    run.record_amax = True
    run.matmul_backward_data(dy, w, name="fc1")
    run.record_amax = False
    run.update_scales()
    assert F32(run.fp8_state()["L-1.matmul.fc1.x"]["scale"]) == F32(F32(448) / amax(x))
    with pytest.raises(ValueError, match="name must not be empty"):
        run.matmul_forward(x, w, name="")


def test_state_round_trip_resumes_bit_for_bit():
    data = steps_data(5, seed=3)
    whole = roundoff.Runner("te-fp8-delayed,fp8-scaling=delayed:2:max:0")
    train(whole, data)
    part = roundoff.Runner("te-fp8-delayed,fp8-scaling=delayed:2:max:0")
    train(part, data[:3])
    resumed = roundoff.Runner("te-fp8-delayed,fp8-scaling=delayed:2:max:0")
    resumed.set_fp8_state(part.fp8_state())
    for k, step in enumerate(data[3:], start=3):
        with resumed.train_step(k):
            resumed.matmul_forward(step[0], step[1], name="fc1")
            resumed.matmul_backward_data(step[2], step[1], name="fc1")
            resumed.matmul_backward_weight(step[2], step[0], name="fc1")
    a, b = whole.fp8_state(), resumed.fp8_state()
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k]["scale"] == b[k]["scale"]
        np.testing.assert_array_equal(a[k]["history"], b[k]["history"])
    bad = part.fp8_state()
    bad["L-1.matmul.fc1.x"]["history"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="L-1.matmul.fc1.x"):
        resumed.set_fp8_state(bad)


def test_current_scaling_needs_no_steps():
    x, w, _ = steps_data(1)[0]
    run = roundoff.Runner("te-fp8-current")
    y0 = run.matmul_forward(x, w, name="fc1")
    with run.train_step():
        y1 = run.matmul_forward(x, w, name="fc1")
    np.testing.assert_array_equal(y0, y1)
    np.testing.assert_array_equal(y0, expected_forward(x, w, F32(448) / amax(x), F32(448) / amax(w)))


def test_torch_bridge_refuses_operand_quantization():
    torch = pytest.importorskip("torch")
    import roundoff.torch as rt
    for policy in ("te-fp8-delayed", "mxfp8", "int4-g32"):
        with pytest.raises(ValueError, match="roundoff.Runner") as e:
            rt.emulate(torch.nn.Linear(4, 2), policy)
        assert "\n" not in str(e.value)
    rt.emulate(torch.nn.Linear(4, 2), "h100-amp-bf16")  # its matmul entries quantize nothing
