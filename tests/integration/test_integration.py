#!/usr/bin/env python3
"""Integration tests: libtessera.so preloaded into unmodified CUDA programs on the simulated device.

Every test asserts on data and counters, not only on exit codes: the programs verify every byte
they wrote, the simulator reports the driver calls that reached it (TESSERA_SIM_REPORT), and
tessera's own counters are read from its stats page (TESSERA_STATS_KEEP=1 keeps it after exit).

Run one test:  test_integration.py TestName   (meson registers each test separately)
Environment:   TS_BUILD (the build directory), TS_SOURCE (the source directory).
"""
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import unittest_main

BUILD = os.environ.get("TS_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SOURCE = os.environ.get("TS_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
SHIM = os.path.join(BUILD, "shim", "libtessera.so")
SIM = os.path.join(BUILD, "tests", "sim")
PROGRAMS = os.path.join(BUILD, "tests", "programs")
PROBES = os.path.join(BUILD, "tests", "integration")
STAT = os.path.join(BUILD, "tools", "tessera-stat")
REPLAY = os.path.join(BUILD, "tools", "tessera-replay")
MiB = 1 << 20


class Run:
    """One finished program run."""

    def __init__(self, proc, report, stats):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        self.result = dict(f.split("=", 1) for f in lines[-1].split()[1:] if "=" in f) if lines else {}
        self.sim = report  # per-device dicts from the simulator
        self.stats = stats  # tessera's counters for device 0, or None

    def __repr__(self):
        return f"rc={self.rc} result={self.result}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-2000:]}"


class Env:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-it-")
        self.stats_dir = os.path.join(self.tmp, "stats")
        os.mkdir(self.stats_dir)

    def base(self, memory="512M", preload=True, conf=None, extra=None):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith(("TESSERA_", "PYTORCH_")) and k not in ("TESSERA_TEST_SEED",):
                del env[k]
        env["LD_LIBRARY_PATH"] = SIM + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        # sanitizer builds: the runtime must come first in every process (the simulator and the
        # shim are instrumented, the programs are not)
        runtime = os.environ.get("TS_SANITIZER_RUNTIME", "")
        if runtime:
            env["LD_PRELOAD"] = runtime
            env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
        env["TESSERA_SIM_MEMORY"] = memory
        env["TESSERA_STATS_DIR"] = self.stats_dir
        env["TESSERA_SIM_REPORT"] = os.path.join(self.tmp, "sim-report.json")
        if preload:
            env["LD_PRELOAD"] = (runtime + ":" if runtime else "") + SHIM
            env["TESSERA_STATS_KEEP"] = "1"
        if conf is not None:
            env["TESSERA_ALLOC_CONF"] = conf
        if extra:
            env.update(extra)
        return env

    def run(self, argv, memory="512M", preload=True, conf=None, extra=None, timeout=120, stdin=None):
        for f in os.listdir(self.stats_dir):
            os.unlink(os.path.join(self.stats_dir, f))
        report = os.path.join(self.tmp, "sim-report.json")
        if os.path.exists(report):
            os.unlink(report)
        env = self.base(memory, preload, conf, extra)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, input=stdin)
        sim = [json.loads(l) for l in open(report)] if os.path.exists(report) else []
        stats = self.page_stats() if preload else None
        run = Run(proc, sim, stats)
        # Every run is also a check of stream order: no copy or memset of queued work meets
        # bytes another stream's work uses unordered (tests/sim/README.md, "The device's
        # order"), except where reuse is made unsafe on purpose.
        races = sum(d.get("races", 0) for d in sim)
        if races and not (conf and "reuse_fence:none" in conf):
            raise AssertionError(f"{races} unordered accesses on the device: {argv} {conf}\n{run}")
        return run

    def page_slots(self):
        """Every (device, context) slot of the one page in the stats directory, by slot index."""
        pages = [f for f in os.listdir(self.stats_dir) if f.startswith("tessera.")]
        if len(pages) != 1:
            return None
        pid = pages[0].split(".", 1)[1]
        out = subprocess.run([STAT, "--dir", self.stats_dir, "--json", pid], capture_output=True, text=True)
        if out.returncode != 0:
            return None
        doc = json.loads(out.stdout)[pid]
        return {k: v for k, v in doc.items() if isinstance(v, dict)}

    def page_stats(self, pid=None):
        pages = [f for f in os.listdir(self.stats_dir) if f.startswith("tessera.")]
        if pid is not None:
            pages = [f"tessera.{pid}"] if f"tessera.{pid}" in pages else []
        if not pages:
            return None
        pid = pages[-1].split(".", 1)[1]
        out = subprocess.run([STAT, "--dir", self.stats_dir, "--json", pid], capture_output=True, text=True)
        if out.returncode != 0:
            return None
        doc = json.loads(out.stdout)[pid]
        devs = [v for v in doc.values() if isinstance(v, dict)]
        return devs[0] if devs else None


# PyTorch's policy, for tests that pin its segments and calls (tessera's default is another)
PYTORCH = "expandable_segments:False"


def prog(name, *args):
    return [os.path.join(PROGRAMS, name)] + list(args)


def probe(name):
    return [os.path.join(PROBES, name)]


def stop(pid):
    """SIGSTOP pid, and wait until every thread of it is stopped (a thread may still be
    running for a moment after kill() returns)."""
    os.kill(pid, signal.SIGSTOP)
    for _ in range(10000):
        tasks = os.listdir(f"/proc/{pid}/task")
        states = []
        for t in tasks:
            try:
                text = open(f"/proc/{pid}/task/{t}/stat").read()
                states.append(text[text.rindex(")") + 2])
            except OSError:
                pass
        if states and all(st in "tT" for st in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop")


class Peer:
    """A CUDA process driven line by line (tests/integration/ipc_peer): one command, one answer.
    uid: run as that user (the test runs as root); nofile: its descriptor limit; extra: more
    environment."""

    def __init__(self, env, conf=None, preload=True, memory="1G", uid=None, nofile=None, extra=None):
        def drop():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
        self.proc = subprocess.Popen([os.path.join(PROBES, "ipc_peer")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env.base(memory, preload, conf, extra), preexec_fn=drop)

    def tell(self, line):
        """Send one command; its answer is read with answer()."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout=120):
        """The next answer line, split into words, or None when none came within timeout s."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        return line.split() if line else None

    def ask(self, line):
        """The answer to one command, split into words."""
        self.tell(line)
        answer = self.answer()
        if not answer:
            self.proc.kill()
            raise AssertionError(f"no answer to {line!r}: {self.proc.stderr.read()}")
        return answer

    def value(self, line):
        """The second word of the answer (its value), as an int when it is one."""
        word = self.ask(line)[1]
        return int(word, 0) if re.fullmatch(r"-?(0x)?[0-9a-f]+", word) else word

    def alloc(self, size):
        answer = self.ask(f"alloc {size}")
        assert answer[0] == "ok", answer
        return int(answer[1]), int(answer[2], 16)

    def export(self, index):
        answer = self.ask(f"export {index}")
        assert answer[0] == "handle", answer
        return answer[1]

    def open(self, handle):
        """(error name, index of the imported block)"""
        answer = self.ask(f"open {handle}")
        return answer[1], int(answer[2])

    def fds_settle(self, want, tries=600):
        """The descriptor count once it is want, or the last one seen: what the channel thread
        does on a connection's close happens after the close, 100 ms x tries at most."""
        for _ in range(tries):
            n = self.value("fds")
            if n == want:
                return n
            time.sleep(0.1)
        return n

    def quit(self):
        """stderr, once the process has exited (rc 0 asserted)."""
        out, err = self.proc.communicate("quit\n", timeout=120)
        assert self.proc.returncode == 0, (self.proc.returncode, out, err)
        return err

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=120)  # not its pipes: a child it forked may hold them


class Base(unittest.TestCase):
    def setUp(self):
        self.env = Env()
        # the stats pages, reports and traces of a test go with it, also when it fails
        self.addCleanup(shutil.rmtree, self.env.tmp, ignore_errors=True)

    def ok(self, run, status="ok", rc=0):
        self.assertEqual(run.rc, rc, run)
        self.assertEqual(run.result.get("status"), status, run)

    def sim_allocs(self, run):
        """Device allocations the (simulated) driver made: cuMemAlloc, and for memory tessera maps
        itself one cuMemSetAccess per growth or stitch, however many handles it maps (what
        num_device_alloc counts)."""
        return sum(d.get("alloc_calls", 0) + d.get("set_access_calls", 0) for d in run.sim)

    def races(self, run):
        """Copies and memsets of queued work on bytes another stream's work touched with no
        order between them, found by the simulator from the order the program and tessera set
        up (tests/sim/README.md, "The device's order"): a reuse of memory still in use shows
        here whatever the host's load, where the bytes only show it when the schedule loses."""
        self.assertTrue(run.sim, run)
        return sum(d["races"] for d in run.sim)


class SamplePrograms(Base):
    """Every sample program gives the same answer with and without tessera."""

    CASES = [
        ("seed_every5th", ["--unit", "8M", "--count", "39", "--request", "16M"], "512M"),
        ("seed_middle", ["--first", "16M", "--middle", "32M", "--last", "16M", "--request", "48M"], "512M"),
        ("seed_even", ["--unit", "2M", "--count", "40", "--request", "20M"], "512M"),
        ("seed_cyclic", ["--min", "12M", "--max", "32M"], "512M"),
        ("churn", ["--threads", "2", "--iters", "300", "--max-size", "4M"], "512M"),
        ("meminfo", ["--unit", "16M", "--count", "4"], "512M"),
        ("device_reset", ["--unit", "4M"], "512M"),
        ("fork_child", ["--unit", "4M"], "512M"),
        ("fork_child", ["--unit", "4M", "--child-cuda"], "512M"),
        ("driver_api", ["--count", "120", "--max-size", "64K"], "512M"),
        ("driver_api", ["--count", "120", "--max-size", "64K", "--own-context"], "1G"),
        ("driver_linked", ["--count", "120", "--max-size", "64K"], "512M"),
        ("reuse_race", ["--size", "8M", "--rounds", "3"], "512M"),
    ]

    def test_same_answer(self):
        for name, args, mem in self.CASES:
            if not os.path.exists(os.path.join(PROGRAMS, name)):
                continue
            with self.subTest(program=name, args=args):
                plain = self.env.run(prog(name, *args), memory=mem, preload=False)
                shim = self.env.run(prog(name, *args), memory=mem)
                self.ok(plain)
                self.ok(shim)
                # tessera served them: its counters saw every allocation the program made
                self.assertIsNotNone(shim.stats, shim)
                self.assertGreater(shim.stats["num_alloc_calls"], 0, shim)
                self.assertEqual(shim.stats["allocated_bytes.all.current"], 0, shim)


class BadInput(Base):
    def test_identical_to_real_runtime(self):
        expected = open(os.path.join(SOURCE, "tests", "programs", "expected", "bad_input.cuda13-h100.txt")).read()
        plain = self.env.run(prog("bad_input"), preload=False)
        shim = self.env.run(prog("bad_input"))
        self.assertEqual(plain.stdout, expected)
        self.assertEqual(shim.stdout, expected, shim)
        # the pool stayed intact and counted what it refused
        self.assertEqual(shim.stats["num_invalid_frees"], 2, shim)
        self.assertEqual(shim.stats["allocation.all.current"], 0, shim)


class DriverCalls(Base):
    def test_calls_avoided(self):
        args = ["--threads", "4", "--iters", "1500", "--max-size", "4M"]
        plain = self.env.run(prog("churn", *args), preload=False)
        shim = self.env.run(prog("churn", *args))
        self.ok(plain)
        self.ok(shim)
        allocs = int(shim.result["allocs"])
        self.assertEqual(self.sim_allocs(plain), allocs)  # without tessera: one cudaMalloc each
        self.assertLessEqual(self.sim_allocs(shim), allocs // 50, shim)  # with: at least 50x fewer
        self.assertEqual(shim.stats["num_alloc_calls"], allocs)
        self.assertEqual(shim.stats["num_device_alloc"], self.sim_allocs(shim))

    def test_caching_off_passes_through(self):
        args = ["--threads", "1", "--iters", "200", "--max-size", "1M"]
        run = self.env.run(prog("churn", *args), conf="caching:False")
        self.ok(run)
        self.assertEqual(self.sim_allocs(run), int(run.result["allocs"]))


class Threads(Base):
    def test_churn_16_threads_streams(self):
        run = self.env.run(prog("churn", "--threads", "16", "--iters", "150", "--max-size", "1M", "--streams"),
                           memory="1G", extra={"TESSERA_SIM_OP_DELAY_US": "20"})
        self.ok(run)
        self.assertEqual(int(run.result["verified"]), int(run.result["allocs"]))
        self.assertEqual(run.stats["num_alloc_calls"], int(run.result["allocs"]))


class UnsafeReuse(Base):
    ARGS = ["--size", "8M", "--copies", "4", "--rounds", "4"]
    SLOW = {"TESSERA_SIM_OP_DELAY_US": "3000"}

    def test_naive_reuse_races(self):
        # reuse_fence:none reuses a freed block at once, as a cache that ignores streams would:
        # the late copy on the non-blocking stream and the new owner's memset meet on the same
        # bytes with nothing ordering them (every round; the bytes show it when the copy lands
        # late, as it usually does with slow copies)
        run = self.env.run(prog("reuse_race", *self.ARGS), conf="reuse_fence:none", extra=self.SLOW)
        self.assertGreaterEqual(self.races(run), 4, run)
        self.assertIn(run.result.get("status"), ("ok", "corrupt"), run)

    def test_fences_keep_it_safe(self):
        for conf in ("reuse_fence:events", "reuse_fence:sync", None):
            with self.subTest(conf=conf):
                run = self.env.run(prog("reuse_race", *self.ARGS), conf=conf, extra=self.SLOW)
                self.ok(run)
                self.assertEqual(self.races(run), 0, run)
                self.assertEqual(run.result["corrupt_rounds"], "0", run)
                if conf:
                    self.assertGreater(run.stats["num_fences_recorded"], 0, run)


class StreamOrder(Base):
    """reuse_fence:order (the default) reuses a freed block at once, and orders the new owner's
    work after the old work on the device, whatever streams and threads each used."""
    UNSAFE = ["nb-to-legacy", "legacy-to-nb", "two-blocking", "new-stream", "ptds-threads",
              "host-func", "graph"]
    ARGS = ["--size", "8M", "--copies", "4", "--rounds", "4"]
    SLOW = {"TESSERA_SIM_OP_DELAY_US": "3000"}

    def run_variant(self, variant, conf=None):
        return self.env.run(prog("reuse_order", "--variant", variant, *self.ARGS), conf=conf,
                            extra=self.SLOW)

    def test_one_queue_reuses_with_no_device_call(self):
        # the host runs ahead of a device busy on the legacy stream: every round reuses A at
        # once, the host never waits, and the device is asked for nothing
        run = self.run_variant("legacy")
        self.ok(run)
        self.assertEqual(run.result["reused"], "4", run)
        self.assertEqual(run.stats["num_fences_recorded"], 0, run)
        self.assertEqual(run.stats["num_fence_waits"], 0, run)

    def test_unsafe_variants_keep_their_bytes(self):
        for variant in self.UNSAFE:
            with self.subTest(variant=variant):
                run = self.run_variant(variant)
                self.ok(run)
                self.assertEqual(self.races(run), 0, run)
                self.assertEqual(run.result["corrupt_rounds"], "0", run)
                self.assertEqual(run.result["reused"], "4", run)  # reused, not new memory
                self.assertEqual(run.stats["num_fence_waits"], 0, run)  # the host never waited
                self.assertGreater(run.stats["num_fences_recorded"], 0, run)

    def test_replay_matches_live_run(self):
        # tessera-replay models no fences: with stream order a live single-stream run reserves
        # exactly what the replay of its trace says. With reuse_fence:events it reserves at
        # least that: more when a freed block's event is still pending at the next request,
        # which depends on how far the device got, so only the bound is load-proof
        peaks = {}
        for conf in ("", "reuse_fence:events"):
            trace = os.path.join(self.env.tmp, "order.csv")
            run = self.env.run(prog("train_loop", "--steps", "8"), conf=conf,
                               extra=dict(self.SLOW, TESSERA_SIM_OP_DELAY_US="200", TESSERA_TRACE=trace))
            self.ok(run)
            out = subprocess.run([REPLAY, "--json", trace],
                                 capture_output=True, text=True, check=True)
            peaks[conf] = (run.stats["reserved_bytes.all.peak"], json.loads(out.stdout)["peak_reserved_bytes"])
        live, replayed = peaks[""]
        self.assertEqual(live, replayed, peaks)
        self.assertGreaterEqual(peaks["reuse_fence:events"][0], replayed, peaks)

    def test_unconditional_reuse_races_in_every_variant(self):
        # with reuse made unconditional each variant's new owner meets the late copies on the
        # same bytes, unordered (the bytes usually show it too: status corrupt)
        for variant in self.UNSAFE:
            with self.subTest(variant=variant):
                run = self.run_variant(variant, conf="reuse_fence:none")
                self.assertGreater(self.races(run), 0, run)
                self.assertIn(run.result.get("status"), ("ok", "corrupt"), run)


class OutOfMemory(Base):
    def test_release_and_retry(self):
        # 39 x 10 MiB (each its own segment), every 5th freed (cached), then 20 MiB on a device
        # that only fits it once the cached segments go back: succeeds through the final retry,
        # counted once
        run = self.env.run(prog("seed_every5th", "--unit", "10M", "--count", "39", "--request", "20M"),
                           memory="400M", conf=PYTORCH)
        self.ok(run)
        self.assertEqual(run.stats["num_alloc_retries"], 1, run)
        self.assertEqual(run.stats["num_ooms"], 0, run)
        self.assertEqual(run.stats["num_device_free"], 7, run)

    def test_oom_error_and_report(self):
        run = self.env.run(prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                                "--request", "512M"), memory="256M")
        self.ok(run, status="oom", rc=2)
        self.assertEqual(run.stats["num_ooms"], 1, run)
        self.assertIn("tessera: out of memory on device 0: tried to allocate 512.00 MiB", run.stderr)
        self.assertEqual(run.stderr.count("out of memory on device"), 1)
        # under the default (defragment, stitch_min_block_mb at its least) the advice names no
        # key: the device is what is too small
        self.assertIn("the device is full: the program needs less memory or a larger device",
                      run.stderr)
        self.assertNotIn("stitch_min_block_mb", run.stderr)
        # a cap below the device: raising it is advice that can be followed
        run = self.env.run(prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                                "--request", "160M"), memory="512M", conf="memory_limit:256M")
        self.ok(run, status="oom", rc=2)
        self.assertIn("raise memory_limit or per_process_memory_fraction", run.stderr)
        # the same cap as large as the device: the device is full
        run = self.env.run(prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                                "--request", "160M"), memory="256M", conf="memory_limit:256M")
        self.ok(run, status="oom", rc=2)
        self.assertNotIn("memory_limit", run.stderr.split("out of memory on device")[1])

    def test_memory_limit(self):
        run = self.env.run(prog("meminfo", "--unit", "16M", "--count", "2"), conf="memory_limit:64M")
        self.ok(run)
        self.assertEqual(int(run.result["total"]), 64 * MiB)
        self.assertEqual(int(run.result["free0"]), 64 * MiB)
        self.assertEqual(int(run.result["free1"]), 32 * MiB)
        over = self.env.run(prog("meminfo", "--unit", "48M", "--count", "2"), conf="memory_limit:64M")
        self.assertEqual(over.rc, 1, over)  # its second cudaMalloc fails: the cap is the device
        self.assertIn("cap 64.00 MiB", over.stderr)


