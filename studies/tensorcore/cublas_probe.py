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
layout and the operand classes only, never the GPU's arithmetic. --repeat N runs every call N times and records,
per variant, how many outputs of each later run differ from the first (`<variant>_repeat_differing` in meta).

    python3 studies/tensorcore/cublas_probe.py --out OUT_DIR --segment-k [--shapes 1024x1024x4096] [--repeat 3]
        [--segk-bounds 0,8,...,128]

runs instead the two designed tf32 GEMMs of the segment-K probe (docs/studies/tensorcore.md, "The tf32
segment-K kernel"): the boundary probe (per output tile, where its k-iterations are cut into pieces) and the
order probe (per output, how many pieces were added after both of two marked ones: a fixed order or a race),
with the kernels' grid and block sizes; OUT_DIR/segment_k.json holds the decoded results, segment_k.npz the raw
output bits of every run. With --dry-run the model runs on the CPU through roundoff (PYTHONPATH=build/python).
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


# --- The segment-K probe (docs/studies/tensorcore.md, "The tf32 segment-K kernel") ----------------------------
# At 1024x1024x4096 tf32 cuBLAS (CUDA 13.0, H200) runs a memset and sm90_xmma_..._segment_k_on; from the measured
# outputs alone, its split tiles look like 15 pieces of whole k-iterations (32), each chained from zero, added in
# binary32 in an order that differs per output (atomic adds). Two designed GEMMs read that off the GPU directly:
#   boundaries  which k-iteration ends the piece holding each k-iteration, per output tile (deterministic);
#   order       per output, how many pieces were added after both of two marked pieces: one value per pair of
#               pieces everywhere if the order is fixed, several if it is not (the atomics).
# Both use exact integer values, so the decoded numbers do not depend on the GPU's rounding beyond the model.
SEGK_KT = 32              # the kernel's k-tile (tilesize64x128x32)
SEGK_MARK = 2.0 ** 24     # the boundary probe's marker product
SEGK_BIG = 2.0 ** 29      # the order probe's ± markers: 13 ones vanish against it (ulp 64)


def segk_boundary_operands(M: int, N: int, K: int):
    """A (M x K), B (K x N) of the boundary probe, as binary32 bits (tf32 values). Row r marks k-iteration
    i = r mod n (n = K/32): A[r, 32 i] = 2^24; A[r, k] = 1 at every other k = 0 mod 8 (one product per wgmma
    k-group of 8), 0 elsewhere; B = 1. Under tc-h100-tf32 a piece [s0, s1) of k-iterations chained from zero is
    4 (s1 - s0) without the marker and 2^24 + 4 (i - s0) with it (every later +1 truncated away); all piece
    results are multiples of 4 below 2^25, exact in any order of binary32 sums, so D(r, c) = 2^24 + 4 (n + i - s1):
    s1 = n + i - (D - 2^24) / 4 (n: the tile's K is not split; the chain over K gives the same)."""
    n = K // SEGK_KT
    a = np.zeros((M, K), np.float32)
    a[:, ::8] = 1.0
    a[np.arange(M), SEGK_KT * (np.arange(M) % n)] = SEGK_MARK
    return a.view(np.uint32), np.ones((K, N), np.float32).view(np.uint32)


def segk_boundaries(d_bits: np.ndarray, K: int, row_block: int = 128, col_block: int = 64) -> dict:
    """Decode the boundary probe's output (M x N binary32 bits): per output tile (row_block x col_block, torch
    layout) the piece ends it shows, as {"r0,c0": [0, s_1, ..., n]}, plus the tiles whose outputs disagree
    among themselves or with the model ("inconsistent")."""
    n = K // SEGK_KT
    d = d_bits.view(np.float32).astype(np.float64)
    M, N = d.shape
    i = (np.arange(M) % n)[:, None]
    s1 = n + i - (d - SEGK_MARK) / 4
    ok = (s1 == np.round(s1)) & (s1 > i) & (s1 <= n)
    out, bad = {}, []
    for r0 in range(0, M, row_block):
        for c0 in range(0, N, col_block):
            t, tok = s1[r0:r0 + row_block, c0:c0 + col_block], ok[r0:r0 + row_block, c0:c0 + col_block]
            if not tok.all() or not (t == t[:, :1]).all():
                bad.append(f"{r0},{c0}")
                continue
            out[f"{r0},{c0}"] = [0] + sorted({int(x) for x in t[:, 0]})
    return {"tiles": out, "inconsistent": bad}


def segk_order_operands(M: int, N: int, K: int, bounds):
    """A (M x K), B (K x N) of the order probe for pieces `bounds` (k-iterations [0, s_1, ..., n]), binary32
    bits. Row r takes the pair (p, q) = pairs[r mod P] of the S(S-1)/2 pairs of pieces: A[r, 32 s_p] = 2^29,
    A[r, 32 s_q] = -2^29, A[r, 32 s_j] = 1 at the first k of every other piece j, 0 elsewhere; B = 1. Each
    piece chained from zero is its one product; summed in binary32 in any order, the ones added before the
    first marker vanish against it (13 < 32 = half its ulp), the markers cancel exactly, and the ones added
    after both count: D = the number of pieces added after both p and q."""
    pairs = [(p, q) for p in range(len(bounds) - 1) for q in range(p + 1, len(bounds) - 1)]
    a = np.zeros((M, K), np.float32)
    starts = SEGK_KT * np.asarray(bounds[:-1])
    for r in range(M):
        p, q = pairs[r % len(pairs)]
        a[r, starts] = 1.0
        a[r, starts[p]], a[r, starts[q]] = SEGK_BIG, -SEGK_BIG
    return a.view(np.uint32), np.ones((K, N), np.float32).view(np.uint32), pairs


def segk_orders(d_bits: np.ndarray, bounds, rows, cols) -> dict:
    """Decode the order probe on the outputs rows x cols of one split tile: per pair, the counts it took;
    `fixed` when every pair took one value, and then the order of the pieces (ranks; the first two are
    interchangeable, 0 + P_a + P_b being exact either way)."""
    S = len(bounds) - 1
    pairs = [(p, q) for p in range(S) for q in range(p + 1, S)]
    d = d_bits.view(np.float32).astype(np.float64)[np.ix_(rows, cols)]
    seen = {pq: set() for pq in pairs}
    valid = (d == np.round(d)) & (d >= 0) & (d <= S - 2)
    for j, r in enumerate(rows):
        seen[pairs[r % len(pairs)]].update(int(x) for x in d[j][valid[j]])
    fixed = all(len(v) == 1 for v in seen.values())
    res = {"valid": int(valid.sum()), "outputs": int(d.size), "fixed": bool(fixed and valid.all()),
           "values_per_pair": {f"{p},{q}": sorted(v) for (p, q), v in seen.items()}}
    if res["fixed"]:
        after = {pq: next(iter(v)) for pq, v in seen.items()}
        mx = lambda p, q: S - 1 - after[(min(p, q), max(p, q))]  # noqa: E731  max(rank_p, rank_q)
        res["ranks"] = [min(mx(p, q) for q in range(S) if q != p) for p in range(S)]
    return res


def run_segment_k(out: str, shapes, dry_run: bool, repeat: int, bounds_hint=None):
    """The two designed GEMMs per shape (tf32 inputs, fp32 out), each run `repeat` times; writes
    OUT/segment_k.npz (raw output bits per run) and OUT/segment_k.json (kernels, decoded boundaries per tile,
    the order probe's decoding per split tile, and how many outputs differ between runs)."""
    arrays, report = {}, {}
    for M, N, K in shapes:
        name = f"{M}x{N}x{K}"
        rep = report[name] = {}
        ab, bb = segk_boundary_operands(M, N, K)
        runs = [segk_run(ab, bb, dry_run) for _ in range(repeat)]
        rep["boundary_kernels"] = runs[0][1]  # name, grid, block per launch
        rep["boundary_runs_differing"] = [int((r[0] != runs[0][0]).sum()) for r in runs[1:]]
        for k, (bits, _) in enumerate(runs):
            arrays[f"{name}__boundary_{k}"] = bits
        dec = segk_boundaries(runs[0][0], K)
        rep["boundaries"] = dec
        split = {t: b for t, b in dec["tiles"].items() if len(b) > 2}
        bounds = bounds_hint or (max(split.values(), key=len) if split else None)
        if bounds is None:
            rep["order"] = "no split tile: nothing to order"
            continue
        ao, bo, _ = segk_order_operands(M, N, K, bounds)
        runs = [segk_run(ao, bo, dry_run) for _ in range(repeat)]
        rep["order_kernels"] = runs[0][1]
        rep["order_runs_differing"] = [int((r[0] != runs[0][0]).sum()) for r in runs[1:]]
        for k, (bits, _) in enumerate(runs):
            arrays[f"{name}__order_{k}"] = bits
        rep["order_bounds"] = list(map(int, bounds))
        rep["order"] = {}
        for t, b in split.items():
            if list(b) != list(bounds):
                continue
            r0, c0 = (int(x) for x in t.split(","))
            rep["order"][t] = segk_orders(runs[0][0], bounds, np.arange(r0, r0 + 128), np.arange(c0, c0 + 64))
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "segment_k.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, os.path.join(out, "segment_k.npz"))
    tmp = os.path.join(out, "segment_k.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, os.path.join(out, "segment_k.json"))
    return report


def segk_run(ab, bb, dry_run: bool):
    """(output bits, the kernels launched: name, grid and block of each, where the profiler gives them)."""
    if not dry_run:  # pragma: no cover - needs an NVIDIA GPU
        return segk_gpu(ab, bb)
    return segk_dry(ab, bb), [{"name": "dry-run: the segment-K model on the CPU (roundoff)"}]


def segk_gpu(ab, bb):  # pragma: no cover - needs an NVIDIA GPU
    """torch.matmul of the tf32 operands (allow_tf32), profiled; the kernels with their grid and block sizes
    from the profiler's trace (the grid says how many CTAs share the split tiles)."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.backends.cuda.matmul.allow_tf32 = True
    ta = torch.tensor(decode(ab, "tf32"), device="cuda", dtype=torch.float32)
    tb = torch.tensor(decode(bb, "tf32"), device="cuda", dtype=torch.float32)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        d = torch.matmul(ta, tb)
        torch.cuda.synchronize()
    launches = [{"name": e.name} for e in prof.events() if e.device_type.name == "CUDA"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
            with open(os.path.join(tmp, "trace.json")) as f:
                trace = json.load(f)
        kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
        launches = [{"name": e.get("name"), "grid": e.get("args", {}).get("grid"),
                     "block": e.get("args", {}).get("block")} for e in kernels] or launches
    except Exception as e:  # the names alone are still worth keeping
        launches.append({"trace_error": f"{type(e).__name__}: {e}"})
    return d.cpu().numpy().view(np.uint32), launches


SEGK_DRY_RNG = np.random.default_rng(12345)


def segk_dry(ab, bb):
    """A stand-in for the GPU on the CPU: the last 64 output columns split as the H200 kernel's tile column 15
    (15 pieces, the spare k-iterations to the last ones; fewer pieces when K/32 < 15), each piece tc-h100-tf32
    chained from zero (roundoff), summed in binary32 in a random order per output (a race, so that the decoders'
    race detection is exercised); the rest the plain chain. Checks the operand designs and the decoders, never a
    GPU. The H200 itself sums the pieces as a fixed right-aligned pairwise tree (studies/tensorcore/cublas_check.py,
    segk_model; docs/studies/tensorcore.md)."""
    import roundoff  # the dry run needs the roundoff package (PYTHONPATH=build/python)
    A, B = decode(ab, "tf32"), decode(bb, "tf32")
    K, N = B.shape
    n = K // SEGK_KT
    d = roundoff.gemm(A, B[:, : N - 64], inputs="tf32", accumulation="tc-h100-tf32")
    S = min(15, n)
    q, r = divmod(n, S)
    bounds = [SEGK_KT * (c * q + max(0, c - (S - r))) for c in range(S + 1)]
    P = np.array([roundoff.gemm(A[:, i:j], B[i:j, N - 64:], inputs="tf32", accumulation="tc-h100-tf32")
                  for i, j in zip(bounds[:-1], bounds[1:])]).astype(np.float32)
    order = np.argsort(SEGK_DRY_RNG.random((S,) + P.shape[1:]), axis=0)  # one random order per output
    tot = np.zeros(P.shape[1:], np.float32)
    for s in range(S):
        tot = tot + np.take_along_axis(P, order[s:s + 1], axis=0)[0]  # binary32 adds, nearest-even
    return np.concatenate([d.astype(np.float32), tot], axis=1).view(np.uint32)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--shapes", help="MxNxK,... (default 256x256x64,256x256x1024,256x256x4096,2048x2048x1024; "
                                    "with --segment-k 1024x1024x4096)")
    p.add_argument("--tiles", type=int, default=4, help="64x64 output tiles kept per shape")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dry-run", action="store_true", help="CPU binary64 outputs: checks the layout only")
    p.add_argument("--repeat", type=int, default=1,
                   help="run every call this many times; meta records <variant>_repeat_differing, the number of "
                        "outputs of each later run that differ from the first (nonzero: a nondeterministic kernel)")
    p.add_argument("--segment-k", action="store_true",
                   help="instead of the operand classes, the two designed tf32 GEMMs of the segment-K probe "
                        "(default shape 1024x1024x4096): OUT/segment_k.json and OUT/segment_k.npz")
    p.add_argument("--segk-bounds", help="the order probe's pieces as k-iterations 0,s1,...,K/32 (default: the "
                                         "split the boundary probe finds with the most pieces)")
    a = p.parse_args(argv)
    if a.repeat < 1:
        p.error(f"--repeat: {a.repeat}; valid: 1 or more")
    fmts = a.formats.split(",")
    for f in fmts:
        if f not in FORMATS:
            p.error(f"--formats: {f!r}; valid: {', '.join(FORMATS)}")
    if a.shapes is None:
        a.shapes = "1024x1024x4096" if a.segment_k else "256x256x64,256x256x1024,256x256x4096,2048x2048x1024"
    shapes = []
    for s in a.shapes.split(","):
        try:
            M, N, K = (int(v) for v in s.split("x"))
        except ValueError:
            p.error(f"--shapes: {s!r} is not MxNxK")
        if M % 64 or N % 64 or K % 2:
            p.error(f"--shapes: {s}: M and N must be multiples of 64 and K even")
        if a.segment_k and (M % 128 or K % SEGK_KT or N < 64):
            p.error(f"--shapes: {s}: the segment-K probe needs M a multiple of 128 and K of {SEGK_KT}")
        shapes.append((M, N, K))
    if a.segment_k:
        hint = None
        if a.segk_bounds:
            try:
                hint = [int(v) for v in a.segk_bounds.split(",")]
            except ValueError:
                p.error(f"--segk-bounds: {a.segk_bounds!r} is not a comma-separated list of k-iterations")
            if hint[0] != 0 or any(y <= x for x, y in zip(hint, hint[1:])) or len(hint) < 3:
                p.error(f"--segk-bounds: {a.segk_bounds}: want 0 < s1 < ... < K/32, at least two pieces")
            for M, N, K in shapes:
                if hint[-1] != K // SEGK_KT:
                    p.error(f"--segk-bounds: ends at {hint[-1]}, but {M}x{N}x{K} has {K // SEGK_KT} k-iterations")
        rep = run_segment_k(a.out, shapes, a.dry_run, a.repeat, hint)
        print(f"wrote {os.path.join(a.out, 'segment_k.json')}", file=sys.stderr)
        return rep
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
                if a.repeat > 1:
                    meta[name][f"{v}_repeat_differing"] = [int((run(ab, bb, fmt, v)[0] != d).sum())
                                                           for _ in range(a.repeat - 1)]
        arrays["meta"] = np.array(json.dumps(meta))
        tmp = os.path.join(a.out, f"{fmt}.tmp.npz")
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, os.path.join(a.out, f"{fmt}.npz"))
        print(f"wrote {os.path.join(a.out, fmt + '.npz')}", file=sys.stderr)


if __name__ == "__main__":
    main()
