#!/usr/bin/python3
"""The longer pair of the AutoANE-gap study (L1; preregistration §3 and amendment 13): descriptive, one seed.

Reads the long pair's runs.csv (--long: an arm and a reference arm of one seed, trained for N updates) and the
runs of the same arms at the study's run length (--short: one or more runs.csv, e.g. the A512 pilot's; their
final metrics are all it reads), and the runs directories of the long pair's curves.csv (--long-dir). Writes into
--out:

  long_pair.csv     per metric (val_loss_fp32, autoane_train_loss, val_loss_own) and run length (the short
                    pair's updates, then the long pair's): L_ref, L_arm, diff = L_arm - L_ref (nats) and
                    rel_gap_pct = 100 diff / L_ref, for the given seed
  windows.csv       the long pair's own-precision training loss over the window of --window micro-steps ending
                    at each update of --at (AutoANE's metric at that point of training): L_ref, L_arm, diff,
                    rel_gap_pct
  growth.json       growth = diff(long) - diff(short) in AutoANE's metric (nats); ref_sd = the sample sd (n - 1)
                    of the reference arm's AutoANE metric over the short runs' seeds; grows = growth > ref_sd
                    (amendment 13's reading of "the gap grows with training"; reported, not tested); and the
                    provenance (inputs' sha256, git revision, command, time)
  long_pair.png     display only: left, each long run's own-precision training loss per update (thin) and its
                    mean over the window ending at each update (AutoANE's metric, were training to stop there);
                    right, the window gap 100 (L_arm - L_ref) / L_ref at every update with a whole window, the
                    --at points marked

Nothing here holds a result: every number comes from the inputs. Run with the system python:

    /usr/bin/python3 studies/sweep/long_pair.py \\
        --long notebooks-data/autoane-gap-a512-long/runs.csv --long-dir notebooks-data/autoane-gap-a512-long/runs \\
        --short notebooks-data/autoane-gap-a512-pilot/runs.csv \\
        --out notebooks-data/autoane-gap-a512-long/analysis
"""
import argparse
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze_study  # noqa: E402
from study_io import InputError, load_runs, read_csv, run_file, write_csv, write_provenance  # noqa: E402

METRICS = ["val_loss_fp32", "autoane_train_loss", "val_loss_own"]
AUTOANE = "autoane_train_loss"


def one_run(runs, arm, seed, what):
    rows = runs[(runs.arm == arm) & (runs.seed == seed)]
    if len(rows) != 1:
        raise InputError(f"{what}: {len(rows)} runs of arm '{arm}' seed {seed} (expected one; arms there: "
                         f"{', '.join(sorted(set(runs.arm)))})")
    return rows.iloc[0]


def pair_row(metric, updates, ref, arm):
    r, a = float(ref[metric]), float(arm[metric])
    return {"metric": metric, "updates": updates, "L_ref": r, "L_arm": a, "diff": a - r,
            "rel_gap_pct": 100 * (a - r) / r}


def window_mean(run, dirs, end_update, window_micro):
    """Mean train_loss over the window of window_micro / accum updates ending at end_update: analyze_study's
    window (the equal-wall-time metric's), refusing a window the run's curves do not hold."""
    p = run_file(run, dirs, "curves.csv")
    if p is None:
        raise InputError(f"no curves.csv for run {run['run']} under {', '.join(dirs)}")
    accum = int(run["recipe.accum"])
    if window_micro < accum or window_micro % accum:
        raise InputError(f"--window {window_micro} is not a positive multiple of the runs' accum {accum}")
    v = analyze_study.window_mean(read_csv(p), end_update * accum, window_micro, accum)
    if math.isnan(v):
        raise InputError(f"{p}: no train_loss for every update of the window ending at update {end_update}")
    return v


