#!/usr/bin/python3
"""Tests of studies/sweep/long_pair.py (ctest AnalyzeStudy; run with the system python).

The committed tiny sweep (runs.csv here: T0, arms CPU and FULL16, seeds 1-3, 12 updates of 1 micro-step) is the
long pair; the short pair is a copy of its table cut to 6 updates with hand-set metrics, so every number of the
outputs is computed here by hand from the inputs, and "grows" is checked both ways.
"""
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "studies", "sweep"))
import long_pair as L  # noqa: E402
from test_analyze_study import read_csv  # noqa: E402  (a CSV file as a list of dicts of strings)


class LongPair(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="long_pair_test_")
        cls.long = read_csv(os.path.join(HERE, "runs.csv"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def short_table(self, name, autoane, steps="6"):
        """The tiny table with `steps` updates and the AutoANE metric of (arm, seed) set from autoane; the
        validation metrics set to 5 + seed / 10 (+ 0.01 for FULL16)."""
        path = os.path.join(self.tmp, f"short-{name}.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.long[0]))
            w.writeheader()
            for r in self.long:
                v = 5 + int(r["seed"]) / 10 + (0.01 if r["arm"] == "FULL16" else 0)
                w.writerow({**r, "steps": steps, "steps_completed": steps, "val_loss_fp32": v, "val_loss_own": v,
                            "autoane_train_loss": autoane[(r["arm"], int(r["seed"]))]})
        return path

    def run_script(self, name, short, *extra):
        out = os.path.join(self.tmp, name)
        L.main(["--long", os.path.join(HERE, "runs.csv"), "--long-dir", os.path.join(HERE, "runs"),
                "--short", short, "--arm", "FULL16", "--ref", "CPU", "--seed", "2", "--window", "4",
                "--at", "4", "8", "12", "--out", out, *extra])
        return out

    def train_loss(self, arm):
        run = next(r for r in self.long if r["arm"] == arm and r["seed"] == "2")["run"]
        rows = read_csv(os.path.join(HERE, "runs", run, "curves.csv"))
        return {int(r["step"]) + 1: float(r["value"]) for r in rows if r["metric"] == "train_loss"}  # by update

    def test_by_hand_both_ways(self):
        cpu = {("CPU", 1): 5.0, ("CPU", 2): 5.1, ("CPU", 3): 5.3}
        sd = statistics.stdev([5.0, 5.1, 5.3])
        long_row = {r["arm"]: r for r in self.long if r["seed"] == "2"}
        d_long = float(long_row["FULL16"]["autoane_train_loss"]) - float(long_row["CPU"]["autoane_train_loss"])
        for name, full16, grows in (("flat", 5.2, False), ("grows", 4.8, True)):
            auto = {**cpu, **{("FULL16", s): full16 for s in (1, 2, 3)}}
            out = self.run_script(name, self.short_table(name, auto))
            pairs = {(r["metric"], int(r["updates"])): r for r in read_csv(os.path.join(out, "long_pair.csv"))}
            self.assertEqual(sorted(pairs), sorted((m, n) for m in L.METRICS for n in (6, 12)))
            self.assertAlmostEqual(float(pairs[("autoane_train_loss", 6)]["diff"]), full16 - 5.1, places=14)
            self.assertAlmostEqual(float(pairs[("val_loss_fp32", 6)]["rel_gap_pct"]), 100 * 0.01 / 5.2, places=12)
            self.assertEqual(float(pairs[("autoane_train_loss", 12)]["diff"]), d_long)
            with open(os.path.join(out, "growth.json")) as fh:
                g = json.load(fh)
            self.assertAlmostEqual(g["growth"], d_long - (full16 - 5.1), places=14)
            self.assertAlmostEqual(g["ref_sd"], sd, places=14)
            self.assertEqual(g["ref_sd_seeds"], 3)
            self.assertIs(g["grows"], grows)
            self.assertIn("inputs", g)
        # Windows of 4 updates ending at updates 4, 8, 12 of the long runs' curves.
        c, f = self.train_loss("CPU"), self.train_loss("FULL16")
        win = read_csv(os.path.join(out, "windows.csv"))
        self.assertEqual([int(r["update"]) for r in win], [4, 8, 12])
        for r in win:
            u = int(r["update"])
            ref = sum(c[k] for k in range(u - 3, u + 1)) / 4
            arm = sum(f[k] for k in range(u - 3, u + 1)) / 4
            self.assertAlmostEqual(float(r["L_ref"]), ref, places=14)
            self.assertAlmostEqual(float(r["diff"]), arm - ref, places=14)
        # The figure's series: the window mean at every update from the first whole window (4) to 12.
        self.assertGreater(os.path.getsize(os.path.join(out, "long_pair.png")), 10000)
        run = next(r for r in self.long if r["arm"] == "CPU" and r["seed"] == "2")
        curves = L.read_csv(os.path.join(HERE, "runs", run["run"], "curves.csv"))
        series = L.window_series(curves, int(run["recipe.accum"]), 4, 12)
        self.assertEqual(list(series.index), list(range(4, 13)))
        for u in range(4, 13):
            self.assertAlmostEqual(series[u], sum(c[k] for k in range(u - 3, u + 1)) / 4, places=14)

    def test_bad_input_is_refused_by_name(self):
        auto = {(a, s): 5.0 for a in ("CPU", "FULL16") for s in (1, 2, 3)}
        short = self.short_table("ok", auto)
        for name, extra, table in (("at", ["--at", "13"], short),               # past the long runs' 12 updates
                                   ("len", [], self.short_table("len", auto, steps="12")),  # not shorter
                                   ("arm", ["--arm", "GUIDE-D"], short)):       # no such arm
            with self.subTest(name), self.assertRaises(SystemExit) as e:
                self.run_script(f"bad-{name}", table, *extra)
            self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
