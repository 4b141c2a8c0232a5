#!/usr/bin/env python3
"""PyTorch's pluggable allocator entry points (shim/pluggable.c), driven from C exactly as PyTorch
drives them (pluggable_probe.c: dlopen RTLD_LOCAL, the two names, PyTorch's signatures), on the
simulated device: bytes written and read back, stream reuse, a thread with no context, another
device, a capture; tessera's own counters read from the stats page while the program waits.

Run one class:  test_pluggable.py Pluggable   (meson registers each class separately)
"""
import os
import subprocess
import sys
import unittest

import unittest_main
from test_integration import Base, SHIM, probe

MiB = 1 << 20


class Pluggable(Base):
    """Loaded by the program (no LD_PRELOAD needed), and preloaded as well (tessera run)."""

    def drive(self, preload):
        env = self.env.base(memory="1G", preload=preload,
                            extra={"TESSERA_SIM_DEVICES": "2", "TESSERA_STATS_KEEP": "1"})
        p = subprocess.Popen(probe("pluggable_probe") + [SHIM, "--devices", "2"], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            seen = p.stdout.readline()
            self.assertTrue(seen.startswith("SEEN "), seen + p.stderr.read() if p.poll() else seen)
            facts = dict(f.split("=", 1) for f in seen.split()[1:])
            line = p.stdout.readline()
            self.assertTrue(line.startswith("READY"), line)
            pid = int(line.split()[1])
            live = self.env.page_slots()
            p.stdin.write("go\n")
            p.stdin.flush()
            line = p.stdout.readline()
            self.assertTrue(line.startswith("FREED"), line)
            freed = self.env.page_slots()
            out, err = p.communicate("go\n", timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("RESULT status=ok", out)
        return pid, facts, live, freed, err

    def check(self, preload):
        pid, facts, live, freed, err = self.drive(preload)
        # the bytes of every block came back, from every stream and from the second thread
        for k in ("a_bytes", "b_bytes", "e_bytes", "t_bytes", "one_bytes"):
            self.assertEqual(facts[k], "1", (k, facts))
        # a block freed on its stream is that stream's at once, never another stream's
        self.assertEqual(facts["same_stream_reuse"], "1", facts)
        self.assertEqual(facts["other_stream_differs"], "1", facts)
        self.assertEqual(facts["distinct_streams"], "1", facts)
        self.assertEqual(facts["zero_is_null"], "1", facts)
        # a negative size, and a device that cannot exist, get NULL (and no line)
        self.assertEqual(facts["refused_is_null"], "1", facts)
        # the thread that had no context keeps its device's primary context, as after cudart's
        # first call
        self.assertEqual(facts["thread_ctx_current"], "1", facts)
        # another device's request is served there, and the current device and context stay
        self.assertEqual((facts["other_dev"], facts["cur_dev"]), ("1", "0"), facts)
        self.assertEqual(facts["ctx_kept"], "1", facts)
        # nothing allocated during the capture reused the block freed inside it
        self.assertEqual(facts["capture_alloc_reused_f"], "0", facts)
        self.assertIsNotNone(live, "no stats page")
        dev0, dev1 = live["0"], live["1"]
        # device 0: a, b, c, d, e, the one-byte block, the thread's, f: eight served (the
        # capture's two are the driver's), a and f freed; each counted once also when the
        # library is preloaded too
        self.assertEqual(dev0["num_alloc_calls"], 8, dev0)
        self.assertEqual(dev0["num_free_calls"], 2, dev0)
        self.assertEqual(dev0["allocation.all.current"], 6, dev0)
        self.assertEqual(dev0["requested_bytes.all.current"], 4 * 3 * MiB + MiB + 1, dev0)
        self.assertEqual(dev0["num_invalid_frees"], 0, dev0)
        self.assertEqual(dev1["allocation.all.current"], 1, dev1)
        self.assertEqual(dev1["requested_bytes.all.current"], MiB, dev1)
        # every block given back through the free entry point
        self.assertEqual(freed["0"]["allocation.all.current"], 0, freed)
        self.assertEqual(freed["0"]["num_free_calls"], 8, freed)
        self.assertEqual(freed["1"]["allocation.all.current"], 0, freed)
        self.assertNotIn("tessera:", err)  # nothing to say

    def test_loaded_without_preload(self):
        self.check(preload=False)

    def test_loaded_and_preloaded(self):
        self.check(preload=True)


if __name__ == "__main__":
    unittest_main.run(sys.modules[__name__], sys.argv[1:])
