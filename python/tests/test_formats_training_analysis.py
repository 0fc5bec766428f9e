"""studies/formats/analyze_formats.py (the formats-in-training study's registered analysis) on synthetic tables:
the t quantile, the paired intervals by hand, each claim's three verdicts, diverged runs, and the attribution."""
from __future__ import annotations

import csv
import importlib.util
import math

import pytest

from conftest import REPO


def _script():
    spec = importlib.util.spec_from_file_location("analyze_formats", REPO / "studies" / "formats" / "analyze_formats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


A = _script()
T2 = 4.302652729749456  # t(0.975, 2), scipy.stats.t.ppf(0.975, 2)


def _write_runs(path, rows):
    cols = ["study", "run", "arm", "seed", "config.name", "diverged", "val_loss_fp32", "val_loss_own", "policy",
            "git_revision", "weights_sha256"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for arm, seed, v, *rest in rows:
            div = rest[0] if rest else False
            w.writerow(["s", f"arm-{arm}_seed-{seed}", arm, seed, "T1", "true" if div else "false", v,
                        v + 0.001 if math.isfinite(v) else v, arm, "abc", "00"])


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# fp32 losses per seed, and each arm's offset from fp32 per seed.
FP32 = {1: 4.70, 2: 4.72, 3: 4.68}
OFFSETS = {
    "fp32": (0, 0, 0),
    "bf16": (0.0005, -0.0005, 0.0),
    "mxfp8": (0.001, 0.002, 0.003),          # inside 0.5 % (0.0235): C1 holds
    "mxfp6": (0.01, 0.012, 0.011),
    "mxfp4": (0.30, 0.32, 0.31),             # worst by far: C3 holds
    "nvfp4": (0.05, 0.051, 0.052),
    "nvfp4-no-rht": (0.10, 0.11, 0.12),      # +0.05..0.068 over nvfp4: needed
    "nvfp4-no-sr": (0.0502, 0.0508, 0.0515),  # about nvfp4: not needed
    "nvfp4-1x16w": (0.0, 0.15, 0.05),         # noisy: undetermined
    "nvfp4-no-keep": (0.06, 0.061, 0.063),    # +0.01: needed (small but above 0)
}


def _table(tmp_path, offsets=OFFSETS, seeds=(1, 2, 3), extra=()):
    rows = [(arm, s, FP32[s] + off[s - 1]) for arm, off in offsets.items() for s in seeds]
    rows += list(extra)
    p = tmp_path / "runs.csv"
    _write_runs(p, rows)
    return p


def test_t_quantile_matches_tables():
    assert A.t_quantile(0.975, 1) == pytest.approx(12.706204736174707, rel=1e-10)
    assert A.t_quantile(0.975, 2) == pytest.approx(T2, rel=1e-10)
    assert A.t_quantile(0.975, 4) == pytest.approx(2.7764451051977987, rel=1e-10)
    assert A.t_quantile(0.975, 30) == pytest.approx(2.0422724563012373, rel=1e-10)


def test_mean_interval_by_hand():
    s = A.mean_interval([0.01, 0.02, 0.03])
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.02) and s["sd"] == pytest.approx(0.01)
    assert s["ci_low"] == pytest.approx(0.02 - T2 * 0.01 / math.sqrt(3))
    assert s["ci_high"] == pytest.approx(0.02 + T2 * 0.01 / math.sqrt(3))
    one = A.mean_interval([5.0])
    assert one["n"] == 1 and one["mean"] == 5.0 and math.isnan(one["ci_low"])


def test_contrasts_claims_and_ordering(tmp_path):
    out = tmp_path / "out"
    assert A.main(["--runs", str(_table(tmp_path)), "--out", str(out)]) == 0
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    c = con[("mxfp8", "fp32", "val_loss_fp32")]
    assert int(c["n"]) == 3 and float(c["mean"]) == pytest.approx(0.002)
    assert float(c["ci_high"]) == pytest.approx(0.002 + T2 * 0.001 / math.sqrt(3))
    assert float(c["margin"]) == pytest.approx(0.005 * 4.70)  # 0.5 % of the fp32 mean (4.70)
    assert c["equivalent"] == "true" and c["direction"] == "none"  # 0.002 +- 0.0025 holds 0
    r = con[("nvfp4-no-rht", "nvfp4", "val_loss_fp32")]
    assert float(r["mean"]) == pytest.approx(0.059) and r["direction"] == "worse"
    paired = [p for p in _read(out / "paired.csv") if p["arm"] == "mxfp4" and p["ref"] == "fp32"
              and p["metric"] == "val_loss_fp32"]
    assert [float(p["diff"]) for p in paired] == pytest.approx([0.30, 0.32, 0.31])
    claims = {(c["claim"], c["arm"]): c["verdict"] for c in _read(out / "claims.csv")}
    assert claims[("C1", "mxfp8")] == "holds"
    assert claims[("C2", "nvfp4-no-rht")] == "holds (needed)"
    assert claims[("C2", "nvfp4-no-sr")] == "fails (not needed at this scale)"
    assert claims[("C2", "nvfp4-1x16w")] == "undetermined"
    assert claims[("C2", "nvfp4-no-keep")] == "holds (needed)"
    assert claims[("C3", "mxfp4")] == "holds"
    order = [r["arm"] for r in _read(out / "ordering.csv") if r["metric"] == "val_loss_fp32"]
    assert order[0] == "fp32" and order[-1] == "mxfp4" and len(order) == 10
    arms = {(r["arm"], r["metric"]): r for r in _read(out / "arms.csv")}
    assert float(arms[("fp32", "val_loss_fp32")]["mean"]) == pytest.approx(4.70)
    assert float(arms[("fp32", "val_loss_own")]["mean"]) == pytest.approx(4.701)
    md = (out / "summary.md").read_text()
    assert "| mxfp4 − fp32 | 3 | +0.3100 |" in md and "| C3 plain MXFP4 is worst | 3 | holds |" in md


def test_claims_fail(tmp_path):
    off = dict(OFFSETS)
    off["mxfp8"] = (0.05, 0.06, 0.055)        # wholly above X = 0.0235: C1 fails
    off["nvfp4-no-sr"] = (0.0, 0.001, 0.0)     # removing SR helps (-0.05, outside X): fails
    off["mxfp6"] = (0.40, 0.41, 0.42)          # worse than mxfp4: C3 fails
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out)])
    claims = {(c["claim"], c["arm"]): c["verdict"] for c in _read(out / "claims.csv")}
    assert claims[("C1", "mxfp8")] == "fails"
    assert claims[("C2", "nvfp4-no-sr")] == "fails (removing it helps)"
    assert claims[("C3", "mxfp4")] == "fails (mxfp6 worse than mxfp4)"


