#!/usr/bin/python3
"""Combines the runs of notebooks-data/torch-bridge/ (written by python/examples/encoder_lm.py, see run-all.sh):

  curves.csv   the seed-1 curves of native, ane-fp16, tc-h100 and the fp32-emulated control, concatenated
               (columns of encoder_lm.py's curves.csv: policy, step, train_loss, val_loss, seconds)
  finals.csv   one row per run (seed 1 and the seed-noise runs under seeds/): policy, seed, final train and
               validation loss, mean training loss over the last 50 steps, wall seconds, skipped steps,
               telemetry totals
and docs/figures/torch_bridge_loss_curves.png, torch_bridge_loss_diff.png. Files are written atomically.
"""
import csv
import io
import json
import os
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MAIN = ["native", "ane-fp16", "tc-h100", "fp32-emulated"]


def atomic(path: Path, data, binary=False):
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb" if binary else "w", newline=None if binary else "") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = None
    for name in MAIN:
        with open(HERE / name / "curves.csv", newline="") as f:
            rows = list(csv.reader(f))
        if header is None:
            header = rows[0]
            w.writerow(header)
        assert rows[0] == header
        w.writerows(rows[1:])
    atomic(HERE / "curves.csv", buf.getvalue())

    runs = [HERE / n for n in MAIN] + sorted((HERE / "seeds").glob("*"))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", "policy", "seed", "final_train_loss", "final_val_loss", "train_loss_last50", "wall_seconds",
                "skipped_steps", "overflow", "underflow", "subnormal", "nonfinite"])
    for r in runs:
        s = json.loads((r / "summary.json").read_text())
        with open(r / "curves.csv", newline="") as f:
            tl = [float(row["train_loss"]) for row in csv.DictReader(f)]
        t = (s.get("telemetry") or {}).get("total", {})
        w.writerow([r.relative_to(HERE).as_posix(), s["label"], s["seed"], s["final_train_loss"], s["final_val_loss"],
                    sum(tl[-50:]) / len(tl[-50:]), f"{s['wall_seconds']:.1f}", len(s.get("skipped_steps", [])),
                    t.get("overflow", ""), t.get("underflow", ""), t.get("subnormal", ""), t.get("nonfinite", "")])
    atomic(HERE / "finals.csv", buf.getvalue())

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    cv = pd.read_csv(HERE / "curves.csv")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    styles = {"native": ("k", "-"), "ane-fp16": ("C3", "-"), "tc-h100": ("C0", "-"), "fp32-emulated": ("0.6", ":")}
    for pol, c in cv.groupby("policy", sort=False):
        col, ls = styles.get(pol, (None, "-"))
        axes[0].plot(c.step, c.train_loss.rolling(10, min_periods=1).mean(), color=col, ls=ls, lw=1.2, label=pol)
        v = c.dropna(subset=["val_loss"])
        axes[1].plot(v.step, v.val_loss, marker="o", ms=3.5, color=col, ls=ls, lw=1.2, label=pol)
    fin = pd.read_csv(HERE / "finals.csv")
    nat = fin[fin.policy == "native"].final_val_loss
    if len(nat) > 1:
        axes[1].axhspan(nat.min(), nat.max(), color="0.85", zorder=0,
                        label=f"native, seeds {', '.join(map(str, sorted(fin[fin.policy == 'native'].seed)))}: range")
    axes[0].set_title("training loss (10-step rolling mean), seed 1")
    axes[1].set_title("validation loss, seed 1")
    axes[0].set_ylabel("cross-entropy (nats per byte)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    axes[0].set_ylim(2.3, 4.0)
    fig.suptitle("encoder_lm.py: nn.TransformerEncoder LM, native vs roundoff.torch.emulate (Brown excerpt, bytes)",
                 fontsize=10)
    fig.tight_layout()
    out = ROOT / "docs" / "figures" / "torch_bridge_loss_curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    b = io.BytesIO()
    fig.savefig(b, format="png", dpi=110)
    atomic(out, b.getvalue(), binary=True)

    # the differences to native at the same seed (same initial weights, same batches)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    nat_c = cv[cv.policy == "native"].set_index("step")
    for pol, c in cv.groupby("policy", sort=False):
        if pol == "native":
            continue
        col, ls = styles.get(pol, (None, "-"))
        c = c.set_index("step")
        axes[0].plot(c.index, c.train_loss - nat_c.train_loss, color=col, ls=ls, lw=1, label=pol)
        v = c.dropna(subset=["val_loss"])
        axes[1].plot(v.index, v.val_loss - nat_c.loc[v.index, "val_loss"], marker="o", ms=3.5, color=col, ls=ls,
                     label=pol)
    sd = fin[fin.policy == "native"].final_val_loss.std()
    if len(nat) > 1:
        axes[1].axhspan(-sd, sd, color="0.88", zorder=0, label=f"± sd of native's final val loss over seeds ({sd:.3f})")
    axes[0].set_title("training loss minus native's, per step (seed 1)")
    axes[1].set_title("validation loss minus native's (seed 1)")
    for ax in axes:
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    out2 = ROOT / "docs" / "figures" / "torch_bridge_loss_diff.png"
    b = io.BytesIO()
    fig.savefig(b, format="png", dpi=110)
    atomic(out2, b.getvalue(), binary=True)
    print("wrote", HERE / "curves.csv", HERE / "finals.csv", out, out2)


if __name__ == "__main__":
    main()
