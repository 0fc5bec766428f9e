"""How sums, dot products and GEMMs are formed: :class:`Accumulation`, :func:`accumulations`, :func:`dot`,
:func:`gemm`.

An accumulation is the C++ ``numerics::Accumulation``: accumulator format and rounding, fused or unfused
products, order (sequential, reverse, pairwise, blocked/split-K, Kahan), promotion, the multi-term adders of
GPU tensor cores (``tc-v100*``, ``tc-a100*``, ``tc-ada*``, ``tc-h100*``, ``tc-b200*``, fitted bit for bit to
measured bits of each generation; ``fasi-v100``/``fasi-a100``: Fasi et al.'s models) and the ANE's exact
tiles (``ane-tile4``; ``ane-tile4-ftz`` with the M1's subnormal flush of tile values). docs/numerics.md and ``numerics/accumulate.hpp`` give the exact semantics.
"""
from __future__ import annotations

import numpy as np

from . import _roundoff as _c
from ._arrays import as_accumulation, as_f64, as_format, as_seed, as_stream, check_values_of

Accumulation = _c.Accumulation
Accumulation.__doc__ = """How a reduction is formed, from a preset name or a key=value spec.

Parameters
----------
spec : str
    A preset (see :func:`accumulations`), optionally followed by overrides, or ``key=value`` tokens:
    ``acc=FORMAT[:ROUNDING]``, ``order=seq|reverse|pairwise|kahan|blocked:B``, ``outer=FORMAT``,
    ``fused``/``unfused``, ``product=FORMAT``, ``promote=N[:FORMAT]``, ``group=G``, ``extra=E``,
    ``align=``, ``normalize=``, ``carry=C``, ``anchor=lead|exp-sum:EMIN``, ``edges=ieee|inf-pos-zero``,
    ``tile=G[:FORMAT][:ROUNDING]``, ``splitk=S[:G[:ROUNDING]]`` (cuBLAS split-K: K in chunks of
    G·ceil(K/(G·S)) reduced alone, their results summed in ``outer_format``, e.g. ``tc-h100,splitk=3:64``),
    ``flush=none|tile|step[:FORMAT]|tile+step[:FORMAT]`` (subnormal tile values / rounded partial sums become
    zeros of their sign: the M1 Neural Engine's matmul, ``ane-tile4-ftz``; ``step:FORMAT`` flushes below that
    format's smallest normal).

Attributes
----------
canonical : str   the preset name or canonical spec (``Accumulation(a.canonical) == a``)
spec : str        the full key=value form
format, rounding, fused, product_format, order, block, outer_format, promote_every, promote_format,
adder_group, tile_size, splitk, splitk_granule, flush (the ``flush=`` value, ``"none"`` by default), result_format

Examples
--------
>>> import roundoff
>>> a = roundoff.Accumulation("fp16-seq")
>>> a.spec
'acc=fp16:nearest-even,order=seq,fused'
>>> roundoff.Accumulation("tc-h100-fp8,promote=128:fp32").result_format.name
'fp32'
"""


def accumulations() -> list:
    """The accumulation preset names.

    Examples
    --------
    >>> import roundoff
    >>> "tc-h100" in roundoff.accumulations() and "ane-tile4" in roundoff.accumulations()
    True
    """
    return list(_c.accumulation_names())


def _stochastic(a: _c.Accumulation) -> bool:
    return "stochastic" in a.spec


def _inputs(inputs):
    if isinstance(inputs, (tuple, list)):
        if len(inputs) != 2:
            raise ValueError("inputs: give one format, or a pair (format of a/x, format of b/y)")
        return as_format(inputs[0], "inputs[0]"), as_format(inputs[1], "inputs[1]")
    f = as_format(inputs, "inputs")
    return f, f


def dot(x, y=None, *, inputs, accumulation, seed=None, stream: int = 0, return_overflows: bool = False):
    """Σ x_i·y_i (or Σ x_i when ``y`` is None) under an accumulation, in index order.

    Parameters
    ----------
    x, y : 1-D array_like
        Values of ``inputs`` (anything else is a ValueError, never a silent rounding: round first).
    inputs : Format, str, or a pair of them
        The format(s) the operands are values of (a pair for mixed inputs such as e4m3 × e5m2).
    accumulation : Accumulation or str
    seed, stream : int
        For stochastic accumulations: the k-th rounding of the reduction uses draw k.
    return_overflows : bool
        Also return the number of partial sums that overflowed.

    Returns
    -------
    float
        The accumulator's value (in :attr:`Accumulation.result_format`), as a Python float.

    Examples
    --------
    >>> import roundoff
    >>> roundoff.dot([1, 2, 3], [4, 5, 6], inputs="fp16", accumulation="fp16-seq")
    32.0
    >>> roundoff.dot([2048.0] + [1.0] * 8, inputs="fp16", accumulation="fp16-seq")   # 1s are swamped
    2048.0
    >>> roundoff.dot([2048.0] + [1.0] * 8, inputs="fp16", accumulation="fp32-seq")
    2056.0
    """
    a = as_accumulation(accumulation)
    fx, fy = _inputs(inputs)
    s = as_seed(seed, _stochastic(a))
    st = as_stream(stream)
    xs = as_f64(x, "x")
    if xs.ndim != 1:
        raise ValueError(f"x must be 1-D, got shape {xs.shape}")
    check_values_of(xs, fx, "x")
    if y is None:
        r, ov = _c.sum(a, xs, s, st)
    else:
        ys = as_f64(y, "y")
        if ys.shape != xs.shape:
            raise ValueError(f"x and y must have the same shape, got {xs.shape} and {ys.shape}")
        check_values_of(ys, fy, "y")
        r, ov = _c.dot(a, xs, ys, s, st)
    return (r, ov) if return_overflows else r


