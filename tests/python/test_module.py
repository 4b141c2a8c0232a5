#!/usr/bin/env python3
"""import tessera: the counters of known pages (tests/statspage/fixture.c), the pages tessera-stat
refuses refused the same way, stale and untrusted pages, the listing, snapshots, the
configuration check, and a process reading its own page every step (under tessera run --sim).

Run one class:  test_module.py Pages   (meson registers each class separately)
"""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import helpers
from helpers import MiB, TOOLS, run_script

sys.path.insert(0, os.path.join(helpers.SOURCE, "tests", "statspage"))
import fixture_server  # noqa: E402

import tessera

FIXTURE = os.path.join(helpers.BUILD, "tests", "statspage", "statspage-fixture")
STAT = os.path.join(TOOLS, "tessera-stat")
KNOWN_CONFIG_PART = "expandable_segments:True,stats:True"  # fixture.c's KNOWN_CONFIG

# What fixture.c publishes (slot 0: device 0; slot 1: device 1); test_cli.py checks the same
# through tessera-stat.
KNOWN0 = {
    "allocated_bytes.small_pool.current": 1 * MiB,
    "allocated_bytes.large_pool.current": 768 * MiB,
    "allocated_bytes.all.current": 769 * MiB,
    "allocated_bytes.all.peak": 900 * MiB,
    "reserved_bytes.all.current": 1026 * MiB,
    "reserved_bytes.large_pool.peak": 1198 * MiB,
    "allocation.all.current": 43,
    "segment.large_pool.current": 9,
    "num_alloc_retries": 3,
    "num_ooms": 1,
    "num_ops": 12345,
    "num_alloc_calls": 7000,
    "max_split_size": -1,
}
KNOWN1 = {"allocated_bytes.all.current": 100 * MiB, "reserved_bytes.all.current": 100 * MiB,
          "num_ops": 77, "max_split_size": 256 * MiB}


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-py-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def serve(self):
        s = fixture_server.Server(FIXTURE, self.dir)
        self.addCleanup(s.stop)
        return s

    def sleeper(self):
        p = subprocess.Popen(["sleep", "60"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        return p

    def forge(self, kind, pid):
        subprocess.run([FIXTURE, "forge", kind, str(pid)], check=True,
                       env=dict(os.environ, TESSERA_STATS_DIR=self.dir))
        return os.path.join(self.dir, "tessera.%d" % pid)

    def refused(self, pid, kind, **kw):
        with self.assertRaises(tessera.PageError) as cm:
            tessera.stats(pid, dir=self.dir, **kw)
        self.assertEqual((cm.exception.kind, cm.exception.pid), (kind, pid), str(cm.exception))
        return str(cm.exception)

    def stat_error(self, pid):
        """What tessera-stat PID says about the same page (the same reader)."""
        p = subprocess.run([STAT, "--dir", self.dir, str(pid)], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stdout)
        return p.stderr


class Pages(Base):
    def test_known_counters(self):
        a = self.serve()
        s = tessera.stats(a.pid, dir=self.dir)
        self.assertEqual((s.pid, s.device, s.state), (a.pid, 0, "live"))
        self.assertEqual({k: s[k] for k in KNOWN0}, KNOWN0)
        s1 = tessera.stats(a.pid, device=1, dir=self.dir)
        self.assertEqual(s1.device, 1)
        self.assertEqual({k: s1[k] for k in KNOWN1}, KNOWN1)
        self.assertEqual(tessera.stats(a.pid, device=0, dir=self.dir)["num_ops"], 12345)
        self.refused(a.pid, "empty", device=5)

    def test_same_names_and_values_as_tessera_stat(self):
        a = self.serve()
        doc = json.loads(subprocess.run([STAT, "--dir", self.dir, "--json", str(a.pid)],
                                        capture_output=True, text=True, check=True).stdout)
        for dev in (0, 1):
            want = {k: v for k, v in doc[str(a.pid)][str(dev)].items()
                    if k not in ("device", "context_id", "segment_map")
                    and not k.startswith("peak_reserved_above_allocated_")}  # derived, not counters
            got = tessera.stats(a.pid, device=dev, dir=self.dir)
            self.assertEqual(got.to_dict(), want)
            self.assertEqual(list(got), list(want))  # the page's order
        self.assertEqual(len(tessera.KEYS), len(want))

    def test_mapping(self):
        a = self.serve()
        s = tessera.stats(a.pid, dir=self.dir)
        import collections.abc
        self.assertIsInstance(s, collections.abc.Mapping)
        self.assertEqual(len(s), len(tessera.KEYS))
        self.assertEqual(list(s.keys()), list(tessera.KEYS))
        self.assertEqual(list(zip(s.keys(), s.values())), list(s.items()))
        self.assertEqual(dict(s), s.to_dict())
        self.assertIn("num_ooms", s)
        self.assertNotIn("num_oom", s)
        self.assertEqual(s.get("num_ooms"), 1)
        self.assertEqual(s.get("no_such_counter", 7), 7)
        self.assertIsNone(s.get("no_such_counter"))
        with self.assertRaises(KeyError):
            s["no_such_counter"]
        self.assertIn("pid=%d device=0 live" % a.pid, repr(s))
        self.assertIn("allocated_bytes.all.current=%d" % (769 * MiB), repr(s))
        self.assertEqual(json.loads(json.dumps(s.to_dict()))["num_alloc_calls"], 7000)

    def test_damaged_pages_refused_as_tessera_stat_refuses_them(self):
        sleeper = self.sleeper()
        cases = {
            "corrupt": ("corrupt", "corrupt: total size"),
            "truncated": ("truncated", "truncated: 1000 bytes, the header alone needs 4096"),
            "foreign": ("foreign", "not a tessera stats page (magic 0x"),
            "newer": ("newer-layout", "written by a newer tessera (layout 99"),
            "notready": ("not-ready", "not published yet (magic is 0)"),
            "corrupt-slot": ("corrupt", "corrupt: slot state 9"),
        }
        for forged, (kind, message) in cases.items():
            with self.subTest(forged=forged):
                self.forge(forged, sleeper.pid)
                msg = self.refused(sleeper.pid, kind)
                self.assertIn(message, msg)
                self.assertIn(message, self.stat_error(sleeper.pid))
        # a valid page of the same process reads, with the known numbers
        self.forge("valid", sleeper.pid)
        self.assertEqual(tessera.stats(sleeper.pid, dir=self.dir)["num_ops"], 12345)

    def test_untrusted_pages_refused(self):
        sleeper = self.sleeper()
        path = self.forge("valid", sleeper.pid)
        os.chmod(path, 0o666)  # anyone could have written it
        self.assertIn("writable by group or others", self.refused(sleeper.pid, "untrusted"))
        os.chmod(path, 0o644)
        self.assertEqual(tessera.stats(sleeper.pid, dir=self.dir)["num_ops"], 12345)
        if os.geteuid() == 0:  # another user's file naming this user's process
            os.chown(path, 65534, 65534)
            self.assertIn("belongs to uid 65534", self.refused(sleeper.pid, "untrusted"))
        # nor is it listed as a process
        self.assertNotIn(sleeper.pid, [p.pid for p in tessera.processes(self.dir, stale=True)])

    def test_stale_pages_are_the_last_numbers(self):
        a = self.serve()
        os.kill(a.pid, signal.SIGKILL)
        a.p.wait()
        s = tessera.stats(a.pid, dir=self.dir)
        self.assertEqual(s.state, "stale")
        self.assertIn("process %d is gone" % a.pid, s.state_reason)
        self.assertEqual(s["allocated_bytes.all.current"], 769 * MiB)
        reused = self.sleeper()
        self.forge("reused", reused.pid)
        self.assertIn("now belongs to another process",
                      tessera.stats(reused.pid, dir=self.dir).state_reason)
        self.assertEqual([p.pid for p in tessera.processes(self.dir)], [])
        stale = {p.pid: p.state for p in tessera.processes(self.dir, stale=True)}
        self.assertEqual(stale, {a.pid: "stale", reused.pid: "stale"})

    def test_processes(self):
        a = self.serve()
        b = self.serve()
        procs = tessera.processes(self.dir)
        self.assertEqual([p.pid for p in procs], sorted([a.pid, b.pid]))
        p = procs[0]
        self.assertEqual(p.devices, (0, 1))
        self.assertIn("statspage-fixture", p.command)
        self.assertEqual((p.state, p.version), ("live", tessera.__version__))
        self.assertIn(KNOWN_CONFIG_PART, p.config)
        self.assertIn("is running", p.state_reason)
        with self.assertRaises(OSError):
            tessera.processes(os.path.join(self.dir, "no-such-dir"))

    def test_only_the_counters_the_writer_maintains(self):
        """A page whose writer maintains fewer counter words (stats_words, an older tessera)
        shows those and no more, in order, as tessera-stat does."""
        sleeper = self.sleeper()
        path = self.forge("valid", sleeper.pid)
        with open(path, "r+b") as f:
            f.seek(136)  # stats_words (docs/stats-page.md)
            f.write((150).to_bytes(4, sys.byteorder))
        s = tessera.stats(sleeper.pid, dir=self.dir)
        self.assertEqual(len(s), 150)
        self.assertEqual(list(s), list(tessera.KEYS[:150]))
        for k in tessera.KEYS[150:]:
            self.assertNotIn(k, s)
            self.assertIsNone(s.get(k))
        self.assertEqual(s["num_ops"], 12345)  # word 124: maintained

    def test_bad_arguments(self):
        gone = subprocess.Popen(["true"])
        gone.wait()
        msg = self.refused(gone.pid, "missing")
        self.assertIn("no stats page for pid %d" % gone.pid, msg)
        for bad in (0, -3):
            with self.assertRaises(ValueError):
                tessera.stats(bad, dir=self.dir)
        for bad in (-1, 65536):
            with self.assertRaises(ValueError):
                tessera.stats(1, device=bad, dir=self.dir)
        a = self.serve()
        self.refused(a.pid, "empty", device=65535)  # the highest ordinal: asked, not in use
        with self.assertRaises(TypeError):
            tessera.stats("1", dir=self.dir)


class Snapshot(Base):
    def test_snapshot_of_a_running_process(self):
        a = self.serve()
        out = os.path.join(self.dir, "snap.pickle")
        said = tessera.snapshot(a.pid, out, wait=0.2, dir=self.dir)
        self.assertTrue(any(l.startswith("device 0:") for l in said), said)
        with open(out, "rb") as f:
            snap = pickle.load(f)
        self.assertEqual(snap["tessera"]["pid"], a.pid)
        self.assertTrue(snap["segments"])
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o600)

    def test_snapshot_failure_raises(self):
        gone = subprocess.Popen(["true"])
        gone.wait()
        with self.assertRaises(tessera.SnapshotError) as cm:
            tessera.snapshot(gone.pid, os.path.join(self.dir, "x.pickle"), dir=self.dir)
        self.assertIn("tessera.%d: no such page" % gone.pid, str(cm.exception))

    def test_tool_paths(self):
        self.assertEqual(tessera.tool_path("tessera-stat"), os.path.realpath(STAT))
        self.assertEqual(tessera.library_path(), os.path.realpath(helpers.SHIM))
        with self.assertRaises(FileNotFoundError):
            tessera.tool_path("tessera-no-such-tool")


class Pause(Base):
    """tessera.pause() and tessera.resume() on this process, under tessera run --sim: the device
    gets its pages back, the bytes come back at the same address, the counters say so; a refusal
    raises PauseError with tessera-stat's reason."""

    def test_pause_and_resume_this_process(self):
        p, facts = run_script("""
            a = malloc(8 << 20)
            assert rt.cudaMemset(a, 0x5c, ctypes.c_size_t(8 << 20)) == 0
            said = tessera.pause()
            s = tessera.stats()
            try:
                tessera.pause()
                again = None
            except tessera.PauseError as e:
                again = str(e)
            resumed = tessera.resume()
            buf = (ctypes.c_ubyte * (8 << 20))()
            assert rt.cudaMemcpy(buf, a, ctypes.c_size_t(8 << 20), 2) == 0
            done(said=said, resumed=resumed, again=again, pauses=s["num_pauses"],
                 saved=s["pause_saved_bytes"], resumes=tessera.stats()["num_resumes"],
                 intact=all(b == 0x5c for b in bytes(buf)))
            """, self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(facts["said"]), 1, facts)
        self.assertIn("device 0: paused: 8.00 MiB copied to host memory", facts["said"][0])
        self.assertIn("device 0: resumed: 8.00 MiB copied back", facts["resumed"][0])
        self.assertIn("refused to pause: it is paused already", facts["again"])
        self.assertEqual((facts["pauses"], facts["saved"], facts["resumes"]), (1, 8 * MiB, 1))
        self.assertTrue(facts["intact"], facts)

    def test_a_page_without_a_channel_is_not_asked(self):
        # a page of a tessera older than the channel (layout 2), and one that names none
        for kind, why in (("layout2", "an older tessera"), ("valid", "its stats page names none")):
            with self.subTest(kind=kind):
                p = self.sleeper()
                self.forge(kind, p.pid)
                with self.assertRaises(tessera.PauseError) as cm:
                    tessera.pause(p.pid, dir=self.dir)
                self.assertEqual(str(cm.exception), "tessera-stat: process %d has no control "
                                 "channel to ask (%s)" % (p.pid, why))

    def test_resume_of_a_process_not_paused_raises(self):
        gone = subprocess.Popen(["true"])
        gone.wait()
        with self.assertRaises(tessera.PauseError) as cm:
            tessera.resume(gone.pid, dir=self.dir)
        self.assertIn("tessera.%d: no such page" % gone.pid, str(cm.exception))


class Config(Base):
    def test_text(self):
        conf, source, notes = tessera.check_config("defragment:True,memory_limit:1G")
        self.assertIn("defragment:True", conf)
        self.assertIn("memory_limit:1G", conf)
        self.assertEqual((source, notes), ("TESSERA_ALLOC_CONF", []))
        with self.assertRaises(tessera.ConfigError) as cm:
            tessera.check_config("expandable_segmnets:True")
        self.assertIn("did you mean 'expandable_segments'", str(cm.exception))
        self.assertIsInstance(cm.exception, ValueError)

    def test_environment(self):
        saved = {k: os.environ.pop(k) for k in list(os.environ)
                 if k in ("TESSERA_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        self.addCleanup(os.environ.update, saved)
        try:
            conf, source, notes = tessera.check_config()
            self.assertIsNone(source)
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,turbo:1"
            conf, source, notes = tessera.check_config()  # lenient: the problem is a note
            self.assertEqual(source, "PYTORCH_CUDA_ALLOC_CONF")
            self.assertIn("expandable_segments:True", conf)
            self.assertTrue(any("turbo" in n for n in notes), notes)
            os.environ["TESSERA_ALLOC_CONF"] = "turbo:1"  # first set is used alone, strictly
            with self.assertRaises(tessera.ConfigError):
                tessera.check_config()
        finally:
            for k in ("TESSERA_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
                os.environ.pop(k, None)


class OwnPage(Base):
    """A process under tessera reading its own page: fresh numbers at every call, from a
    read-only mapping of the page (no descriptor held), the lowest device in use by default,
    and never the parent's page in a forked child."""

    def test_own_page_every_step(self):
        p, facts = run_script("""
            set_device(1)
            a = malloc(3 << 20)
            first = tessera.stats()                 # device 1: the only one in use
            set_device(0)
            b = malloc(1 << 20)
            now = tessera.stats()                   # device 0 now in use: the lowest
            again = tessera.stats(device=1)
            c = malloc(5 << 20)
            later = tessera.stats()
            by_pid = tessera.stats(os.getpid())
            page = os.path.join(os.environ["TESSERA_STATS_DIR"], "tessera.%d" % os.getpid())
            maps = open("/proc/self/maps").read()
            fds = [os.readlink("/proc/self/fd/" + f) for f in os.listdir("/proc/self/fd")
                   if os.path.exists("/proc/self/fd/" + f)]
            free(c); free(b); free(a)
            done(first=[first.device, first["allocated_bytes.all.current"], first.pid],
                 now=[now.device, now["allocated_bytes.all.current"]],
                 again=[again.device, again["allocated_bytes.all.current"]],
                 later=later["allocated_bytes.all.current"],
                 later_calls=later["num_alloc_calls"],
                 by_pid=by_pid["allocated_bytes.all.current"],
                 pid=os.getpid(), mapped=page in maps, fd_open=page in fds,
                 freed=tessera.stats()["allocated_bytes.all.current"])
            """, self.dir, TESSERA_SIM_DEVICES="2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["first"], [1, 3 * MiB, facts["pid"]], facts)
        self.assertEqual(facts["now"], [0, 1 * MiB], facts)
        self.assertEqual(facts["again"], [1, 3 * MiB], facts)
        self.assertEqual(facts["later"], 6 * MiB, facts)
        self.assertEqual(facts["later_calls"], 2, facts)
        self.assertEqual(facts["by_pid"], 6 * MiB, facts)
        self.assertEqual(facts["freed"], 0, facts)
        self.assertEqual((facts["mapped"], facts["fd_open"]), (True, False), facts)

    def test_page_opened_again_lets_the_last_go(self):
        # another spelling of the directory opens the page again: the mapping before goes, so
        # a process that names its directories in turn holds one mapping, never one per call
        p, facts = run_script("""
            a = malloc(2 << 20)
            d = os.environ["TESSERA_STATS_DIR"]
            page = os.path.realpath(os.path.join(d, "tessera.%d" % os.getpid()))
            def mappings():
                return sum(l.rstrip().endswith(page) for l in open("/proc/self/maps"))
            writer = mappings()  # tessera's own, which writes the page
            seen = []
            for spelling in (None, d + "/.", d, d + "/.", None):
                seen.append(tessera.stats(dir=spelling)["allocated_bytes.all.current"])
            reader = mappings() - writer
            free(a)
            done(seen=seen, writer=writer, reader=reader)
            """, self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["seen"], [2 * MiB] * 5, facts)
        self.assertEqual((facts["writer"], facts["reader"]), (1, 1), facts)

    def test_forked_child_reads_its_own_page(self):
        p, facts = run_script("""
            a = malloc(2 << 20)
            parent = tessera.stats()["allocated_bytes.all.current"]
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    tessera.stats()
                    said = "read the parent's page"
                except tessera.PageError as e:
                    said = "%s %d" % (e.kind, e.pid)
                os.write(w, said.encode())
                os._exit(0)
            os.waitpid(child, 0)
            said = os.read(r, 200).decode()
            done(parent=parent, child=child, said=said,
                 after=tessera.stats()["allocated_bytes.all.current"])
            """, self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["parent"], 2 * MiB, facts)
        self.assertEqual(facts["said"], "missing %d" % facts["child"], facts)
        self.assertEqual(facts["after"], 2 * MiB, facts)

    def test_another_directory_then_its_own(self):
        """stats(dir=D) reads the page of this process in D; a later stats() without a
        directory reads the one in TESSERA_STATS_DIR again, not D's."""
        elsewhere = os.path.join(self.dir, "elsewhere")
        os.mkdir(elsewhere)
        p, facts = run_script("""
            a = malloc(3 << 20)
            import subprocess
            subprocess.run([os.environ["FIXTURE"], "forge", "valid", str(os.getpid())], check=True,
                           env=dict(os.environ, TESSERA_STATS_DIR=os.environ["ELSEWHERE"]))
            there = tessera.stats(dir=os.environ["ELSEWHERE"])["allocated_bytes.all.current"]
            here = tessera.stats()["allocated_bytes.all.current"]
            again = tessera.stats(dir=os.environ["ELSEWHERE"])["allocated_bytes.all.current"]
            done(there=there, here=here, again=again)
            """, self.dir, FIXTURE=FIXTURE, ELSEWHERE=elsewhere)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual((facts["there"], facts["here"], facts["again"]),
                         (769 * MiB, 3 * MiB, 769 * MiB), facts)

    def test_no_page_yet(self):
        p, facts = run_script("""
            try:
                tessera.stats()
                said = None
            except tessera.PageError as e:
                said = [e.kind, e.pid == os.getpid(), str(e)]
            done(said=said)
            """, self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["said"][:2], ["missing", True], facts)
        self.assertIn("tessera has served no CUDA allocation here yet", facts["said"][2])


if __name__ == "__main__":
    helpers.main(sys.modules[__name__])
