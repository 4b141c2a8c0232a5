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
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import unittest_main  # noqa: E402
from test_integration import PROBES, PYTORCH, STAT, Base, Peer  # noqa: E402

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
        a.quit()
        self.assertEqual(self.races(), 0)

    def test_alone_asks_nobody(self):
        a = self.peer()
        live = self.filled(a, 200 * MiB, 0x77)
        self.assertEqual(a.ask(f"alloc {100 * MiB}"), ["err", "cudaErrorMemoryAllocation"])
        sa = self.stats(a)
        self.assertEqual((sa["num_ooms"], sa["num_lend_asks"], sa["lend_wait_time"]), (1, 0, 0))
        self.assertEqual(a.value(f"check {live} 0x77"), 1)
        stderr = a.quit()
        self.assertNotIn("lending", stderr)

    def test_lending_off(self):
        # the asker with lending:False asks nobody; a holder with lending:False gives nothing
        a, live = self.holder()
        b = self.peer(conf=PYTORCH + ",lending:False")
        self.assertEqual(b.ask(f"alloc {100 * MiB}"), ["err", "cudaErrorMemoryAllocation"])
        self.assertEqual(self.stats(b)["num_lend_asks"], 0)
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        b.quit()
        a.quit()
        a, live = self.holder(conf=PYTORCH + ",lending:False")
        b = self.peer()
        self.assertEqual(b.ask(f"alloc {100 * MiB}"), ["err", "cudaErrorMemoryAllocation"])
        self.assertEqual(self.stats(b)["num_lend_asks"], 1)
        self.assertEqual(self.stats(b)["lend_received_bytes"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        self.assertIn("has lending:False; gave 0.0 MiB", b.quit())
        a.quit()

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run processes as another user")
    def test_another_users_cache_is_not_asked(self):
        a, live = self.holder(uid=NOBODY)
        b = self.peer()
        self.assertEqual(b.ask(f"alloc {100 * MiB}"), ["err", "cudaErrorMemoryAllocation"])
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
        self.assertEqual(b.ask(f"alloc {100 * MiB}"), ["err", "cudaErrorMemoryAllocation"])
        self.assertEqual(self.stats(a)["num_lend_gives"], 0)
        self.assertEqual(self.stats(a)["reserved_bytes.all.current"], 192 * MiB)
        b.quit()
        a.quit()


if __name__ == "__main__":
    unittest_main.run(sys.modules[__name__], sys.argv[1:])
