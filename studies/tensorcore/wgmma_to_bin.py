"""Converts wgmma_probe.py's .npz output into the explicit-operand dump that tc_fit.cpp reads (read_wgmma).

Usage: python3 studies/tensorcore/wgmma_to_bin.py IN.npz OUT.bin [TILES]   (TILES: keep the first TILES tiles)
"""
import os
import sys
import numpy as np

FORMAT_CODES = {"f16": 0, "bf16": 1, "e4m3": 2, "e5m2": 3, "tf32": 4}
ACC_CODES = {"f32": 0, "f16": 1}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    z = np.load(src)
    tiles = z["d"].shape[0] if len(sys.argv) < 4 else int(sys.argv[3])
    fmt, k, imprecise = str(z["fmt"]), int(z["K"]), int(z["imprecise"])
    acc = str(z["acc"]) if "acc" in z.files else "f32"
    head = np.array([1, FORMAT_CODES[fmt], k, tiles, imprecise, ACC_CODES[acc]], dtype="<u4")
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"RTCWGMMA")
        f.write(head.tobytes())
        for name in ("a", "b", "c", "d"):
            f.write(np.ascontiguousarray(z[name][:tiles]).astype("<u4").tobytes())
    os.replace(tmp, dst)
    print(f"{dst}: {fmt}, K {k}, {tiles} tiles, max_num_imprecise_acc {imprecise}, accumulator {acc}")


if __name__ == "__main__":
    main()
