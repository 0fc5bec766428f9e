"""Shared fixtures: the roundoff CLI (the C++ library's independent entry point), an exact rational rounding
reference (independent of the library), and random/edge-class inputs."""
from __future__ import annotations

import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def cli_path() -> Path:
    p = Path(os.environ.get("ROUNDOFF_BIN", REPO / "build" / "studies" / "roundoff")).resolve()  # tests may chdir
    if not p.exists():
        pytest.fail(f"the roundoff CLI is needed to check the bindings against the C++ library: {p} is missing "
                    "(build it with ./run build, or set ROUNDOFF_BIN)")
    return p


@pytest.fixture(scope="session")
def cli():
    """Runs `roundoff ARGS...` and returns its stdout lines (fails the test on a non-zero exit)."""
    exe = cli_path()

    def run(*args: str, ok: bool = True):
        r = subprocess.run([str(exe), *args], capture_output=True, text=True)
        if ok and r.returncode != 0:
            raise AssertionError(f"roundoff {' '.join(args[:6])} ... exited {r.returncode}: {r.stderr.strip()}")
        return r if not ok else r.stdout.splitlines()

    return run


def cli_json(lines):
    return [json.loads(line) for line in lines if line.startswith("{")]


def hex_value(s: str) -> float:
    """A CLI hex-float result (also 'inf', '-inf', 'nan')."""
    return float.fromhex(s) if "0x" in s else float(s)


def assert_same_bits(a, b, what=""):
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} vs {b.shape}"
    nan = np.isnan(a) & np.isnan(b)
    diff = ~nan & (a.view(np.uint64) != b.view(np.uint64))
    if diff.any():
        i = int(np.argmax(diff))
        raise AssertionError(f"{what}: {int(diff.sum())} of {a.size} differ; first at {i}: {a[i].hex()} vs {b[i].hex()}")


# ---- an exact rational reference for rounding (deterministic modes; formats with subnormals) -------------

def exact_round(q: Fraction, negative: bool, p: int, emin: int, emax: int, max_finite: float, specials: str,
                saturate: bool, mode: str) -> float:
    """Rounds the exact value ±q (q >= 0) per numerics/round.hpp's contract, from first principles."""
    if q == 0:
        return -0.0 if negative else 0.0
    # e = floor(log2 q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum_exp = max(e, emin) - p + 1
    m = q / Fraction(2) ** quantum_exp
    lo = m.numerator // m.denominator
    frac = m - lo
    half = Fraction(1, 2)
    if mode == "nearest-even":
        up = frac > half or (frac == half and lo % 2 == 1)
    elif mode == "nearest-away":
        up = frac >= half
    elif mode == "toward-zero":
        up = False
    elif mode == "up":
        up = frac > 0 and not negative
    elif mode == "down":
        up = frac > 0 and negative
    elif mode == "odd":
        up = frac > 0 and lo % 2 == 0
    else:
        raise ValueError(mode)
    mag = Fraction(lo + (1 if up else 0)) * Fraction(2) ** quantum_exp
    if mag > Fraction(max_finite):
        away = mode in ("nearest-even", "nearest-away") or (mode == "up" and not negative) or \
            (mode == "down" and negative)
        if saturate or specials == "none" or not away:
            v = max_finite
        else:
            v = float("nan") if specials == "nan-only" else float("inf")
        return -v if negative else v
    v = float(mag)
    return -v if negative else v


def exact_round_value(x: float, fmt, mode: str) -> float:
    return exact_round(abs(Fraction(x)), np.signbit(x), fmt.p, fmt.emin, fmt.emax, fmt.max_finite, fmt.specials,
                       fmt.saturate, mode)


def edge_values(fmt, rng: np.random.Generator, n_random: int = 200) -> np.ndarray:
    """±0, subnormals, normals, neighbours and midpoints of format values, ties, values near overflow, plus
    random doubles across the format's range."""
    mf, mn, mp = fmt.max_finite, fmt.min_normal, fmt.min_positive
    base = [0.0, mp, mp / 2, mp * 0.75, mp * 1.5, mp * 2.5, mn, mn - mp, mn * (1 - 2.0**-40), mn / 3, 1.0,
            1 + 2.0 ** -fmt.p, 1 + 3 * 2.0 ** -(fmt.p + 1), 1 + 2.0 ** -(fmt.p + 20), 1 - 2.0 ** -(fmt.p + 1),
            mf, mf * (1 + 2.0 ** -(fmt.p + 1)), mf * (1 + 2.0 ** -(fmt.p + 3)), mf * 2, mf * 1.0000001, 0.1, 1 / 3,
            2.5, 3.5, 1e-300, 1e300]
    lo = max((fmt.emin - fmt.p + 1 if fmt.subnormals else fmt.emin) - 2, -1074)
    hi = min(fmt.emax + 2, 1023)
    r = 2.0 ** rng.uniform(lo, hi, n_random) * rng.choice([1.0, -1.0], n_random)
    vals = np.concatenate([base, [-v for v in base], r])
    return vals[np.isfinite(vals)]
