#!/usr/bin/python3
"""Figures and docs/studies/accumulation.md from the `roundoff accumulate` run.

Reads notebooks-data/accumulation/error_growth.{csv,json} and error_growth_fits.csv; writes
docs/figures/accumulation_*.png and docs/studies/accumulation.md. Every number in the page comes from those
files (nothing is typed in by hand). Run with the system python (matplotlib, pandas):

    /usr/bin/python3 studies/accumulation/plot_accumulation.py [--data DIR] [--root REPO]
"""
import argparse
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

ORDER = ["seq", "unfused-seq", "pairwise", "splitk16-fp32", "splitk32-fp32", "splitk64-fp32", "kahan", "fp32-seq",
         "sr", "fasi-v100"]
STYLE = {
    "seq": ("tab:red", "o", "-"), "unfused-seq": ("tab:orange", "s", "--"), "pairwise": ("tab:blue", "^", "-"),
    "splitk16-fp32": ("tab:cyan", "v", ":"), "splitk32-fp32": ("tab:green", "v", "-"),
    "splitk64-fp32": ("tab:olive", "v", "--"), "kahan": ("tab:purple", "D", "-"), "fp32-seq": ("black", "x", "-"),
    "sr": ("tab:pink", "*", "-"), "fasi-v100": ("tab:brown", "P", ":"),
}


def short(acc, inputs):
    """fp16-pairwise -> pairwise; fp32-seq and fasi-v100 stay. Results committed before the per-GPU tensor-core
    presets name Fasi et al.'s V100 model tc-v100 (the preset's old name); it is fasi-v100 now."""
    if acc == "tc-v100":
        return "fasi-v100"
    if acc.startswith(inputs + "-"):
        return acc[len(inputs) + 1:]
    return acc


def load(data_dir):
    rows = pd.read_csv(os.path.join(data_dir, "error_growth.csv"))
    fits = pd.read_csv(os.path.join(data_dir, "error_growth_fits.csv"))
    with open(os.path.join(data_dir, "error_growth.json")) as f:
        meta = json.load(f)
    rows["order"] = [short(a, i) for a, i in zip(rows.accumulation, rows.inputs)]
    fits["order"] = [short(a, i) for a, i in zip(fits.accumulation, fits.inputs)]
    return rows, fits, meta


