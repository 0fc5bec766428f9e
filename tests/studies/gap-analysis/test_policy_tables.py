#!/usr/bin/python3
"""Tests of studies/sweep/policy_tables.py (ctest AnalyzeStudy); ctest PolicyTablesCurrent checks the committed file
against the build."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "studies", "sweep"))
import policy_tables as P  # noqa: E402
from study_io import InputError  # noqa: E402

HEAD = "op             pass       storage/compute/accumulation/rounding [approx saturate nan]"
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


if __name__ == "__main__":
    unittest.main()
