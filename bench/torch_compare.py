#!/usr/bin/python3
"""Training-step time of roundoff against native PyTorch fp32 on the same model, shapes and thread count,
measured in one run (issue 9, "Speed"; results in docs/performance.md).

roundoff: `roundoff train --profile` for --steps steps (the first is dropped as warm-up by the median);
the model's shapes are read back from its summary.json. PyTorch: the same Llama-family decoder (RMSNorm
pre-norm, RoPE, causal softmax attention, SwiGLU, untied classifier, mean cross-entropy, AdamW) in fp32 on
random tokens of the same vocabulary (speed does not depend on the data), timed step by step after two
warm-up steps. Prints one line per policy with both medians and the ratio roundoff / PyTorch fp32, for wall time
and for process CPU time (user + system, all threads; roundoff: its profile's step-cpu-median row, PyTorch:
time.process_time() around each step in this process). On a shared machine whose other processes hold the cores,
wall time measures the load, not the code; CPU time does not count the waiting, but both sides still share the
caches with the other processes, which inflates both. With --threads 1 the two CPU times compare like for like;
with more threads CPU time is the sum over threads (work, not latency).

  /usr/bin/python3 bench/torch_compare.py --config T1 --threads 1
  /usr/bin/python3 bench/torch_compare.py --config W512 --threads 1 --steps 3   # d 512, 4 layers, 8 heads, seq 128, batch 4, BPE-1024

Debian's torch uses the reference BLAS unless libopenblas0-pthread is installed (3-8x slower): the script
prints torch's BLAS so the figure says which it measured.

PyTorch's allocator: under glibc's default malloc every step returns its large activation buffers to the kernel
and faults them in again (thousands of minor page faults per step; on a VM each is slow, and the step then varies
by up to 2x between minutes: 493-1009 ms on one host). By default the script first sets glibc's mmap and trim
thresholds with mallopt so that the heap keeps its pages (no faults per step after warm-up; 470-478 ms there), the
baseline at its best; --torch-malloc default measures the untuned allocator. PyTorch's minor faults per timed step
are printed; roundoff allocates once per shape (130,411 and 130,417 faults in all for 3 and 8 W512 steps).

Noisy hosts (the lent VMs drift by +-25 % within minutes): --rounds N repeats the whole comparison N times, each
round timing roundoff and then PyTorch, so every ratio comes from one round's neighbouring minutes, and ends with
the minimum, median and maximum of the per-round ratios; --compare BIN times a second roundoff binary in every
round right after the first (before/after pairs against the same PyTorch step).

  /usr/bin/python3 bench/torch_compare.py --config W512 --threads 1 --steps 6 --rounds 4 --compare OLD_BINARY
"""
import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    "T0": ["--config", "T0"],
    "T1": ["--config", "T1"],
    "W512": ["--config", "custom", "--d", "512", "--layers", "4", "--heads", "8", "--seq", "128", "--batch", "4",
             "--tokenizer", "bpe", "--vocab", "1024"],
}


def roundoff_step_ms(binary, config, policy, steps, threads, keep):
    with tempfile.TemporaryDirectory(prefix="roundoff_torch_compare_") as out:
        cmd = [binary, "train", *CONFIGS[config], "--precision", policy, "--steps", str(steps), "--threads",
               str(threads), "--telemetry-every", "0", "--progress-every", "0", "--eval-tokens", "256", "--profile",
               "--out", os.path.join(out, "run")]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "run", "profile.csv")) as f:
            rows = {r["op"]: r for r in csv.DictReader(f) if r["pass"] == ""}
        with open(os.path.join(out, "run", "summary.json")) as f:
            shape = json.load(f)["config"]
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copyfile(os.path.join(out, "run", "profile.csv"), os.path.join(keep, f"{config}-{policy}.csv"))
        wall = float(rows.get("step-median", rows["step"])["ms_per_step"])
        cpu = float(rows["step-cpu-median"]["ms_per_step"]) if "step-cpu-median" in rows else float("nan")
        return (wall, cpu), shape


