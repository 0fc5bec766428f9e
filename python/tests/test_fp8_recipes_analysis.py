"""studies/fp8/analyze_fp8.py (the fp8-recipes study's registered analysis, docs/studies/fp8-recipes.md) on
synthetic tables: the paired intervals by hand, each registered claim's three verdicts (confirmed, refuted,
undetermined), amendment 2's P' and R(DS-NOPROMOTE-R), diverged runs, one seed, the largest gap's attribution (over
the seven registered arms) and the fp8 casts' shares."""
from __future__ import annotations

import csv
import importlib.util
import math

import pytest

from conftest import REPO


def _script():
    spec = importlib.util.spec_from_file_location("analyze_fp8", REPO / "studies" / "fp8" / "analyze_fp8.py")
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


# BF16 losses per seed (mean 4.70: X = 0.0235), and each arm's offset from BF16 per seed.
BF16 = {1: 4.70, 2: 4.72, 3: 4.68}
OFFSETS = {
    "BF16": (0, 0, 0),
    "TE-CURRENT": (0.001, 0.002, 0.003),     # 0.002 +- 0.0025: inside X: R confirmed
    "TE-DELAYED": (0.0, 0.03, -0.02),        # mean 0.0037, sd 0.025: straddles X: R undetermined
    "DS": (0.004, 0.005, 0.006),             # confirmed
    "DS-NOPROMOTE": (0.010, 0.012, 0.011),   # +0.006 over DS, above 0: P confirmed (and inside X: R confirmed)
    "MXFP8": (0.05, 0.06, 0.055),            # wholly above X: R refuted
    "NVFP4": (0.10, 0.11, 0.12),             # the largest gap: R refuted
}


def _table(tmp_path, offsets=OFFSETS, seeds=(1, 2, 3), extra=()):
    rows = [(arm, s, BF16[s] + off[s - 1]) for arm, off in offsets.items() for s in seeds]
    rows += list(extra)
    p = tmp_path / "runs.csv"
    _write_runs(p, rows)
    return p


def _claims(out):
    return {c["claim"]: c for c in _read(out / "claims.csv")}


def test_contrasts_and_each_verdict(tmp_path):
    out = tmp_path / "out"
    assert A.main(["--runs", str(_table(tmp_path)), "--out", str(out)]) == 0
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    c = con[("TE-CURRENT", "BF16", "val_loss_fp32")]
    assert int(c["n"]) == 3 and float(c["mean"]) == pytest.approx(0.002)
    assert float(c["ci_high"]) == pytest.approx(0.002 + T2 * 0.001 / math.sqrt(3))
    assert float(c["margin"]) == pytest.approx(0.005 * 4.70)  # 0.5 % of the BF16 mean
    assert float(c["margin_lenient"]) == pytest.approx(0.02 * 4.70)
    d = con[("TE-DELAYED", "TE-CURRENT", "val_loss_fp32")]
    assert float(d["mean"]) == pytest.approx((-0.001 + 0.028 - 0.023) / 3)
    cl = _claims(out)
    assert cl["R(TE-CURRENT)"]["verdict"] == "confirmed"
    assert cl["R(TE-DELAYED)"]["verdict"] == "undetermined"
    assert cl["R(DS)"]["verdict"] == "confirmed"
    assert cl["R(MXFP8)"]["verdict"] == "refuted" and cl["R(NVFP4)"]["verdict"] == "refuted"
    assert cl["P"]["verdict"] == "confirmed" and cl["P"]["reason"] == "interval above 0"
    assert float(cl["P"]["mean"]) == pytest.approx(0.006)
    assert cl["D"]["verdict"] == "undetermined"  # sd 0.0255 of the paired differences: half-width 0.063
    assert set(cl) == {"R(TE-DELAYED)", "R(TE-CURRENT)", "R(DS)", "R(DS-NOPROMOTE)", "R(MXFP8)", "R(NVFP4)", "D", "P",
                       "R(DS-NOPROMOTE-R)", "P'"}
    # Amendment 2's arm has no runs in this table: its claims are there, undetermined with n = 0.
    assert cl["P'"]["verdict"] == "undetermined" and cl["P'"]["n"] == "0"
    assert cl["R(DS-NOPROMOTE-R)"]["verdict"] == "undetermined"
    order = [r["arm"] for r in _read(out / "ordering.csv") if r["metric"] == "val_loss_fp32"]
    assert order[0] == "BF16" and order[-1] == "NVFP4" and len(order) == 7
    md = (out / "summary.md").read_text()
    assert "| NVFP4 − BF16 | 3 | +0.1100 |" in md
    assert "| P DeepSeek's promotion buys loss at this model's K | 3 | confirmed | interval above 0 |" in md


