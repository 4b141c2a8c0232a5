#!/usr/bin/env python3
"""scripts/gpu/frameworks.py without a GPU: the dry run plans every framework run, drives the
orchestration end to end with a stand-in workload, and reports each step as skipped with its
reason; the checksum comparison fails a tessera run whose result differs from the native one.

Environment: TS_BUILD (the build directory, for libtessera.so and tessera-stat).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(SOURCE, "scripts", "gpu", "frameworks.py")
BUILD = os.environ.get("TS_BUILD", os.path.join(SOURCE, "build"))
STEPS = ["jax", "cupy-nopool", "cupy-pool", "numba", "onnxruntime", "transformers"]
sys.path.insert(0, os.path.dirname(SCRIPT))
import frameworks  # noqa: E402


class DryRun(unittest.TestCase):
    def run_script(self, *args):
        out = tempfile.mkdtemp(prefix="tessera-fw-test-")
        self.addCleanup(shutil.rmtree, out, True)
        p = subprocess.run([sys.executable, SCRIPT, "--out", out, "--smi", "/nonexistent/nvidia-smi",
                            "--lib", os.path.join(BUILD, "shim", "libtessera.so"),
                            "--stat", os.path.join(BUILD, "tools", "tessera-stat")] + list(args),
                           capture_output=True, text=True, timeout=300)
        doc = None
        if os.path.exists(os.path.join(out, "frameworks.json")):
            with open(os.path.join(out, "frameworks.json")) as f:
                doc = json.load(f)
        return p, doc, out

    def test_every_step_planned_and_skipped(self):
        p, doc, out = self.run_script("--dry-run", "--skip", "numba")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([s["name"] for s in doc["steps"]], STEPS)
        for s in doc["steps"]:
            self.assertEqual(s["status"], "SKIP", s)
            self.assertIn("[frameworks] SKIP %s: " % s["name"], p.stdout)
            self.assertEqual([r["mode"] for r in s["planned"]], ["native", "tessera", "tessera-defrag"])
            native, tessera, defrag = (r["env"] for r in s["planned"])
            # the workload script never shadows the framework it imports
            script = s["planned"][0]["argv"][-1]
            self.assertNotEqual(os.path.basename(script), s["module"] + ".py", script)
            self.assertTrue(os.path.exists(script), script)
            self.assertNotIn("LD_PRELOAD", native)
            for env in (tessera, defrag):
                self.assertTrue(env["LD_PRELOAD"].endswith("/libtessera.so"), env)
                self.assertEqual(env["TESSERA_STATS_KEEP"], "1")
            self.assertNotIn("TESSERA_ALLOC_CONF", tessera)
            self.assertEqual(defrag["TESSERA_ALLOC_CONF"], "defragment:True")
            if s["name"] == "numba":
                self.assertEqual(s["reason"], "--skip")
                continue
            self.assertTrue(s["reason"].startswith("dry run: planned 3 runs"), s["reason"])
            # the orchestration ran three stand-in runs and compared their checksums
            self.assertEqual([r["status"] for r in s["dry_runs"]], ["PASS"] * 3, s["dry_runs"])
            self.assertEqual([r.get("checksum_match") for r in s["dry_runs"]], [None, True, True])
            self.assertTrue(all(os.path.exists(os.path.join(r["dir"], "output.txt")) for r in s["dry_runs"]))
        by_name = {s["name"]: s for s in doc["steps"]}
        for r in by_name["jax"]["planned"]:
            self.assertEqual(r["env"]["XLA_PYTHON_CLIENT_ALLOCATOR"], "platform")
        self.assertNotIn("PYTORCH_NO_CUDA_MEMORY_CACHING", by_name["transformers"]["planned"][0]["env"])
        self.assertEqual(by_name["transformers"]["planned"][1]["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1")
        with open(os.path.join(out, "frameworks.md")) as f:
            md = f.read()
        self.assertEqual(md.count("| SKIP |"), len(STEPS))

    def test_without_gpu_every_step_says_why(self):
        p, doc, _ = self.run_script()
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([s["reason"] for s in doc["steps"]], ["no NVIDIA GPU (/nonexistent/nvidia-smi -L)"] * len(STEPS))

    def test_bad_skip(self):
        p, doc, _ = self.run_script("--dry-run", "--skip", "tensorflow")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown step", p.stderr)

    def test_checksum_comparison(self):
        runs = [{"mode": "native", "status": "PASS", "checksum": 1000.0},
                {"mode": "tessera", "status": "PASS", "checksum": 1000.0 * (1 + 1e-6)},
                {"mode": "tessera-defrag", "status": "PASS", "checksum": 1001.0}]
        frameworks.compare(runs)
        self.assertTrue(runs[1]["checksum_match"])
        self.assertEqual(runs[1]["status"], "PASS")
        self.assertFalse(runs[2]["checksum_match"])
        self.assertEqual(runs[2]["status"], "FAIL")

    def test_native_failure_is_not_tessera_s(self):
        # the framework broken on the machine itself (numba against a newer numpy, onnxruntime
        # without its CUDA provider): skipped with the native reason, never a tessera failure
        native = {"mode": "native", "status": "FAIL", "reason": "exit 1: AttributeError: row_stack"}
        v = frameworks.step_verdict([native])
        self.assertEqual(v["status"], "SKIP")
        self.assertIn("fails without tessera", v["reason"])
        self.assertIn("row_stack", v["reason"])
        ok = [{"mode": "native", "status": "PASS", "checksum": 2.0},
              {"mode": "tessera", "status": "PASS", "checksum": 3.0}]
        v = frameworks.step_verdict(ok)
        self.assertEqual(v["status"], "FAIL")
        self.assertIn("tessera: checksum", v["reason"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
