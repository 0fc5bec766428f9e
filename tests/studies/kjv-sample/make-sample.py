#!/usr/bin/python3
"""Writes the synthetic KJV-format sample of tests/studies/kjv_test.cpp (run once; its outputs are committed).

sample.txt   the decoded text: the title line of Debian's bible-kjv-text, then for each of the 66 books (their
             bible.data abbreviations, canonical order) 1-3 chapters of 1-3 synthetic verses
             "<book><chapter>:<verse> <text>"; a few verses have doubled or trailing spaces.
bible.data   sample.txt in bible.data's container (kjv.hpp): "EC02Compressed Data File" padded to 0x50, u32 0 at
             0x50, block size 2048 at 0x54, block count n at 0x58, n + 1 offsets, the compress header 1f 9d 90,
             then each 2048-byte block compressed by ncompress's `compress -b16` without its 3-byte header.
lzw-b10.Z    `compress -b10` of sample.txt, then 12,000 pseudo-random letters (x <- (1103515245 x + 12345) mod 2^31
             from x = 12345, letter 'a' + (x >> 16) mod 26), then sample.txt again: the 10-bit table fills and the
             ratio drops, so compress emits clear codes (counted below); the decoder test strips its header.
Needs `compress` (Debian package ncompress); gzip -dc is used to check every output independently.
"""
import struct
import subprocess

BOOKS = ("Ge Exo Lev Num Deu Josh Jdgs Ruth 1Sm 2Sm 1Ki 2Ki 1Chr 2Chr Ezra Neh Est Job Psa Prv Eccl SSol Isa "
         "Jer Lam Eze Dan Hos Joel Amos Obad Jonah Mic Nahum Hab Zep Hag Zec Mal Mat Mark Luke John Acts Rom "
         "1Cor 2Cor Gal Eph Phi Col 1Th 2Th 1Tim 2Tim Titus Phmn Heb Jas 1Pet 2Pet 1Jn 2Jn 3Jn Jude Rev").split()
assert len(BOOKS) == 66

lines = ["Holy Bible, Authorized (King James) Version.  Textfile 930105."]
for k, b in enumerate(BOOKS):
    for c in range(1, 2 + k % 3):
        for v in range(1, 2 + (k + c) % 3):
            text = f"And {b} spake of chapter {c}, verse {v}: behold, the word number {k * 7 + c * 3 + v}."
            if (k + c + v) % 5 == 0:
                text = text.replace(" of ", "  of ") + " "
            lines.append(f"{b}{c}:{v} {text}")
sample = ("\n".join(lines) + "\n").encode()
open("sample.txt", "wb").write(sample)


def compress(data, bits):
    return subprocess.run(["compress", f"-b{bits}", "-c"], input=data, capture_output=True, check=True).stdout


def gunzip(z):
    return subprocess.run(["gzip", "-dc"], input=z, capture_output=True, check=True).stdout


BLOCK = 2048
blocks = [sample[i:i + BLOCK] for i in range(0, len(sample), BLOCK)]
bodies = []
for blk in blocks:
    z = compress(blk, 16)
    assert z[:3] == b"\x1f\x9d\x90" and gunzip(z) == blk
    bodies.append(z[3:])
header = b"EC02Compressed Data File".ljust(0x50, b"\0") + struct.pack(">III", 0, BLOCK, len(blocks))
first = len(header) + 4 * (len(blocks) + 1) + 3
offsets = [first]
for body in bodies:
    offsets.append(offsets[-1] + len(body))
data = header + b"".join(struct.pack(">I", o) for o in offsets) + b"\x1f\x9d\x90" + b"".join(bodies)
open("bible.data", "wb").write(data)

x, letters = 12345, bytearray()
for _ in range(12000):
    x = (1103515245 * x + 12345) % 2**31
    letters.append(ord("a") + (x >> 16) % 26)
mixed = sample + bytes(letters) + sample
z10 = compress(mixed, 10)
assert z10[:3] == b"\x1f\x9d\x8a" and gunzip(z10) == mixed


def clear_codes(z, max_bits):  # walks the code stream as lzw.cpp does, counting code 256
    pos = start = clears = 0
    n, max_code, free, first = 9, 511, 257, True
    while True:
        if free > max_code:
            pos = start + -(-(pos - start) // (8 * n)) * 8 * n
            start, n = pos, n + 1
            max_code = 1 << max_bits if n == max_bits else (1 << n) - 1
            continue
        if pos + n > 8 * len(z):
            return clears
        code = (int.from_bytes(z[pos >> 3:(pos >> 3) + 3].ljust(3, b"\0"), "little") >> (pos & 7)) & ((1 << n) - 1)
        pos += n
        if first:
            first = False
        elif code == 256:
            clears += 1
            free = 256
            pos = start + -(-(pos - start) // (8 * n)) * 8 * n
            start, n, max_code = pos, 9, 511
        elif free < 1 << max_bits:
            free += 1


clears = clear_codes(z10[3:], 10)
assert clears >= 1
open("lzw-b10.Z", "wb").write(z10)
print(f"sample.txt {len(sample)} bytes, {len(lines) - 1} verses; bible.data {len(data)} bytes, {len(blocks)} blocks;"
      f" lzw-b10.Z {len(z10)} bytes, {len(mixed)} decoded, {clears} clear codes")