def test_delayed_confirmed_refuted_and_promotion_refuted(tmp_path):
    off = dict(OFFSETS)
    off["TE-DELAYED"] = (0.0012, 0.0018, 0.0031)     # about TE-CURRENT: D confirmed
    off["DS-NOPROMOTE"] = (0.0041, 0.0050, 0.0058)   # about DS: P refuted (not needed at this K)
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out)])
    cl = _claims(out)
    assert cl["D"]["verdict"] == "confirmed"
    assert cl["P"]["verdict"] == "refuted" and "not needed" in cl["P"]["reason"]
    off["TE-DELAYED"] = (0.05, 0.06, 0.055)          # delayed worse by 0.053: D refuted
    off["DS-NOPROMOTE"] = (-0.05, -0.04, -0.045)     # removing it helps: P refuted
    out2 = tmp_path / "out2"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out2)])
    cl = _claims(out2)
    assert cl["D"]["verdict"] == "refuted" and cl["D"]["direction"] == "worse"
    assert cl["P"]["verdict"] == "refuted" and "helps" in cl["P"]["reason"]
    off["DS-NOPROMOTE"] = (-0.02, 0.03, 0.0)         # holds 0, leaves X: P undetermined
    out3 = tmp_path / "out3"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out3)])
    assert _claims(out3)["P"]["verdict"] == "undetermined"


def test_one_seed_gives_every_claim_undetermined(tmp_path):
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, seeds=(1,))), "--out", str(out)])
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    c = con[("NVFP4", "BF16", "val_loss_fp32")]
    assert c["n"] == "1" and float(c["mean"]) == pytest.approx(0.10) and c["ci_low"] == "nan"
    assert {c["verdict"] for c in _read(out / "claims.csv")} == {"undetermined"}


def test_diverged_run_refutes_matching_and_confirms_the_promotion(tmp_path):
    off = {k: v for k, v in OFFSETS.items() if k != "DS-NOPROMOTE"}
    extra = [("DS-NOPROMOTE", 1, 4.71), ("DS-NOPROMOTE", 2, float("nan"), True), ("DS-NOPROMOTE", 3, 4.69)]
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, off, extra=extra)), "--out", str(out)])
    arms = {(r["arm"], r["metric"]): r for r in _read(out / "arms.csv")}
    assert arms[("DS-NOPROMOTE", "val_loss_fp32")]["n"] == "2"
    assert arms[("DS-NOPROMOTE", "val_loss_fp32")]["diverged"] == "1"
    cl = _claims(out)
    assert cl["R(DS-NOPROMOTE)"]["verdict"] == "refuted"
    assert cl["P"]["verdict"] == "confirmed" and "diverged" in cl["P"]["reason"]


