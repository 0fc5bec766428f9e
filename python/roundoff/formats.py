"""Formats and correct rounding: :class:`Format`, :func:`formats`, :func:`modes`, :func:`round`,
:func:`representable`, :func:`to_bits`, :func:`from_bits`.

Every result equals MPFR's for the same format and mode (the C++ library's tests check every 16-bit
encoding and every fp32 input path against MPFR; python/tests check these bindings against it bit for bit).
"""
from __future__ import annotations

import builtins

import numpy as np

from . import _roundoff as _c
from ._arrays import as_f64, as_format, as_mode, as_seed, as_stream, fits_float32

Format = _c.Format
Format.__doc__ = """A binary floating-point format: precision p (with the hidden bit), emin, emax, subnormals,
specials and saturation.

Parameters
----------
name : str
    A preset (``fp64 fp32 tf32 bf16 fp16 e4m3 e5m2``) or a custom spec
    ``p<P>:emin<A>:emax<B>[:nosub][:nanonly|:nospecials][:sat]``.
p, emin, emax, subnormals, specials, saturate
    The fields, by keyword: ``Format(p=11, emin=-14, emax=15)`` is fp16. ``specials`` is ``"ieee"``
    (inf and NaN), ``"nan-only"`` (OCP E4M3FN) or ``"none"``.

Attributes
----------
name, p, emin, emax, subnormals, specials, saturate
max_finite, min_normal, min_positive, unit_roundoff (2**-p), encoding ((exponent bits, fraction bits, bias) or None)

Examples
--------
>>> import roundoff
>>> f = roundoff.Format("fp16")
>>> f.max_finite, f.min_positive, f.unit_roundoff
(65504.0, 5.960464477539063e-08, 0.00048828125)
>>> roundoff.Format(p=4, emin=-6, emax=8, specials="nan-only").name
'e4m3'
"""


def formats() -> list:
    """The preset formats, in table order.

    Examples
    --------
    >>> import roundoff
    >>> [f.name for f in roundoff.formats()][:4]
    ['fp64', 'fp32', 'tf32', 'bf16']
    """
    return [_c.Format(n) for n in _c.format_names()]


def modes() -> list:
    """The rounding-mode names: nearest-even nearest-away toward-zero up down odd stochastic.

    Examples
    --------
    >>> import roundoff
    >>> roundoff.modes()[-2:]
    ['odd', 'stochastic']
    """
    return list(_c.rounding_names())


def round(x, format, mode: str = "nearest-even", *, seed=None, stream: int = 0, out=None):  # noqa: A001
    """Round every element of ``x`` to ``format`` in ``mode``, correctly (one rounding of the exact value).

    Parameters
    ----------
    x : array_like
        float64, float32, float16 or integer values (each exact in binary64).
    format : Format or str
    mode : str
        One of :func:`modes`. ``"stochastic"`` rounds up with probability equal to the distance to the lower
        neighbour over the gap, from a counter-based stream: element ``i`` (in C order) uses draw ``i`` of
        stream ``stream`` under ``seed`` — the same draws as the C++ ``round_array`` — so results do not
        depend on threads or on how an array is split.
    seed : int, optional
        Required for stochastic rounding.
    stream : int
    out : numpy.ndarray, optional
        Where to write the result (no allocation): C-contiguous, writable, of x's shape and of the result's
        dtype (float32 for float32 input when the format fits binary32, else float64). May be ``x`` itself.

    Returns
    -------
    numpy.ndarray or numpy scalar
        float64, or float32 when ``x`` is float32 and every value of ``format`` is a binary32 number.
        Overflow, subnormals, signed zeros and NaN follow IEEE 754 and the format's specials/saturation; a NaN
        for a format without NaN (``:nospecials``) is a ValueError, as in the CLI.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> roundoff.round(np.array([0.1, 1/3, 70000.0]), "fp16")
    array([0.09997559, 0.33325195,        inf])
    >>> roundoff.round(1 + 2**-11, "fp16", "odd") - 1
    0.0009765625
    >>> r = roundoff.round(np.full(1000, 0.1), "bf16", "stochastic", seed=7)
    >>> sorted(set(r)), bool(np.all(r == roundoff.round(np.full(1000, 0.1), "bf16", "stochastic", seed=7)))
    ([0.099609375, 0.10009765625], True)
    """
    f = as_format(format)
    m = as_mode(mode)
    s = as_seed(seed, m == "stochastic")
    st = as_stream(stream)
    a = np.asarray(x)
    if f.specials == "none":
        _refuse_nan(a, f, "x")
    f32 = a.dtype == np.float32 and fits_float32(f)
    if out is not None:
        _check_out(out, a.shape, np.float32 if f32 else np.float64)
    if f32:
        r = _c.round_f32(np.require(a, requirements="C"), f, m, s, st, 0, out)
    else:
        r = _c.round_f64(as_f64(a, "x"), f, m, s, st, 0, out)
    return r[()] if a.ndim == 0 and out is None else r


