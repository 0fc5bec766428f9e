"""Converts the measured tensor-core bits of north-numerical-computing/MATLAB-tensor-core (Khattak & Mikaitis,
BSD-2-Clause; model_validation/<GPU>/<format>/{a,b,c,d}_*.txt) into the compact operand sets that tc_fit.cpp
reads (read_peer; `roundoff tensorcore-fit --peer FILE`).

Their layout: one instruction per line, line i of every file belongs to the same dot product
D = C + sum_k a_k * b_k over K = 4 (V100; tf32 on every GPU), 8 (fp16/bf16 on A100, A2, Ada, L40S), 16 (fp16/bf16
on H100, H200, B200) or 32 (fp8). a_* and b_* hold K binary32 words in hex (the inputs, each exactly a value of
the input format), c_*_fp32 and d_*_fp32 / d_*_fp16 one binary32 word in binary digits (the fp16 output written as
the binary32 of its value). For an fp16 output their probe rounds C to fp16 (nearest-even) before the instruction.

Output: one file per operand set (input format and K); the GPUs that were measured on the same operands share it:
  "RTCPEER1", then u32 little-endian: version 1, input format code (0 fp16, 1 bf16, 2 e4m3, 3 e5m2, 4 tf32), K,
  lines, GPU count G; then per GPU: 8 bytes of ASCII name (NUL padded), u32 flags (bit 0: binary32 output present,
  bit 1: fp16 output present, bit 2: the binary32 outputs were measured with C = 0); then A and B (lines x K each, row-major, in the input format's encoding: u16 for
  fp16 and bf16, u8 for fp8, u32 binary32 bits for tf32); then per GPU: C (u32 binary32 x lines), D32 (u32 x lines,
  if present), D16 (u16 fp16 encodings x lines, if present).
A GPU whose files differ from the set's operands is refused (the script checks that every GPU of a set saw the
same A and B).

One fact not in their files' names: the binary32 outputs for fp8 on H100 and H200 were measured with a zero
accumulator, whatever their c file holds. Their validation script (model_validation/Validate_TC_models.m) uses
C = 0 for these ("D = AB + D where D is zero for fp8 with WGMMA"), and the data bear it out: H100's and H200's
d_fp32 files are identical although their c files differ. Flag bit 2 records it (the reader then takes C = 0 for
the binary32 outputs); their fp16 outputs did use C (H100's and H200's d_fp16 differ).

Usage: python3 studies/tensorcore/peer_to_bin.py PEER_CHECKOUT OUT_DIR
"""
import os
import sys
import numpy as np

FORMAT_CODES = {"fp16": 0, "bf16": 1, "E4M3": 2, "E5M2": 3, "tf32": 4}
# (format, K) -> GPUs, in the order they are stored.
SETS = [
    ("fp16", 4, ["V100"]),
    ("fp16", 8, ["A100", "A2", "Ada", "L40S"]),
    ("fp16", 16, ["H100", "H200", "B200"]),
    ("bf16", 8, ["A100", "A2", "Ada", "L40S"]),
    ("bf16", 16, ["H100", "H200", "B200"]),
    ("tf32", 4, ["A100", "A2", "Ada", "L40S", "H100", "H200", "B200"]),
    ("E4M3", 32, ["Ada", "L40S", "H100", "H200", "B200"]),
    ("E5M2", 32, ["Ada", "L40S", "H100", "H200", "B200"]),
]

# fp8 binary32 outputs measured with a zero accumulator whatever their c file holds (see above).
ZERO_C_GPUS = ("H100", "H200")


def read_hex(path):
    with open(path) as f:
        return np.array([[int(w, 16) for w in line.split()] for line in f if line.strip()], dtype=np.uint32)


def read_binary(path):
    with open(path) as f:
        return np.array([int(line.strip(), 2) for line in f if line.strip()], dtype=np.uint32)


def encode_small(x, ebits, mbits):
    """The encoding of the binary32 value x (exactly representable) in a sign/ebits/mbits format."""
    v = float(np.array([x], dtype=np.uint32).view(np.float32)[0])
    sign = 1 if (x >> 31) else 0
    if v == 0:
        return sign << (ebits + mbits)
    bias = (1 << (ebits - 1)) - 1
    m, e = np.frexp(abs(v))
    e = int(e) - 1
    biased = max(e + bias, 0)
    q = (max(e, 1 - bias)) - mbits
    scaled = abs(v) / 2.0**q
    if scaled != int(scaled):
        raise ValueError(f"{v!r} is not a value of the {ebits}-exponent-bit, {mbits}-fraction-bit format")
    frac = int(scaled) - ((1 << mbits) if biased > 0 else 0)
    return (sign << (ebits + mbits)) | (biased << mbits) | frac


