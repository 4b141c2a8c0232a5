#!/usr/bin/env python3
"""Hardening: tessera never harms the program it is preloaded into, that program's files, or
another user, and one forged file cannot stall or fool tessera-stat.

Run one class:  test_hardening.py ClassName   (meson registers each class separately)
Environment:    as test_integration.py (TS_BUILD, TS_SOURCE).
"""
import json
import os
import pwd
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_integration import PROBES, PYTORCH, STAT, SHIM, Base, Peer, prog, probe  # noqa: E402

OTHER_USER = "tessera-probe"
HEADER, SLOT = 4096, 94208
MAP_IN_SLOT, MAP_HISTORY_WRITTEN = 2112, 112  # offsetof(slot head, map), (map, history_written)
# attempts at a busy slot, at most (statspage/reader.c: TS_READ_RETRIES, or 400 for a reader
# that never set its own); past the first busy slot of a page, one look at each
READ_RETRIES = 400
# read calls tessera-stat may make per page besides its slots (the file's header, the owner's
# /proc files, the history ring's name)
PAGE_READS = 32
PAGE_BYTES = 4096  # and the bytes of those reads, at most
SLOT_HEAD = 2240  # sizeof(tessera_page_slot_head): a slot's read when it records no map


def reseal_map(page, slot):
    """Recompute the checksum of the map of the slot at offset slot (tessera_page_map_checksum:
    FNV-1a over 64-bit words of the map header with its checksum at 0, the recorded segments,
    then the recorded blocks)."""
    m = slot + MAP_IN_SLOT
    nseg, nblk = struct.unpack_from("<II", page, m + 80)
    struct.pack_into("<Q", page, m + 72, 0)
    words = bytes(page[m:m + 128]) + bytes(page[slot + 2240:slot + 2240 + 48 * nseg]) + \
        bytes(page[slot + 26816:slot + 26816 + 16 * nblk])
    h = 0xcbf29ce484222325
    for (w,) in struct.iter_unpack("<Q", words):
        h = ((h ^ w) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    struct.pack_into("<Q", page, m + 72, h)
BROKEN = "expandable_segmnets:True"  # a typo: strict TESSERA_ALLOC_CONF refuses it


def tessera_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("tessera:")]


def one_line(test, run):
    """The one tessera: line of a run (asserted to be exactly one)."""
    lines = tessera_lines(run.stderr)
    test.assertEqual(len(lines), 1, run)
    return lines[0]


def start_ticks(pid):
    text = open(f"/proc/{pid}/stat").read()
    return int(text[text.rindex(")") + 2:].split()[19])


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def stat_json(stats_dir, *args):
    out = subprocess.run([STAT, "--dir", stats_dir, "--json", *args], capture_output=True, text=True)
    return out, json.loads(out.stdout) if out.stdout.strip() else {}


def kept_page(test):
    """The bytes of a real page (a finished run, kept), for forging."""
    run = test.env.run(prog("meminfo", "--unit", "4M"))
    test.ok(run)
    name = [f for f in os.listdir(test.env.stats_dir) if f.startswith("tessera.")][0]
    data = bytearray(open(os.path.join(test.env.stats_dir, name), "rb").read())
    os.unlink(os.path.join(test.env.stats_dir, name))
    return data


def kept_page_and_ring(test):
    """The bytes of a real page and of its history ring (a finished run, kept)."""
    run = test.env.run(prog("meminfo", "--unit", "4M"), conf="history_events:64")
    test.ok(run)
    names = sorted(f for f in os.listdir(test.env.stats_dir) if f.startswith("tessera."))
    test.assertEqual(len(names), 2, names)
    data = [open(os.path.join(test.env.stats_dir, n), "rb").read() for n in names]
    for n in names:
        os.unlink(os.path.join(test.env.stats_dir, n))
    return bytearray(data[0]), bytearray(data[1])  # tessera.N, tessera.N.history.0


def forge_ring(ring, pid, capacity=None, written=None):
    """ring, for pid; optionally claiming capacity events (the file sparse up to them) and
    written events."""
    data = bytearray(ring)
    struct.pack_into("<i", data, 24, pid)
    if capacity is not None:
        struct.pack_into("<I", data, 20, capacity)
    if written is not None:
        struct.pack_into("<Q", data, 40, written)
    return data


def forge(page, pid, slots=None, busy=False):
    """page, renamed to pid (with pid's start time); optionally slots slots, all ACTIVE and
    mid-write (odd sequence word) for good."""
    data = bytearray(page)
    struct.pack_into("<iIQ", data, 32, pid, 0, start_ticks(pid) if pid_alive(pid) else 1)
    if slots:
        struct.pack_into("<IQ", data, 20, slots, HEADER + slots * SLOT)
        data.extend(bytes(HEADER + slots * SLOT - len(data)))
    if busy:
        for i in range(struct.unpack_from("<I", data, 20)[0]):
            base = HEADER + i * SLOT
            struct.pack_into("<Ii", data, base, 2, i % 8)  # ACTIVE, device
            struct.pack_into("<Q", data, base + 16, 1)  # sequence word odd: mid-write
    return bytes(data)


def plant_sparse(path, page, pid, slots=16):
    """A sparse page for pid with slots slots in use (copies of page's slot 0, one per device),
    written straight to path: 1.5 MB each on disk only where written."""
    hdr = bytearray(forge(page, pid)[:HEADER])
    struct.pack_into("<IQ", hdr, 20, slots, HEADER + slots * SLOT)
    head = bytearray(page[HEADER:HEADER + 2240])
    with open(path, "wb") as f:
        f.write(hdr)
        for i in range(slots):
            struct.pack_into("<i", head, 4, i)
            f.seek(HEADER + i * SLOT)
            f.write(head)
        f.truncate(HEADER + slots * SLOT)


def io_counts():
    """(read calls, bytes read) of this process, with those of every child it has reaped: the
    kernel adds a child's I/O accounting to its parent's when the parent waits for it."""
    with open("/proc/self/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscr"]), int(fields["rchar"])