def _refuse_nan(a: np.ndarray, f, name: str, what: str = "is NaN") -> None:
    """A format without NaN (``:nospecials``) cannot hold a NaN: refuse it, naming the first one."""
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if nan.any():
            i = np.unravel_index(int(np.argmax(nan)), a.shape) if a.ndim else ()
            where = f"{name}[{', '.join(str(int(k)) for k in i)}]" if a.ndim else name
            raise ValueError(f"{where} {what}, which {f.name} cannot encode (no NaN); valid: a format with NaN")


def _check_out(out, shape, dtype) -> None:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out: dtype {out.dtype} is not the result's dtype {np.dtype(dtype)}")
    if out.shape != shape:
        raise ValueError(f"out: shape {out.shape} is not x's shape {shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out: must be C-contiguous and writable (a non-contiguous view cannot be written in place)")


def representable(x, format) -> np.ndarray:
    """Boolean array: is each element a value of ``format`` (NaN/inf count where the format has them)?

    Examples
    --------
    >>> import roundoff
    >>> roundoff.representable([1.0, 0.1, 65504.0, 65520.0], "fp16")
    array([ True, False,  True, False])
    """
    f = as_format(format)
    a = as_f64(x, "x")
    r = _c.representable(a, f)
    return r[()] if a.ndim == 0 else r


def to_bits(x, format) -> np.ndarray:
    """The encodings (uint64) of values of ``format`` (ValueError for a value that is not one).

    Examples
    --------
    >>> import roundoff
    >>> [hex(b) for b in roundoff.to_bits([1.0, -2.0, 448.0], "e4m3")]
    ['0x38', '0xc0', '0x7e']
    """
    f = as_format(format)
    a = as_f64(x, "x")
    r = _c.to_bits(a, f)
    return r[()] if a.ndim == 0 else r


def from_bits(bits, format) -> np.ndarray:
    """The values (float64) of encodings of ``format``.

    Examples
    --------
    >>> import roundoff
    >>> roundoff.from_bits([0x3C00, 0x7BFF, 0x0001], "fp16")
    array([1.00000000e+00, 6.55040000e+04, 5.96046448e-08])
    """
    f = as_format(format)
    b = np.asarray(bits)
    if b.dtype.kind not in "iu":
        raise TypeError(f"bits: expected an integer array, got dtype {b.dtype}")
    if b.size and b.dtype.kind == "i" and int(b.min()) < 0:
        raise ValueError("bits: encodings are non-negative")
    r = _c.from_bits(np.ascontiguousarray(b, dtype=np.uint64), f)
    return r[()] if b.ndim == 0 else r


_ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "fma": 3, "sqrt": 1, "exp": 1, "log": 1, "sigmoid": 1,
          "tanh": 1, "rsqrt": 1, "sin": 1, "cos": 1, "erf": 1}


def arith(op: str, x, y=None, z=None, *, format, mode: str = "nearest-even", seed=None, stream: int = 0):
    """Elementwise correctly rounded arithmetic: ``round_format(op(x, y, z))`` with one rounding.

    Parameters
    ----------
    op : str
        ``add sub mul div fma sqrt exp log sigmoid tanh rsqrt sin cos erf`` (fma is ``x*y + z``, sigmoid is
        ``1/(1+exp(-x))``, rsqrt is ``1/sqrt(x)``).
    x, y, z : array_like
        Operands (exact binary64 values), broadcast together as numpy does.
    format : Format or str
    mode : str
    seed, stream : int
        For ``mode="stochastic"``: element ``i`` of the broadcast result (C order) uses draw ``i``.

    Returns
    -------
    numpy.ndarray of float64 (a numpy scalar when every operand is a scalar)

    Examples
    --------
    >>> import roundoff
    >>> roundoff.arith("fma", 1.75, float.fromhex("0x1.b7p+0"), 2**-24, format="fp16")  # one rounding, not two
    3.001953125
    >>> roundoff.arith("add", [1.0, 1.0], 2**-11, format="fp16", mode="up")
    array([1.00097656, 1.00097656])
    """
    if op not in _ARITY:
        raise ValueError(f"arith: unknown operation {op!r}; valid: {', '.join(_ARITY)}")
    n = _ARITY[op]
    ops = [x, y, z][:n]
    given = builtins.sum(o is not None for o in (x, y, z))
    if given != n or builtins.any(o is None for o in ops):
        raise ValueError(f"arith: {op} takes {n} operand{'s' if n > 1 else ''} (x{', y' if n > 1 else ''}"
                         f"{', z' if n > 2 else ''}), got {given}")
    f = as_format(format)
    m = as_mode(mode)
    s = as_seed(seed, m == "stochastic")
    st = as_stream(stream)
    arrays = [as_f64(o, name) for o, name in zip(ops, "xyz")]
    try:
        b = np.broadcast_arrays(*arrays)
    except ValueError as e:
        raise ValueError(f"arith: operands of shapes {[a.shape for a in arrays]} do not broadcast") from e
    b = [np.require(a, requirements="C") for a in b]
    if f.specials == "none":
        for a, name in zip(b, "xyz"):
            _refuse_nan(a, f, name)
    r = _c.arith(op, f, m, b[0], b[1] if n > 1 else None, b[2] if n > 2 else None, s, st)
    if f.specials == "none":
        _refuse_nan(r, f, "the result", f"of {op} is NaN (an invalid operation)")
    return r[()] if r.ndim == 0 else r
