#!/usr/bin/env python3
"""cuBLAS's tf32 segment-K kernel on an H200, explained from its measured outputs alone (issue 40, item 2).

At 1024 x 1024 x 4096 (tf32 inputs, fp32 out) cuBLAS launched a device memset and then
`sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x128x32_warpgroupsize1x1x1_execute_segment_k_on`. Its outputs
in output-tile column 0 (torch columns 0-63) are `tc-h100-tf32` chained over K; in tile column 15 (columns
960-1023) the chain reproduces 43 of 16 384. This script tests hypotheses for tile column 15 against every
measured output and prints one row per hypothesis with the number of outputs it reproduces.

Finding (docs/studies/tensorcore.md, "The tf32 segment-K kernel"): each split output tile's 128 k-iterations of
32 are cut into 15 contiguous pieces, 7 of 8 iterations then 8 of 9 (k = 0, 256, ..., 1792, 2080, 2368, ...,
4096: 128 = 15 * 8 + 8, the 8 spare iterations going to the last 8 pieces), each piece is `tc-h100-tf32`
chained from zero, and the 15 piece results are added in binary32 to nearest-even as a pairwise tree over 16
slots with the pieces right-aligned (the first slot empty): ((((P0 + (P1 + P2)) + ((P3 + P4) + (P5 + P6))) +
(((P7 + P8) + (P9 + P10)) + ((P11 + P12) + (P13 + P14)))) -- `tree_sum`. That tree was read off the order
probe (studies/tensorcore/cublas_probe.py --segment-k) on an H200 on 2026-11-30 and reproduces every output of
the split tiles here. Earlier sessions, testing sequential orders only, had found "no single order fits" and
concluded a race; the counts below keep those rows (every output is also *some* sequential order's sum, since
the tree's result happens to be reachable by one per output, but no one sequential order is the tree).

Two kinds of count therefore appear below:

  exact     the model's output equals the measured bits (one fixed order of the piece sums);
  order     the measured bits are the binary32 sum of the model's pieces in *some* order: found among
            --orders random orders (and, with --exact-dp N, decided exactly by enumerating every order's
            result for up to N outputs no sampled order reached);
  bound     |measured - exact sum of the pieces| <= (S - 1)/2 * ulp(sum |pieces|): the rounding error bound of
            any order of S - 1 binary32 additions, so an output outside it is not *any* order's sum.

Run (the full fixtures; the committed subset tests/fixtures/cublas-h200/tf32_2.npz works too, with fewer outputs):

    PYTHONPATH=build/python /usr/bin/python3 studies/tensorcore/segment_k.py \\
        [--fixture ../shared/fixtures/cublas-h200/tf32_2.npz] [--orders 2000] [--exact-dp 0] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import roundoff

REPO = Path(__file__).resolve().parents[2]
SHAPE = "1024x1024x4096"
K, KT = 4096, 32              # K, the kernel's k-tile (tilesize64x128x32)
ITERS = K // KT                # 128 k-iterations per output tile
PRESET = "tc-h100-tf32"


def default_fixture() -> Path:
    full = REPO.parent / "shared" / "fixtures" / "cublas-h200" / "tf32_2.npz"
    return full if full.exists() else REPO / "tests" / "fixtures" / "cublas-h200" / "tf32_2.npz"


def load(path: Path):
    """A (M' x K), B (K x N') as float64 tf32 values, measured D (M' x N') as float64, torch rows and columns."""
    z = np.load(path)
    a = z[f"{SHAPE}__a"].view(np.float32).astype(np.float64)
    b = z[f"{SHAPE}__b"].view(np.float32).astype(np.float64)
    d = z[f"{SHAPE}__d_tf32"].view(np.float32).astype(np.float64)
    if f"{SHAPE}__cols" in z.files:  # the committed subset
        rows, cols = z[f"{SHAPE}__rows"].astype(int), z[f"{SHAPE}__cols"].astype(int)
    else:  # the full fixtures: 64 x 64 tiles, rows of the tile rows in order, columns of the tile columns
        tiles = z[f"{SHAPE}__tiles"]
        tr = sorted({int(t) for t in tiles[:, 0]})
        tc = sorted({int(t) for t in tiles[:, 1]})
        rows = np.concatenate([np.arange(64 * t, 64 * t + 64) for t in tr])
        cols = np.concatenate([np.arange(64 * t, 64 * t + 64) for t in tc])
    kernels = json.loads(str(z["meta"]))[SHAPE]["tf32"]
    return a, b, d, rows, cols, kernels


def f32(x):
    return np.asarray(x, np.float32).astype(np.float64)


# --- Splits of the 128 k-iterations of one output tile ---------------------------------------------------------

def balanced(S: int, rule: str, n: int = ITERS) -> list[int]:
    """Piece boundaries (in k-iterations) of n iterations cut into S pieces of q or q + 1 = n // S (+1).
    rule: 'last' (the n % S spare iterations go to the last pieces), 'first', or 'floor' (boundary c*n//S)."""
    q, r = divmod(n, S)
    if rule == "last":
        return [c * q + max(0, c - (S - r)) for c in range(S + 1)]
    if rule == "first":
        return [c * q + min(c, r) for c in range(S + 1)]
    if rule == "floor":
        return [c * n // S for c in range(S + 1)]
    raise ValueError(f"rule {rule!r}; valid: last, first, floor")


def stream_k(ctas: int, rule: str, position: int, tiles: int = 8) -> list[int]:
    """Boundaries inside one tile when the k-iterations of the last `tiles` output tiles (tiles * 128, in tile
    order) are dealt contiguously to `ctas` CTAs (stream-K over the leftover tiles); `position` is this tile's
    place among them."""
    g = balanced(ctas, rule, tiles * ITERS)
    lo, hi = position * ITERS, (position + 1) * ITERS
    return [x - lo for x in sorted({lo, hi} | {x for x in g if lo < x < hi})]


class Pieces:
    """Piece results tc-h100-tf32 chained from zero over k-iterations [i, j), cached, for fixed A and B."""

    def __init__(self, a, b, accumulation: str = PRESET):
        self.a, self.b, self.acc, self.cache = a, b, accumulation, {}

    def piece(self, i: int, j: int, c=None):
        if c is not None:
            return roundoff.gemm(self.a[:, KT * i:KT * j], self.b[KT * i:KT * j], c, inputs="tf32",
                                 accumulation=self.acc)
        if (i, j) not in self.cache:
            self.cache[(i, j)] = roundoff.gemm(self.a[:, KT * i:KT * j], self.b[KT * i:KT * j], inputs="tf32",
                                               accumulation=self.acc)
        return self.cache[(i, j)]

    def split(self, bounds) -> np.ndarray:  # (S, M', N')
        return np.array([self.piece(i, j) for i, j in zip(bounds[:-1], bounds[1:])])


# --- Sums of the pieces ------------------------------------------------------------------------------------------

def seq_sum(P, order=None, toward_zero=False):
    """Binary32 sequential sum of the pieces P (S, ...) in `order`, each addition to nearest-even (binary64 then
    binary32 is one binary32 rounding: two binary32 values' sum is exact in binary64 unless their exponents differ
    by more than 29, and then both give the larger addend) or, toward_zero, truncated."""
    order = range(len(P)) if order is None else order
    order = list(order)
    t = P[order[0]].copy()
    for i in order[1:]:
        t = f32(t + P[i]) if not toward_zero else add_toward_zero(t, P[i])
    return t


def add_toward_zero(x, y):
    """x + y rounded toward zero to binary32, for binary32 values x, y (exact via two-sum)."""
    s = x + y
    bb = s - x
    e = (x - (s - bb)) + (y - bb)  # s + e = x + y exactly
    m, ex = np.frexp(s)
    r = np.ldexp(np.trunc(m * 2.0 ** 24) / 2.0 ** 24, ex)  # s truncated to 24 bits
    below = (r == s) & (e != 0) & (np.sign(e) != np.sign(s)) & (s != 0)  # s is binary32, the rest pulls inward
    r = np.where(below, np.nextafter(r.astype(np.float32), np.float32(0)).astype(np.float64), r)
    return np.where(s == 0, np.where(e == 0, 0.0, f32(e)), r) + 0.0


def pairwise_sum(P):
    P = list(P)
    while len(P) > 1:
        Q = [f32(P[i] + P[i + 1]) for i in range(0, len(P) - 1, 2)]
        P = Q + ([P[-1]] if len(P) % 2 else [])
    return P[0]


def tree_sum(P):
    """Binary32 pairwise tree of the pieces P (S, ...) over the next power of two T >= S slots, the pieces
    right-aligned (T - S zero slots first), each addition to nearest-even: the segment-K kernel's order."""
    T = 1
    while T < len(P):
        T *= 2
    L = [np.zeros_like(P[0])] * (T - len(P)) + list(P)
    while len(L) > 1:
        L = [f32(L[i] + L[i + 1]) for i in range(0, len(L), 2)]
    return L[0]


def within_bound(P, meas):
    """|meas - sum P| <= (S - 1)/2 ulp(sum |P|): every order's binary32 sum lies within it."""
    S = len(P)
    tot = np.abs(P).sum(axis=0)
    _, e = np.frexp(np.where(tot > 0, tot, 1.0))
    ulp = np.ldexp(1.0, e - 24)  # ulp of binary32 at the magnitude sum |P| (a bound on every partial sum)
    exact = P.astype(np.longdouble).sum(axis=0)
    return np.abs(meas.astype(np.longdouble) - exact) <= (S - 1) / 2 * ulp


def sampled_orders(S: int, count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [np.arange(S), np.arange(S)[::-1]] + [rng.permutation(S) for _ in range(count)]


def order_hits(P, meas, orders):
    """(outputs some order reproduces, per order the number it reproduces)."""
    hit = np.zeros(meas.shape, bool)
    per = []
    for o in orders:
        h = seq_sum(P, o) == meas
        hit |= h
        per.append(int(h.sum()))
    return hit, per


def every_order(p, toward_zero: bool = False) -> set:
    """Every value the binary32 sequential sum of p (S values) takes over all S! orders (subset DP, exact), each
    addition to nearest-even (numpy's binary32 add) or, toward_zero, truncated."""
    p = [np.float32(x) for x in p]
    n = len(p)
    R = [None] * (1 << n)
    for i in range(n):
        R[1 << i] = {p[i]}
    for m in range(1, 1 << n):
        if R[m] is not None:
            continue
        s, mm = set(), m
        while mm:
            lb = mm & -mm
            i = lb.bit_length() - 1
            mm ^= lb
            if toward_zero:
                xs = np.array(sorted(R[m ^ lb]), np.float64)
                s.update(np.float32(v) for v in add_toward_zero(xs, np.full(xs.shape, float(p[i]))))
            else:
                s.update(np.float32(x + p[i]) for x in R[m ^ lb])  # numpy binary32 add: one rounding
        R[m] = s
    return {float(x) for x in R[-1]}


# --- The study ---------------------------------------------------------------------------------------------------

def run(args) -> dict:
    a, b, d, rows, cols, kernels = load(Path(args.fixture))
    plain_cols, split_cols = cols < 64, cols >= 960
    report = {"fixture": str(args.fixture), "kernels": kernels, "rows": []}

    def row(name, exact=None, order=None, bound=None, of=None, note=""):
        report["rows"].append({"hypothesis": name, "exact": exact, "order": order, "bound": bound,
                               "outputs": of, "note": note})
        cells = [f"{x:6d}" if x is not None else "     -" for x in (exact, order, bound)]
        print(f"{name:58s} {' '.join(cells)} / {of}  {note}", flush=True)

    # Tile column 0 and the chain.
    chain = roundoff.gemm(a, b, inputs="tf32", accumulation=PRESET)
    meas0, meas = d[:, plain_cols], d[:, split_cols]
    n0, n = meas0.size, meas.size
    print(f"{'hypothesis (tile column 15 unless said)':58s}  exact  order  bound / outputs")
    row("tile column 0: tc-h100-tf32 chained over K", int((chain[:, plain_cols] == meas0).sum()), of=n0)
    B = b[:, split_cols]
    row("tc-h100-tf32 chained over K", int((chain[:, split_cols] == meas).sum()), of=n)

    # The adder or the instruction differs (k per instruction = the adder's group; alignment bits; rounding).
    for spec in ("tc-a100-tf32", "tc-h100-tf32,group=4", "tc-h100-tf32,group=16", "tc-h100-tf32,group=32",
                 "tc-h100-tf32,extra=1", "tc-h100-tf32,extra=3", "tc-h100-tf32,extra=8",
                 "tc-h100-tf32,align=nearest-even", "tc-h100-tf32,normalize=nearest-even"):
        row(f"{spec} chained over K",
            int((roundoff.gemm(a, B, inputs="tf32", accumulation=spec) == meas).sum()), of=n)

    # Equal chunks as splitk=S:32 (chunk results added in k order), and promotion into binary32.
    best = max(((int((roundoff.gemm(a, B, inputs="tf32", accumulation=f"{PRESET},splitk={S}:32") == meas).sum()), S)
                for S in range(2, 33)))
    row("splitk=S:32, S = 2..32 (best S)", best[0], of=n, note=f"best S = {best[1]}")
    for N in (256, 288):
        for r in ("nearest-even", "toward-zero"):
            spec = f"{PRESET},acc=fp32:{r},promote={N}:fp32"
            row(f"promote={N}:fp32, promoted sum {r}",
                int((roundoff.gemm(a, B, inputs="tf32", accumulation=spec) == meas).sum()), of=n)

    # The error statistics that narrowed the search: the signed error toward zero (ulps of the output, rows of
    # the classes without cancellation), percentiles 10/25/50/75/90; the chain truncates at every step of 8.
    exact = (a.astype(np.longdouble) @ B.astype(np.longdouble))
    nocancel = (rows // 64) % 4 != 2

    def tz_error(v):
        _, e = np.frexp(np.where(v != 0, v, 1.0))
        err = ((v - exact) / np.ldexp(1.0, e - 24) * np.sign(exact)).astype(np.float64)
        return [round(float(x), 1) for x in np.percentile(err[nocancel], [10, 25, 50, 75, 90])]

    stats = {"measured": tz_error(meas), "chain": tz_error(chain[:, split_cols])}
    for L in (128, 256, 512):
        stats[f"chunks of {L}, k order"] = tz_error(
            roundoff.gemm(a, B, inputs="tf32", accumulation=f"{PRESET},splitk={K // L}:32"))
    report["error_toward_zero_ulps_p10_25_50_75_90"] = stats
    for k, v in stats.items():
        print(f"signed error toward zero, ulps (p10 p25 p50 p75 p90), {k}: {v}")

    pcs = Pieces(a, B)
    orders_cache = {}

    def any_order(P):
        S = len(P)
        if S not in orders_cache:
            orders_cache[S] = sampled_orders(S, args.orders, args.seed)
        hit, per = order_hits(P, meas, orders_cache[S])
        return hit, per

    def split_row(name, bounds, note=""):
        P = pcs.split(bounds)
        hit, per = any_order(P)
        row(name, max(per), int(hit.sum()), int(within_bound(P, meas).sum()), n, note)
        return P, hit, per

    # Uniform pieces (bias-matched: chunks of ~256 give the measured mean error), interleaved register sets.
    split_row("16 pieces of 8 iterations (k 256), any order", list(range(0, ITERS + 1, 8)))
    split_row("8 pieces of 16 iterations (k 512), any order", list(range(0, ITERS + 1, 16)))
    split_row("32 pieces of 4 iterations (k 128), any order", list(range(0, ITERS + 1, 4)))
    for sets in (2, 4, 16):
        P = []
        for s in range(sets):  # k-iterations s, s + sets, ...: one register set each, chained from zero
            acc = None
            for it in range(s, ITERS, sets):
                acc = pcs.piece(it, it + 1) if acc is None else pcs.piece(it, it + 1, c=acc)
            P.append(acc)
        P = np.array(P)
        hit, per = any_order(P)
        row(f"{sets} interleaved register sets (32-k blocks), any order", max(per), int(hit.sum()),
            int(within_bound(P, meas).sum()), n)

    # Boundary search on a sample: balanced splits of one tile and stream-K over the last 8 tiles.
    cand = []
    for S in range(2, 33):
        for rule in ("last", "first", "floor"):
            cand.append((f"balanced S={S} {rule}", balanced(S, rule)))
    for ctas in range(64, 301):
        for rule in ("last", "first", "floor"):
            for pos in range(8):
                cand.append((f"stream-K {ctas} CTAs {rule}, tile {pos} of 8", stream_k(ctas, rule, pos)))
    rs = np.arange(0, a.shape[0], max(1, a.shape[0] // 32))
    cs = np.arange(0, B.shape[1], max(1, B.shape[1] // 16))
    sub = Pieces(a[rs], B[:, cs])
    seen, scored = set(), []
    msub = meas[np.ix_(rs, cs)]
    for name, bd in cand:
        if tuple(bd) in seen:
            continue
        seen.add(tuple(bd))
        P = sub.split(bd)
        hit, _ = order_hits(P, msub, sampled_orders(len(P), 64, args.seed))
        scored.append((int(hit.sum()), int(within_bound(P, msub).sum()), name, bd))
    scored.sort(key=lambda t: (-t[0], -t[1]))
    print(f"boundary search: {len(seen)} distinct splits, {msub.size} outputs, 66 orders each; best by 'order':")
    for o, bnd, name, bd in scored[:6]:
        print(f"  order {o:4d} bound {bnd:4d}  {name}: {bd}")
    report["boundary_search"] = {"splits": len(seen), "outputs": int(msub.size), "orders": 66,
                                 "best": [{"order": o, "bound": bnd, "split": name, "bounds": bd}
                                          for o, bnd, name, bd in scored[:20]]}

    # The finding and its neighbours.
    for S in (14, 15, 16):
        for rule in ("last", "first"):
            if S == 16 and rule == "first":
                continue  # 128 = 16 * 8: the same split as 'last'
            P, hit, per = split_row(f"balanced {S} pieces, spare iterations {rule}, any order", balanced(S, rule))
            if (S, rule) == (15, "last"):
                P15, hit15, bounds15 = P, hit, balanced(S, rule)
    row("  the same, pieces added in k order", int((seq_sum(P15) == meas).sum()), of=n)
    row("  the same, pieces added in reverse k order", int((seq_sum(P15, range(14, -1, -1)) == meas).sum()), of=n)
    row("  the same, pieces added as a pairwise tree", int((pairwise_sum(P15) == meas).sum()), of=n)
    row("  the same, pairwise tree over 16 slots, pieces right-aligned (the finding)",
        int((tree_sum(P15) == meas).sum()), of=n)
    # Fixups through the tensor core: each piece's chain starts from the previous piece's result as its C input
    # (pieces in k order: the plain chain; in reverse k order: the chain over k-iterations 119-127, 110-118, ...).
    for name, seq in (("k order", range(15)), ("reverse k order", range(14, -1, -1))):
        acc = None
        for q in seq:
            acc = pcs.piece(bounds15[q], bounds15[q + 1], c=acc) if acc is not None else \
                pcs.piece(bounds15[q], bounds15[q + 1])
        row(f"  the same, each piece's chain from the previous result as C, {name}", int((acc == meas).sum()), of=n)
    hit_rz = np.zeros(meas.shape, bool)
    for oo in orders_cache[15]:
        hit_rz |= seq_sum(P15, oo, toward_zero=True) == meas
    row("  the same, additions toward zero instead, any order", None, int(hit_rz.sum()), of=n)
    row("  the same, exact sum of the pieces rounded once", int((f32(P15.astype(np.longdouble).sum(0)) == meas).sum()),
        of=n)
    # One order per kernel output tile? (kernel tile = 128 torch rows x 64 torch columns)
    for t in sorted({int(r) // 128 for r in rows}):
        sel = (rows // 128) == t
        o = orders_cache[15]
        per_t = [int((seq_sum(P15[:, sel], oo) == meas[sel]).sum()) for oo in o]
        row(f"  kernel tile rows {128 * t}-{128 * t + 127}: best single order", max(per_t),
            of=int(sel.sum()) * meas.shape[1])
    # Do nearby outputs share an order? Per group, the best single sampled order's share of the group's outputs,
    # against random groups of the same size (equal shares: the order is no more shared nearby than far away).
    o = orders_cache[15]
    sr = np.nonzero((rows % 64) < 8)[0]  # 8 rows of each 64-row block
    H = np.array([seq_sum(P15[:, sr], oo) == meas[sr] for oo in o])  # (orders, rows, 64)
    rng = np.random.default_rng(args.seed)
    share = {}
    for gname, size, groups in (("8 adjacent columns of a row", 8, [(r, slice(c, c + 8)) for r in range(sr.size)
                                                                   for c in range(0, meas.shape[1] - 7, 8)]),
                                ("one row of the tile column", meas.shape[1], [(r, slice(None)) for r in range(sr.size)])):
        near = np.mean([H[(slice(None),) + g].reshape(len(o), -1).sum(1).max() / size for g in groups])
        flat = H.reshape(len(o), -1)
        far = np.mean([flat[:, rng.choice(flat.shape[1], size, replace=False)].sum(1).max() / size
                       for _ in range(len(groups))])
        share[gname] = {"nearby": round(float(near), 3), "random": round(float(far), 3)}
        print(f"best single order's share, {gname}: {near:.3f}; random groups of {size}: {far:.3f}")
    report["order_sharing"] = share
    # Does a piece tend to arrive early or late (e.g. the shorter pieces first)? Per piece, its mean rank among the
    # sampled orders that reproduce an output, averaged over outputs that 5-60 % of the orders reproduce (a uniform
    # race: 7 for every piece).
    rr = np.arange(0, meas.shape[0], 4)
    acc, cnt = np.zeros((15, rr.size, meas.shape[1])), np.zeros((rr.size, meas.shape[1]))
    for oo in o:
        h = seq_sum(P15[:, rr], oo) == meas[rr]
        acc += np.argsort(oo)[:, None, None] * h[None]
        cnt += h
    inf = (cnt > 0.05 * len(o)) & (cnt < 0.6 * len(o))
    ranks = [round(float(x), 2) for x in (acc[:, inf] / cnt[inf]).mean(axis=1)]
    report["piece_mean_rank"] = {"outputs": int(inf.sum()), "ranks": ranks}
    print(f"mean rank per piece (uniform race: 7) over {int(inf.sum())} informative outputs: {ranks}")
    if args.exact_dp:
        miss = np.argwhere(~hit15)[: args.exact_dp]
        found = sum(meas[tuple(ij)] in every_order(P15[(slice(None),) + tuple(ij)]) for ij in miss)
        row("  outputs no sampled order reached, every order enumerated", None, int(found), of=len(miss))
        report["exact_dp"] = {"checked": int(len(miss)), "reachable": int(found), "unreached_by_samples": int((~hit15).sum())}
        # Truncating additions: enumerate every order for some of the outputs no sampled order reached.
        miss = np.argwhere(~hit_rz)
        miss = miss[np.random.default_rng(args.seed).permutation(len(miss))[: max(1, args.exact_dp // 4)]]
        found = sum(meas[tuple(ij)] in every_order(P15[(slice(None),) + tuple(ij)], toward_zero=True) for ij in miss)
        row("  additions toward zero: of outputs no sampled order reached, every order enumerated", None, int(found),
            of=len(miss))
        report["exact_dp_toward_zero"] = {"checked": int(len(miss)), "reachable": int(found),
                                          "unreached_by_samples": int((~hit_rz).sum())}
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixture", default=str(default_fixture()))
    p.add_argument("--orders", type=int, default=2000, help="random orders of the piece sums tried per split")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--exact-dp", type=int, default=0,
                   help="enumerate every order for up to N outputs that no sampled order reproduced (and N/4 under "
                        "truncating additions)")
    p.add_argument("--json", help="write the counts here")
    a = p.parse_args(argv)
    if not Path(a.fixture).exists():
        p.error(f"--fixture: {a.fixture} does not exist")
    rep = run(a)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rep, f, indent=1)
        Path(tmp).replace(a.json)
    return rep


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
