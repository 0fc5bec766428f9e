"""What DeepSeek's promotion does inside a trained model's own GEMMs (issue 44 item 4; docs/studies/fp8-recipes.md,
"K of the model's GEMMs"): the validation loss of one checkpoint's master weights evaluated with its fp8 GEMMs

  promoted     deepseek-fp8                       (tc-h100-fp8, promote=128:fp32: the exact per-block model)
  unpromoted   deepseek-fp8-nopromote             (the whole K in the 14-bit accumulator, decoded operands)
  rescaled     deepseek-fp8-nopromote-rescaled    (the same with the decoded operands scaled by powers of two into
                                                   E4M3's range: no flush of small decoded values; amendment 2)
  exact        deepseek-fp8,matmul.acc=fp64-seq   (the same fp8 operands summed in binary64: quantization alone)
  bf16         h100-amp-bf16                      (no fp8)

via `roundoff train --eval-checkpoint` (the same weights, the same validation windows, only the GEMMs' accumulation
differs), and the differences unpromoted − promoted (what the promotion buys in loss at this model's K) and
promoted − exact (what accumulation error is left after it). The model's fp8 GEMMs have K <= 352 (T1) or <= 1408
(A512) in the forward pass, so this measures the promotion at those K, not at DeepSeek's 4096.

  /usr/bin/python3 studies/fp8/promotion_eval.py --bin BIN --checkpoint RUNS/fp8-recipes-a512/arm-DS_seed-1_*/checkpoint.bin \
      --config A512 --recipe autoane --seed 1 --out DIR [--eval-tokens N] [--threads N]

Writes DIR/promotion_eval.csv (policy, val_loss, val_tokens) and DIR/promotion_eval_diffs.csv; each evaluation's
eval.json under DIR/<name>/. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys

POLICIES = [("promoted", "deepseek-fp8"), ("unpromoted", "deepseek-fp8-nopromote"),
            ("rescaled", "deepseek-fp8-nopromote-rescaled"),
            ("exact", "deepseek-fp8,matmul.acc=fp64-seq"), ("bf16", "h100-amp-bf16")]
DIFFS = [("unpromoted", "promoted", "what the promotion buys at this model's K"),
         ("rescaled", "promoted", "the same without amendment 1's flush (the faithful unpromoted GEMM)"),
         ("unpromoted", "rescaled", "the flush of small decoded values alone"),
         ("promoted", "exact", "accumulation error left after promotion"),
         ("exact", "bf16", "the fp8 quantization of the forward GEMMs (no accumulation error)")]


def _write_csv(path: str, cols: list[str], rows: list[dict]) -> None:
    tmp = f"{path}.roundoff-tmp.{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([repr(r[c]) if isinstance(r[c], float) else r[c] for c in cols])
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the roundoff binary")
    ap.add_argument("--checkpoint", required=True, help="a deepseek-fp8 run's checkpoint.bin")
    ap.add_argument("--config", required=True)
    ap.add_argument("--recipe", default="default")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--eval-tokens", default=None, help="evaluate on the first N validation tokens (default: all)")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if not os.path.isfile(a.checkpoint):
        print(f"promotion_eval: --checkpoint {a.checkpoint}: no such file", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name, policy in POLICIES:
        d = os.path.join(a.out, name)
        cmd = [a.bin, "train", "--config", a.config, "--recipe", a.recipe, "--seed", a.seed, "--precision", policy,
               "--threads", a.threads, "--eval-checkpoint", a.checkpoint, "--out", d]
        if a.eval_tokens:
            cmd += ["--eval-tokens", a.eval_tokens]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "eval.json")) as f:
            j = json.load(f)
        rows.append({"name": name, "policy": policy, "val_loss": float(j["val_loss"]), "val_tokens": j["val_tokens"]})
        print(f"{name:10s} {policy:36s} val_loss {j['val_loss']:.9f}")
    _write_csv(os.path.join(a.out, "promotion_eval.csv"), ["name", "policy", "val_loss", "val_tokens"], rows)
    loss = {r["name"]: r["val_loss"] for r in rows}
    diffs = [{"arm": x, "ref": y, "what": what, "diff": loss[x] - loss[y]} for x, y, what in DIFFS]
    for d in diffs:
        print(f"{d['arm']} - {d['ref']}: {d['diff']:+.3e} ({d['what']})")
    _write_csv(os.path.join(a.out, "promotion_eval_diffs.csv"), ["arm", "ref", "what", "diff"], diffs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