def keep_heap_pages():
    """glibc mallopt: large blocks from the heap (mmap threshold at its 32 MiB maximum), never trimmed; the
    settings apply to later allocations, so call before torch allocates. Raises when glibc refuses one."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    for param, value in ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20)):
        if libc.mallopt(param, value) != 1:
            raise RuntimeError(f"mallopt({param}, {value}) refused")


def minor_faults():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def torch_step_ms(shape, steps, threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(1)
    d, L, H, hid, T, B, V = (shape[k] for k in ("d", "layers", "heads", "hidden", "seq", "batch", "vocab"))
    hs = d // H
    eps = shape.get("norm_eps", 1e-5)

    def p(*s, std=0.02):
        return torch.nn.Parameter(torch.randn(*s) * std)

    params = {"wte": p(V, d), "lnf": torch.nn.Parameter(torch.ones(d)), "wcls": p(V, d)}
    for l in range(L):
        for n, s in (("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)), ("w1", (hid, d)),
                     ("w3", (hid, d)), ("w2", (d, hid))):
            params[f"{n}{l}"] = p(*s)
        params[f"ln1{l}"] = torch.nn.Parameter(torch.ones(d))
        params[f"ln2{l}"] = torch.nn.Parameter(torch.ones(d))
    inv = 1.0 / (shape.get("rope_base", 10000.0) ** (torch.arange(0, hs, 2).float() / hs))
    ang = torch.outer(torch.arange(T).float(), inv)
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(x):  # (B, H, T, hs), pairs (2i, 2i+1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def loss_fn(tok, tgt):
        x = params["wte"][tok]
        for l in range(L):
            h = rms(x, params[f"ln1{l}"])
            q, k, v = (F.linear(h, params[f"{n}{l}"]).view(B, T, H, hs).transpose(1, 2) for n in ("wq", "wk", "wv"))
            q, k = rope(q), rope(k)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hs) + mask, -1)
            y = (att @ v).transpose(1, 2).reshape(B, T, d)
            x = x + F.linear(y, params[f"wo{l}"])
            h2 = rms(x, params[f"ln2{l}"])
            x = x + F.linear(F.silu(F.linear(h2, params[f"w1{l}"])) * F.linear(h2, params[f"w3{l}"]), params[f"w2{l}"])
        logits = F.linear(rms(x, params["lnf"]), params["wcls"])
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

    opt = torch.optim.AdamW(params.values(), lr=1e-3, weight_decay=0.1)
    times, cpu_times = [], []
    faults = 0
    for s in range(steps + 2):
        tok = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        f0, t0, c0 = minor_faults(), time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(tok, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        if s >= 2:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            faults += minor_faults() - f0
    # Debian's torch calls the libblas.so.3 alternative: name the library actually mapped into this process.
    with open("/proc/self/maps") as f:
        libs = {os.path.basename(line.split()[-1]) for line in f if "blas" in line.lower()}
    blas = ", ".join(sorted(libs)) or "no BLAS library mapped"
    return ((1e3 * statistics.median(times), 1e3 * statistics.median(cpu_times)), torch.__version__, blas,
            faults / steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="T1")
    ap.add_argument("--policies", default="fp32,ane-fp16")
    ap.add_argument("--steps", type=int, default=5, help="roundoff steps per policy (median); torch runs 3x as many")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep", help="directory for each roundoff run's per-(op, pass) profile.csv")
    ap.add_argument("--torch-malloc", choices=("keep", "default"), default="keep",
                    help="keep: glibc keeps PyTorch's heap pages between steps (mallopt); default: glibc's defaults")
    ap.add_argument("--roundoff", default=os.path.join(os.path.dirname(__file__), "..", "build", "studies", "roundoff"))
    ap.add_argument("--compare", help="a second roundoff binary, timed beside --roundoff in every round (first in "
                    "the even rounds: a drift of the host over minutes then favours neither)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the comparison; summary of the per-round ratios")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: must be at least 1")
    binaries = [a.roundoff] + ([a.compare] if a.compare else [])
    for b in binaries:
        if not os.access(b, os.X_OK):
            ap.error(f"roundoff binary '{b}' is not an executable file (valid: a built build/studies/roundoff)")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    ratios = {}  # (binary, policy) -> [(wall ratio, cpu ratio) per round]
    for rnd in range(a.rounds):
        results = {}
        shape = None
        for b in (binaries if rnd % 2 == 0 else binaries[::-1]):  # the order alternates between rounds
            for pol in a.policies.split(","):
                results[(b, pol)], shape = roundoff_step_ms(b, a.config, pol, a.steps, a.threads, a.keep)
        results = {(b, pol): results[(b, pol)] for b in binaries for pol in a.policies.split(",")}
        load_before = os.getloadavg()[0]
        if a.torch_malloc == "keep" and rnd == 0:
            keep_heap_pages()
        (torch_ms, torch_cpu), version, blas, torch_faults = torch_step_ms(shape, 3 * a.steps, a.threads)
        if rnd == 0:
            print(f"config {a.config} {json.dumps(shape, sort_keys=True)}, threads {a.threads}, torch {version} "
                  f"({blas}), torch malloc {a.torch_malloc} ({torch_faults:.0f} minor faults per step), "
                  f"roundoff {', '.join(os.path.realpath(b) for b in binaries)}")
        print(f"{'round ' + str(rnd + 1) + ', ' if a.rounds > 1 else ''}load average {load_before:.1f} (before torch) "
              f"{os.getloadavg()[0]:.1f} (after), torch {torch_faults:.0f} minor faults per step")
        print(f"{'policy':<16}{'roundoff wall ms':>18}{'torch fp32 wall ms':>20}{'ratio':>8}"
              f"{'roundoff CPU ms':>17}{'torch fp32 CPU ms':>19}{'ratio':>8}" + ("  binary" if a.compare else ""))
        for (b, pol), (ms, cpu) in results.items():
            ratios.setdefault((b, pol), []).append((ms / torch_ms, cpu / torch_cpu))
            print(f"{pol:<16}{ms:>18.1f}{torch_ms:>20.1f}{ms / torch_ms:>8.2f}"
                  f"{cpu:>17.1f}{torch_cpu:>19.1f}{cpu / torch_cpu:>8.2f}" + (f"  {b}" if a.compare else ""))
        sys.stdout.flush()
    if a.rounds > 1:
        print(f"ratios over {a.rounds} rounds (min / median / max)")
        for (b, pol), rs in ratios.items():
            w = sorted(r[0] for r in rs)
            c = sorted(r[1] for r in rs)
            print(f"{pol:<16} wall {w[0]:.2f} / {statistics.median(w):.2f} / {w[-1]:.2f}"
                  f"  CPU {c[0]:.2f} / {statistics.median(c):.2f} / {c[-1]:.2f}" + (f"  {b}" if a.compare else ""))
        if a.compare:  # a sign count: rounds in which --compare's step was the shorter (wall)
            for pol in a.policies.split(","):
                lower = sum(rc[0] < rr[0] for rr, rc in zip(ratios[(a.roundoff, pol)], ratios[(a.compare, pol)]))
                print(f"{pol:<16} --compare the shorter (wall) in {lower} of {a.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
