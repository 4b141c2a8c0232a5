#!/usr/bin/env python3
"""tessera-replay end to end: --compare and --json on every shared trace, --min-capacity,
errors on malformed input, and CSV logs (what TESSERA_TRACE writes)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ["TS_BUILD"]
SOURCE = os.environ["TS_SOURCE"]
REPLAY = os.path.join(BUILD, "tools", "tessera-replay")
TRACES = os.path.join(SOURCE, "tests", "data", "traces")


def replay(*args):
    return subprocess.run([REPLAY, *args], capture_output=True, text=True, timeout=120)


class Replay(unittest.TestCase):
    def test_compare_every_trace(self):
        for name in sorted(os.listdir(TRACES)):
            if not name.endswith(".pickle"):
                continue
            with self.subTest(trace=name):
                # replay()'s 120 s is a hang guard; the speed is scripts/bench.sh's to measure
                r = replay("--json", "--compare", os.path.join(TRACES, name), "default",
                           "max_split_size_mb:128", "expandable_segments:True", "defragment:True")
                self.assertEqual(r.returncode, 0, r.stderr)
                rows = json.loads(r.stdout)
                self.assertEqual(len(rows), 4)
                for row in rows:
                    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "utilization",
                                "num_device_alloc", "num_device_free", "num_alloc_retries",
                                "num_ooms", "min_capacity_bytes", "ns_per_op", "device_calls"):
                        self.assertIn(key, row)
                    self.assertEqual(row["num_ooms"], 0)
                    self.assertAlmostEqual(row["utilization"],
                                           row["peak_allocated_bytes"] / row["peak_reserved_bytes"],
                                           places=3)
                    # the smallest device can't be below what the program held at once, and
                    # the unlimited run's reservation is always enough
                    self.assertGreaterEqual(row["min_capacity_bytes"], row["peak_requested_bytes"])
                    self.assertLessEqual(row["min_capacity_bytes"],
                                         (row["peak_reserved_bytes"] + (2 << 20) - 1) // (2 << 20) * (2 << 20))

    def test_compare_table_oom_column_and_verdict(self):
        trace = os.path.join(TRACES, "eor-nn-snapshot.pickle")
        confs = ("pytorch", "defragment:True")  # PyTorch's policy against defragment
        unlimited = json.loads(replay("--json", "--compare", trace, *confs).stdout)
        base_min = unlimited[0]["min_capacity_bytes"]
        defrag_min = unlimited[1]["min_capacity_bytes"]
        self.assertLess(defrag_min, base_min)  # the trace this test needs

        def mib(v):
            return "%.1f MiB" % (v / (1 << 20))

        # Unlimited: no OOMs, a verdict, and a word on why peak allocated differs.
        r = replay("--compare", trace, *confs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OOMs", r.stdout.splitlines()[1])
        self.assertIn(f"defragment:True: runs in {mib(defrag_min)} where pytorch needs "
                      f"{mib(base_min)}; ", r.stdout)
        if unlimited[0]["peak_allocated_bytes"] != unlimited[1]["peak_allocated_bytes"]:
            self.assertEqual(unlimited[0]["peak_requested_bytes"],
                             unlimited[1]["peak_requested_bytes"])
            self.assertIn("The program's own peak (requested bytes) is "
                          f"{mib(unlimited[0]['peak_requested_bytes'])} under every "
                          "configuration", r.stdout)

        # On the device defragment needs, the default runs out: the table counts it and names
        # the first failing allocation, and the verdict says defragment saves the run.
        cap = str(defrag_min)
        rows = json.loads(replay("--json", "--capacity", cap, "--compare", trace, *confs).stdout)
        ooms = rows[0]["num_ooms"]
        self.assertGreater(ooms, 0)
        self.assertEqual(rows[0]["failed_allocations"], ooms)
        self.assertEqual(rows[1]["num_ooms"], 0)
        r = replay("--capacity", cap, "--compare", trace, *confs)
        self.assertEqual(r.returncode, 3)  # a configuration did not fit the given device
        lines = r.stdout.splitlines()
        header = lines[1].split()
        default_row = lines[2].split()
        self.assertEqual(default_row[0], "pytorch")
        first = "#%d" % rows[0]["first_oom_allocation"]
        # the row's OOM count sits just before the first failing allocation
        self.assertEqual(default_row[default_row.index(first) - 1], str(ooms))
        self.assertIn(mib(rows[0]["first_oom_bytes"]), lines[2])
        self.assertIn("first", header)
        self.assertIn(f"defragment:True: runs in {mib(defrag_min)} where pytorch needs "
                      f"{mib(base_min)}; no OOM where pytorch had {ooms}; ", r.stdout)

    def test_min_capacity_is_tight(self):
        trace = os.path.join(TRACES, "eor-nn-snapshot.pickle")
        r = json.loads(replay("--json", "--min-capacity", trace).stdout)
        cap = r["min_capacity_bytes"]
        ok = replay("--json", "--capacity", str(cap), trace)
        self.assertEqual(json.loads(ok.stdout)["num_ooms"], 0)
        short = replay("--json", "--capacity", str(cap - (2 << 20)), trace)
        self.assertEqual(short.returncode, 3)  # did not fit the given device
        self.assertGreater(json.loads(short.stdout)["num_ooms"], 0)
        # the answer is checked, not assumed monotone: every capacity it names as checked runs
        chk = r["min_capacity_checked"]
        self.assertGreater(chk["steps"], 0)
        self.assertEqual(chk["raised"], 0)
        self.assertGreater(chk["to_bytes"], cap)
        for above in range(cap + (2 << 20), cap + (chk["steps"] + 1) * (2 << 20), 2 << 20):
            self.assertEqual(json.loads(replay("--json", "--capacity", str(above), trace).stdout)
                             ["num_ooms"], 0, above)
        text = replay("--min-capacity", trace).stdout
        self.assertIn("checked, not assumed: %d capacities 2 MiB apart above it" % chk["steps"],
                      text)

    def test_csv_log(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            f.write("1,00:00:00.000001,allocate,0x1000,1048576,0x0\n")
            f.write("1,00:00:00.000002,allocate,0x2000,4096,0x0\n")
            f.write("1,00:00:00.000003,free,0x1000,1048576,0x0\n")
            f.write("1,00:00:00.000004,free,0x9999,16,0x0\n")  # never allocated: skipped
            f.write("1,00:00:00.000005,allocate failure,(nil),1,0x0\n")
        r = replay("--json", f.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = json.loads(r.stdout)
        self.assertEqual((d["allocations"], d["frees"], d["skipped_frees"]), (2, 1, 1))
        # the failed request is replayed, and the missing device said, not dropped silently
        self.assertEqual((d["run_failed_requests"], d["run_failed_requests_served"]), (1, 1))
        self.assertEqual(d["capacity_source"], "unlimited")
        self.assertIn("the run failed 1 request, but the trace does not say what device it ran "
                      "on: replayed on an unlimited device (give --capacity)", r.stderr)
        self.assertEqual(d["peak_allocated_bytes"], 1048576 + 4096)
        self.assertEqual(d["peak_reserved_bytes"], 2 << 20)  # both in one small-pool segment
        os.unlink(f.name)

    def csv(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_csv_as_rmm_reads_it(self):
        # RMM's replay benchmark reads columns by header name: any order, extra columns, quoted
        # fields; RMM writes the pointer and stream in hex without a prefix, older RMM and
        # tessera with 0x. Every variant is the same trace.
        rows = [("1", "00:00:00.000001", "allocate", "1000", "1048576", "0"),
                ("1", "00:00:00.000002", "allocate", "2000", "4096", "7f8a38001020"),
                ("1", "00:00:00.000003", "free", "1000", "1048576", "0"),
                ("1", "00:00:00.000004", "allocate failure", "0", "1", "0")]
        head = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")

        def write(order, quote=False, extra=False, prefix=""):
            def cell(v, name):
                if name in ("Pointer", "Stream") and v != "0" or name == "Stream":
                    v = prefix + v
                return '"%s"' % v.replace('"', '""') if quote else v
            lines = [",".join(head[i] for i in order) + (",Note" if extra else "")]
            for r in rows:
                lines.append(",".join(cell(r[i], head[i]) for i in order) +
                             (',"a, b ""c"""' if extra else ""))
            return self.csv("\n".join(lines) + "\n")

        want = None
        for name, path in (
                ("RMM's order", write(range(6))),
                ("0x prefix", write(range(6), prefix="0x")),
                ("reordered", write([4, 2, 5, 0, 3, 1])),
                ("quoted", write([1, 3, 0, 2, 5, 4], quote=True)),
                ("extra column", write(range(6), extra=True)),
                ("all of them", write([5, 4, 3, 2, 1, 0], quote=True, extra=True, prefix="0x"))):
            with self.subTest(variant=name):
                r = replay("--json", path)
                self.assertEqual(r.returncode, 0, r.stderr)
                d = json.loads(r.stdout)
                got = (d["allocations"], d["frees"], d["skipped_frees"], d["peak_allocated_bytes"])
                self.assertEqual(got[:3], (2, 1, 0))
                want = want or got
                self.assertEqual(got, want)

    def test_rmm_actions_only(self):
        # RMM's parser (benchmarks/utilities/log_parser.hpp) reads allocate, free and allocate
        # failure, and rejects anything else: so does the replay
        path = self.csv("Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:00.000001,allocate,0x1000,4096,0\n"
                        "1,00:00:00.000002,deallocate,0x1000,4096,0\n")
        r = replay("--json", path)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn(":3: unknown action 'deallocate' (RMM's log has allocate, free and "
                      "allocate failure)", r.stderr)

    def test_compare_table_and_verdict_agree(self):
        # a configuration name longer than 40 characters is shown whole, and every number a
        # verdict quotes is in its row of the table
        trace = os.path.join(TRACES, "eor-nn-snapshot.pickle")
        long_conf = "defragment:True,handle_policy:coarse,stitch_when:pressure"
        self.assertGreater(len(long_conf), 40)
        r = replay("--compare", trace, "default", long_conf)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        head = lines[1].split()
        self.assertIn("drv time", lines[1])
        rows = {l.split()[0]: l for l in lines[2:4]}
        self.assertIn(long_conf, rows)
        verdict = [l for l in lines if l.startswith(long_conf + ": ")]
        self.assertEqual(len(verdict), 1, r.stdout)
        m = re.search(r"; (\d+) driver calls against (\d+) \(drv time ([\d.]+ms) against "
                      r"([\d.]+ms)\)$", verdict[0])
        self.assertTrue(m, verdict[0])
        for conf, calls, ms in ((long_conf, m.group(1), m.group(3)),
                                ("default", m.group(2), m.group(4))):
            cells = rows[conf].split()
            # columns after the name: peak alloc (2 cells), peak resv (2), util, min capacity
            # (2), dev alloc, dev free, drv calls, drv time
            self.assertEqual(cells[10], calls, rows[conf])
            self.assertEqual(cells[11], ms, rows[conf])
        self.assertNotIn("est.", verdict[0])
        self.assertIn("drv calls", lines[1])

    def test_help_documents_every_exit_status(self):
        r = replay("--help")
        self.assertEqual(r.returncode, 0)
        text = r.stdout
        self.assertIn("Exit status:", text)
        for code in ("0", "1", "2", "3"):
            self.assertRegex(text, r"\n  %s  " % code)
        # and the tool does return them
        self.assertEqual(replay("--no-such-option").returncode, 2)
        self.assertEqual(replay("/nonexistent/trace.csv").returncode, 1)

    def test_csv_garbage_names_the_line(self):
        head = "Size,Action,Pointer,Stream\n"
        for text, line, what in (
                (head + '16,"allocate,0x10,0\n', 2, "unbalanced double quote"),
                (head + '16,allocate,"0x10"x,0\n', 2, "unbalanced double quote"),
                (head + "16,allocate,0x10,0\n16,allocate,zz,0\n", 3, "bad pointer 'zz'"),
                (head + "-5,allocate,0x10,0\n", 2, "bad size '-5'"),
                (head + "16,allocate,0x10,0\n16,allocate\n", 3, "expected 4 comma-separated"),
                (head + "16,alloc,0x10,0\n", 2, "unknown action 'alloc'"),
                ("Thread,Time,Action,Pointer,Stream\n", 1, "the header has no 'Size' column")):
            with self.subTest(what=what):
                path = self.csv(text)
                r = replay(path)
                self.assertEqual(r.returncode, 1)
                self.assertIn(f"{path}:{line}: {what}", r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)  # one clear line

    def test_malformed_trace_names_the_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            f.write("1,00:00:00.000001,allocate,0x1000,1048576,0x0\n")
            f.write("1,00:00:00.000002,allocate,0x2000\n")
        r = replay(f.name)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{f.name}:3: expected 6 comma-separated fields", r.stderr)
        os.unlink(f.name)

    def test_driver_time_growth_and_steps(self):
        # three steps of one 30 MiB tensor: PyTorch's policy makes one cudaMalloc (in step 1,
        # where memory stops growing) and nothing after; the costs file sets its latency
        rows = ["Thread,Time,Action,Pointer,Size,Stream"]
        for step in range(3):
            rows.append(f"1,00:00:00.00000{2 * step + 1},allocate,0x1000,31457280,0x0")
            rows.append(f"1,00:00:00.00000{2 * step + 2},free,0x1000,31457280,0x0")
        trace = self.csv("\n".join(rows) + "\n")
        costs = self.csv("# per call, per MiB (microseconds)\ncudaMalloc 7 1\n")
        r = replay("--json", "--conf", "pytorch", "--driver-costs", costs, "--steps", "3", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = json.loads(r.stdout)
        self.assertEqual(d["device_calls"], 1)
        self.assertAlmostEqual(d["driver_ms_growth"], 0.037)  # 7 us + 30 MiB x 1 us
        self.assertEqual(d["growth_events"], 1)
        self.assertAlmostEqual(d["driver_ms_after_growth"], 0)
        self.assertEqual((d["steady_steps"], d["driver_ms_per_step"]), (2, 0))
        # the defaults: the H100's points (tests/data/driver-costs/h100.txt), 30 MiB on the
        # line between the points at 20 and 32 MiB
        d = json.loads(replay("--json", "--conf", "pytorch", trace).stdout)
        self.assertAlmostEqual(d["driver_ms"], (58.935 + (55.510 - 58.935) * 10 / 12) / 1000,
                               places=3)
        self.assertNotIn("driver_ms_per_step", d)
        # the H200's points by name, measured at 2 and 20 MiB: 30 MiB priced as a call of
        # 20 MiB and one of 10 MiB (on the line between 2 and 20 MiB)
        def at(small, large, mib):
            return large * (mib // 20) + (small + (large - small) * ((mib % 20) - 2) / 18
                                          if mib % 20 else 0)
        d = json.loads(replay("--json", "--conf", "pytorch", "--driver-costs", "h200",
                              trace).stdout)
        self.assertAlmostEqual(d["driver_ms"], at(36.463, 36.972, 30) / 1000, places=3)
        # the published A100 figures, by name: 50 us a cudaMalloc, whatever its size
        d = json.loads(replay("--json", "--conf", "pytorch", "--driver-costs", "a100",
                              trace).stdout)
        self.assertAlmostEqual(d["driver_ms"], 0.050)
        # handle_policy:page: growth reserves the pool's range, creates and maps 15 handles of
        # 2 MiB and grants access to all 30 MiB in one call, priced as 15 grants of one handle
        # (what a GPU charges); the pages stay cached, so later steps cost nothing
        page = "defragment:True,handle_policy:page"
        d = json.loads(replay("--json", "--steps", "3", "--conf", page, trace).stdout)
        self.assertEqual(d["driver_ms_per_step"], 0)
        self.assertAlmostEqual(d["driver_ms_growth"], (2.889 + 15 * (13.653 + 1.188 + 33.455))
                               / 1000, places=3)
        d = json.loads(replay("--json", "--steps", "3", "--conf", page,
                              "--driver-costs", "h200", trace).stdout)
        self.assertAlmostEqual(d["driver_ms_growth"], (1.482 + 15 * (6.972 + 0.593 + 22.0))
                               / 1000, places=3)
        # defragment:True (coarse handles): a handle of 20 MiB and one of 10 MiB (10 MiB on the
        # line between the points at 8 and 16 MiB), created, mapped and granted each
        def h100(small, large):
            return small + (large - small) * 2 / 8
        d = json.loads(replay("--json", "--steps", "3", "--conf", "defragment:True",
                              trace).stdout)
        self.assertEqual(d["driver_ms_per_step"], 0)
        self.assertAlmostEqual(d["driver_ms_growth"],
                               (2.889 + 12.292 + h100(12.153, 14.176) + 1.014 + h100(1.102, 1.109)
                                + 29.051 + h100(28.855, 30.817)) / 1000, places=3)
        # with the A100's figures, measured at 2 MiB only, the grant costs 15 of 2 MiB
        d = json.loads(replay("--json", "--steps", "3", "--conf", page,
                              "--driver-costs", "a100", trace).stdout)
        self.assertAlmostEqual(d["driver_ms_growth"], 0.019 + 15 * (0.19332 + 0.00145 + 0.03599),
                               places=3)

    def test_repeat_makes_steps(self):
        # a step: a 4 MiB parameter allocated and never freed, a free of a block from before the
        # trace (skipped), and a 30 MiB temporary allocated and freed
        rows = ["Thread,Time,Action,Pointer,Size,Stream",
                "1,00:00:00.000001,allocate,0x1000,4194304,0x0",
                "1,00:00:00.000002,free,0x9000,1048576,0x0",
                "1,00:00:00.000003,allocate,0x2000,31457280,0x0",
                "1,00:00:00.000004,free,0x2000,31457280,0x0"]
        trace = self.csv("\n".join(rows) + "\n")
        r = replay("--json", "--conf", "pytorch", "--repeat", "3", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = json.loads(r.stdout)
        # the parameter once, the temporary and its free in every step
        self.assertEqual((d["events"], d["allocations"], d["frees"]), (7, 4, 3))
        self.assertEqual(d["peak_allocated_bytes"], (4 << 20) + (30 << 20))
        # 3 steps, memory stops growing in the first: two steady steps without driver time
        self.assertEqual((d["steady_steps"], d["driver_ms_per_step"]), (2, 0))
        self.assertEqual((d["device_calls_last_step"], d["driver_ms_last_step"]), (0, 0))
        # under PyTorch's policy the first step's calls are all the driver calls there are
        self.assertEqual(d["device_calls_growth"], d["device_calls"])
        one = json.loads(replay("--json", "--conf", "pytorch", trace).stdout)
        self.assertEqual(one["peak_reserved_bytes"], d["peak_reserved_bytes"])
        for bad in ("0", "x"):
            r = replay("--repeat", bad, trace)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("--repeat: ", r.stderr)
        r = replay("--repeat", "3", "--steps", "2", trace)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--steps 2 disagrees", r.stderr)

    def test_bad_driver_costs_and_steps(self):
        trace = os.path.join(TRACES, "eor-nn-snapshot.pickle")
        costs = self.csv("cuMemCreate 193\ncuMemMap fast\n")
        r = replay("--driver-costs", costs, trace)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(), f"tessera-replay: --driver-costs: {costs}: line 2: "
                         "'fast' is not a number of microseconds (a plain decimal from 0 to 1e9)")
        r = replay("--driver-costs", "/nonexistent", trace)
        self.assertEqual((r.returncode, r.stderr.strip()), (2, "tessera-replay: --driver-costs: "
                         "/nonexistent: No such file or directory"))
        for bad in ("0", "-3", "2x", ""):
            r = replay("--steps", bad, trace)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("--steps: ", r.stderr)

    def test_bad_configuration(self):
        r = replay("--conf", "max_split_size_mb:10", os.path.join(TRACES, "eor-nn-snapshot.pickle"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("key 'max_split_size_mb' at position 0", r.stderr)



class Costs(unittest.TestCase):
    """tessera-costs on the simulated device: it times the calls it names (the simulator's
    cuMemAlloc/cuMemFree sleep TESSERA_SIM_ALLOC_DELAY_US each, nothing else does), and
    tessera-replay reads what it writes."""

    COSTS = os.path.join(BUILD, "tools", "tessera-costs")
    SIM = os.path.join(BUILD, "tests", "sim")
    DELAY_US = 20000

    def run_costs(self, *args, delay=0):
        if not os.path.exists(os.path.join(self.SIM, "libcuda.so.1")):
            self.skipTest("the simulated device is not built")
        env = dict(os.environ, LD_LIBRARY_PATH=self.SIM, TESSERA_SIM_MEMORY="1G",
                   TESSERA_SIM_ALLOC_DELAY_US=str(delay))
        return subprocess.run([self.COSTS, *args], capture_output=True, text=True, env=env,
                              timeout=120)

    def read_costs(self, path):
        """{call: {MiB: us}} for measured points, {call: us} for one figure."""
        points, fixed = {}, {}
        with open(path) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                name, *values = line.split()
                if ":" in values[0]:
                    points[name] = {int(v.split(":")[0].rstrip("M")): float(v.split(":")[1])
                                    for v in values}
                else:
                    self.assertEqual(len(values), 1, line)
                    fixed[name] = float(values[0])
        return points, fixed

    def test_measures_each_call_and_replay_reads_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "costs.txt")
            r = self.run_costs("--reps", "3", "-o", path, delay=self.DELAY_US)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
            points, fixed = self.read_costs(path)
            self.assertEqual(sorted(points), sorted([
                "cudaMalloc", "cudaFree", "cuMemCreate", "cuMemRelease", "cuMemMap",
                "cuMemSetAccess", "cuMemUnmap"]))
            self.assertEqual(sorted(fixed), sorted([
                "cuMemAddressReserve", "cuMemAddressFree", "cuCtxSynchronize", "cuEventRecord"]))
            # every size from 2 MiB while 3 handles fit in half of the 1 GiB device: to 128 MiB
            for name, at in points.items():
                self.assertEqual(sorted(at), [2, 4, 8, 16, 20, 32, 64, 128], name)
            # the delayed calls cost at least the delay; an undelayed one less than them
            self.assertGreaterEqual(points["cudaMalloc"][2], self.DELAY_US)
            self.assertGreaterEqual(points["cudaFree"][128], self.DELAY_US)
            self.assertLess(points["cuMemCreate"][2], points["cudaMalloc"][2])
            # the replay prices PyTorch's one 30 MiB cudaMalloc on the line between 20 and 32 MiB
            trace = os.path.join(d, "t.csv")
            with open(trace, "w") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:00.000001,allocate,0x1000,31457280,0x0\n"
                        "1,00:00:00.000002,free,0x1000,31457280,0x0\n")
            r = replay("--json", "--conf", "pytorch", "--driver-costs", path, trace)
            self.assertEqual(r.returncode, 0, r.stderr)
            a, b = points["cudaMalloc"][20], points["cudaMalloc"][32]
            self.assertAlmostEqual(json.loads(r.stdout)["driver_ms"],
                                   (a + (b - a) * 10 / 12) / 1000, places=3)
            # --max-size: the sizes stop there
            r = self.run_costs("--reps", "3", "--max-size", "8M", "-o", path)
            self.assertEqual((r.returncode, r.stderr), (0, ""))
            points, _ = self.read_costs(path)
            self.assertEqual(sorted(points["cuMemSetAccess"]), [2, 4, 8])

    def test_bad_arguments(self):
        r = self.run_costs("--reps", "1")
        self.assertEqual((r.returncode, r.stderr.strip()),
                         (2, "tessera-costs: --reps: '1' is not a number from 3 to 1000"))
        for bad in ("1M", "2K", "2", "2GB", "2G", "x"):
            r = self.run_costs("--max-size", bad)
            self.assertEqual((r.returncode, r.stderr.strip()), (2, "tessera-costs: --max-size: "
                             f"'{bad}' is not a size from 2M to 1G"), bad)
        r = self.run_costs("--device", "3")
        self.assertEqual((r.returncode, r.stderr.strip()),
                         (2, "tessera-costs: --device 3: there is 1 device"))
        with tempfile.TemporaryDirectory() as d:
            r = self.run_costs("--reps", "3", "-o", os.path.join(d, "no", "such", "dir"))
            self.assertEqual(r.returncode, 1)
            self.assertIn("No such file or directory", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
