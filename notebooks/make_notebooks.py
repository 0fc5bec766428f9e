#!/usr/bin/python3
"""Writes the notebooks of notebooks/ (nbformat v4, without outputs) from the cell sources below, so that
they are reproducible and reviewable as Python:

    /usr/bin/python3 notebooks/make_notebooks.py            # (re)write tour, autoane_figures, torch_bridge
    /usr/bin/python3 notebooks/make_notebooks.py --check    # exit 1 if a stored notebook differs from its source

Run them with notebooks/run_notebooks.py (which never modifies them). Each notebook finds the repository root
by walking up from its working directory to the first directory holding notebooks-data/, and imports roundoff
from PYTHONPATH (PYTHONPATH=build/python after ./run build).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
import os, sys
from pathlib import Path

def repo_root(start=None):
    """The first directory at or above `start` (default: the working directory) holding notebooks-data/."""
    p = Path(start or os.getcwd()).resolve()
    for d in (p, *p.parents):
        if (d / "notebooks-data").is_dir():
            return d
    raise FileNotFoundError(f"no notebooks-data/ at or above {p}: run this notebook inside the roundoff repository")

ROOT = repo_root()
try:
    import roundoff
except ImportError as e:
    raise ImportError("roundoff is not importable: build it (./run build) and start Jupyter with "
                      "PYTHONPATH=<repo>/build/python") from e
import numpy as np
import pandas as pd
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)
print("repository:", ROOT)
print("roundoff", roundoff.__version__, "from", Path(roundoff.__file__).parent)'''


def nb(cells):
    out = new_notebook()
    out.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    out.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells]
    # stable ids, so that regenerating an unchanged notebook gives the same file
    for i, c in enumerate(out.cells):
        c["id"] = f"cell-{i:02d}"
    return out


# --------------------------------------------------------------------------------------------------- tour

TOUR = [
    ("md", """\
# A tour of roundoff from Python

`roundoff` emulates low-precision arithmetic bit for bit: formats and correct rounding in every mode, elementwise
arithmetic, sums, dot products and GEMMs under any accumulation order or tensor-core adder, and transformer ops
under per-op precision policies with an MPFR reference. Everything below runs the C++ library's code on numpy
arrays (docs/python.md)."""),
    ("code", SETUP),
    ("md", "## Formats\n\nThe presets, and a custom format from its fields."),
    ("code", """\
rows = []
for f in roundoff.formats():
    rows.append({"name": f.name, "p": f.p, "emin": f.emin, "emax": f.emax, "subnormals": f.subnormals,
                 "specials": f.specials, "max_finite": f.max_finite, "min_normal": f.min_normal,
                 "min_positive": f.min_positive, "unit_roundoff": f.unit_roundoff})
pd.DataFrame(rows)"""),
    ("code", """\
e4m3 = roundoff.Format(p=4, emin=-6, emax=8, specials="nan-only")
print(e4m3.name, e4m3.max_finite, e4m3.encoding)
print([hex(b) for b in roundoff.to_bits([1.0, -2.0, 448.0], "e4m3")])
print(roundoff.from_bits([0x3C00, 0x7BFF, 0x0001], "fp16"))"""),
    ("md", """\
## Rounding modes

Every mode is a correct rounding (one rounding of the exact value). Below: 1/3, 0.1 and a value just above an
fp16 halfway point, in every deterministic mode."""),
    ("code", """\
x = np.array([1 / 3, 0.1, 1 + 2**-11 + 2**-30, -1 - 2**-11 - 2**-30, 70000.0])
table = {m: roundoff.round(x, "fp16", m) for m in roundoff.modes() if m != "stochastic"}
pd.DataFrame(table, index=[repr(v) for v in x])"""),
    ("md", """\
**Stochastic rounding** rounds up with probability equal to the distance to the lower neighbour over the gap. Its
draws come from a counter-based stream: element *i* uses draw *i* of stream `stream` under `seed`, so a result is
reproducible from (seed, stream, index) alone, whatever the threads or the way an array is split."""),
    ("code", """\
