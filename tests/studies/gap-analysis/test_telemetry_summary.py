#!/usr/bin/python3
"""Tests of studies/sweep/telemetry_summary.py (ctest AnalyzeStudy; run with the system python).

The telemetry here is written by hand, in the trainer's layout (docs/trainer.md): op rows at the micro-step
index, grad and adamw rows at the update index (accum 10 below), so each expected number is worked out from the
rows themselves, and a summary that mixed the two step units, or read the first sample as the final one, fails.
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
import telemetry_summary as T  # noqa: E402

HEADER = ["step", "layer", "op", "pass", "tensor", "metric", "value"]


def rows_fp16_run(final_scale):
    """Two op samples (micro-steps 0 and 10), two layers; grad/adamw rows at updates 0 and 1."""
    r = []
    for step, k in ((0, 1.0), (10, final_scale)):
        for layer in (0, 1):
            r += [(step, layer, "stream", "fwd", "x", "max_abs", 2.0 * k + layer),
                  (step, layer, "stream", "fwd", "x", "rms", 0.5 * k + layer),
                  (step, layer, "attn-scores", "fwd", "y", "max_logit", 3.0 * k + layer),
                  (step, layer, "attn-scores", "fwd", "y", "max_abs", 3.0 * k + layer),
                  (step, layer, "attn-scores", "fwd", "y", "zero_fraction", 0.25),
                  (step, layer, "softmax", "fwd", "y", "zero_fraction", 0.25 + 0.01 * (layer + 1) * k),
                  (step, layer, "softmax", "bwd-data", "dx", "subnormal", 100.0 * k),
                  (step, layer, "softmax", "bwd-data", "dx", "zero_fraction", 0.3),
                  (step, layer, "matmul", "fwd", "y", "subnormal", 7.0),
                  (step, layer, "matmul", "bwd-weight", "dw", "max_abs", 1000.0 * k),
                  (step, layer, "residual-attn", "fwd", "y", "swamping_ratio", 4.0 * k + 2 * layer),
                  (step, layer, "residual-ffn", "fwd", "y", "swamping_ratio", 6.0 * k + 2 * layer),
                  (step, layer, "rmsnorm", "fwd", "y", "collapsed_rows", 1.0 if step == 10 else 0.0),
                  (step, layer, "matmul", "fwd", "y", "inf", 2.0 if step == 0 else 0.0)]
        r.append((step, -1, "classifier", "fwd", "logits", "max_abs", 9.0 * k))
    # An attribution row at the update index (step 1): it must not count as a third op sample.
    r.append((1, 0, "matmul", "fwd", "y", "shadow_max_ulp", 3.0))
    for update, u in ((0, 0.0), (1, 0.02)):
        for tensor, extra in (("wq", 0.0), ("wk", 0.04)):
            r += [(update, -1, "grad", "bwd-weight", tensor, "underflow_fraction", u + extra),
                  (update, -1, "adamw", "fwd", tensor, "stagnation_fraction", 0.001 * (update + 1) + extra)]
    return r


class Summarise(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        runs = [("FULL16", 1, "arm-FULL16_seed-1_a", 2.0), ("FULL16", 2, "arm-FULL16_seed-2_b", 4.0),
                ("CPU", 1, "arm-CPU_seed-1_c", None)]
        with open(os.path.join(self.dir, "runs.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["study", "run", "arm", "seed"])
            for arm, seed, run, scale in runs:
                w.writerow(["tiny", run, arm, seed])
                if scale is None:
                    continue  # a run without telemetry.csv
                os.makedirs(os.path.join(self.dir, "runs", run))
                with open(os.path.join(self.dir, "runs", run, "telemetry.csv"), "w", newline="") as g:
                    tw = csv.writer(g)
                    tw.writerow(HEADER)
                    tw.writerows(rows_fp16_run(scale))
        T.main(["--runs", os.path.join(self.dir, "runs.csv"), "--runs-dir", os.path.join(self.dir, "runs"),
                "--out", os.path.join(self.dir, "out")])

    def tearDown(self):
        shutil.rmtree(self.dir)

    def read(self, name):
        with open(os.path.join(self.dir, "out", name)) as f:
            return list(csv.DictReader(f))

    def test_per_run_quantities_from_the_rows(self):
        runs = {(r["arm"], r["seed"]): r for r in self.read("telemetry_runs.csv")}
        r = {k: float(v) if v not in ("", "True", "False") else v for k, v in runs[("FULL16", "1")].items()
             if k not in ("arm", "run")}
        k = 2.0  # seed 1's final-sample scale
        self.assertEqual(r["stream_max_abs_final"], 2.0 * k + 1)
        self.assertEqual(r["stream_max_abs_max"], 2.0 * k + 1)
        self.assertEqual(r["stream_rms_final"], 0.5 * k + 1)
        self.assertEqual(r["op_max_abs_max"], 1000.0 * k)
        self.assertAlmostEqual(r["fp16_headroom_bits"], math.log2(65504.0 / 2000.0), places=12)
        self.assertEqual(r["max_logit_final"], 3.0 * k + 1)
        self.assertEqual(r["classifier_max_abs_max"], 9.0 * k)
        self.assertEqual(r["swamping_attn_median_final"], ((4.0 * k) + (4.0 * k + 2)) / 2)
        self.assertEqual(r["swamping_ffn_median_final"], ((6.0 * k) + (6.0 * k + 2)) / 2)
        self.assertEqual(r["swamping_max"], 6.0 * k + 2)
        self.assertAlmostEqual(r["softmax_zero_fraction_final"], 0.25 + 0.015 * k, places=12)
        self.assertEqual(r["masked_zero_fraction_final"], 0.25)
        self.assertAlmostEqual(r["softmax_underflow_final"], 0.015 * k, places=12)
        # subnormals: backward 2 layers x 100k per sample, forward 2 x 7 per sample; 2 samples.
        self.assertEqual(r["subnormal_bwd_per_sample"], (2 * 100.0 + 2 * 100.0 * k) / 2)
        self.assertEqual(r["subnormal_fwd_per_sample"], 14.0)
        self.assertEqual(r["nonfinite_values"], 4.0)
        self.assertEqual(r["collapsed_rows"], 2.0)
        # update-indexed rows: the final update is 1 (not the op rows' micro-step 10).
        self.assertAlmostEqual(r["grad_underflow_max"], 0.06, places=12)
        self.assertAlmostEqual(r["grad_underflow_mean_final"], (0.02 + 0.06) / 2, places=12)
        self.assertAlmostEqual(r["stagnation_mean_final"], (0.002 + 0.042) / 2, places=12)
        self.assertAlmostEqual(r["stagnation_max"], 0.042, places=12)
        cpu = runs[("CPU", "1")]
        self.assertEqual(cpu["telemetry"], "False")
        self.assertEqual(cpu["stream_max_abs_max"], "")

    def test_per_arm_mean_min_max_over_seeds(self):
        arms = {(r["arm"], r["quantity"]): r for r in self.read("telemetry_arms.csv")}
        s = arms[("FULL16", "stream_max_abs_final")]
        self.assertEqual(int(s["n"]), 2)
        self.assertEqual(float(s["mean"]), ((2 * 2.0 + 1) + (2 * 4.0 + 1)) / 2)
        self.assertEqual(float(s["min"]), 5.0)
        self.assertEqual(float(s["max"]), 9.0)
        self.assertEqual(int(arms[("CPU", "stream_max_abs_final")]["n"]), 0)

    def test_ops_at_the_final_sample(self):
        ops = {(r["arm"], r["op"], r["pass"]): r for r in self.read("telemetry_ops.csv")}
        sm = ops[("FULL16", "softmax", "bwd-data")]
        self.assertEqual(int(sm["n"]), 2)
        self.assertEqual(float(sm["subnormal"]), (2 * 100.0 * 2.0 + 2 * 100.0 * 4.0) / 2)
        self.assertAlmostEqual(float(sm["zero_fraction"]), 0.3, places=12)
        self.assertNotIn(("CPU", "softmax", "bwd-data"), ops)

    def test_figure_is_drawn(self):
        self.assertGreater(os.path.getsize(os.path.join(self.dir, "out", "telemetry.png")), 10000)

    def test_provenance_names_the_inputs(self):
        with open(os.path.join(self.dir, "out", "telemetry_summary.json")) as f:
            meta = json.load(f)
        self.assertEqual(meta["script"], "studies/sweep/telemetry_summary.py")
        self.assertEqual(list(meta["inputs"]), [os.path.join(self.dir, "runs.csv")])
        self.assertEqual(len(meta["inputs"][os.path.join(self.dir, "runs.csv")]), 64)
        self.assertEqual((meta["runs"], meta["with_telemetry"]), (3, 2))

    def test_bad_input_is_named(self):
        bad = os.path.join(self.dir, "bad.csv")
        with open(bad, "w") as f:
            f.write("run,arm\nx,CPU\n")
        with self.assertRaises(SystemExit) as e:
            T.main(["--runs", bad, "--out", os.path.join(self.dir, "o2")])
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
