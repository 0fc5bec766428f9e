#!/usr/bin/env python3
"""Probe cuBLAS GEMMs on an NVIDIA GPU and write fixtures in the layout of ../shared/fixtures/cublas-h200 (issue 40).

Per input format and shape M x N x K: operands in four row classes, the GEMM run through PyTorch the ways a user
runs it (every output variant below), the names of the CUDA kernels each call launched (torch.profiler), and a
few 64 x 64 output tiles with the raw bits of the operands they read. Layout of OUT/<fmt>.npz, per shape S:
S__tiles (int32 [tile_row, tile_col]), S__a (raw bits of A's rows of every tile row, in order), S__b (B's columns of
every tile column), S__d_<variant> (the outputs at those rows × columns, raw bits), and meta (JSON: per shape and
variant the kernels launched, or the error raised). roundoff then reproduces the outputs with
`roundoff gemm --like cublas-h100 [--splitk auto] --expect ...` or python/tests/test_cublas_h200.py's checks.

Operands (as in the H200 fixtures' README): A rows by 64-row block class (row // 64 mod 4): 0 N(0,1);
1 N(0,1)·2^U(-12,12); 2 near-cancelling pairs along K (a[2k+1] = -a[2k]·(1 + j·2^-10), |j| <= 8); 3 N(0,1)·2^-9.
B: N(0,1), and in columns >= N/2 the odd k-rows equal the even ones. All rounded to the input format (tf32:
binary32 with its 13 low bits zero; e4m3: clamped to ±448 first). C = 0.

Variants: f16/bf16: f32out (torch.mm(a, b, out_dtype=torch.float32)), f16out_reduced / f16out_noreduced
(torch.matmul with allow_fp16_reduced_precision_reduction True/False; bf16 likewise); tf32: tf32 (fp32
torch.matmul, allow_tf32 = True); e4m3: torch._scaled_mm(a, b, scale 1, out_dtype fp32) with use_fast_accum
True (f32out_fast) and False (f32out_slow), and bf16out_slow. A variant the installed PyTorch lacks is recorded in
`meta` with its error instead of outputs.

    python3 studies/tensorcore/cublas_probe.py --out OUT_DIR [--formats f16,bf16,tf32,e4m3]
        [--shapes 256x256x4096,128x128x16384] [--tiles 4] [--seed 1]

--dry-run computes the outputs on the CPU in binary64 rounded once (no GPU, no kernel names): it checks the
layout and the operand classes only, never the GPU's arithmetic.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

FORMATS = ("f16", "bf16", "tf32", "e4m3")
VARIANTS = {"f16": ("f32out", "f16out_reduced", "f16out_noreduced"),
            "bf16": ("f32out", "bf16out_reduced", "bf16out_noreduced"),
            "tf32": ("tf32",), "e4m3": ("f32out_fast", "f32out_slow", "bf16out_slow")}


def round_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """Raw bits of x rounded (nearest-even) to fmt: uint16 for f16/bf16, uint32 (binary32) for tf32, uint8 e4m3."""
    if fmt == "f16":
        return x.astype(np.float16).view(np.uint16)
    f = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    if fmt in ("bf16", "tf32"):
        drop = 16 if fmt == "bf16" else 13
        half = np.uint64(1 << (drop - 1))
        lsb = (f >> np.uint64(drop)) & np.uint64(1)
        r = ((f + half - np.uint64(1) + lsb) >> np.uint64(drop)) << np.uint64(drop)  # ties to even (finite x)
        r = r.astype(np.uint32)
        return (r >> np.uint32(16)).astype(np.uint16) if fmt == "bf16" else r
    # e4m3 (OCP, bias 7, no inf, 0x7F NaN): clamp to ±448, then nearest-even on the 3 fraction bits.
    v = np.clip(x, -448.0, 448.0)
    sign = (np.signbit(v)).astype(np.uint8) << 7
    a = np.abs(v)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.clip(e, -6, 8)
    q = 2.0 ** (e - 3)
    m = np.rint(a / q) * q  # np.rint: nearest-even
    e2 = np.floor(np.log2(np.where(m > 0, m, 1.0)))
    exp_field = np.where(m >= 2.0 ** -6, np.clip(e2, -6, 8) + 7, 0).astype(np.int64)
    frac = np.where(exp_field > 0, m / 2.0 ** (exp_field - 7) - 1.0, m / 2.0 ** -6) * 8
    code = (exp_field << 3) | np.rint(frac).astype(np.int64)
    return (sign | code.astype(np.uint8)).astype(np.uint8)


def decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "f16":
        return bits.view(np.float16).astype(np.float64)
    if fmt == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if fmt == "tf32":
        return bits.view(np.float32).astype(np.float64)
    b = bits.astype(np.int64)
    e, f = (b >> 3) & 0xF, b & 7
    mag = np.where(e > 0, (1 + f / 8.0) * 2.0 ** (e - 7), f / 8.0 * 2.0 ** -6)
    return np.where(b >> 7, -mag, mag)


def operands(rng: np.random.Generator, M: int, N: int, K: int, fmt: str):
    """A (M x K) and B (K x N) raw bits in the four row classes (module docstring)."""
    a = rng.standard_normal((M, K))
    cls = (np.arange(M) // 64) % 4
    a[cls == 1] *= 2.0 ** rng.uniform(-12, 12, (int((cls == 1).sum()), 1))
    rows2 = np.nonzero(cls == 2)[0]
    j = rng.integers(-8, 9, (rows2.size, K // 2))
    a[np.ix_(rows2, np.arange(1, K, 2))] = -a[np.ix_(rows2, np.arange(0, K - 1, 2))] * (1 + j * 2.0 ** -10)
    a[cls == 3] *= 2.0 ** -9
    b = rng.standard_normal((K, N))
    b[1::2, N // 2:] = b[0::2, N // 2:][: b[1::2].shape[0]]
    return round_bits(a, fmt), round_bits(b, fmt)


def run_gpu(ab, bb, fmt, variant):  # pragma: no cover - needs an NVIDIA GPU
    import torch
    from torch.profiler import ProfilerActivity, profile
    dev = "cuda"
    A, B = decode(ab, fmt), decode(bb, fmt)
    if fmt in ("f16", "bf16"):
        dt = torch.float16 if fmt == "f16" else torch.bfloat16
        ta, tb = torch.tensor(A, device=dev).to(dt), torch.tensor(B, device=dev).to(dt)
        if variant == "f32out":
            call = lambda: torch.mm(ta, tb, out_dtype=torch.float32)  # noqa: E731
        else:
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = variant.endswith("_reduced")
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = variant.endswith("_reduced")
            call = lambda: torch.matmul(ta, tb)  # noqa: E731
    elif fmt == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        ta, tb = torch.tensor(A, device=dev, dtype=torch.float32), torch.tensor(B, device=dev, dtype=torch.float32)
        call = lambda: torch.matmul(ta, tb)  # noqa: E731
    else:
        ta = torch.tensor(A, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn)
        tb = torch.tensor(B, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.tensor(1.0, device=dev)
        out = torch.bfloat16 if variant == "bf16out_slow" else torch.float32
        call = lambda: torch._scaled_mm(ta, tb, scale_a=one, scale_b=one, out_dtype=out,  # noqa: E731
                                        use_fast_accum=variant == "f32out_fast")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        d = call()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    d = d.cpu()
    bits = d.view(torch.int16).numpy().view(np.uint16) if d.dtype in (torch.float16, torch.bfloat16) \
        else d.numpy().view(np.uint32)
    return bits, kernels


def run_dry(ab, bb, fmt, variant):
    d = decode(ab, fmt) @ decode(bb, fmt)  # binary64, not the GPU's arithmetic
    if variant.startswith(("f16out",)):
        return d.astype(np.float16).view(np.uint16), []
    if variant.startswith("bf16out"):
        return round_bits(d, "bf16"), []
    return d.astype(np.float32).view(np.uint32), []


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--shapes", default="256x256x64,256x256x1024,256x256x4096,2048x2048x1024")
    p.add_argument("--tiles", type=int, default=4, help="64x64 output tiles kept per shape")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dry-run", action="store_true", help="CPU binary64 outputs: checks the layout only")
    a = p.parse_args(argv)
    fmts = a.formats.split(",")
    for f in fmts:
        if f not in FORMATS:
            p.error(f"--formats: {f!r}; valid: {', '.join(FORMATS)}")
    shapes = []
    for s in a.shapes.split(","):
        try:
            M, N, K = (int(v) for v in s.split("x"))
        except ValueError:
            p.error(f"--shapes: {s!r} is not MxNxK")
        if M % 64 or N % 64 or K % 2:
            p.error(f"--shapes: {s}: M and N must be multiples of 64 and K even")
        shapes.append((M, N, K))
    os.makedirs(a.out, exist_ok=True)
    run = run_dry if a.dry_run else run_gpu
    for fmt in fmts:
        arrays, meta = {}, {}
        for M, N, K in shapes:
            name = f"{M}x{N}x{K}"
            rng = np.random.default_rng([a.seed, M, N, K, FORMATS.index(fmt)])
            ab, bb = operands(rng, M, N, K, fmt)
            tiles = np.array(sorted({(int(rng.integers(0, M // 64)), int(rng.integers(0, N // 64)))
                                     for _ in range(a.tiles)}), dtype=np.int32)
            rows = np.concatenate([np.arange(64 * r, 64 * r + 64) for r in sorted(set(tiles[:, 0]))])
            cols = np.concatenate([np.arange(64 * c, 64 * c + 64) for c in sorted(set(tiles[:, 1]))])
            arrays[f"{name}__a"], arrays[f"{name}__b"], arrays[f"{name}__tiles"] = ab[rows], bb[:, cols], tiles
            meta[name] = {}
            for v in VARIANTS[fmt]:
                try:
                    d, kernels = run(ab, bb, fmt, v)
                except Exception as e:  # a variant this PyTorch lacks: recorded, not fatal
                    meta[name][v] = {"error": f"{type(e).__name__}: {e}"}
                    continue
                arrays[f"{name}__d_{v}"] = d[np.ix_(rows, cols)]
                meta[name][v] = kernels if not a.dry_run else ["dry-run: binary64 on the CPU"]
        arrays["meta"] = np.array(json.dumps(meta))
        tmp = os.path.join(a.out, f"{fmt}.tmp.npz")
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, os.path.join(a.out, f"{fmt}.npz"))
        print(f"wrote {os.path.join(a.out, fmt + '.npz')}", file=sys.stderr)


if __name__ == "__main__":
    main()