class MemInfo(Base):
    def test_cache_counts_as_free(self):
        run = self.env.run(prog("meminfo", "--unit", "16M", "--count", "4"))
        self.ok(run)
        self.assertEqual(int(run.result["free2"]), int(run.result["free0"]))  # cached = free
        self.assertEqual(int(run.result["free0"]) - int(run.result["free1"]), 64 * MiB)
        self.assertGreater(run.stats["reserved_bytes.all.current"], 0)  # it is still cached


class Defragment(Base):
    """The seed cases PyTorch's policy cannot serve, on the same device size."""

    def test_seed_even(self):
        # 100 x 2 MiB, the even ones freed: 100 MiB free in 2 MiB holes; 50 MiB asked for on a
        # device that holds 220 MiB
        args = ["--unit", "2M", "--count", "100", "--request", "50M"]
        expect = {PYTORCH: 2, "expandable_segments:True": 2,
                  "expandable_segments:True,expandable_page_mb:2": 0, "defragment:True": 0,
                  None: 0}  # tessera's default serves it
        for conf, rc in expect.items():
            with self.subTest(conf=conf):
                run = self.env.run(prog("seed_even", *args), memory="220M", conf=conf)
                self.assertEqual(run.rc, rc, run)

    def test_seed_cyclic(self):
        # 4-16 MiB tensors: those under 10 MiB share 20 MiB segments (PyTorch's rule), so freed
        # tensors leave holes inside segments that cannot be released
        args = ["--min", "4M", "--max", "16M"]
        for conf, rc in ((PYTORCH, 2), ("defragment:True", 0), (None, 0)):
            with self.subTest(conf=conf):
                run = self.env.run(prog("seed_cyclic", *args), memory="256M", conf=conf)
                self.assertEqual(run.rc, rc, run)

    def seed_even_50m(self, memory, conf):
        return self.env.run(prog("seed_even", "--unit", "2M", "--count", "100", "--request", "50M"),
                            memory=memory, conf=conf)

    def test_stitching_serves_without_new_memory(self):
        # the 50 MiB request is stitched from the holes' pages once their frees are fenced:
        # no release-and-retry, no OOM, data intact. With stitch_when:pressure the segment first
        # grows until the device is full, then stitches the same way.
        for conf in ("defragment:True", "defragment:True,stitch_when:pressure"):
            with self.subTest(conf=conf):
                run = self.seed_even_50m("220M", conf)
                self.ok(run)
                self.assertGreater(run.stats["num_stitches"], 0, run)
                self.assertEqual(run.stats["num_alloc_retries"], 0, run)

    def test_stitch_under_pressure_only(self):
        # with room to grow, stitch_when:pressure never stitches
        roomy = self.seed_even_50m("512M", "defragment:True,stitch_when:pressure")
        self.ok(roomy)
        self.assertEqual(roomy.stats["num_stitches"], 0, roomy)

    def test_one_grant_per_mapping(self):
        # a growth maps its 2 MiB handles (handle_policy:page) back to back and grants access to
        # all of them in one cuMemSetAccess, and so does a stitch: as many grants as device
        # allocations (growths and stitches), far fewer than the handles mapped (2 MiB requests
        # one after another grow in batches of 20 MiB with growth_batch_mb:20)
        cases = [("220M", "defragment:True,handle_policy:page,growth_batch_mb:20",
                  ["seed_even", "--unit", "2M", "--count", "100", "--request", "50M"]),
                 ("512M", "defragment:True,handle_policy:page",
                  ["seed_middle", "--first", "16M", "--middle", "32M", "--last", "16M",
                   "--request", "48M"])]
        for memory, conf, argv in cases:
            with self.subTest(program=argv[0]):
                run = self.env.run(prog(*argv), memory=memory, conf=conf)
                self.ok(run)
                sim = run.sim[0]
                self.assertEqual(sim["set_access_calls"], run.stats["num_device_alloc"], run)
                self.assertGreaterEqual(sim["map_calls"], 5 * sim["set_access_calls"], run)

    def test_stitched_churn_data_integrity(self):
        run = self.env.run(prog("churn", "--threads", "4", "--iters", "300", "--max-size", "16M",
                                "--large-pct", "60", "--live", "16", "--tolerate-oom"),
                           memory="320M", conf="defragment:True,stitch_max_ranges:16")
        self.ok(run)
        self.assertEqual(int(run.result["verified"]), int(run.result["allocs"]))
        self.assertGreater(run.stats["num_stitches"], 0, run)