def _matrix(m, name):
    """(C-contiguous float64 array, transposed flag): an F-contiguous matrix is read in place as a transpose."""
    arr = np.asarray(m)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
    if arr.dtype == np.float64 and not arr.flags.c_contiguous and arr.flags.f_contiguous:
        return arr.T, True
    return as_f64(arr, name), False


def gemm(a, b, c=None, *, inputs, accumulation, seed=None, stream: int = 0, threads: int = 0,
         return_overflows: bool = False, check: bool = True, out=None):
    """C = A·B (+ C) with every output one dot product in k order under ``accumulation``.

    Parameters
    ----------
    a : (M, K) array_like, values of ``inputs``
    b : (K, N) array_like, values of ``inputs``
    c : (M, N) array_like, optional
        Starting values: C_ij enters the accumulator first, exactly (never rounded on entry); the outer sum of
        blocked orders and the promoted total start from it.
    inputs : Format, str, or a pair (format of a, format of b)
    accumulation : Accumulation or str
        Any spec or preset: ``tc-h100`` (H100 fp16 tensor cores, chained over K exactly as cuBLAS does
        without split-K; ``tc-h100,splitk=3:64`` a cuBLAS split-K call, docs/studies/tensorcore.md), ``ane-tile4``,
        ``fp16-seq``, ``fp16-splitk32-fp32``, ``tc-h100-fp8,promote=128:fp32`` …
    seed, stream : int
        Stochastic accumulations: output (i, j) uses stream ``stream + i*N + j``, draw = rounding step.
    threads : int
        Threads over output rows (0: the OpenMP default). The bits never depend on it.
    return_overflows : bool
        Also return the number of overflowing partial sums.
    check : bool
        Check that every operand is a value of ``inputs`` (default). ``check=False`` skips that O(MK + KN)
        pass for operands you rounded yourself (as ``roundoff.torch`` does); operands that are not values of
        ``inputs`` are then used exactly as given, never rounded.
    out : numpy.ndarray, optional
        (M, N) C-contiguous writable float64 array to write the result into (no allocation); may be ``c``
        itself, which then accumulates in place: ``gemm(a, b, c, out=c)`` is C ← A·B + C.

    Returns
    -------
    numpy.ndarray (M, N) of float64
        The accumulator's values (not rounded to any storage format: use :func:`round` for that).
        C-contiguous float64 operands are read in place, and so are F-contiguous ones (as transposes).

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> a = roundoff.round(np.linspace(-1, 1, 12).reshape(3, 4), "fp16")
    >>> b = roundoff.round(np.linspace(0, 2, 8).reshape(4, 2), "fp16")
    >>> c = roundoff.gemm(a, b, inputs="fp16", accumulation="tc-h100")
    >>> c.shape, c.dtype
    ((3, 2), dtype('float64'))
    >>> bool(np.all(roundoff.representable(c, "fp32")))
    True
    """
    acc = as_accumulation(accumulation)
    fa, fb = _inputs(inputs)
    s = as_seed(seed, _stochastic(acc))
    st = as_stream(stream)
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 0:
        raise ValueError(f"threads: expected an integer >= 0, got {threads!r}")
    A, at = _matrix(a, "a")
    B, bt = _matrix(b, "b")
    if check:
        check_values_of(A, fa, "a", transposed=at)
        check_values_of(B, fb, "b", transposed=bt)
    M, K = (A.shape[1], A.shape[0]) if at else A.shape
    K2, N = (B.shape[1], B.shape[0]) if bt else B.shape
    if K != K2:
        raise ValueError(f"gemm: a is {M}x{K} and b is {K2}x{N}: inner dimensions differ")
    C = None
    if c is not None:
        C = as_f64(c, "c")
        if C.shape != (M, N):
            raise ValueError(f"gemm: c must be {M}x{N}, got shape {C.shape}")
    if out is not None:
        if not isinstance(out, np.ndarray) or out.dtype != np.float64:
            raise TypeError("out: expected a float64 numpy array")
        if out.shape != (M, N):
            raise ValueError(f"out: shape {out.shape} is not the result's shape {(M, N)}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out: must be C-contiguous and writable (a non-contiguous view cannot be written in place)")
        if c is not None and C is not out and np.shares_memory(C, out):
            raise ValueError("out: overlaps c without being c itself")
    r, ov = _c.gemm(acc, A, at, B, bt, C, s, st, int(threads), out)
    return (r, ov) if return_overflows else r