v = np.full(100_000, 0.1)
a = roundoff.round(v, "bf16", "stochastic", seed=7)
b = roundoff.round(v, "bf16", "stochastic", seed=7)
c = roundoff.round(v, "bf16", "stochastic", seed=8)
d = roundoff.round(v, "bf16", "stochastic", seed=7, stream=1)
print("same seed, same bits:                 ", np.array_equal(a, b))
print("another seed, other bits:             ", not np.array_equal(a, c))
print("another stream, other bits:           ", not np.array_equal(a, d))
print("element i depends on (seed, stream, i):", np.array_equal(roundoff.round(v[:1000], "bf16", "stochastic", seed=7), a[:1000]))
print("the two neighbours:", sorted(set(a.tolist())))
print(f"mean of the stochastic roundings: {a.mean():.7f}  (0.1; nearest-even gives {roundoff.round(0.1, 'bf16'):.7f})")"""),
    ("md", """\
**Round to odd** makes double rounding innocuous: rounding to odd in a format with at least two more bits, then
to nearest in the target, equals rounding the exact value to nearest once. With nearest-even in the first step
it does not:"""),
    ("code", """\
x = 1 + 2**-11 + 2**-40          # just above the fp16 halfway point between 1 and 1 + 2**-10
direct = roundoff.round(x, "fp16")
via_ne = roundoff.round(roundoff.round(x, "fp32"), "fp16")
via_odd = roundoff.round(roundoff.round(x, "fp32", "odd"), "fp16")
print(f"direct {direct!r}   via fp32 nearest-even {via_ne!r}   via fp32 odd {via_odd!r}")

rng = np.random.default_rng(0)
# values near fp16 halfway points, where double rounding goes wrong
base = roundoff.round(rng.uniform(1, 2, 200_000), "fp16")
xs = base + 2**-11 * (1 + rng.choice([-1, 1], base.size) * 2.0 ** -rng.integers(13, 40, base.size))
d = roundoff.round(xs, "fp16")
print("double-rounding errors, nearest-even first:", int(np.sum(roundoff.round(roundoff.round(xs, "fp32"), "fp16") != d)),
      " odd first:", int(np.sum(roundoff.round(roundoff.round(xs, "fp32", "odd"), "fp16") != d)), "of", xs.size)"""),
    ("md", "## Elementwise arithmetic\n\n`arith` rounds the exact result once: an fma is not a multiply and an add."),
    ("code", """\
a, b, c = 1.75, float.fromhex("0x1.b7p+0"), 2**-24
fused = roundoff.arith("fma", a, b, c, format="fp16")
unfused = roundoff.arith("add", roundoff.arith("mul", a, b, format="fp16"), c, format="fp16")
print(f"fma {fused!r}   mul then add {unfused!r}")
xs = np.linspace(-4, 4, 9)
pd.DataFrame({op: roundoff.arith(op, xs, format="bf16") for op in ("exp", "sigmoid", "tanh", "sin")}, index=xs)"""),
    ("md", """\
## Dot products and GEMMs: the accumulation decides

The swamping example: 2048 followed by ones, in fp16. An fp16 accumulator cannot hold 2049 (its spacing at 2048
is 2), so every 1 is lost under sequential fp16 accumulation; an fp32 accumulator keeps them, and so does the
H100 tensor cores' multi-term adder (`tc-h100`, fitted bit for bit to an H100: fp32 accumulation, truncating
alignment). The ANE's tiles (`ane-tile4`) sum 4 products exactly and round each tile's sum to fp16 toward zero:
the first tile, 2048 + 3, becomes 2050, and one 1 is lost. On random data (second table) the accumulation's error
grows with K under fp16-seq, stays near fp32's under tc-h100, and is set by the fp16 tile roundings under
ane-tile4."""),
    ("code", """\
