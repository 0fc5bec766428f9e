"""Probe of the unpromoted DeepSeek presets' decoded GEMM model (docs/studies/fp8-recipes.md, amendments 1 and 2):
the weight-gradient GEMM of T1's shape (256 tokens, x 256 wide, dy 128 wide) with x ~ N(0, 1) and dy ~ N(0, s²) for
s from 1 to 1e-8, under deepseek-fp8 (codes, promoted every 128: the exact per-block model), deepseek-fp8-nopromote
(the decoded fp32 operands into the tc-h100-fp8 model), deepseek-fp8-nopromote-rescaled (the same with each row and
column of the decoded operands first scaled by a power of two into E4M3's range, the result scaled back:
ops/matmul_quant.hpp, rescaled_gemm) and deepseek-fp8,matmul.acc=fp64-seq (the decoded operands summed in binary64);
prints each one's normwise error against the last. The fp8 quantization is the same in all four, so a
scale-invariant accumulator gives the same error at every s (down to DeepSeek's amax clamp at 1e-4, below which the
block codes themselves get coarser).
  PYTHONPATH=build/python /usr/bin/python3 studies/fp8/nopromote_range_probe.py
"""
import numpy as np

import roundoff

rng = np.random.default_rng(1)
N, K, M = 256, 256, 128
PRESETS = ["deepseek-fp8", "deepseek-fp8-nopromote", "deepseek-fp8-nopromote-rescaled"]
EXACT = "deepseek-fp8,matmul.acc=fp64-seq"


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


print("dy_scale,promoted_rel,nopromote_rel,nopromote_rescaled_rel")
for scale in [1.0, 1e-2, 1e-4, 1e-6, 1e-8]:
    x = rng.standard_normal((N, K))
    dy = rng.standard_normal((N, M)) * scale
    out = {p: roundoff.Runner(p).matmul_backward_weight(dy, x, op="matmul", name="q", layer=0)
           for p in PRESETS + [EXACT]}
    ex = out[EXACT]
    print(f"{scale:g}," + ",".join(f"{rel(out[p], ex):.3e}" for p in PRESETS))