def counted(argv, hang_guard=120):
    """Run argv and count what it did, where a time would say nothing on a loaded machine:
    returncode, stdout, stderr, reads (read calls) and read_bytes. Its output goes to files, so
    reading it back is not counted. hang_guard: seconds after which it is
    killed, which turns a hang into a failure (returncode -9), not a speed goal."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        reads0, bytes0 = io_counts()
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        guard = threading.Timer(hang_guard, p.kill)
        guard.start()
        try:
            _, status, _ = os.wait4(p.pid, 0)
        finally:
            guard.cancel()
        reads1, bytes1 = io_counts()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return types.SimpleNamespace(
            returncode=p.returncode, stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"), reads=reads1 - reads0,
            read_bytes=bytes1 - bytes0)


def pid_alive(pid):
    return os.path.exists(f"/proc/{pid}")


def attempts(entry):
    """{slot: attempts} of the busy slots of one page of tessera-stat --json: how often each
    was read (1: one look, where the time for retries was spent)."""
    out = {}
    for name, slot in entry.items():
        if isinstance(slot, dict) and slot.get("error_kind") == "busy":
            m = re.search(r"through (\d+) attempts", slot["error"])
            out[name] = int(m.group(1)) if m else 1 if "one look" in slot["error"] else None
    return out


class ClosedDescriptors(Base):
    def test_program_files_untouched(self):
        """The program closes fds 3..N after CUDA started and opens its own files: no page
        growth, trace line or fork-child close lands on them."""
        own = os.path.join(self.env.tmp, "own")
        os.mkdir(own)
        trace = os.path.join(self.env.tmp, "trace.csv")
        run = self.env.run(probe("fd_closer") + [own],
                           extra={"TESSERA_SIM_DEVICES": "2", "TESSERA_TRACE": trace})
        self.ok(run)
        self.assertEqual(run.result.get("files"), "ok", run)
        self.assertEqual(run.result.get("child"), "ok", run)
        slots = self.env.page_slots()
        self.assertEqual(sorted(int(s["device"]) for s in slots.values()), [0, 1], run)
        rows = open(trace).read().splitlines()
        self.assertEqual(rows[0], "Thread,Time,Action,Pointer,Size,Stream,Note")
        self.assertEqual(sum(1 for r in rows[1:] if r.split(",")[2] == "allocate"), 15002, run)
        self.assertEqual(tessera_lines(run.stderr), [], run)


class ForeignPages(Base):
    """Another local user plants and forges pages in a shared (sticky, world-writable) directory."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to create a second user (useradd)")
        try:
            pwd.getpwnam(OTHER_USER)
        except KeyError:
            if not shutil.which("useradd"):
                self.skipTest("useradd is not installed")
            made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                   "/usr/sbin/nologin", OTHER_USER], capture_output=True)
            if made.returncode == 0 and shutil.which("userdel"):
                # the machine keeps no user of ours once the test is done
                self.addCleanup(subprocess.run, ["userdel", OTHER_USER], capture_output=True)
        try:
            self.other = pwd.getpwnam(OTHER_USER)
        except KeyError:
            self.skipTest(f"cannot create the user {OTHER_USER}")
        os.chmod(self.env.tmp, 0o755)
        os.chmod(self.env.stats_dir, 0o1777)  # as /dev/shm

    def plant(self, name, data):
        """Write a file as the other user."""
        path = os.path.join(self.env.stats_dir, name)
        subprocess.run(["sh", "-c", 'umask 022; cat > "$0"', path], input=data, check=True,
                       user=self.other.pw_uid, group=self.other.pw_gid)
        self.assertEqual(os.stat(path).st_uid, self.other.pw_uid)
        return path

    def test_forged_page_of_live_process_not_shown(self):
        page = kept_page(self)
        victim = subprocess.Popen(["sleep", "60"])
        try:
            self.plant(f"tessera.{victim.pid}", forge(page, victim.pid))
            out, doc = stat_json(self.env.stats_dir)
            self.assertEqual(out.returncode, 0, out.stderr)
            entry = doc[str(victim.pid)]
            self.assertEqual(entry.get("error_kind"), "untrusted", entry)
            self.assertFalse(any(isinstance(v, dict) for v in entry.values()), entry)  # no counters
            prom = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus"],
                                  capture_output=True, text=True)
            self.assertNotIn(f'pid="{victim.pid}"', "\n".join(
                l for l in prom.stdout.splitlines() if not l.startswith("tessera_pages")))
            table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True, text=True)
            self.assertIn("untrusted", table.stdout + table.stderr)
        finally:
            victim.kill()
            victim.wait()

    def test_foreign_namespace_page_not_trusted(self):
        """N1: a page naming another pid namespace, for root's live process: its owner cannot be
        checked, so it is untrusted, never shown or exported as that process."""
        page = kept_page(self)
        victim = subprocess.Popen(["sleep", "60"])
        # a pid namespace that exists (a forger may name any; one with processes in it cannot
        # be proved dead)
        other_ns = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"])
        self.addCleanup(other_ns.wait)
        self.addCleanup(other_ns.kill)
        try:
            deadline = time.monotonic() + 10
            ns = os.stat(f"/proc/{other_ns.pid}/ns/pid").st_ino
            while ns == os.stat("/proc/self/ns/pid").st_ino and time.monotonic() < deadline:
                children = open(f"/proc/{other_ns.pid}/task/{other_ns.pid}/children").read().split()
                if children:
                    ns = os.stat(f"/proc/{children[0]}/ns/pid").st_ino
                time.sleep(0.01)
            self.assertNotEqual(ns, os.stat("/proc/self/ns/pid").st_ino)
            forged = bytearray(forge(page, victim.pid))
            struct.pack_into("<Q", forged, 48, ns)
            self.plant(f"tessera.{victim.pid}", bytes(forged))
            out, doc = stat_json(self.env.stats_dir)
            entry = doc[str(victim.pid)]
            self.assertEqual(entry.get("error_kind"), "untrusted", entry)
            self.assertNotEqual(entry.get("state"), "live", entry)
            self.assertFalse(any(isinstance(v, dict) for v in entry.values()), entry)
            prom = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus"],
                                  capture_output=True, text=True)
            self.assertNotIn(f'pid="{victim.pid}"', prom.stdout)
            self.assertIn('tessera_pages{state="live"} 0', prom.stdout)
            table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True, text=True)
            self.assertIn("no tessera processes", table.stdout)
            self.assertIn("names pid namespace", table.stdout)
        finally:
            victim.kill()
            victim.wait()

    def test_foreign_namespace_page_of_no_process_collected(self):
        """N1: a page for a pid that does not exist, in a namespace no process is in: never
        live, and --gc (root, which sees every namespace) removes it."""
        page = kept_page(self)
        gone = dead_pid()
        forged = bytearray(forge(page, gone))
        struct.pack_into("<Q", forged, 48, 4026531836 - 9)
        path = self.plant(f"tessera.{gone}", bytes(forged))
        _, doc = stat_json(self.env.stats_dir)
        self.assertNotEqual(doc[str(gone)].get("state"), "live", doc)
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                             text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("no process is left in its pid namespace", out.stdout)
        self.assertFalse(os.path.exists(path))

    def test_busy_pages_of_one_user_spare_the_others(self):
        """N7: another user's 100 live processes have pages whose 16 slots always look
        mid-write, on a loaded machine. Every listing reads a bounded number of slots, each a
        bounded number of times, and their pages spend only their user's time for retries: this
        user's busy page, read after theirs, is still retried in full (a page being written is
        then read whole), while theirs get one look once their time is spent."""
        page = kept_page(self)
        theirs = [subprocess.Popen(["sleep", "120"], user=self.other.pw_uid,
                                   group=self.other.pw_gid) for _ in range(100)]
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # the load
        mine = subprocess.Popen(["sleep", "120"])  # after theirs: read once their pages were
        for p in theirs + [burner, mine]:
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
        for p in theirs:
            self.plant(f"tessera.{p.pid}", forge(page, p.pid, slots=16, busy=True))
        with open(os.path.join(self.env.stats_dir, f"tessera.{mine.pid}"), "wb") as f:
            f.write(forge(page, mine.pid, busy=True))
        for args in ([], ["--prometheus"], ["--json"]):
            out = counted([STAT, "--dir", self.env.stats_dir, *args])  # 120 s: a hang guard
            self.assertEqual(out.returncode, 0, out.stderr[-300:])
            if args == ["--json"]:
                # bounded in counts, which load cannot change (a time would): 512 of their
                # slots read (32 pages), the others' pages skipped; of each page read, slot 0
                # retried (or one look, once their time for retries is spent) and the other
                # slots one look each
                doc = json.loads(out.stdout)
                read = [p.pid for p in theirs if attempts(doc[str(p.pid)])]
                self.assertEqual(len(read), 512 // 16)
                for pid in read:
                    tried = attempts(doc[str(pid)])
                    self.assertEqual(len(tried), 16, doc[str(pid)])
                    self.assertLessEqual(tried.pop("slot0"), READ_RETRIES)
                    self.assertEqual(set(tried.values()), {1}, pid)  # one look each
        table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True, text=True)
        rows = [l for l in table.stdout.splitlines() if l.startswith(f"{mine.pid} ")]
        self.assertTrue(rows, table.stdout[-500:])
        self.assertRegex(rows[0], r"slot 0: the writer held its sequence lock through \d+ attempts")
        self.assertIn(f"one look: the time for retries on pages of uid {self.other.pw_uid} is spent",
                      table.stdout)
        self.assertNotIn("uid 0 is spent", table.stdout)

    def test_one_user_many_pages_bounded(self):
        """N2: another user's 150 live processes publish pages with 16 slots in use each
        (2,400 slots). A scrape reads a bounded share of them (512 slots per user), so the bytes
        it reads and its body stay small, and this user's process is still exported."""
        page = kept_page(self)
        theirs = [subprocess.Popen(["sleep", "120"], user=self.other.pw_uid,
                                   group=self.other.pw_gid) for _ in range(150)]
        mine = subprocess.Popen(["sleep", "120"])
        for p in theirs + [mine]:
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
        for p in theirs:
            path = os.path.join(self.env.stats_dir, f"tessera.{p.pid}")
            plant_sparse(path, page, p.pid)
            os.chown(path, self.other.pw_uid, self.other.pw_gid)
        with open(os.path.join(self.env.stats_dir, f"tessera.{mine.pid}"), "wb") as f:
            f.write(forge(page, mine.pid))
        empty = os.path.join(self.env.tmp, "empty")
        os.mkdir(empty)
        idle = counted([STAT, "--dir", empty, "--prometheus"])
        out = counted([STAT, "--dir", self.env.stats_dir, "--prometheus"])  # 120 s: a hang guard
        self.assertEqual(out.returncode, 0, out.stderr[-300:])
        # the body, bounded by what a scrape of 33 such pages prints (32 of theirs and mine),
        # measured here rather than fixed, so a counter added to the page cannot break it;
        # unbounded, all 151 pages are printed (over four times as much)
        one = os.path.join(self.env.tmp, "one")
        os.mkdir(one)
        plant_sparse(os.path.join(one, f"tessera.{mine.pid}"), page, mine.pid)
        page_body = len(counted([STAT, "--dir", one, "--prometheus"]).stdout) - len(idle.stdout)
        self.assertGreater(page_body, 16 * 1000)  # 16 slots' counters were printed
        self.assertLess(len(out.stdout), len(idle.stdout) + (512 // 16 + 1) * page_body * 1.1,
                        "scrape body")
        # bounded in bytes read, which load cannot change (a time would): every page's header
        # and its owner's /proc files, then 512 of their slots and mine, each a slot head
        # (these record no map); unbounded, all 2,400 slots are read (over twice the bytes)
        self.assertLessEqual(out.read_bytes - idle.read_bytes,
                             151 * (HEADER + PAGE_BYTES) + (512 + 16) * SLOT_HEAD)
        self.assertTrue(f'tessera_allocated_bytes{{pid="{mine.pid}"' in out.stdout)
        skipped = int(re.search(r'tessera_pages\{state="skipped"\} (\d+)', out.stdout).group(1))
        self.assertEqual(skipped, 150 - 512 // 16)

    def test_planted_history_ring_ignored(self):
        """N3: a ring planted by another user next to a process's page (before the process
        made its own) does not put its events into that process's snapshot."""
        page, ring = kept_page_and_ring(self)
        victim = subprocess.Popen(["sleep", "60"])
        self.addCleanup(victim.wait)
        self.addCleanup(victim.kill)
        with open(os.path.join(self.env.stats_dir, f"tessera.{victim.pid}"), "wb") as f:
            f.write(forge(page, victim.pid))
        forged = forge_ring(ring, victim.pid)
        for i in range(struct.unpack_from("<Q", forged, 40)[0]):  # every event: 1 TiB
            struct.pack_into("<Q", forged, 128 + i * 184 + 24, 1 << 40)
        self.plant(f"tessera.{victim.pid}.history.0", bytes(forged))
        out = os.path.join(self.env.tmp, "victim.pickle")
        snap = subprocess.run([STAT, "--dir", self.env.stats_dir, "snapshot", str(victim.pid),
                               "-o", out, "--wait", "0"], capture_output=True, text=True)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertIn("not written by the page's owner", snap.stderr)
        self.assertIn("0 events", snap.stdout)
        self.assertNotIn(str(1 << 40).encode(), open(out, "rb").read())

    def test_group_writable_page_not_trusted(self):
        page = kept_page(self)
        victim = subprocess.Popen(["sleep", "60"])
        try:
            path = os.path.join(self.env.stats_dir, f"tessera.{victim.pid}")
            with open(path, "wb") as f:
                f.write(forge(page, victim.pid))
            os.chmod(path, 0o664)  # same owner, but anyone in the group could have written it
            _, doc = stat_json(self.env.stats_dir)
            self.assertEqual(doc[str(victim.pid)].get("error_kind"), "untrusted")
        finally:
            victim.kill()
            victim.wait()

    def test_planted_before_start(self):
        """A file planted under a process's name before it starts: the process runs (without a
        page, said in one line), the file is left alone, and it does not stand in for the
        process."""
        page = kept_page(self)
        env = self.env.base(extra={})
        env.pop("TESSERA_STATS_KEEP", None)
        p = subprocess.Popen(["sh", "-c", 'echo $$; read go; exec "$0" --unit 4M', prog("meminfo")[0]],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline())
        forged = forge(page, pid)
        path = self.plant(f"tessera.{pid}", forged)
        _, doc = stat_json(self.env.stats_dir)
        self.assertEqual(doc[str(pid)].get("error_kind"), "untrusted", doc)
        out, err = p.communicate("go\n", timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("RESULT status=ok", out)
        lines = tessera_lines(err)
        self.assertEqual(len(lines), 1, err)
        self.assertIn("belongs to uid", lines[0])
        self.assertEqual(open(path, "rb").read(), forged)  # untouched
        self.assertEqual(os.stat(path).st_uid, self.other.pw_uid)


class ForgedBusyPage(Base):
    def test_tessera_stat_bounded(self):
        """Pages whose 16 slots always look mid-write (and one with 64), of live and of dead
        owners: every output of tessera-stat reads them a bounded number of times (the first
        busy slot of a page retried, its other slots one look each) and reports them busy (and
        64 slots in use as corrupt: a tessera process uses 16 at most)."""
        page = kept_page(self)
        sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
        try:
            for n, s in enumerate(sleepers):
                with open(os.path.join(self.env.stats_dir, f"tessera.{s.pid}"), "wb") as f:
                    f.write(forge(page, s.pid, slots=64 if n == 3 else 16, busy=True))
            gone = dead_pid()
            with open(os.path.join(self.env.stats_dir, f"tessera.{gone}"), "wb") as f:
                f.write(forge(page, gone, slots=64, busy=True))
            empty = os.path.join(self.env.tmp, "empty")
            os.mkdir(empty)
            for args in ([], ["--json"], ["--prometheus"], [str(sleepers[0].pid)]):
                idle = counted([STAT, "--dir", empty, *[a for a in args if a.startswith("--")]])
                out = counted([STAT, "--dir", self.env.stats_dir, *args])
                # bounded in reads, which load cannot change (a time would): slot 0 of each of
                # the three live pages of 16 slots retried, their other slots one look each,
                # the dead page's 64 slots one look each, the page of 64 live slots not read
                self.assertLessEqual(out.reads, idle.reads + 5 * PAGE_READS +
                                     3 * (READ_RETRIES + 15) + 64, args)
                self.assertEqual(out.returncode, 0 if not args or args[0].startswith("--") else 1,
                                 (args, out.stderr))
                if args != ["--prometheus"]:  # there, a page without readable slots has no samples
                    self.assertIn("busy", out.stdout + out.stderr, args)
                if not args or args == ["--json"]:
                    self.assertIn("more than 16 slots in use", out.stdout, args)
                if args == ["--json"]:
                    doc = json.loads(out.stdout)
                    for n, sl in enumerate(sleepers[:3]):
                        tried = attempts(doc[str(sl.pid)])
                        self.assertEqual(sorted(tried), sorted(f"slot{i}" for i in range(16)), n)
                        self.assertLessEqual(tried.pop("slot0"), READ_RETRIES, n)
                        self.assertEqual(set(tried.values()), {1}, (n, tried))  # one look each
                    self.assertEqual(attempts(doc[str(sleepers[3].pid)]), {}, "64 slots: not read")
        finally:
            for s in sleepers:
                s.kill()
                s.wait()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeBounds(Base):
    """tessera-stat --serve against slow and many clients, odd paths, and the labels it
    exports."""

    def serve(self, *args, listen=None, port=None):
        port = port or free_port()
        err = open(os.path.join(self.env.tmp, f"serve.{port}.err"), "w+")
        self.addCleanup(err.close)
        p = subprocess.Popen([STAT, "--dir", self.env.stats_dir, "--serve",
                              listen or f"127.0.0.1:{port}", *args],
                             stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(p.wait)
        self.addCleanup(p.terminate)
        deadline = time.monotonic() + 60  # a hang guard: it starts however loaded the machine
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if self.get(port, "/metrics", timeout=10)[0] == 200:
                    return port
            except OSError:
                time.sleep(0.05)
        err.seek(0)
        self.fail(f"tessera-stat --serve did not start: {err.read()}")

    @staticmethod
    def get(port, path, source="127.0.0.1", timeout=5.0):
        """(status, body) of GET path, from the loopback address source."""
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                      source_address=(source, 0)) as c:
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode(errors="replace")

    def slow_client(self, port, source, stop):
        """A connection sending one header line a second, never finishing its request;
        returns the socket (closed by the server when it is bounded)."""
        import socket
        c = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        c.sendall(b"GET /metrics HTTP/1.1\r\n")
        return c

    @staticmethod
    def closed(conns, wait):
        """The connections the server has shut down (EOF or reset), after up to wait s for the
        first of them."""
        import select
        import socket
        deadline = time.monotonic() + wait
        while True:
            ready, _, _ = select.select(conns, [], [], 0.05)
            gone = []
            for s in ready:
                try:
                    if s.recv(1, socket.MSG_PEEK) == b"":
                        gone.append(s)
                except OSError:
                    gone.append(s)
            if gone or time.monotonic() > deadline:
                return gone

    def test_slow_clients_do_not_deny_scrapes(self):
        """Slowloris: 64 connections from 8 loopback addresses (every local user has all of
        127/8), each still sending its request, fill every connection. Scrapes from another
        loopback address are all answered: the first evicts the connection waiting longest for
        its request, and only it; the later ones find its place free. Counted in connections
        (evicted, answered), which load cannot change: a scrape may take as long as it takes
        (60 s: a hang guard)."""
        port = self.serve()
        socks = [self.slow_client(port, f"127.0.0.{a}", None) for a in range(1, 9)
                 for _ in range(8)]
        self.addCleanup(lambda: [s.close() for s in socks])
        for s in socks:
            s.sendall(b"X-Slow: 1\r\n")
        for i in range(8):
            try:
                status, _ = self.get(port, "/metrics", source="127.0.0.99", timeout=60)
            except OSError as e:
                status = repr(e)
            self.assertEqual(status, 200, f"scrape {i}")
            self.assertEqual(self.closed(socks, 0), [socks[0]], f"scrape {i}")

    def test_65th_connection_evicts_the_longest_waiting(self):
        """64 connections (8 loopback addresses, 8 each) are all held; a 65th is admitted only
        by evicting one of them, the one waiting longest for its request: 64 stay open."""
        port = self.serve()
        socks = []
        for a in range(1, 9):
            for _ in range(8):
                socks.append(self.slow_client(port, f"127.0.0.{a}", None))
                # no pause: many arrive within one millisecond, ranked by arrival all the same
        self.addCleanup(lambda: [s.close() for s in socks])
        self.assertEqual(self.closed(socks, 1.0), [])  # 64: none evicted
        late = self.slow_client(port, "127.0.0.99", None)
        self.addCleanup(late.close)
        self.closed(socks, 60.0)  # the eviction (60 s: a hang guard)
        time.sleep(0.3)  # a second eviction, were there one (a later one only passes wrongly)
        gone = self.closed(socks, 0)
        self.assertEqual(gone, [socks[0]])  # exactly one, the oldest
        self.assertEqual(self.closed([late], 0), [])  # the newcomer is held

    def test_request_total_time_bounded(self):
        """A request trickling in a header line a second is cut off after its total time
        (5 s), although the connection is never idle (10 s) and its request stays small (under
        1 KiB of 16): nothing else would close it. Up to 60 lines (a line at most every second:
        a hang guard) are sent; a time would say nothing more on a loaded machine."""
        port = self.serve()
        c = self.slow_client(port, "127.0.0.1", [])
        self.addCleanup(c.close)
        c.settimeout(1.0)
        sent, closed = 0, False
        while sent < 60 and not closed:
            try:
                c.sendall(b"X-Slow: 1\r\n")
                sent += 1
                closed = c.recv(4096) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
        self.assertTrue(closed, f"the slow request was never cut off ({sent} lines sent)")

    def test_path_matched_as_sent(self):
        port = self.serve()
        for path in ("/%6detrics", "/metrics%00x", "/metrics/", "/Metrics"):
            self.assertEqual(self.get(port, path)[0], 404, path)
        self.assertEqual(self.get(port, "/metrics?x=1")[0], 200)

    def live_page(self):
        page = kept_page(self)
        p = subprocess.Popen(["sleep", "60"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        with open(os.path.join(self.env.stats_dir, f"tessera.{p.pid}"), "wb") as f:
            f.write(forge(page, p.pid))
        return p.pid

    def test_command_line_not_served_beyond_loopback(self):
        """Serving every interface (the cluster setup), the command line and configuration
        are not labels unless asked for; on loopback, and with --labels, they are."""
        pid = self.live_page()
        port = free_port()
        wide = self.serve(listen=f"0.0.0.0:{port}", port=port)
        body = self.get(wide, "/metrics")[1]
        self.assertIn(f'tessera_allocated_bytes{{pid="{pid}"', body)
        self.assertNotIn("command=", body)
        self.assertNotIn("config=", body)
        self.assertIn(f'tessera_page_info{{pid="{pid}",version="', body)
        port = free_port()
        asked = self.serve("--labels", "pid,command", listen=f"0.0.0.0:{port}", port=port)
        body = self.get(asked, "/metrics")[1]
        self.assertIn("command=", body)
        self.assertNotIn("config=", body)
        local = self.serve()
        self.assertIn("command=", self.get(local, "/metrics")[1])
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus", "--labels", "none"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(f'tessera_page_info{{pid="{pid}"}} 1', out.stdout)
        self.assertNotIn("command=", out.stdout)
        bad = subprocess.run([STAT, "--prometheus", "--labels", "pid,secret"], capture_output=True,
                             text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--labels: 'secret'", bad.stderr)

    def test_serve_without_address(self):
        """--help gives a default address: --serve alone uses it (it may be taken by another
        server here: then it says so, but not as a usage error)."""
        p = subprocess.Popen([STAT, "--dir", self.env.stats_dir, "--serve"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stderr.readline()
        finally:
            p.terminate()
            p.wait()
        self.assertIn("127.0.0.1:9464", line)
        self.assertNotEqual(p.returncode, 2, line)


class Snapshots(Base):
    """Memory snapshots: tessera-stat snapshot's output file, a dead process, the byte bound;
    snapshot_on_oom's mode, directory, disk waits and log lines."""

    def live_page(self, ring=None):
        page, kept_ring = kept_page_and_ring(self)
        p = subprocess.Popen(["sleep", "60"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        with open(os.path.join(self.env.stats_dir, f"tessera.{p.pid}"), "wb") as f:
            f.write(forge(page, p.pid))
        if ring is not None:
            with open(os.path.join(self.env.stats_dir, f"tessera.{p.pid}.history.0"), "wb") as f:
                f.write(ring(kept_ring, p.pid))
        return p.pid

    def snapshot(self, pid, out):
        return subprocess.run([STAT, "--dir", self.env.stats_dir, "snapshot", str(pid), "-o", out,
                               "--wait", "0"], capture_output=True, text=True, timeout=120)

    def test_output_that_is_not_a_regular_file_is_refused(self):
        """N4: -o a device (a private copy of /dev/null: the real one must not be at stake if
        this regresses), a FIFO, a symbolic link, a directory: refused, left as they are."""
        pid = self.live_page()
        null = os.path.join(self.env.tmp, "null")
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        fifo = os.path.join(self.env.tmp, "fifo")
        os.mkfifo(fifo)
        target = os.path.join(self.env.tmp, "target")
        with open(target, "w") as f:
            f.write("keep\n")
        link = os.path.join(self.env.tmp, "link")
        os.symlink(target, link)
        for out, kind in ((null, stat.S_ISCHR), (fifo, stat.S_ISFIFO), (link, stat.S_ISLNK),
                          (self.env.tmp, stat.S_ISDIR)):
            snap = self.snapshot(pid, out)
            self.assertEqual(snap.returncode, 1, (out, snap.stdout))
            self.assertIn("not a regular file", snap.stderr, out)
            self.assertTrue(kind(os.lstat(out).st_mode), out)
        self.assertEqual(open(target).read(), "keep\n")
        self.assertEqual([f for f in os.listdir(self.env.tmp) if ".tmp." in f], [])
        out = os.path.join(self.env.tmp, "snap.pickle")
        self.assertEqual(self.snapshot(pid, out).returncode, 0)
        self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o600)

    def test_page_swapped_for_fifo_does_not_hang(self):
        """The page is swapped for a FIFO between the read and the request for a fresh map
        (strace stops tessera-stat once its first open of the page is done, meanwhile the swap:
        an order of events, whatever the load): the request opens it without blocking, sees it
        is not the page it read, and the snapshot ends."""
        if not shutil.which("strace"):
            self.skipTest("strace is not installed")
        pid = self.live_page()
        path = os.path.join(self.env.stats_dir, f"tessera.{pid}")
        out = os.path.join(self.env.tmp, "swap.pickle")
        trace = os.path.join(self.env.tmp, "strace.log")
        snap = subprocess.Popen(["strace", "-qq", "-o", trace, "-P", path, "-e",
                                 "inject=openat:signal=SIGSTOP:when=1", STAT, "--dir",
                                 self.env.stats_dir, "snapshot", str(pid), "-o", out, "--wait", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(snap.wait)
        self.addCleanup(snap.kill)
        # stopped for good (strace's log says so; its tracing stops at every call look the same
        # in /proc), the page open
        deadline = time.monotonic() + 60  # a hang guard
        while snap.poll() is None and time.monotonic() < deadline and not (
                os.path.exists(trace) and "--- stopped by SIGSTOP ---" in open(trace).read()):
            time.sleep(0.01)
        self.assertIn("--- stopped by SIGSTOP ---", open(trace).read())
        stopped = int(open(f"/proc/{snap.pid}/task/{snap.pid}/children").read().split()[0])
        os.mkfifo(path + ".fifo")
        os.rename(path + ".fifo", path)
        os.kill(stopped, signal.SIGCONT)
        try:
            sout, serr = snap.communicate(timeout=60)  # it hung for ever
        except subprocess.TimeoutExpired:
            os.kill(stopped, signal.SIGKILL)  # tessera-stat itself, which strace would leave behind
            self.fail("tessera-stat snapshot hung on a FIFO swapped in for the page")
        self.assertEqual(snap.returncode, 0, serr)
        self.assertIn("cannot ask for a fresh map", sout)

    def test_dead_process_is_not_called_exact(self):
        page, _ = kept_page_and_ring(self)
        gone = dead_pid()
        with open(os.path.join(self.env.stats_dir, f"tessera.{gone}"), "wb") as f:
            f.write(forge(page, gone))
        out = os.path.join(self.env.tmp, "dead.pickle")
        snap = self.snapshot(gone, out)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertNotIn("exact", snap.stdout)
        self.assertIn(f"last state: process {gone} is gone", snap.stdout)
        self.assertIn(f"process {gone} is gone", snap.stdout)

    def test_snapshot_bounded_in_bytes(self):
        """2^18 complete events of 16 frames each (over 300 MB of pickle): the history is cut
        to keep the file under 64 MiB, and the output says so."""
        def big_ring(ring, pid):
            n = 1 << 18
            data = bytearray(forge_ring(ring[:128], pid, capacity=n, written=n))
            ev = bytearray(184)
            struct.pack_into("<QQQQII", ev, 8, 1000, 0x7f0000000000, 4096, 0, 0, 16)
            struct.pack_into("<16Q", ev, 56, *range(0x400000, 0x400000 + 16))
            body = bytearray(ev * n)
            for i in range(n):
                struct.pack_into("<QQ", body, i * 184, 2 * i + 2, 1000 + i)
            return data + body
        pid = self.live_page(ring=big_ring)
        # the block layout was taken after all of them (tessera_page_map.history_written of slot
        # 0), so the snapshot's cut at the layout's instant keeps every event
        path = os.path.join(self.env.stats_dir, f"tessera.{pid}")
        page = bytearray(open(path, "rb").read())
        struct.pack_into("<Q", page, HEADER + MAP_IN_SLOT + MAP_HISTORY_WRITTEN, 1 << 18)
        reseal_map(page, HEADER)
        with open(path, "wb") as f:
            f.write(page)
        out = os.path.join(self.env.tmp, "big.pickle")
        snap = self.snapshot(pid, out)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertIn("history cut: its", snap.stdout)
        self.assertLessEqual(os.path.getsize(out), 64 << 20)
        self.assertGreater(os.path.getsize(out), 32 << 20)  # the newest events are kept

    def oom_run(self, tpl, strace=None, memory="256M", tolerate=False):
        argv = prog("seed_middle", "--first", "64M", "--middle", "64M", "--last", "64M",
                    "--request", "512M")
        if tolerate:
            argv = prog("churn", "--iters", "3000", "--live", "100", "--max-size", "16M",
                        "--large-pct", "20", "--tolerate-oom")
        if strace:
            argv = ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,syncfs,sync", "-o", strace] + argv
        # PyTorch's policy: the workloads were sized for its out-of-memory errors
        return self.env.run(argv, memory=memory,
                            conf=f"expandable_segments:False,history_events:256,snapshot_on_oom:{tpl}")

    def test_oom_snapshot_mode_and_no_sync(self):
        """Mode 0600; written after the walk and never synced (the failing call waits for no
        disk); a missing last directory is created, mode 0700."""
        if not shutil.which("strace"):
            self.skipTest("strace is not installed")
        d = os.path.join(self.env.tmp, "oom")
        trace = os.path.join(self.env.tmp, "strace.log")
        run = self.oom_run(os.path.join(d, "oom-%p-%n.pickle"), strace=trace)
        files = os.listdir(d)
        self.assertEqual(len(files), 1, run)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, files[0])).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700)
        self.assertEqual([l for l in open(trace) if "sync" in l], [])

    def test_oom_snapshot_refuses_shared_directory(self):
        """N6: a directory other users can write (the old documented /tmp) is refused: anyone
        could plant a pickle under the snapshot's name there. Refused at start, as a bad key
        (test_snapshot.py SnapshotNeverLost has the other refusals)."""
        shared = os.path.join(self.env.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        run = self.oom_run(os.path.join(shared, "oom-%p-%n.pickle"))
        self.assertEqual(run.rc, 1, run)
        self.assertEqual(os.listdir(shared), [])
        self.assertIn("writable by other users", run.stderr)
        self.assertIn("stopping before the program starts", run.stderr)

    def test_oom_log_says_what_was_written(self):
        """After ENOSPC the last line does not claim 8 snapshots were written."""
        full = os.path.join(self.env.tmp, "full")
        os.mkdir(full, 0o700)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", full],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a small tmpfs")
        self.addCleanup(subprocess.run, ["umount", full], capture_output=True)
        run = self.oom_run(os.path.join(full, "oom-%p-%n.pickle"), tolerate=True)
        self.assertIn("No space left on device", run.stderr, run)
        self.assertNotIn("snapshot_on_oom: 8 snapshots written", run.stderr)
        m = re.search(r"snapshot_on_oom: (\d) of 8 snapshots written, (\d) not", run.stderr)
        self.assertIsNotNone(m, run.stderr[-2000:])
        self.assertEqual(int(m.group(1)), len(os.listdir(full)))
        self.assertEqual(int(m.group(1)) + int(m.group(2)), 8)
        # each of the first 8 says why it was not written; the later ones, once in all
        errors = [l for l in run.stderr.splitlines() if "snapshot_on_oom: cannot" in l]
        self.assertEqual(len([l for l in errors if "(said once)" not in l]), int(m.group(2)))
        self.assertLessEqual(len([l for l in errors if "(said once)" in l]), 1)


class TrustChecks(Base):
    """What a reader trusts about a page's owner: a process whose /proc status cannot be read is
    not trusted; a zombie is gone, not alive; a file with permission bits is never taken for an
    interrupted creation by --gc. (A symbolic link or group-writable snapshot directory:
    test_snapshot.py SnapshotNeverLost.)"""

    def plant_page(self, pid):
        data = forge(kept_page(self), pid)  # (a run: first, it empties the directory)
        path = os.path.join(self.env.stats_dir, f"tessera.{pid}")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_unreadable_proc_status_not_trusted(self):
        """A reader that cannot read the owner's /proc/PID/status (mounted hidepid=1, another
        user) cannot check who owns the process: untrusted, never shown as it."""
        if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
            self.skipTest("needs root, unshare and setpriv")
        victim = subprocess.Popen(["sleep", "60"])
        self.addCleanup(victim.wait)
        self.addCleanup(victim.kill)
        path = self.plant_page(victim.pid)
        os.chmod(self.env.tmp, 0o755)
        os.chmod(self.env.stats_dir, 0o755)
        os.chmod(path, 0o644)
        cmd = ('mount -t proc -o hidepid=1 proc /proc && exec setpriv --reuid=65534 '
               '--regid=65534 --clear-groups "$0" --dir "$1" --json')
        r = subprocess.run(["unshare", "-m", "sh", "-c", cmd, STAT, self.env.stats_dir],
                           capture_output=True, text=True)
        if "mount" in r.stderr and r.returncode != 0 and not r.stdout:
            self.skipTest("cannot mount /proc with hidepid here: " + r.stderr.strip())
        entry = json.loads(r.stdout)[str(victim.pid)]
        self.assertEqual(entry.get("error_kind"), "untrusted", entry)
        self.assertIn("cannot read /proc/%d/status" % victim.pid, entry.get("error", ""), entry)
        self.assertFalse(any(isinstance(v, dict) for v in entry.values()), entry)  # no counters
        # the same page, read by root (who can read /proc): live and shown
        _, doc = stat_json(self.env.stats_dir)
        self.assertEqual(doc[str(victim.pid)].get("state"), "live", doc)

    def zombie(self):
        """A child that has exited and is not reaped yet."""
        z = subprocess.Popen(["true"])
        self.addCleanup(z.wait)
        for _ in range(500):
            with open(f"/proc/{z.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return z.pid
            time.sleep(0.01)
        self.fail("the child did not exit")

    def test_zombie_owner_is_gone(self):
        pid = self.zombie()
        self.plant_page(pid)
        _, doc = stat_json(self.env.stats_dir)
        entry = doc[str(pid)]
        self.assertEqual(entry.get("state"), "stale", entry)
        self.assertIn("has exited (not yet reaped)", entry.get("state_reason", ""), entry)
        gc = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                            text=True)
        self.assertEqual(gc.returncode, 0, gc.stderr)
        self.assertEqual(os.listdir(self.env.stats_dir), [])

    def interrupted(self, pid, mode, size=0):
        """What an interrupted creation leaves (mode 0000, empty), or a look-alike with mode,
        old enough to be collected."""
        path = os.path.join(self.env.stats_dir, f"tessera.{pid}")
        with open(path, "wb") as f:
            f.truncate(size)
        os.chmod(path, mode)
        old = time.time() - 3600
        os.utime(path, (old, old))
        return path

    def test_zombie_creator_of_an_interrupted_creation_is_gone(self):
        path = self.interrupted(self.zombie(), 0)
        gc = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                            text=True)
        self.assertEqual(gc.returncode, 0, gc.stderr)
        self.assertFalse(os.path.exists(path), gc.stdout)

    def test_gc_leaves_a_file_with_permission_bits(self):
        """Only mode 0000 marks an interrupted creation: an empty (or layout-1 sized) file with
        any permission bit is not a page, and --gc leaves it, its creator gone or not."""
        total = HEADER + 16 * SLOT
        kept = [self.interrupted(dead_pid(), mode, size) for mode, size in
                ((0o600, 0), (0o400, total), (0o1000, 0), (0o4000, total))]
        gone = self.interrupted(dead_pid(), 0, total)
        gc = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                            text=True)
        self.assertEqual(gc.returncode, 0, gc.stderr)
        self.assertFalse(os.path.exists(gone), gc.stdout)
        for path in kept:
            self.assertTrue(os.path.exists(path), (oct(os.stat(path).st_mode), gc.stdout))


class RunSignals(Base):
    """tessera run: every signal a program can be sent and catch reaches it; the program dies
    with the wrapper; a program killed by a signal leaves no stats page."""

    CATCHER = ("import os, signal, sys, time\n"
               "sigs = [int(a) for a in sys.argv[1:]]\n"
               "def h(s, f):\n"
               "    os.write(2, b'got %d\\n' % s)\n"
               "    if s == signal.SIGTERM: sys.exit(0)\n"
               "for s in sigs: signal.signal(s, h)\n"
               "os.write(2, b'READY\\n')\n"
               "while True: time.sleep(1)\n")

    def setUp(self):
        super().setUp()
        from test_run import TESSERA, clean_env
        self.tessera, self.clean_env = TESSERA, clean_env
        if not os.path.exists(TESSERA):
            self.skipTest("tessera run is not built")

    def test_every_catchable_signal_forwarded(self):
        import signal
        sigs = [signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE, signal.SIGWINCH,
                signal.SIGCONT, signal.SIGURG, signal.SIGVTALRM, signal.SIGPROF, signal.SIGXCPU,
                signal.SIGSYS, signal.SIGABRT, signal.SIGRTMIN + 1, signal.SIGRTMAX,
                signal.SIGINT, signal.SIGHUP, signal.SIGTERM]
        p = subprocess.Popen([self.tessera, "run", "--", sys.executable, "-c", self.CATCHER,
                              *[str(int(x)) for x in sigs]], env=self.clean_env(),
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        self.assertEqual(p.stderr.readline(), "READY\n")
        for sig in sigs:
            p.send_signal(sig)
            self.assertEqual(p.stderr.readline(), f"got {int(sig)}\n", f"signal {int(sig)}")
        self.assertEqual(p.wait(timeout=30), 0)

    def test_program_dies_with_the_wrapper(self):
        p = subprocess.Popen([self.tessera, "run", "--", sys.executable, "-c",
                              "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                             env=self.clean_env(), stdout=subprocess.PIPE, text=True)
        child = int(p.stdout.readline())
        p.kill()  # SIGKILL: the wrapper can forward nothing
        p.wait()
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline:
            try:
                os.waitpid(child, os.WNOHANG)  # reaped by init, not us; just poll
            except ChildProcessError:
                pass
            time.sleep(0.05)
        state = open(f"/proc/{child}/stat").read().split()[2] if pid_alive(child) else "gone"
        self.assertIn(state, ("gone", "Z"), f"program {child} outlived its wrapper")

    def test_killed_program_leaves_no_page(self):
        env = self.clean_env({"TESSERA_STATS_DIR": self.env.stats_dir})
        p = subprocess.Popen([self.tessera, "run", "--sim", "--conf", "history_events:16", "--",
                              *probe("stats_probe")], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        line = p.stdout.readline()
        self.assertTrue(line.startswith("READY"), line + p.stderr.read() if not line else line)
        pid = int(line.split()[1])
        self.assertIn(f"tessera.{pid}", os.listdir(self.env.stats_dir))
        os.kill(pid, 9)
        self.assertEqual(p.wait(timeout=30), 128 + 9)
        self.assertEqual([f for f in os.listdir(self.env.stats_dir) if f.startswith("tessera.")], [])


class TraceTargets(Base):
    def churn(self, trace, limit=None, timeout=60):
        extra = {"TESSERA_TRACE": trace}
        if limit is not None:
            extra["TESSERA_TRACE_LIMIT"] = limit
        return self.env.run(prog("churn", "--iters", "300", "--max-size", "1M"), extra=extra,
                            timeout=timeout)

    def test_fifo_without_reader(self):
        fifo = os.path.join(self.env.tmp, "fifo")
        os.mkfifo(fifo)
        run = self.churn(fifo, timeout=30)  # it hung for ever
        self.ok(run)
        self.assertIn("FIFO", one_line(self, run))

    def test_fifo_with_reader(self):
        """A FIFO whose reader is there (it holds the read end open before the program starts,
        not a reader that may or may not be in time): refused all the same, nothing written
        to it, so no SIGPIPE when the reader leaves (it killed the program before)."""
        fifo = os.path.join(self.env.tmp, "fifo")
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open at once, reader in place
        try:
            run = self.churn(fifo, timeout=30)
            self.ok(run)
            # the refusal of a FIFO that has a reader (without one, the open fails: "is a FIFO")
            self.assertIn("is not a regular file", one_line(self, run))
            try:
                got = os.read(reader, 1)
            except BlockingIOError:
                got = b""
            self.assertEqual(got, b"")
        finally:
            os.close(reader)

    def test_symlink_not_followed(self):
        victim = os.path.join(self.env.tmp, "victim")
        with open(victim, "w") as f:
            f.write("someone else's data\n")
        link = os.path.join(self.env.tmp, "trace.csv")
        os.symlink(victim, link)
        run = self.churn(link)
        self.ok(run)
        self.assertEqual(open(victim).read(), "someone else's data\n")
        self.assertTrue(os.path.islink(link))
        self.assertIn("symbolic link", one_line(self, run))

    def test_full_disk_reported_once(self):
        run = self.churn("/dev/full")
        self.ok(run)
        self.assertIn("No space left on device", one_line(self, run))

    def test_bad_limits_refused(self):
        trace = os.path.join(self.env.tmp, "trace.csv")
        for bad in ("abc", "1e9", "10X", "-1", "0", "5KB", "99999999999999999999"):
            run = self.churn(trace, limit=bad)
            self.ok(run)
            self.assertIn("TESSERA_TRACE_LIMIT", one_line(self, run))
            self.assertFalse(os.path.exists(trace), bad)

    def test_limit_suffix(self):
        trace = os.path.join(self.env.tmp, "trace.csv")
        run = self.churn(trace, limit="5k")
        self.ok(run)
        self.assertLessEqual(os.path.getsize(trace), 5 * 1024)
        self.assertIn("limit of 5120 bytes reached", run.stderr)


class BrokenConfiguration(Base):
    def test_programs_without_cuda_run(self):
        """A typo exported with the preload in a job script: ls, sh and python are not CUDA
        programs and must run, silently."""
        for argv in (["/bin/true"], ["sh", "-c", "echo hi; ls / > /dev/null"],
                     [sys.executable, "-c", "print(42)"]):
            run = self.env.run(argv, conf=BROKEN)
            self.assertEqual(run.rc, 0, (argv, run))
            self.assertEqual(run.stderr, "", (argv, run))
        self.assertEqual(self.env.run(["sh", "-c", "echo hi"], conf=BROKEN).stdout, "hi\n")

    def stops_with(self, program, *texts):
        run = self.env.run(prog(program), conf=BROKEN)
        self.assertEqual(run.rc, 1, run)
        line = one_line(self, run)
        for text in texts:
            self.assertIn(text, line)

    def test_cuda_program_stops_with_one_line(self):
        self.stops_with("meminfo", "did you mean 'expandable_segments'", "before the program starts")

    def test_driver_loaded_later_stops_at_first_call(self):
        self.stops_with("driver_api", "did you mean 'expandable_segments'", "at the first CUDA call")

    def test_stats_dir_problem_is_one_line(self):
        run = self.env.run(prog("meminfo", "--unit", "4M"),
                           extra={"TESSERA_STATS_DIR": os.path.join(self.env.tmp, "missing")})
        self.ok(run)
        self.assertIn("no stats page", one_line(self, run))


class Bounds(Base):
    def test_gc_leaves_files_that_are_not_pages(self):
        old = time.time() - 60
        kept = {}
        for n, data in enumerate((b"short", bytes(8), bytes(16), bytes(4096), b"\0" * 8 + b"text")):
            path = os.path.join(self.env.stats_dir, f"tessera.{dead_pid()}")
            with open(path, "wb") as f:
                f.write(data)
            os.utime(path, (old, old))
            kept[path] = data
        interrupted = os.path.join(self.env.stats_dir, f"tessera.{dead_pid()}")
        with open(interrupted, "wb") as f:
            f.truncate(HEADER + 16 * SLOT)
        os.chmod(interrupted, 0)  # what a creator that died before publishing leaves
        os.utime(interrupted, (old, old))
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        for path, data in kept.items():
            self.assertEqual(open(path, "rb").read(), data, path)
        self.assertFalse(os.path.exists(interrupted))

    def test_sparse_history_ring_bounded(self):
        """N3: a sparse ring claiming 2^24 events (3 GiB): a snapshot reads a bounded window
        of it and says so."""
        page, ring = kept_page_and_ring(self)
        owner = subprocess.Popen(["sleep", "60"])
        self.addCleanup(owner.wait)
        self.addCleanup(owner.kill)
        with open(os.path.join(self.env.stats_dir, f"tessera.{owner.pid}"), "wb") as f:
            f.write(forge(page, owner.pid))
        path = os.path.join(self.env.stats_dir, f"tessera.{owner.pid}.history.0")
        with open(path, "wb") as f:
            f.write(forge_ring(ring[:128], owner.pid, capacity=1 << 24, written=1 << 24))
            f.truncate(128 + (1 << 24) * 184)
        out = os.path.join(self.env.tmp, "sparse.pickle")
        snap = counted([STAT, "--dir", self.env.stats_dir, "snapshot", str(owner.pid), "-o", out,
                        "--wait", "0"])  # 120 s: a hang guard
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertIn(f"{(1 << 24) - (1 << 18)} older events of the history ring not read",
                      snap.stdout)
        # bounded in bytes read (it read the 3 GiB whole, in 11.8 s and 2.1 GB, before): the
        # page, the ring's header and its newest 2^18 events of 184 bytes, and 1 MiB for the
        # rest (the program's libraries, /proc files)
        self.assertLessEqual(snap.read_bytes, len(page) + 128 + (1 << 18) * 184 + (1 << 20))

    def test_slots_repeating_device_and_context(self):
        """Two slots in use with the same device and context (a writer never claims two): the
        later one is corrupt, and Prometheus gets no series twice."""
        page = kept_page(self)
        owner = subprocess.Popen(["sleep", "60"])
        self.addCleanup(owner.wait)
        self.addCleanup(owner.kill)
        data = bytearray(forge(page, owner.pid))
        data[HEADER + SLOT:HEADER + SLOT + 2240] = data[HEADER:HEADER + 2240]  # slot 1 = slot 0
        with open(os.path.join(self.env.stats_dir, f"tessera.{owner.pid}"), "wb") as f:
            f.write(data)
        prom = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus"],
                              capture_output=True, text=True)
        self.assertEqual(prom.returncode, 0, prom.stderr)
        series = [l.rsplit(" ", 1)[0] for l in prom.stdout.splitlines() if not l.startswith("#")]
        self.assertEqual(len(series), len(set(series)), "a series repeated")
        self.assertIn("tessera_allocated_bytes{", prom.stdout)
        out, doc = stat_json(self.env.stats_dir, str(owner.pid))
        self.assertEqual(out.returncode, 1)
        self.assertIn("repeats the device and context of slot 0", out.stderr)

    def test_gc_checks_ring_content(self):
        """--gc removes a dead process's ring, but not a file that only has a ring's name."""
        _, ring = kept_page_and_ring(self)
        gone, other = dead_pid(), dead_pid()
        real = os.path.join(self.env.stats_dir, f"tessera.{gone}.history.0")
        with open(real, "wb") as f:
            f.write(forge_ring(ring, gone))
        named = os.path.join(self.env.stats_dir, f"tessera.{other}.history.0")
        with open(named, "w") as f:
            f.write("someone's notes, not a ring\n" * 10)
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                             text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertFalse(os.path.exists(real))
        self.assertTrue(os.path.exists(named))

    def test_long_stats_dir_readable(self):
        d = os.path.join(self.env.tmp, "long")
        while len(d) < 700:
            d = os.path.join(d, "d" * 60)
        os.makedirs(d)
        run = self.env.run(prog("meminfo", "--unit", "4M"), extra={"TESSERA_STATS_DIR": d})
        self.ok(run)
        names = [f for f in os.listdir(d) if f.startswith("tessera.")]
        self.assertEqual(len(names), 1)
        out, doc = stat_json(d, names[0].split(".")[1])
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_relative_stats_dir_after_chdir(self):
        env = self.env.base(extra={"TESSERA_STATS_DIR": "stats"})
        env.pop("TESSERA_STATS_KEEP", None)
        proc = subprocess.run(probe("chdir_probe"), env=env, cwd=self.env.tmp, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(os.listdir(self.env.stats_dir), [])  # removed at exit

    def test_large_segment_size_bounded(self):
        run = self.env.run(prog("meminfo"), conf="large_segment_size_mb:999999")
        self.assertEqual(run.rc, 1, run)
        self.assertIn("is too large (must be an integer from 11 to 1024 MiB)", run.stderr)

    def test_huge_sizes_in_units(self):
        run = self.env.run(prog("bad_input"))
        self.assertIn("EiB", run.stderr, run)
        self.assertIsNone(re.search(r"\d{5,}\.\d\d GiB", run.stderr), run.stderr)


class Sharing(Base):
    """CUDA IPC between processes that do not trust each other (tests/integration/ipc_hostile
    speaks the protocol dishonestly, without tessera; ipc_peer is an honest process under
    tessera). Nothing either side receives is trusted: a forged answer gets an importer a clear
    error and costs it nothing, a forged request changes nothing in the exporter."""

    NOBODY = 65534

    def hostile(self, *args, uid=None):
        def drop():
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
        return subprocess.Popen([os.path.join(PROBES, "ipc_hostile")] + list(args),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=self.env.base("1G", preload=False), preexec_fn=drop)

    def exporter(self, conf=None, fill=0x3c, **kw):
        exp = Peer(self.env, conf=conf, **kw)
        idx, addr = exp.alloc(8 << 20)
        exp.ask(f"fill {idx} {fill:#x}")
        return exp, idx, addr, exp.export(idx)

    def test_forged_answers_refused_by_the_importer(self):
        cases = {
            "short": ("cudaErrorInvalidResourceHandle", "not one tessera gives"),
            "long": ("cudaErrorInvalidResourceHandle", "not one tessera gives"),
            "magic": ("cudaErrorInvalidResourceHandle", "not one tessera gives"),
            "seq": ("cudaErrorInvalidResourceHandle", "not one tessera gives"),
            "fds": ("cudaErrorInvalidResourceHandle", "not the one asked for"),
            "offset": ("cudaErrorInvalidResourceHandle", "a block outside its mapping"),
            "size": ("cudaErrorInvalidResourceHandle", "a block outside its mapping"),
            "kind": ("cudaErrorInvalidResourceHandle", "its kind"),
            "npieces": ("cudaErrorInvalidResourceHandle", "its kind"),
            "plain_offset": ("cudaErrorInvalidResourceHandle", "a block outside the segment"),
            "pieces_short": ("cudaErrorInvalidResourceHandle", "not the one asked for"),
            "pieces_big": ("cudaErrorInvalidResourceHandle", "handles larger than the range"),
            "gone": ("cudaErrorInvalidResourceHandle", "no longer exports this block"),
            "refuse": ("cudaErrorNotPermitted", "only with processes of its own user"),
            "hangup": ("cudaErrorInvalidResourceHandle", None),
            "squat": ("cudaErrorInvalidResourceHandle", "held by another process"),
        }
        for kind, (error, line) in cases.items():
            with self.subTest(kind=kind):
                fake = self.hostile("server", kind)
                answer = fake.stdout.readline().split()
                self.assertEqual(answer[0], "handle", answer)
                imp = Peer(self.env)
                fds = imp.value("fds")
                self.assertEqual(imp.open(answer[1]), (error, -1))
                self.assertEqual(imp.value("fds"), fds)  # every descriptor it was sent, closed
                # and it still opens an honest exporter's block
                exp, _, _, handle = self.exporter()
                err, i = imp.open(handle)
                self.assertEqual(err, "cudaSuccess")
                self.assertEqual(imp.value(f"check {i} 0x3c"), 1)
                stderr = imp.quit()
                if line:
                    self.assertIn(line, stderr)
                exp.quit()
                fake.communicate("", timeout=60)

    def test_forged_requests_change_nothing_in_the_exporter(self):
        # truncated, rewritten, oversized, with descriptors, for exports it does not hold, or
        # answers it does not read: the exporter answers or drops that connection, and its
        # block, its descriptors (0, 1 and 2 included) and other importers are untouched
        attacks = {
            "truncated": "dropped", "huge": "dropped", "fds": "dropped", "bad_magic": "dropped",
            "pieces_unheld": "dropped", "pieces_range": "dropped", "flood": "dropped",
            "wrong_id": "answered:0x100:1", "close_unheld": "answered:0x102:0",
            "unknown_type": "answered:0x2:0",
        }
        for conf in (PYTORCH, None):
            with self.subTest(conf=conf):
                exp, idx, addr, handle = self.exporter(conf)
                fds = exp.value("fds")
                for attack, outcome in attacks.items():
                    run = self.hostile("client", handle, attack)
                    out, _ = run.communicate(timeout=120)
                    self.assertIn(f"attack={attack} outcome={outcome}", out, attack)
                    self.assertEqual(exp.fds_settle(fds), fds, attack)
                    self.assertEqual(exp.value(f"check {idx} 0x3c"), 1, attack)
                    self.assertEqual(exp.value("stdio"), 1, attack)
                imp = Peer(self.env, conf=conf)
                err, i = imp.open(handle)
                self.assertEqual(err, "cudaSuccess")
                self.assertEqual(imp.value(f"check {i} 0x3c"), 1)
                self.assertEqual(imp.ask(f"close {i}"), ["close", "cudaSuccess"])
                # nothing a dropped connection opened is still held: freed at once
                self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
                self.assertEqual(exp.ask(f"reuse {8 << 20} {addr:#x} 1"), ["reuse", "1", "1"])
                imp.quit()
                exp.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_only_the_same_user_or_root(self):
        os.chmod(self.env.tmp, 0o755)
        # another user: refused, nothing mapped
        exp, idx, _, handle = self.exporter()
        other = Peer(self.env, uid=self.NOBODY)
        fds = other.value("fds")
        self.assertEqual(other.open(handle), ("cudaErrorNotPermitted", -1))
        self.assertEqual(other.value("fds"), fds)
        self.assertIn("only with processes of its own user", other.quit())
        exp.quit()
        # root may open a user's block
        exp, idx, _, handle = self.exporter(uid=self.NOBODY)
        root = Peer(self.env)
        err, i = root.open(handle)
        self.assertEqual(err, "cudaSuccess")
        self.assertEqual(root.value(f"check {i} 0x3c"), 1)
        root.quit()
        exp.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_connections_bounded_per_user_and_overall(self):
        # an exporter limited to 64 descriptors serves 16 connections (a quarter), 12 of them
        # (three quarters) per user: the rest are refused, root keeps its share
        os.chmod(self.env.tmp, 0o755)
        exp, idx, addr, handle = self.exporter(PYTORCH, uid=self.NOBODY, nofile=64)
        fds = exp.value("fds")
        same = self.hostile("client", handle, "connections", "20", uid=self.NOBODY)
        self.assertIn("answered=12 refused=8", same.stdout.readline())
        root = self.hostile("client", handle, "connections", "10")
        self.assertIn("answered=4 refused=6", root.stdout.readline())
        self.assertEqual(exp.fds_settle(fds + 16), fds + 16)  # a refusal is sent, then closed
        # held by the connections that were answered: the free holds the block
        self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
        self.assertEqual(exp.ask(f"reuse {8 << 20} {addr:#x} 1")[1], "0")
        same.communicate("", timeout=60)
        root.communicate("", timeout=60)
        self.assertEqual(exp.ask(f"reuse {8 << 20} {addr:#x} 60000")[1], "1")
        self.assertEqual(exp.fds_settle(fds), fds)
        exp.quit()

    def test_idle_connection_closed_holder_kept(self):
        # a connection that holds nothing and says nothing is closed after 10 s; one that holds
        # a block is never closed for being quiet
        exp, idx, addr, handle = self.exporter(PYTORCH)
        holder = self.hostile("client", handle, "open_hold")
        self.assertEqual(holder.stdout.readline().split(), ["held", "answered:0x100:0"])
        silent = self.hostile("client", handle, "silent")
        out, _ = silent.communicate(timeout=120)
        self.assertIn("outcome=dropped", out)
        self.assertEqual(exp.ask(f"free {idx}"), ["free", "cudaSuccess"])
        self.assertEqual(exp.ask(f"reuse {8 << 20} {addr:#x} 1")[1], "0")  # still held
        holder.communicate("", timeout=60)
        self.assertEqual(exp.ask(f"reuse {8 << 20} {addr:#x} 60000")[1], "1")
        exp.quit()


if __name__ == "__main__":
    names = sys.argv[1:]
    loader = unittest.TestLoader()
    module = sys.modules[__name__]
    suite = unittest.TestSuite([loader.loadTestsFromName(n, module) for n in names]) if names \
        else loader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if result.wasSuccessful() and result.testsRun and len(result.skipped) == result.testsRun:
        sys.exit(77)  # meson: skipped
    sys.exit(0 if result.wasSuccessful() else 1)