ACCS = ["fp16-seq", "fp32-seq", "tc-h100", "ane-tile4"]
print("accumulation presets:", ", ".join(roundoff.accumulations()))
rows = []
for n in (8, 64, 1024):
    x = np.array([2048.0] + [1.0] * n)
    rows.append({"terms": f"2048 + {n} ones", "exact": 2048.0 + n,
                 **{acc: roundoff.dot(x, inputs="fp16", accumulation=acc) for acc in ACCS}})
pd.DataFrame(rows)"""),
    ("code", """\
rng = np.random.default_rng(1)
rows = []
for k in (64, 512, 4096):
    A = roundoff.round(rng.standard_normal((32, k)), "fp16")
    B = roundoff.round(rng.uniform(0, 1, (k, 16)), "fp16")
    exact = A @ B                         # products of fp16 values are exact in float64; the sums nearly so
    row = {"K": k}
    for acc in ACCS:
        C = roundoff.gemm(A, B, inputs="fp16", accumulation=acc)
        row[acc] = float(np.linalg.norm(C - exact) / np.linalg.norm(exact))
    rows.append(row)
print("normwise relative error of C = A·B (A ~ N(0,1), B ~ U(0,1), both fp16)")
pd.DataFrame(rows).set_index("K")"""),
    ("code", """\
for acc in ("fp16-seq", "tc-h100", "ane-tile4", "fp16-splitk32-fp32" if "fp16-splitk32-fp32" in roundoff.accumulations() else "fp32-seq"):
    a = roundoff.Accumulation(acc)
    print(f"{acc:20s} {a.spec}")"""),
    ("md", """\
## Policies

A policy gives, for every (op, pass), the storage and compute formats, the rounding and the accumulation of every
reduction, plus the formats of weights, master weights, Adam moments and gradients (docs/policy.md)."""),
    ("code", """\
print("presets:", ", ".join(roundoff.policies()))
specs = {"fp32": "fp32", "ane-fp16": "ane-fp16",
         "tc-h100": "fp32,matmul=fp16/fp32/tc-h100,attn-scores=fp16/fp32/tc-h100,attn-values=fp16/fp32/tc-h100"}
rows = []
for label, spec in specs.items():
    p = roundoff.Policy(spec)
    for e in p.table():
        if e["op"] in ("matmul", "attn-scores", "softmax", "attn-values", "rmsnorm"):
            rows.append({"policy": label, "op": e["op"], "pass": e["pass"], "storage": e["storage"].name,
                         "compute": e["compute"].name, "rounding": e["rounding"], "accumulation": e["accumulation"].canonical})
t = pd.DataFrame(rows)
t[t["pass"] == "fwd"].pivot(index="op", columns="policy", values=["storage", "accumulation"])"""),
    ("code", """\
p = roundoff.Policy(specs["tc-h100"])
print("canonical:", p.canonical)
print("round trip:", roundoff.Policy(p.canonical) == p)
print("roles:", {k: getattr(v, "name", v) for k, v in p.roles().items()})"""),
    ("md", """\
## Ops on your arrays, shadowed by MPFR

A `Runner` runs the library's transformer ops under a policy; with `shadow=True` each sampled call also runs the
MPFR reference on the same rounded inputs and records the error (ulps of the storage format, normwise relative
error, range events)."""),
    ("code", """\
rng = np.random.default_rng(0)
B_, T, NH, hs = 1, 32, 4, 16
x = rng.standard_normal((B_ * T, 256))
w = rng.standard_normal((64, 256)) / 16
run = roundoff.Runner("ane-fp16", shadow=True)
y = run.matmul_forward(x, w)
q = run.matmul_forward(x, w).reshape(B_, T, NH * hs)
k = run.matmul_forward(x[::-1].copy(), w).reshape(B_, T, NH * hs)
pre = run.attn_scores_forward(q, k, heads=NH)
att = run.softmax_forward(pre)
out = run.attn_values_forward(att, q)
cols = ["op", "pass", "tensor", "count", "median_ulp", "p95_ulp", "max_ulp", "norm_rel", "underflow", "subnormal"]
pd.DataFrame(run.records())[cols]"""),
    ("md", "## The per-op error study\n\n`op_error` is one case of `roundoff op-error`: an op's forward and backward passes at AutoANE's shapes, against the MPFR shadow."),
    ("code", """\
