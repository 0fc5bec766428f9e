"""The transformer ops on your own arrays, under a policy: :class:`Runner`.

Each method runs the C++ op (the same code the trainer runs) with the policy's entry for that (op, pass):
inputs rounded to storage on entry, every reduction under the entry's accumulation, elementwise steps rounded
to compute, outputs stored. With ``shadow=True`` every sampled call also runs the MPFR reference on the same
rounded inputs and :meth:`Runner.records` returns its error statistics (ulps of the storage format, normwise
relative error, dot-product ratio, range events).

Under a policy with delayed fp8 scaling (``te-fp8-delayed``), each linear layer's operands keep an amax history and a
scale in the Runner; :meth:`Runner.train_step` is one optimisation step of that recipe, as the trainer runs it.
"""
from __future__ import annotations

import contextlib

import numpy as np

from . import _roundoff as _c
from ._arrays import as_f64, as_policy, as_seed

# name -> (argument names, kinds: 'a' float array, 'i' int32 array, 's' scalar/str passed through)
_METHODS = {
    "matmul_forward": ("x w", "aa", {"op": "matmul", "name": "linear", "layer": -1}),
    "matmul_backward_data": ("dy w", "aa", {"op": "matmul", "name": "linear", "layer": -1}),
    "matmul_backward_weight": ("dy x", "aa", {"op": "matmul", "name": "linear", "layer": -1}),
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
    matmul_forward(x (..., in), w (out, in), op="matmul"|"classifier", name="linear", layer=-1) -> y (..., out)
    matmul_backward_data(dy (..., out), w (out, in), op, name, layer) -> dx (..., in)
    matmul_backward_weight(dy (n, out), x (n, in), op, name, layer) -> dw (out, in)
        ``name`` and ``layer`` say which linear layer the GEMM belongs to: under per-tensor fp8 scaling its x, w and
        dy keep their amax history and scale under the key "L<layer>.<op>.<name>.<x|w|dy>" (Transformer Engine keeps
        them per module). Give every linear layer its own name; the three GEMMs of one layer share it.
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

    Delayed fp8 scaling (see :meth:`train_step`):

    >>> run = roundoff.Runner("te-fp8-delayed")
    >>> for step in range(2):
    ...     with run.train_step(step):
    ...         y = run.matmul_forward(x, w, name="fc1")
    ...         dx = run.matmul_backward_data(np.ones_like(y), w, name="fc1")
    >>> st = run.fp8_state()["L-1.matmul.fc1.w"]
    >>> wb = roundoff.round(w, "bf16")                            # the operand as stored (the entry's bf16)
    >>> st["scale"] == np.float32(448) / np.float32(np.abs(wb).max())    # fp8_max / amax
    True
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

    # ---- delayed fp8 scaling ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def train_step(self, step: int | None = None):
        """One optimisation step of a delayed-scaling fp8 recipe: the trainer's protocol, usable on your own model.

        Inside the ``with`` block every GEMM whose operand the policy casts to fp8 with a per-tensor delayed scale
        (``fp8-scaling=delayed:...``, e.g. ``te-fp8-delayed``) casts with the tensor's stored scale and folds its amax
        into the tensor's history (``record_amax`` is on). On leaving the block, every tensor's scale is updated
        from its history (:meth:`update_scales`), Transformer Engine's ``amax_and_scale_update``::

            a      = history rolled by one (a[i] = h[i+1], a[H-1] = h[0]);  history = [0, a[1], ..., a[H-1]]
            amax   = max(a)   (ALGO max: the largest amax of the last H steps)   or h[0] (most-recent)
            scale  = fp32(fp32(fp8_max * 2**-margin) / amax)   when amax is finite and > 0, else unchanged
            fp8_max = 448 (e4m3: x, w) or 57344 (e5m2: dy)

        so the first step casts with scale 1 (TE's initial scale) and later steps with the scales of the earlier
        steps' amaxes. Put the step's forward and backward GEMMs in one block, once per optimisation step (TE
        updates forward tensors after the forward and gradients after the backward; the backward reuses the
        forward's casts, so one update after both is the same). GEMMs outside any block — evaluation — read the
        scales and record nothing. Under current scaling and block scaling the block changes nothing but the step.

        Parameters
        ----------
        step : int, optional
            Sets :attr:`step` first (the stochastic-rounding stream), as the trainer does every step.

        On an exception inside the block, recording stops and no update runs. Blocks do not nest.

        Examples
        --------
        >>> import numpy as np, roundoff
        >>> run = roundoff.Runner("te-fp8-delayed,fp8-scaling=delayed:2:max:0")
        >>> w = np.full((4, 16), 0.5)
        >>> for step, a in enumerate([2.0, 8.0, 1.0]):       # the amax of x changes every step
        ...     with run.train_step(step):
        ...         y = run.matmul_forward(np.full((3, 16), a), w, name="fc1")
        ...     print(run.fp8_state()["L-1.matmul.fc1.x"]["scale"])    # 448 / max(last 2 amaxes)
        224.0
        56.0
        56.0
        >>> y = run.matmul_forward(np.full((3, 16), 100.0), w, name="fc1")  # evaluation: reads, records nothing
        >>> run.fp8_state()["L-1.matmul.fc1.x"]["history"]
        array([0., 1.], dtype=float32)
        """
        if self._r.record_amax:
            raise RuntimeError("train_step: this Runner is already inside a train_step (blocks do not nest)")
        if step is not None:
            self.step = step
        self._r.record_amax = True
        try:
            yield self
        except BaseException:
            self._r.record_amax = False
            raise
        self._r.record_amax = False
        self._r.update_scales()

    @property
    def record_amax(self) -> bool:
        """Whether GEMMs fold their delayed-scaled operands' amax into the histories (on inside :meth:`train_step`).

        With :meth:`update_scales` it is the step protocol in two pieces, for code that cannot use a ``with`` block:
        ``run.record_amax = True``; forward; backward; ``run.record_amax = False``; ``run.update_scales()``."""
        return self._r.record_amax

    @record_amax.setter
    def record_amax(self, on: bool) -> None:
        self._r.record_amax = bool(on)

    def update_scales(self) -> None:
        """The end of a recorded step: every tensor's delayed-scaling update (see :meth:`train_step`). Nothing under
        current scaling."""
        self._r.update_scales()

    @property
    def fp8_scaling(self) -> str:
        """The policy's per-tensor scaling: ``"current"``, ``"current:M"`` or ``"delayed:H:ALGO:M"``."""
        return self._r.fp8_scaling

    def fp8_state(self) -> dict:
        """Every per-tensor fp8 operand's state so far, keyed ``"L<layer>.<op>.<name>.<x|w|dy>"``: a dict with
        ``elem`` ("e4m3" or "e5m2"), ``scale`` and ``scale_inv`` (binary32 values) and ``history`` (float32 array of
        length H; ``history[0]`` is the amax being recorded in the current step). A tensor appears at its first
        GEMM. Save it with your checkpoint and restore it with :meth:`set_fp8_state` to resume bit for bit."""
        return self._r.fp8_state()

    def set_fp8_state(self, tensors: dict) -> None:
        """Replaces the state with ``tensors`` (a dict as :meth:`fp8_state` returns it). Every history must have the
        policy's length H (else ``ValueError`` naming the tensor)."""
        if not isinstance(tensors, dict):
            raise TypeError("set_fp8_state: tensors must be a dict as fp8_state() returns it")
        conv = {}
        for k, v in tensors.items():
            if not isinstance(v, dict):
                raise TypeError(f"set_fp8_state: tensor {k!r} must be a dict (elem, scale, history)")
            d = dict(v)
            if "history" in d:
                d["history"] = np.ascontiguousarray(d["history"], dtype=np.float32)
            conv[str(k)] = d
        self._r.set_fp8_state(conv)

    def records(self) -> list:
        """The shadow's records so far, one dict per output tensor per sampled call.

        Keys: step, layer, op, pass, tensor, kind, count, median_ulp, p95_ulp, max_ulp, above_1ulp, max_rel,
        norm_rel, signed_rel (the error's component along the reference, relative; negative = shrunk toward 0),
        dot_ratio, underflow, and the output's range events (elements, inf, nan, subnormal, zero, max_abs). ``acc``
        is None except for GEMMs whose operands the policy quantizes (MX, NVFP4, scaled fp8): then a dict of the
        same statistics (count … signed_rel) and units, unit_median, unit_p95, unit_max (per output row) against
        the exact product of the *quantized* operands, i.e. the accumulation and output rounding alone, while the
        top-level statistics stay against the unquantized operands' product.
        """
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
