"""roundoff.torch: gradients against finite differences (float64) and against an independent exact
implementation of the emulated GEMM; emulate() on PyTorch's own TransformerEncoder; the bridge's Linear
equal to roundoff's matmul op bit for bit."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (python3-torch) is not installed: the bridge is optional")
import roundoff  # noqa: E402
import roundoff.torch as rt  # noqa: E402
from conftest import assert_same_bits, exact_round  # noqa: E402

torch.set_num_threads(1)


def test_gradcheck_float64():
    a = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    f = lambda a, b: rt.matmul(a, b, inputs="fp64", accumulation="fp64-seq")  # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b), eps=1e-6, atol=1e-8)
    lin = torch.nn.Linear(6, 5).double()
    emu = rt.emulate(lin, "fp64")
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: emu(x), (x,), eps=1e-6, atol=1e-8)
    # and the emulated fp64 linear is PyTorch's up to float64 rounding of the sums
    assert torch.allclose(emu(x), lin(x), rtol=1e-12, atol=1e-12)


def _exact_gemm(A, B, fmt):
    """C = A·B with each output a sequential fused sum rounded to nearest-even in fmt, exactly."""
    f = roundoff.Format(fmt)
    out = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            s = None
            for k in range(A.shape[1]):
                t = Fraction(float(A[i, k])) * Fraction(float(B[k, j]))
                s = t if s is None else s + t
                s = Fraction(exact_round(abs(s), s < 0, f.p, f.emin, f.emax, f.max_finite, f.specials,
                                         f.saturate, "nearest-even")) if s != 0 else Fraction(0)
            out[i, j] = float(s)
    return out


def test_matmul_forward_and_backward_equal_an_exact_implementation():
    torch.manual_seed(1)
    a = torch.randn(3, 17, requires_grad=True)
    b = torch.randn(17, 4, requires_grad=True)
    y = rt.matmul(a, b, inputs="fp16", accumulation="fp16-seq")
    aq = roundoff.round(a.detach().numpy(), "fp16")
    bq = roundoff.round(b.detach().numpy(), "fp16")
    assert_same_bits(y.detach().numpy(), _exact_gemm(aq, bq, "fp16"), "fwd")
    g = torch.randn(3, 4)
    y.backward(g)
    gq = roundoff.round(g.numpy(), "fp16")
    assert_same_bits(a.grad.numpy(), _exact_gemm(gq, bq.T, "fp16"), "da")
    assert_same_bits(b.grad.numpy(), _exact_gemm(aq.T, gq, "fp16"), "db")


def test_matmul_batched_and_swamping():
    a = torch.tensor([[2048.0, 1.0, 1.0]])
    b = torch.ones(3, 1)
    assert rt.matmul(a, b, inputs="fp16", accumulation="fp16-seq").item() == 2048.0
    assert rt.matmul(a, b, inputs="fp16", accumulation="fp32-seq").item() == 2050.0
    A, B = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6)
    y = rt.matmul(A, B, inputs="fp32", accumulation="fp32-seq")
    assert y.shape == (2, 3, 4, 6) and torch.allclose(y, A @ B, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="inner dimensions"):
        rt.matmul(A, B.transpose(-1, -2), inputs="fp32", accumulation="fp32-seq")


def test_quantize_straight_through_and_rounded_gradient():
    x = torch.tensor([0.1, 1 / 3, 70000.0], requires_grad=True)
    y = rt.quantize(x, "fp16")
    assert torch.isinf(y[2]) and y[0].item() == roundoff.round(np.float32(0.1), "fp16")
    y.backward(torch.tensor([0.1, 0.1, 0.1]))
    assert torch.equal(x.grad, torch.tensor([0.1, 0.1, 0.1]))
    x2 = torch.tensor([0.5], requires_grad=True)
    rt.quantize(x2, "fp16", grad=("e5m2", "nearest-even")).backward(torch.tensor([0.1]))
    assert x2.grad.item() == float(roundoff.round(np.float32(0.1), "e5m2"))
    s1 = rt.quantize(torch.full((1000,), 0.1), "bf16", "stochastic", seed=3)
    s2 = rt.quantize(torch.full((1000,), 0.1), "bf16", "stochastic", seed=3)
    assert torch.equal(s1, s2) and len(torch.unique(s1)) == 2
    with pytest.raises(ValueError, match="seed"):
        rt.quantize(x, "bf16", "stochastic")


@pytest.mark.parametrize("policy", ["ane-fp16", "fp32,matmul=fp16/fp32/tc-h100", "amp-bf16"])
def test_emulated_linear_is_roundoffs_matmul_op(policy):
    torch.manual_seed(2)
    lin = torch.nn.Linear(24, 10, bias=False)
    emu = rt.emulate(lin, policy)
    x = torch.randn(5, 24, requires_grad=True)
    y = emu(x)
    run = roundoff.Runner(policy)
    assert_same_bits(y.detach().numpy(), run.matmul_forward(x.detach().numpy(), lin.weight.detach().numpy()))
    g = torch.randn(5, 10)
    y.backward(g)
    assert_same_bits(x.grad.numpy(), run.matmul_backward_data(g.numpy(), lin.weight.detach().numpy()))
    assert_same_bits(emu.weight.grad.numpy(), run.matmul_backward_weight(g.numpy(), x.detach().numpy()))


def _encoder_lm(d=32, heads=4, layers=2, vocab=64):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True,
                                             norm_first=True)
    return torch.nn.ModuleDict({"emb": torch.nn.Embedding(vocab, d),
                                "enc": torch.nn.TransformerEncoder(layer, layers),
                                "head": torch.nn.Linear(d, vocab)})


def _forward(m, tokens):
    T = tokens.shape[1]
    mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    return m["head"](m["enc"](m["emb"](tokens), mask=mask))


def test_emulate_transformer_encoder_trains_and_reports_telemetry():
    base = _encoder_lm()
    emu = rt.emulate(base, "ane-fp16")
    assert type(emu["enc"].layers[0].self_attn).__name__ == "EmulatedMultiheadAttention"
    assert type(emu["enc"].layers[0].linear1).__name__ == "EmulatedLinear"
    assert type(base["head"]).__name__ == "Linear"  # the original is untouched (deep copy)
    assert set(emu.state_dict()) == set(base.state_dict())
    tokens = torch.randint(0, 64, (2, 12))
    # emulated fp32 everywhere equals PyTorch up to float32 rounding of sums
    emu32 = rt.emulate(base, "fp32")
    assert torch.allclose(_forward(emu32, tokens), _forward(base, tokens), rtol=1e-4, atol=1e-4)
    opt = torch.optim.AdamW(emu.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        logits = _forward(emu, tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    tele = rt.telemetry(emu)
    passes = {(r["module"].split(".")[-1], r["pass"]) for r in tele}
    assert ("linear1", "bwd-weight") in passes and ("self_attn", "scores.fwd") in passes
    assert all(r["calls"] > 0 and r["elements"] > 0 for r in tele)
    # eval mode under no_grad must not take PyTorch's fused fast path around the emulation
    emu.eval()
    rt.reset_telemetry(emu)
    with torch.no_grad():
        _forward(emu, tokens)
    assert any(r["pass"] == "scores.fwd" for r in rt.telemetry(emu))


def test_telemetry_counts_overflow_and_underflow():
    lin = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[60000.0, 60000.0], [2.0**-20, 0.0]]))
    emu = rt.emulate(lin, "ane-fp16")
    with torch.no_grad():
        emu(torch.tensor([[1.0, 1.0], [2.0**-10, 0.0]]))
    (row,) = rt.telemetry(emu)
    assert row["overflow"] >= 1 and row["underflow"] >= 1 and row["nonfinite"] >= 1


def test_bridge_bad_input():
    with pytest.raises(TypeError, match="floating-point"):
        rt.quantize(torch.tensor([1, 2]), "fp16")
    with pytest.raises(ValueError, match="not one of|unknown|valid"):
        rt.emulate(torch.nn.Linear(2, 2), "no-such-policy")
    with pytest.raises(ValueError):
        rt.matmul(torch.ones(2, 3), torch.ones(2, 3), inputs="fp16", accumulation="fp16-seq")