rows = []
for label, spec in specs.items():
    for r in roundoff.op_error("matmul", spec, shape="in=256,out=64", rows=8):
        rows.append({"policy": label, **{k: r[k] for k in ("op", "pass", "tensor", "median_ulp", "max_ulp", "norm_rel")}})
pd.DataFrame(rows).pivot(index=["pass", "tensor"], columns="policy", values="norm_rel")"""),
]


# ------------------------------------------------------------------------------------------ autoane figures

AUTOANE = [
    ("md", """\
# AutoANE gap study: figures from the committed results

Regenerates two figures of the AutoANE-gap study (notebooks-data/autoane-gap/preregistration.md) from the
committed `runs.csv` tables and per-run `curves.csv` files: the A512 tier on Brown (the `autoane-gap-a512` grid,
paired by seed with the `autoane-gap-a512-pilot` runs, as the preregistered analysis does, amendment 5) and the
E11 tier. The statistics of record are `analysis/contrasts.csv`, written by studies/sweep/analyze_study.py; this
notebook recomputes the per-seed gaps and checks them against it. Figures are shown inline; nothing is written
outside a temporary directory."""),
    ("code", SETUP + '''
import tempfile
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
%matplotlib inline
DATA = ROOT / "notebooks-data"
TMP = Path(tempfile.mkdtemp(prefix="autoane-figures-"))'''),
    ("md", "## Load the runs"),
    ("code", """\
def load(*dirs):
    frames = []
    for d in dirs:
        r = pd.read_csv(DATA / d / "runs.csv")
        r["tier_dir"] = d
        frames.append(r)
    return pd.concat(frames, ignore_index=True)

tiers = {"A512 (Brown)": ("autoane-gap-a512", "autoane-gap-a512-pilot"),
         "E11 (Brown)": ("autoane-gap-e11",)}
runs = {t: load(*d) for t, d in tiers.items()}
for t, r in runs.items():
    print(t, len(r), "runs;", r.groupby("arm").seed.apply(lambda s: sorted(s.tolist())).to_dict())
cols = ["arm", "seed", "val_loss_fp32", "val_loss_own", "autoane_train_loss", "diverged", "steps_completed"]
runs["A512 (Brown)"][cols].sort_values(["arm", "seed"]).reset_index(drop=True)"""),
    ("md", """\
## Validation loss per arm, every seed

