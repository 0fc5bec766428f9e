"""Probe an H100's warpgroup tensor-core path (wgmma: HGMMA for fp16/bf16, QGMMA for fp8) through Triton.

Each program computes one tile D(64x64) = A(64xK) . B(Kx64) + C with tl.dot and the fp32 accumulator initialised
from C, so C enters the tensor core's adder as with mma.sync; fp8 dots run with max_num_imprecise_acc = K, i.e.
entirely in the tensor core's own accumulator (no promotion into CUDA-core fp32 adds). Operands are random bit
patterns in four case classes (tile mod 4): 0 narrow (exponents near 1), 1 cancel (C = -(sum of the products)
rounded to binary32), 2 every finite encoding, 3 mostly zeros and subnormals. Writes one .npz per configuration
(a, b as raw bits, c, d as binary32 bits) and prints which tensor-core instructions the kernel used.

Run on a GPU machine: python3 studies/tensorcore/wgmma_probe.py OUTDIR [TILES] [--designed | --more]
(--designed: only the designed e4m3 tiles of make_designed, for the QGMMA accumulator; --more: fp16 with an
fp16 accumulator and tf32, K 64 and 32)
"""
import sys
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def tile_kernel(a_ptr, b_ptr, c_ptr, d_ptr, K: tl.constexpr, IMPRECISE: tl.constexpr, ACC16: tl.constexpr,
                TF32: tl.constexpr):
    pid = tl.program_id(0)
    rm = tl.arange(0, 64)
    rn = tl.arange(0, 64)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + pid * 64 * K + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + pid * K * 64 + rk[:, None] * 64 + rn[None, :])
    c = tl.load(c_ptr + pid * 64 * 64 + rm[:, None] * 64 + rn[None, :])
    if IMPRECISE > 0:
        d = tl.dot(a, b, c, max_num_imprecise_acc=IMPRECISE, out_dtype=tl.float32)
    elif ACC16:
        d = tl.dot(a, b, c, out_dtype=tl.float16)
    elif TF32:
        d = tl.dot(a, b, c, input_precision="tf32", out_dtype=tl.float32)
    else:
        d = tl.dot(a, b, c, out_dtype=tl.float32)
    tl.store(d_ptr + pid * 64 * 64 + rm[:, None] * 64 + rn[None, :], d)


# name: (storage dtype, torch dtype, exponent bits, fraction bits, NaN-only); tf32 is generated as a 19-bit
# pattern and stored as the binary32 encoding (the pattern shifted left by 13).
FORMATS = {
    "tf32": (np.uint32, torch.float32, 8, 10, False),
    "f16": (np.uint16, torch.float16, 5, 10, False),
    "bf16": (np.uint16, torch.bfloat16, 8, 7, False),
    "e4m3": (np.uint8, torch.float8_e4m3fn, 4, 3, True),
    "e5m2": (np.uint8, torch.float8_e5m2, 5, 2, False),
}


def decode(bits, eb, mb, nan_only):
    bits = bits.astype(np.int64)
    s = (bits >> (eb + mb)) & 1
    e = (bits >> mb) & ((1 << eb) - 1)
    f = bits & ((1 << mb) - 1)
    bias = (1 << (eb - 1)) - 1
    v = np.where(e == 0, np.ldexp(f.astype(np.float64), 1 - bias - mb),
                 np.ldexp((f + (1 << mb)).astype(np.float64), (e - bias - mb).astype(np.int64)))
    return np.where(s == 1, -v, v)


def finite_bits(rng, n, eb, mb, nan_only, elo, ehi):
    e = rng.integers(elo, ehi + 1, n)
    f = rng.integers(0, 1 << mb, n)
    s = rng.integers(0, 2, n)
    bits = (s << (eb + mb)) | (e << mb) | f
    if nan_only:  # S.1111.111 is NaN in e4m3
        bits = np.where((bits & 0x7F) == 0x7F, bits - 1, bits)
    return bits


def make(rng, fmt, tiles, K):
    st, _, eb, mb, nan_only = FORMATS[fmt]
    bias = (1 << (eb - 1)) - 1
    emax_field = (1 << eb) - 1 if nan_only else (1 << eb) - 2
    A = np.zeros((tiles, 64, K), np.int64)
    B = np.zeros((tiles, K, 64), np.int64)
    C = np.zeros((tiles, 64, 64), np.float32)
    for t in range(tiles):
        cls = t % 4
        if cls in (0, 1):
            A[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, bias - 3, bias + 3).reshape(64, K)
            B[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, bias - 3, bias + 3).reshape(K, 64)
        elif cls == 2:
            A[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, 0, emax_field).reshape(64, K)
            B[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, 0, emax_field).reshape(K, 64)
        else:
            A[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, 0, 2).reshape(64, K)
            B[t] = finite_bits(rng, 64 * K, eb, mb, nan_only, bias - 3, bias + 3).reshape(K, 64)
            A[t] *= rng.random((64, K)) < 0.5
            B[t] *= rng.random((K, 64)) < 0.5
        if cls == 1:
            exact = decode(A[t], eb, mb, nan_only) @ decode(B[t], eb, mb, nan_only)  # exact: few bits, small K
            C[t] = (-exact).astype(np.float32)
        elif cls == 3:
            C[t] = np.where(rng.random((64, 64)) < 0.5, 0.0, rng.standard_normal((64, 64)) * 2.0 ** -20)
        else:
            C[t] = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-8, 8, (64, 64)))).astype(np.float32)
    if fmt == "tf32":
        A <<= 13
        B <<= 13
    return A.astype(st), B.astype(st), C


