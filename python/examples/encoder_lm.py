#!/usr/bin/python3
"""A small byte-level causal language model built only from PyTorch's own modules, trained natively or with
every GEMM emulated bit for bit under a roundoff precision policy (``roundoff.torch.emulate``).

Model: nn.Embedding (256 bytes) + learned positional nn.Embedding -> nn.TransformerEncoder of
nn.TransformerEncoderLayer (batch_first, norm_first, GELU, no dropout) under a causal float mask
(torch.triu of -inf; torch 1.13 has no is_causal) -> nn.LayerNorm -> nn.Linear head. Data: the Brown corpus
split prepared by ./scripts/fetch-corpus (data/brown/{train,val}.txt, or $ROUNDOFF_DATA/brown) when present,
else the committed excerpt studies/data/excerpt/{train,val}.txt.

Every policy starts from the same initial parameters (torch.manual_seed(seed) before the model is built) and
sees the same batches (numpy Generator seeded by seed; a fixed validation set from an independent stream of
the same seed). Under a policy, what is emulated is what roundoff.torch.emulate emulates: the GEMMs of every
nn.Linear (FFN, head) and of nn.MultiheadAttention (projections, q·kᵀ, weights·v) forward and backward, and
the attention weights' storage rounding; embeddings, LayerNorm, GELU, softmax, the loss and AdamW stay
PyTorch's float32.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/encoder_lm.py --policy ane-fp16 --steps 300 \
        --threads 1 --out OUTDIR
    ... --policy native ...   (plain PyTorch float32)
    ... --policy "fp32,matmul=fp16/fp32/tc-h100,attn-scores=fp16/fp32/tc-h100,attn-values=fp16/fp32/tc-h100"
    ... --check               (3 steps: a smoke test)

Writes (with --out DIR; atomically, and never over files of another configuration):
  DIR/curves.csv     policy (the --label, default the policy text), step, train_loss, val_loss (at every
                     --eval-every steps and at the end, else empty), seconds (wall time since training began,
                     evaluations included)
  DIR/summary.json   provenance: policy text and canonical form, seed, hyperparameters, corpus and its sha256,
                     git revision, torch/numpy versions, CPU model, wall time, final losses, telemetry
"""
from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

GENERATOR = "python/examples/encoder_lm.py"
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------------- data

def find_corpus():
    """(kind, train path, val path): the prepared Brown split if present, else the committed excerpt."""
    roots = []
    if os.environ.get("ROUNDOFF_DATA"):
        roots.append(Path(os.environ["ROUNDOFF_DATA"]) / "brown")
    roots.append(REPO / "data" / "brown")
    for r in roots:
        if (r / "train.txt").is_file() and (r / "val.txt").is_file():
            return "brown (prepared by scripts/fetch-corpus)", r / "train.txt", r / "val.txt"
    ex = REPO / "studies" / "data" / "excerpt"
    return "brown excerpt (committed, studies/data/excerpt)", ex / "train.txt", ex / "val.txt"


def sha256_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def batch_at(data: np.ndarray, starts: np.ndarray, seq: int):
    idx = starts[:, None] + np.arange(seq + 1)[None, :]
    chunk = torch.from_numpy(data[idx].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


# -------------------------------------------------------------------------------------------------- model

class EncoderLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int, ff: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1),
                             persistent=False)

    def forward(self, x):
        T = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(T, device=x.device))[None]
        h = self.encoder(h, mask=self.mask[:T, :T])
        return self.head(self.norm(h))


def state_sha256(model: nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------- provenance

def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        st = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True,
                            check=True).stdout.strip()
        return rev + ("-dirty" if st else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_out_dir(out: Path, config: dict) -> None:
    """Refuse to write into a directory holding results this configuration did not produce."""
    summ = out / "summary.json"
    if summ.exists():
        try:
            old = json.loads(summ.read_text())
        except (OSError, ValueError) as e:
            sys.exit(f"encoder_lm: {summ} exists and is not readable JSON ({e}); refusing to overwrite it")
        if old.get("generator") != GENERATOR or old.get("config") != config:
            diff = sorted(k for k in set(config) | set(old.get("config", {}))
                          if config.get(k) != old.get("config", {}).get(k))
            sys.exit(f"encoder_lm: {summ} holds another configuration (differs in: {', '.join(diff) or 'generator'});"
                     " refusing to overwrite it: choose another --out")
    elif (out / "curves.csv").exists():
        sys.exit(f"encoder_lm: {out / 'curves.csv'} exists without a summary.json of this script; refusing to "
                 "overwrite it: choose another --out")


# ------------------------------------------------------------------------------------------------ training

def evaluate(model, val_data, val_starts, seq, batch):
    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(val_starts), batch):
            x, y = batch_at(val_data, val_starts[i:i + batch], seq)
            logits = model(x)
            tot += nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                                               reduction="sum").item()
            n += y.numel()
    model.train()
    return tot / n


