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
        self.assertEqual(dev["num_device_alloc"], sim[0]["alloc_calls"] + sim[0]["set_access_calls"],
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

    # One program per family of entry points that NVIDIA's samples and HAMi-core's tests use.

    def test_stream_callbacks(self):
        r, p, sim = self.both("stream_callbacks")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["callbacks"], "4")
        self.assertEqual(r["stream_and_status"], "4")  # the runtime's stream and cudaSuccess
        self.assertEqual(r["copied_back"], "4")        # after the copies queued before it
        self.assertEqual(r["host_func_after"], "4")    # before the host function queued after it
        self.assertEqual(r["bad_flags"], "cudaErrorInvalidValue")
        self.served(p, sim, 4)

    def test_occupancy(self):
        r, p, _ = self.both("occupancy")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["attributes"], "cudaSuccess")
        self.assertEqual(r["max_threads"], "1024")
        # settings stored per kernel and read back; beyond the opt-in shared memory is refused
        self.assertEqual((r["cache_config"], r["set_smem"], r["set_carveout"]),
                         ("cudaSuccess",) * 3)
        self.assertEqual(r["set_smem_too_big"], "cudaErrorInvalidValue")
        self.assertEqual((r["max_dyn_smem"], r["carveout"]), ("100000", "50"))
        # H100 limits, 32 registers a thread: threads, registers and shared memory bound it
        self.assertEqual((r["blocks_128"], r["blocks_1024"], r["blocks_256_48k"]), ("16", "2", "4"))
        self.assertEqual((r["blocks_96_flags"], r["blocks_2048"]), ("21", "0"))
        self.assertEqual(r["bad_flags"], "cudaErrorInvalidValue")
        self.assertEqual(r["not_kernel"], "cudaErrorInvalidDeviceFunction")
        self.assertEqual(r["potential"], "cudaSuccess")
        self.assertEqual((r["launch"], r["sync"]), ("cudaSuccess", "cudaSuccess"))

    def test_zero_copy(self):
        r, p, sim = self.both("zero_copy")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["registered_type"], "1")  # cudaMemoryTypeHost
        self.assertEqual(r["same_address"], "1")     # unified addressing
        self.assertEqual(r["register_again"], "cudaErrorHostMemoryAlreadyRegistered")
        self.assertEqual(r["copied"], str(1 << 20))
        self.assertEqual(r["unregistered_pointer"], "cudaErrorInvalidValue")
        self.assertEqual(r["unregister_twice"], "cudaErrorHostMemoryNotRegistered")
        self.served(p, sim, 1)

    def test_profiler(self):
        r, p, sim = self.both("profiler")
        self.assertEqual(p.returncode, 0)
        self.assertEqual((r["start"], r["stop"]), ("cudaSuccess", "cudaSuccess"))
        self.assertEqual(r["right"], str(1 << 18))
        self.served(p, sim, 1)

    def test_mem_pools(self):
        r, p, _ = self.both("mem_pools")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["threshold_back"], "1")
        self.assertEqual(r["reuse_opportunistic"], "1")
        self.assertEqual(r["used_while_live"], "20")
        self.assertEqual(r["reserved_ge_used"], "20")
        self.assertEqual(r["moved"], "20")
        self.assertEqual(r["used_after"], "0")
        self.assertEqual(r["high_ge_two"], "1")
        self.assertEqual(r["high_reset"], "0")
        self.assertEqual(r["bad_reset"], "cudaErrorInvalidValue")
        self.assertEqual(r["bad_device"], "cudaErrorInvalidDevice")

    def test_managed(self):
        r, p, _ = self.both("managed")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["counted_mib"], "12")  # on the device's budget
        self.assertEqual(r["copied"], "1024")
        self.assertEqual(r["zero"], str((3 << 20) - 1024))
        self.assertEqual((r["type_managed"], r["same_host_pointer"]), ("1", "1"))
        self.assertEqual(r["zero_bytes"], "cudaErrorInvalidValue")
        self.assertEqual(r["bad_flags"], "cudaErrorInvalidValue")
        self.assertEqual(r["interior_free"], "cudaErrorInvalidValue")
        self.assertEqual(r["given_back"], "1")
        # attached, advised and prefetched without a change; bad ranges and devices refused
        self.assertEqual(r["prefetch_past_end"], "cudaErrorInvalidValue")
        self.assertEqual(r["advise_bad_device"], "cudaErrorInvalidDevice")
        self.assertEqual(r["attach_interior"], "cudaErrorInvalidValue")

    def test_peer_copies(self):
        r, p, _ = self.both("peer_copies", extra={"TESSERA_SIM_DEVICES": "2"})
        self.assertEqual(p.returncode, 0)
        self.assertEqual(r["devices"], "2")
        self.assertEqual(r["can_access"], "11")
        # every element made the ten round trips between the devices intact
        self.assertEqual(r["same"], str((1 << 20) - 1))
        self.assertEqual(r["bad_device"], "cudaErrorInvalidDevice")
        dev = test_run.summary_of(p.stderr)
        self.assertEqual(sorted(dev), [0, 1])
        self.assertEqual(dev[0]["num_alloc_calls"], 1)
        self.assertEqual(dev[1]["num_alloc_calls"], 1)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(PROGRAMS, "vector_add")):
        print("SKIP: the nvcc-built programs are not in %s (nvcc missing?)" % PROGRAMS)
        sys.exit(77)
    unittest.main(verbosity=2)