def fig_ulps(rows, fits, path):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for ax, inputs in zip(axes, ["fp16", "bf16"]):
        sub = rows[(rows.inputs == inputs) & (rows.data == "zero-mean")]
        for order in ORDER:
            s = sub[sub.order == order].sort_values("n")
            if s.empty:
                continue
            c, m, ls = STYLE[order]
            ax.plot(s.n, s.median_ulps, color=c, marker=m, ls=ls, label=order, ms=4)
        s = sub[sub.order == "seq"].sort_values("n")
        ax.fill_between(s.n, s.median_ulps, s.p95_ulps, color="tab:red", alpha=0.12, label="seq median..p95")
        f = fits[(fits.inputs == inputs) & (fits.data == "zero-mean") & (fits.metric == "median_ulps") &
                 (fits.order == "seq")].iloc[0]
        ns = sorted(s.n)
        ax.plot(ns, [math.sqrt(n) for n in ns], color="gray", ls="-.", lw=1, label="√n ulps (the claim)")
        ax.plot(ns, [f.constant * n ** f.exponent for n in ns], color="tab:red", lw=0.8, ls=":",
                label=f"fit seq: {f.constant:.3g}·n^{f.exponent:.3f}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (dot product length)")
        ax.set_title(f"{inputs} inputs, zero-mean N(0,1) dot products")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median |error| in ulps of the input format\n(at the exact value)")
    for ax in axes:
        ax.legend(fontsize=7, ncol=3, loc="center", bbox_to_anchor=(0.5, 0.47), framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fig_bounds(rows, path):
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharex=True)
    for col, inputs in enumerate(["fp16", "bf16"]):
        for row, data in enumerate(["zero-mean", "sumsq"]):
            ax = axes[row][col]
            sub = rows[(rows.inputs == inputs) & (rows.data == data)]
            for order in ["seq", "pairwise", "splitk32-fp32", "sr"]:
                s = sub[sub.order == order].sort_values("n")
                c, m, ls = STYLE[order]
                ax.plot(s.n, s.median_norm, color=c, marker=m, ls="-", ms=4, label=f"{order} median")
                ax.plot(s.n, s.max_norm, color=c, marker=m, ls=":", ms=3, alpha=0.7, label=f"{order} max")
            s = sub[sub.order == "seq"].sort_values("n")
            ax.plot(s.n, s.gamma_norm, color="tab:red", lw=2, alpha=0.5, label="γ_n/u (seq, Higham)")
            ax.plot(s.n, s.prob_norm, color="tab:red", lw=2, alpha=0.5, ls="--", label="λ√n (seq, Higham–Mary, λ=6)")
            s = sub[sub.order == "pairwise"].sort_values("n")
            ax.plot(s.n, s.gamma_norm, color="tab:blue", lw=2, alpha=0.4, label="γ_(log2 n+1)/u (pairwise)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{inputs} inputs, {data}")
            if col == 0:
                ax.set_ylabel("|error| / (u·Σ|x_i y_i|)")
            if row == 1:
                ax.set_xlabel("n")
    axes[0][1].legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fig_bias(rows, path):
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharex=True)
    for col, inputs in enumerate(["fp16", "bf16"]):
        for row, data in enumerate(["sumsq", "softmax"]):
            ax = axes[row][col]
            sub = rows[(rows.inputs == inputs) & (rows.data == data)]
            for order in ORDER:
                s = sub[sub.order == order].sort_values("n")
                if s.empty:
                    continue
                c, m, ls = STYLE[order]
                ax.plot(s.n, 100 * s.mean_signed_rel, color=c, marker=m, ls=ls, ms=4, label=order)
            ax.axhline(0, color="gray", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{inputs} inputs, {data}: mean signed error (bias)")
            if col == 0:
                ax.set_ylabel("mean (result − exact)/exact, %")
            if row == 1:
                ax.set_xlabel("n")
    axes[0][1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000 or a < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def md_table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


def write_doc(rows, fits, meta, path):
    nmax = int(rows.n.max())
    trials = int(meta["trials"])

    def fit(inputs, order, data="zero-mean", metric="median_ulps"):
        return fits[(fits.inputs == inputs) & (fits.order == order) & (fits.data == data) &
                    (fits.metric == metric)].iloc[0]

    def cell(inputs, order, data, n):
        return rows[(rows.inputs == inputs) & (rows.order == order) & (rows.data == data) & (rows.n == n)].iloc[0]

    fit_lines = []
    for inputs in ["fp16", "bf16"]:
        for order in ORDER:
            sel = fits[(fits.inputs == inputs) & (fits.order == order) & (fits.data == "zero-mean")]
            if sel.empty:
                continue
            u = fit(inputs, order)
            v = fit(inputs, order, metric="median_norm")
            c = cell(inputs, order, "zero-mean", nmax)
            fit_lines.append([inputs, order, fmt(u.exponent), fmt(u.constant), fmt(u.r2), fmt(c.median_ulps),
                              fmt(c.p95_ulps), fmt(c.max_ulps), fmt(v.exponent), fmt(c.median_norm)])
    bias_lines = []
    for inputs in ["fp16", "bf16"]:
        for order in ORDER:
            sel = rows[(rows.inputs == inputs) & (rows.order == order) & (rows.data == "sumsq")]
            if sel.empty:
                continue
            a = cell(inputs, order, "sumsq", 1024)
            b = cell(inputs, order, "sumsq", nmax)
            c = cell(inputs, order, "softmax", 1024)
            d = cell(inputs, order, "softmax", nmax)
            g = fit(inputs, order, data="sumsq", metric="median_norm")
            bias_lines.append([inputs, order, fmt(100 * a.mean_signed_rel), fmt(100 * b.mean_signed_rel),
                               fmt(b.median_ulps), fmt(g.exponent), fmt(100 * c.mean_signed_rel),
                               fmt(100 * d.mean_signed_rel), fmt(d.median_ulps)])
    bound_lines = []
    for inputs in ["fp16", "bf16"]:
        for data in ["zero-mean", "sumsq"]:
            for order in ["seq", "pairwise", "splitk32-fp32", "sr"]:
                c = cell(inputs, order, data, 1024)
                bound_lines.append([inputs, data, order, fmt(c.median_norm), fmt(c.max_norm), fmt(c.gamma_norm),
                                    fmt(c.prob_norm), fmt(c.frac_over_prob)])

    s16 = fit("fp16", "seq")
    s16n = fit("fp16", "seq", metric="median_norm")
    u16 = fit("fp16", "unfused-seq")
    b16 = fit("bf16", "seq")
    c1024 = cell("fp16", "seq", "zero-mean", 1024)
    sq16 = cell("fp16", "seq", "sumsq", 1024)
    sq16max = cell("fp16", "seq", "sumsq", nmax)
    sm16 = cell("fp16", "seq", "softmax", nmax)
    sqb = cell("bf16", "seq", "sumsq", nmax)
    sr16 = cell("fp16", "sr", "sumsq", nmax)
    pw16 = cell("fp16", "pairwise", "sumsq", nmax)
    sk16 = cell("fp16", "splitk32-fp32", "sumsq", nmax)
    tc = cell("fp16", "fasi-v100", "sumsq", nmax)
    sub = dict(
        trials=trials, nmax=nmax, seed=meta["seed"], rev=meta.get("git_revision", "unknown"),
        command=meta.get("command", ""),
        a16=fmt(s16.exponent), c16=fmt(s16.constant), r16=fmt(s16.r2), a16n=fmt(s16n.exponent),
        a16ci=fmt(getattr(s16, "exponent_ci95", None)), a16se=fmt(getattr(s16, "exponent_se", None)),
        a16bci=fmt(getattr(b16, "exponent_ci95", None)),
        a16u=fmt(u16.exponent), c16u=fmt(u16.constant), a16b=fmt(b16.exponent), c16b=fmt(b16.constant),
        med1024=fmt(c1024.median_ulps), p951024=fmt(c1024.p95_ulps), sqrt1024=fmt(math.sqrt(1024)),
        ratio1024=fmt(c1024.median_ulps / math.sqrt(1024)),
        sq1024=fmt(100 * sq16.mean_signed_rel), sqnmax=fmt(100 * sq16max.mean_signed_rel),
        sqnmax_ulps=fmt(sq16max.median_ulps), smnmax=fmt(100 * sm16.mean_signed_rel),
        sqbnmax=fmt(100 * sqb.mean_signed_rel), srnmax=fmt(100 * sr16.mean_signed_rel),
        pwnmax=fmt(100 * pw16.mean_signed_rel), sknmax=fmt(100 * sk16.mean_signed_rel),
        tcnmax=fmt(100 * tc.mean_signed_rel),
        a16sq=fmt(fit("fp16", "seq", data="sumsq", metric="median_norm").exponent),
        a16srsq=fmt(fit("fp16", "sr", data="sumsq", metric="median_norm").exponent),
        p95a16=fmt(fit("fp16", "seq", metric="p95_ulps").exponent),
        p95c16=fmt(fit("fp16", "seq", metric="p95_ulps").constant),
        maxulps1024=fmt(c1024.max_ulps), maxnorm1024=fmt(c1024.max_norm),
        zmbias=fmt(c1024.mean_signed_norm), zmmed=fmt(c1024.median_norm),
        kahnmax=fmt(100 * cell("fp16", "kahan", "sumsq", nmax).mean_signed_rel),
        f32nmax=fmt(100 * cell("fp16", "fp32-seq", "sumsq", nmax).mean_signed_rel),
        bk16=fmt(100 * cell("bf16", "splitk16-fp32", "sumsq", nmax).mean_signed_rel),
        bk32=fmt(100 * cell("bf16", "splitk32-fp32", "sumsq", nmax).mean_signed_rel),
        bk64=fmt(100 * cell("bf16", "splitk64-fp32", "sumsq", nmax).mean_signed_rel),
        a16bsq=fmt(fit("bf16", "seq", data="sumsq", metric="median_norm").exponent),
    )
    with open(os.path.join(os.path.dirname(__file__), "accumulation_doc_template.md")) as f:
        text = f.read()
    text = text.format(**sub,
                       fit_table=md_table(["inputs", "accumulation", "α (ulps)", "C (ulps)", "R²",
                                           f"median ulps n={nmax}", f"p95 ulps n={nmax}", f"max ulps n={nmax}",
                                           "α (norm.)", f"median norm. n={nmax}"], fit_lines),
                       bias_table=md_table(["inputs", "accumulation", "Σx² bias n=1024 (%)", f"Σx² bias n={nmax} (%)",
                                            f"Σx² median ulps n={nmax}", "Σx² α (norm.)", "softmax bias n=1024 (%)",
                                            f"softmax bias n={nmax} (%)", f"softmax median ulps n={nmax}"],
                                           bias_lines),
                       bound_table=md_table(["inputs", "data", "accumulation", "median norm.", "max norm.",
                                             "γ bound", "λ√k bound", "fraction > λ√k"], bound_lines))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root_default = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default=root_default, help="repository root")
    p.add_argument("--data", default=None, help="data directory (default <root>/notebooks-data/accumulation)")
    args = p.parse_args()
    data = args.data or os.path.join(args.root, "notebooks-data", "accumulation")
    rows, fits, meta = load(data)
    figs = os.path.join(args.root, "docs", "figures")
    os.makedirs(figs, exist_ok=True)
    fig_ulps(rows, fits, os.path.join(figs, "accumulation_ulps.png"))
    fig_bounds(rows, os.path.join(figs, "accumulation_bounds.png"))
    fig_bias(rows, os.path.join(figs, "accumulation_bias.png"))
    write_doc(rows, fits, meta, os.path.join(args.root, "docs", "studies", "accumulation.md"))
    print("wrote docs/figures/accumulation_{ulps,bounds,bias}.png and docs/studies/accumulation.md")


if __name__ == "__main__":
    main()