def encode_inputs(words, fmt):
    flat = words.ravel()
    if fmt == "tf32":
        if np.any(flat & 0x1FFF):
            raise ValueError("a tf32 input has nonzero low 13 bits")
        return flat.astype("<u4")
    if fmt == "bf16":
        if np.any(flat & 0xFFFF):
            raise ValueError("a bf16 input has nonzero low 16 bits")
        return (flat >> 16).astype("<u2")
    if fmt == "fp16":
        h = flat.view(np.float32).astype(np.float16)
        if np.any(h.astype(np.float32).view(np.uint32) != flat):
            raise ValueError("an fp16 input is not an fp16 value")
        return h.view("<u2")
    eb, mb = (4, 3) if fmt == "E4M3" else (5, 2)
    return np.array([encode_small(int(x), eb, mb) for x in flat], dtype="<u1")


def main():
    peer, out = sys.argv[1], sys.argv[2]
    base = os.path.join(peer, "model_validation")
    os.makedirs(out, exist_ok=True)
    for fmt, k, gpus in SETS:
        a = b = None
        entries = []
        for gpu in gpus:
            d = os.path.join(base, gpu, fmt)
            ga = read_hex(os.path.join(d, f"a_{gpu}_{fmt}.txt"))
            gb = read_hex(os.path.join(d, f"b_{gpu}_{fmt}.txt"))
            if ga.shape[1] != k or gb.shape != ga.shape:
                raise ValueError(f"{gpu} {fmt}: operands of shape {ga.shape}, {gb.shape}; expected K {k}")
            if a is None:
                a, b = ga, gb
            elif not (np.array_equal(a, ga) and np.array_equal(b, gb)):
                raise ValueError(f"{gpu} {fmt}: operands differ from {gpus[0]}'s")
            c = read_binary(os.path.join(d, f"c_{gpu}_fp32.txt"))
            d32 = d16 = None
            if os.path.exists(os.path.join(d, f"d_{gpu}_fp32.txt")):
                d32 = read_binary(os.path.join(d, f"d_{gpu}_fp32.txt"))
            if os.path.exists(os.path.join(d, f"d_{gpu}_fp16.txt")):
                w = read_binary(os.path.join(d, f"d_{gpu}_fp16.txt"))
                h = w.view(np.float32).astype(np.float16)
                if np.any(h.astype(np.float32).view(np.uint32) != w):
                    raise ValueError(f"{gpu} {fmt}: a d_fp16 word is not an fp16 value")
                d16 = h.view(np.uint16)
            for v in (c, d32, d16):
                if v is not None and len(v) != len(a):
                    raise ValueError(f"{gpu} {fmt}: {len(v)} output lines for {len(a)} operand lines")
            zero_c = gpu in ZERO_C_GPUS and fmt in ("E4M3", "E5M2")
            entries.append((gpu, c, d32, d16, zero_c))
        lines = len(a)
        dst = os.path.join(out, f"{fmt.lower()}-k{k}.bin")
        tmp = dst + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"RTCPEER1")
            f.write(np.array([1, FORMAT_CODES[fmt], k, lines, len(entries)], dtype="<u4").tobytes())
            for gpu, c, d32, d16, zero_c in entries:
                f.write(gpu.encode().ljust(8, b"\0"))
                flags = (d32 is not None) | ((d16 is not None) << 1) | (zero_c << 2)
                f.write(np.array([flags], dtype="<u4").tobytes())
            f.write(encode_inputs(a, fmt).tobytes())
            f.write(encode_inputs(b, fmt).tobytes())
            for gpu, c, d32, d16, zero_c in entries:
                f.write(c.astype("<u4").tobytes())
                if d32 is not None:
                    f.write(d32.astype("<u4").tobytes())
                if d16 is not None:
                    f.write(d16.astype("<u2").tobytes())
        os.replace(tmp, dst)
        print(f"{dst}: {fmt}, K {k}, {lines} lines, GPUs " +
              ", ".join(g + ("" if d32 is None else " fp32") + ("" if d16 is None else " fp16")
                        + (" (binary32 with C = 0)" if z else "") for g, _, d32, d16, z in entries))


if __name__ == "__main__":
    main()