def window_series(curves, accum, window_micro, n_updates):
    """Update -> the window mean ending there (analyze_study.window_mean on one curves.csv frame, read once), for
    every update from the first whole window to n_updates."""
    first = max(1, window_micro // accum)
    return pd.Series({u: analyze_study.window_mean(curves, u * accum, window_micro, accum)
                      for u in range(first, n_updates + 1)})


def figure(args, lr, la, win, path):
    n = int(lr["steps"])
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = []
    for k, (name, run) in enumerate(((args.ref, lr), (args.arm, la))):
        c = read_csv(run_file(run, args.long_dir, "curves.csv"))
        series.append(window_series(c, int(run["recipe.accum"]), args.window, n))
        tl = c[c.metric == "train_loss"]
        a0.plot(tl.step + 1, tl.value, color=f"C{k}", lw=0.4, alpha=0.35)
        a0.plot(series[-1].index, series[-1].values, color=f"C{k}", lw=1.6, label=f"{name} (window mean)")
    a0.set_xlabel("update")
    a0.set_ylabel(f"own-precision training loss\n(thin: per update; thick: last {args.window} micro-steps)")
    a0.set_title(f"seed {args.seed}, {n} updates")
    a0.grid(alpha=0.3)
    a0.legend(fontsize=8)
    ref, arm = series
    gap = 100 * (arm - ref) / ref
    a1.plot(gap.index, gap.values, color="black", lw=1.2)
    a1.plot(win["update"], win["rel_gap_pct"], "o", color="C3", ms=5, label="windows.csv")
    a1.axhline(0, color="grey", lw=0.8)
    a1.set_xlabel("update (end of the window)")
    a1.set_ylabel(f"{args.arm} - {args.ref}, % of {args.ref}'s loss\n(AutoANE's metric at that point)")
    a1.set_title("gap in AutoANE's metric over training (n = 1, descriptive)")
    a1.grid(alpha=0.3)
    a1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def analyse(args):
    long_runs = load_runs(args.long, "arm", "seed")
    short_runs = load_runs(args.short, "arm", "seed")
    lr, la = (one_run(long_runs, x, args.seed, "--long") for x in (args.ref, args.arm))
    sr, sa = (one_run(short_runs, x, args.seed, "--short") for x in (args.ref, args.arm))
    for r in (lr, la, sr, sa):
        if str(r["complete"]).lower() != "true":
            raise InputError(f"run {r['run']} is not complete ({r['steps_completed']} of {r['steps']} updates)")
    n_long, n_short = int(lr["steps"]), int(sr["steps"])
    if int(la["steps"]) != n_long or int(sa["steps"]) != n_short or n_long <= n_short:
        raise InputError(f"the long pair must have one length longer than the short pair's "
                         f"(long {lr['steps']} and {la['steps']}, short {sr['steps']} and {sa['steps']} updates)")
    pairs = pd.DataFrame([pair_row(m, n, r, a) for n, r, a in ((n_short, sr, sa), (n_long, lr, la))
                          for m in METRICS])
    at = args.at or list(range(100, n_long + 1, 100))
    bad = [u for u in at if not 0 < u <= n_long]
    if bad:
        raise InputError(f"--at {bad[0]} is outside the long runs' 1..{n_long} updates")
    win = []
    for u in at:
        r, a = (window_mean(x, args.long_dir, u, args.window) for x in (lr, la))
        win.append({"update": u, "L_ref": r, "L_arm": a, "diff": a - r, "rel_gap_pct": 100 * (a - r) / r})
    ref_vals = [float(v) for v in short_runs[short_runs.arm == args.ref][AUTOANE]]
    if len(ref_vals) < 2:
        raise InputError(f"--short has {len(ref_vals)} run(s) of '{args.ref}': its seed-to-seed sd needs two or more")
    d = pairs.set_index(["metric", "updates"])["diff"]
    growth = float(d[(AUTOANE, n_long)] - d[(AUTOANE, n_short)])
    ref_sd = statistics.stdev(ref_vals)
    summary = {"arm": args.arm, "ref": args.ref, "seed": args.seed, "updates_short": n_short, "updates_long": n_long,
               "metric": AUTOANE, "diff_short": float(d[(AUTOANE, n_short)]), "diff_long": float(d[(AUTOANE, n_long)]),
               "growth": growth, "ref_sd": ref_sd, "ref_sd_seeds": len(ref_vals), "grows": growth > ref_sd}
    return pairs, pd.DataFrame(win), summary, (lr, la)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--long", nargs="+", required=True, help="runs.csv of the long pair")
    ap.add_argument("--long-dir", nargs="+", required=True, help="runs directories of the long pair")
    ap.add_argument("--short", nargs="+", required=True, help="runs.csv of the same arms at the study's length")
    ap.add_argument("--arm", default="GUIDE-D")
    ap.add_argument("--ref", default="CPU")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--window", type=int, default=200, help="window of AutoANE's metric, micro-steps")
    ap.add_argument("--at", type=int, nargs="*", help="updates at which windows end (default every 100th)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        pairs, win, summary, (lr, la) = analyse(args)
    except InputError as e:
        print(f"long_pair: {e}", file=sys.stderr)
        sys.exit(2)
    os.makedirs(args.out, exist_ok=True)
    write_csv(pairs, os.path.join(args.out, "long_pair.csv"))
    write_csv(win, os.path.join(args.out, "windows.csv"))
    figure(args, lr, la, win, os.path.join(args.out, "long_pair.png"))
    write_provenance(os.path.join(args.out, "growth.json"), "studies/sweep/long_pair.py", args.long + args.short,
                     **summary)
    print(f"long_pair: {args.arm} - {args.ref} seed {args.seed} in {AUTOANE}: {summary['diff_short']:+.5f} nats at "
          f"{summary['updates_short']} updates, {summary['diff_long']:+.5f} at {summary['updates_long']}; growth "
          f"{summary['growth']:+.5f} against the reference's seed sd {summary['ref_sd']:.5f} "
          f"(n {summary['ref_sd_seeds']}): {'grows' if summary['grows'] else 'does not grow'} -> {args.out}")


if __name__ == "__main__":
    main()