def test_refuses_duplicates_unknown_arms(tmp_path):
    p = tmp_path / "runs.csv"
    _write_runs(p, [("BF16", 1, 4.7), ("BF16", 1, 4.8)])
    with pytest.raises(SystemExit, match="appears twice"):
        A.main(["--runs", str(p), "--out", str(tmp_path / "o")])
    _write_runs(p, [("fp32", 1, 4.7)])
    with pytest.raises(SystemExit, match="unknown arm 'fp32'"):
        A.main(["--runs", str(p), "--out", str(tmp_path / "o")])
    assert A.main(["--runs", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o")]) == 2


def _write_telemetry(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "layer", "op", "pass", "tensor", "metric", "value"])
        w.writerow([0, 0, "matmul", "fwd", "q", "max_abs", 99.0])  # neither attribution nor share: ignored
        w.writerows(rows)


def test_largest_gap_attribution_and_cast_shares(tmp_path):
    seeds = (1, 2)
    p = tmp_path / "runs.csv"
    offs = {"BF16": (0, 0), "TE-DELAYED": (0.01, 0.01), "NVFP4": (0.1, 0.1)}
    _write_runs(p, [(a, s, BF16[s] + o[s - 1]) for a, o in offs.items() for s in seeds])
    runs = tmp_path / "runs"
    for arm in offs:
        for s in seeds:
            e = {"BF16": 0.002, "TE-DELAYED": 0.03, "NVFP4": 0.1}[arm]
            rows = [[0, 0, "matmul", "fwd", "q", "shadow_norm_rel", e],
                    [0, 0, "matmul", "bwd-weight", "wq", "shadow_norm_rel", e * (3 if arm == "NVFP4" else 1)],
                    [0, -1, "classifier", "fwd", "logits", "shadow_norm_rel", 0.002]]
            if arm == "TE-DELAYED":
                # dy of q: 0.5 of the elements underflow at step 0 (scale 1), 0.1 at step 10; seed 2 twice that.
                rows += [[0, 0, "matmul", "bwd-data", "q.dy", "fp8_underflow_share", 0.5 * s],
                         [10, 0, "matmul", "bwd-data", "q.dy", "fp8_underflow_share", 0.1 * s],
                         [0, 0, "matmul", "fwd", "q.x", "fp8_saturated_share", 0.0],
                         [10, 0, "matmul", "fwd", "q.x", "fp8_saturated_share", 0.01],
                         [0, 1, "matmul", "fwd", "w2.x", "fp8_saturated_share", 0.03],
                         [10, 1, "matmul", "fwd", "w2.x", "fp8_saturated_share", 0.03]]
            _write_telemetry(runs / f"arm-{arm}_seed-{s}" / "telemetry.csv", rows)
    out = tmp_path / "out"
    A.main(["--runs", str(p), "--runs-dir", str(runs), "--out", str(out)])
    big = [r for r in _read(out / "attribution_largest_gap.csv") if r["metric"] == "shadow_norm_rel"]
    assert big[0]["arm"] == "NVFP4" and float(big[0]["gap_mean"]) == pytest.approx(0.1)
    assert (big[0]["op"], big[0]["pass"]) == ("matmul", "bwd-weight")
    assert float(big[0]["increase"]) == pytest.approx(0.3 - 0.002)
    assert (big[2]["op"], float(big[2]["increase"])) == ("classifier", 0.0)
    sh = {(r["arm"], r["metric"], r["layer"], r["tensor"]): r for r in _read(out / "cast_shares.csv")}
    u = sh[("TE-DELAYED", "fp8_underflow_share", "0", "q.dy")]
    # per run the mean over steps: seed 1 0.3, seed 2 0.6; mean 0.45; max 1.0 (seed 2, step 0); step 0: 0.75
    assert u["role"] == "dy" and u["runs"] == "2" and float(u["mean"]) == pytest.approx(0.45)
    assert float(u["max"]) == pytest.approx(1.0) and float(u["step0_mean"]) == pytest.approx(0.75)
    role = {(r["arm"], r["metric"], r["role"]): r for r in _read(out / "cast_shares_role.csv")}
    x = role[("TE-DELAYED", "fp8_saturated_share", "x")]
    assert x["tensors"] == "2" and float(x["mean"]) == pytest.approx((0.005 + 0.03) / 2)
    assert float(x["max"]) == pytest.approx(0.03) and float(x["step0_mean"]) == pytest.approx(0.015)
    assert not any(r["arm"] == "BF16" for r in _read(out / "cast_shares.csv"))
    assert "| TE-DELAYED | fp8_underflow_share | dy | 1 | 0.45 | 1 | 0.75 |" in (out / "summary.md").read_text()


def test_amendment_two_rescaled_arm(tmp_path):
    # P' = DS-NOPROMOTE-R - DS judged as P; R(DS-NOPROMOTE-R) as every R(A). DS is BF16 + (0.004, 0.005, 0.006).
    off = dict(OFFSETS)
    off["DS-NOPROMOTE-R"] = (0.0070, 0.0085, 0.0100)   # +0.0035 +- 0.0012 over DS, above 0: P' confirmed
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out)])
    cl = _claims(out)
    assert cl["P'"]["verdict"] == "confirmed" and cl["P'"]["reason"] == "interval above 0"
    assert cl["P'"]["arm"] == "DS-NOPROMOTE-R" and cl["P'"]["ref"] == "DS"
    assert float(cl["P'"]["mean"]) == pytest.approx(0.0035)
    assert float(cl["P'"]["ci_high"]) == pytest.approx(0.0035 + T2 * 0.0005 / math.sqrt(3))
    assert cl["R(DS-NOPROMOTE-R)"]["verdict"] == "confirmed"   # 0.0085 +- 0.0037: inside X = 0.0235
    assert cl["P"]["verdict"] == "confirmed"                  # the registered P is judged as before
    con = {(r["arm"], r["ref"], r["metric"]): r for r in _read(out / "contrasts.csv")}
    d = con[("DS-NOPROMOTE", "DS-NOPROMOTE-R", "val_loss_fp32")]     # descriptive: what the flush costs
    assert float(d["mean"]) == pytest.approx(0.011 - 0.0085)
    assert "| P' DeepSeek's promotion buys loss" in (out / "summary.md").read_text()
    off["DS-NOPROMOTE-R"] = (0.0041, 0.0049, 0.0061)   # about DS: P' refuted (not needed at this K)
    out2 = tmp_path / "out2"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out2)])
    assert _claims(out2)["P'"]["verdict"] == "refuted" and "not needed" in _claims(out2)["P'"]["reason"]
    off["DS-NOPROMOTE-R"] = (-0.02, 0.03, 0.0)         # holds 0, leaves X: P' and R undetermined
    out3 = tmp_path / "out3"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out3)])
    assert _claims(out3)["P'"]["verdict"] == "undetermined"
    assert _claims(out3)["R(DS-NOPROMOTE-R)"]["verdict"] == "undetermined"
    off["DS-NOPROMOTE-R"] = (0.30, 0.31, 0.32)         # the largest gap, but not a registered arm
    out4 = tmp_path / "out4"
    A.main(["--runs", str(_table(tmp_path, off)), "--out", str(out4)])
    cl = _claims(out4)
    assert cl["R(DS-NOPROMOTE-R)"]["verdict"] == "refuted" and cl["P'"]["verdict"] == "confirmed"
    order = [r["arm"] for r in _read(out4 / "ordering.csv") if r["metric"] == "val_loss_fp32"]
    assert order[-1] == "DS-NOPROMOTE-R" and len(order) == 8


def test_amendment_two_diverged_rescaled_run(tmp_path):
    extra = [("DS-NOPROMOTE-R", 1, 4.71), ("DS-NOPROMOTE-R", 2, float("nan"), True), ("DS-NOPROMOTE-R", 3, 4.69)]
    out = tmp_path / "out"
    A.main(["--runs", str(_table(tmp_path, extra=extra)), "--out", str(out)])
    cl = _claims(out)
    assert cl["R(DS-NOPROMOTE-R)"]["verdict"] == "refuted"
    assert cl["P'"]["verdict"] == "confirmed" and "diverged" in cl["P'"]["reason"]