def test_one_seed_gives_no_interval_and_undetermined_claims(tmp_path):
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, seeds=(1,))), "--out", str(out)])
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    c = con[("mxfp4", "fp32", "val_loss_fp32")]
    assert c["n"] == "1" and float(c["mean"]) == pytest.approx(0.30) and c["ci_low"] == "nan"
    assert c["direction"] == "n<2" and c["equivalent"] == "false"
    assert {c["verdict"] for c in _read(out / "claims.csv")} == {"undetermined"}


def test_diverged_run_is_left_out_and_counts_as_worse(tmp_path):
    off = {k: v for k, v in OFFSETS.items() if k != "mxfp4"}
    extra = [("mxfp4", 1, 5.0), ("mxfp4", 2, float("nan"), True), ("mxfp4", 3, 5.0)]
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, off, extra=extra)), "--out", str(out)])
    arms = {(r["arm"], r["metric"]): r for r in _read(out / "arms.csv")}
    assert arms[("mxfp4", "val_loss_fp32")]["n"] == "2" and arms[("mxfp4", "val_loss_fp32")]["diverged"] == "1"
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    c = con[("mxfp4", "fp32", "val_loss_fp32")]
    assert c["n"] == "2" and c["diverged_pairs"] == "1" and c["direction"] == "worse (diverged)"


