#!/usr/bin/python3
"""Tests of studies/sweep/analyze_study.py (ctest AnalyzeStudy; run with the system python).

The statistics are checked against hand computations with closed forms (Student's t with 2 degrees of freedom
has F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so its p-values and quantiles need no library), and the whole script
against a real tiny sweep committed here: grid-t0-tiny.json (T0, fp32 vs ane-fp16 as arms CPU and FULL16,
seeds 1-3, 12 steps), its runs.csv and each run's curves.csv (runs/), made by
`roundoff sweep tests/studies/gap-analysis/grid-t0-tiny.json --jobs 1 --threads 1`.
"""
import csv
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "studies", "sweep"))
import analyze_study as A  # noqa: E402


def t2_sf(t):  # survival function of Student's t, 2 degrees of freedom
    return 0.5 - t / (2 * math.sqrt(2 + t * t))


def t2_quantile(f):  # its inverse CDF: u = 2F - 1, t = u sqrt(2) / sqrt(1 - u^2)
    u = 2 * f - 1
    return u * math.sqrt(2) / math.sqrt(1 - u * u)


class Statistics(unittest.TestCase):
    def test_paired_t_by_hand(self):
        # d = 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3), t = 2 sqrt(3), p = 1 - sqrt(6/7),
        # CI = 0.2 -/+ t_{0.975,2} se with t_{0.975,2} = 0.95 sqrt(2) / sqrt(0.0975) = 4.3027.
        r = A.paired_t([0.1, 0.2, 0.3])
        se = 0.1 / math.sqrt(3)
        self.assertEqual(r["n"], 3)
        self.assertAlmostEqual(r["mean"], 0.2, places=14)
        self.assertAlmostEqual(r["sd"], 0.1, places=14)
        self.assertAlmostEqual(r["t"], 2 * math.sqrt(3), places=12)
        self.assertAlmostEqual(r["p"], 1 - math.sqrt(6 / 7), places=12)
        self.assertAlmostEqual(t2_quantile(0.975), 4.3027, places=4)  # the tables' value
        # scipy's t.ppf (an iterative inversion) gives 4.302652729911275 against the exact
        # 4.3026527297494638...: 4e-11 relative, so the interval is compared to 1e-9.
        self.assertAlmostEqual(r["ci_low"], 0.2 - t2_quantile(0.975) * se, places=9)
        self.assertAlmostEqual(r["ci_high"], 0.2 + t2_quantile(0.975) * se, places=9)
        # Fewer than two seeds: no interval, no test.
        self.assertTrue(math.isnan(A.paired_t([0.5])["p"]))
        # Identical differences: se = 0.
        self.assertEqual(A.paired_t([0.0, 0.0, 0.0])["p"], 1.0)
        self.assertEqual(A.paired_t([0.25, 0.25, 0.25])["p"], 0.0)

    def test_holm_by_hand(self):
        # p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01*3 = 0.03; 0.03*2 = 0.06; max(0.06, 0.04*1) = 0.06.
        adj, rej = A.holm([0.01, 0.04, 0.03])
        for a, b in zip(adj, [0.03, 0.06, 0.06]):
            self.assertAlmostEqual(a, b, places=14)
        self.assertEqual(rej, [True, False, False])
        adj, rej = A.holm([0.6, math.nan])  # NaN (no data) is not part of m
        self.assertAlmostEqual(adj[0], 0.6)
        self.assertIsNone(rej[1])

    def test_tost_by_hand(self):
        d = [0.1, 0.2, 0.3]
        se = 0.1 / math.sqrt(3)
        for margin in (1.0, 0.25):
            p1 = t2_sf((0.2 + margin) / se)  # H01: mu <= -margin
            p2 = 1 - t2_sf((0.2 - margin) / se)  # H02: mu >= margin
            p, eq = A.tost(d, margin)
            self.assertAlmostEqual(p, max(p1, p2), places=12)
            self.assertEqual(eq, max(p1, p2) < 0.05)
        self.assertTrue(A.tost(d, 1.0)[1])
        self.assertFalse(A.tost(d, 0.25)[1])  # p = 0.5 + (-0.866)/(2 sqrt(2.75)) = 0.239

    def test_closure_bootstrap(self):
        import numpy as np
        ref, parent, remedy = np.zeros(3), np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5])
        point, lo, hi = A.bootstrap_closure(ref, parent, remedy)
        self.assertAlmostEqual(point, 0.5)  # every resample closes half the gap
        self.assertAlmostEqual(lo, 0.5)
        self.assertAlmostEqual(hi, 0.5)
        # Different per-seed closures: the 27 resamples spread the interval around the point.
        point, lo, hi = A.bootstrap_closure(ref, parent, np.array([0.0, 1.0, 3.0]))
        self.assertAlmostEqual(point, (2.0 - 4.0 / 3.0) / 2.0)
        self.assertLess(lo, point)
        self.assertGreater(hi, point)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class TinySweep(unittest.TestCase):
    """The script end to end on the committed tiny T0 sweep, each number recomputed here by hand."""

    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="analyze_study_test_")
        A.main(["--spec", os.path.join(HERE, "spec-tiny.json"), "--runs", os.path.join(HERE, "runs.csv"),
                "--runs-dir", os.path.join(HERE, "runs"), "--out", cls.out])
        cls.runs = read_csv(os.path.join(HERE, "runs.csv"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def by_arm(self, column):
        v = {}
        for r in self.runs:
            v.setdefault(r["arm"], {})[int(r["seed"])] = float(r[column])
        return v

    def run_with_spec(self, name, change):
        """The script on the tiny sweep with spec-tiny.json changed by change(spec); returns its output directory."""
        with open(os.path.join(HERE, "spec-tiny.json")) as f:
            spec = json.load(f)
        change(spec)
        path = os.path.join(self.out, f"spec-{name}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        out = os.path.join(self.out, name)
        A.main(["--spec", path, "--runs", os.path.join(HERE, "runs.csv"), "--runs-dir", os.path.join(HERE, "runs"),
                "--out", out])
        return out

    def contrast(self, metric):
        rows = [r for r in read_csv(os.path.join(self.out, "contrasts.csv")) if r["metric"] == metric]
        self.assertEqual(len(rows), 1)
        return rows[0]

    def test_outputs_exist(self):
        for f in ("paired.csv", "contrasts.csv", "closures.csv", "trajectory.csv", "single_seed.csv", "penalties.csv",
                  "claims.csv", "analysis.json", "loss_curves.png", "gap_decomposition.png"):
            self.assertGreater(os.path.getsize(os.path.join(self.out, f)), 0, f)
        self.assertEqual(len(self.runs), 6)

    def test_remedies_figure_only_with_its_spec_entry(self):
        self.assertFalse(os.path.exists(os.path.join(self.out, "remedies.png")))  # spec-tiny has none
        out = self.run_with_spec("remedies-fig", lambda s: s.update(
            remedies_figure={"band_pct": 0.5, "rows": [{"arm": "FULL16", "ref": "CPU"}]}))
        self.assertGreater(os.path.getsize(os.path.join(out, "remedies.png")), 10000)
        with self.assertRaises(SystemExit):  # a row that is not one of the spec's contrasts, refused before any output
            self.run_with_spec("remedies-fig-bad", lambda s: s.update(
                remedies_figure={"band_pct": 0.5, "rows": [{"arm": "CPU", "ref": "FULL16"}]}))
        self.assertFalse(os.path.exists(os.path.join(self.out, "remedies-fig-bad")))

    def test_arm_styles_never_repeat(self):
        for n in (1, 10, 11, 20, 21, 30):
            styles = A.arm_styles(n)
            self.assertEqual(len(styles), n)
            self.assertEqual(len({(str(c), ls, m) for c, ls, m in styles}), n, n)

    def test_missing_bar_labels(self):
        # The decomposition figure's label for a bar without a value: equal wall time without a window is "n/a";
        # a contrast whose arm or reference has no run names it; both ran but no paired seed is "no data".
        spec = {"reference": "CPU", "equal_wall_time": {"ref_micro_steps": 1041, "arm_micro_steps": 1297,
                                                        "ref_arms": ["CPU"], "arms": ["FULL16"]}}
        ends = A.wall_time_ends(spec)
        ran = {"CPU", "FULL16", "MM"}
        self.assertEqual(A.missing_bar_label(spec, ran, ends, A.EQUAL_WALL_TIME, "MM", "CPU"), "n/a")
        self.assertEqual(A.missing_bar_label(spec, ran, ends, A.EQUAL_WALL_TIME, "GUIDE", "CPU"), "n/a")
        self.assertEqual(A.missing_bar_label(spec, ran, ends, "val_loss_fp32", "GUIDE", "CPU"), "no runs of GUIDE")
        self.assertEqual(A.missing_bar_label(spec, ran, ends, "val_loss_fp32", "GUIDE", "CPU-D"),
                         "no runs of GUIDE or CPU-D")
        self.assertEqual(A.missing_bar_label(spec, ran, ends, A.EQUAL_WALL_TIME, "FULL16", "CPU"), "no data")
        self.assertEqual(A.missing_bar_label(spec, ran, ends, "val_loss_fp32", "MM", "CPU"), "no data")

    def test_primary_contrast_by_hand(self):
        v = self.by_arm("val_loss_fp32")
        d = [v["FULL16"][s] - v["CPU"][s] for s in (1, 2, 3)]
        mean = sum(d) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
        t = mean / (sd / math.sqrt(3))
        row = self.contrast("val_loss_fp32")
        self.assertEqual(row["n"], "3")
        self.assertEqual(row["ran_at"], "T0/brown-1.9.80")
        self.assertAlmostEqual(float(row["mean_diff"]), mean, places=15)
        self.assertAlmostEqual(float(row["t"]), t, places=9)
        self.assertAlmostEqual(float(row["p"]), 2 * t2_sf(abs(t)), places=12)
        half = t2_quantile(0.975) * sd / math.sqrt(3)
        self.assertAlmostEqual(float(row["ci_low"]), mean - half, places=12)
        rel = [100 * x / v["CPU"][s] for x, s in zip(d, (1, 2, 3))]
        self.assertAlmostEqual(float(row["rel_gap_pct"]), sum(rel) / 3, places=12)
        # One contrast in the family: Holm leaves its p unchanged.
        self.assertEqual(row["in_family"], "True")
        self.assertAlmostEqual(float(row["p_holm"]), float(row["p"]), places=15)
        # Secondary metrics are not in the family.
        self.assertEqual(self.contrast("autoane_train_loss")["p_holm"], "")

    def test_equal_wall_time_by_hand(self):
        # spec-tiny: reference at 8 micro-steps, arm at 10, window 4, accum 1: CPU's mean train_loss over
        # updates 5..8 (curves steps 4..7) against FULL16's over updates 7..10 (steps 6..9).
        def window(run, steps):
            rows = read_csv(os.path.join(HERE, "runs", run, "curves.csv"))
            tl = {int(r["step"]): float(r["value"]) for r in rows if r["metric"] == "train_loss"}
            return sum(tl[s] for s in steps) / len(steps)

        d = {}
        for r in self.runs:
            steps = range(4, 8) if r["arm"] == "CPU" else range(6, 10)
            d.setdefault(int(r["seed"]), {})[r["arm"]] = window(r["run"], steps)
        diffs = [d[s]["FULL16"] - d[s]["CPU"] for s in (1, 2, 3)]
        row = self.contrast(A.EQUAL_WALL_TIME)
        self.assertAlmostEqual(float(row["mean_diff"]), sum(diffs) / 3, places=14)

    def test_equal_wall_time_window_by_step_time_not_by_reference(self):
        # A contrast whose reference is a CPU-mode arm other than the spec's reference (R-GUIDE-D - R-CPU in the
        # study) takes that arm's window at ref_micro_steps. Here CPU2 is a copy of CPU's runs: FULL16 - CPU2 must
        # equal FULL16 - CPU when CPU2 is in ref_arms, and have no equal-wall-time row when it is in neither list.
        runs = read_csv(os.path.join(HERE, "runs.csv"))
        path = os.path.join(self.out, "runs-cpu2.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(runs[0]))
            w.writeheader()
            w.writerows(runs)
            w.writerows({**r, "arm": "CPU2"} for r in runs if r["arm"] == "CPU")

        def run(name, ref_arms):
            with open(os.path.join(HERE, "spec-tiny.json")) as f:
                spec = json.load(f)
            spec["contrasts"].append({"arm": "FULL16", "ref": "CPU2"})
            if ref_arms is not None:
                spec["equal_wall_time"]["ref_arms"] = ref_arms
            sp = os.path.join(self.out, f"spec-{name}.json")
            with open(sp, "w") as f:
                json.dump(spec, f)
            out = os.path.join(self.out, name)
            A.main(["--spec", sp, "--runs", path, "--runs-dir", os.path.join(HERE, "runs"), "--out", out])
            return {(r["arm"], r["ref"]): r for r in read_csv(os.path.join(out, "contrasts.csv"))
                    if r["metric"] == A.EQUAL_WALL_TIME}

        rows = run("ewt-cpu2", ["CPU", "CPU2"])
        self.assertEqual(rows[("FULL16", "CPU2")]["mean_diff"], rows[("FULL16", "CPU")]["mean_diff"])
        self.assertEqual(rows[("FULL16", "CPU")]["mean_diff"], self.contrast(A.EQUAL_WALL_TIME)["mean_diff"])
        rows = run("ewt-default", None)  # ref_arms defaults to the reference alone: CPU2 has no window
        self.assertNotIn(("FULL16", "CPU2"), rows)
        self.assertIn(("FULL16", "CPU"), rows)
        with self.assertRaises(SystemExit):  # an arm with two step times is refused
            run("ewt-both", ["CPU", "FULL16"])

    def test_trajectory_agreement_by_hand(self):
        # spec-tiny: FULL16 vs CPU train_loss, updates 1..4 (curves steps 0..3), threshold 5e-5 (every seed holds
        # on this sweep); again at 2e-5, where seeds 1 and 2 fail and 3 holds, so both outcomes are checked.

        def train_loss(run):
            rows = read_csv(os.path.join(HERE, "runs", run, "curves.csv"))
            return {int(r["step"]): float(r["value"]) for r in rows if r["metric"] == "train_loss"}

        tl = {(r["arm"], int(r["seed"])): train_loss(r["run"]) for r in self.runs}
        out = self.run_with_spec("t2e-5", lambda spec: spec["trajectory_agreement"].update(threshold=2e-5))
        outcomes = set()
        for thr, where in ((5e-5, self.out), (2e-5, out)):
            rows = {int(r["seed"]): r for r in read_csv(os.path.join(where, "trajectory.csv"))}
            self.assertEqual(sorted(rows), [1, 2, 3])
            for seed, row in rows.items():
                d = {k: abs(tl[("FULL16", seed)][k] - tl[("CPU", seed)][k]) for k in tl[("CPU", seed)]}
                early = max(d[k] for k in range(4))
                self.assertEqual(float(row["max_abs_diff"]), early)
                self.assertEqual(row["holds"], str(early < thr))
                over = [k + 1 for k in sorted(d) if d[k] >= thr]
                self.assertEqual(row["first_update_at_threshold"], str(over[0]) if over else "")
                self.assertEqual(int(row["updates_compared"]), len(d))
                outcomes.add((thr, row["holds"]))
        self.assertEqual(outcomes, {(5e-5, "True"), (2e-5, "True"), (2e-5, "False")})

    def test_single_seed_spread_by_hand(self):
        # spec-tiny's decomposition (FULL16 - CPU) in the primary metric and autoane_train_loss: every same-seed
        # and every different-seed relative gap, min and max; CPU's between-seed sd in % of its mean.
        rows = {r["metric"]: r for r in read_csv(os.path.join(self.out, "single_seed.csv"))}
        self.assertEqual(sorted(rows), ["autoane_train_loss", "val_loss_fp32"])
        for metric, row in rows.items():
            v = self.by_arm(metric)
            a, b = v["FULL16"], v["CPU"]
            paired = [100 * (a[s] - b[s]) / b[s] for s in (1, 2, 3)]
            unpaired = [100 * (a[i] - b[j]) / b[j] for i in (1, 2, 3) for j in (1, 2, 3) if i != j]
            self.assertEqual((row["n_paired"], row["n_unpaired"], row["ref_seeds"]), ("3", "6", "3"))
            self.assertAlmostEqual(float(row["paired_min_pct"]), min(paired), places=12)
            self.assertAlmostEqual(float(row["paired_max_pct"]), max(paired), places=12)
            self.assertAlmostEqual(float(row["unpaired_min_pct"]), min(unpaired), places=12)
            self.assertAlmostEqual(float(row["unpaired_max_pct"]), max(unpaired), places=12)
            mean = sum(b.values()) / 3
            sd = math.sqrt(sum((x - mean) ** 2 for x in b.values()) / 2)
            self.assertAlmostEqual(float(row["ref_between_seed_sd_pct"]), 100 * sd / mean, places=12)
            # Different seeds differ by more than the same seed does on this sweep, so the two columns differ.
            self.assertGreater(max(abs(x) for x in unpaired), max(abs(x) for x in paired))

    def test_penalty_comparison_by_hand(self):
        # Amendment 9's comparison of two contrasts' penalties, on the tiny sweep's two arms: FULL16 - CPU against
        # itself (ratio 1, within [0.5, 2], per-seed difference 0) and against CPU - FULL16 (ratio -1, outside;
        # per-seed difference twice FULL16 - CPU's), in the primary metric and autoane_train_loss.
        def change(spec):
            spec["penalty_comparison"] = [
                {"label": label, "a": {"arm": "FULL16", "ref": "CPU"}, "b": b, "ratio_bounds": [0.5, 2.0],
                 "metrics": ["val_loss_fp32", "autoane_train_loss"]}
                for label, b in (("same", {"arm": "FULL16", "ref": "CPU"}), ("negated", {"arm": "CPU", "ref": "FULL16"}))]

        out = self.run_with_spec("penalties", change)
        rows = {(r["label"], r["metric"]): r for r in read_csv(os.path.join(out, "penalties.csv"))}
        self.assertEqual(len(rows), 4)
        primary = self.contrast("val_loss_fp32")
        for metric in ("val_loss_fp32", "autoane_train_loss"):
            v = self.by_arm(metric)
            pa = [v["FULL16"][s] - v["CPU"][s] for s in (1, 2, 3)]
            mean_a = sum(pa) / 3
            same, neg = rows[("same", metric)], rows[("negated", metric)]
            for r in (same, neg):
                self.assertEqual((r["n"], r["seeds"]), ("3", "1 2 3"))
                self.assertAlmostEqual(float(r["mean_a"]), mean_a, places=15)
            self.assertAlmostEqual(float(same["ratio"]), 1.0, places=15)
            self.assertEqual((same["ratio_within"], neg["ratio_within"]), ("True", "False"))
            self.assertAlmostEqual(float(neg["mean_b"]), -mean_a, places=15)
            self.assertAlmostEqual(float(neg["ratio"]), -1.0, places=15)
            self.assertEqual(float(same["diff_mean"]), 0.0)
            self.assertEqual(float(same["diff_p"]), 1.0)
            d = [2 * x for x in pa]
            mean = sum(d) / 3
            sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
            self.assertAlmostEqual(float(neg["diff_mean"]), mean, places=15)
            self.assertAlmostEqual(float(neg["diff_p"]), 2 * t2_sf(abs(mean / (sd / math.sqrt(3)))), places=12)
            if metric == "val_loss_fp32":  # a's significance is contrasts.csv's (FULL16 is the family's member)
                self.assertEqual(same["a_p_holm"], primary["p_holm"])
                self.assertEqual(same["a_significant"], primary["significant_holm"])
                self.assertEqual(same["same_penalty"], primary["significant_holm"])
                self.assertEqual(neg["same_penalty"], "False")
            else:
                self.assertEqual((same["a_significant"], same["same_penalty"]), ("", ""))
        # A first contrast the spec does not have is refused.
        with self.assertRaises(SystemExit):
            self.run_with_spec("penalty-bad", lambda spec: (change(spec), spec["penalty_comparison"][0].update(
                a={"arm": "CPU", "ref": "FULL16"})))

    def test_penalty_margin_and_range_events_by_hand(self):
        # Amendment 11's C6 rule: the difference of two penalties against a margin of P % of an arm's mean, and the
        # range events of a's arm. Entries: FULL16 - CPU against itself (difference 0, its interval the point 0) with
        # margins +0.5 % and -0.5 % of CPU's mean (below the first only), and against CPU - FULL16 (difference
        # 2 (FULL16 - CPU), its upper bound by hand against 0.5 % of FULL16's mean).
        def change(spec):
            spec["penalty_comparison"] = [
                {"label": label, "a": {"arm": "FULL16", "ref": "CPU"}, "b": b, "ratio_bounds": [0.5, 2.0],
                 "metrics": ["val_loss_fp32", "autoane_train_loss"], "diff_margin": {"pct": pct, "of": of},
                 "range_events": True}
                for label, b, pct, of in (("same", {"arm": "FULL16", "ref": "CPU"}, 0.5, "CPU"),
                                          ("same-neg", {"arm": "FULL16", "ref": "CPU"}, -0.5, "CPU"),
                                          ("negated", {"arm": "CPU", "ref": "FULL16"}, 0.5, "FULL16"))]

        out = self.run_with_spec("margin", change)
        rows = {(r["label"], r["metric"]): r for r in read_csv(os.path.join(out, "penalties.csv"))}
        for metric in ("val_loss_fp32", "autoane_train_loss"):
            v = self.by_arm(metric)
            primary = metric == "val_loss_fp32"
            cpu, full = (sum(v[a][s] for s in (1, 2, 3)) / 3 for a in ("CPU", "FULL16"))
            same, neg_margin, neg = rows[("same", metric)], rows[("same-neg", metric)], rows[("negated", metric)]
            self.assertAlmostEqual(float(same["margin"]), 0.005 * cpu, places=15)
            self.assertAlmostEqual(float(neg_margin["margin"]), -0.005 * cpu, places=15)
            self.assertEqual((same["diff_below_margin"], neg_margin["diff_below_margin"]), ("True", "False"))
            d = [2 * (v["FULL16"][s] - v["CPU"][s]) for s in (1, 2, 3)]
            mean = sum(d) / 3
            high = mean + t2_quantile(0.975) * math.sqrt(sum((x - mean) ** 2 for x in d) / 2) / math.sqrt(3)
            self.assertAlmostEqual(float(neg["diff_ci_high"]), high, places=12)
            self.assertAlmostEqual(float(neg["margin"]), 0.005 * full, places=15)
            self.assertEqual(neg["diff_below_margin"], str(high < 0.005 * full))
            # No run of the tiny sweep has a range event; the events and no_worse are on the primary metric only.
            for r in (same, neg_margin, neg):
                self.assertEqual((r["range_event_seeds_a_arm"], r["range_event_seeds_a_ref"]), ("", ""))
            if primary:
                self.assertEqual((same["no_worse"], neg_margin["no_worse"]), ("True", "False"))
            else:
                self.assertEqual(same["no_worse"], "")
        # A skipped update in FULL16 seed 2 and a non-finite value in CPU seed 3: seen, and no_worse is then False.
        with open(os.path.join(HERE, "runs.csv")) as f:
            table = list(csv.DictReader(f))
        for r in table:
            if (r["arm"], r["seed"]) == ("FULL16", "2"):
                r["skipped_steps"] = "1"
            if (r["arm"], r["seed"]) == ("CPU", "3"):
                r["first_nonfinite_step"] = "7"
        events_csv = os.path.join(self.out, "runs-events.csv")
        with open(events_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
        with open(os.path.join(HERE, "spec-tiny.json")) as f:
            spec = json.load(f)
        change(spec)
        spec_path = os.path.join(self.out, "spec-events.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        out = os.path.join(self.out, "events")
        A.main(["--spec", spec_path, "--runs", events_csv, "--runs-dir", os.path.join(HERE, "runs"), "--out", out])
        same = [r for r in read_csv(os.path.join(out, "penalties.csv"))
                if (r["label"], r["metric"]) == ("same", "val_loss_fp32")][0]
        self.assertEqual((same["range_event_seeds_a_arm"], same["range_event_seeds_a_ref"]), ("2", "3"))
        self.assertEqual((same["diff_below_margin"], same["no_worse"]), ("True", "False"))
        # A margin arm outside the entry is refused.
        with self.assertRaises(SystemExit):
            self.run_with_spec("margin-bad", lambda spec: (change(spec), spec["penalty_comparison"][0].update(
                diff_margin={"pct": 0.5, "of": "GUIDE"})))

    def test_below_min_seeds_no_test_and_no_holm(self):
        out = self.run_with_spec("min4", lambda spec: spec.update(min_seeds=4))  # the tiny sweep has 3 seeds
        row = [r for r in read_csv(os.path.join(out, "contrasts.csv")) if r["metric"] == "val_loss_fp32"][0]
        full = self.contrast("val_loss_fp32")
        self.assertEqual(row["n"], "3")
        self.assertEqual(row["mean_diff"], full["mean_diff"])
        self.assertEqual(row["ci_low"], full["ci_low"])
        for k in ("t", "p", "p_holm", "tost_p_0.5pct", "equivalent_0.5pct", "significant_holm"):
            self.assertEqual(row[k], "", k)
        self.assertNotEqual(full["p"], "")

    def test_missing_arms_give_empty_rows_not_errors(self):
        def change(spec):
            spec["contrasts"].append({"arm": "GUIDE", "ref": "CPU"})
            spec["family"].append("GUIDE")
            spec["closures"] = [{"remedy": "GUIDE", "parent": "FULL16"}]

        out = self.run_with_spec("missing", change)
        rows = [r for r in read_csv(os.path.join(out, "contrasts.csv")) if r["arm"] == "GUIDE"]
        self.assertTrue(rows)
        self.assertTrue(all(r["n"] == "0" and r["p"] == "" for r in rows))
        closures = read_csv(os.path.join(out, "closures.csv"))
        self.assertEqual(closures[0]["n"], "0")
        self.assertEqual(closures[0]["closure"], "")

    def test_claims_c1_on_the_tiny_sweep(self):
        # Amendment 12's C1 rule end to end: FULL16 - CPU of the tiny sweep with thresholds placed just either side
        # of its own relative gap and interval (read from contrasts.csv, which the tests above check by hand).
        row = self.contrast("val_loss_fp32")
        gap, lo, hi = float(row["rel_gap_pct"]), float(row["rel_ci_low"]), float(row["rel_ci_high"])
        eps = 1e-9

        def verdict(**rule):
            base = {"arms": ["FULL16"], "ref": "CPU", "confirm_gap_pct": 50.0, "confirm_ci_low_pct": 50.0,
                    "refute_ci_high_pct": -50.0, "refute_tost_pct": 0.5, "autoane_metrics": ["autoane_train_loss"]}
            base.update(rule)
            name = "claims-" + "-".join(f"{k}{v}" for k, v in sorted(rule.items()))
            out = self.run_with_spec(name, lambda spec: spec.update(tost_margins_pct=[0.5, 2.0, 1e-6],
                                                                    claims={"C1": base}))
            rows = read_csv(os.path.join(out, "claims.csv"))
            self.assertEqual(len(rows), 1)
            self.assertEqual((rows[0]["claim"], rows[0]["subject"], rows[0]["n"]), ("C1", "FULL16", "3"))
            return rows[0]["verdict"]

        self.assertEqual(row["equivalent_0.5pct"], "True")  # the tiny sweep's fp16 gap is far below 0.5 %
        self.assertEqual(verdict(), "refuted")  # TOST within +-0.5 %
        self.assertEqual(verdict(refute_tost_pct=1e-6, confirm_gap_pct=gap - eps, confirm_ci_low_pct=lo - eps),
                         "confirmed")
        self.assertEqual(verdict(refute_tost_pct=1e-6, confirm_gap_pct=gap - eps, confirm_ci_low_pct=lo),
                         "undetermined")  # the lower bound must exceed the threshold
        self.assertEqual(verdict(refute_tost_pct=1e-6, confirm_gap_pct=gap + eps, confirm_ci_low_pct=lo - eps),
                         "undetermined")
        self.assertEqual(verdict(refute_tost_pct=1e-6, refute_ci_high_pct=hi + eps), "refuted")
        self.assertEqual(verdict(refute_tost_pct=1e-6, refute_ci_high_pct=hi), "undetermined")
        # A TOST margin the spec does not test is refused.
        with self.assertRaises(SystemExit):
            self.run_with_spec("claims-bad-margin", lambda spec: spec.update(claims={"C1": {
                "arms": ["FULL16"], "ref": "CPU", "confirm_gap_pct": 10.0, "confirm_ci_low_pct": 5.0,
                "refute_ci_high_pct": 2.0, "refute_tost_pct": 3.0}}))


def contrast(arm, ref, n=3, rel=0.0, lo=-1.0, hi=1.0, p=0.5, metric="val_loss_fp32", in_family=False,
             significant_holm=None, eq05=False, eq2=False, mean_diff=None):
    """A contrasts.csv row as analyse() makes it, with the fields the claim rules read."""
    return {"metric": metric, "arm": arm, "ref": ref, "in_family": in_family, "ran_at": "E11/brown", "n": n,
            "mean_diff": rel / 100 if mean_diff is None else mean_diff, "p": p if n >= 3 else math.nan,
            "rel_gap_pct": rel, "rel_ci_low": lo, "rel_ci_high": hi,
            "tost_p_0.5pct": 0.01 if eq05 else 0.4, "equivalent_0.5pct": eq05 if n >= 3 else None,
            "tost_p_2pct": 0.01 if eq2 else 0.4, "equivalent_2pct": eq2 if n >= 3 else None,
            "p_holm": p if in_family else math.nan, "significant_holm": significant_holm}


class ClaimRules(unittest.TestCase):
    """Amendment 12's rules on hand-made tables, each threshold crossed in both directions."""
    SPEC = {"primary": "val_loss_fp32", "alpha": 0.05, "min_seeds": 3, "tost_margins_pct": [0.5, 2.0]}
    C1 = {"arms": ["X"], "ref": "CPU", "confirm_gap_pct": 10.0, "confirm_ci_low_pct": 5.0, "refute_ci_high_pct": 2.0,
          "refute_tost_pct": 2.0, "autoane_metrics": ["autoane_train_loss"]}

    def claims(self, rules, contrasts=(), closures=(), penalties=(), trajectory=()):
        import pandas as pd
        spec = dict(self.SPEC, claims=rules)
        out = A.claims(spec, pd.DataFrame(list(contrasts)), pd.DataFrame(list(closures)),
                       pd.DataFrame(list(penalties)), pd.DataFrame(list(trajectory)))
        return list(out.verdict), list(out.reason)

    def c1(self, primary, autoane=None):
        auto = autoane or contrast("X", "CPU", metric="autoane_train_loss")
        return self.claims({"C1": self.C1}, [primary, auto])

    def test_c1(self):
        self.assertEqual(self.c1(contrast("X", "CPU", rel=10.0, lo=5.01, hi=15.0, p=0.01))[0], ["confirmed"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=10.0, lo=5.0, hi=15.0, p=0.01))[0], ["undetermined"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=9.99, lo=6.0, hi=15.0, p=0.01))[0], ["undetermined"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=0.5, lo=-0.9, hi=1.99))[0], ["refuted"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=0.5, lo=-0.9, hi=2.0))[0], ["undetermined"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=0.5, lo=-0.9, hi=2.5, eq2=True))[0], ["refuted"])
        self.assertEqual(self.c1(contrast("X", "CPU", rel=10.0, lo=5.01, hi=15.0, n=2))[0], ["incomplete"])
        # The artefact clause names a refutation when AutoANE's metric has a significant positive gap ...
        auto = contrast("X", "CPU", metric="autoane_train_loss", rel=1.4, lo=0.7, hi=2.1, p=0.01)
        verdict, reason = self.c1(contrast("X", "CPU", rel=0.0, lo=-0.3, hi=0.4, eq2=True), auto)
        self.assertEqual(verdict, ["refuted"])
        self.assertIn("measurement artefact", reason[0])
        # ... but a large primary gap that is not significant after Holm is not 'no gap' (GUIDE-D at E11:
        # +15.1 % [+2.46 %, +27.8 %], Holm-adjusted p above alpha, AutoANE's metric +1.40 % significant).
        verdict, reason = self.c1(contrast("X", "CPU", rel=15.1, lo=2.46, hi=27.8, p=0.03, in_family=True,
                                           significant_holm=False), auto)
        self.assertEqual(verdict, ["undetermined"])
        self.assertNotIn("artefact", reason[0])

    def test_f(self):
        rule = {"F": {"pairs": [{"arm": "X-FTZ", "parent": "X"}, {"arm": "Y-FTZ", "parent": "Y"}],
                      "confirm_gap_pct": 0.5, "tost_pct": 0.5, "autoane_metric": "autoane_train_loss"}}

        def run(x, y):
            return self.claims(rule, [x, y, contrast("X-FTZ", "X", metric="autoane_train_loss", rel=1.0)])

        # Holm over the two pairs: 0.02 and 0.03 give adjusted 0.04 and 0.04 (< 0.05), 0.02 and 0.06 give 0.04, 0.06.
        big = dict(rel=0.8, lo=0.3, hi=1.3)
        self.assertEqual(run(contrast("X-FTZ", "X", p=0.02, **big), contrast("Y-FTZ", "Y", p=0.03, **big))[0],
                         ["confirmed", "confirmed"])
        verdict, reason = run(contrast("X-FTZ", "X", p=0.02, **big), contrast("Y-FTZ", "Y", p=0.06, **big))
        self.assertEqual(verdict, ["confirmed", "undetermined"])
        self.assertIn("not significant after Holm", reason[1])
        # ... p 0.03 alone would be significant, but not after Holm with 0.026 beside it (0.052).
        self.assertEqual(run(contrast("X-FTZ", "X", p=0.026, **big), contrast("Y-FTZ", "Y", p=0.03, **big))[0],
                         ["undetermined", "undetermined"])
        # The size rule: 0.49 % is below it; a negative significant cost is not a cost.
        verdict, reason = run(contrast("X-FTZ", "X", p=0.001, rel=0.49, lo=0.3, hi=0.7),
                              contrast("Y-FTZ", "Y", p=0.001, rel=-0.8, lo=-1.3, hi=-0.3))
        self.assertEqual(verdict, ["undetermined", "undetermined"])
        self.assertIn("below the size rule", reason[0])
        self.assertIn("wrong sign", reason[1])
        # Equivalence refutes; one pair without its seeds leaves both incomplete (Holm needs both p-values).
        self.assertEqual(run(contrast("X-FTZ", "X", eq05=True, rel=0.01), contrast("Y-FTZ", "Y", p=0.9))[0],
                         ["refuted", "undetermined"])
        self.assertEqual(run(contrast("X-FTZ", "X", eq05=True), contrast("Y-FTZ", "Y", n=2, p=0.01, **big))[0],
                         ["incomplete", "incomplete"])

    def test_c2(self):
        rule = {"C2": {"arm": "F", "ref": "CPU", "closer": "G", "confirm_closure": 0.8, "refute_closure": 0.2}}

        def run(sig, closure):
            c = contrast("F", "CPU", rel=3.0, lo=1.0, hi=5.0, p=0.01, in_family=True, significant_holm=sig)
            cl = {"remedy": "G", "parent": "F", "ref": "CPU", "n": 3, "parent_gap_significant": sig,
                  "closure": closure, "ci_low": closure - 0.1, "ci_high": closure + 0.1}
            return self.claims(rule, [c], [cl])[0][0]

        self.assertEqual(run(False, math.nan), "refuted")
        self.assertEqual(run(True, 0.8), "confirmed")
        self.assertEqual(run(True, 0.79), "undetermined")
        self.assertEqual(run(True, 0.2), "undetermined")
        self.assertEqual(run(True, 0.19), "refuted")

    def test_c3(self):
        rule = {"C3": {"remedies": ["R1", "R2"], "ref": "CPU", "tost_pct": 0.5, "parents": ["G"]}}
        g = contrast("G", "CPU", rel=3.0, lo=2.0, hi=4.0, p=0.01)

        def run(r1, r2):
            return self.claims(rule, [r1, r2, g])

        out = contrast("R1", "CPU", rel=2.0, lo=0.51, hi=3.0, p=0.01)
        below = contrast("R2", "CPU", rel=-2.0, lo=-3.0, hi=-0.51, p=0.01)
        self.assertEqual(run(out, below)[0], ["confirmed"])
        self.assertEqual(run(out, contrast("R2", "CPU", rel=0.1, lo=-0.2, hi=0.4, eq05=True))[0], ["refuted"])
        # Any equivalent remedy refutes, even while another lacks its seeds.
        self.assertEqual(run(contrast("R1", "CPU", n=1), contrast("R2", "CPU", rel=0.1, lo=-0.2, hi=0.4, eq05=True))[0],
                         ["refuted"])
        self.assertEqual(run(out, contrast("R2", "CPU", rel=0.6, lo=0.5, hi=0.7))[0], ["undetermined"])
        self.assertEqual(run(out, contrast("R2", "CPU", n=2, rel=2.0, lo=1.0, hi=3.0))[0], ["incomplete"])
        # A parent with no gap is named.
        verdict, reason = self.claims(rule, [out, below, contrast("G", "CPU", eq05=True)])
        self.assertIn("G already TOST-equivalent", reason[0])
        # Issue 42: with every parent equivalent to CPU there is nothing to repair; a remedy equivalent to CPU meets
        # the refutation rule by its letter only, and the verdict is "not applicable" (A512: GUIDE and FULL16).
        eq_remedy = contrast("R2", "CPU", rel=0.1, lo=-0.2, hi=0.4, eq05=True)
        verdict, reason = self.claims(rule, [out, eq_remedy, contrast("G", "CPU", eq05=True)])
        self.assertEqual(verdict, ["not applicable"])
        self.assertIn("nothing to repair", reason[0])
        two = {"C3": dict(rule["C3"], parents=["G", "F"])}
        import pandas as pd
        spec = dict(self.SPEC, claims=two)
        both = A.claims(spec, pd.DataFrame([out, eq_remedy, contrast("G", "CPU", eq05=True),
                                            contrast("F", "CPU", eq05=True)]), pd.DataFrame(), pd.DataFrame(),
                        pd.DataFrame())
        self.assertEqual(list(both.verdict), ["not applicable"])
        self.assertEqual(list(both.refuted), [True])  # the rule's outcome stays in its column
        # One parent with a gap: something to repair, the rule applies.
        self.assertEqual(self.claims(two, [out, eq_remedy, contrast("G", "CPU", eq05=True), g | {"arm": "F"}])[0],
                         ["refuted"])

    def test_c4(self):
        rule = {"C4": {"arm": "M", "ref": "CPU", "tost_pct": 0.5, "refute_gap_pct": 1.0}}

        def run(c, holds):
            t = [{"arm": "M", "ref": "CPU", "seed": s, "holds": h} for s, h in zip((1, 2, 3), holds)]
            return self.claims(rule, [c], trajectory=t)[0][0]

        eq = contrast("M", "CPU", rel=0.0, lo=-0.2, hi=0.2, eq05=True)
        self.assertEqual(run(eq, (True, True, True)), "confirmed")
        self.assertEqual(run(eq, (True, False, True)), "undetermined")
        self.assertEqual(run(eq, (True, True)), "undetermined")  # a seed without its trajectory
        gap = dict(in_family=True, significant_holm=True, p=0.001)
        self.assertEqual(run(contrast("M", "CPU", rel=1.0, lo=0.8, hi=1.2, **gap), (False,) * 3), "refuted")
        self.assertEqual(run(contrast("M", "CPU", rel=0.99, lo=0.8, hi=1.2, **gap), (False,) * 3), "undetermined")

    def test_c5(self):
        rule = {"C5": {"closure": {"remedy": "S", "parent": "L"}, "confirm_share": 0.7, "refute_share": 0.5}}

        def run(p, share):
            cl = {"remedy": "S", "parent": "L", "ref": "CPU", "n": 3, "parent_gap_significant": p < 0.05,
                  "closure": share, "ci_low": share - 0.2, "ci_high": share + 0.2}
            cs = [contrast("L", "CPU", rel=3.0, lo=1.0, hi=5.0, p=p), contrast("S", "CPU", rel=1.0, lo=0.0, hi=2.0)]
            return self.claims(rule, cs, [cl])

        self.assertEqual(run(0.01, 0.7)[0], ["confirmed"])
        self.assertEqual(run(0.01, 0.69)[0], ["undetermined"])
        self.assertEqual(run(0.01, 0.5)[0], ["undetermined"])
        self.assertEqual(run(0.01, 0.49)[0], ["refuted"])
        verdict, reason = run(0.2, math.nan)
        self.assertEqual(verdict, ["undetermined"])
        self.assertIn("no gap to explain", reason[0])
        # Amendment 12: "Without a significant gap C5 is undetermined". A significant difference of the wrong sign
        # (A512: RM-LUT - CPU -0.05 % [-0.09 %, -0.01 %], p 0.035, share -0.33) is no gap: undetermined, not refuted.
        cl = {"remedy": "S", "parent": "L", "ref": "CPU", "n": 3, "parent_gap_significant": True,
              "closure": -0.33, "ci_low": -2.87, "ci_high": 0.87}
        cs = [contrast("L", "CPU", rel=-0.05, lo=-0.09, hi=-0.01, p=0.035),
              contrast("S", "CPU", rel=-0.06, lo=-0.28, hi=0.15)]
        verdict, reason = self.claims(rule, cs, [cl])
        self.assertEqual(verdict, ["undetermined"])
        self.assertIn("negative", reason[0])

    def test_c6(self):
        rule = {"C6": {"arm": "A1", "ref": "G"}}

        def run(ev_arm, ev_ref, no_worse, n=3):
            p = {"metric": "val_loss_fp32", "a_arm": "A1", "a_ref": "G", "n": n, "diff_mean": 0.01,
                 "diff_ci_low": -0.01, "diff_ci_high": 0.03, "margin": 0.034, "range_event_seeds_a_arm": ev_arm,
                 "range_event_seeds_a_ref": ev_ref, "no_worse": no_worse}
            return self.claims(rule, [contrast("A1", "G", n=n, rel=2.0)], penalties=[p])[0][0]

        self.assertEqual(run("", "", True), "refuted")
        self.assertEqual(run("", "", False), "undetermined")
        self.assertEqual(run("", "", None, n=2), "incomplete")
        self.assertEqual(run("2", "", False), "confirmed")  # a range event that G's seed 2 does not have
        self.assertEqual(run("2", "2", False), "undetermined")
        self.assertEqual(run("2", "", None, n=1), "confirmed")  # decided before the third seed
        # Amendment 5: a verdict decided on A512 runs is a verdict at A512; claims.csv says where and how long.
        import pandas as pd
        p = {"metric": "val_loss_fp32", "a_arm": "A1", "a_ref": "G", "n": 3, "diff_mean": 0.004,
             "diff_ci_low": -0.017, "diff_ci_high": 0.025, "margin": 0.034, "range_event_seeds_a_arm": "",
             "range_event_seeds_a_ref": "", "no_worse": True}
        c = dict(contrast("A1", "G", rel=1.95), ran_at="A512/brown-1.9.80")
        out = A.claims(dict(self.SPEC, claims=rule), pd.DataFrame([c]), pd.DataFrame(), pd.DataFrame([p]),
                       pd.DataFrame(), updates={"A512": {130}})
        self.assertEqual(list(out.verdict), ["refuted"])
        self.assertEqual(list(out.scope), ["at A512, 130 updates"])

    def test_d(self):
        rule = {"D": {"arm": "GD", "ref": "G", "ref0": "CPU", "share": 0.5, "tost_pct": 0.5}}

        def run(p_first, first_nats, same, a_sig, within=True, eq=False):
            cs = [contrast("GD", "G", rel=15.0, lo=3.0, hi=27.0, p=p_first, mean_diff=first_nats, eq05=eq),
                  contrast("GD", "CPU", rel=15.0, lo=3.0, hi=27.0, p=0.01, mean_diff=1.0)]
            p = {"metric": "val_loss_fp32", "a_arm": "CD", "a_ref": "CPU", "b_arm": "GD", "b_ref": "G",
                 "same_penalty": same, "ratio_within": within, "a_p": 0.1, "a_p_holm": 0.4, "ratio": 1.0,
                 "a_significant": a_sig}
            return self.claims(rule, cs, penalties=[p])

        self.assertEqual(run(0.01, 0.5, True, True)[0], ["confirmed"])
        self.assertEqual(run(0.01, 0.49, True, True)[0], ["undetermined"])  # under half of GD - CPU
        self.assertEqual(run(0.06, 0.9, True, True)[0], ["undetermined"])
        verdict, reason = run(0.01, 0.9, False, False)
        self.assertEqual(verdict, ["undetermined"])  # amendment 9: for want of power, not refuted
        self.assertIn("CD - CPU not significant", reason[0])
        self.assertIn("ratio bounds", run(0.01, 0.9, False, True, within=False)[1][0])
        # Issue 42: D's note stays within CPU-D - CPU's interval (E11: +15.4 % [-6.9 %, +37.7 %]): it names the
        # interval and that it holds both no penalty and GUIDE-D - GUIDE's, not "for want of power, not of effect".
        cs = [contrast("GD", "G", rel=15.1, lo=2.9, hi=27.4, p=0.034, mean_diff=0.9),
              contrast("GD", "CPU", rel=15.1, lo=2.5, hi=27.8, p=0.036, mean_diff=0.95),
              contrast("CD", "CPU", rel=15.4, lo=-6.9, hi=37.7, p=0.097, in_family=True, significant_holm=False)]
        pen = {"metric": "val_loss_fp32", "a_arm": "CD", "a_ref": "CPU", "b_arm": "GD", "b_ref": "G",
               "same_penalty": False, "ratio_within": True, "a_p": 0.097, "a_p_holm": 0.39, "ratio": 1.02,
               "a_significant": False}
        verdict, reason = self.claims(rule, cs, penalties=[pen])
        self.assertEqual(verdict, ["undetermined"])
        self.assertIn("[-6.9 %, +37.7 %] contains 0 and GD - G's +15.1 %", reason[0])
        self.assertNotIn("power", reason[0])
        self.assertEqual(run(0.5, 0.001, False, False, eq=True)[0], ["refuted"])

    def test_replication(self):
        """Amendment 1: sign and significance (or TOST equivalence) of each contrast agree with the original's, Holm
        over the replication's contrasts on both corpora; beside it the original's Holm p in its own family."""
        import pandas as pd

        def row(arm, p, rel, eq, fam_holm, fam_sig):
            return dict(contrast(arm, "CPU", rel=rel, p=p, eq05=eq, in_family=True, significant_holm=fam_sig),
                        p_holm=fam_holm)

        # KJV A512 and Brown A512 as committed: GUIDE - CPU equivalent on both; GUIDE-D - CPU p 0.023 (KJV) and
        # 0.016 (Brown; Holm 0.076 in Brown's family of five).
        kjv = pd.DataFrame([row("G", 0.195, -0.05, True, 0.195, False), row("GD", 0.0229, 25.6, False, 0.0458, True)])
        brown = pd.DataFrame([row("G", 0.774, -0.02, True, 1.0, False), row("GD", 0.0160, 2.23, False, 0.076, False)])
        out = A.replication(self.SPEC, kjv, brown).set_index("arm")
        self.assertAlmostEqual(out.loc["GD", "p_holm"], 0.0458)
        self.assertAlmostEqual(out.loc["GD", "orig_p_holm"], 0.032)  # Holm over the two: 2 x 0.016
        self.assertAlmostEqual(out.loc["GD", "orig_p_holm_family"], 0.076)
        self.assertTrue(out.loc["GD", "agrees"])
        self.assertFalse(out.loc["GD", "agrees_in_orig_family"])  # significant on the KJV, not in Brown's five
        self.assertTrue(out.loc["G", "agrees"])  # not significant on either, and equivalent on both
        self.assertTrue(out.replicates.all())
        self.assertFalse(out.replicates_in_orig_family.any())
        # A sign that disagrees fails the replication.
        flip = pd.DataFrame([row("G", 0.195, -0.05, True, 0.195, False), row("GD", 0.0229, -25.6, False, 0.0458, True)])
        self.assertFalse(A.replication(self.SPEC, flip, brown).replicates.any())

    def test_spec_errors(self):
        with self.assertRaises(SystemExit):  # an unknown claim
            self.claims({"C7": {}}, [contrast("X", "CPU")])
        with self.assertRaises(SystemExit):  # a contrast the spec does not produce
            self.claims({"C1": dict(self.C1, arms=["Y"])}, [contrast("X", "CPU")])


if __name__ == "__main__":
    unittest.main()