class Lifecycle(Base):
    def test_device_reset(self):
        run = self.env.run(prog("device_reset", "--unit", "4M", "--count", "8"))
        self.ok(run)
        self.assertEqual(run.stats["num_invalid_frees"], 0, run)
        self.assertEqual(run.stats["allocation.all.current"], 0, run)
        for dev in run.sim:  # no double free reached the driver
            self.assertEqual(dev.get("free_calls", 0) <= dev.get("alloc_calls", 0), True, run)

    def test_fork(self):
        env = self.env.base()
        p = subprocess.Popen(probe("fork_pause"), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            while line and not line.startswith("CHILD_DONE"):
                line = p.stdout.readline()
            self.assertTrue(line.startswith("CHILD_DONE"), line)
            pid = int(line.split()[1])
            pages = os.listdir(self.env.stats_dir)
            self.assertEqual(pages, [f"tessera.{pid}"])  # the child made none and removed none
            st = self.env.page_stats(pid)
            self.assertEqual(st["allocated_bytes.all.current"], 8 * MiB)
            p.stdin.write("go\n")
            p.stdin.flush()
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("RESULT status=ok", out)


class StatsPage(Base):
    def test_live_counters_and_cleanup(self):
        env = self.env.base(conf=PYTORCH)  # the numbers below are PyTorch's segments
        del env["TESSERA_STATS_KEEP"]
        p = subprocess.Popen(probe("stats_probe"), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            self.assertTrue(line.startswith("READY"), line)
            pid = int(line.split()[1])
            st = self.env.page_stats(pid)
            self.assertEqual(st["allocation.all.current"], 5)
            self.assertEqual(st["allocated_bytes.large_pool.current"], 12 * MiB)
            self.assertEqual(st["allocated_bytes.small_pool.current"], 2 * 102400)
            self.assertEqual(st["requested_bytes.all.current"], 12 * MiB + 2 * 102400)
            self.assertEqual(st["reserved_bytes.large_pool.current"], 20 * MiB)
            self.assertEqual(st["reserved_bytes.small_pool.current"], 2 * MiB)
            self.assertEqual(st["segment.all.current"], 2)
            self.assertEqual(st["inactive_split_bytes.all.current"], 8 * MiB + 2 * MiB - 2 * 102400)
            table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True, text=True)
            self.assertEqual(table.returncode, 0, table.stderr)
            self.assertIn(str(pid), table.stdout)
            self.assertIn("stats_probe", table.stdout)
            prom = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus"], capture_output=True,
                                  text=True)
            want = f'tessera_allocated_bytes{{pid="{pid}",device="0",pool="all"'
            self.assertIn(want, prom.stdout)
            p.stdin.write("go\n")
            p.stdin.flush()
            line = p.stdout.readline()
            self.assertTrue(line.startswith("FREED"), line)
            st = self.env.page_stats(pid)
            self.assertEqual(st["allocation.all.current"], 0)
            self.assertEqual(st["num_free_calls"], 5)
            p.stdin.write("go\n")
            p.stdin.flush()
            p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0)
        self.assertEqual(os.listdir(self.env.stats_dir), [])  # removed at exit