The primary endpoint: fp32 validation loss at equal steps (`val_loss_fp32`). One dot per seed, and the
mean over seeds (grey line). CPU is the fp32 reference arm; the arm names are the preregistration's."""),
    ("code", """\
def arm_order(r):
    means = r.groupby("arm").val_loss_fp32.mean()
    return ["CPU"] + [a for a in means.sort_values().index if a != "CPU"] if "CPU" in means else list(means.sort_values().index)

fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.2))
for ax, (t, r) in zip(np.atleast_1d(axes), runs.items()):
    order = arm_order(r)
    for i, arm in enumerate(order):
        v = r[r.arm == arm].sort_values("seed")
        ax.hlines(v.val_loss_fp32.mean(), i - 0.32, i + 0.32, color="0.3", lw=2)
        ax.scatter(np.full(len(v), i) + (v.seed.to_numpy() - 2) * 0.12, v.val_loss_fp32, s=22, zorder=3,
                   c=[f"C{s - 1}" for s in v.seed])
    lo, hi = r.val_loss_fp32.min(), r.val_loss_fp32.max()
    ax.set_ylim(lo - 0.1 * (hi - lo) - 0.01, hi + 0.1 * (hi - lo) + 0.01)
    ax.set_xticks(range(len(order)), order, rotation=30)
    ax.set_ylabel("validation loss (fp32 evaluation)")
    ax.set_title(t)
for s in (1, 2, 3):
    np.atleast_1d(axes)[0].scatter([], [], c=f"C{s - 1}", s=22, label=f"seed {s}")
np.atleast_1d(axes)[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig(TMP / "val_loss_per_arm.png", dpi=100)
plt.show()"""),
    ("md", """\
## The gap per arm

Per seed, D = L_arm − L_CPU (same seed), as a percentage of L_CPU; the mean over seeds with its 95 % t interval
(df n − 1). A gap whose interval contains 0 is not distinguishable from seed noise at this n."""),
    ("code", """\
from scipy import stats

def gaps(r, ref="CPU", metric="val_loss_fp32"):
    refv = r[r.arm == ref].set_index("seed")[metric]
    rows = []
    for arm in arm_order(r):
        if arm == ref:
            continue
        a = r[r.arm == arm].set_index("seed")[metric]
        common = sorted(set(a.index) & set(refv.index))
        rel = np.array([100 * (a[s] - refv[s]) / refv[s] for s in common])
        d = np.array([a[s] - refv[s] for s in common])
        n = len(common)
        half = stats.t.ppf(0.975, n - 1) * rel.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
        rows.append({"arm": arm, "n": n, "seeds": " ".join(map(str, common)), "mean_diff": d.mean(),
                     "rel_gap_pct": rel.mean(), "rel_ci_low": rel.mean() - half, "rel_ci_high": rel.mean() + half,
                     "per_seed_pct": rel})
    return pd.DataFrame(rows)

g = {t: gaps(r) for t, r in runs.items()}
g["A512 (Brown)"].drop(columns="per_seed_pct")"""),
    ("code", """\
# the same numbers as the committed analysis (studies/sweep/analyze_study.py)?
c = pd.read_csv(DATA / "autoane-gap-a512" / "analysis" / "contrasts.csv")
c = c[(c.metric == "val_loss_fp32") & (c.ref == "CPU")].set_index("arm")
mine = g["A512 (Brown)"].set_index("arm")
both = mine.join(c[["n", "mean_diff", "rel_gap_pct", "rel_ci_low", "rel_ci_high"]], rsuffix="_committed", how="inner")
print(both[["n", "n_committed", "rel_gap_pct", "rel_gap_pct_committed", "rel_ci_low", "rel_ci_low_committed"]])
ok = np.allclose(both.rel_gap_pct, both.rel_gap_pct_committed, rtol=1e-9, atol=1e-12) and \\
     np.allclose(both.mean_diff, both.mean_diff_committed, rtol=1e-9, atol=1e-12)
print("agrees with analysis/contrasts.csv:", ok)
assert ok"""),
    ("code", """\
fig, axes = plt.subplots(1, len(g), figsize=(6.5 * len(g), 4.2))
for ax, (t, d) in zip(np.atleast_1d(axes), g.items()):
    y = np.arange(len(d))
    ok = d.n > 1
    ax.errorbar(d.rel_gap_pct[ok], y[ok], xerr=[d.rel_gap_pct[ok] - d.rel_ci_low[ok], d.rel_ci_high[ok] - d.rel_gap_pct[ok]],
                fmt="o", color="k", capsize=3, label="mean, 95 % t CI")
    for yi, per in zip(y, d.per_seed_pct):
        ax.scatter(per, np.full(len(per), yi) + 0.18, s=12, color="C0", alpha=0.8)
    ax.scatter([], [], s=12, color="C0", label="single seeds")
    ax.axvline(0, color="0.5", lw=0.8)
    ax.set_yticks(y, d.arm)
    ax.invert_yaxis()
    ax.set_xlabel("gap to CPU, % of the CPU arm's validation loss")
    ax.set_title(t)
    ax.legend(fontsize=8, loc="best")
fig.tight_layout()
fig.savefig(TMP / "gap_per_arm.png", dpi=100)
plt.show()"""),
    ("md", "## Training-loss curves (A512), mean over seeds"),
    ("code", """\
def curves(tier_dirs, run_names):
    out = {}
    for d in tier_dirs:
        for p in (DATA / d / "runs").iterdir():
            if p.name in run_names and (p / "curves.csv").exists():
                c = pd.read_csv(p / "curves.csv")
                out[p.name] = c[c.metric == "train_loss"].set_index("step").value
    return out

r = runs["A512 (Brown)"]
cv = curves(tiers["A512 (Brown)"], set(r.run))
fig, ax = plt.subplots(figsize=(8, 4.2))
for i, arm in enumerate(arm_order(r)):
    names = r[r.arm == arm].run
    m = pd.concat([cv[n] for n in names if n in cv], axis=1).mean(axis=1)
    ax.plot(m.index, m.rolling(5, min_periods=1).mean(), label=arm, color=f"C{i}", lw=1.2)
ax.set_xlabel("update"); ax.set_ylabel("training loss (own precision; 5-update rolling mean)")
ax.set_title("A512 on Brown, mean over seeds 1-3"); ax.legend(ncol=2, fontsize=8)
fig.tight_layout(); fig.savefig(TMP / "train_curves.png", dpi=100); plt.show()
print("figures written only to", TMP)"""),
]


