"""The transformer ops on your own arrays, under a policy: :class:`Runner`.

Each method runs the C++ op (the same code the trainer runs) with the policy's entry for that (op, pass):
inputs rounded to storage on entry, every reduction under the entry's accumulation, elementwise steps rounded
to compute, outputs stored. With ``shadow=True`` every sampled call also runs the MPFR reference on the same
rounded inputs and :meth:`Runner.records` returns its error statistics (ulps of the storage format, normwise
relative error, dot-product ratio, range events).
"""
from __future__ import annotations

import numpy as np

from . import _roundoff as _c
from ._arrays import as_f64, as_policy, as_seed

# name -> (argument names, kinds: 'a' float array, 'i' int32 array, 's' scalar/str passed through)
_METHODS = {
    "matmul_forward": ("x w", "aa", {"op": "matmul"}),
    "matmul_backward_data": ("dy w", "aa", {"op": "matmul"}),
    "matmul_backward_weight": ("dy x", "aa", {"op": "matmul"}),
    "rmsnorm_forward": ("x w", "aa", {"eps": 1e-5}),
    "rmsnorm_backward_data": ("dy x w rstd", "aaaa", {}),
    "rmsnorm_backward_weight": ("dy x rstd", "aaa", {}),
    "attn_scores_forward": ("q k", "aa", {"heads": None}),
    "attn_scores_backward_data": ("dpreatt q k", "aaa", {}),
    "softmax_forward": ("preatt", "a", {}),
    "softmax_backward_data": ("datt att", "aa", {}),
    "attn_values_forward": ("att v", "aa", {}),
    "attn_values_backward_data": ("dout att v", "aaa", {}),
    "silu_forward": ("x", "a", {}),
    "silu_backward_data": ("dy x", "aa", {}),
    "swiglu_forward": ("a u", "aa", {}),
    "swiglu_backward_data": ("dh a u", "aaa", {}),
    "residual_forward": ("x f", "aa", {"alpha": 1.0, "which": "ffn"}),
    "residual_backward_data": ("dout", "a", {"alpha": 1.0, "which": "ffn"}),
    "cross_entropy_forward": ("logits targets", "ai", {}),
    "cross_entropy_backward_data": ("probs targets", "ai", {"grad_scale": None}),
}


class Runner:
    """Transformer ops on numpy arrays under a precision policy, optionally shadowed by MPFR.

    Parameters
    ----------
    policy : Policy or str
    seed : int
        Stochastic rounding (the stream of call c of step s is a pure function of (seed, s, c)).
    shadow : bool
        Record each sampled call's error against the MPFR reference (see :meth:`records`).
    every, units : int
        Shadow call 0, every, 2·every … of each (op, pass), on ``units`` units (rows, heads) each (0 = all).

    Methods (shapes; outputs are new float64 arrays; backward methods return the gradient of one call)
    -------------------------------------------------------------------------------------------------
    matmul_forward(x (..., in), w (out, in), op="matmul"|"classifier") -> y (..., out)
    matmul_backward_data(dy (..., out), w (out, in)) -> dx (..., in)
    matmul_backward_weight(dy (n, out), x (n, in)) -> dw (out, in)
    rmsnorm_forward(x (..., C), w (C), eps=1e-5) -> (y, rstd (rows))
    rmsnorm_backward_data(dy, x, w, rstd) -> dx;   rmsnorm_backward_weight(dy, x, rstd) -> dw (C)
    attn_scores_forward(q (B, T, NH*hs), k, heads=NH) -> preatt (B, NH, T, T)  (causal, scaled by 1/sqrt(hs))
    attn_scores_backward_data(dpreatt, q, k) -> (dq, dk)
    softmax_forward(preatt) -> att;   softmax_backward_data(datt, att) -> dpreatt
    attn_values_forward(att (B, NH, T, T), v (B, T, NH*hs)) -> out;   attn_values_backward_data(dout, att, v) -> (datt, dv)
    silu_forward(x) -> y;   silu_backward_data(dy, x) -> dx
    swiglu_forward(a, u) -> h = a*u;   swiglu_backward_data(dh, a, u) -> (da, du)
    residual_forward(x, f, alpha=1, which="ffn"|"attn") -> x + alpha*f;   residual_backward_data(dout, alpha, which) -> (dx, df)
    cross_entropy_forward(logits (N, V), targets (N) ints) -> (mean loss, losses (N), probs (N, V))
    cross_entropy_backward_data(probs, targets, grad_scale) -> dlogits

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> rng = np.random.default_rng(0)
    >>> x, w = rng.standard_normal((4, 64)), rng.standard_normal((8, 64)) / 8
    >>> run = roundoff.Runner("ane-fp16", shadow=True)
    >>> y = run.matmul_forward(x, w)
    >>> y.shape, bool(np.all(roundoff.representable(y, "fp16")))
    ((4, 8), True)
    >>> rec = run.records()[0]
    >>> rec["op"], rec["pass"], rec["count"]     # every output compared with the MPFR reference
    ('matmul', 'fwd', 32)
    """

    def __init__(self, policy, *, seed: int = 0, shadow: bool = False, every: int = 1, units: int = 0):
        self._r = _c.Runner(as_policy(policy), as_seed(seed, False), bool(shadow), int(every), int(units))

    @property
    def policy(self):
        """The runner's :class:`Policy`."""
        return self._r.policy

    @property
    def step(self) -> int:
        """The training step (part of the stochastic stream and of every record); setting it resets the call count."""
        return self._r.step

    @step.setter
    def step(self, s: int) -> None:
        self._r.step = int(s)

    def records(self) -> list:
        """The shadow's records so far, one dict per output tensor per sampled call."""
        return self._r.records()

    def clear_records(self) -> None:
        self._r.clear_records()

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_METHODS))

    def __getattr__(self, name):
        if name not in _METHODS:
            raise AttributeError(f"Runner has no method {name!r}; ops: {', '.join(_METHODS)}")
        names, kinds, defaults = _METHODS[name]
        names = names.split()
        fn = getattr(self._r, name)

        def call(*args, **kw):
            if len(args) > len(names):
                raise TypeError(f"{name}() takes {len(names)} array arguments ({', '.join(names)})")
            conv = []
            for i, (n, k) in enumerate(zip(names, kinds)):
                if i < len(args):
                    v = args[i]
                elif n in kw:
                    v = kw.pop(n)
                else:
                    raise TypeError(f"{name}() missing argument {n!r}")
                if k == "a":
                    conv.append(as_f64(v, n))
                else:
                    t = np.asarray(v)
                    if t.dtype.kind not in "iu":
                        raise TypeError(f"{n}: expected integer class indices, got dtype {t.dtype}")
                    conv.append(np.ascontiguousarray(t, dtype=np.int32))
            extra = []
            for k, d in defaults.items():
                v = kw.pop(k, d)
                if v is None:
                    raise TypeError(f"{name}() missing keyword argument {k!r}")
                extra.append(v)
            if kw:
                raise TypeError(f"{name}() got unexpected arguments {sorted(kw)}")
            return fn(*conv, *extra)

        call.__name__ = name
        call.__doc__ = f"{name}({', '.join(names)}{''.join(', ' + k + '=' + repr(d) for k, d in defaults.items())})"
        return call
