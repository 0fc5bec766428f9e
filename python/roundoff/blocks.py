"""Block-scaled quantization: :func:`quantize`, :func:`dequantize`, :func:`block_formats`.

Blocks of k consecutive values along one axis share a scale: OCP Microscaling (``mxfp8-e4m3``,
``mxfp8-e5m2``, ``mxfp6-e3m2``, ``mxfp6-e2m3``, ``mxfp4``, ``mxint8``; blocks of 32, E8M0 scales, OCP's
floor rule or NVIDIA's ceil rule as ``NAME:nv-ceil``), NVIDIA's ``nvfp4`` (blocks of 16, E4M3 block scales
and an fp32 tensor scale, Transformer Engine's fp32 chain) and symmetric group-wise ``int4-g32``/``g64``/
``g128`` (fp16 scale amax/7) and QLoRA's ``nf4`` (blocks of 64, fp32 absmax scale, the 16-value
NormalFloat codebook; codes are codebook indices, scales the fp32 bit patterns as uint32) and MLX's
group-wise affine integers ``mlx-intB-gG[-bf16|-fp32]`` (B bits in 2..8, groups of 32/64/128, a scale and
a bias per group in fp16 unless the suffix says otherwise, as ``mx.quantize`` computes them; the bias codes
are in ``.biases``), and GPTQ's asymmetric grid ``gptq-intB-gG`` (fp16 scale, integer zero point in
``.biases``), QLoRA's double-quantized ``nf4-dq`` (uint8 scale codes; ``.scale_scales`` and ``.scale_offset``)
and palettes (:func:`palettize`, or ``quantize(x, "palette", lut=...)``). :func:`pack_codes` packs codes as checkpoints store them. The rules are written out in docs/numerics.md, "Block-scaled formats"; every
result is the C++ library's (numerics/block_format.hpp).
"""
from __future__ import annotations

import numpy as np

from . import _roundoff as _c
from ._arrays import as_accumulation, as_seed, as_stream


class Quantized(tuple):
    """``(values, codes, scales)``, with the NVFP4 tensor scale as ``.tensor_scale`` (1.0 otherwise) and
    the MLX affine formats' bias codes as ``.biases`` (None otherwise)."""

    def __new__(cls, values, codes, scales, tensor_scale, biases=None, scale_scales=None, scale_offset=None):
        t = super().__new__(cls, (values, codes, scales))
        t.tensor_scale = tensor_scale
        t.biases = biases
        t.scale_scales = scale_scales
        t.scale_offset = scale_offset
        return t

    @property
    def values(self):
        return self[0]

    @property
    def codes(self):
        return self[1]

    @property
    def scales(self):
        return self[2]


def block_formats() -> list:
    """The block-format names.

    Examples
    --------
    >>> import roundoff
    >>> roundoff.block_formats()[:3]
    ['mxfp8-e4m3', 'mxfp8-e5m2', 'mxfp6-e3m2']
    """
    return list(_c.block_format_names())


def _info(name):
    if not isinstance(name, str):
        raise TypeError(f"name: expected a block-format name, got {type(name).__name__}")
    canonical, block, _, scale_bits, _, _, rows = _c.block_format_info(name)
    return canonical, block, {8: np.uint8, 16: np.uint16, 32: np.uint32}[scale_bits], rows


def _axis(ndim: int, axis: int) -> int:
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: {axis} is out of range for an array of {ndim} dimensions")
    return int(axis) % ndim


def _lut(lut):
    table = np.asarray(lut)
    if table.dtype.kind != "f" or table.ndim not in (1, 2):
        raise TypeError(f"lut: expected a float array of shape (k,) or (G, k), got {table.dtype} {table.shape}")
    t32 = table.astype(np.float32)
    if not np.array_equal(t32.astype(np.float64), table.astype(np.float64), equal_nan=True):
        raise ValueError("lut: entries must be float32 values")
    return np.ascontiguousarray(t32), table.shape[-1], (table.shape[0] if table.ndim == 2 else 1)