class Configuration(Base):
    def test_strict_error_stops_before_main(self):
        run = self.env.run(prog("meminfo"), conf="max_split_size_mb:10")
        self.assertEqual(run.rc, 1)
        self.assertEqual(run.stdout, "")  # main never ran
        self.assertIn("tessera: TESSERA_ALLOC_CONF: key 'max_split_size_mb' at position 0: value '10'",
                      run.stderr)

    def test_strict_unknown_key(self):
        run = self.env.run(prog("meminfo"), conf="expandable_segmnets:True")
        self.assertEqual(run.rc, 1)
        self.assertIn("did you mean 'expandable_segments'", run.stderr)

    def test_pytorch_variable_is_lenient(self):
        run = self.env.run(prog("meminfo", "--unit", "4M"),
                           extra={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,turbo:1"})
        self.ok(run)
        self.assertIn("unknown key 'turbo'", run.stderr)
        self.assertIn("expandable_segments:True", self.env_page_config(run))

    def test_size_beyond_any_device_refused(self):
        # a size key whose bytes overflow (2^44 MiB wrapped the page to 0: SIGFPE at the first
        # cudaMalloc) or make no sense (a page of 2^32 MiB: every allocation "device is full")
        cases = [("expandable_page_mb", "17592186044416"), ("expandable_page_mb", "4294967296"),
                 ("expandable_page_mb", "1025"), ("max_non_split_rounding_mb", "17592186044416"),
                 ("max_split_size_mb", "17592186044416"), ("stitch_min_block_mb", "1099511627776")]
        for key, value in cases:
            with self.subTest(key=key, value=value):
                run = self.env.run(prog("meminfo", "--unit", "4M"), conf=f"{key}:{value}")
                self.assertEqual(run.rc, 1, run)
                self.assertEqual(run.stdout, "", run)  # main never ran
                self.assertEqual(run.stderr.count("tessera:"), 1, run.stderr)
                self.assertIn(f"key '{key}' at position 0: value '{value}' is too large", run.stderr)
                # the PyTorch variable: one warning, the value ignored, the program served
                run = self.env.run(prog("meminfo", "--unit", "4M"),
                                   extra={"PYTORCH_CUDA_ALLOC_CONF": f"{key}:{value}"})
                self.ok(run)
                self.assertIn(f"key '{key}' at position 0: value '{value}' is too large", run.stderr)
                self.assertIn("; ignored", run.stderr)
        # the largest page still served
        run = self.env.run(prog("meminfo", "--unit", "4M"), conf="expandable_page_mb:1024", memory="4G")
        self.ok(run)

    def test_contradiction_refused_in_strict_mode(self):
        run = self.env.run(prog("meminfo"), conf="defragment:True,expandable_segments:False")
        self.assertEqual(run.rc, 1)
        self.assertEqual(run.stdout, "")
        self.assertEqual(run.stderr.count("tessera:"), 1, run.stderr)
        self.assertIn("stitching:True (from defragment:True) needs expandable segments", run.stderr)

    def test_printed_configuration_is_the_one_in_force(self):
        # lenient: the contradiction is reported, expandable segments stay on (stitching needs
        # them), and that is what the verbose line, the device line and the stats page say
        run = self.env.run(prog("meminfo", "--unit", "4M"),
                           extra={"PYTORCH_CUDA_ALLOC_CONF":
                                  "defragment:True,expandable_segments:False,verbose:True"})
        self.ok(run)
        self.assertIn("needs expandable segments", run.stderr)
        said = [l for l in run.stderr.splitlines() if "configuration from PYTORCH_CUDA_ALLOC_CONF" in l]
        self.assertEqual(len(said), 1, run.stderr)
        self.assertIn("expandable_segments:True", said[0])
        self.assertIn("stitching:True", said[0])
        self.assertIn("expandable_segments:True", self.env_page_config(run))
        # defragment's page is the device's granularity (2 MiB, as on every CUDA device): one
        # effective configuration, the same in the verbose line, the page (--json) and on the
        # device, which therefore changed nothing (no "configuration in force" line)
        self.assertIn("expandable_page_mb:2,", said[0])
        self.assertIn("expandable_page_mb:2,", self.env_page_config(run))
        dev = [l for l in run.stderr.splitlines() if "device 0: configuration in force:" in l]
        self.assertEqual(dev, [], run.stderr)

    def env_page_config(self, run):
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--json"], capture_output=True, text=True)
        doc = json.loads(out.stdout)
        return " ".join(v.get("config", "") for v in doc.values())

    def test_cuda_malloc_async_backend_steps_aside(self):
        run = self.env.run(prog("churn", "--iters", "100", "--max-size", "1M"),
                           extra={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.ok(run)
        self.assertEqual(self.sim_allocs(run), int(run.result["allocs"]))


    def test_stepping_aside_still_warns_and_says_verbose(self):
        # caching:False and backend:cudaMallocAsync create no allocator: the warnings and the
        # verbose configuration line must not depend on one
        for var, conf in (("TESSERA_ALLOC_CONF", "caching:False,verbose:True"),
                          ("PYTORCH_CUDA_ALLOC_CONF",
                           "backend:cudaMallocAsync,max_split_size_mb:100,verbose:True")):
            with self.subTest(conf=conf):
                run = self.env.run(prog("churn", "--iters", "20", "--max-size", "1M"),
                                   extra={var: conf})
                self.ok(run)
                self.assertEqual(self.sim_allocs(run), int(run.result["allocs"]))  # uncached
                self.assertEqual(run.stderr.count(f"tessera: configuration from {var}: "), 1, run)
                if "cudaMallocAsync" in conf:
                    self.assertIn("backend:cudaMallocAsync ignores max_split_size_mb", run.stderr)


class Recording(Base):
    def test_trace_round_trip(self):
        trace = os.path.join(self.env.tmp, "trace.csv")
        run = self.env.run(prog("churn", "--threads", "2", "--iters", "300", "--max-size", "2M"),
                           extra={"TESSERA_TRACE": trace})
        self.ok(run)
        rows = open(trace).read().splitlines()
        # RMM's columns, then tessera's Note (what the run ran on; RMM's parser ignores it)
        self.assertEqual(rows[0], "Thread,Time,Action,Pointer,Size,Stream,Note")
        # the stream as RMM's logging adaptor writes it: hex without a prefix
        self.assertEqual({r.split(",")[5] for r in rows[1:]}, {"0"})
        allocs = [r for r in rows[1:] if r.split(",")[2] == "allocate"]
        frees = [r for r in rows[1:] if r.split(",")[2] == "free"]
        self.assertEqual(len(allocs), int(run.result["allocs"]))
        self.assertEqual(len(frees), int(run.result["frees"]))
        sizes = {}
        for r in rows[1:]:
            f = r.split(",")
            if f[2] == "allocate":
                sizes[f[3]] = f[4]
            elif f[2] == "free":
                self.assertEqual(sizes.pop(f[3]), f[4])  # frees carry the allocation's size
        rep = subprocess.run([REPLAY, "--json", trace], capture_output=True, text=True)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        doc = json.loads(rep.stdout)
        self.assertEqual(doc["allocations"], int(run.result["allocs"]))
        self.assertEqual(doc["skipped_frees"], 0)


    # What RMM's replay benchmark accepts (its log parser and replay.cpp): the actions allocate,
    # free and allocate failure (RMM 22.04 on); and, in the whole file, only the streams 0, 1
    # (cudaStreamLegacy) and 2 (cudaStreamPerThread): one other stream and it replays nothing.
    RMM_ACTIONS = ("allocate", "free", "allocate failure")
    RMM_STREAMS = (0, 1, 2)

    def rmm_refuses(self, path):
        """The rows of a trace RMM's replay refuses."""
        with open(path) as f:
            rows = [r.split(",") for r in f.read().splitlines()[1:]]
        return [r for r in rows if r[2] not in self.RMM_ACTIONS or
                int(r[5], 16) not in self.RMM_STREAMS]

    def test_what_rmm_replays(self):
        # cudaMalloc/cudaFree and a failed request: RMM replays the whole trace
        for argv, rc in ((prog("churn", "--iters", "200", "--max-size", "2M"), 0),
                         (prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                               "--request", "512M"), 2)):
            trace = os.path.join(self.env.tmp, "plain.csv")
            run = self.env.run(argv, memory="256M", extra={"TESSERA_TRACE": trace})
            self.assertEqual(run.rc, rc, run)
            self.assertEqual(self.rmm_refuses(trace), [])
        # cudaMallocAsync on the program's streams: those rows name them, and RMM refuses the
        # file (README, docs/configuration.md); tessera-replay serves them per stream
        trace = os.path.join(self.env.tmp, "async.csv")
        run = self.env.run(prog("async_pool"), extra={"TESSERA_TRACE": trace})
        self.ok(run)
        refused = self.rmm_refuses(trace)
        self.assertGreater(len(refused), 0)
        self.assertEqual({r[2] for r in refused}, {"allocate", "free"})
        # the documented way to give it to RMM: every row on the default stream
        rmm = os.path.join(self.env.tmp, "rmm.csv")
        subprocess.run(["awk", "-F,", "-v", "OFS=,", "NR>1{$6=0}1", trace], check=True,
                       stdout=open(rmm, "w"))
        self.assertEqual(self.rmm_refuses(rmm), [])
        for path in (trace, rmm):
            rep = subprocess.run([REPLAY, "--json", path], capture_output=True, text=True)
            self.assertEqual(rep.returncode, 0, rep.stderr)
            self.assertEqual(json.loads(rep.stdout)["allocations"],
                             run.stats["allocation.all.allocated"], path)

    def test_trace_failed_allocation_in_rmm_form(self):
        trace = os.path.join(self.env.tmp, "oom.csv")
        run = self.env.run(prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                                "--request", "512M"), memory="256M", extra={"TESSERA_TRACE": trace})
        self.ok(run, status="oom", rc=2)
        rows = [r.split(",") for r in open(trace).read().splitlines()[1:]]
        failed = [r for r in rows if r[2] == "allocate failure"]
        self.assertEqual(len(failed), 1, rows)
        self.assertEqual(failed[0][3:6], ["0x0", str(512 << 20), "0"])
        # the Note says what the run ran on, for a replay on the same device
        self.assertTrue(failed[0][6].startswith('"device=0 total=%d limit=0 conf=' % (256 << 20)),
                        failed[0])
        self.assertTrue(all(r[3].startswith("0x") for r in rows), rows)


    def paused_trace_run(self, trace, while_paused=None):
        """fork_pause with TESSERA_TRACE: 8 MiB allocated, a child forked that exits, then, while
        the parent waits, while_paused(); then 8 MiB more and both freed. Returns (returncode,
        stdout, stderr)."""
        env = self.env.base(extra={"TESSERA_TRACE": trace})
        p = subprocess.Popen(probe("fork_pause"), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            while line and not line.startswith("CHILD_DONE"):
                line = p.stdout.readline()
            self.assertTrue(line.startswith("CHILD_DONE"), line)
            if while_paused:
                while_paused()
            out, err = p.communicate("go\n", timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return p.returncode, out, err

    def test_trace_forked_child_records_nothing(self):
        # the child of a program that traces calls cudaMalloc and exits (atexit handlers run):
        # it records nothing, neither its own call nor the parent's lines it inherited
        trace = os.path.join(self.env.tmp, "fork.csv")
        run = self.env.run(prog("fork_child", "--unit", "2M", "--count", "3", "--child-sleep-ms",
                                "20", "--child-cuda"), extra={"TESSERA_TRACE": trace})
        self.ok(run)
        self.assertIn("child: cudaMalloc ->", run.stdout)
        rows = open(trace).read().splitlines()
        self.assertEqual(rows.count("Thread,Time,Action,Pointer,Size,Stream,Note"), 1, rows)
        body = [r.split(",") for r in rows[1:]]
        self.assertEqual(sorted(r[2] for r in body), ["allocate"] * 6 + ["free"] * 6, rows)
        self.assertEqual(len({r[0] for r in body}), 1, rows)  # one thread: the parent's

    def test_trace_file_replaced_is_left_alone(self):
        # the file recorded into is replaced while the program runs: the new file is not written
        # (the identity taken at start no longer matches) and recording stops with one line
        trace = os.path.join(self.env.tmp, "replaced.csv")

        def replace():
            os.rename(trace, trace + ".old")
            with open(trace, "w") as f:
                f.write("someone else's file\n")

        rc, out, err = self.paused_trace_run(trace, replace)
        self.assertEqual(rc, 0, out + err)
        with open(trace) as f:
            self.assertEqual(f.read(), "someone else's file\n")
        self.assertIn("the file was removed or replaced", err)
        self.assertEqual(open(trace + ".old").read(), "")  # nothing was flushed before the swap

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a file to another user")
    def test_trace_refuses_another_users_file(self):
        trace = os.path.join(self.env.tmp, "theirs.csv")
        with open(trace, "w") as f:
            f.write("not yours\n")
        os.chown(trace, 65534, 65534)
        run = self.env.run(prog("seed_middle", "--first", "2M", "--middle", "2M", "--last", "2M",
                                "--request", "4M"), extra={"TESSERA_TRACE": trace})
        self.ok(run)
        with open(trace) as f:
            self.assertEqual(f.read(), "not yours\n")  # not truncated, not appended to
        self.assertIn("belongs to another user; not recording", run.stderr)

    def test_oom_snapshots_capped_at_eight(self):
        # a program that keeps running into out of memory gets 8 snapshots, then one line
        tpl = os.path.join(self.env.tmp, "oom-%n.pickle")
        run = self.env.run(prog("churn", "--iters", "400", "--live", "8", "--max-size", "48M",
                                "--large-pct", "100", "--tolerate-oom"), memory="64M",
                           conf=f"snapshot_on_oom:{tpl}")
        self.ok(run)
        self.assertGreater(int(run.result["ooms"]), 8, run)
        files = sorted(os.listdir(self.env.tmp))
        snaps = [f for f in files if f.startswith("oom-") and f.endswith(".pickle")]
        self.assertEqual(sorted(snaps), sorted(f"oom-{n}.pickle" for n in range(1, 9)), files)
        self.assertEqual(run.stderr.count("snapshot_on_oom: 8 snapshots written; each later out "
                                          "of memory replaces the last one"), 1, run.stderr)
        # and the eighth file holds the last failure's (SnapshotNeverLost has the sizes)
        self.assertEqual(run.stderr.count("memory snapshot written to"), 8, run.stderr)


class Capture(Base):
    def test_capture_not_broken(self):
        run = self.env.run(probe("capture_alloc"))
        self.ok(run)
        self.assertEqual(run.result.get("capture"), "clean", run)


class CaptureGraphMemory(Base):
    """During a stream capture a stream-ordered allocation is a graph's allocation node, the
    driver's: tessera must not serve it (nor count it); and a free of a tessera block on a
    capturing stream is refused by tessera with cudaErrorInvalidValue (a free node needs a graph
    allocation), the driver never sees it, and the block stays tessera's and intact (graph_mem,
    in the style of NVIDIA's graphMemoryNodes)."""

    VERBOSE = {"TESSERA_SIM_VERBOSE": "1"}  # the simulator says what reached it
    REFUSED = "on a capturing stream: not a graph allocation"

    def test_allocation_nodes_are_the_drivers(self):
        plain = self.env.run(prog("graph_mem"), preload=False, extra=self.VERBOSE)
        self.ok(plain)
        for conf in (None, PYTORCH, "defragment:True"):
            with self.subTest(conf=conf):
                run = self.env.run(prog("graph_mem"), conf=conf, extra=self.VERBOSE)
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)
                # the graphs' 30 allocations were made by the driver, at their launches
                self.assertEqual(run.sim[0]["graph_alloc_calls"], 30, run)
                self.assertEqual(run.sim[0]["graph_alloc_calls"],
                                 plain.sim[0]["graph_alloc_calls"], run)
                self.assertEqual(run.sim[0]["graph_free_calls"], plain.sim[0]["graph_free_calls"])
                # tessera served the step's three on the streams and the cudaMalloc, no more
                self.assertEqual(run.stats["num_alloc_calls"], 4, run)
                self.assertEqual(run.stats["allocation.all.allocated"], 4, run)
                self.assertEqual(run.stats["allocation.all.current"], 0, run)

    def test_free_of_a_tessera_block_in_capture_is_refused_by_tessera(self):
        plain = self.env.run(prog("graph_mem"), preload=False, extra=self.VERBOSE)
        self.ok(plain)
        self.assertEqual(plain.result["foreign_free"], "cudaErrorInvalidValue", plain)
        self.assertIn(self.REFUSED, plain.stderr)  # without tessera the driver answers
        for conf in (None, PYTORCH):
            with self.subTest(conf=conf):
                run = self.env.run(prog("graph_mem"), conf=conf, extra=self.VERBOSE)
                self.ok(run)
                self.assertEqual(run.result["foreign_free"], "cudaErrorInvalidValue", run)
                self.assertEqual(run.result["capture_end"], "cudaSuccess", run)
                self.assertEqual(run.result["foreign_intact"], "1", run)
                self.assertNotIn(self.REFUSED, run.stderr)  # with it, the driver never saw it
                self.assertEqual(run.stats["num_invalid_frees"], 0, run)  # and it is no misuse


class SharingPrograms(Base):
    """Programs in the style of the samples that share memory (NVIDIA's simpleIPC,
    streamOrderedAllocationIPC, streamOrderedAllocationP2P, memMapIPCDrv, simpleAttributes,
    graphMemoryNodes; HAMi-core's 3-D arrays) give the same RESULT with and without tessera,
    under every policy, and tessera serves what is its to serve: blocks from cudaMalloc and the
    default pool, never a pool of the program's own, an imported pointer, an array or a graph's
    allocation."""

    POLICIES = (None, PYTORCH, "expandable_segments:True", "defragment:True")

    def pages(self):
        """{program name, or "--child" for its children: [slots]} of the run's stats pages."""
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--json"], capture_output=True,
                             text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        pages = {}
        for doc in json.loads(out.stdout).values():
            slots = [v for v in doc.values() if isinstance(v, dict)]
            words = doc["command"].split()
            key = "--child" if "--child" in words else os.path.basename(words[0])
            pages.setdefault(key, []).extend(slots)
        return pages

    def same(self, name, args=(), memory="512M", extra=None, policies=POLICIES):
        plain = self.env.run(prog(name, *args), memory=memory, preload=False, extra=extra)
        self.ok(plain)
        runs = {}
        for conf in policies:
            with self.subTest(program=name, conf=conf):
                run = self.env.run(prog(name, *args), memory=memory, conf=conf, extra=extra)
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)
                self.assertNotIn("tessera:", run.stdout)
                runs[conf] = (run, self.pages())
        return plain, runs

    def test_ipc_events(self):
        plain, runs = self.same("ipc_events", ["--procs", "3"])
        self.assertEqual(plain.result["ordered"], "3", plain)
        self.assertEqual(plain.result["not_ready"], "3", plain)
        for conf, (run, pages) in runs.items():
            # the parent's three buffers were tessera's, opened by children under tessera
            self.assertEqual([s["num_alloc_calls"] for s in pages["ipc_events"]], [3], conf)
            self.assertEqual(len(pages["--child"]), 3, conf)

    def test_pool_ipc(self):
        plain, runs = self.same("pool_ipc")
        self.assertEqual(plain.result["child_free"], "cudaSuccess", plain)
        # the default pool and its pointers (tessera's blocks, with tessera) cannot be exported
        self.assertEqual(plain.result["default_ptr_export"], "cudaErrorInvalidValue", plain)
        child = [d for d in plain.sim if d["imported_frees"]]
        self.assertEqual([d["imported_frees"] for d in child], [2], plain.sim)
        for conf, (run, pages) in runs.items():
            # the pool is the program's: its allocations were the driver's, counted while live;
            # the default pool's block was tessera's
            self.assertEqual([s["num_alloc_calls"] for s in pages["pool_ipc"]], [1], conf)
            self.assertEqual(pages["pool_ipc"][0]["driver_bytes"], 0, conf)
            # the driver's allocations in the parent: the two of the pool, and tessera's own
            parent = [d for d in run.sim if d["alloc_calls"]]
            own = pages["pool_ipc"][0]["num_device_alloc"]
            self.assertEqual([d["alloc_calls"] + d["create_calls"] - own for d in parent], [2],
                             run.sim)
            # the imported pointer freed twice in the child (cudaFreeAsync, cudaFree): both
            # frees reached the driver, none went through tessera's free path
            child = [d for d in run.sim if d["imported_frees"]]
            self.assertEqual([d["imported_frees"] for d in child], [2], run.sim)
            for slot in pages.get("--child", []):
                self.assertEqual(slot["num_invalid_frees"], 0, conf)
                self.assertEqual(slot["num_free_calls"], 0, conf)

    def test_pool_p2p(self):
        extra = {"TESSERA_SIM_DEVICES": "2"}
        plain, runs = self.same("pool_p2p", extra=extra, policies=(None, "expandable_segments:True",
                                                                    "defragment:True"))
        self.assertEqual((plain.result["before"], plain.result["after"]), ("0", "1"), plain)
        for conf, (run, pages) in runs.items():
            # device 0's default-pool blocks were tessera's, granted to device 1 with the pool's
            # access (its own pool's block the driver's)
            dev0 = [s for s in pages["pool_p2p"] if s["device"] == 0]
            self.assertEqual([s["num_alloc_calls"] for s in dev0], [3], conf)
        # PyTorch's policy: a plain segment is out of device 1's reach; requests after the
        # grant go to the driver, whose pool memory follows the access, and a line says so;
        # the calls that grant nothing changed nothing
        run = self.env.run(prog("pool_p2p"), conf=PYTORCH, extra=extra)
        self.assertEqual(run.rc, 3, run)
        fields = ("own_pool", "before", "after", "mid", "later", "same")
        self.assertEqual(tuple(run.result[f] for f in fields), ("1", "0", "0", "0", "1", "1"), run)
        self.assertIn("now go to the driver", run.stderr)
        dev0 = [s for s in self.pages()["pool_p2p"] if s["device"] == 0]
        self.assertEqual([s["num_alloc_calls"] for s in dev0], [2], run)

    def test_pool_p2p_granted_before_the_first_allocation(self):
        # the grant waits for the allocator of device 0, made after it
        extra = {"TESSERA_SIM_DEVICES": "2"}
        plain, runs = self.same("pool_p2p", ["--grant-first"], extra=extra,
                                policies=(None, "defragment:True"))
        self.assertEqual(plain.result["before"], "1", plain)

    def test_vmm_ipc_drv(self):
        plain, _ = self.same("vmm_ipc_drv")
        self.assertEqual(plain.result["kernel_effect"], "0", plain)  # the simulator runs none

    def test_limits(self):
        plain, runs = self.same("limits")
        self.assertEqual(plain.result["window"], "1", plain)
        for conf, (run, pages) in runs.items():
            self.assertEqual([s["num_alloc_calls"] for s in pages["limits"]], [1], conf)
            self.assertEqual(pages["limits"][0]["num_host_alloc_calls"], 2, conf)

    def test_array3d(self):
        plain, runs = self.same("array3d", memory="256M")
        for conf, (run, pages) in runs.items():
            # the block was tessera's; the arrays the driver's, counted in its free memory
            self.assertEqual([s["num_alloc_calls"] for s in pages["array3d"]], [1], conf)
            self.assertEqual(run.result["given_back"], "1", run)


class DefaultPolicy(Base):
    """tessera's default (no configuration) runs every program that fits the device without
    tessera, near the device's capacity: the cases of tests/bench/live_fit.sh where PyTorch's
    policy (two) or expandable segments (four) run out of memory (docs/BENCHMARKS.md, "Programs
    that fit the device without tessera"; SamplePrograms runs the others)."""

    CASES = [
        ("512M", "seed_cyclic", ["--min", "12M", "--max", "32M"]),
        ("400M", "seed_every5th", ["--unit", "10M", "--count", "39", "--request", "20M"]),
        ("220M", "seed_even", ["--unit", "2M", "--count", "100", "--request", "50M"]),
        ("256M", "seed_cyclic", ["--min", "4M", "--max", "16M"]),
    ]

    def test_what_fits_without_tessera_fits(self):
        for mem, name, args in self.CASES:
            with self.subTest(program=name, args=args, memory=mem):
                plain = self.env.run(prog(name, *args), memory=mem, preload=False)
                self.ok(plain)
                run = self.env.run(prog(name, *args), memory=mem)
                self.ok(run)

    def test_repeated_step_at_the_floor(self):
        # the choice at the floor: the loop of tests/programs/repeat_step runs 30 steps on a
        # 216 MiB device under the default, where PyTorch's expandable segments run out of
        # memory in their first step; a handle per page (ten times the driver calls) runs it
        # on 214 MiB, where the default's first step runs out
        args = ["--steps", "30"]
        run = self.env.run(prog("repeat_step", *args), memory="216M")
        self.ok(run)
        other = self.env.run(prog("repeat_step", *args), memory="216M",
                             conf="expandable_segments:True")
        self.ok(other, status="oom", rc=2)
        fine = self.env.run(prog("repeat_step", *args), memory="214M",
                            conf="defragment:True,handle_policy:page,stitch_when:pressure")
        self.ok(fine)
        edge = self.env.run(prog("repeat_step", *args), memory="214M")
        self.ok(edge, status="oom", rc=2)
        self.assertEqual(edge.result.get("step"), "1", edge)

    def test_pytorch_variable_alone_keeps_the_default(self):
        # a PyTorch string that names no policy key: tessera's default all the same
        run = self.env.run(prog("seed_even", "--unit", "2M", "--count", "100", "--request", "50M"),
                           memory="220M", extra={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"})
        self.ok(run)
        run = self.env.run(prog("seed_even", "--unit", "2M", "--count", "100", "--request", "50M"),
                           memory="220M",
                           extra={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})
        self.ok(run, status="oom", rc=2)  # PyTorch's policy, asked for by name


class Steady(Base):
    """A loop that repeats one training-like step (tests/programs/repeat_step: parameters once;
    workspaces, activations and gradients every step), near the edge of the device, under the
    default: a step that ran once runs every time after, and a device that runs the loop makes
    every larger one run it too; the replay of its trace says the same at every capacity."""

    STEPS = "30"

    def run_at(self, mib, conf=None, extra=None):
        run = self.env.run(prog("repeat_step", "--steps", self.STEPS), memory=f"{mib}M", conf=conf,
                           extra=extra)
        self.assertIn(run.rc, (0, 2), run)
        return run

    def test_every_step_after_the_first_and_every_larger_device(self):
        runs = {mib: self.run_at(mib) for mib in range(208, 226, 2)}
        ok = [mib for mib, run in runs.items() if run.rc == 0]
        self.assertTrue(ok and ok[0] < 224, runs)  # the edge is inside the range checked
        for mib, run in runs.items():
            if run.rc == 2:
                # out of memory: only in the first step, never after one ran
                self.assertEqual(run.result.get("step"), "1", (mib, run))
                self.assertLess(mib, ok[0], "a device larger than one that ran failed")
            else:
                self.assertEqual(run.result.get("steps"), self.STEPS, run)

        # the replay of the loop's trace, at every capacity around the edge, 2 MiB apart
        trace = os.path.join(self.env.tmp, "steps.csv")
        run = self.run_at(1024, extra={"TESSERA_TRACE": trace})
        self.assertEqual(run.rc, 0, run)
        first_ok = None
        for mib in range(200, 240, 2):
            out = subprocess.run([REPLAY, "--json", "--capacity", f"{mib}M", trace],
                                 capture_output=True, text=True)
            d = json.loads(out.stdout)
            if d["failed_allocations"] == 0:
                first_ok = first_ok or mib
            else:
                self.assertIsNone(first_ok, f"{mib} MiB fails above {first_ok} MiB, which runs")
            if mib in runs:  # and the replay says what the live run did
                self.assertEqual(d["failed_allocations"] == 0, runs[mib].rc == 0, (mib, d))
        self.assertEqual(first_ok, ok[0])


class Pitched(Base):
    """cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch are served by tessera with the driver's
    pitch, counted, and limited by memory_limit (pitched)."""

    def test_served_with_the_drivers_pitch(self):
        plain = self.env.run(prog("pitched", "--limit-probe"), preload=False)
        self.ok(plain)
        for conf in (None, PYTORCH, "defragment:True"):
            with self.subTest(conf=conf):
                run = self.env.run(prog("pitched", "--limit-probe"), conf=conf)
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)
                fit = int(run.result["fit"])
                # the three pitched blocks and the probe's: tessera's, not the driver's
                self.assertEqual(run.stats["allocation.all.allocated"], 3 + fit, run)
                self.assertEqual(run.stats["allocation.all.freed"], 3 + fit, run)

    def test_memory_limit_counts_them(self):
        run = self.env.run(prog("pitched", "--limit-probe"), conf="memory_limit:128M")
        self.ok(run)
        self.assertEqual(run.result["fit"], "4", run)  # 4 x 32 MiB under a 128 MiB cap
        self.assertIn("raise memory_limit", run.stderr)


class Overlap(Base):
    """Streams that should run side by side, the host allocating and freeing between their
    launches and never synchronising a round (overlap). Device time comes from the simulator's
    event timestamps, which are its modelled device time (tests/sim/README.md, "The device's
    order"), never from the host's clock: overlap = the streams' summed work time over the span
    they took together (2 when two streams run side by side, 1 when serialised), the same on an
    idle and on a loaded machine."""

    DELAY = {"TESSERA_SIM_OP_DELAY_US": "2000"}
    OVERLAP, SERIAL = 1.9, 1.1

    def overlap(self, args, conf=None, preload=True, extra=None):
        run = self.env.run(prog("overlap", "--rounds", "12", *args), conf=conf, preload=preload,
                           extra=dict(self.DELAY, **(extra or {})))
        return run, float(run.result.get("overlap", "nan"))

    def test_stream_ordered_scratch_overlaps(self):
        # each stream reuses its own blocks in its own order: nothing to wait for, with or
        # without tessera, under every policy
        _, native = self.overlap(["--async"], preload=False)
        self.assertGreater(native, self.OVERLAP)
        for conf in (None, PYTORCH, "expandable_segments:True"):
            with self.subTest(conf=conf):
                run, ov = self.overlap(["--async"], conf=conf)
                self.ok(run)
                self.assertEqual(run.result["bad_slots"], "0", run)
                self.assertEqual(self.races(run), 0, run)
                self.assertGreater(ov, self.OVERLAP, run)

    def test_markers_cost_no_device_time(self):
        # the same run with the simulator charging each event record and stream wait as work
        # (the old model): the order points' markers alone serialise the streams' time
        run, charged = self.overlap(["--async"], extra={"TESSERA_SIM_MARKER_DELAY": "1"})
        self.ok(run)
        _, free = self.overlap(["--async"])
        self.assertLess(charged, free, run)

    def test_reuse_across_streams_is_ordered(self):
        # cudaMalloc names no stream, so a block freed by one stream and handed to the next is
        # ordered by an order point: no corruption, at the price of the overlap (the driver's own
        # cudaFree waits for the whole device, which serialises the streams natively too)
        _, native = self.overlap([], preload=False)
        run, ordered = self.overlap([])
        self.ok(run)
        self.assertEqual(run.result["bad_slots"], "0", run)
        self.assertEqual(self.races(run), 0, run)
        self.assertLess(ordered, self.SERIAL, run)
        self.assertLess(native, self.SERIAL)
        # without the order (reuse_fence:none) the streams overlap, and the copies read
        # scratch that the other stream overwrites, unordered
        run, unordered = self.overlap([], conf="reuse_fence:none")
        self.assertGreater(unordered, self.OVERLAP, run)
        self.assertGreater(self.races(run), 0, run)
class PinnedHost(Base):
    """Pinned host memory (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc, cudaFreeHost,
    cuMemFreeHost) is cached by tessera: bytes right (staging checks every slot a queued copy
    wrote from a buffer freed at once), counted on the stats page, a buffer never handed out again
    while a queued copy still reads it (slow copies: TESSERA_SIM_OP_DELAY_US), not even when it
    was freed during a capture, no event kept per free, pinned bytes within 1.05 times the bytes
    asked for (offload), idle buffers given back (pinned_idle_s), every query about a freed
    buffer answered as the driver answers it, off with pinned_cache:False, and outside
    memory_limit (device memory's limit)."""

    STEPS = "64"

    def staging(self, mode, conf=None, preload=True, size="65536", steps=STEPS, delay="200"):
        return self.env.run(prog("staging", "--mode", mode, "--steps", steps, "--size", size),
                            preload=preload, conf=conf, extra={"TESSERA_SIM_OP_DELAY_US": delay})

    def test_cached_counted_and_never_reused_early(self):
        for mode in ("host", "mallochost", "driver"):
            with self.subTest(mode=mode):
                plain = self.staging(mode, preload=False)
                self.ok(plain)
                run = self.staging(mode)
                self.ok(run)
                self.assertEqual(run.result[mode + "_bad"], "0", run)
                st = run.stats
                calls = 64 + 8  # staging's warm-up round of 8 steps, then the 64
                self.assertEqual(st["num_host_alloc_calls"], calls, run)
                self.assertEqual(st["num_host_free_calls"], calls, run)
                self.assertGreaterEqual(st["num_fences_recorded"], calls, run)
                # every 8 steps the stream is synchronised: at most 8 buffers are ever in use
                self.assertGreaterEqual(st["num_host_alloc"], 1, run)
                self.assertLessEqual(st["num_host_alloc"], 8, run)
                self.assertEqual(st["host_allocations.current"], st["num_host_alloc"], run)
                # 64 KiB buffers are small: they share regions of 2 MiB
                self.assertEqual(st["host_allocated_bytes.current"], 2 * MiB * st["num_host_alloc"], run)
                self.assertEqual(run.sim[0]["peak_host_bytes"], st["host_allocated_bytes.peak"], run)
                self.assertEqual(st["num_host_free"], 0, run)
                self.assertEqual(st["num_invalid_frees"], 0, run)
                # no device memory taken for it
                self.assertEqual(st["allocation.all.allocated"], 1, run)  # the slots only

    def test_fences_give_their_events_back(self):
        # a fence per free (an event on the legacy stream and one on staging's stream): given
        # back once seen complete, so the events a run creates do not grow with its steps
        run = self.staging("host", steps="256")
        self.ok(run)
        self.assertEqual(run.result["host_bad"], "0", run)
        self.assertGreaterEqual(run.stats["num_fences_recorded"], 256, run)
        # at most 8 buffers are in flight (staging synchronises every 8 steps): 9 fences of 2
        # events, and the order point's few
        self.assertLessEqual(run.sim[0]["event_creates"], 40, run)
        self.assertEqual(run.sim[0]["live_events"], run.sim[0]["event_creates"], run)

    def test_same_answers_as_the_driver(self):
        plain = self.env.run(probe("pinned_probe"), preload=False)
        self.ok(plain)
        self.assertEqual(plain.result["bytes"], "1", plain)
        self.assertEqual(plain.result["interior"], "cudaErrorInvalidValue", plain)
        self.assertEqual(plain.result["twice"], "cudaErrorInvalidValue", plain)
        # what the driver says of freed pinned memory: memory it does not know
        r = plain.result
        for label in ("freed", "freedbase", "p1freed", "p2tail", "p2freed", "mhfreed"):
            self.assertEqual(r[label + "_rt"], "cudaSuccess/0/-2/-/0", (label, plain))
            self.assertEqual(r[label + "_type"], "CUDA_ERROR_INVALID_VALUE/0", (label, plain))
            self.assertEqual(r[label + "_range"], "CUDA_ERROR_NOT_FOUND/-/0", (label, plain))
            self.assertEqual(r[label + "_hdev"], "cudaErrorInvalidValue/-", (label, plain))
            self.assertEqual(r[label + "_hflags"], "cudaErrorInvalidValue/0", (label, plain))
            self.assertEqual(r[label + "_cflags"], "CUDA_ERROR_INVALID_VALUE/0", (label, plain))
            # cuPointerGetAttributes: the pointer is its own host pointer, the range is left
            # as it was, the mapping's size 0 (an H100's answers, driver 580)
            self.assertEqual(r[label + "_multi"], "CUDA_SUCCESS/0/-2/0/kept/7/0/0/1", (label, plain))
        # and of a live one: its own range, its mapping in 2 MiB units, its flags (mapped |
        # portable; cudaMallocHost's: mapped)
        self.assertEqual(r["p2_range"], "CUDA_SUCCESS/100/%d" % (2 * MiB + 11), plain)
        self.assertEqual(r["p2_msize"], "CUDA_SUCCESS/%d" % (4 * MiB), plain)
        self.assertEqual(r["mh_msize"], "CUDA_SUCCESS/%d" % (2 * MiB), plain)
        self.assertEqual(r["p2_hflags"], "cudaSuccess/3", plain)
        self.assertEqual(r["mh_hflags"], "cudaSuccess/2", plain)
        self.assertEqual(r["ids"], "1", plain)
        for conf in (None, "pinned_cache:False"):
            with self.subTest(conf=conf):
                run = self.env.run(probe("pinned_probe"), conf=conf)
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)
                served = 0 if conf else 7
                self.assertEqual(run.stats["num_host_alloc_calls"], served, run)
                self.assertEqual(run.stats["num_invalid_frees"], 2 if served else 0, run)
                if served:
                    # the pieces of the big buffer served the two after it: at most the small
                    # buffers' region, cudaMallocHost's (twice, when the floor rule gave it back
                    # meanwhile) and the big buffer's were pinned
                    self.assertLessEqual(run.stats["num_host_alloc"], 4, run)

    def test_freed_during_a_capture_is_not_reused_early(self):
        # the copy from the freed buffer runs 300 ms late: a buffer handed out again before it
        # ran would send the device the new owner's bytes
        extra = {"TESSERA_SIM_OP_DELAY_US": "300000"}
        plain = self.env.run(probe("pinned_capture"), preload=False, extra=extra)
        self.ok(plain)
        self.assertEqual(plain.result["first"], "ok", plain)
        run = self.env.run(probe("pinned_capture"), extra=extra)
        self.ok(run)
        self.assertEqual(run.result, plain.result, run)
        self.assertEqual(run.stats["num_host_alloc_calls"], 3, run)
        self.assertEqual(run.stats["num_invalid_frees"], 0, run)

    def test_offload_pins_at_the_floor(self):
        # weights of mixed sizes kept, activations of a cycle of sizes per step: the driver's own
        # peak of pinned bytes is within 1.05 times the most the program held (a power-of-two
        # cache pins 1.69 times as much here); the bytes are right
        plain = self.env.run(prog("offload"), preload=False)
        self.ok(plain)
        self.assertLessEqual(float(plain.result["ratio"]), 1.001, plain)
        run = self.env.run(prog("offload"))
        self.ok(run)
        self.assertEqual(run.result["peak_requested"], plain.result["peak_requested"], run)
        self.assertLessEqual(int(run.result["driver_peak"]), 1.05 * int(run.result["peak_requested"]), run)
        st = run.stats
        self.assertEqual(st["host_allocated_bytes.peak"], int(run.result["driver_peak"]), run)
        self.assertEqual(st["num_host_alloc_calls"], int(run.result["allocs"]), run)
        # the cache served most requests without the driver
        self.assertLess(st["num_host_alloc"], int(run.result["allocs"]) // 4, run)
        self.assertEqual(st["num_invalid_frees"], 0, run)

    def test_idle_buffers_go_back(self):
        # a freed buffer stays cached for pinned_idle_s, then goes back at the next operation of
        # any kind (here a cudaMalloc); the driver's count of pinned bytes says so
        plain = self.env.run(probe("pinned_idle"), preload=False)
        self.ok(plain)
        self.assertEqual(plain.result["after_pause"], "0", plain)
        kept = self.env.run(probe("pinned_idle"))
        self.ok(kept)
        self.assertEqual(kept.result["after_free"], str(4 * MiB), kept)
        self.assertEqual(kept.result["after_pause"], str(4 * MiB), kept)
        self.assertEqual(kept.stats["num_host_free"], 0, kept)
        run = self.env.run(probe("pinned_idle"), conf="pinned_idle_s:1")
        self.ok(run)
        self.assertEqual(run.result["after_free"], str(4 * MiB), run)
        self.assertEqual(run.result["after_pause"], "0", run)
        self.assertEqual(run.stats["num_host_free"], 1, run)
        self.assertEqual(run.stats["host_allocated_bytes.current"], 0, run)

    def test_off(self):
        run = self.staging("all", conf="pinned_cache:False")
        self.ok(run)
        for key in ("num_host_alloc", "num_host_alloc_calls", "num_host_free_calls",
                    "host_allocations.allocated"):
            self.assertEqual(run.stats[key], 0, (key, run))

    def test_memory_limit_is_not_applied_to_host_memory(self):
        # 16 MiB of device slots under a 20 MiB limit; copies of 20 ms each (long beside any
        # pause of a loaded host) keep several 2 MiB pinned buffers busy at once: device and host
        # memory together pass the limit
        run = self.staging("host", conf="memory_limit:20M", size=str(2 * MiB), steps="16", delay="20000")
        self.ok(run)
        st = run.stats
        self.assertEqual(st["num_ooms"], 0, run)
        self.assertEqual(st["reserved_bytes.all.peak"], 16 * MiB, run)
        self.assertGreaterEqual(st["num_host_alloc"], 3, run)
        self.assertGreater(st["reserved_bytes.all.peak"] + st["host_allocated_bytes.peak"], 20 * MiB, run)


class PointerQueries(Base):
    """Pointer queries about device memory answer as the driver answers for a cudaMalloc of the
    block's size, under every policy: for blocks whose size ends less than 512 bytes short of a
    whole number of 2 MiB pages (tessera's block then has the driver's mapping), the range, the
    mapping's base and size, the memory type and the host-memory queries while the block lives,
    and unallocated memory's answers once it is freed (tessera keeps it cached)."""

    def test_same_answers_as_the_driver(self):
        plain = self.env.run(probe("pointer_probe"), preload=False)
        self.ok(plain)
        r = plain.result
        self.assertEqual(r["live0_range"], "CUDA_SUCCESS/2097102/4194204", plain)
        self.assertEqual(r["live0_msize"], "CUDA_SUCCESS/4194304", plain)
        self.assertEqual(r["freed0_range"], "CUDA_ERROR_NOT_FOUND/-/0", plain)
        self.assertEqual(r["freed0_size"], "CUDA_ERROR_INVALID_VALUE/0", plain)
        self.assertEqual(r["ids"], "1", plain)
        # what an H100 (driver 580) answers: device memory is no host memory, live or freed
        # (tessera's blocks are mapped with the virtual-memory API, which the driver would
        # answer with flags 3); freed memory is its own host pointer, its range left as it was
        for label in ("live0", "live1", "live2", "freed0", "freed1", "freed2"):
            self.assertEqual(r[label + "_hdev"], "cudaErrorInvalidValue/-", (label, plain))
            self.assertEqual(r[label + "_cdev"], "CUDA_ERROR_INVALID_VALUE/-", (label, plain))
            self.assertEqual(r[label + "_hflags"], "cudaErrorInvalidValue/0", (label, plain))
            self.assertEqual(r[label + "_cflags"], "CUDA_ERROR_INVALID_VALUE/0", (label, plain))
        self.assertEqual(r["freed0_rt"], "cudaSuccess/0/-2/-/0", plain)
        self.assertEqual(r["freed0_multi"], "CUDA_SUCCESS/0/-2/0/kept/7/0/0/1", plain)
        for conf in (PYTORCH, "expandable_segments:True", None, "defragment:True"):
            with self.subTest(conf=conf):
                run = self.env.run(probe("pointer_probe"), conf=conf)
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)
                self.assertEqual(run.stats["allocation.all.allocated"], 4, run)

    def test_host_query_as_the_first_driver_call(self):
        # a driver-API program whose first call is a host-memory query (tessera initialises in
        # that call): the driver's "not initialized" before cuInit, "invalid value" for
        # memory it does not know after
        for first in ("devptr", "flags"):
            with self.subTest(first=first):
                plain = self.env.run(probe("first_query") + [first], preload=False)
                self.ok(plain)
                self.assertEqual(plain.result,
                                 {"status": "ok", "before": "3", "init": "0", "after": "1"}, plain)
                run = self.env.run(probe("first_query") + [first])
                self.ok(run)
                self.assertEqual(run.result, plain.result, run)


class StreamOrdered(Base):
    """Stream-ordered allocation, pools and managed memory (async_pool). cudaMallocAsync,
    cuMemAllocAsync(_ptsz) and cuMemAllocFromPoolAsync(_ptsz) from the default pool are served by
    tessera on the stream they name; a pool of the program's own and managed memory are the
    driver's, counted and under memory_limit; every free call gives the driver's answer."""

    POLICIES = (None, PYTORCH, "expandable_segments:True")
    # the default pool's blocks async_pool allocates, and one cudaMalloc (its own pool's and
    # managed memory, 4 allocations, are the driver's)
    SERVED = 11

    def test_served_counted_and_freed_as_the_driver_does(self):
        plain = self.env.run(prog("async_pool"), preload=False)
        self.ok(plain)
        self.assertEqual(plain.result["double_free"], "cudaErrorInvalidValue", plain)
        self.assertEqual(plain.result["free_sync"], "cudaSuccess", plain)
        for conf in self.POLICIES:
            with self.subTest(conf=conf):
                trace = os.path.join(self.env.tmp, "async.trace")
                run = self.env.run(prog("async_pool"), conf=conf, extra={"TESSERA_TRACE": trace})
                self.ok(run)
                # bytes, pool queries, the pool a block came from, the answers to wrong calls
                self.assertEqual(run.result, plain.result, run)
                self.assertEqual(run.stats["allocation.all.allocated"], self.SERVED, run)
                self.assertEqual(run.stats["allocation.all.freed"], self.SERVED, run)
                self.assertEqual(run.stats["num_invalid_frees"], 1, run)  # the second cudaFreeAsync
                self.assertEqual(run.stats["driver_bytes"], 0, run)  # the driver's, uncounted at free
                with open(trace) as f:  # RMM's columns: thread, time, action, pointer, size, stream
                    rows = [l.split(",") for l in f if l.count(",") >= 5]
                allocs = [r for r in rows if r[2] == "allocate"]
                self.assertEqual(len(allocs), self.SERVED, run)
                self.assertEqual(sum(r[2] == "free" for r in rows), self.SERVED, run)
                # each on the stream it named (the legacy and per-thread ones included), never
                # 0, which is cudaMalloc's
                self.assertEqual([r[5].strip() for r in allocs].count("0"), 1, run)

    def test_memory_limit_counts_every_kind(self):
        for conf in self.POLICIES:
            with self.subTest(conf=conf):
                limit = "memory_limit:128M" + ("," + conf if conf else "")
                run = self.env.run(prog("async_pool", "--limit-probe"), conf=limit)
                self.ok(run)
                # 4 x 32 MiB under a 128 MiB cap, whoever serves them
                self.assertEqual(run.result["fit_pool"], "4", run)
                self.assertEqual(run.result["fit_managed"], "4", run)
                if conf != "expandable_segments:True":
                    self.assertEqual(run.result["fit_async"], "4", run)
                else:  # a free 4 MiB tail of the stream's reservation stays mapped (the OOM
                    # snapshot shows it after the release pass; cudaMalloc's blocks after the
                    # same frees meet it too): the fourth block does not fit
                    self.assertIn(run.result["fit_async"], ("3", "4"), run)
                self.assertIn("exceed memory_limit", run.stderr)

    def test_own_stream_reuses_without_an_order_point(self):
        for conf in (None, "expandable_segments:True"):
            with self.subTest(conf=conf):
                run = self.env.run(prog("async_pool", "--mode", "reuse", "--rounds", "50"), conf=conf)
                self.ok(run)
                self.assertEqual(run.stats["allocation.all.allocated"], 50, run)
                self.assertEqual(run.stats["num_fences_recorded"], 0, run)
                # freed on another stream: reused only after an order point
                run = self.env.run(prog("async_pool", "--mode", "cross", "--rounds", "50"), conf=conf)
                self.ok(run)
                self.assertGreater(run.stats["num_fences_recorded"], 0, run)


class Ipc(Base):
    """Memory shared with another process, or asked about, behaves as the driver's under every
    policy (ipc_share): 9 blocks of 512 B to 64 MiB, several in one segment, one served from
    freed holes (a stitched range under defragment), exported through the pointer, the base of a
    range query and an interior pointer, opened by another process under tessera, which reads and
    writes their first, middle and last bytes."""

    POLICIES = ("", "expandable_segments:True", "defragment:True",
                "defragment:True,handle_policy:coarse", "expandable_segments:False")

    def share(self, mode="basic", conf=None, preload=True, plain_child=False, memory="1G"):
        argv = prog("ipc_share", "--mode", mode) + (["--plain-child"] if plain_child else [])
        return self.env.run(argv, memory=memory, conf=conf, preload=preload)

    def test_every_block_under_every_policy(self):
        plain = self.share(preload=False)
        self.ok(plain)
        self.assertEqual(plain.result["opened"], "9", plain)
        for conf in self.POLICIES:
            with self.subTest(conf=conf):
                # with defragment, a device too small to grow on: the 6 MiB block is stitched
                stitch = conf.startswith("defragment")
                run = self.share(conf=conf or None, memory="140M" if stitch else "1G")
                self.ok(run)
                for key in ("blocks", "attr_bad", "ids", "same_handle", "own_open", "opened",
                            "open_failed", "bytes_bad", "seen_back"):
                    self.assertEqual(run.result[key], plain.result[key], (key, run))
                self.assertEqual(run.result["held_ok"], "1", run)
                # a handle naming the exporter's pid with another start time: a reused pid
                self.assertEqual(run.result["stale_refused"], "1", run)
                st = self.env.page_stats(run.result["pid"])
                self.assertIsNotNone(st, run)
                if stitch:
                    self.assertGreaterEqual(st["num_stitches"], 1, st)  # a stitched range too

    def test_freed_while_open_is_not_handed_out(self):
        # the simulator frees a driver allocation at once (a GPU keeps it for the importer), so
        # this is tessera's promise alone: a block freed while another process has it open is
        # held until that process closes it, and then comes back
        for conf in self.POLICIES:
            with self.subTest(conf=conf):
                run = self.share("reuse", conf=conf or None)
                self.ok(run)
                self.assertEqual(run.result["bytes_bad"], "0", run)
                self.assertEqual(run.result["held_ok"], "1", run)
                st = self.env.page_stats(run.result["pid"])
                self.assertEqual(st["allocated_bytes.all.current"], 0, st)  # all came back

    def test_exporter_exits_while_open(self):
        for conf in ("", "expandable_segments:True", "defragment:True"):
            with self.subTest(conf=conf):
                run = self.share("exit", conf=conf or None)
                self.ok(run)
                self.assertEqual(run.result["opened"], "9", run)
                self.assertIn("importer: later_bad=0", run.stderr)

    def test_importer_not_under_tessera_fails_cleanly(self):
        for conf in ("", "defragment:True"):
            with self.subTest(conf=conf):
                run = self.share(conf=conf or None, plain_child=True)
                self.ok(run)
                self.assertEqual(run.result["opened"], "0", run)  # an error, never other bytes
                self.assertEqual(run.result["open_failed"], "9", run)
                self.assertEqual(run.result["bytes_bad"], "0", run)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to start the importer as another user")
    def test_another_user_cannot_open(self):
        # CUDA's own IPC has no user check; tessera's descriptors are the kernel's to give, and
        # it gives them to the exporter's user only: another user's open fails, mapping nothing
        os.chmod(self.env.tmp, 0o755)
        for conf in ("", "defragment:True"):
            with self.subTest(conf=conf):
                run = self.env.run(prog("ipc_share", "--importer-uid", "65534"), memory="1G",
                                   conf=conf or None)
                self.ok(run)
                self.assertEqual(run.result["opened"], "0", run)
                self.assertEqual(run.result["open_failed"], "9", run)
                self.assertIn("shares its memory only with processes of its own user", run.stderr)

    def test_range_of_a_block_is_the_block(self):
        # the probe: two blocks that share a segment; each exports and answers for itself
        run = self.env.run(probe("ipc_probe"))
        self.ok(run)
        self.assertEqual(run.result["first"], "cudaSuccess")
        self.assertEqual(run.result["second"], "cudaSuccess")

    # The tests below drive separate processes (tests/integration/ipc_peer), started side by
    # side by the test: an importer is never the exporter's child.

    def test_any_number_of_holders(self):
        # 17 and 100 processes hold one block (a table of 16 slots once leaked it from the 17th
        # on): while any holds it, the exporter's free succeeds and no allocation lands in its
        # bytes; a close is answered, so after the last one the next allocation finds it
        for conf, n in ((PYTORCH, 17), (None, 100)):
            with self.subTest(conf=conf, importers=n):
                exp = Peer(self.env, conf=conf)
                idx, addr = exp.alloc(64 * MiB)
                exp.ask(f"fill {idx} 0x5a")
                handle = exp.export(idx)
                fds = exp.value("fds")
                imps = [Peer(self.env, conf=conf) for _ in range(n)]
                base = [p.value("fds") for p in imps]
                opened = [p.open(handle) for p in imps]
                self.assertEqual([o[0] for o in opened], ["cudaSuccess"] * n)
                self.assertEqual([p.value(f"check {i} 0x5a") for p, (_, i) in zip(imps, opened)], [1] * n)
                # one connection per importing process, on both sides; none per export
                self.assertEqual([p.value("fds") for p in imps], [b + 1 for b in base])
                self.assertEqual(exp.value("fds"), fds + n)
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
                for k, (p, (_, i)) in enumerate(zip(imps, opened)):
                    self.assertEqual(exp.ask(f"reuse {64 * MiB} {addr:#x} 1"), ["reuse", "0", "1"], k)
                    self.assertEqual(p.ask(f"close {i}"), ["close", "cudaSuccess"])
                    self.assertEqual(p.value("fds"), base[k])  # the importer's closed with it
                self.assertEqual(exp.ask(f"reuse {64 * MiB} {addr:#x} 1"), ["reuse", "1", "1"])
                self.assertEqual(exp.fds_settle(fds), fds)
                for p in imps:
                    p.quit()
                exp.quit()

    def test_holder_killed_gives_the_block_back(self):
        # no polling of /proc: the connection a dead process leaves closes, and that is the signal
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf)
                idx, addr = exp.alloc(8 * MiB)
                handle = exp.export(idx)
                imp = Peer(self.env, conf=conf)
                self.assertEqual(imp.open(handle)[0], "cudaSuccess")
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
                self.assertEqual(exp.ask(f"reuse {8 * MiB} {addr:#x} 1")[1], "0")  # held
                imp.kill()
                # given back at an allocation after the channel thread has seen the close
                self.assertEqual(exp.ask(f"reuse {8 * MiB} {addr:#x} 60000")[1], "1")
                exp.quit()

    def test_forked_children_keep_no_channel(self):
        # a child forked without exec (a data-loader worker) closes its copies of the channel's
        # descriptors: the exporter's socket and connections, the importer's connection, so a
        # connection's close still means what it says
        exp = Peer(self.env, conf=PYTORCH)
        idx, addr = exp.alloc(8 * MiB)
        handle = exp.export(idx)
        imp = Peer(self.env, conf=PYTORCH)
        self.assertEqual(imp.open(handle)[0], "cudaSuccess")
        children = []
        for peer, channel in ((exp, 2), (imp, 1)):  # socket and connection; connection
            fds = peer.value("fds")
            child = peer.ask("fork")
            children.append(int(child[1]))
            self.assertEqual(int(child[2]), fds - channel, child)
        self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
        imp.kill()  # its child lives on
        self.assertEqual(exp.ask(f"reuse {8 * MiB} {addr:#x} 60000")[1], "1")
        for pid in children:
            os.kill(pid, 9)
        exp.quit()

    def test_close_is_answered_by_the_exporter(self):
        # cudaIpcCloseMemHandle returns once the exporter has let go: with the exporter
        # stopped, the importer's close waits; let it run, and the close returns, and the
        # exporter's next allocation finds the block (nothing left to a later wake-up)
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf)
                idx, addr = exp.alloc(8 * MiB)
                handle = exp.export(idx)
                imps = [Peer(self.env, conf=conf) for _ in range(2)]
                opened = [p.open(handle) for p in imps]
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
                for p, (_, i) in zip(imps, opened):  # one close not the last, then the last
                    stop(exp.proc.pid)
                    p.tell(f"close {i}")
                    waited = p.answer(timeout=1)
                    os.kill(exp.proc.pid, signal.SIGCONT)
                    self.assertIsNone(waited)  # no answer while the exporter cannot give one
                    self.assertEqual(p.answer(), ["close", "cudaSuccess"])
                self.assertEqual(exp.ask(f"reuse {8 * MiB} {addr:#x} 1"), ["reuse", "1", "1"])
                for p in imps:
                    p.quit()
                exp.quit()

    def test_context_gone_takes_its_exports(self):
        # a context reset frees every block of it: its exports go with them, and a handle made
        # before finds nothing to open
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf)
                idx, _ = exp.alloc(8 * MiB)
                handle = exp.export(idx)
                self.assertEqual(exp.ask("reset"), ["reset", "cudaSuccess"])
                imp = Peer(self.env, conf=conf)
                self.assertEqual(imp.open(handle), ("cudaErrorInvalidResourceHandle", -1))
                self.assertIn("no longer exports this block", imp.quit())
                exp.quit()

    def test_second_free_of_a_held_block_is_invalid(self):
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf)
                idx, addr = exp.alloc(8 * MiB)
                exp.ask(f"fill {idx} 0x33")
                handle = exp.export(idx)
                imp = Peer(self.env, conf=conf)
                err, i = imp.open(handle)
                self.assertEqual(err, "cudaSuccess")
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaErrorInvalidValue"])
                self.assertEqual(exp.ask(f"export {idx}"), ["export", "cudaErrorInvalidValue"])
                self.assertEqual(imp.value(f"check {i} 0x33"), 1)  # the importer's bytes, intact
                self.assertEqual(imp.ask(f"close {i}"), ["close", "cudaSuccess"])
                self.assertEqual(exp.ask(f"reuse {8 * MiB} {addr:#x} 1"), ["reuse", "1", "1"])
                imp.quit()
                self.assertIn("invalid", exp.quit().lower())

    def test_stale_and_altered_handles_refused(self):
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf)
                a, addr = exp.alloc(4 * MiB)
                old = exp.export(a)
                self.assertEqual(exp.ask(f"free {a}"), ["free", "cudaSuccess"])  # nobody held it
                b, addr_b = exp.alloc(4 * MiB)
                self.assertEqual(addr_b, addr)  # the same bytes, another allocation
                exp.ask(f"fill {b} 0x22")
                new = exp.export(b)
                self.assertNotEqual(new, old)
                imp = Peer(self.env, conf=conf)
                fds = imp.value("fds")
                self.assertEqual(imp.open(old), ("cudaErrorInvalidResourceHandle", -1))
                # one byte changed in the export's id (a wrong nonce), the channel's secret, the
                # exporter's start time (a reused pid), its pid
                for name, at in (("id", 36), ("secret", 27), ("start", 16), ("pid", 10)):
                    forged = new[:2 * at] + "%02x" % (int(new[2 * at:2 * at + 2], 16) ^ 0x40) + new[2 * at + 2:]
                    self.assertEqual(imp.open(forged)[1], -1, name)
                self.assertEqual(imp.value("fds"), fds)  # nothing kept of the refused opens
                err, i = imp.open(new)
                self.assertEqual(err, "cudaSuccess")
                self.assertEqual(imp.value(f"check {i} 0x22"), 1)
                self.assertEqual(imp.ask(f"close {i}"), ["close", "cudaSuccess"])
                stderr = imp.quit()
                self.assertIn("no longer exports this block", stderr)
                self.assertIn("has exited", stderr)
                exp.quit()

    def test_block_of_more_handles_than_one_answer(self):
        # under defragment a block of 160 MiB is 80 handles of 2 MiB: the open's answer carries
        # the first 64, a second request the rest; the importer sees every byte, keeps no
        # descriptor of them, and the close gives the block back
        exp = Peer(self.env, conf="defragment:True")
        idx, addr = exp.alloc(160 * MiB)
        exp.ask(f"fill {idx} 0x6b")
        handle = exp.export(idx)
        imp = Peer(self.env, conf="defragment:True")
        fds = imp.value("fds")
        err, i = imp.open(handle)
        self.assertEqual(err, "cudaSuccess")
        self.assertEqual(imp.value(f"check {i} 0x6b"), 1)
        self.assertEqual(imp.value("fds"), fds + 1)  # the connection; no handle's descriptor
        imp.ask(f"fill {i} 0x2c")
        self.assertEqual(exp.value(f"check {idx} 0x2c"), 1)  # the same bytes, both ways
        self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
        self.assertEqual(imp.ask(f"close {i}"), ["close", "cudaSuccess"])
        self.assertEqual(exp.ask(f"reuse {160 * MiB} {addr:#x} 1"), ["reuse", "1", "1"])
        imp.quit()
        exp.quit()

    def test_descriptors_of_both_sides(self):
        # 40 exports under a limit of 64 descriptors: all succeed, the program keeps every
        # descriptor but the channel's one socket (there since the stats page: exports add
        # none); the importer's one connection goes with its last close
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp = Peer(self.env, conf=conf, nofile=64)
                answer = exp.ask("allocs 40 4096")
                addrs, first = answer[1].split(","), int(answer[2])
                blocks = list(range(first, first + 40))
                files, fds = exp.value("files"), exp.value("fds")
                handles = [exp.export(i) for i in blocks]
                self.assertEqual(exp.value("fds"), fds)
                self.assertEqual(exp.value("files"), files)
                imp = Peer(self.env, conf=conf)
                ifds = imp.value("fds")
                opened = [imp.open(h) for h in handles]
                self.assertEqual([o[0] for o in opened], ["cudaSuccess"] * 40)
                self.assertEqual(imp.value("fds"), ifds + 1)
                self.assertEqual(exp.value("fds"), fds + 1)
                # all 40 freed while held, then closed: all given back (in batches of 32), and
                # the same 40 allocations land in the same bytes
                for i in blocks:
                    self.assertEqual(exp.ask(f"free {i}"), ["free", "cudaSuccess"])
                for _, i in opened:
                    self.assertEqual(imp.ask(f"close {i}"), ["close", "cudaSuccess"])
                self.assertEqual(imp.value("fds"), ifds)
                self.assertEqual(sorted(exp.ask("allocs 40 4096")[1].split(",")), sorted(addrs))
                self.assertEqual(exp.fds_settle(fds), fds)
                self.assertEqual(exp.value("stdio"), 1)
                imp.quit()
                exp.quit()


