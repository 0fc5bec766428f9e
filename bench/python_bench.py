#!/usr/bin/env python3
"""The Python package's speed against the C++ calls it wraps and against native PyTorch, in one run.

  round    roundoff.round of 10^7 float32 values (log-uniform magnitudes 2^-30..2^30, random signs) to fp16,
           nearest-even, against round_bench's round/fp16/nearest-even/float/16777216 (the C++ SIMD path).
  gemm     roundoff.gemm (fp16 inputs, fp32-seq, one thread) at n = 256 and 512, against gemm_bench's
           gemm/fp16-in-fp32-seq/<n> (the C++ numerics::gemm call on the same kind of operands).
  linear   one nn.Linear forward + backward (x (512, 512), W (512, 512), one thread): native PyTorch fp32
           against roundoff.torch.emulate(linear, "fp32") (fp32 storage, fp32-seq accumulation, bit-exact).
Prints one JSON object with the CPU model and every figure (best of the repeats, the calling thread's CPU time,
like the C++ benchmarks' single-thread rows).

  PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--build build] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def best(fn, repeats: int) -> float:
    """Best of `repeats` calls in the calling thread's CPU time (every figure here runs on one thread, as
    the C++ benchmarks' single-thread rows do: robust on a shared machine)."""
    fn()
    t = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        t.append(time.thread_time() - t0)
    return min(t)


def cpp_bench(exe: Path, pattern: str) -> dict:
    r = subprocess.run([str(exe), f"--benchmark_filter={pattern}", "--benchmark_format=json",
                        "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"],
                       capture_output=True, text=True, check=True)
    out = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "min" or (b.get("aggregate_name") == "mean" and b["run_name"] not in out):
            out[b["run_name"]] = b
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import roundoff
    build = Path(args.build)
    res: dict = {"cpu": cpu_model(), "threads": 1}

    # round: 10^7 float32 from Python vs the C++ SIMD path (items per second)
    rng = np.random.default_rng(1)
    x = (np.where(rng.random(10**7) < 0.5, -1.0, 1.0) * np.exp2(rng.uniform(-30, 30, 10**7))).astype(np.float32)
    buf = np.empty_like(x)
    t = best(lambda: roundoff.round(x, "fp16", out=buf), args.repeats)
    t_alloc = best(lambda: roundoff.round(x, "fp16"), args.repeats)
    name = "round/fp16/nearest-even/float/16777216"
    c = cpp_bench(build / "bench/round_bench", f"^{name}$")
    cpp_ips = next(iter(c.values()))["items_per_second"]
    res["round"] = {"python_items_per_s": x.size / t, "cpp_items_per_s": cpp_ips, "ratio": x.size / t / cpp_ips,
                    "python_new_array_items_per_s": x.size / t_alloc}

    # gemm: Python vs the C++ call, one thread
    res["gemm"] = {}
    for n in (256, 512):
        A = roundoff.round(rng.standard_normal((n, n)), "fp16")
        B = roundoff.round(rng.standard_normal((n, n)), "fp16")
        t = best(lambda: roundoff.gemm(A, B, inputs="fp16", accumulation="fp32-seq", threads=1), args.repeats)
        C = np.empty((n, n))  # the C++ benchmark reuses its output too
        tn = best(lambda: roundoff.gemm(A, B, inputs="fp16", accumulation="fp32-seq", threads=1, check=False,
                                        out=C), args.repeats)
        c = cpp_bench(build / "bench/gemm_bench", f"^gemm/fp16-in-fp32-seq/{n}$")
        b = next(iter(c.values()))
        cpp_s = b["cpu_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        res["gemm"][n] = {"python_s": t, "python_unchecked_s": tn, "cpp_s": cpp_s, "ratio": t / cpp_s,
                          "ratio_unchecked": tn / cpp_s}

    # Linear forward + backward: native PyTorch vs roundoff.torch.emulate(..., "fp32"), one thread
    try:
        import torch
        import roundoff.torch as rt
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.manual_seed(0)
        lin = torch.nn.Linear(512, 512, bias=False)
        emu = rt.emulate(lin, "fp32")
        xt = torch.randn(512, 512, requires_grad=True)

        def step(m):
            def f():
                m.zero_grad(set_to_none=True)
                xt.grad = None
                m(xt).sum().backward()
            return f
        tn = best(step(lin), args.repeats)
        te = best(step(emu), args.repeats)
        res["linear"] = {"shape": "x (512, 512), W (512, 512)", "native_s": tn, "emulated_s": te,
                         "ratio": te / tn, "torch": torch.__version__}
        # where the emulated step's time goes: the three GEMMs alone through roundoff.gemm
        xq = xt.detach().numpy().astype(np.float64)
        wq = lin.weight.detach().numpy().astype(np.float64)
        tg = best(lambda: [roundoff.gemm(xq, wq.T, inputs="fp32", accumulation="fp32-seq", threads=1),
                           roundoff.gemm(xq, wq, inputs="fp32", accumulation="fp32-seq", threads=1),
                           roundoff.gemm(xq.T, xq, inputs="fp32", accumulation="fp32-seq", threads=1)],
                  args.repeats)
        res["linear"]["three_gemms_s"] = tg
    except ImportError:
        res["linear"] = "skipped: PyTorch is not installed"
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
