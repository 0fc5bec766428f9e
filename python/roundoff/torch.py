"""The PyTorch bridge: emulated GEMMs as autograd functions, and ``emulate(model, policy)``.

Needs PyTorch (Debian's ``python3-torch``); ``import roundoff`` works without it.

What is emulated, bit for bit: every GEMM of an ``nn.Linear`` and of the projections and the two batched
products (q·kᵀ, weights·v) of an ``nn.MultiheadAttention``, forward and both backward GEMMs, under the policy's
entries for matmul / attn-scores / attn-values and their passes: operands rounded to the entry's storage
format on entry, every output one dot product under the entry's accumulation (the C++ ``numerics::gemm``,
so ``tc-h100`` is the H100's tensor cores), rounded to compute and then to storage — the contract of
roundoff's own matmul op (tests check the two agree bit for bit). A Linear's bias is added to the compute
value with one rounding to compute before the storage rounding. What stays PyTorch's: everything else
(LayerNorm, activations, softmax — whose output is rounded to the softmax entry's storage format —, dropout,
the loss, gradient accumulation in the parameters' dtype, the optimizer).
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from . import _roundoff as _c
from ._arrays import as_accumulation, as_format, as_mode, as_policy, as_seed, fits_float32

__all__ = ["quantize", "matmul", "emulate", "telemetry", "reset_telemetry", "Precision", "EmulatedLinear",
           "EmulatedMultiheadAttention"]


# ---------------------------------------------------------------------------------------------------------
# precision of one GEMM (one policy entry)

class Precision:
    """How one GEMM rounds: operands to ``storage`` on entry, ``accumulation`` for every dot product, the
    result to ``compute`` then ``storage``, all in ``rounding``.

    Examples
    --------
    >>> from roundoff.torch import Precision
    >>> p = Precision.from_policy("ane-fp16", "matmul", "fwd")
    >>> p.storage.name, p.accumulation.canonical
    ('fp16', 'fp16-seq')
    """

    def __init__(self, storage, accumulation, compute=None, rounding="nearest-even", output=None):
        self.storage = as_format(storage, "storage")
        self.accumulation = as_accumulation(accumulation)
        self.compute = as_format(compute, "compute") if compute is not None else self.accumulation.result_format
        self.rounding = as_mode(rounding, "rounding")
        # the format the result is stored in (default: storage, as a policy's ops do; matmul() keeps the result
        # in the accumulation's result format)
        self.output = as_format(output, "output") if output is not None else self.storage

    @classmethod
    def from_policy(cls, policy, op: str, pass_: str) -> "Precision":
        """The entry (op, pass_) of ``policy``. Refused (``ValueError``) when the entry quantizes its GEMM operands
        (block formats, scaled fp8, the RHT: fields ``block-*``, ``fp8-*``, ``rht``), which the bridge does not
        emulate: :class:`roundoff.Runner` runs those GEMMs (and :meth:`roundoff.Runner.train_step` delayed fp8
        scaling)."""
        pol = as_policy(policy)
        e = pol.entry(op, pass_)
        quant = [f for f in e["extras"].split() if f.split("=")[0] in _QUANT_FIELDS]
        if quant:
            raise ValueError(f"roundoff.torch: policy {pol.canonical!r} quantizes the operands of {op} {pass_} "
                             f"({' '.join(quant)}), which the PyTorch bridge does not emulate; run those GEMMs with "
                             "roundoff.Runner (valid here: policies without block-*, fp8-* or rht fields)")
        return cls(e["storage"], e["accumulation"], e["compute"], e["rounding"])

    @property
    def stochastic(self) -> bool:
        return self.rounding == "stochastic" or "stochastic" in self.accumulation.spec

    def __repr__(self):
        return (f"Precision(storage={self.storage.name!r}, accumulation={self.accumulation.canonical!r}, "
                f"compute={self.compute.name!r}, rounding={self.rounding!r})")


# The policy fields that quantize a GEMM's operands (ops::GemmQuant); Precision.from_policy refuses them.
_QUANT_FIELDS = {"block-x", "block-w", "block-dy", "block-sr", "rht", "fp8-x", "fp8-w", "fp8-dy", "fp8-rescale"}


class _Streams:
    """Counter-based stochastic streams: call c of an emulated model uses stream c (reproducible for a fixed
    order of calls, whatever the thread count)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.calls = 0

    def next(self) -> int:
        self.calls += 1
        return self.calls


