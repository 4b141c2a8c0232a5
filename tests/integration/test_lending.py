#!/usr/bin/env python3
"""Memory that moves between tessera processes on one (simulated, shared) device: lending of free
caches at an out-of-memory, and tessera-stat release (docs/DESIGN.md, "Memory lent between
processes").

Every process here shares one simulated device (TESSERA_SIM_SHARED): what one holds, another
cannot allocate. The processes are tests/integration/ipc_peer, driven line by line; their counters
are read from their stats pages with tessera-stat. Each test asserts on bytes (every live block
still holds what was written), on the driver's answers, on the counters and on exit codes.
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import unittest_main  # noqa: E402
from test_integration import PYTORCH, STAT, Base, Peer, stop  # noqa: E402

MiB = 1 << 20
NOBODY = 65534


class Shared(Base):
    """Processes on one shared device of MEMORY bytes."""

    MEMORY = "256M"

    def setUp(self):
        super().setUp()
        self.pool = "lend-" + uuid.uuid4().hex[:12]
        self.addCleanup(self.drop_pool)
        # processes of another user write their pages and the simulator's report here too
        os.chmod(self.env.tmp, 0o1777)
        os.chmod(self.env.stats_dir, 0o1777)
        self.peers = []
        self.addCleanup(self.kill_all)

    def drop_pool(self):
        try:
            os.unlink(f"/dev/shm/tessera-sim.{self.pool}")
        except FileNotFoundError:
            pass

    def kill_all(self):
        for p in self.peers:
            if p.proc.poll() is None:
                p.kill()

    def peer(self, conf=PYTORCH, uid=None, extra=None):
        env = {"TESSERA_SIM_SHARED": self.pool}
        env.update(extra or {})
        p = Peer(self.env, conf=conf, memory=self.MEMORY, uid=uid, extra=env)
        self.peers.append(p)
        return p

    def stats(self, p):
        """Device 0's counters from p's page."""
        pid = str(p.proc.pid)
        out = subprocess.run([STAT, "--dir", self.env.stats_dir, "--json", pid],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)[pid]["0"]

    def refused(self, p, size):
        """p asks for size bytes and runs out of memory."""
        self.assertEqual(p.ask(f"alloc {size}"), ["err", "cudaErrorMemoryAllocation"])

    def filled(self, p, size, byte):
        idx, _ = p.alloc(size)
        self.assertEqual(p.ask(f"fill {idx} {byte:#x}"), ["fill", "cudaSuccess"])
        return idx

    def races(self):
        """Unordered accesses the simulator found in every process that exited."""
        path = os.path.join(self.env.tmp, "sim-report.json")
        lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
        self.assertTrue(lines)
        return sum(d.get("races", 0) for d in lines)

    def holder(self, uid=None, conf=PYTORCH, extra=None):
        """A process with 64 MiB live (0x5a) and 128 MiB cached (freed after a fill of 0xc3)."""
        a = self.peer(conf=conf, uid=uid, extra=extra)
        live = self.filled(a, 64 * MiB, 0x5A)
        cached = self.filled(a, 128 * MiB, 0xC3)
        self.assertEqual(a.ask(f"free {cached}"), ["free", "cudaSuccess"])
        return a, live


class Lending(Shared):
    def test_free_cache_lent_live_bytes_kept(self):
        a, live = self.holder()
        b = self.peer()
        # 100 MiB do not fit beside a's 192 MiB: b asks a, a gives its free cache, b is served
        got = b.ask(f"alloc {100 * MiB}")
        self.assertEqual(got[0], "ok", got)
        self.assertEqual(b.ask(f"fill {got[1]} 0x11"), ["fill", "cudaSuccess"])
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)  # a's live block untouched
        sa, sb = self.stats(a), self.stats(b)
        self.assertEqual(sb["num_lend_asks"], 1)
        self.assertEqual(sb["num_lend_asks_served"], 1)
        self.assertEqual(sb["lend_received_bytes"], 128 * MiB)  # one free segment, all of it
        self.assertEqual(sb["num_ooms"], 0)
        self.assertEqual(sa["num_lend_gives"], 1)
        self.assertEqual(sa["lend_given_bytes"], 128 * MiB)
        self.assertEqual(sa["reserved_bytes.all.current"], 64 * MiB)
        self.assertEqual(sa["allocated_bytes.all.current"], 64 * MiB)
        self.assertEqual(sa["num_lend_asks"], 0)
        # the same counters in the detail view and in Prometheus
        detail = subprocess.run([STAT, "--dir", self.env.stats_dir, str(b.proc.pid)],
                                capture_output=True, text=True).stdout
        self.assertRegex(detail, r"num_lend_asks_served\s+1\b")
        self.assertRegex(detail, r"lend_received_bytes\s+134217728\b")
        prom = subprocess.run([STAT, "--dir", self.env.stats_dir, "--prometheus"],
                              capture_output=True, text=True).stdout
        for name, pid, value in (("tessera_lend_asks_total", b.proc.pid, 1),
                                 ("tessera_lend_received_bytes_total", b.proc.pid, 128 * MiB),
                                 ("tessera_lend_gives_total", a.proc.pid, 1),
                                 ("tessera_lend_given_bytes_total", a.proc.pid, 128 * MiB)):
            self.assertRegex(prom, rf'\n{name}{{[^}}]*pid="{pid}"[^}}]*}} {value}\n')
        self.assertIn("# TYPE tessera_lend_wait_time_total counter", prom)
        # more than anyone holds free: b fails as it would have, says who held what, and a's
        # live block is never given
        err = b.ask(f"alloc {120 * MiB}")
        self.assertEqual(err, ["err", "cudaErrorMemoryAllocation"])
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        self.assertEqual(b.value(f"check {got[1]} 0x11"), 1)
        sb = self.stats(b)
        self.assertEqual(sb["num_ooms"], 1)
        self.assertEqual(sb["num_lend_asks"], 1)  # a held nothing free: not asked
        stderr = b.quit()
        self.assertIn(f"pid {a.proc.pid} (", stderr)
        self.assertIn("holds 64.0 MiB reserved, 64.0 MiB allocated: holds nothing free; not asked",
                      stderr)
        self.assertIn("not asked (asked for 2000 ms at most)\n", stderr)
        a.quit()
        self.assertEqual(self.races(), 0)

    def test_pages_of_expandable_segments_lent(self):
        # tessera's default: the free pages of an expandable segment are unmapped for the asker
        a, live = self.holder(conf="")
        b = self.peer(conf="")
        got = b.ask(f"alloc {100 * MiB}")
        self.assertEqual(got[0], "ok", got)
        self.assertEqual(b.ask(f"fill {got[1]} 0x22"), ["fill", "cudaSuccess"])
        sa, sb = self.stats(a), self.stats(b)
        self.assertEqual((sb["num_lend_asks_served"], sb["num_ooms"]), (1, 0))
        self.assertGreaterEqual(sa["lend_given_bytes"], 100 * MiB - 64 * MiB)
        # what a reserved (192 MiB and the rest of its last growth batch) less what it gave
        self.assertEqual(sa["reserved_bytes.all.current"],
                         sa["reserved_bytes.all.peak"] - sa["lend_given_bytes"])
        self.assertGreaterEqual(sa["reserved_bytes.all.current"], 64 * MiB)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        self.assertEqual(b.value(f"check {got[1]} 0x22"), 1)
        b.quit()
        a.quit()
        self.assertEqual(self.races(), 0)

    def test_another_device_is_not_asked(self):
        # a process on another device (another shared pool: another UUID) holds cache that
        # would not help: not asked
        other = "lend-" + uuid.uuid4().hex[:12]
        self.addCleanup(lambda: os.path.exists(f"/dev/shm/tessera-sim.{other}")
                        and os.unlink(f"/dev/shm/tessera-sim.{other}"))
        a, live = self.holder(extra={"TESSERA_SIM_SHARED": other})
        b = self.peer()
        self.filled(b, 200 * MiB, 0x44)
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        self.assertNotIn("lending", b.quit())
        a.quit()

    def test_a_process_over_its_own_limit_asks_nobody(self):
        # memory_limit is the process's own rule: others' caches would not lift it
        a, live = self.holder()
        b = self.peer(conf=PYTORCH + ",memory_limit:64M")
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        b.quit()
        a.quit()

    def test_alone_asks_nobody(self):
        a = self.peer()
        live = self.filled(a, 200 * MiB, 0x77)
        self.refused(a, 100 * MiB)
        sa = self.stats(a)
        self.assertEqual((sa["num_ooms"], sa["num_lend_asks"], sa["lend_wait_time"]), (1, 0, 0))
        self.assertEqual(a.value(f"check {live} 0x77"), 1)
        stderr = a.quit()
        self.assertNotIn("lending", stderr)

    def test_no_stats_directory_finds_nobody(self):
        # the neighbours are found by their pages: a process whose stats directory does not
        # exist finds none, asks nobody and fails as it would have
        a, live = self.holder()
        b = self.peer(extra={"TESSERA_STATS_DIR": os.path.join(self.env.tmp, "none")})
        self.refused(b, 100 * MiB)
        self.assertEqual(b.ask(f"alloc {32 * MiB}")[0], "ok")  # and goes on
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertNotIn("lending", b.quit())
        a.quit()

    def test_lending_off(self):
        # the asker with lending:False asks nobody; a holder with lending:False gives nothing
        a, live = self.holder()
        c = self.peer()  # a neighbour with nothing free
        self.filled(c, 20 * MiB, 0x11)  # a whole segment under PyTorch's policy
        b = self.peer(conf=PYTORCH + ",lending:False")
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        # the advice names the cache that would have served, and the key that asks it; the
        # neighbour with nothing free is not named
        err = b.quit()
        self.assertIn("lending:False, so the other tessera processes of this user on it were not "
                      "asked", err)
        self.assertIn("(TESSERA_ALLOC_CONF=lending:True asks them)", err)
        self.assertIn(f"pid {a.proc.pid} ", err)
        self.assertNotIn(f"pid {c.proc.pid} ", err)
        self.assertNotIn("ms at most", err)
        self.assertIn("MiB reserved", err)
        a.quit()
        # nobody holds anything free: no such line
        b = self.peer(conf=PYTORCH + ",lending:False")
        self.refused(b, 400 * MiB)
        self.assertNotIn("other tessera processes", b.quit())
        c.quit()
        a, live = self.holder(conf=PYTORCH + ",lending:False")
        b = self.peer()
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 1)
        self.assertEqual(self.stats(b)["lend_received_bytes"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertIn("has lending:False; gave 0.0 MiB", b.quit())
        a.quit()

    def test_a_silent_neighbour_is_waited_for_a_bounded_time(self):
        a, live = self.holder()
        stop(a.proc.pid)  # its channel's thread cannot answer
        try:
            b = self.peer(conf=PYTORCH + ",lending_wait_ms:300")
            self.refused(b, 100 * MiB)
            sb = self.stats(b)
            self.assertEqual((sb["num_lend_asks"], sb["num_lend_asks_served"]), (1, 0))
            self.assertGreaterEqual(sb["lend_wait_time"], 300 * 1000)
            self.assertLess(sb["lend_wait_time"], 30 * 1000 * 1000)  # not the channel's 30 s
            self.assertIn("did not answer in time", b.quit())
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # the request a reads once it runs again comes after its asker's deadline: answered,
        # nothing given
        for _ in range(600):
            sa = self.stats(a)
            if sa["num_lend_gives"]:
                break
            time.sleep(0.05)
        self.assertEqual((sa["num_lend_gives"], sa["lend_given_bytes"]), (1, 0))
        self.assertEqual(sa["reserved_bytes.all.current"], 192 * MiB)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        a.quit()

    def test_a_neighbour_that_cannot_be_asked(self):
        # a program that closed its sockets closed tessera's channel with them: its page names a
        # channel nobody listens on. Not a wait, not a refusal: said as it is, and b fails as
        # it would have
        a, live = self.holder()
        self.assertEqual(a.ask("sockets"), ["sockets", "1"])
        b = self.peer()
        self.refused(b, 100 * MiB)
        sb = self.stats(b)
        self.assertEqual((sb["num_lend_asks"], sb["num_lend_asks_served"]), (1, 0))
        self.assertEqual(sb["lend_received_bytes"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        stderr = b.quit()
        self.assertIn(f"pid {a.proc.pid} (", stderr)
        self.assertIn("holds 192.0 MiB reserved, 64.0 MiB allocated: could not be asked "
                      "(asked for 2000 ms at most)\n", stderr)
        a.quit()

    def test_nothing_given_during_a_capture(self):
        a, live = self.holder()
        self.assertEqual(a.ask("capture begin"), ["capture", "cudaSuccess"])
        b = self.peer()
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 1)
        self.assertEqual(a.ask("capture end"), ["capture", "cudaSuccess"])
        # once the capture is over, the same request is served
        got = b.ask(f"alloc {100 * MiB}")
        self.assertEqual(got[0], "ok", got)
        self.assertEqual(self.stats(a)["lend_given_bytes"], 128 * MiB)
        self.assertIn("is capturing a CUDA graph; gave 0.0 MiB", b.quit())
        a.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_another_users_cache_is_not_asked(self):
        a, live = self.holder(uid=NOBODY)
        b = self.peer()
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        self.assertIn("another user's; not asked", b.quit())
        # root asks every user's processes only when an operator says so
        c = self.peer(conf=PYTORCH + ",lending_all_users:True")
        got = c.ask(f"alloc {100 * MiB}")
        self.assertEqual(got[0], "ok", got)
        self.assertEqual(self.stats(a)["lend_given_bytes"], 128 * MiB)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        c.quit()
        a.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_another_user_cannot_take_roots_cache(self):
        # a user's process asks only its own user's: root's cache stays root's, even when the
        # user sets lending_all_users (it applies to root alone)
        a, live = self.holder()
        b = self.peer(uid=NOBODY, conf=PYTORCH + ",lending_all_users:True")
        self.refused(b, 100 * MiB)
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)  # not even asked
        self.assertIn("another user's; not asked", b.quit())
        a.quit()


class RemoteRelease(Shared):
    def release(self, p, *args, uid=None):
        def drop():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        return subprocess.run([STAT, "--dir", self.env.stats_dir, "release", str(p.proc.pid)]
                              + list(args), capture_output=True, text=True,
                              preexec_fn=drop if uid is not None else None)

    def test_release_keeps_live_and_held_bytes(self):
        a = self.peer()
        live = self.filled(a, 64 * MiB, 0x5A)
        cached = [self.filled(a, size * MiB, 0xC3) for size in (16, 48, 32)]
        held = self.filled(a, 16 * MiB, 0x3C)
        b = self.peer()
        err, imported = b.open(a.export(held))
        self.assertEqual(err, "cudaSuccess")
        for i in cached + [held]:  # the one b holds over IPC stays a's until b closes it
            self.assertEqual(a.ask(f"free {i}"), ["free", "cudaSuccess"])
        out = self.release(a, "--keep", "40M")
        self.assertEqual(out.returncode, 0, out.stderr)
        # the largest first until at most 40 MiB stay cached: 48 then 32 (the 16 stays)
        self.assertEqual(out.stdout, f"pid {a.proc.pid}: device 0: released 80.00 MiB; now "
                                     "96.00 MiB reserved, 80.00 MiB allocated\n")
        sa = self.stats(a)
        self.assertEqual((sa["num_remote_releases"], sa["num_empty_cache"]), (1, 1))
        self.assertEqual(sa["reserved_bytes.all.current"], 96 * MiB)
        out = self.release(a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("released 16.00 MiB; now 80.00 MiB reserved, 80.00 MiB allocated", out.stdout)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        self.assertEqual(b.value(f"check {imported} 0x3c"), 1)
        self.assertEqual(self.stats(a)["num_remote_releases"], 2)
        b.quit()
        a.quit()
        self.assertEqual(self.races(), 0)

    def test_nothing_released_during_a_capture(self):
        a, live = self.holder()
        self.assertEqual(a.ask("capture begin"), ["capture", "cudaSuccess"])
        out = self.release(a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("released 0 B; now 192.00 MiB reserved", out.stdout)
        self.assertEqual(a.ask("capture end"), ["capture", "cudaSuccess"])
        out = self.release(a)
        self.assertIn("released 128.00 MiB; now 64.00 MiB reserved", out.stdout)
        self.assertEqual(a.value(f"check {live} 0x5a"), 1)
        a.quit()

    def test_refusals(self):
        gone = subprocess.run([STAT, "--dir", self.env.stats_dir, "release", "999999999"],
                              capture_output=True, text=True)
        self.assertEqual(gone.returncode, 1)
        self.assertIn("no such page", gone.stderr)
        usage = subprocess.run([STAT, "release"], capture_output=True, text=True)
        self.assertEqual((usage.returncode, usage.stderr), (2, "tessera-stat: release needs a pid\n"))
        a, live = self.holder()
        out = subprocess.run([STAT, "--dir", self.env.tmp, "release", str(a.proc.pid)],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)  # no page there
        self.assertIn("no such page", out.stderr)
        out = self.release(a, "--keep", "lots")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--keep wants a size", out.stderr)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        a.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_another_users_process_refused(self):
        a, live = self.holder()
        out = self.release(a, uid=NOBODY)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn(f"process {a.proc.pid} refused: it runs as another user", out.stderr)
        self.assertEqual(out.stdout, "")
        sa = self.stats(a)
        self.assertEqual((sa["num_remote_releases"], sa["reserved_bytes.all.current"]),
                         (0, 192 * MiB))
        a.quit()
        # root may release a user's process
        u, ulive = self.holder(uid=NOBODY)
        out = self.release(u)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.stats(u)["reserved_bytes.all.current"], 64 * MiB)
        self.assertEqual(u.value(f"check {ulive} 0x5a"), 1)
        u.quit()


class PauseResume(Shared):
    """tessera-stat pause and resume, and the program's own tessera_pause and tessera_resume
    (docs/DESIGN.md, "Pause and resume"): the device gets the pages back, every address is kept,
    the program's CUDA calls wait meanwhile, and the bytes are all there afterwards."""

    def act(self, verb, p, uid=None):
        def drop():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        return subprocess.run([STAT, "--dir", self.env.stats_dir, verb, str(p.proc.pid)],
                              capture_output=True, text=True,
                              preexec_fn=drop if uid is not None else None)

    def paused_holder(self):
        """A process under the default (64 MiB of 0x5a and 40 MiB of 0x3c live, 32 MiB cached
        and the 8 MiB its growth mapped ahead, to a whole 20 MiB handle), then paused."""
        a = self.peer(conf="")
        live = [self.filled(a, 64 * MiB, 0x5A), self.filled(a, 40 * MiB, 0x3C)]
        cached = self.filled(a, 32 * MiB, 0xC3)
        self.assertEqual(a.ask(f"free {cached}"), ["free", "cudaSuccess"])
        addrs = [a.value(f"addr {i}") for i in live]
        out = self.act("pause", a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(" in ")[0],
                         f"pid {a.proc.pid}: device 0: paused: 104.00 MiB copied to host memory, "
                         "144.00 MiB given back to the device, 104.00 MiB kept reserved,")
        return a, live, addrs

    def test_pause_gives_the_device_back_and_resume_restores_every_byte(self):
        a, live, addrs = self.paused_holder()
        sa = self.stats(a)
        self.assertEqual((sa["num_pauses"], sa["num_resumes"], sa["pause_saved_bytes"]),
                         (1, 0, 104 * MiB))
        table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True,
                               text=True).stdout
        row = [l for l in table.splitlines() if l.startswith(str(a.proc.pid))]
        self.assertTrue(row[0].endswith("  paused: its memory is in host memory"), table)
        # another process gets the whole device but what its own context holds: a gave back
        # every page (a's 144 MiB would leave it 112 MiB of the 256)
        b = self.peer(conf="")
        big = self.filled(b, 216 * MiB, 0x77)
        # a's program wakes early: its copy waits at the gate instead of reading unmapped memory
        a.tell(f"check {live[0]} 0x5a")
        self.assertIsNone(a.answer(timeout=1))
        # the device is full now: the resume is refused, a stays paused and keeps its bytes
        out = self.act("resume", a)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("device 0: refused: the device refused (on resume: most likely it is full "
                      "now)", out.stdout)
        self.assertIn(f"process {a.proc.pid} refused to resume: it has a device that refused",
                      out.stderr)
        self.assertEqual(b.ask(f"free {big}"), ["free", "cudaSuccess"])
        self.assertEqual(self.act("release", b).returncode, 0)
        out = self.act("resume", a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("device 0: resumed: 104.00 MiB copied back", out.stdout)
        self.assertEqual(a.answer(), ["check", "1"])  # the waiting copy went on, on the same bytes
        self.assertEqual(a.value(f"check {live[1]} 0x3c"), 1)
        self.assertEqual([a.value(f"addr {i}") for i in live], addrs)
        # it goes on as before: allocates, frees, and is paused again
        more = self.filled(a, 8 * MiB, 0x11)
        self.assertEqual(a.value(f"check {more} 0x11"), 1)
        sa = self.stats(a)
        self.assertEqual((sa["num_pauses"], sa["num_resumes"]), (1, 1))
        table = subprocess.run([STAT, "--dir", self.env.stats_dir], capture_output=True,
                               text=True).stdout
        self.assertNotIn("paused", table)
        b.quit()
        a.quit()
        self.assertEqual(self.races(), 0)

    def test_the_program_pauses_itself(self):
        a = self.peer(conf="")
        live = self.filled(a, 32 * MiB, 0x42)
        self.assertEqual(a.ask("pause"), ["pause", "0"])
        out = self.act("pause", a)
        self.assertEqual(out.returncode, 3)
        self.assertIn("refused to pause: it is paused already", out.stderr)
        self.assertEqual(self.act("resume", a).returncode, 0)
        self.assertEqual(a.ask("resume"), ["resume", "2"])  # not paused any more
        self.assertEqual(a.value(f"check {live} 0x42"), 1)
        self.assertIn("tessera: tessera_resume: refused: the process is not paused", a.quit())

    def test_refusals(self):
        a = self.peer(conf="")
        live = self.filled(a, 32 * MiB, 0x42)
        other = self.filled(a, 16 * MiB, 0x24)
        # a block exported over CUDA IPC: another process may have it mapped
        a.export(other)
        out = self.act("pause", a)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("has blocks exported over CUDA IPC", out.stderr)
        self.assertEqual(a.ask(f"free {other}"), ["free", "cudaSuccess"])
        # a capture underway
        self.assertEqual(a.ask("capture begin"), ["capture", "cudaSuccess"])
        out = self.act("pause", a)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("is capturing a CUDA graph", out.stderr)
        self.assertEqual(a.ask("capture end"), ["capture", "cudaSuccess"])
        out = self.act("resume", a)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("refused to resume: it is not paused", out.stderr)
        self.assertEqual(self.stats(a)["num_pauses"], 0)
        self.assertEqual(a.value(f"check {live} 0x42"), 1)
        # PyTorch's policy: live memory in plain segments cannot come back at its address
        p = self.peer(conf=PYTORCH)
        plive = self.filled(p, 8 * MiB, 0x99)
        out = self.act("pause", p)
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("device 0: refused: live memory in plain segments", out.stdout)
        # the program's own call is refused alike, and says which device refused and why
        self.assertEqual(p.ask("pause"), ["pause", "6"])
        self.assertEqual(p.value(f"check {plive} 0x99"), 1)
        usage = subprocess.run([STAT, "pause"], capture_output=True, text=True)
        self.assertEqual((usage.returncode, usage.stderr), (2, "tessera-stat: pause needs a pid\n"))
        self.assertIn("tessera: tessera_pause: refused: device 0: live memory in plain segments",
                      p.quit())
        a.quit()
        # its page is kept after it exited (TESSERA_STATS_KEEP): nobody answers there
        out = self.act("resume", a)
        self.assertEqual(out.returncode, 3, out)
        self.assertEqual(out.stderr, f"tessera-stat: cannot ask process {a.proc.pid} to resume "
                                     "it: it has exited\n")

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_another_users_process_refused(self):
        a = self.peer(conf="")
        live = self.filled(a, 32 * MiB, 0x42)
        for verb in ("pause", "resume"):
            out = self.act(verb, a, uid=NOBODY)
            self.assertEqual(out.returncode, 3, out)
            self.assertIn(f"process {a.proc.pid} refused: it runs as another user", out.stderr)
        self.assertEqual(self.stats(a)["num_pauses"], 0)
        self.assertEqual(a.value(f"check {live} 0x42"), 1)
        a.quit()


class FourProcesses(Shared):
    """Four processes cycle through a PyTorch-like cache pattern on a 400 MiB device: each one's
    live peak is 90 MiB (90% of the device together) and what it caches 160 MiB (160%): 3 x 30
    MiB live then freed, then 2 x 35 MiB (which the 30 MiB segments cannot serve) live then freed.
    They run one after another, two rounds, so that each finds the others' caches on the device.
    tests/bench/lending_four.py is the same at bench scale."""

    MEMORY = "400M"
    PATTERN = [[30, 30, 30], [35, 35]]

    def cycle(self, p, n, byte):
        """One cycle of p; the number of bytes written and read back, or None at an out of
        memory (the blocks it had are freed)."""
        done = 0
        for phase in self.PATTERN:
            idx = []
            for mib in phase:
                got = p.ask(f"alloc {mib * MiB}")
                if got[0] != "ok":
                    self.assertEqual(got, ["err", "cudaErrorMemoryAllocation"])
                    for i in idx:
                        p.ask(f"free {i}")
                    return None
                idx.append(int(got[1]))
            for i in idx:
                self.assertEqual(p.ask(f"fill {i} {byte:#x}"), ["fill", "cudaSuccess"])
            for k, i in enumerate(idx):
                self.assertEqual(p.value(f"check {i} {byte:#x}"), 1)
                done += phase[k] * MiB
            for i in idx:
                self.assertEqual(p.ask(f"free {i}"), ["free", "cudaSuccess"])
        return done

    def four(self, conf):
        ps = [self.peer(conf=conf) for _ in range(4)]
        ooms, moved = 0, 0
        for rnd in range(2):
            for n, p in enumerate(ps):
                done = self.cycle(p, n, 0x10 * (n + 1) + rnd)
                if done is None:
                    ooms += 1
                else:
                    moved += done
        stats = [self.stats(p) for p in ps]
        for p in ps:
            p.quit()
        self.assertEqual(self.races(), 0)
        return ooms, moved, stats

    def test_pytorch_policy_without_lending_runs_out(self):
        ooms, moved, stats = self.four(PYTORCH + ",lending:False")
        self.assertGreaterEqual(ooms, 1)
        self.assertEqual(sum(s["num_ooms"] for s in stats), ooms)

    def test_lending_none_runs_out(self):
        for conf in (PYTORCH, ""):
            with self.subTest(conf=conf):
                ooms, moved, stats = self.four(conf)
                self.assertEqual(ooms, 0)
                self.assertEqual(moved, 2 * 4 * 160 * MiB)  # every byte written and read back
                self.assertEqual(sum(s["num_ooms"] for s in stats), 0)
                if conf == PYTORCH:
                    self.assertGreater(sum(s["num_lend_asks_served"] for s in stats), 0)
                    self.assertEqual(sum(s["lend_received_bytes"] for s in stats),
                                     sum(s["lend_given_bytes"] for s in stats))


if __name__ == "__main__":
    unittest_main.run(sys.modules[__name__], sys.argv[1:])