def test_refuses_duplicates_unknown_arms_and_two_configs(tmp_path):
    p = tmp_path / "runs.csv"
    _write_runs(p, [("fp32", 1, 4.7), ("fp32", 1, 4.8)])
    with pytest.raises(SystemExit, match="appears twice"):
        A.main(["--runs", str(p), "--out", str(tmp_path / "o")])
    _write_runs(p, [("fp16", 1, 4.7)])
    with pytest.raises(SystemExit, match="unknown arm 'fp16'"):
        A.main(["--runs", str(p), "--out", str(tmp_path / "o")])
    assert A.main(["--runs", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o")]) == 2


def _write_telemetry(path, values):
    """values: {(layer, op, pass, tensor, metric): [value per shadowed step]}"""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "layer", "op", "pass", "tensor", "metric", "value"])
        w.writerow([0, 0, "matmul", "fwd", "q", "max_abs", 99.0])  # not an attribution metric: ignored
        for (layer, op, ps, tensor, metric), vals in values.items():
            for i, v in enumerate(vals):
                w.writerow([50 * i, layer, op, ps, tensor, metric, v])


def test_attribution_top_op_and_contrast_increase(tmp_path):
    seeds = (1, 2)
    offs = {"fp32": (0, 0), "nvfp4": (0.05, 0.05), "nvfp4-no-rht": (0.1, 0.1)}
    p = tmp_path / "runs.csv"
    _write_runs(p, [(a, s, FP32[s] + o[s - 1]) for a, o in offs.items() for s in seeds])
    runs = tmp_path / "runs"
    base = {"fwd": 1e-7, "bwd-data": 1e-7, "bwd-weight": 1e-7}
    for arm in offs:
        for s in seeds:
            v = {}
            for ps, e in base.items():
                if arm != "fp32":
                    e = {"fwd": 0.10, "bwd-data": 0.12, "bwd-weight": 0.08}[ps]
                if arm == "nvfp4-no-rht" and ps == "bwd-weight":
                    e = 0.30  # the RHT's GEMM without the transform: largest and largest increase
                for layer in (0, 1):
                    v[(layer, "matmul", ps, "wq", "shadow_norm_rel")] = [e, e]
                    v[(layer, "matmul", ps, "wk", "shadow_norm_rel")] = [e * s, e * s]  # seed 2 twice seed 1
            v[(0, "softmax", "fwd", "p", "shadow_norm_rel")] = [1e-7, 3e-7]
            v[(0, "matmul", "fwd", "q", "global_norm_rel")] = [0.2, 0.2]
            _write_telemetry(runs / f"arm-{arm}_seed-{s}" / "telemetry.csv", v)
    out = tmp_path / "out"
    A.main(["--runs", str(p), "--runs-dir", str(runs), "--out", str(out)])
    top = {(r["arm"], r["metric"]): r for r in _read(out / "attribution_top.csv")}
    t = top[("nvfp4-no-rht", "shadow_norm_rel")]
    assert (t["op"], t["pass"], t["runs"]) == ("matmul", "bwd-weight", "2")
    # per run: mean over steps, layers and the two tensors (e and e*s); over seeds: (0.3*1.5 + 0.3*1.0)... by hand:
    # seed 1: (0.3 + 0.3)/2 = 0.3; seed 2: (0.3 + 0.6)/2 = 0.45; mean 0.375.
    assert float(t["mean"]) == pytest.approx(0.375)
    assert top[("nvfp4", "shadow_norm_rel")]["pass"] == "bwd-data"
    soft = [r for r in _read(out / "attribution.csv") if r["arm"] == "fp32" and r["op"] == "softmax"]
    assert float(soft[0]["mean"]) == pytest.approx(2e-7)
    inc = [r for r in _read(out / "attribution_contrasts.csv")
           if r["arm"] == "nvfp4-no-rht" and r["ref"] == "nvfp4" and r["metric"] == "shadow_norm_rel"]
    assert inc[0]["pass"] == "bwd-weight" and inc[0]["rank"] == "1"
    assert float(inc[0]["increase"]) == pytest.approx(0.375 - 0.08 * 1.25)
    det = {(r["arm"], r["metric"], r["op"], r["pass"], r["layer"], r["tensor"]): r
           for r in _read(out / "attribution_detail.csv")}
    wk = det[("nvfp4-no-rht", "shadow_norm_rel", "matmul", "bwd-weight", "1", "wk")]
    assert wk["runs"] == "2" and float(wk["mean"]) == pytest.approx((0.3 + 0.6) / 2)