# --------------------------------------------------------------------------------------------- torch bridge

TORCH = [
    ("md", """\
# The PyTorch bridge: `roundoff.torch`

Emulated GEMMs as autograd functions (`quantize`, `matmul`), and `emulate(model, policy)`: every `nn.Linear` and
`nn.MultiheadAttention` of a model runs its GEMMs (forward and both backward passes) bit for bit under a roundoff
policy — `ane-fp16`, or H100 tensor cores (`tc-h100`) with fp16 storage, … Everything else stays PyTorch's."""),
    ("code", SETUP + '''
import torch
from torch import nn
import roundoff.torch as rt
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
%matplotlib inline
torch.set_num_threads(1)
print("torch", torch.__version__)'''),
    ("md", "## `quantize`: rounding tensors, with a straight-through or rounded gradient"),
    ("code", """\
x = torch.tensor([0.1, 1 / 3, 70000.0, 1e-8], requires_grad=True)
y = rt.quantize(x, "fp16")
print(y)
y.sum().backward()
print("straight-through gradient:", x.grad)
z = rt.quantize(torch.full((8,), 0.1), "bf16", "stochastic", seed=3)
print("stochastic, seed 3:", z.tolist())
print("again, same bits:   ", torch.equal(z, rt.quantize(torch.full((8,), 0.1), "bf16", "stochastic", seed=3)))"""),
    ("md", "## `matmul`: a GEMM under an accumulation (the swamping example on tensors)"),
    ("code", """\
a = torch.tensor([[2048.0] + [1.0] * 16], requires_grad=True)
b = torch.ones(17, 1)
for acc in ("fp16-seq", "fp32-seq", "tc-h100", "ane-tile4"):
    print(f"{acc:10s}", rt.matmul(a, b, inputs="fp16", accumulation=acc).item(), "(exact 2064)")
c = rt.matmul(a, b, inputs="fp16", accumulation="fp16-seq")
c.sum().backward()
print("gradient through the emulated GEMM:", a.grad[0, :4].tolist(), "...")"""),
    ("md", """\
## `emulate` on a tiny `nn.TransformerEncoder`

The same parameters, every GEMM emulated. The output differs from PyTorch's float32 by the policy's roundings."""),
    ("code", """\
POLICIES = {"ane-fp16": "ane-fp16",
            "tc-h100": "fp32,matmul=fp16/fp32/tc-h100,attn-scores=fp16/fp32/tc-h100,attn-values=fp16/fp32/tc-h100"}
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=True)
enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
T = 16
mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
x = torch.randn(2, T, 32)
ref = enc(x, mask=mask)
emus = {k: rt.emulate(enc, p) for k, p in POLICIES.items()}
print(emus["ane-fp16"])
for k, m in emus.items():
    y = m(x, mask=mask)
    print(f"{k:9s} max |emulated - native| = {(y - ref).abs().max().item():.3e}   relative "
          f"{((y - ref).norm() / ref.norm()).item():.2e}")"""),
    ("md", """\
## A few training steps, with telemetry

`telemetry` reports the range events of every emulated GEMM, per module and pass: overflow, underflow (an output
stored as 0 whose exact dot product is not), subnormal outputs, non-finite outputs. This loop does no loss
scaling, so the fp16 gradients of the backward passes (`bwd-data`, the `scores.`/`values.` backward products) are
tiny and many land in fp16's subnormal range; `python/examples/encoder_lm.py` scales the loss by the policy's
`loss-scale` (256 for ane-fp16), as a mixed-precision trainer must."""),
    ("code", """\
torch.manual_seed(1)
model = nn.Sequential(nn.Embedding(256, 32), nn.TransformerEncoder(
    nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True), 1,
    enable_nested_tensor=False), nn.LayerNorm(32), nn.Linear(32, 256))
text = np.frombuffer((ROOT / "studies/data/excerpt/train.txt").read_bytes()[:20000], dtype=np.uint8)
rng = np.random.default_rng(1)

def batch(n=4, t=T):
    s = rng.integers(0, text.size - t - 1, n)
    chunk = torch.from_numpy(text[s[:, None] + np.arange(t + 1)].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]

class Causal(nn.Module):
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, x):
        h = self.m[0](x)
        h = self.m[1](h, mask=mask)
        return self.m[3](self.m[2](h))

emu = Causal(rt.emulate(model, "ane-fp16"))
opt = torch.optim.AdamW(emu.parameters(), lr=3e-3)
for step in range(5):
    xb, yb = batch()
    loss = nn.functional.cross_entropy(emu(xb).reshape(-1, 256), yb.reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
tele = pd.DataFrame(rt.telemetry(emu))
tele[["module", "pass", "calls", "elements", "overflow", "underflow", "subnormal", "nonfinite", "max_abs"]]"""),
    ("code", """\
tele.groupby("pass")[["calls", "elements", "overflow", "underflow", "subnormal", "nonfinite"]].sum()"""),
    ("md", """\
## Loss curves of `python/examples/encoder_lm.py`

Three runs of the same small causal LM (same initial weights, same batches): plain PyTorch float32, `ane-fp16`
and fp16 storage with H100 tensor-core accumulation. The runs, their commands and what they show are in
notebooks-data/torch-bridge/README.md."""),
    ("code", """\
cv = pd.read_csv(ROOT / "notebooks-data/torch-bridge/curves.csv")
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
for i, (pol, c) in enumerate(cv.groupby("policy", sort=False)):
    axes[0].plot(c.step, c.train_loss.rolling(10, min_periods=1).mean(), label=pol, color=f"C{i}", lw=1.2)
    v = c.dropna(subset=["val_loss"])
    axes[1].plot(v.step, v.val_loss, "o-", label=pol, color=f"C{i}", ms=4)
axes[0].set_title("training loss (10-step rolling mean)"); axes[1].set_title("validation loss")
for ax in axes:
    ax.set_xlabel("step"); ax.legend(fontsize=8)
axes[0].set_ylabel("cross-entropy (nats/byte)")
fig.tight_layout(); plt.show()
cv.dropna(subset=["val_loss"]).groupby("policy", sort=False).tail(1)[["policy", "step", "train_loss", "val_loss", "seconds"]]"""),
]

NOTEBOOKS = {"tour.ipynb": TOUR, "autoane_figures.ipynb": AUTOANE, "torch_bridge.ipynb": TORCH}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    bad = 0
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(nb(cells), version=4) + "\n"
        nbformat.validate(nbformat.reads(text, as_version=4))
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"{name}: differs from make_notebooks.py", file=sys.stderr)
                bad = 1
            continue
        tmp = path.with_name("." + name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        print("wrote", path.relative_to(HERE.parent))
    return bad


if __name__ == "__main__":
    sys.exit(main())