_FP32 = _c.Format("fp32")
_FP64 = _c.Format("fp64")


def _round(x: np.ndarray, fmt, mode: str, seed: int, stream: int, known=None) -> np.ndarray:
    """x rounded to fmt, as float64. ``known``: a format every element of x is already a value of; rounding
    to it (or to fp64) returns every value unchanged in every mode, so that pass is skipped."""
    if fmt == known or fmt == _FP64:
        return np.require(x, dtype=np.float64, requirements="C")
    if x.dtype == np.float32 and fits_float32(fmt):
        return _c.round_f32(np.require(x, requirements="C"), fmt, mode, seed, stream, 0).astype(np.float64)
    return _c.round_f64(np.require(x, dtype=np.float64, requirements="C"), fmt, mode, seed, stream, 0)


def _known(x: np.ndarray):
    return _FP32 if x.dtype == np.float32 else _FP64


def _tele_add(tele: dict, key: str, aq: np.ndarray, at: bool, bq: np.ndarray, bt: bool, acc: np.ndarray,
              out: np.ndarray, storage, acc_overflows: int) -> None:
    """Adds one GEMM's range events (operands aq, bq as stored, read transposed when at / bt):
    overflow    outputs that are ±inf/NaN although every operand is finite, plus outputs saturated at
                ±max_finite whose accumulator value lies beyond it;
    acc_overflow partial sums of the accumulation that overflowed (the accumulator's own count);
    underflow   outputs stored as 0 whose binary64 dot product of the stored operands is nonzero;
    subnormal   nonzero outputs below the storage format's smallest normal;  nonfinite, max_abs."""
    t = tele.setdefault(key, {"calls": 0, "elements": 0, "overflow": 0, "acc_overflow": 0, "underflow": 0,
                              "subnormal": 0, "nonfinite": 0, "max_abs": 0.0})
    fin_out = np.isfinite(out)
    a = np.abs(out)
    finite_ops = bool(np.isfinite(aq).all() and np.isfinite(bq).all())
    t["calls"] += 1
    t["elements"] += int(out.size)
    sat = (a == storage.max_finite) & np.isfinite(acc) & (np.abs(acc) > storage.max_finite)
    t["overflow"] += int(np.count_nonzero(sat)) + (int(np.count_nonzero(~fin_out)) if finite_ops else 0)
    t["acc_overflow"] += int(acc_overflows)
    zero = out == 0
    rows = cols = np.empty(0, dtype=np.intp)
    if zero.any():
        rows, cols = np.nonzero(zero)
    if rows.size:
        A = aq.T if at else aq
        B = bq.T if bt else bq
        ref = np.einsum("ij,ji->i", A[rows], B[:, cols])
        t["underflow"] += int(np.count_nonzero(ref != 0))
    t["subnormal"] += int(np.count_nonzero((a > 0) & (a < storage.min_normal)))
    t["nonfinite"] += int(np.count_nonzero(~fin_out))
    if out.size:
        t["max_abs"] = max(t["max_abs"], float(np.max(a, where=fin_out, initial=0.0)))


def _gemm(a: np.ndarray, at: bool, b: np.ndarray, bt: bool, prec: Precision, streams: _Streams | None,
          bias: np.ndarray | None = None, tele: dict | None = None, key: str = "") -> np.ndarray:
    """Emulated C = op(a)·op(b) (+ bias) under ``prec``; a, b stored (C-contiguous), read transposed when
    at / bt. Returns the stored result (float64)."""
    seed = streams.seed if streams is not None else 0
    s = (lambda: streams.next()) if (streams is not None and prec.stochastic) else (lambda: 0)
    aq = _round(a, prec.storage, prec.rounding, seed, s(), _known(a))
    bq = _round(b, prec.storage, prec.rounding, seed, s(), _known(b))
    acc, acc_ov = _c.gemm(prec.accumulation, aq, at, bq, bt, None, seed, s(), torch.get_num_threads())
    r = _round(acc, prec.compute, prec.rounding, seed, s(), prec.accumulation.result_format)
    if bias is not None:
        biasq = _round(bias, prec.storage, prec.rounding, seed, s(), _known(bias))
        r = _c.arith("add", prec.compute, prec.rounding, np.ascontiguousarray(r),
                     np.ascontiguousarray(np.broadcast_to(biasq, r.shape)), None, seed, s())
    out = _round(r, prec.output, prec.rounding, seed, s(), prec.compute)
    if tele is not None:
        _tele_add(tele, key, aq, at, bq, bt, acc, out, prec.output, acc_ov)
    return out


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _out_dtype(like: torch.Tensor, *fmts) -> torch.dtype:
    """float32 when the input is float32 and every format's values are binary32 numbers, else float64."""
    if like.dtype == torch.float32 and all(fits_float32(f) for f in fmts):
        return torch.float32
    return torch.float64


