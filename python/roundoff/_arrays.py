"""Argument conversion shared by the package: arrays to float64, formats, modes, accumulations, seeds.

Every public function converts its arguments here, so that a wrong dtype, shape or name gets one
``TypeError``/``ValueError`` naming the argument and what is valid, before any C++ code runs.
"""
from __future__ import annotations

import numpy as np

from . import _roundoff as _c

_EXACT_INT_LIMIT = 2**53


def as_f64(x, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float64 array, without a copy when it already is one.

    float16/float32 convert exactly; integer and bool arrays convert when every value is exact in
    binary64 (|v| <= 2**53). Anything else (complex, object, strings) is refused.
    """
    a = np.asarray(x)
    kind = a.dtype.kind
    if kind == "f" and a.dtype.itemsize <= 8:  # float16/32/64 (0-d arrays stay 0-d)
        return np.require(a, dtype=np.float64, requirements="C")
    if kind in "iub":
        if kind != "b" and a.size and int(np.max(np.abs(a.astype(object)))) > _EXACT_INT_LIMIT:
            raise ValueError(f"{name}: integers above 2**53 in magnitude are not exact in binary64")
        return np.require(a, dtype=np.float64, requirements="C")
    raise TypeError(f"{name}: dtype {a.dtype} is not supported; valid: float16, float32, float64, "
                    "integer or bool arrays")


def _typed(v, cls, what: str, name: str):
    """v itself when it is a cls, cls(v) when it is a string (the C++ parser's one-line ValueError otherwise)."""
    if isinstance(v, cls):
        return v
    if isinstance(v, str):
        return cls(v)
    raise TypeError(f"{name}: expected a roundoff.{cls.__name__} or {what}, got {type(v).__name__}")


def as_format(f, name: str = "format") -> _c.Format:
    """A :class:`roundoff.Format` from a Format or a name such as ``"fp16"`` or ``"p11:emin-14:emax15"``."""
    return _typed(f, _c.Format, "a format name", name)


def as_mode(mode, name: str = "mode") -> str:
    """The canonical name of a rounding mode (ValueError listing the valid names otherwise)."""
    if not isinstance(mode, str):
        raise TypeError(f"{name}: expected a rounding-mode name, got {type(mode).__name__}")
    return _c.parse_rounding(mode)


def as_accumulation(a, name: str = "accumulation") -> _c.Accumulation:
    """An :class:`roundoff.Accumulation` from one or a preset/spec string such as ``"tc-h100"``."""
    return _typed(a, _c.Accumulation, "a spec string", name)


def as_policy(p, name: str = "policy") -> _c.Policy:
    """A :class:`roundoff.Policy` from one or a spec string such as ``"ane-fp16,softmax=fp32"``."""
    return _typed(p, _c.Policy, "a policy spec", name)


def _u64(v, name: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__}")
    if not 0 <= int(v) < 2**64:
        raise ValueError(f"{name}: must be in [0, 2**64), got {v}")
    return int(v)


def as_seed(seed, stochastic: bool, name: str = "seed") -> int:
    """The 64-bit seed: required (an int) when something rounds stochastically, else 0 by default."""
    if seed is None:
        if stochastic:
            raise ValueError(f"{name}: stochastic rounding needs an explicit integer seed= (draws are "
                             "reproducible: the same seed, stream and index give the same bits)")
        return 0
    return _u64(seed, name)


def as_stream(stream, name: str = "stream") -> int:
    return _u64(stream, name)


def check_values_of(a: np.ndarray, fmt: _c.Format, name: str, transposed: bool = False) -> None:
    """ValueError naming the first element of ``a`` that is not a value of ``fmt`` (never a silent rounding).

    ``a`` is C-contiguous float64; ``transposed``: it holds the transpose of the argument called ``name``.
    """
    i = _c.first_not_representable(a, fmt)
    if i >= 0:
        idx = np.unravel_index(i, a.shape) if a.ndim else ()
        if transposed:
            idx = idx[::-1]
        where = f"{name}[{', '.join(str(int(k)) for k in idx)}]" if a.ndim else name
        v = a.reshape(-1)[i]
        raise ValueError(f"{where} = {float(v)!r} ({float(v).hex()}) is not a value of {fmt.name}; round it "
                         f"first, e.g. roundoff.round({name}, '{fmt.name}')")


def fits_float32(fmt: _c.Format) -> bool:
    """True when every value of ``fmt`` is a binary32 number (then float32 arrays round in float32)."""
    qmin = fmt.emin - fmt.p + 1 if fmt.subnormals else fmt.emin
    return fmt.emax <= 127 and qmin >= -149 and fmt.p <= 24