def test_signed_table_only_with_signed_telemetry_and_its_share_along(tmp_path):
    seeds = (1, 2)
    offs = {"fp32": (0, 0), "nvfp4": (0.05, 0.05)}
    p = tmp_path / "runs.csv"
    _write_runs(p, [(a, s, FP32[s] + o[s - 1]) for a, o in offs.items() for s in seeds])
    runs = tmp_path / "runs"
    for arm in offs:
        for s in seeds:
            v = {(0, "matmul", "bwd-weight", "w1", "shadow_norm_rel"): [0.2, 0.2],
                 (0, "softmax", "fwd", "p", "shadow_norm_rel"): [1e-7, 1e-7]}
            _write_telemetry(runs / f"arm-{arm}_seed-{s}" / "telemetry.csv", v)
    out = tmp_path / "out"
    A.main(["--runs", str(p), "--runs-dir", str(runs), "--out", str(out)])
    assert not (out / "attribution_signed.csv").exists()  # no signed rows: the registered outputs only
    assert "signed" not in (out / "summary.md").read_text()
    for arm in offs:
        for s in seeds:
            v = {(0, "matmul", "bwd-weight", "w1", "shadow_norm_rel"): [0.2, 0.2],
                 # nvfp4 seed 1 shrinks by 0.1 (along = -0.5), seed 2 by 0.2 (along = -1); fp32 unbiased
                 (0, "matmul", "bwd-weight", "w1", "shadow_signed_rel"):
                     [-0.1 * s, -0.1 * s] if arm == "nvfp4" else [1e-3, -1e-3],
                 (0, "softmax", "fwd", "p", "shadow_norm_rel"): [1e-7, 1e-7],
                 (0, "softmax", "fwd", "p", "shadow_signed_rel"): [-1e-8, -1e-8]}
            _write_telemetry(runs / f"arm-{arm}_seed-{s}" / "telemetry.csv", v)
    A.main(["--runs", str(p), "--runs-dir", str(runs), "--out", str(out)])
    rows = {(r["arm"], r["metric"], r["op"], r["pass"]): r for r in _read(out / "attribution_signed.csv")}
    r = rows[("nvfp4", "shadow_signed_rel", "matmul", "bwd-weight")]
    assert r["rank"] == "1" and r["runs"] == "2"
    assert float(r["mean"]) == pytest.approx(-0.15)
    assert float(r["norm_mean"]) == pytest.approx(0.2)
    assert float(r["along"]) == pytest.approx(-0.75)
    r = rows[("fp32", "shadow_signed_rel", "matmul", "bwd-weight")]
    assert float(r["mean"]) == pytest.approx(0.0, abs=1e-12)
    assert rows[("fp32", "shadow_signed_rel", "softmax", "fwd")]["rank"] == "1"  # |-1e-8| > |0|
    assert "| nvfp4 | matmul bwd-weight | -0.15 | 0.2 | -0.750 |" in (out / "summary.md").read_text()
