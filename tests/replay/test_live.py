#!/usr/bin/env python3
"""tessera-replay against live runs: for a run that died, the replay of its out-of-memory
snapshot (snapshot_on_oom) or of its TESSERA_TRACE log gives every configuration the outcome a
live run under that configuration gives, on the same device, also under memory_limit.

The program is seed_even on the simulated device: it fills the device with 100 blocks of 8 MiB,
frees every other one, then asks for 64 MiB. PyTorch's policy runs out of memory (the 8 MiB
holes sit in 20 MiB segments); expandable segments, defragment and tessera's default serve it.

Run one class:  test_live.py ClassName    Environment: TS_BUILD, TS_SOURCE.
"""
import glob
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ["TS_BUILD"]
REPLAY = os.path.join(BUILD, "tools", "tessera-replay")
SHIM = os.path.join(BUILD, "shim", "libtessera.so")
SIM = os.path.join(BUILD, "tests", "sim")
PROGRAM = os.path.join(BUILD, "tests", "programs", "seed_even")
ARGS = ["--unit", "8M", "--count", "100", "--request", "64M"]
# the replay's names; live, "pytorch" is expandable_segments:False and "default" no policy key
CONFS = ["pytorch", "expandable_segments:True", "defragment:True", "default"]
LIVE_CONF = {"pytorch": "expandable_segments:False", "default": None}
GiB = 1 << 30


class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("a snapshot holds plain data only")