def telemetry_summary(rows):
    """Totals per pass over all emulated modules, and the per-(module, pass) rows."""
    per_pass = {}
    counts = [k for k in (rows[0] if rows else {}) if k not in ("module", "pass", "max_abs")]
    for r in rows:
        t = per_pass.setdefault(r["pass"], {**{k: 0 for k in counts}, "max_abs": 0.0})
        for k in counts:
            t[k] += int(r[k])
        t["max_abs"] = max(t["max_abs"], float(r["max_abs"]))
    total = {k: sum(t[k] for t in per_pass.values()) for k in counts}
    return {"total": total, "per_pass": per_pass,
            "per_module_pass": [{k: (float(v) if k == "max_abs" else v) for k, v in r.items()} for r in rows]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="native",
                    help="'native' (plain PyTorch fp32) or a roundoff policy spec (roundoff.policies() presets, "
                         "e.g. ane-fp16, or 'fp32,matmul=fp16/fp32/tc-h100,...'; accumulation presets: "
                         "roundoff.accumulations())")
    ap.add_argument("--label", default=None, help="name in curves.csv's policy column (default: the policy text)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--d", type=int, default=32, help="model width")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=None, help="feed-forward width (default 4*d)")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20, help="linear warm-up steps, then constant lr")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: none)")
    ap.add_argument("--loss-scale", type=float, default=None,
                    help="initial loss scale (default: the policy's loss-scale, 1 for native); halved, and the "
                         "step skipped, when a gradient is not finite")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--val-seqs", type=int, default=32, help="validation sequences (fixed for every policy)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (and the emulated GEMMs)")
    ap.add_argument("--out", type=Path, default=None, help="output directory (nothing is written without it)")
    ap.add_argument("--check", action="store_true", help="smoke test: 3 steps, evaluation at the end")
    args = ap.parse_args(argv)

    try:
        import roundoff
    except ImportError:  # not on PYTHONPATH: the build tree's package
        sys.path.insert(0, str(REPO / "build" / "python"))
        import roundoff
    import roundoff.torch as rt

    if args.check:
        args.steps = 3
    for name in ("steps", "d", "layers", "heads", "seq", "batch", "eval_every", "threads", "val_seqs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.d % args.heads:
        ap.error("--d must be a multiple of --heads")
    ff = args.ff or 4 * args.d
    native = args.policy == "native"
    if native:
        canonical = "native"
    else:
        try:
            canonical = roundoff.Policy(args.policy).canonical
        except Exception as e:  # noqa: BLE001 (the binding's message names what is valid)
            ap.error(f"--policy {args.policy!r}: {e}")
    label = args.label or args.policy
    loss_scale = args.loss_scale if args.loss_scale is not None else (
        1.0 if native else float(roundoff.Policy(args.policy).loss_scale))
    if not (loss_scale > 0 and math.isfinite(loss_scale)):
        ap.error("--loss-scale must be a positive number")

    kind, train_path, val_path = find_corpus()
    train_data = np.frombuffer(train_path.read_bytes(), dtype=np.uint8)
    val_data = np.frombuffer(val_path.read_bytes(), dtype=np.uint8)
    corpus = {"kind": kind, "train": os.path.relpath(train_path, REPO), "val": os.path.relpath(val_path, REPO),
              "train_sha256": sha256_file(train_path), "val_sha256": sha256_file(val_path),
              "train_bytes": int(train_data.size), "val_bytes": int(val_data.size)}
    print(f"corpus: {kind}: {corpus['train']} ({train_data.size} bytes), {corpus['val']} ({val_data.size} bytes)",
          flush=True)

    hyper = {"d": args.d, "layers": args.layers, "heads": args.heads, "ff": ff, "seq": args.seq,
             "batch": args.batch, "lr": args.lr, "warmup": args.warmup, "weight_decay": args.weight_decay,
             "clip": args.clip, "loss_scale": loss_scale, "steps": args.steps, "eval_every": args.eval_every, "val_seqs": args.val_seqs,
             "vocab": 256, "dropout": 0.0, "activation": "gelu", "optimizer": "AdamW(betas=(0.9, 0.999))"}
    config = {"policy": args.policy, "policy_canonical": canonical, "label": label, "seed": args.seed,
              "hyperparameters": hyper, "corpus_sha256": [corpus["train_sha256"], corpus["val_sha256"]],
              "check": bool(args.check)}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        check_out_dir(args.out, config)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    base = EncoderLM(256, args.d, args.layers, args.heads, args.seq, ff)
    init_sha = state_sha256(base)
    model = copy.deepcopy(base) if native else rt.emulate(base, roundoff.Policy(args.policy), seed=args.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, args.warmup)))

    rng = np.random.default_rng(args.seed)
    val_rng = np.random.default_rng([args.seed, 1])
    val_starts = val_rng.integers(0, val_data.size - args.seq - 1, size=args.val_seqs)

    print(f"policy {label}: {canonical}; {sum(p.numel() for p in model.parameters())} parameters; "
          f"init sha256 {init_sha[:16]}; threads {args.threads}", flush=True)
    rows = []
    t0 = time.perf_counter()
    eval_seconds = 0.0
    train_loss = val_loss = float("nan")
    scale, skipped = loss_scale, []
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, train_data.size - args.seq - 1, size=args.batch)
        x, y = batch_at(train_data, starts, args.seq)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if scale != 1.0:
            for g in grads:
                g.div_(scale)  # a power of two: exact unless it underflows
        if all(bool(torch.isfinite(g).all()) for g in grads):
            if args.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
        else:  # the dynamic part of loss scaling: skip the update, halve the scale
            skipped.append(step)
            scale /= 2
            print(f"step {step}: non-finite gradient, update skipped, loss scale -> {scale:g}", flush=True)
        sched.step()
        train_loss = loss.item()
        if not math.isfinite(train_loss):
            print(f"step {step}: non-finite training loss {train_loss}", flush=True)
        vl = None
        if step % args.eval_every == 0 or step == args.steps:
            te = time.perf_counter()
            vl = val_loss = evaluate(model, val_data, val_starts, args.seq, args.batch)
            eval_seconds += time.perf_counter() - te
        secs = time.perf_counter() - t0
        rows.append((label, step, train_loss, vl, secs))
        if vl is not None or step <= 3 or step % 25 == 0:
            print(f"step {step:4d}  train {train_loss:.4f}" + (f"  val {vl:.4f}" if vl is not None else "")
                  + f"  {secs:7.1f} s", flush=True)
    wall = time.perf_counter() - t0

    tele = telemetry_summary(rt.telemetry(model)) if not native else None
    if tele is not None:
        print("telemetry totals per pass: " + "; ".join(
            f"{p}: " + ", ".join(f"{k} {v}" for k, v in t.items() if k not in ("calls", "elements", "max_abs"))
            for p, t in tele["per_pass"].items()), flush=True)
    print(f"done: {args.steps} steps in {wall:.1f} s ({wall / args.steps:.2f} s/step, evaluation {eval_seconds:.1f} s);"
          f" final train {train_loss:.4f}, val {val_loss:.4f}", flush=True)

    if args.out is None:
        return 0
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["policy", "step", "train_loss", "val_loss", "seconds"])
    for lab, s, tl, v, sec in rows:
        w.writerow([lab, s, repr(tl), "" if v is None else repr(v), f"{sec:.3f}"])
    summary = {
        "generator": GENERATOR, "config": config,
        "policy": args.policy, "policy_canonical": canonical, "label": label, "seed": args.seed,
        "hyperparameters": hyper, "corpus": corpus, "init_state_sha256": init_sha,
        "command": [Path(sys.executable).name, os.path.relpath(Path(__file__).resolve(), REPO)]
        + (sys.argv[1:] if argv is None else list(argv)),
        "git_revision": git_revision(), "roundoff_version": roundoff.__version__,
        "torch_version": torch.__version__, "numpy_version": np.__version__, "python_version": platform.python_version(),
        "cpu_model": cpu_model(), "threads": args.threads,
        "wall_seconds": wall, "eval_seconds": eval_seconds, "seconds_per_step": wall / args.steps,
        "loss_scale_initial": loss_scale, "loss_scale_final": scale, "skipped_steps": skipped,
        "final_train_loss": train_loss, "final_val_loss": val_loss,
        "emulated": ("nothing (plain PyTorch float32)" if native else
                     "GEMMs of every nn.Linear and nn.MultiheadAttention (fwd, bwd-data, bwd-weight; q·kᵀ and "
                     "weights·v) and the attention weights' storage; the rest is PyTorch float32"),
        "telemetry": tele,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write(args.out / "curves.csv", buf.getvalue())
    atomic_write(args.out / "summary.json", json.dumps(summary, indent=1) + "\n")
    print(f"wrote {args.out / 'curves.csv'} and {args.out / 'summary.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
