#!/usr/bin/python3
"""Tests of studies/sweep/policy_tables.py (ctest AnalyzeStudy); ctest PolicyTablesCurrent checks the committed file
against the build."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "studies", "sweep"))
import policy_tables as P  # noqa: E402
from study_io import InputError  # noqa: E402

HEAD = "op             pass       storage/compute/accumulation/rounding [approx saturate nan ftz daz]"
FORMATS = {"fp16": 65504.0, "fp32": 3.40282e+38}


class ParseTable(unittest.TestCase):
    def test_storage_and_the_smaller_of_format_max_and_saturate(self):
        t = P.parse_table("p", ["p", HEAD,
                                "matmul         fwd        fp16/fp16/ane-tile4/nearest-even  saturate=32768 nan=ane-inf",
                                "softmax        fwd        fp16/fp16/ane-tile4/nearest-even  nan=ane-inf",
                                "rmsnorm        bwd-data   fp32/fp32/fp32-seq/nearest-even",
                                "weights        role       fp32", "loss-scale     default    256"], FORMATS)
        self.assertEqual(t, {("matmul", "fwd"): P.Entry("fp16", 32768.0), ("softmax", "fwd"): P.Entry("fp16", 65504.0),
                             ("rmsnorm", "bwd-data"): P.Entry("fp32", 3.40282e+38)})

    def test_unknown_storage_and_wrong_name_are_refused(self):
        with self.assertRaisesRegex(InputError, "storage format 'fp12' of matmul fwd is not one of the formats "
                                                r"\(fp16, fp32\)"):
            P.parse_table("p", ["p", HEAD, "matmul         fwd        fp12/fp16/fp16-seq/nearest-even"], FORMATS)
        with self.assertRaisesRegex(InputError, "does not start with its canonical text"):
            P.parse_table("p", ["q", HEAD, "matmul         fwd        fp16/fp16/fp16-seq/nearest-even"], FORMATS)

    def test_read_tables_names_a_missing_key(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump({"policies": {}}, f)
            with self.assertRaisesRegex(InputError, "has no 'formats'"):
                P.read_tables(path)


class Check(unittest.TestCase):
    """`check` against a stand-in for the roundoff binary that prints a given table: equal passes, a changed
    entry fails and is named."""

    def fake(self, d, storage):
        path = os.path.join(d, "roundoff")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    'if [ "$1" = formats ]; then\n'
                    "  echo 'format  p emin emax subnorm u max finite'\n"
                    "  echo 'fp32 24 -126 127 yes 5.96e-08 3.40282e+38 x'\n"
                    "  echo 'fp16 11 -14 15 yes 0.00048828 65504 x'\n"
                    "else\n"
                    "  echo p; echo '%s'; echo 'matmul fwd %s/fp16/fp16-seq/nearest-even'\n"
                    "fi\n" % (HEAD, storage))
        os.chmod(path, 0o755)
        return path

    def test_equal_passes_and_a_changed_entry_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            runs = os.path.join(d, "runs.csv")
            with open(runs, "w") as f:
                f.write("study,run,arm,seed,policy\ns,r,A,1,p\n")
            out = os.path.join(d, "tables.json")
            self.assertEqual(P.main(["write", "--roundoff", self.fake(d, "fp16"), "--runs", runs, "--out", out]), 0)
            self.assertEqual(P.read_tables(out), {"p": {("matmul", "fwd"): P.Entry("fp16", 65504.0)}})
            self.assertEqual(P.main(["check", "--roundoff", self.fake(d, "fp16"), out]), 0)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(P.main(["check", "--roundoff", self.fake(d, "fp32"), out]), 1)
            self.assertIn("policy 'p' line 3", err.getvalue())
            self.assertIn("is stale", err.getvalue())


if __name__ == "__main__":
    unittest.main()