def palettize(x, lut) -> Quantized:
    """Palettize ``x`` with a given LUT (Core ML's palettization): each value becomes the index of its
    nearest LUT entry; a tie (and duplicated entries) gives the lowest index, as ``np.argmin(abs(x - lut))``.

    ``lut`` has shape ``(k,)`` (one table, k <= 256) or ``(G, k)`` (one table per group of rows along axis 0:
    x's first axis splits into G equal groups). Returns ``(values, codes, lut)``: values (float32 for float32
    input, else float64, each exactly a LUT entry), uint8 indices of x's shape, the float32 LUT. The rule:
    numerics/palette.hpp and docs/numerics.md, "Palettes".

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> q = roundoff.palettize(np.array([0.3, -0.75, 2.0], dtype=np.float32), [-1.0, 0.0, 1.0, 0.5])
    >>> q.codes, q.values
    (array([3, 0, 2], dtype=uint8), array([ 0.5, -1. ,  1. ], dtype=float32))
    """
    table, k, groups = _lut(lut)
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError("x: palettize needs at least one dimension")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"x: dtype {a.dtype} is not supported; valid: float32, float64, float16 or integers")
    f32 = a.dtype == np.float32
    flat = np.ascontiguousarray(a, dtype=np.float64).reshape(-1)
    codes = _c.palettize(flat, table.reshape(-1), k, groups, a.shape[0])
    values = _c.depalettize(codes, table.reshape(-1), k, groups, a.shape[0])
    return Quantized(values.astype(np.float32 if f32 else np.float64).reshape(a.shape), codes.reshape(a.shape),
                     table, 1.0)


def depalettize(codes, lut, *, dtype=np.float32):
    """The LUT values of ``codes`` (uint8 indices, as :func:`palettize` returns them) under ``lut``.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> roundoff.depalettize(np.array([[1, 0]], dtype=np.uint8), [[2.0, 4.0]])
    array([[4., 2.]], dtype=float32)
    """
    table, k, groups = _lut(lut)
    c = np.asarray(codes)
    if c.dtype != np.uint8 or c.ndim == 0:
        raise TypeError(f"codes: expected uint8 indices with at least one dimension, got {c.dtype} {c.shape}")
    v = _c.depalettize(np.ascontiguousarray(c).reshape(-1), table.reshape(-1), k, groups, c.shape[0])
    return v.astype(np.dtype(dtype)).reshape(c.shape)


