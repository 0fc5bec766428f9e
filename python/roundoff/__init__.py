"""roundoff: bit-accurate low-precision arithmetic on your own numpy arrays and PyTorch models.

Formats and correct rounding in every mode (stochastic rounding reproducible by seed, stream and index),
elementwise correctly rounded arithmetic, sums, dot products and GEMMs under any accumulation order or
tensor-core adder, transformer ops under per-op precision policies with an MPFR reference, and (in
``roundoff.torch``, when PyTorch is installed) autograd functions and ``emulate(model, policy)``.

Two lines:

>>> import numpy as np, roundoff
>>> roundoff.round(np.array([0.1, 1/3, 70000.0]), "fp16")
array([0.09997559, 0.33325195,        inf])

Everything is the C++ library's code (``_roundoff``); see docs/python.md.
"""
from . import _roundoff
from .blocks import (Quantized, block_formats, block_gemm, depalettize, dequantize, pack_codes, palettize, quantize,
                     unpack_codes)
from .accumulate import Accumulation, accumulations, dot, gemm
from .formats import Format, arith, formats, from_bits, modes, representable, round, to_bits
from .ops import Runner
from .policy import Policy, op_error, ops, policies

__version__ = "0.1.0"

__all__ = ["Format", "formats", "modes", "round", "representable", "to_bits", "from_bits", "arith",
           "Accumulation", "accumulations", "dot", "gemm", "Policy", "policies", "ops", "op_error", "Runner",
           "quantize", "dequantize", "block_formats", "block_gemm", "pack_codes", "unpack_codes",
           "Quantized", "palettize", "depalettize"]