class FreeAsync(Base):
    """cudaFreeAsync on blocks tessera served from cudaMalloc: the driver must never see them
    (it would free the whole segment under the neighbour, or refuse an interior pointer)."""

    def test_freed_by_tessera(self):
        plain = self.env.run(probe("free_async_probe"), preload=False)
        shim = self.env.run(probe("free_async_probe"))
        self.ok(plain)
        self.ok(shim)
        self.assertEqual(plain.result["neighbour"], "intact", plain)
        self.assertEqual(shim.result, plain.result, shim)
        self.assertEqual(shim.result["twice"], "cudaErrorInvalidValue")
        st = shim.stats
        self.assertIsNotNone(st, shim)
        # a, b, c and the cudaMallocAsync block were all tessera's (StreamOrdered has the rest)
        self.assertEqual(st["allocation.all.allocated"], 4, st)
        self.assertEqual(st["allocation.all.freed"], 4, st)
        self.assertEqual(st["num_invalid_frees"], 1, st)
        self.assertIn("invalid cudaFreeAsync/cuMemFreeAsync", shim.stderr)


class PeerAccess(Base):
    """Peer access covers a peer's driver allocations but not its cuMemMap mappings: with memory
    tessera maps itself, device 0's kernels may touch device 1's blocks only because tessera
    grants them, for the mappings made before peer access was enabled and after."""

    EXTRA = {"TESSERA_SIM_DEVICES": "2"}

    def test_every_policy_keeps_peer_access(self):
        plain = self.env.run(prog("peer_access", "--count", "3"), memory="256M", preload=False,
                             extra=self.EXTRA)
        self.ok(plain)
        self.assertEqual(plain.result["denied"], "0", plain)
        for conf in ("", "expandable_segments:True", "defragment:True",
                     "defragment:True,handle_policy:coarse"):
            with self.subTest(conf=conf):
                run = self.env.run(prog("peer_access", "--count", "3"), memory="256M",
                                   conf=conf or None, extra=self.EXTRA)
                self.ok(run)
                self.assertEqual(run.result["check"], "sim", run)
                self.assertEqual(run.result["denied"], "0", run)
                # tessera served the six blocks, on device 1
                by_dev = {v["device"]: v for v in (self.env.page_slots() or {}).values()}
                self.assertEqual(by_dev.get(1, {}).get("num_alloc_calls"), 6, by_dev)