def _to_torch(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype)


# ---------------------------------------------------------------------------------------------------------
# quantize

class _Quantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, fmt, mode, seed, stream, grad):
        ctx.grad = grad
        ctx.seed, ctx.stream = seed, stream
        out = _c.round_f64(np.ascontiguousarray(_np(t), dtype=np.float64), fmt, mode, seed, stream, 0)
        return _to_torch(out, t.dtype if t.dtype == torch.float64 or fits_float32(fmt) else torch.float64)

    @staticmethod
    def backward(ctx, g):
        if ctx.grad is None:
            return g, None, None, None, None, None
        gf, gm = ctx.grad
        r = _c.round_f64(np.ascontiguousarray(_np(g), dtype=np.float64), gf, gm, ctx.seed, ctx.stream + 1, 0)
        return _to_torch(r, g.dtype), None, None, None, None, None


def quantize(t: torch.Tensor, format, mode: str = "nearest-even", *, seed=None, stream: int = 0, grad=None):
    """Round a tensor to ``format`` (autograd-aware).

    Parameters
    ----------
    t : torch.Tensor (float16/32/64, CPU)
    format : Format or str
    mode : str
        Any of :func:`roundoff.modes`; stochastic needs ``seed`` (element i uses draw i of ``stream``).
    grad : None or (format, mode)
        None: straight-through gradient (the identity). A pair: the gradient is rounded to that format in that
        mode (stochastic draws from stream ``stream + 1``).

    Returns
    -------
    torch.Tensor
        Same dtype as ``t`` when the format fits it, else float64.

    Examples
    --------
    >>> import torch, roundoff.torch as rt
    >>> x = torch.tensor([0.1, 1/3], requires_grad=True)
    >>> y = rt.quantize(x, "fp16")
    >>> y
    tensor([0.1000, 0.3333], grad_fn=<_QuantizeBackward>)
    >>> y.sum().backward(); x.grad
    tensor([1., 1.])
    """
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError("quantize: t must be a floating-point torch.Tensor")
    f = as_format(format)
    m = as_mode(mode)
    g = None
    if grad is not None:
        if not (isinstance(grad, (tuple, list)) and len(grad) == 2):
            raise ValueError("quantize: grad must be None (straight-through) or a pair (format, mode)")
        g = (as_format(grad[0], "grad format"), as_mode(grad[1], "grad mode"))
    s = as_seed(seed, m == "stochastic" or (g is not None and g[1] == "stochastic"))
    return _Quantize.apply(t, f, m, s, int(stream), g)


# ---------------------------------------------------------------------------------------------------------
# matmul

# Telemetry labels of the two backward GEMMs of the attention products (both under the bwd-data entry).
_BWD_LABELS = {"scores.": ("bwd-data.q", "bwd-data.k"), "values.": ("bwd-data.att", "bwd-data.v")}


class _Matmul(torch.autograd.Function):
    """y (M, N) = a (M, K) · b (K, N), with the two backward GEMMs emulated."""

    @staticmethod
    def forward(ctx, a, b, fwd, bwd, streams, tele, key):
        ctx.save_for_backward(a, b)
        ctx.bwd, ctx.streams, ctx.tele, ctx.key = bwd, streams, tele, key
        out = _gemm(_np(a), False, _np(b), False, fwd, streams, None, tele, key + "fwd")
        return _to_torch(out, _out_dtype(a, fwd.storage, fwd.compute, fwd.output))

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        gd, gw = ctx.bwd
        la, lb = _BWD_LABELS.get(ctx.key, ("bwd-data", "bwd-weight"))
        gn = _np(g)
        da = db = None
        if ctx.needs_input_grad[0]:  # da (M, K) = g (M, N) · bᵀ
            da = _to_torch(_gemm(gn, False, _np(b), True, gd, ctx.streams, None, ctx.tele, ctx.key + la), a.dtype)
        if ctx.needs_input_grad[1]:  # db (K, N) = aᵀ · g
            db = _to_torch(_gemm(_np(a), True, gn, False, gw, ctx.streams, None, ctx.tele, ctx.key + lb), b.dtype)
        return da, db, None, None, None, None, None