def quantize(x, name: str, *, axis: int = -1, lut=None) -> Quantized:
    """Quantize ``x`` in blocks along ``axis`` and return ``(values, codes, scales)``.

    Parameters
    ----------
    x : array_like
        float32 or float64 (float16 and integers are converted to float64), at least one dimension; the
        length of ``axis`` must be a multiple of the block size.
    name : str
        One of :func:`block_formats`, an MX name with a rule, ``"mxfp4:nv-ceil"``, or an MLX affine name
        ``"mlx-intB-gG[-bf16|-fp32]"``.
    axis : int
        The axis the blocks run along (default: the last).

    Returns
    -------
    Quantized
        ``values``: the dequantized values (float32 for float32 input, else float64), each the exact decoded
        value rounded once; ``codes``: uint8 element encodings (OCP bit layouts; integers in two's
        complement, low bits; nf4: the codebook index), of x's shape; ``scales``: block scale encodings
        (uint8 for E8M0/UE4M3, uint16 for fp16, uint32 for nf4's fp32), of x's shape with ``axis``
        divided by the block size (MLX affine: the IEEE bits of the signed scales, uint16 for fp16/bf16).
        ``.tensor_scale`` is NVFP4's fp32 encode scale S_enc (1.0 for the other formats); ``.biases`` the
        MLX affine formats' bias bits, shaped like ``scales`` (None for the other formats).

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> x = np.zeros(32, dtype=np.float32); x[:4] = [7.5, 1.2, -0.3, 0.25]
    >>> values, codes, scales = roundoff.quantize(x, "mxfp4")
    >>> values[:4], codes[:4], scales
    (array([ 6. ,  1. , -0.5,  0. ], dtype=float32), array([7, 2, 9, 0], dtype=uint8), array([127], dtype=uint8))
    >>> roundoff.quantize(x, "mxfp4:nv-ceil").values[:4]
    array([ 8.,  1., -0.,  0.], dtype=float32)
    >>> q = roundoff.quantize(np.arange(64, dtype=np.float32) / 8, "mlx-int4-g64")  # bias 7.875, scale -0.525
    >>> q.codes[:3], q.values[:2], q.scales.dtype, q.biases.shape
    (array([15, 15, 15], dtype=uint8), array([0.00146484, 0.00146484], dtype=float32), dtype('uint16'), (1,))
    """
    if name == "palette":
        if lut is None:
            raise ValueError("lut: quantize(x, 'palette') needs lut=, a float32 array of shape (k,) or (G, k)")
        if axis != -1:
            raise ValueError("axis: palette groups run along axis 0; valid: no axis")
        return palettize(x, lut)
    if lut is not None:
        raise ValueError(f"lut: applies to 'palette' only, not {name!r}")
    canonical, block, _, rows = _info(name)
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError("x: a block-scaled format needs at least one dimension")
    if rows > 1 and a.ndim != 2:
        raise ValueError(f"x: {canonical} quantizes matrices in {rows}x{block} tiles; got {a.ndim} dimensions")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"x: dtype {a.dtype} is not supported; valid: float32, float64, float16 or integers")
    f32 = a.dtype == np.float32
    ax = _axis(a.ndim, axis)
    moved = np.ascontiguousarray(np.moveaxis(a, ax, -1), dtype=np.float32 if f32 else np.float64)
    n = moved.shape[-1]
    shape = moved.shape
    scale_shape = shape[:-2] + (shape[-2] // rows, n // block) if rows > 1 else shape[:-1] + (n // block,)
    if canonical == "nf4-dq":
        codes, scales, ss, off = _c.quantize_blocks_dq(moved.reshape(-1).astype(np.float64), name, n)
        values = _c.dequantize_blocks_dq(codes, scales, ss, off, name, f32, n).astype(np.float32 if f32 else np.float64)
        return Quantized(np.moveaxis(values.reshape(shape), -1, ax), np.moveaxis(codes.reshape(shape), -1, ax),
                         np.moveaxis(scales.astype(np.uint8).reshape(scale_shape), -1, ax), 1.0,
                         scale_scales=ss.view(np.float32), scale_offset=float(off))
    if f32:  # float32 input straight to the C++ float overload (the same codes as its float64 widening)
        codes, scales, ts, biases = _c.quantize_blocks_f32(moved.reshape(-1), name, n)
    else:
        codes, scales, ts, biases = _c.quantize_blocks(moved.reshape(-1), name, n)
    values = _c.dequantize_blocks(codes, scales, name, ts, f32, biases, n).astype(np.float32 if f32 else np.float64)
    scale_dtype = _info(canonical)[2]
    per_block = lambda a: np.moveaxis(a.astype(scale_dtype).reshape(scale_shape), -1, ax)  # noqa: E731
    return Quantized(np.moveaxis(values.reshape(shape), -1, ax), np.moveaxis(codes.reshape(shape), -1, ax),
                     per_block(scales), float(ts), per_block(biases) if biases.size else None)


def dequantize(codes, scales, name: str, *, axis: int = -1, tensor_scale: float = 1.0, biases=None,
               dtype=np.float32, scale_scales=None, scale_offset=None):
    """The values of ``codes`` and ``scales`` as :func:`quantize` returns them.

    Parameters
    ----------
    codes : array_like of uint8
    scales : array_like of uint8/uint16/uint32
        ``codes``' shape with ``axis`` divided by the block size.
    name : str
    axis : int
    tensor_scale : float
        NVFP4's S_enc (``Quantized.tensor_scale``); ignored by the other formats.
    biases : array_like, optional
        The MLX affine formats' bias bits (``Quantized.biases``), shaped like ``scales``; required for
        them and refused for the other formats.
    dtype : float32 or float64
        Each value is the exact decoded value rounded once (nearest-even) to this type.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> q = roundoff.quantize(np.linspace(-1, 1, 32), "int4-g32")
    >>> bool(np.all(roundoff.dequantize(q.codes, q.scales, "int4-g32", dtype=np.float64) == q.values))
    True
    >>> roundoff.dequantize(np.array([7] + [0] * 31, dtype=np.uint8), np.array([130], dtype=np.uint8), "mxfp4")[:2]
    array([48.,  0.], dtype=float32)
    """
    canonical, block, scale_dtype, rows = _info(name)
    if canonical == "nf4-dq":
        scale_dtype = np.uint8
        if scale_scales is None or scale_offset is None:
            raise ValueError("scale_scales, scale_offset: nf4-dq needs both (Quantized.scale_scales, .scale_offset)")
    elif scale_scales is not None or scale_offset is not None:
        raise ValueError(f"scale_scales, scale_offset: apply to nf4-dq only, not {name!r}")
    c = np.asarray(codes)
    s = np.asarray(scales)
    if c.dtype != np.uint8:
        raise TypeError(f"codes: dtype {c.dtype} is not uint8")
    if s.dtype.kind != "u" or s.dtype.itemsize > np.dtype(scale_dtype).itemsize:
        raise TypeError(f"scales: dtype {s.dtype} is not {np.dtype(scale_dtype)}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise TypeError(f"dtype: {np.dtype(dtype)} is not float32 or float64")
    if c.ndim == 0:
        raise ValueError("codes: need at least one dimension")
    ax = _axis(c.ndim, axis)
    cm = np.ascontiguousarray(np.moveaxis(c, ax, -1))
    want = cm.shape[:-1] + (cm.shape[-1] // block,)
    if rows > 1:
        if cm.ndim != 2 or cm.shape[0] % rows:
            raise ValueError(f"codes: {canonical} needs a matrix whose rows are a multiple of {rows}, got {c.shape}")
        want = (cm.shape[0] // rows, cm.shape[1] // block)
    if cm.shape[-1] % block != 0:
        raise ValueError(f"codes: axis length {cm.shape[-1]} is not a multiple of {canonical}'s block size {block}")
    sm = np.ascontiguousarray(np.moveaxis(s, ax, -1), dtype=np.uint32) if s.ndim == c.ndim else None
    if sm is None or sm.shape != want:
        raise ValueError(f"scales: shape {s.shape} does not match codes {c.shape} with blocks of {block} on axis {ax}")
    bm = np.zeros(0, dtype=np.uint32)
    if biases is not None:
        b = np.asarray(biases)
        if b.dtype.kind != "u" or b.dtype.itemsize > np.dtype(scale_dtype).itemsize:
            raise TypeError(f"biases: dtype {b.dtype} is not {np.dtype(scale_dtype)}")
        if b.shape != s.shape:
            raise ValueError(f"biases: shape {b.shape} is not the shape of scales {s.shape}")
        bm = np.ascontiguousarray(np.moveaxis(b, ax, -1), dtype=np.uint32).reshape(-1)
    f32 = np.dtype(dtype) == np.float32
    if canonical == "nf4-dq":
        ss = np.ascontiguousarray(np.asarray(scale_scales, dtype=np.float32)).view(np.uint32).reshape(-1)
        v = _c.dequantize_blocks_dq(cm.reshape(-1), sm.reshape(-1), ss, float(np.float32(scale_offset)), name, f32,
                                    cm.shape[-1])
        return np.moveaxis(v.astype(np.dtype(dtype)).reshape(cm.shape), -1, ax)
    v = _c.dequantize_blocks(cm.reshape(-1), sm.reshape(-1), name, float(tensor_scale), f32, bm, cm.shape[-1])
    return np.moveaxis(v.astype(np.dtype(dtype)).reshape(cm.shape), -1, ax)


def block_gemm(a, b, format: str, *, format_b: str | None = None, accumulation="fp32-seq", seed=None,
               stream: int = 0, threads: int = 0):
    """C = A·B with A and B quantized to a block format along K, as block-scaled hardware computes it.

    A's rows and B's columns are quantized (:func:`quantize`) in blocks along K; each block's dot product is
    summed exactly and scaled by the two block scales (OCP MX v1.0's dot product), and the block terms are added
    in block order under ``accumulation``; NVFP4's tensor scales are divided out at the end (one rounding).
    The rule in full: ``numerics/block_gemm.hpp`` and docs/numerics.md, "Block-scaled GEMM".

    Parameters
    ----------
    a : (M, K) array_like of float
    b : (K, N) array_like of float
    format : str
        The block format of A (any :func:`block_formats` name); K must be a multiple of its block size.
    format_b : str, optional
        B's block format (default: ``format``); its block size must equal A's.
    accumulation : Accumulation or str
        How the block terms are added (default ``fp32-seq``).
    seed, stream : int
        For a stochastic accumulation: output (i, j) uses stream ``stream + i*N + j``.
    threads : int
        OpenMP threads over outputs (0: the default); the bits never depend on it.

    Returns
    -------
    numpy.ndarray (M, N) of float64, in the accumulation's result format.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> a = np.full((1, 32), 0.3); b = np.full((32, 1), 2.0)
    >>> roundoff.block_gemm(a, b, "mxfp4")  # 0.3 -> 4 · 2^-4 = 0.25 (X = 2^-4), 2 -> 4 · 2^-1: 32 · 0.25 · 2
    array([[16.]])
    """
    fb = format if format_b is None else format_b
    acc = as_accumulation(accumulation)
    s = as_seed(seed, "stochastic" in acc.spec)
    st = as_stream(stream)
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 0:
        raise ValueError(f"threads: expected an integer >= 0, got {threads!r}")
    A = np.asarray(a, dtype=np.float64)
    B = np.asarray(b, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"block_gemm: a and b must be matrices, got shapes {A.shape} and {B.shape}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"block_gemm: a is {A.shape[0]}x{A.shape[1]} and b is {B.shape[0]}x{B.shape[1]}: "
                         "inner dimensions differ")
    K = A.shape[1]
    Bt = np.ascontiguousarray(B.T)
    ca, sa, ta, ba = _c.quantize_blocks(np.ascontiguousarray(A).reshape(-1), format, K)
    cb, sb, tb, bb = _c.quantize_blocks(Bt.reshape(-1), fb, K)
    return _c.block_gemm(acc, ca, sa, ta, ba, format, A.shape[0], cb, sb, tb, bb, fb, Bt.shape[0], K, s, st,
                         int(threads))


_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _pack_args(bits, order):
    if bits not in (2, 4, 8):
        raise ValueError(f"bits: {bits!r} does not pack evenly into 32-bit words; valid: 2, 4, 8")
    if order not in ("sequential", "awq"):
        raise ValueError(f"order: {order!r}; valid: 'sequential' (MLX, GPTQ), 'awq'")
    if order == "awq" and bits != 4:
        raise ValueError("order: 'awq' interleaves 4-bit codes only; valid: bits=4")
    per = 32 // bits
    return per, (_AWQ_ORDER if order == "awq" else tuple(range(per)))


def pack_codes(codes, bits: int, *, order: str = "sequential", axis: int = -1):
    """Pack ``bits``-bit codes into uint32 words along ``axis``, as quantized checkpoints store them.

    Parameters
    ----------
    codes : array_like of uint8
        Codes below 2**bits (as :func:`quantize` returns them); the length of ``axis`` must be a multiple of
        32 // bits.
    bits : int
        2, 4 or 8.
    order : str
        ``"sequential"``: slot i of a word (bits [i·b, (i+1)·b)) holds the i-th code of its run — MLX's packing
        along a row, and GPTQ's ``qweight`` (packed along the input dimension) and ``qzeros`` (along the output
        dimension; AutoGPTQ's "v1" checkpoints store zero − 1 there, GPTQModel's "v2" the zero itself).
        ``"awq"``: AutoAWQ's interleaved 4-bit order, slot i holds code ``[0, 2, 4, 6, 1, 3, 5, 7][i]`` of its run
        (packed along the output dimension).
    axis : int
        The axis packed (default: the last).

    Returns
    -------
    numpy.ndarray of uint32, ``axis`` divided by 32 // bits.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> c = np.arange(8, dtype=np.uint8)
    >>> hex(int(roundoff.pack_codes(c, 4)[0])), hex(int(roundoff.pack_codes(c, 4, order="awq")[0]))
    ('0x76543210', '0x75316420')
    """
    per, slots = _pack_args(bits, order)
    c = np.asarray(codes)
    if c.dtype.kind not in "ui":
        raise TypeError(f"codes: dtype {c.dtype} is not an integer type")
    if c.ndim == 0:
        raise ValueError("codes: need at least one dimension")
    ax = _axis(c.ndim, axis)
    m = np.moveaxis(c, ax, -1).astype(np.int64)
    if m.shape[-1] % per:
        raise ValueError(f"codes: axis length {m.shape[-1]} is not a multiple of {per} ({bits}-bit codes per word)")
    if m.size and (m.min() < 0 or m.max() >= 1 << bits):
        raise ValueError(f"codes: values outside 0..{(1 << bits) - 1} do not fit {bits} bits")
    runs = m.reshape(m.shape[:-1] + (m.shape[-1] // per, per)).astype(np.uint32)
    words = np.zeros(runs.shape[:-1], dtype=np.uint32)
    for slot, src in enumerate(slots):
        words |= runs[..., src] << np.uint32(slot * bits)
    return np.moveaxis(words, -1, ax)


def unpack_codes(words, bits: int, *, order: str = "sequential", axis: int = -1):
    """The codes of :func:`pack_codes`' words (uint8), ``axis`` multiplied by 32 // bits.

    Examples
    --------
    >>> import numpy as np, roundoff
    >>> roundoff.unpack_codes(np.array([0x75316420], dtype=np.uint32), 4, order="awq")
    array([0, 1, 2, 3, 4, 5, 6, 7], dtype=uint8)
    """
    per, slots = _pack_args(bits, order)
    w = np.asarray(words)
    if w.dtype != np.uint32:
        raise TypeError(f"words: dtype {w.dtype} is not uint32")
    if w.ndim == 0:
        raise ValueError("words: need at least one dimension")
    ax = _axis(w.ndim, axis)
    m = np.moveaxis(w, ax, -1)
    runs = np.zeros(m.shape + (per,), dtype=np.uint8)
    mask = np.uint32((1 << bits) - 1)
    for slot, dst in enumerate(slots):
        runs[..., dst] = (m >> np.uint32(slot * bits)) & mask
    return np.moveaxis(runs.reshape(m.shape[:-1] + (m.shape[-1] * per,)), -1, ax)
