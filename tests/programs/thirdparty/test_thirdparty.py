#!/usr/bin/env python3
"""nvcc-built programs with kernels on the simulated device, without and with tessera.

The simulator runs no kernel (a launch is queued in stream order and computes nothing), so a
program that checks what its kernels computed reports wrong results there, on both runs alike.
What is checked is what the simulator can honestly check: the exit status and RESULT line are the
same with and without tessera and are not a crash; copies, memsets and events around the kernels
give the right bytes in the right order; work queued after a kernel waits for it (with every queued
operation slowed down by TESSERA_SIM_OP_DELAY_US, a stream is still busy right after a launch);
launch errors are the runtime's; and tessera served the program's allocations (its counters,
read from `tessera run --summary`, against the program's own calls and the driver's report).

Environment: TS_BUILD (the build directory), TS_THIRDPARTY (where the programs were built).
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import test_run  # noqa: E402  (shared helpers: the tool's path, a clean environment, the summary)

PROGRAMS = os.environ.get("TS_THIRDPARTY", os.path.join(test_run.BUILD, "tests", "programs", "thirdparty"))
SIM = os.path.join(test_run.BUILD, "tests", "sim")
KERNEL_NOTE = "tessera-sim: kernels are not executed on the simulated device"


def result_of(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    return dict(f.split("=", 1) for f in lines[-1].split()[1:]) if lines else {}


class ThirdParty(unittest.TestCase):
    def both(self, name, args=(), extra=None):
        """(without, with) tessera: each a (process, RESULT dict, simulator report)."""
        out = []
        for tessera in (False, True):
            tmp = tempfile.mkdtemp(prefix="tessera-tp-")
            self.addCleanup(shutil.rmtree, tmp, True)
            report = os.path.join(tmp, "sim.json")
            env = test_run.clean_env(dict(extra or {}, TESSERA_SIM_REPORT=report, TMPDIR=tmp,
                                          TESSERA_SIM_MEMORY="1G"))
            argv = [os.path.join(PROGRAMS, name)] + list(args)
            if tessera:
                argv = [test_run.TESSERA, "run", "--summary", "--sim", "--"] + argv
            else:
                env["LD_LIBRARY_PATH"] = SIM
            p = test_run.subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            sim = []
            if os.path.exists(report):
                with open(report) as f:
                    sim = [json.loads(l) for l in f]
            out.append((p, result_of(p.stdout), sim))
        (p0, r0, _), (p1, r1, sim1) = out
        for p in (p0, p1):
            self.assertTrue(0 <= p.returncode < 126, p.stderr)  # exited, not killed
            self.assertEqual(p.stderr.count(KERNEL_NOTE), 1, p.stderr)
        self.assertEqual(p0.returncode, p1.returncode, (p0.stderr, p1.stderr))
        self.assertEqual(r0, r1)
        self.assertNotIn("tessera:", p1.stdout)
        return r1, p1, sim1

    def served(self, p, sim, allocs):
        dev = test_run.summary_of(p.stderr)[0]
        self.assertEqual(dev["num_alloc_calls"], allocs, p.stderr)
        self.assertGreater(dev["num_device_alloc"], 0, p.stderr)
        self.assertEqual(dev["num_device_alloc"], sim[0]["alloc_calls"] + sim[0]["create_calls"],
                         p.stderr)
        self.assertEqual(dev["num_ooms"], 0)
        # tessera reserved fewer driver allocations than the program made allocations
        self.assertLessEqual(dev["num_device_alloc"], allocs)

    def test_vector_add(self):
        r, p, sim = self.both("vector_add", ["50000"])
        # the sums are not computed here (exit 1, "Test FAILED"), the inputs round-trip intact
        self.assertEqual(p.returncode, 1)
        self.assertEqual(r["input_roundtrip_wrong"], "0")
        self.served(p, sim, 3)

    def test_streams_events(self):
        r, p, sim = self.both("streams_events")
        # every element came back through the device in order (copy in, kernel, copy out)
        self.assertEqual(r["other"], "0")
        self.assertEqual(r["unchanged"], str(4 << 18))
        self.assertEqual(r["events_ms_ok"], "1")
        self.served(p, sim, 4)

    def test_stream_order(self):
        r, p, sim = self.both("stream_order", extra={"TESSERA_SIM_OP_DELAY_US": "200000"})
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["launch"], "cudaSuccess")
        self.assertEqual(r["stream_after_launch"], "notready")  # the kernel holds the stream
        self.assertEqual(r["event_after_launch"], "notready")   # the event waits for the kernel
        self.assertEqual(r["sync"], "cudaSuccess")
        self.assertEqual(r["event_after_sync"], "ready")
        self.assertEqual(r["zero_grid"], "cudaErrorInvalidConfiguration")
        self.assertEqual(r["big_block"], "cudaErrorInvalidConfiguration")
        self.assertEqual(r["unknown_kernel"], "cudaErrorInvalidDeviceFunction")

    def test_alloc_kernels(self):
        r, p, sim = self.both("alloc_kernels", ["300"])
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["memset_ok"], "300")  # each read-back saw its memset, before its kernel
        self.assertEqual(r["launches"], "300")
        self.assertEqual(r["free_back"], "1")
        self.served(p, sim, 300)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(PROGRAMS, "vector_add")):
        print("SKIP: the nvcc-built programs are not in %s (nvcc missing?)" % PROGRAMS)
        sys.exit(77)
    unittest.main(verbosity=2)