def matmul(a: torch.Tensor, b: torch.Tensor, *, inputs, accumulation, grad_accumulation=None, grad_inputs=None,
           seed=None):
    """Emulated ``a @ b`` whose forward and both backward GEMMs run in roundoff's arithmetic.

    Parameters
    ----------
    a : (..., M, K) tensor;  b : (K, N) or (..., K, N) tensor (batch dimensions must match)
    inputs : Format or str
        Operands are rounded to it on entry (the autocast model).
    accumulation : Accumulation or str
        Every output is one dot product under it; the result is kept in its result format.
    grad_accumulation : optional
        For the backward GEMMs (default: ``accumulation``).
    grad_inputs : optional
        Format the incoming gradient and the saved operands are rounded to for the backward GEMMs
        (default: ``inputs``).
    seed : int, optional
        Needed when something rounds stochastically.

    Examples
    --------
    >>> import torch, roundoff.torch as rt
    >>> a = torch.tensor([[2048.0, 1.0, 1.0]], requires_grad=True)
    >>> b = torch.ones(3, 1)
    >>> rt.matmul(a, b, inputs="fp16", accumulation="fp16-seq")   # 2048 + 1 + 1 in fp16
    tensor([[2048.]], grad_fn=<_MatmulBackward>)
    >>> rt.matmul(a, b, inputs="fp16", accumulation="fp32-seq")
    tensor([[2050.]], grad_fn=<_MatmulBackward>)
    """
    fwd = Precision(inputs, accumulation)
    fwd.output = fwd.accumulation.result_format  # the result is kept in the accumulation's result format
    gacc = accumulation if grad_accumulation is None else grad_accumulation
    gin = inputs if grad_inputs is None else grad_inputs
    bwd = (Precision(gin, gacc), Precision(gin, gacc))
    for p in bwd:
        p.output = p.accumulation.result_format
    stochastic = fwd.stochastic or bwd[0].stochastic
    streams = _Streams(as_seed(seed, stochastic)) if stochastic else None
    return _batched(a, b, fwd, bwd, streams, None, "")


def _batched(a, b, fwd, bwd, streams, tele, key):
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError(f"matmul: operands must be at least 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: a is (..., {a.shape[-2]}, {a.shape[-1]}) and b is (..., {b.shape[-2]}, "
                         f"{b.shape[-1]}): inner dimensions differ")
    if a.dim() == 2 and b.dim() == 2:
        return _Matmul.apply(a, b, fwd, bwd, streams, tele, key)
    if b.dim() == 2:  # (..., M, K) @ (K, N): one GEMM over all rows
        y = _Matmul.apply(a.reshape(-1, a.shape[-1]), b, fwd, bwd, streams, tele, key)
        return y.reshape(*a.shape[:-1], b.shape[-1])
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"matmul: batch dimensions differ: {tuple(a.shape[:-2])} and {tuple(b.shape[:-2])}")
    A = a.reshape(-1, *a.shape[-2:])
    B = b.reshape(-1, *b.shape[-2:])
    ys = [_Matmul.apply(A[i], B[i], fwd, bwd, streams, tele, key) for i in range(A.shape[0])]
    return torch.stack(ys).reshape(*a.shape[:-1], b.shape[-1])


# ---------------------------------------------------------------------------------------------------------
# modules

class _Linear(torch.autograd.Function):
    """y (n, out) = x (n, in) · Wᵀ + bias under the policy's matmul entries (fwd, bwd-data, bwd-weight)."""

    @staticmethod
    def forward(ctx, x, w, bias, precs, streams, tele):
        ctx.save_for_backward(x, w)
        ctx.precs, ctx.streams, ctx.tele, ctx.has_bias = precs, streams, tele, bias is not None
        fwd = precs[0]
        out = _gemm(_np(x), False, _np(w), True, fwd, streams, None if bias is None else _np(bias), tele, "fwd")
        return _to_torch(out, _out_dtype(x, fwd.storage, fwd.compute))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        _, bd, bw = ctx.precs
        gn = _np(g)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:  # dx (n, in) = dy (n, out) · W (out, in)
            dx = _to_torch(_gemm(gn, False, _np(w), False, bd, ctx.streams, None, ctx.tele, "bwd-data"), x.dtype)
        if ctx.needs_input_grad[1]:  # dW (out, in) = dyᵀ (out, n) · x (n, in)
            dw = _to_torch(_gemm(gn, True, _np(x), False, bw, ctx.streams, None, ctx.tele, "bwd-weight"), w.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0).to(w.dtype)
        return dx, dw, db, None, None, None


