"""Per-op precision policies and the per-op error study: :class:`Policy`, :func:`policies`, :func:`op_error`.

A policy says, for every (op, pass), the storage and compute formats, the rounding mode and the accumulation
of every reduction, plus the formats of weights, master weights, Adam moments and gradients. The grammar is
docs/policy.md's; ``Policy(spec).canonical`` is the text every result's provenance carries.
"""
from __future__ import annotations

from . import _roundoff as _c
from ._arrays import as_policy

Policy = _c.Policy
Policy.__doc__ = """A precision policy from a preset or a spec.

Parameters
----------
spec : str
    ``PRESET[,item...]``: presets are :func:`policies` (fp64 fp32 ane-fp16 ane-guide amp-fp16 pure-bf16 …);
    items are ``OP[.PASS]=STORAGE[/COMPUTE][/ACC][/ROUNDING]``, ``OP.FIELD=VALUE`` (storage compute rounding acc
    approx saturate nan ftz daz), ``ROLE=FORMAT`` (weights master adam-m adam-v grads), ``loss-scale=N``,
    ``attention=materialised|online``.

Attributes
----------
canonical : str   nearest preset + overrides; ``Policy(p.canonical) == p``
loss_scale : float
attention : str

Methods
-------
entry(op, pass_="fwd") -> dict   storage, compute (Formats), rounding, accumulation, text, extras (the
                                 non-default approx/saturate/nan/ftz/daz), ftz ("off", "out", "all"),
                                 daz ("off", "on")
table() -> list of dict          every (op, pass) entry
roles() -> dict                  tensor-role formats

Examples
--------
>>> import roundoff
>>> p = roundoff.Policy("ane-fp16,softmax=fp32")
>>> p.entry("softmax")["storage"].name
'fp32'
>>> roundoff.Policy(p.canonical) == p
True
>>> roundoff.Policy("fp32").entry("matmul", "bwd-weight")["accumulation"].canonical
'fp32-seq'
"""


def policies() -> list:
    """The policy preset names.

    Examples
    --------
    >>> import roundoff
    >>> "ane-fp16" in roundoff.policies()
    True
    """
    return list(_c.policy_names())


def ops() -> list:
    """The op names a policy sets (embedding rmsnorm matmul … adamw)."""
    return list(_c.op_names())


def op_error(op: str, policy, *, shape=None, rows: int = 16, scale: float = 1.0, seed: int = 1,
             ref_budget: float = 1.0e6) -> list:
    """One case of the per-op error study: the op forward and every backward pass it has, under ``policy``,
    on controlled random inputs at AutoANE's shapes, each output compared with an MPFR-exact reference run on
    the same rounded inputs (the shadow). The same computation as ``roundoff op-error``.

    Parameters
    ----------
    op : str
        An op name (:func:`ops`).
    policy : Policy or str
    shape : str or dict, optional
        Overrides of the op's default dimensions, e.g. ``"in=256,out=64"`` or ``{"in": 256}``.
    rows : int
        Independent outputs computed (the study subsamples; reductions keep their full length).
    scale : float
        Activation σ, or the logits' standard deviation for attention ops.
    seed : int
        Input draws.
    ref_budget : float
        Reference multiply-adds per shadowed call (how many units the MPFR shadow checks).

    Returns
    -------
    list of dict
        One record per output tensor per pass: op, pass, tensor, count, median_ulp, p95_ulp, max_ulp,
        above_1ulp, max_rel, norm_rel, dot_ratio, underflow, elements, inf, nan, subnormal, zero, max_abs, shape.

    Examples
    --------
    >>> import roundoff
    >>> recs = roundoff.op_error("softmax", "ane-fp16", shape="T=64", rows=2)
    >>> sorted({r["pass"] for r in recs})
    ['bwd-data', 'fwd']
    >>> all(r["count"] > 0 for r in recs)
    True
    """
    p = as_policy(policy)
    if isinstance(shape, dict):
        shape = ",".join(f"{k}={v}" for k, v in shape.items())
    if shape is not None and not isinstance(shape, str):
        raise TypeError("shape: expected a string 'k=v,...' or a dict")
    return _c.op_error(op, p, shape or "", int(rows), float(scale), int(seed), float(ref_budget))