def e4m3_bits(v):
    """The e4m3 encoding of v, which must be exact in e4m3 (normal range)."""
    if v == 0:
        return 0
    s = 0x80 if v < 0 else 0
    m, e = np.frexp(abs(v))  # abs(v) = m 2^e, m in [0.5, 1)
    assert -6 <= e - 1 <= 8, v
    frac = int(round((m * 2 - 1) * 8))
    assert (1 + frac / 8) * 2.0 ** (e - 1) == abs(v), v
    return s | ((e - 1 + 7) << 3) | frac


def make_designed(rng, K):
    """Designed e4m3 tiles (K 32) that isolate one feature each, D = x_i + y_ij + C_ij:
    0 C's window: product 1, C = (1 + f) 2^(i-40); 1 a product's window: products 1 and
    (1+a/8)(1+b/8) 2^-(i mod 14 div 2 + j div 8 mod 7), C = 0; 2 as 1 with C = 16; 3 as 1 with the small product negative;
    4 32 products near 1 (carries), C = 0; 5 as 1 with C = 2^-30; 6 as 1 with C = -1 (cancellation);
    7 as 0 with C negative."""
    tiles = 8
    A = np.zeros((tiles, 64, K), np.int64)
    B = np.zeros((tiles, K, 64), np.int64)
    C = np.zeros((tiles, 64, 64), np.float32)
    one = e4m3_bits(1.0)
    for t in range(tiles):
        if t in (0, 7):
            A[t, :, 0] = one
            B[t, 0, :] = one
            f = rng.random((64, 64))
            C[t] = ((1 + f) * np.exp2(np.arange(64) - 40)[:, None]).astype(np.float32) * (-1 if t == 7 else 1)
        elif t == 4:
            A[t] = [[e4m3_bits((1 + rng.integers(0, 8) / 8) * (-1) ** rng.integers(0, 2)) for _ in range(K)]
                    for _ in range(64)]
            B[t] = one
        else:
            for i in range(64):
                A[t, i, 0] = one
                A[t, i, 1] = e4m3_bits((1 + (i % 8) / 8) * 2.0 ** -(i % 14 // 2) * (-1 if t == 3 else 1))
            for j in range(64):
                B[t, 0, j] = one
                B[t, 1, j] = e4m3_bits((1 + (j % 8) / 8) * 2.0 ** -(j // 8 % 7))
            C[t] = {1: 0.0, 2: 16.0, 3: 0.0, 5: 2.0 ** -30, 6: -1.0}[t]
    return A.astype(np.uint8), B.astype(np.uint8), C


def run(out, fmt, K, tiles, imprecise, seed, designed=False, acc="f32"):
    st, tdt, eb, mb, nan_only = FORMATS[fmt]
    rng = np.random.default_rng(seed)
    A, B, C = make_designed(rng, K) if designed else make(rng, fmt, tiles, K)
    if acc == "f16":
        C = C.astype(np.float16)  # to nearest; overflow to inf in the all-finite class is part of the test
    tiles = A.shape[0]
    view = {np.uint16: np.int16, np.uint32: np.int32, np.uint8: np.uint8}[st]
    a = torch.from_numpy(A.view(view)).cuda().view(tdt)
    b = torch.from_numpy(B.view(view)).cuda().view(tdt)
    c = torch.from_numpy(C).cuda()
    d = torch.empty_like(c)
    k = tile_kernel[(tiles,)](a, b, c, d, K=K, IMPRECISE=imprecise, ACC16=acc == "f16", TF32=fmt == "tf32",
                              num_warps=4)
    torch.cuda.synchronize()
    D = d.cpu().numpy()
    name = f"wg-{fmt}-k{K}-imp{imprecise}" + ("-designed" if designed else "") + ("-acc16" if acc == "f16" else "")
    bits = np.uint16 if acc == "f16" else np.uint32
    np.savez_compressed(f"{out}/{name}.npz", a=A, b=B, c=C.view(bits), d=D.view(bits),
                        fmt=fmt, K=K, imprecise=imprecise, seed=seed, acc=acc)
    ops = {}
    try:
        sass = k.asm.get("sass") or ""
        for line in sass.splitlines():
            for op in ("HGMMA", "QGMMA", "HMMA", "QMMA", "FADD", "FFMA"):
                if op in line:
                    ops[op] = ops.get(op, 0) + 1
    except Exception as e:  # noqa: BLE001 - report and go on
        ops["sass-error"] = str(e)[:80]
    ptx = k.asm.get("ptx", "")
    print(f"{name}: {tiles} tiles, instructions {ops}, ptx wgmma lines {ptx.count('wgmma.mma_async')}", flush=True)


def main():
    out = sys.argv[1]
    tiles = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 64
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(), flush=True)
    if "--designed" in sys.argv:
        configs = [("e4m3", 32, 32, True, "f32")]
    elif "--more" in sys.argv:
        configs = [("f16", 64, 0, False, "f16"), ("tf32", 32, 0, False, "f32")]
    else:
        configs = [("f16", 16, 0, False, "f32"), ("f16", 64, 0, False, "f32"), ("bf16", 64, 0, False, "f32"),
                   ("e4m3", 32, 32, False, "f32"), ("e4m3", 128, 128, False, "f32"), ("e5m2", 128, 128, False, "f32"),
                   ("e4m3", 128, 0, False, "f32")]
    seed0 = 2000 if "--more" in sys.argv else 1000
    for i, (fmt, K, imp, designed, acc) in enumerate(configs):
        try:
            run(out, fmt, K, tiles, imp, seed0 + i, designed, acc)
        except Exception as e:  # noqa: BLE001 - one failing configuration must not lose the others
            print(f"{fmt} K={K} imprecise={imp}: FAILED {type(e).__name__}: {str(e)[:400]}", flush=True)


if __name__ == "__main__":
    main()