class EmulatedLinear(nn.Module):
    """An ``nn.Linear`` whose three GEMMs run under a policy's matmul entries (same parameters, same
    state_dict keys). Built by :func:`emulate`."""

    def __init__(self, linear: nn.Linear, policy, streams: _Streams, op: str = "matmul"):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.op = op
        self.precs = tuple(Precision.from_policy(policy, op, p) for p in ("fwd", "bwd-data", "bwd-weight"))
        self._streams = streams
        self.roundoff_telemetry: dict = {}

    def forward(self, x):
        shape = x.shape
        y = _Linear.apply(x.reshape(-1, shape[-1]), self.weight, self.bias, self.precs, self._streams,
                          self.roundoff_telemetry)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.precs[0]!r}"


class EmulatedMultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` with its GEMMs emulated: the in- and out-projections under the policy's matmul
    entries, q·kᵀ under attn-scores, weights·v under attn-values (each forward and backward); softmax in
    PyTorch with its output rounded to the softmax entry's storage format. Same parameters and state_dict
    keys as the module it replaces. Built by :func:`emulate`."""

    def __init__(self, mha: nn.MultiheadAttention, policy, streams: _Streams):
        super().__init__()
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("emulate: nn.MultiheadAttention with kdim/vdim != embed_dim, add_bias_kv or "
                             "add_zero_attn is not supported")
        self.embed_dim, self.num_heads, self.batch_first = mha.embed_dim, mha.num_heads, mha.batch_first
        self.head_dim = mha.head_dim
        self.dropout = mha.dropout
        self._qkv_same_embed_dim = True
        self.in_proj_weight, self.in_proj_bias = mha.in_proj_weight, mha.in_proj_bias
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self.out_proj = mha.out_proj  # replaced by an EmulatedLinear by emulate()
        self.precs = tuple(Precision.from_policy(policy, "matmul", p) for p in ("fwd", "bwd-data", "bwd-weight"))
        self.scores = tuple(Precision.from_policy(policy, "attn-scores", p) for p in ("fwd", "bwd-data"))
        self.values = tuple(Precision.from_policy(policy, "attn-values", p) for p in ("fwd", "bwd-data"))
        self.softmax_storage = Precision.from_policy(policy, "softmax", "fwd")
        self._streams = streams
        self.roundoff_telemetry: dict = {}

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        B, L, E = query.shape
        S = key.shape[1]
        H, hd = self.num_heads, self.head_dim
        w, bias = self.in_proj_weight, self.in_proj_bias
        tele = self.roundoff_telemetry

        def proj(x, i):
            bi = None if bias is None else bias[i * E:(i + 1) * E]
            y = _Linear.apply(x.reshape(-1, E), w[i * E:(i + 1) * E], bi, self.precs, self._streams, tele)
            return y.reshape(B, x.shape[1], H, hd).transpose(1, 2)  # (B, H, len, hd)

        q, k, v = proj(query, 0), proj(key, 1), proj(value, 2)
        # scores (B, H, L, S) = (q · kᵀ) / sqrt(hd), the scale applied after the emulated GEMM, rounded to storage
        sc = _batched(q, k.transpose(-2, -1), self.scores[0], (self.scores[1], self.scores[1]), self._streams,
                      tele, "scores.")
        sc = sc * (1.0 / math.sqrt(hd))
        if attn_mask is not None:
            m = attn_mask if attn_mask.dim() == 2 else attn_mask.reshape(B, H, L, S)
            sc = sc.masked_fill(m, float("-inf")) if m.dtype == torch.bool else sc + m
        if key_padding_mask is not None:
            kpm = key_padding_mask.reshape(B, 1, 1, S)
            sc = sc.masked_fill(kpm, float("-inf")) if kpm.dtype == torch.bool else sc + kpm
        att = torch.softmax(sc, dim=-1)
        sf = self.softmax_storage
        att = quantize(att, sf.storage, "nearest-even" if sf.rounding == "stochastic" else sf.rounding)
        if self.training and self.dropout > 0:
            att = nn.functional.dropout(att, p=self.dropout)
        o = _batched(att, v, self.values[0], (self.values[1], self.values[1]), self._streams, tele, "values.")
        o = o.transpose(1, 2).reshape(B, L, E).to(query.dtype)
        out = self.out_proj(o)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, (att.mean(dim=1) if average_attn_weights else att)


def emulate(module: nn.Module, policy, *, seed: int = 0, attention: bool = True, inplace: bool = False):
    """Make every ``nn.Linear`` (and, with ``attention``, every ``nn.MultiheadAttention``) of a model run its
    GEMMs under a roundoff policy.

    Parameters
    ----------
    module : nn.Module
    policy : Policy or str
        ``"ane-fp16"``, ``"fp32,matmul=fp16/fp32/tc-h100"``, … The matmul entries govern Linear layers and the
        attention projections; attn-scores and attn-values the two attention products; softmax's storage
        format rounds the attention weights. ``classifier`` is not used (a Linear is a Linear).
    seed : int
        Stochastic rounding: call c of the model draws from stream c.
    attention : bool
        Also replace ``nn.MultiheadAttention`` modules (their projections would otherwise bypass the Linear
        replacement: PyTorch calls them functionally).
    inplace : bool
        Modify ``module`` itself (default: a deep copy; build the optimizer on the returned module).

    Returns
    -------
    nn.Module
        Ready to train; :func:`telemetry` reads each emulated module's range events.

    Examples
    --------
    >>> import torch, roundoff.torch as rt
    >>> torch.manual_seed(0) and None
    >>> net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> emu = rt.emulate(net, "ane-fp16")
    >>> type(emu[0]).__name__
    'EmulatedLinear'
    >>> y = emu(torch.randn(3, 8)); y.sum().backward()
    >>> sorted({r["pass"] for r in rt.telemetry(emu)})
    ['bwd-data', 'bwd-weight', 'fwd']
    """
    pol = as_policy(policy)
    stochastic = any(e["rounding"] == "stochastic" or "stochastic" in e["accumulation"].spec
                     for e in pol.table() if e["op"] in ("matmul", "attn-scores", "attn-values"))
    streams = _Streams(as_seed(seed, stochastic))
    m = module if inplace else copy.deepcopy(module)
    if isinstance(m, nn.Linear):
        return EmulatedLinear(m, pol, streams)
    _replace(m, pol, streams, attention)
    m.roundoff_policy = pol.canonical
    return m


def _replace(m: nn.Module, pol, streams, attention: bool) -> None:
    for name, child in list(m.named_children()):
        if isinstance(child, nn.Linear):
            setattr(m, name, EmulatedLinear(child, pol, streams))
        elif attention and isinstance(child, nn.MultiheadAttention):
            e = EmulatedMultiheadAttention(child, pol, streams)
            e.out_proj = EmulatedLinear(child.out_proj, pol, streams)
            setattr(m, name, e)
        else:
            _replace(child, pol, streams, attention)
    # PyTorch's fused encoder fast path (eval mode) would bypass the emulated modules: turn it off.
    if isinstance(m, nn.TransformerEncoderLayer):
        m.activation_relu_or_gelu = 0
    if isinstance(m, nn.TransformerEncoder):
        m.enable_nested_tensor = False


def telemetry(module: nn.Module) -> list:
    """Per emulated module and pass: calls, elements, overflow (outputs ±inf/NaN from finite operands, or
    saturated), acc_overflow (overflowing partial sums), underflow (outputs stored as 0 whose binary64 dot
    product is nonzero), subnormal outputs, non-finite outputs, max |output|.

    Returns
    -------
    list of dict with keys module, pass, calls, elements, overflow, acc_overflow, underflow, subnormal,
    nonfinite, max_abs
    """
    rows = []
    for name, sub in module.named_modules():
        t = getattr(sub, "roundoff_telemetry", None)
        if isinstance(t, dict):
            for k, v in t.items():
                rows.append({"module": name, "pass": k, **v})
    return rows


def reset_telemetry(module: nn.Module) -> None:
    """Zero every emulated module's counters."""
    for sub in module.modules():
        t = getattr(sub, "roundoff_telemetry", None)
        if isinstance(t, dict):
            t.clear()