class MultiDevice(Base):
    """A multi-GPU program: one allocator per device, frees made while another device is current
    (and by another device's thread) go back to the right one."""

    ARGS = ["--count", "16", "--rounds", "2", "--threads"]

    def test_per_device_pools(self):
        extra = {"TESSERA_SIM_DEVICES": "2"}
        plain = self.env.run(prog("multi_device", *self.ARGS), memory="1G", preload=False, extra=extra)
        slots_plain = self.env.page_slots()
        shim = self.env.run(prog("multi_device", *self.ARGS), memory="1G", extra=extra)
        self.ok(plain)
        self.ok(shim)
        self.assertIsNone(slots_plain)
        # the same program, the same answer: every block on the device that was current, intact
        for k in ("devices", "allocs", "cross_frees", "thread_frees", "wrong_device"):
            self.assertEqual(shim.result[k], plain.result[k], (k, shim))
        self.assertEqual(shim.result["devices"], "2")
        self.assertGreater(int(shim.result["cross_frees"]), 0)
        self.assertGreater(int(shim.result["thread_frees"]), 0)
        # one slot per device; between them they served every allocation and took every free back
        slots = self.env.page_slots()
        self.assertIsNotNone(slots, shim)
        by_dev = {v["device"]: v for v in slots.values()}
        self.assertEqual(sorted(by_dev), [0, 1], slots)
        served = 0
        for dev, st in by_dev.items():
            with self.subTest(device=dev):
                self.assertGreater(st["num_alloc_calls"], 0, st)
                self.assertEqual(st["allocation.all.freed"], st["allocation.all.allocated"], st)
                self.assertEqual(st["allocated_bytes.all.current"], 0, st)
                self.assertEqual(st["num_invalid_frees"], 0, st)
                served += st["allocation.all.allocated"]
        self.assertEqual(served, int(shim.result["allocs"]))
        # each device's driver saw far fewer allocations than the program made on it
        sim = {d["device"]: d for d in shim.sim}
        plain_sim = {d["device"]: d for d in plain.sim}
        for dev in (0, 1):
            made = sim[dev]["alloc_calls"] + sim[dev]["set_access_calls"]
            self.assertLess(made, plain_sim[dev]["alloc_calls"], (dev, sim, plain_sim))
            self.assertEqual(made, by_dev[dev]["num_device_alloc"], (dev, sim, by_dev))


