#!/usr/bin/python3
"""Figures and docs/studies/op-error.md from the per-op error study outputs.

Usage: /usr/bin/python3 studies/op_error/plot_op_error.py [DATA_DIR] [REPO_ROOT]
  DATA_DIR   output of `roundoff op-error --study` (default notebooks-data/op-error)
  REPO_ROOT  where docs/ lives (default: two levels above this script)
Every number in the generated document is read from DATA_DIR; nothing is typed in by hand.
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = sys.argv[1] if len(sys.argv) > 1 else "notebooks-data/op-error"
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(HERE))
FIG = os.path.join(ROOT, "docs", "figures")
DOC = os.path.join(ROOT, "docs", "studies", "op-error.md")
os.makedirs(FIG, exist_ok=True)
os.makedirs(os.path.dirname(DOC), exist_ok=True)

ops_df = pd.read_csv(os.path.join(DATA, "op_error.csv"))
ovf = pd.read_csv(os.path.join(DATA, "rmsnorm_overflow.csv"))
swamp = pd.read_csv(os.path.join(DATA, "residual_swamping.csv"))
smax = pd.read_csv(os.path.join(DATA, "softmax_bias.csv"))
rope = pd.read_csv(os.path.join(DATA, "rope_angles.csv"))
with open(os.path.join(DATA, "op_error.json")) as f:
    meta = json.load(f)


def g(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def save(fig, name):
    fig.tight_layout()
    fig.savefig(os.path.join(FIG, name), dpi=110)
    plt.close(fig)


# ---- ranked table (ane-fp16, unit scale) ------------------------------------------------------------------
ranked = pd.DataFrame(meta["ranked_ane_fp16"])
ranked["label"] = ranked["op"] + " " + ranked["pass"] + " (" + ranked["tensor"] + ")"
fig, ax = plt.subplots(figsize=(8, 0.28 * len(ranked) + 1))
vals = ranked["norm_rel"].fillna(0).clip(lower=1e-18)
ax.barh(range(len(ranked)), vals, color="tab:red")
ax.set_yticks(range(len(ranked)))
ax.set_yticklabels(ranked["label"], fontsize=7)
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel("normwise relative local error ‖y − y_ref‖₂ / ‖y_ref‖₂ (MPFR reference, same inputs)")
ax.set_title("ane-fp16: local error per op and pass (activation σ = 1, logit std = 1)")
save(fig, "op_error_ranked.png")

# ---- sweep figure: normwise error vs scale per preset for key forward ops ---------------------------------
key_ops = [("rmsnorm", "fwd", "rmsnorm.y"), ("matmul", "fwd", "q"), ("silu", "fwd", "silu"),
           ("residual-ffn", "fwd", "residual-ffn"), ("attn-scores", "fwd", "attn-scores"), ("softmax", "fwd", "softmax")]
fig, axes = plt.subplots(2, 3, figsize=(12, 7))
for ax, (op, ps, tensor) in zip(axes.flat, key_ops):
    d = ops_df[(ops_df.op == op) & (ops_df["pass"] == ps) & (ops_df.tensor == tensor)]
    for preset, dd in d.groupby("preset", sort=False):
        dd = dd.sort_values("scale")
        ax.plot(dd.scale, dd.norm_rel.clip(lower=1e-18), marker="o", label=preset)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"{op} {ps} ({tensor})", fontsize=9)
    ax.set_xlabel(d.scale_kind.iloc[0] if len(d) else "")
    ax.set_ylabel("normwise rel. error")
axes.flat[0].legend(fontsize=7)
save(fig, "op_error_sweep.png")

# ---- RMSNorm overflow ------------------------------------------------------------------------------------
fig, ax = plt.subplots(figsize=(6, 4))
for fmt, d in ovf.groupby("format"):
    ax.plot(d.mean_rms, d.overflow_fraction, marker=".", label=fmt)
pred = meta["rmsnorm_overflow"]["fp16"]["predicted_rms"]
ax.axvline(pred, color="k", ls="--", lw=0.8, label=f"√(65504/d) = {pred:.3f}")
ax.set_xlabel("row rms of x (d = 1024)")
ax.set_ylabel("fraction of rows with Σx² = inf")
ax.set_title("RMSNorm Σx² overflow (fp16 sequential accumulation)")
ax.legend()
save(fig, "op_error_rmsnorm_overflow.png")

# ---- residual swamping -------------------------------------------------------------------------------------
fig, ax = plt.subplots(figsize=(6, 4))
for fmt, d in swamp.groupby("format"):
    ax.plot(d.measured_ratio, d.rel_error, marker=".", label=f"{fmt}: ‖applied − u‖/‖u‖")
    ax.plot(d.measured_ratio, d.lost_fraction, ls="--", label=f"{fmt}: fraction of updates lost")
ax.set_xscale("log", base=2)
ax.set_xlabel("rms(x) / rms(α·F)")
ax.set_ylabel("relative error of the applied update / fraction lost")
ax.set_title("Residual add x + α·F: swamping of the branch update")
ax.legend(fontsize=7)
save(fig, "op_error_residual_swamping.png")

# ---- softmax denominator bias ------------------------------------------------------------------------------
fig, ax = plt.subplots(figsize=(6, 4))
for (arm, ls_), d in smax.groupby(["arm", "logit_std"], sort=False):
    ax.plot(d.S, d.mean_rel_bias.abs().clip(lower=1e-18), marker="o", ls="-" if ls_ == 1 else ":",
            label=f"{arm}, logit std {ls_:g}")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("sequence length S (terms in Z)")
ax.set_ylabel("|mean (Z − Z_exact)/Z_exact|")
ax.set_title("Softmax denominator bias vs sequence length")
ax.legend(fontsize=7)
save(fig, "op_error_softmax_bias.png")

# ---- RoPE ------------------------------------------------------------------------------------------------
fig, ax = plt.subplots(figsize=(6, 4))
for arm, d in rope.groupby("arm", sort=False):
    ax.plot(d.position.clip(lower=1), d.max_angle_error.clip(lower=1e-18), label=arm)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.axvline(256, color="k", ls=":", lw=0.8)
ax.set_xlabel("position p")
ax.set_ylabel("max over frequencies of |angle error| (rad)")
ax.set_title("RoPE table angle error vs position (hs = 64)")
ax.legend(fontsize=7)
save(fig, "op_error_rope_angles.png")

# ---- document ----------------------------------------------------------------------------------------------
L = []
w = L.append
w("# Per-op error at the published shapes (`roundoff op-error`)\n")
w("Generated by `studies/op_error/plot_op_error.py` from the outputs of one study run in "
  "`notebooks-data/op-error/`; every number below is read from those files.\n")
w(f"- command: `{meta['command']}`")
w(f"- git revision: `{meta['git_revision']}`; run at {meta['created_utc']}; "
  f"wall time {meta['elapsed_seconds']:.0f} s on one core")
w(f"- seed {meta['seed']}; activation σ sweep {meta['sigmas']}; attention logit-std sweep {meta['logit_stds']}; "
  f"{meta['rows']} rows per call; MPFR budget {meta['ref_budget']:.0e} multiply-adds per shadowed call\n")
w("## Method\n")
w("Each op runs forward and every backward pass it has through `ops::Runner` under the preset, with the MPFR "
  "shadow on: the *same* (already rounded) inputs go through the Reference backend (133-bit MPFR, same algorithm, "
  "no format roundings), so each number is the op's **local** error — what the op itself adds, not what it "
  "inherits. Shapes are AutoANE's (d = 1024, hidden 2816, 16 heads of 64, T = 256, vocabulary 16,893); every "
  "reduction keeps its published length, and only the number of independent outputs is subsampled "
  "(see `studies/op_error/op_case.hpp`: e.g. matmul forward computes 16 token rows × 256 output columns with "
  "the full K = 1024 or 2816; weight gradients reduce over all 256 tokens; attention computes one full "
  "256 × 256 causal head). Inputs are N(0, σ²) activations (attention: logits of standard deviation s), "
  "N(0, 1/in) weights and N(0, 1) upstream gradients, rounded to the storage format of the pass that reads them. "
  "Errors: ulp of the op's storage format at the reference value (median, p95, max), max relative, normwise "
  "relative ‖y − r‖₂/‖r‖₂, and for dot-product outputs the dot ratio |y − r| / (u_acc Σ|a||b|). Presets whose "
  "op precision is identical share one measurement.\n")

w("## Ranked: under `ane-fp16`, which ops introduce how much error?\n")
w("Activation σ = 1 (attention logit std 1), sorted by normwise relative error. `precision` is "
  "storage/compute/accumulation/rounding of that pass. ![ranked](../figures/op_error_ranked.png)\n")
w("| rank | op | pass | tensor | precision | median ulp | p95 ulp | max ulp | max rel | normwise rel | dot ratio | inf | nan | underflow |")
w("|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for i, r in enumerate(meta["ranked_ane_fp16"], 1):
    w(f"| {i} | {r['op']} | {r['pass']} | {r['tensor']} | {r['precision']} | {g(r['median_ulp'])} | {g(r['p95_ulp'])} | "
      f"{g(r['max_ulp'])} | {g(r['max_rel'])} | {g(r['norm_rel'])} | {g(r['dot_ratio'])} | {r['inf']} | {r['nan']} | "
      f"{r['underflow']} |")
w("")
w("Note: the forward cases of matmul `q` (1024 → 1024) and `w1` (1024 → 2816) compute the same 256 output columns "
  "with K = 1024 from the same seed, so their forward rows are one measurement listed twice. Weight gradients, "
  "the classifier, RMSNorm, cross-entropy and AdamW run in fp32 under this preset (the CPU side of AutoANE).\n")

# Preset comparison at unit scale: normwise relative error per (op, pass, tensor).
unit = ops_df[ops_df.scale == 1.0]
piv = unit.pivot_table(index=["op", "pass", "tensor"], columns="preset", values="norm_rel", aggfunc="max", sort=False)
presets = [p for p in meta["policies"].keys() if p in piv.columns]
w("## All presets at unit scale (normwise relative local error)\n")
w("| op | pass | tensor | " + " | ".join(presets) + " |")
w("|---|---|---|" + "---:|" * len(presets))
for (op, ps, t), row in piv.iterrows():
    w(f"| {op} | {ps} | {t} | " + " | ".join(g(row[p]) for p in presets) + " |")
w("")

w("## Scale sweeps and range events\n")
w("![sweep](../figures/op_error_sweep.png)\n")
ev = ops_df[(ops_df.inf > 0) | (ops_df.nan > 0)]
if len(ev):
    w("Calls with non-finite outputs (inf or NaN elements, out of `elements`), by preset and scale:\n")
    w("| preset | op | pass | tensor | scale | inf | nan | elements |")
    w("|---|---|---|---|---:|---:|---:|---:|")
    for _, r in ev.sort_values(["op", "pass", "preset", "scale"]).iterrows():
        w(f"| {r.preset} | {r.op} | {r['pass']} | {r.tensor} | {g(r.scale)} | {r.inf} | {r.nan} | {r.elements} |")
    w("")
else:
    w("No call produced inf or NaN outputs.\n")

o16 = meta["rmsnorm_overflow"]["fp16"]
w("## RMSNorm Σx² overflow threshold (fp16)\n")
w(f"Rows of d = 1024 values N(0, σ²) in fp16, Σx² by the op's reduction ({o16['precision']}), "
  f"{int(ovf.rows.iloc[0])} rows per σ, σ step {o16['sigma_step']} around the threshold. Predicted: rms ≈ √(65504/d) = "
  f"**{o16['predicted_rms']:.4f}**. Measured: half the rows overflow at row rms **{o16['threshold_rms']:.4f}**. "
  "An overflowing row gives Σx² = inf, rstd = 1/√inf = 0 and an all-zero normalised row (no NaN, so the "
  "failure is silent). bf16 (same exponent range as fp32) never overflows in the sweep.\n")
d16 = ovf[ovf.format == "fp16"]
w("| σ | mean row rms | fraction overflowing |")
w("|---:|---:|---:|")
for _, r in d16[(d16.overflow_fraction > 0) & (d16.overflow_fraction < 1) | (d16.sigma.isin([4.0, 12.0]))].iterrows():
    w(f"| {g(r.sigma, 4)} | {g(r.mean_rms, 4)} | {g(r.overflow_fraction)} |")
w("\n![overflow](../figures/op_error_rmsnorm_overflow.png)\n")

w("## Residual-add swamping\n")
w("out = x + u, x ~ N(0, 1), u = α·F ~ N(0, 1/ρ²), one rounding (ops::residual_forward, α = 1), d = 1024 × 16 rows; "
  "the applied update is out − x.\n")
w("| format | unit roundoff | ratio where ‖applied − u‖/‖u‖ ≥ 1/2 | ratio where half the updates are lost entirely |")
w("|---|---:|---:|---:|")
for fmt, r in meta["residual_swamping"].items():
    w(f"| {fmt} | {g(r['unit_roundoff'])} | {g(r['ratio_rel_error_half'])} | {g(r['ratio_lost_half'])} |")
w("\n![swamping](../figures/op_error_residual_swamping.png)\n")

w("## Softmax denominator bias vs sequence length\n")
w("Z = Σ exp(x_j − max x) over a row of S logits (std 1), exp and subtraction in the softmax's compute format, Z "
  "under its accumulation; bias = mean (Z − Z_exact)/Z_exact over rows (Z_exact: binary64 sum of the same rounded "
  "terms).\n")
arms = list(meta["softmax_bias"].keys())
Ss = sorted({int(s) for a in arms for s in meta["softmax_bias"][a].keys()})
w("| S | " + " | ".join(arms) + " |")
w("|---:|" + "---:|" * len(arms))
for S in Ss:
    w(f"| {S} | " + " | ".join(g(meta["softmax_bias"][a].get(str(S))) for a in arms) + " |")
w("\n![softmax](../figures/op_error_softmax_bias.png)\n")

w("## RoPE angle error vs position\n")
w("Table of cos/sin for hs = 64 (base 10000) against MPFR; angle error = |atan2(sin, cos) − θ|, max over the 32 "
  "frequencies; positions every 16 up to 4096.\n")
w("| table | max angle error, p < 256 (rad) | max angle error, p < 4096 (rad) |")
w("|---|---:|---:|")
for arm, r in meta["rope"].items():
    w(f"| {arm} | {g(r['max_angle_error_T256'])} | {g(r['max_angle_error_all'])} |")
w("\n![rope](../figures/op_error_rope_angles.png)\n")
w("## Reproduce\n")
w("```\n./build/studies/roundoff op-error --study --out notebooks-data/op-error\n"
  "/usr/bin/python3 studies/op_error/plot_op_error.py notebooks-data/op-error\n```\n")
w("One op alone: `roundoff op-error --op softmax --precision ane-fp16 --sigma 1,4,16 --out DIR` writes "
  "`DIR/softmax.csv` and `DIR/softmax.json`.\n")
with open(DOC, "w") as f:
    f.write("\n".join(L))
print("wrote", DOC)
