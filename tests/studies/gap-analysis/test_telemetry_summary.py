#!/usr/bin/python3
"""Tests of studies/sweep/telemetry_summary.py (ctest AnalyzeStudy; run with the system python).

The telemetry here is written by hand, in the trainer's layout (docs/trainer.md): op rows at the micro-step
index, grad and adamw rows at the update index (accum 10 below), so each expected number is worked out from the
rows themselves, and a summary that mixed the two step units, or read the first sample as the final one, fails.
"""
import contextlib
import csv
import io
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
ENTRY = "fp32/fp32/fp32-seq/nearest-even"


def tables(path, fp16_policy="tiny-fp16"):
    """A policy-tables file (policy_tables.py's layout) for the runs below. Under fp16_policy attn-scores and the
    matmul forward store fp16, the matmul forward with a `saturate` limit of 1024 (as the ANE's is 32768); the
    matmul's weight gradient stays fp32. Under fp32 everything is fp32."""
    entries = [f"{op:14s} {ps:10s} {ENTRY}" for op in ("attn-scores", "matmul", "softmax", "classifier") for ps in
               ("fwd", "bwd-data", "bwd-weight")]
    fp16 = [e.replace(ENTRY, "fp16/fp16/fp16-seq/nearest-even") if e.startswith(("attn-scores    fwd",))
            else e.replace(ENTRY, "fp16/fp16/fp16-seq/nearest-even  saturate=1024") if e.startswith("matmul         fwd")
            else e for e in entries]
    head = "op             pass       storage/compute/accumulation/rounding [approx saturate nan ftz daz]"
    doc = {"generated_by": "by hand", "formats": {"fp32": 3.40282e+38, "fp16": 65504.0},
           "policies": {fp16_policy: [fp16_policy, head] + fp16 + ["weights        role       fp32"],
                        "fp32": ["fp32", head] + entries}}
    with open(path, "w") as f:
        json.dump(doc, f)


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
        # Below attn-scores' largest (7 at the final sample) but nearer its own limit (1024): log2(1024/2) = 9.
        r.append((step, 0, "matmul", "fwd", "y", "max_abs", 2.0 if step == 10 else 0.5))
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
            w.writerow(["study", "run", "arm", "seed", "policy"])
            for arm, seed, run, scale in runs:
                w.writerow(["tiny", run, arm, seed, "fp32" if arm == "CPU" else "tiny-fp16"])
                if scale is None:
                    continue  # a run without telemetry.csv
                os.makedirs(os.path.join(self.dir, "runs", run))
                with open(os.path.join(self.dir, "runs", run, "telemetry.csv"), "w", newline="") as g:
                    tw = csv.writer(g)
                    tw.writerow(HEADER)
                    tw.writerows(rows_fp16_run(scale))
        tables(os.path.join(self.dir, "tables.json"))
        T.main(["--runs", os.path.join(self.dir, "runs.csv"), "--runs-dir", os.path.join(self.dir, "runs"),
                "--policy-tables", os.path.join(self.dir, "tables.json"), "--out", os.path.join(self.dir, "out")])

    def tearDown(self):
        shutil.rmtree(self.dir)

    def read(self, name):
        with open(os.path.join(self.dir, "out", name)) as f:
            return list(csv.DictReader(f))

    def test_per_run_quantities_from_the_rows(self):
        runs = {(r["arm"], r["seed"]): r for r in self.read("telemetry_runs.csv")}
        r = {k: float(v) if v not in ("", "True", "False") else v for k, v in runs[("FULL16", "1")].items()
             if k not in ("arm", "run", "fp16_headroom_at")}
        k = 2.0  # seed 1's final-sample scale
        self.assertEqual(r["stream_max_abs_final"], 2.0 * k + 1)
        self.assertEqual(r["stream_max_abs_max"], 2.0 * k + 1)
        self.assertEqual(r["stream_rms_final"], 0.5 * k + 1)
        self.assertEqual(r["op_max_abs_max"], 1000.0 * k)  # the fp32 weight gradient: no fp16 value's headroom
        self.assertEqual(r["fp16_op_max_abs_max"], 3.0 * k + 1)  # attn-scores, layer 1
        self.assertEqual(r["fp16_headroom_bits"], 9.0)  # the matmul forward against its saturate limit
        self.assertEqual(runs[("FULL16", "1")]["fp16_headroom_at"], "matmul fwd y layer 0 step 10")
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

    def rerun(self, policy_of_full16, tables_policy="tiny-fp16"):
        """The same telemetry with FULL16's runs under another policy name; returns (exit code, telemetry_runs)."""
        with open(os.path.join(self.dir, "runs.csv")) as f:
            text = f.read().replace(",tiny-fp16", "," + policy_of_full16)
        with open(os.path.join(self.dir, "runs2.csv"), "w") as f:
            f.write(text)
        tables(os.path.join(self.dir, "tables2.json"), tables_policy)
        out = os.path.join(self.dir, "out2")
        try:
            T.main(["--runs", os.path.join(self.dir, "runs2.csv"), "--runs-dir", os.path.join(self.dir, "runs"),
                    "--policy-tables", os.path.join(self.dir, "tables2.json"), "--out", out])
        except SystemExit as e:
            return e.code, None
        with open(os.path.join(out, "telemetry_runs.csv")) as f:
            return 0, {(r["arm"], r["seed"]): r for r in csv.DictReader(f)}

    def test_no_fp16_headroom_where_the_policy_stores_no_fp16(self):
        code, runs = self.rerun("fp32")
        self.assertEqual(code, 0)
        self.assertEqual(runs[("FULL16", "1")]["fp16_headroom_bits"], "")
        self.assertEqual(runs[("FULL16", "1")]["fp16_op_max_abs_max"], "")
        self.assertEqual(float(runs[("FULL16", "1")]["op_max_abs_max"]), 2000.0)

    def test_an_op_without_a_table_entry_is_refused(self):
        with open(os.path.join(self.dir, "runs", "arm-FULL16_seed-1_a", "telemetry.csv"), "a", newline="") as f:
            csv.writer(f).writerow((10, 0, "rope", "fwd", "q", "max_abs", 3.0))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code, _ = self.rerun("tiny-fp16")
        self.assertEqual(code, 2)
        self.assertIn("run arm-FULL16_seed-1_a (policy 'tiny-fp16'): the run's policy table has no entry for rope fwd",
                      err.getvalue())

    def test_a_policy_without_a_table_is_refused(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code, _ = self.rerun("ane-guide", tables_policy="tiny-fp16")
        self.assertEqual(code, 2)
        self.assertIn("no table for policy 'ane-guide'", err.getvalue())
        self.assertIn("fp32, tiny-fp16", err.getvalue())

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
        self.assertEqual(list(meta["inputs"]), [os.path.join(self.dir, "runs.csv"), os.path.join(self.dir, "tables.json")])
        self.assertEqual(len(meta["inputs"][os.path.join(self.dir, "runs.csv")]), 64)
        self.assertEqual((meta["runs"], meta["with_telemetry"]), (3, 2))

    def test_bad_input_is_named(self):
        bad = os.path.join(self.dir, "bad.csv")
        with open(bad, "w") as f:
            f.write("run,arm\nx,CPU\n")
        with self.assertRaises(SystemExit) as e:
            T.main(["--runs", bad, "--policy-tables", os.path.join(self.dir, "tables.json"),
                    "--out", os.path.join(self.dir, "o2")])
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