class LiveAgainstReplay(unittest.TestCase):
    # Live runs take seconds each (the program writes and checks 800 MiB): each set of three is
    # run once for the class and shared by the tests that read it.
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-live-")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def live(self, name, conf, memory, limit=None, history=1000, args=ARGS):
        """Run the program under conf; returns (served, snapshot path or None, trace path)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTORCH_"))}
        runtime = os.environ.get("TS_SANITIZER_RUNTIME", "")
        env["LD_LIBRARY_PATH"] = SIM + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["LD_PRELOAD"] = (runtime + ":" if runtime else "") + SHIM
        stats = os.path.join(self.tmp, "stats-" + name)
        os.mkdir(stats)
        env["TESSERA_STATS_DIR"] = stats
        env["TESSERA_SIM_MEMORY"] = memory
        trace = os.path.join(self.tmp, name + ".csv")
        env["TESSERA_TRACE"] = trace
        parts = ["history_events:%d" % history,
                 "snapshot_on_oom:" + os.path.join(self.tmp, name + "-oom-%n.pickle")]
        conf = LIVE_CONF.get(conf, conf)
        if conf:
            parts.append(conf)
        if limit:
            parts.append("memory_limit:" + limit)
        env["TESSERA_ALLOC_CONF"] = ",".join(parts)
        p = subprocess.run([PROGRAM] + args, env=env, capture_output=True, text=True, timeout=120)
        result = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        self.assertTrue(result, p.stdout + p.stderr)
        status = dict(f.split("=", 1) for f in result[-1].split()[1:] if "=" in f)["status"]
        self.assertIn(status, ("ok", "oom"), p.stdout + p.stderr)
        snaps = glob.glob(os.path.join(self.tmp, name + "-oom-*.pickle"))
        self.assertEqual(len(snaps), 0 if status == "ok" else 1, p.stderr)
        return status == "ok", snaps[0] if snaps else None, trace

    def replay(self, path):
        r = subprocess.run([REPLAY, "--json", "--compare", path] + CONFS, capture_output=True,
                           text=True, timeout=300)
        # PyTorch's policy runs out of memory again on the run's device: status 3
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        rows = json.loads(r.stdout)
        text = subprocess.run([REPLAY, "--compare", path] + CONFS, capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(text.returncode, 3, text.stderr)
        return rows, text.stdout

    def check(self, rows, text, live, total, limit):
        for conf, row in zip(CONFS, rows):
            with self.subTest(conf=conf):
                # what the run ran on, recorded by the run, not guessed
                self.assertEqual(row["capacity_source"], "recorded")
                self.assertEqual(row["capacity_bytes"], total)
                self.assertEqual(row["memory_limit_bytes"], limit)
                # the request that failed is replayed, never dropped
                self.assertEqual(row["run_failed_requests"], 1)
                self.assertEqual(row["run_first_failed_bytes"], 64 << 20)
                # the verdict is the live outcome
                self.assertEqual(row["run_first_failed_served"], live[conf], row)
                if live[conf]:
                    spare = row["run_first_failed_spare_bytes"]
                    self.assertGreater(spare, 0)
                    self.assertLessEqual(spare, (limit or total) - 800 * (1 << 20))
                    self.assertIn("%s: would have served the request that failed (#101, 64.0 MiB), "
                                  "with %.1f MiB to spare" % (conf, spare / (1 << 20)), text)
                else:
                    self.assertIn("%s: would not have served the request that failed "
                                  "(#101, 64.0 MiB)" % conf, text)

    def run_all(self, memory, limit=None):
        key = (memory, limit)
        if key in self.runs:
            return self.runs[key]
        live, snapshot, trace = {}, None, None
        for i, conf in enumerate(CONFS):
            served, snap, log = self.live("run%s%s%d" % (memory, limit or "", i), conf, memory,
                                          limit)
            live[conf] = served
            if conf == "pytorch":
                snapshot, trace = snap, log
        # the scenario this test needs: PyTorch's policy dies, the others live
        self.assertEqual(live, {"pytorch": False, "expandable_segments:True": True,
                                "defragment:True": True, "default": True})
        self.runs[key] = (live, snapshot, trace)
        return self.runs[key]

    def test_oom_snapshot_and_trace(self):
        live, snapshot, trace = self.run_all("1G")
        with open(snapshot, "rb") as f:
            snap = Restricted(f).load()
        self.assertEqual(snap["tessera"]["devices"],
                         [{"device": 0, "total_bytes": GiB, "memory_limit_bytes": 0}])
        ooms = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
        self.assertEqual(len(ooms), 1)
        # the free memory the driver reported after the failure: 24 MiB of the 1 GiB device
        self.assertEqual(ooms[0]["device_free"], GiB - 1000 * (1 << 20))
        for path in (snapshot, trace):
            with self.subTest(path=os.path.basename(path)):
                rows, text = self.replay(path)
                self.check(rows, text, live, GiB, 0)

    def test_memory_limit(self):
        live, snapshot, trace = self.run_all("2G", limit="1G")
        for path in (snapshot, trace):
            with self.subTest(path=os.path.basename(path)):
                rows, text = self.replay(path)
                self.check(rows, text, live, 2 * GiB, GiB)

    def test_late_history_is_said(self):
        # a ring too small for the run: the blocks held before it began are not replayed, and
        # the replay says so instead of a verdict that looks sure
        # (a smaller run of the same program: 20 x 2 MiB on 64 MiB, every other freed, 64 MiB)
        served, snapshot, _ = self.live("late", "pytorch", "64M", history=10,
                                        args=["--unit", "2M", "--count", "20", "--request", "64M"])
        self.assertFalse(served)
        r = subprocess.run([REPLAY, "--json", snapshot], capture_output=True, text=True,
                           timeout=120)
        row = json.loads(r.stdout)
        self.assertEqual(row["preexisting_blocks"], 10)
        self.assertEqual(row["preexisting_bytes"], 10 * (2 << 20))
        self.assertIn("10 blocks in use (20.0 MiB) at the snapshot were allocated before its "
                      "history began: not replayed", r.stderr)
        text = subprocess.run([REPLAY, "--compare", snapshot] + CONFS, capture_output=True,
                              text=True, timeout=120).stdout
        self.assertIn("(the history began late: 10 blocks the run held are not replayed, so "
                      "these verdicts may be too hopeful)", text)

    def test_capacity_overrides(self):
        # --capacity replaces what the run recorded: on 2 GiB PyTorch's policy serves it too
        _, snapshot, _ = self.run_all("1G")
        r = subprocess.run([REPLAY, "--json", "--capacity", "2G", "--compare", snapshot] + CONFS,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in json.loads(r.stdout):
            self.assertEqual(row["capacity_source"], "given")
            self.assertTrue(row["run_first_failed_served"], row)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
