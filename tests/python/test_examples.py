#!/usr/bin/env python3
"""The Python examples of docs/python.md, run as they are written: each code block after a line
`<!-- example: NAME -->`, with what the example leaves to the reader (a loader, a training step,
a logger; PyTorch) supplied here.

Run one class:  test_examples.py Examples
"""
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import unittest

import helpers
from helpers import FAKE_TORCH, MiB, run_script


def example(name):
    doc = open(os.path.join(helpers.SOURCE, "docs", "python.md")).read()
    m = re.search(r"<!-- example: %s -->\s*```python\n(.*?)```" % re.escape(name), doc, re.S)
    if not m:
        raise AssertionError("docs/python.md has no example %r" % name)
    return m.group(1)


class Examples(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-examples-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def test_train_loop_logs_the_pages_numbers(self):
        # each step keeps 1 MiB more (parameters) and frees its 8 MiB of activations
        body = textwrap.dedent("""\
            params = []
            def train_step(batch):
                act = malloc(8 << 20)
                params.append(malloc(1 << 20))
                free(act)
                return 0.0
            loader = range(4)
            class Logger:
                rows = []
                def log(self, numbers, step):
                    self.rows.append((step, numbers))
            logger = Logger()
            """) + example("train-loop") + textwrap.dedent("""\
            done(rows=logger.rows)
            """)
        p, facts = run_script(body, self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = facts["rows"]
        self.assertEqual([step for step, _ in rows], [0, 1, 2, 3])
        for step, n in rows:
            with self.subTest(step=step):
                self.assertEqual(n["allocated"], (step + 1) * MiB, n)
                self.assertGreaterEqual(n["reserved"], n["allocated"], n)
                self.assertGreaterEqual(n["peak_reserved"], n["reserved"], n)
                # the peak allocated is this step's: its parameters and its 8 MiB of activations
                self.assertEqual(n["above_floor"], n["peak_reserved"] - (step + 1 + 8) * MiB, n)
                self.assertGreaterEqual(n["above_floor"], 0, n)
                self.assertEqual(n["retries"], 0, n)

    def test_enable(self):
        body = example("enable") + textwrap.dedent("""\
            import torch.cuda.memory as tm
            done(calls=[c[0] for c in tm.CALLS], library=tm.CALLS[0][1])
            """)
        p, facts = run_script(body, self.dir, under_tessera=False, pythonpath=[FAKE_TORCH])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["calls"], ["allocator", "change"])
        self.assertEqual(facts["library"], os.path.realpath(helpers.SHIM))


if __name__ == "__main__":
    helpers.main(sys.modules[__name__])