class StaticRuntime(Base):
    """nvcc's default build: the CUDA runtime linked into the executable (libcudart_static.a).

    Only the driver level can be interposed there: cudart dlopens libcuda.so.1, asks dlsym for
    cuGetProcAddress_v2 and takes every entry point from that pointer. On the simulator NVIDIA's
    static runtime then stops at its private export tables (cuGetExportTable), so no allocation
    is made; what is checked is that every lookup it made before that was served by tessera, as
    seen from inside the executable, and that tessera changed nothing about the outcome. The
    allocations themselves are checked on a GPU by scripts/gpu/run-all.sh.
    """

    ROUTE = re.compile(r'^tessera: (dlsym|cuGetProcAddress(?:_v2)?)\("(\w+)"(?:, (\d+), flags (\w+))?\) '
                       r'from (.+): tessera\'s (\w+) hook$')
    ARGS = ["--first", "2M", "--middle", "4M", "--last", "2M", "--request", "6M"]

    def setUp(self):
        super().setUp()
        self.exe = os.path.join(PROGRAMS, "seed_middle_static")
        if not os.path.exists(self.exe):
            self.skipTest("seed_middle_static not built (no libcudart_static.a in the toolkit)")

    def routes(self, run):
        out = {}
        for line in run.stderr.splitlines():
            m = self.ROUTE.match(line)
            if m:
                via, sym, ver, flags, obj, hook = m.groups()
                out[hook] = dict(via=via, symbol=sym, version=int(ver or 0),
                                 flags=int(flags or "0", 0), obj=os.path.realpath(obj))
        return out

    def test_lookups_served_by_tessera(self):
        run = self.env.run([self.exe] + self.ARGS, memory="64M", conf="verbose:True")
        exe = os.path.realpath(self.exe)
        got = self.routes(run)
        # the one dlsym the static runtime makes, from inside the executable itself
        self.assertEqual(got.get("cuGetProcAddress_v2", {}).get("via"), "dlsym", run)
        self.assertEqual(got["cuGetProcAddress_v2"]["obj"], exe, run)
        # the allocation entry points, at the v2 ABI (3020), from the executable
        for hook, sym in (("cuMemAlloc_v2", "cuMemAlloc"), ("cuMemFree_v2", "cuMemFree"),
                          ("cuMemGetInfo_v2", "cuMemGetInfo")):
            with self.subTest(hook=hook):
                r = got.get(hook)
                self.assertIsNotNone(r, run)
                self.assertEqual((r["via"], r["symbol"], r["obj"]), ("cuGetProcAddress_v2", sym, exe), run)
                self.assertGreaterEqual(r["version"], 3020, run)
        # a per-thread-stream request got the _ptsz hook, a default one the plain hook (the static
        # runtime asks for both variants of every entry point)
        for hook, per_thread in (("cuStreamBeginCapture_v2_ptsz", True), ("cuStreamBeginCapture_v2", False),
                                 ("cuStreamEndCapture_ptsz", True), ("cuStreamEndCapture", False)):
            with self.subTest(hook=hook):
                self.assertIn(hook, got, run)
                self.assertEqual(bool(got[hook]["flags"] & 2), per_thread, (hook, got[hook]))

    def test_outcome_unchanged(self):
        plain = self.env.run([self.exe] + self.ARGS, memory="64M", preload=False)
        shim = self.env.run([self.exe] + self.ARGS, memory="64M")
        # On the simulator the static runtime stops at its private export tables, so the first
        # runtime call fails the same known way with and without tessera: exit status 1 and the
        # program's error line, never a signal or a different failure.
        self.assertEqual(plain.rc, 1, plain)
        self.assertIn("RESULT status=error call=cudaMemGetInfo error=cudaErrorNotSupported",
                      plain.stdout, plain)
        self.assertEqual((shim.rc, shim.stdout), (plain.rc, plain.stdout), shim)
        self.assertNotIn("tessera:", shim.stderr, shim)  # nothing to say without verbose


def main():
    names = sys.argv[1:]
    loader = unittest.TestLoader()
    module = sys.modules[__name__]
    suite = unittest.TestSuite(loader.loadTestsFromName(n, module) for n in names) if names \
        else loader.loadTestsFromModule(module)
    unittest_main.finish(unittest.TextTestRunner(verbosity=2).run(suite))


if __name__ == "__main__":
    main()
