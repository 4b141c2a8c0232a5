#!/usr/bin/env python3
"""Memory snapshots in PyTorch's format from programs running under tessera (simulated device).

- tessera-stat snapshot PID: the pickle has the layout scripts/snapshot2trace reads (its own
  restricted loader and shape checks are used here), the block layout is the one at the
  request (the process publishes a fresh map at its next operation), and the history ring
  gives the device trace;
- snapshot_on_oom: the process writes the snapshot itself at an out of memory; it round-trips
  through tessera-replay (the same peak as the process's own counters, every allocation at the
  address the process got).

Run one test:  test_snapshot.py TestName
Environment:   TS_BUILD, TS_SOURCE (as test_integration.py).
"""
import glob
import importlib.machinery
import importlib.util
import json
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snapcheck  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "viz"))
import viewcheck  # noqa: E402
import test_integration as it  # noqa: E402  (its Env runs programs on the simulator)
import unittest_main  # noqa: E402

MiB = 1 << 20


def load_snapshot2trace():
    path = os.path.join(it.SOURCE, "scripts", "snapshot2trace")
    loader = importlib.machinery.SourceFileLoader("snapshot2trace", path)
    spec = importlib.util.spec_from_loader("snapshot2trace", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


s2t = load_snapshot2trace()

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
EVENT_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
SETTINGS_KEYS = {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
                 "expandable_segments", "pinned_num_register_threads",
                 "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                 "roundup_power2_divisions"}


class Base(unittest.TestCase):
    def setUp(self):
        self.env = it.Env()

    def tearDown(self):
        shutil.rmtree(self.env.tmp, ignore_errors=True)

    def page_stats(self):
        """Device 0 counters of the one page kept in the stats directory (history rings, kept
        beside it, are not pages)."""
        pids = [f.split(".")[1] for f in os.listdir(self.env.stats_dir)
                if f.startswith("tessera.") and f.count(".") == 1]
        self.assertEqual(len(pids), 1, pids)
        out = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "--json", pids[0]],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return [v for v in json.loads(out.stdout)[pids[0]].values() if isinstance(v, dict)][0]

    def middle_oom(self, first, middle, last, request, memory, conf):
        """seed_middle: three blocks, the middle one freed, then a request that fails."""
        return self.env.run(it.prog("seed_middle", "--first", first, "--middle", middle,
                                    "--last", last, "--request", request), memory=memory,
                            conf=conf)

    def check_layout(self, path):
        """The pickle loads with snapshot2trace's restricted unpickler and has PyTorch's keys."""
        data = s2t.load_snapshot(path)
        for seg in data["segments"]:
            self.assertEqual(set(seg), SEGMENT_KEYS, seg)
            self.assertIn(seg["segment_type"], ("small", "large"))
            self.assertEqual(seg["segment_pool_id"], (0, 0))
            at = seg["address"]
            for b in seg["blocks"]:
                self.assertEqual(set(b), BLOCK_KEYS, b)
                self.assertIn(b["state"], s2t.BLOCK_STATES)
                self.assertEqual(b["address"], at)  # blocks tile the segment
                at += b["size"]
            self.assertEqual(at, seg["address"] + seg["total_size"])
            self.assertEqual(seg["allocated_size"], sum(b["size"] for b in seg["blocks"]
                                                        if b["state"] == "active_allocated"))
        for trace in data["device_traces"]:
            for e in trace:
                # PyTorch's: an out of memory has the device's free bytes where others have addr
                keys = EVENT_KEYS - {"addr"} | {"device_free"} if e["action"] == "oom" \
                    else EVENT_KEYS
                self.assertEqual(set(e), keys, e)
                self.assertIn(e["action"], s2t.KNOWN_ACTIONS)
        self.assertEqual(snapcheck.layout_problems(data), [])
        # allocator_settings: PyTorch's keys, its table of 16 intervals
        self.assertEqual(set(data["allocator_settings"]), SETTINGS_KEYS)
        self.assertEqual(list(data["allocator_settings"]["roundup_power2_divisions"]),
                         [str(1 << k) for k in range(16)])
        # and its converter accepts it in both formats
        for fmt in ("csv", "dump"):
            out = subprocess.run([sys.executable, os.path.join(it.SOURCE, "scripts", "snapshot2trace"),
                                  "--format", fmt, path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
        return data


class SnapshotFromStat(Base):
    def test_snapshot_of_a_running_process(self):
        env = self.env.base(conf="expandable_segments:False,history_events:1000,"
                                 "max_split_size_mb:100,roundup_power2_divisions:[1:0,1024:8,>:2]")
        p = subprocess.Popen(it.probe("stats_probe"), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            self.assertTrue(line.startswith("READY"), line)
            pid = int(line.split()[1])
            out = os.path.join(self.env.tmp, "snap.pickle")
            # The probe is idle (waiting on stdin): the request is served by its next operation,
            # the first free after "go". The snapshot then shows exactly that moment.
            page = os.path.join(self.env.stats_dir, f"tessera.{pid}")

            def request():  # slot 0's map_request word (tessera_page_slot_head, offset 32)
                with open(page, "rb") as f:
                    f.seek(4096 + 32)
                    return f.read(8)
            before = request()
            snap = subprocess.Popen([it.STAT, "--dir", self.env.stats_dir, "snapshot", str(pid),
                                     "-o", out, "--wait", "30"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            # "go" once the request is written (an order of events, not a pause long enough on
            # an idle machine); 60 s: a hang guard
            deadline = time.monotonic() + 60
            while request() == before and snap.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertNotEqual(request(), before, "tessera-stat asked for no map")
            p.stdin.write("go\n")
            p.stdin.flush()
            sout, serr = snap.communicate(timeout=60)
            self.assertEqual(snap.returncode, 0, serr)
            self.assertIn("device 0: exact: the process published its block layout", sout)
            line = p.stdout.readline()
            self.assertTrue(line.startswith("FREED"), line)
            p.stdin.write("go\n")
            p.stdin.flush()
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        data = self.check_layout(out)
        segs = data["segments"]
        self.assertEqual(sorted(s["segment_type"] for s in segs), ["large", "small"])
        large = [s for s in segs if s["segment_type"] == "large"][0]
        small = [s for s in segs if s["segment_type"] == "small"][0]
        self.assertEqual(large["total_size"], 20 * MiB)
        self.assertEqual(small["total_size"], 2 * MiB)
        # at the first free: two 4 MiB blocks and both 100 KiB blocks still allocated
        self.assertEqual(large["allocated_size"], 8 * MiB)
        self.assertEqual(small["allocated_size"], 2 * 102400)
        self.assertEqual(data["tessera"]["source"], "tessera-stat")
        # settings in every snapshot (PyTorch's viewer shows them), and what the device had
        settings = data["allocator_settings"]
        self.assertIn("history_events:1000", settings["PYTORCH_CUDA_ALLOC_CONF"])
        self.assertEqual((settings["max_split_size"], settings["expandable_segments"]),
                         (100 * MiB, False))
        self.assertEqual([settings["roundup_power2_divisions"][str(1 << k)] for k in range(16)],
                         [0] * 10 + [8] + [2] * 5)
        self.assertEqual(data["tessera"]["devices"],
                         [{"device": 0, "total_bytes": 512 * MiB, "memory_limit_bytes": 0}])
        events = data["device_traces"][0]
        acts = [e["action"] for e in events]
        self.assertEqual(acts.count("alloc"), 5, acts)
        self.assertEqual(acts.count("segment_alloc"), 2, acts)
        self.assertGreaterEqual(acts.count("free_requested"), 1, acts)
        allocs = [e for e in events if e["action"] == "alloc"]
        self.assertEqual(sorted(e["size"] for e in allocs), [102400] * 2 + [4 * MiB] * 3)

    def test_frames_are_symbolised(self):
        # history_frames:True records return addresses; tessera-stat names them from the ELF
        # symbol tables when it writes the snapshot, and leaves tessera's own frames out
        env = self.env.base(conf="history_events:1000,history_frames:True")
        p = subprocess.Popen(it.probe("stats_probe"), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            pid = int(line.split()[1])
            out = os.path.join(self.env.tmp, "frames.pickle")
            snap = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "snapshot", str(pid),
                                   "-o", out, "--wait", "0.2"], capture_output=True, text=True)
            self.assertEqual(snap.returncode, 0, snap.stderr)
        finally:
            p.kill()
            p.wait()
        data = self.check_layout(out)
        allocs = [e for e in data["device_traces"][0] if e["action"] == "alloc"]
        # the idle probe's map was taken at its fourth allocation: the history stops there too
        self.assertEqual(len(allocs), 4)
        for e in allocs:
            frames = e["frames"]
            self.assertTrue(frames, e)
            files = [os.path.basename(f["filename"]) for f in frames]
            self.assertFalse([f for f in files if f.startswith("libtessera")], frames)
            # the stack starts where the program called CUDA (tessera's cudaMalloc is left
            # out): in main, named from the program's symbol table
            self.assertEqual(frames[0], {"name": "main", "line": 0, "filename":
                                         os.path.realpath(it.probe("stats_probe")[0])}, frames)

    def test_snapshot_of_an_idle_process_says_how_current_it_is(self):
        env = self.env.base()
        p = subprocess.Popen(it.probe("stats_probe"), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            pid = int(line.split()[1])
            out = os.path.join(self.env.tmp, "idle.pickle")
            snap = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "snapshot", str(pid),
                                   "-o", out, "--wait", "0.2"], capture_output=True, text=True)
            self.assertEqual(snap.returncode, 0, snap.stderr)
            # five allocations, the map taken at the small segment's creation (op 4): one behind
            self.assertIn("device 0: stale: the block layout is 1 operations older", snap.stdout)
            self.assertIn("no history", snap.stdout)
            mp = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "map", str(pid)],
                                capture_output=True, text=True)
            self.assertIn("age: 1 operation since it was taken", mp.stdout)
            self.check_layout(out)
        finally:
            p.kill()
            p.wait()

    def test_bad_requests(self):
        out = os.path.join(self.env.tmp, "x.pickle")
        r = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "snapshot", "999999", "-o", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("tessera-stat: "), r.stderr)
        self.assertFalse(os.path.exists(out))
        r = subprocess.run([it.STAT, "snapshot", "12"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)


class SnapshotOnOom(Base):
    def test_oom_snapshot_round_trips_through_replay(self):
        tpl = os.path.join(self.env.tmp, "oom-%p-%n.pickle")
        run = self.middle_oom("64M", "64M", "64M", "512M", "256M",
                              f"expandable_segments:False,history_events:256,snapshot_on_oom:{tpl}")
        self.assertEqual(run.rc, 2, run)
        files = glob.glob(os.path.join(self.env.tmp, "oom-*-1.pickle"))
        self.assertEqual(len(files), 1, run)
        self.assertIn("memory snapshot written to " + files[0], run.stderr)
        data = self.check_layout(files[0])
        self.assertEqual(data["tessera"]["source"], "snapshot_on_oom")
        # the layout at the failure: the middle segment went back in the final retry
        segs = data["segments"]
        self.assertEqual([s["allocated_size"] for s in segs], [64 * MiB, 64 * MiB])
        stats = self.page_stats()
        self.assertEqual(stats["num_ooms"], 1)
        acts = [e["action"] for e in data["device_traces"][0]]
        self.assertEqual(acts[-1], "oom", acts)
        self.assertEqual(data["device_traces"][0][-1]["size"], 512 * MiB)
        self.assertIn("segment_free", acts)
        # replay: on the device the run had, the request that failed fails again (status 3);
        # the same peak as the process's counters, every block at its address
        rep = subprocess.run([it.REPLAY, "--json", files[0]], capture_output=True, text=True)
        self.assertEqual(rep.returncode, 3, rep.stderr)
        doc = json.loads(rep.stdout)
        self.assertEqual(doc["capacity_bytes"], 256 * MiB)
        self.assertEqual(doc["run_failed_requests"], 1)
        self.assertFalse(doc["run_first_failed_served"])
        self.assertEqual(doc["peak_allocated_bytes"], stats["allocated_bytes.all.peak"])
        self.assertEqual(doc["allocations"], 3)
        self.assertEqual(doc["frees"], 1)
        chk = subprocess.run([it.REPLAY, "--check-pytorch", files[0]], capture_output=True,
                             text=True)
        self.assertEqual(chk.returncode, 0, chk.stderr)
        self.assertIn("allocations at PyTorch's address: 3/3", chk.stdout)
        # the kept page and its history ring are both collected once the process is gone
        kept = sorted(f for f in os.listdir(self.env.stats_dir) if f.startswith("tessera."))
        self.assertEqual(len(kept), 2, kept)
        self.assertTrue(any(".history." in f for f in kept), kept)
        gc = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "--gc"], capture_output=True,
                            text=True)
        self.assertEqual(gc.returncode, 0, gc.stdout + gc.stderr)
        self.assertIn("removed 1 stale page and 1 history ring", gc.stdout)
        self.assertEqual([f for f in os.listdir(self.env.stats_dir) if f.startswith("tessera.")], [])

    def test_stream_ordered_blocks_are_in_the_snapshot(self):
        # async_pool's probe: cudaMallocAsync of 32 MiB blocks on its stream until the 128 MiB
        # cap refuses one; the snapshot at that failure holds the four, on that stream
        tpl = os.path.join(self.env.tmp, "oom-%p-%n.pickle")
        run = self.env.run(it.prog("async_pool", "--limit-probe"), memory="512M",
                           conf=f"memory_limit:128M,history_events:1024,snapshot_on_oom:{tpl}")
        self.assertEqual(run.rc, 0, run)
        files = glob.glob(os.path.join(self.env.tmp, "oom-*-1.pickle"))
        self.assertEqual(len(files), 1, run)
        data = self.check_layout(files[0])
        live = [(seg["stream"], b["size"]) for seg in data["segments"] for b in seg["blocks"]
                if b["state"] == "active_allocated"]
        self.assertEqual([size for _, size in live], [32 * MiB] * 4, live)
        self.assertEqual(len({stream for stream, _ in live}), 1, live)
        self.assertNotEqual(live[0][0], 0, live)  # the program's stream, not cudaMalloc's 0
        allocs = [e for e in data["device_traces"][0] if e["action"] == "alloc"]
        self.assertTrue(any(e["stream"] == live[0][0] and e["size"] == 32 * MiB for e in allocs))

    def test_symbolize_names_the_raw_frames(self):
        # snapshot_on_oom keeps the frames as file offsets (no symbol tables read at a failure);
        # tessera-stat symbolize names them afterwards from the program's symbol table
        tpl = os.path.join(self.env.tmp, "oom-%n.pickle")
        run = self.middle_oom("64M", "64M", "64M", "512M", "256M",
                              f"expandable_segments:False,history_events:256,"
                              f"history_frames:True,snapshot_on_oom:{tpl}")
        self.assertEqual(run.rc, 2, run)
        raw_path = os.path.join(self.env.tmp, "oom-1.pickle")
        raw = self.check_layout(raw_path)
        prog = os.path.realpath(it.prog("seed_middle")[0])

        def stacks(data):
            return [e["frames"] for e in data["device_traces"][0] if e["action"] == "alloc"]

        for frames in stacks(raw):
            self.assertTrue(frames)
            self.assertEqual(frames[0]["filename"], prog, frames)
            self.assertRegex(frames[0]["name"], r"^0x[0-9a-f]+$", frames)
        with open(raw_path, "rb") as f:
            before = f.read()
        # -o: the original stays as it was; the copy has names where the file is still there
        named_path = os.path.join(self.env.tmp, "named.pickle")
        r = subprocess.run([it.STAT, "symbolize", raw_path, "-o", named_path],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"written to {named_path}", r.stdout)
        with open(raw_path, "rb") as f:
            self.assertEqual(f.read(), before)
        named = self.check_layout(named_path)
        for frames in stacks(named):
            self.assertEqual(frames[0], {"name": "main", "filename": prog, "line": 0}, frames)
        # everything else is as it was: only frame names changed
        def strip(data):
            owners = [e for t in data["device_traces"] for e in t] + data["segments"] + \
                [b for seg in data["segments"] for b in seg["blocks"]]
            for e in owners:
                e["frames"] = [(f["filename"], f["line"]) for f in e["frames"]]
            return data
        self.assertEqual(strip(named), strip(self.check_layout(raw_path)))
        # a second pass has nothing left to name in main's frames; in place (no -o)
        r = subprocess.run([it.STAT, "symbolize", named_path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        # an older snapshot that kept tessera's own frames, written by another pickler
        # (protocol 2 without a memo: SETITEM and APPEND for single items): they are left out
        old = self.check_layout(raw_path)
        for frames in stacks(old):
            frames.insert(0, {"name": "0x1234", "filename": "/opt/x/libtessera.so", "line": 0})
        older = os.path.join(self.env.tmp, "older.pickle")
        with open(older, "wb") as f:
            pk = pickle.Pickler(f, protocol=2)
            pk.fast = True  # no memo: no shared references, as tessera writes
            pk.dump(old)
        r = subprocess.run([it.STAT, "symbolize", older], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r", [1-9][0-9]* of tessera's own left out;")
        for frames in stacks(self.check_layout(older)):
            self.assertEqual(frames[0], {"name": "main", "filename": prog, "line": 0}, frames)
        # a frame whose file is gone stays an offset: the program moved away
        moved = os.path.join(self.env.tmp, "gone.pickle")
        with open(moved, "wb") as f:
            f.write(before.replace(prog.encode(), prog[:-1].encode() + b"Z"))
        r = subprocess.run([it.STAT, "symbolize", moved], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for frames in stacks(self.check_layout(moved)):
            self.assertRegex(frames[0]["name"], r"^0x[0-9a-f]+$", frames)

    def test_symbolize_refuses_what_tessera_did_not_write(self):
        cases = {
            "empty": b"",
            "memo": b"\x80\x02}q\x00.",                       # BINPUT: not tessera's
            "cut string": b"\x80\x02}(X\xff\xff\xff\x7fname",
            "no stop": b"\x80\x02}(X\x04\x00\x00\x00nameJ\x01\x00\x00\x00u",
            "after stop": b"\x80\x02}.junk",
            "deep": b"\x80\x02" + b"](" * 100,
            "not a dict": b"\x80\x02].",
            "pairs into a list": b"\x80\x02}(X\x01\x00\x00\x00k](K\x01K\x02uu.",
        }
        for what, data in cases.items():
            path = os.path.join(self.env.tmp, "bad.pickle")
            with open(path, "wb") as f:
                f.write(data)
            r = subprocess.run([it.STAT, "symbolize", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, (what, r.stdout, r.stderr))
            self.assertTrue(r.stderr.startswith("tessera-stat: " + path + ": "), (what, r.stderr))
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data, what)  # never touched
        r = subprocess.run([it.STAT, "symbolize", "/dev/null"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not a regular file", r.stderr)
        fifo = os.path.join(self.env.tmp, "fifo")
        os.mkfifo(fifo)
        r = subprocess.run([it.STAT, "symbolize", fifo], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        r = subprocess.run([it.STAT, "symbolize"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = subprocess.run([it.STAT, "--wait", "1", "symbolize", fifo], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_existing_file_is_never_replaced(self):
        path = os.path.join(self.env.tmp, "taken.pickle")
        with open(path, "w") as f:
            f.write("keep me")
        run = self.middle_oom("64M", "64M", "64M", "512M", "256M", f"snapshot_on_oom:{path}")
        self.assertEqual(run.rc, 2, run)
        with open(path) as f:
            self.assertEqual(f.read(), "keep me")
        # the snapshot takes the next free name (SnapshotNeverLost)
        self.assertIn("tessera: memory snapshot written to " + path[:-len(".pickle")] +
                      "-2.pickle", run.stderr)
        self.assertEqual(glob.glob(path + ".tmp*"), [])


# How snapshot_probe fills a 1 GiB device under each policy (configuration, block size, blocks):
# full under the default (2 MiB pages: its 64 MiB request is stitched from the freed blocks'
# pages), every other 20 MiB page freed under expandable segments, 20 MiB segments under
# PyTorch's policy.
POLICIES = {
    # the default, each 8 MiB block a growth and a handle of its own (no batch ahead), so that
    # the counts below follow block by block
    "default": ("growth_batch_mb:0", 8 * MiB, 128),
    "expandable_segments": ("expandable_segments:True", 20 * MiB, 48),
    "pytorch": ("expandable_segments:False", 8 * MiB, 100),
}


def active(data, state="active_allocated"):
    return {b["address"]: b for seg in data["segments"] for b in seg["blocks"]
            if b["state"] == state}


class ProbeRun:
    """snapshot_probe run under one policy: its snapshot_on_oom files, a tessera-stat snapshot
    taken while it waits (idle after its last out of memory), the blocks it held then
    {address: size}, its stats page's counters then, and its output."""

    def __init__(self, case, policy, free_stitched=False):
        conf, unit, count = POLICIES[policy]
        env_ = case.env
        tpl = os.path.join(env_.tmp, policy + "-oom-%n.pickle")
        conf = ",".join(x for x in (conf, "history_events:20000,history_frames:True",
                                    "snapshot_on_oom:" + tpl) if x)
        env = env_.base(memory="1G", conf=conf)
        argv = it.probe("snapshot_probe") + [str(unit), str(count), str(64 * MiB), str(2 << 30)]
        argv += ["free"] if free_stitched else []
        p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.live, self.lines = {}, []
        try:
            for line in p.stdout:
                self.lines.append(line.strip())
                if line.startswith("LIVE "):
                    _, a, n = line.split()
                    self.live[int(a)] = int(n)
                if line.startswith("READY") or line.startswith("RESULT"):
                    break
            case.assertTrue(self.lines and self.lines[-1].startswith("READY"), self.lines)
            self.live_path = os.path.join(env_.tmp, policy + "-live.pickle")
            snap = subprocess.run([it.STAT, "--dir", env_.stats_dir, "snapshot", str(p.pid), "-o",
                                   self.live_path, "--wait", "0.5"], capture_output=True,
                                  text=True)
            case.assertEqual(snap.returncode, 0, snap.stderr)
            case.assertIn("device 0: exact", snap.stdout)
            self.stats = case.page_stats()
            p.stdin.write("go\n")
            p.stdin.flush()
            self.rest, err = p.communicate(timeout=60)
            case.assertEqual(p.returncode, 0, err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.ooms = sorted(glob.glob(tpl.replace("%n", "*")))
        case.assertTrue(self.ooms, self.lines)


class SnapshotLayout(Base):
    """Snapshots PyTorch's viewer draws right, under the three policies, after pages were given
    back (holes in expandable segments) and, under the default, with a stitched range: checked
    here without a browser (snapcheck: the viewer's rules), and in the viewer by
    SnapshotViewer."""

    def check_policy(self, policy, free_stitched=False):
        run = ProbeRun(self, policy, free_stitched)
        prog = os.path.realpath(it.probe("snapshot_probe")[0])
        live = self.check_layout(run.live_path)
        for path in [run.live_path] + run.ooms:
            data = self.check_layout(path)
            self.assertEqual(snapcheck.history_problems(data), [], path)
            # each byte once: the viewer's reserved total is the allocator's
            self.assertEqual(sum(s["total_size"] for s in data["segments"]),
                             run.stats["reserved_bytes.all.current"], path)
        # the failure that ended the run: the layout the process holds now
        self.assertEqual(check_layout_blocks(self.check_layout(run.ooms[-1])),
                         check_layout_blocks(live))
        # the settings in force, from the page (live) and from the process (out of memory)
        for data in (live, self.check_layout(run.ooms[-1])):
            self.assertEqual(data["allocator_settings"]["expandable_segments"],
                             policy != "pytorch", policy)
        # every block the program holds, where its address says, with the size it asked for
        allocated = active(live)
        self.assertEqual({a: b["requested_size"] for a, b in allocated.items()}, run.live)
        self.assertEqual(sum(s["allocated_size"] for s in live["segments"]),
                         run.stats["allocated_bytes.all.current"])
        # frames: each block's and segment's from the history (named in tessera-stat's
        # snapshot; file offsets in the process's own, named by symbolize)
        for b in allocated.values():
            self.assertEqual(b["frames"][0], {"name": "main", "filename": prog, "line": 0}, b)
        for seg in live["segments"]:
            self.assertEqual(seg["frames"][0]["name"], "main", seg)
        for b in active(self.check_layout(run.ooms[-1])).values():
            self.assertEqual(b["frames"][0]["filename"], prog, b)
            self.assertRegex(b["frames"][0]["name"], r"^0x[0-9a-f]+$", b)
        return run, live

    def test_default_policy_stitched_and_given_back(self):
        run, live = self.check_policy("default")
        self.assertIn("STITCH served", run.lines)
        self.assertGreaterEqual(run.stats["num_stitches"], 1)
        big = max(run.live, key=run.live.get)
        stitched = [s for s in live["segments"] if s["address"] == big]
        # the stitched range where it is mapped: one segment holding the 64 MiB block
        self.assertEqual([(s["total_size"], len(s["blocks"])) for s in stitched], [(64 * MiB, 1)])
        # the freed blocks' pages went back or were lent: one segment per held 8 MiB block
        self.assertEqual(len(live["segments"]), 64 + 1)

    def test_default_policy_stitched_range_given_back(self):
        # the stitched block freed before the final retry: the range is given back, its pages
        # return to the segments that lent them (a segment_map each), then go back too
        run, live = self.check_policy("default", free_stitched=True)
        self.assertIn("STITCH served", run.lines)
        self.assertEqual(len(live["segments"]), 64)  # the held 8 MiB blocks alone
        acts = [e["action"] for e in live["device_traces"][0]]
        # a handle per growth (an 8 MiB block's, one each): 128 mapped; 8 freed blocks lent
        # (unmapped from their segment, a run each) and their 8 handles mapped at the range; the
        # stitched block freed, the range retires: the 8 runs mapped back where they came from;
        # the final retry unmaps the range's 8 mappings and the 64 free blocks' handles
        self.assertEqual((acts.count("segment_map"), acts.count("segment_unmap")),
                         (128 + 8 + 8, 8 + 8 + 64))

    def test_expandable_segments_given_back(self):
        run, live = self.check_policy("expandable_segments")
        self.assertIn("STITCH served", run.lines)
        # 24 held 20 MiB blocks, each between two pages given back; the 64 MiB block mapped
        # after the last, in four 20 MiB pages: 24 segments, the last one 100 MiB
        sizes = [s["total_size"] for s in sorted(live["segments"], key=lambda s: s["address"])]
        self.assertEqual(sizes, [20 * MiB] * 23 + [100 * MiB])
        for data in (live, self.check_layout(run.ooms[-1])):
            self.assertTrue(all(s["is_expandable"] for s in data["segments"]))

    def test_pytorch_policy(self):
        run, live = self.check_policy("pytorch")
        self.assertIn("STITCH cudaErrorMemoryAllocation", run.lines)
        self.assertEqual(len(run.ooms), 2)
        # cudaMalloc'd segments: 50 of 20 MiB, each with its held block and free rest
        self.assertEqual([s["total_size"] for s in live["segments"]], [20 * MiB] * 50)
        for data in (live, self.check_layout(run.ooms[-1])):
            self.assertFalse(any(s["is_expandable"] for s in data["segments"]))

    def test_holes_of_a_given_back_middle(self):
        # 20, 80 and 20 MiB, the middle freed, then a request no device has: the final retry
        # gives the middle's pages back; the snapshot lists the two mapped ranges apart
        tpl = os.path.join(self.env.tmp, "oom-%n.pickle")
        run = self.middle_oom("20M", "80M", "20M", "2G", "1G",
                              f"expandable_segments:True,history_events:1000,snapshot_on_oom:{tpl}")
        self.assertEqual(run.rc, 2, run)
        data = self.check_layout(os.path.join(self.env.tmp, "oom-1.pickle"))
        self.assertEqual(snapcheck.history_problems(data), [])
        segs = sorted(data["segments"], key=lambda s: s["address"])
        self.assertEqual([(s["total_size"], s["allocated_size"]) for s in segs],
                         [(20 * MiB, 20 * MiB), (20 * MiB, 20 * MiB)])
        self.assertEqual(segs[1]["address"] - segs[0]["address"], 100 * MiB)


class SnapshotViewer(Base):
    """PyTorch's viewer (MemoryViz.js) in headless Chromium (tests/viz/viewcheck.py): every event
    of every view of the live and out-of-memory snapshots of each policy clicked, no error, every
    block drawn inside its segment, and at the last event where its address says. Skipped, with
    what it needs, without MemoryViz.js (PyTorch's, never part of tessera: TESSERA_MEMORYVIZ_JS,
    or an installed PyTorch), Chromium, node and the modules scripts/setup.sh installs."""

    @classmethod
    def setUpClass(cls):
        cls.plan, cls.missing = viewcheck.tools()

    def setUp(self):
        if self.missing:
            self.skipTest(self.missing)
        super().setUp()

    def view(self, policy, free_stitched=False):
        run = ProbeRun(self, policy, free_stitched)
        paths = [run.live_path] + run.ooms
        lines, problems = viewcheck.check(paths, self.plan)
        self.assertEqual(problems, [])
        self.assertEqual(len(lines), 3 * len(paths))  # three views of each
        print("\n".join(lines))

    def test_default_policy(self):
        self.view("default")

    def test_default_policy_stitched_range_given_back(self):
        self.view("default", free_stitched=True)

    def test_expandable_segments(self):
        self.view("expandable_segments")

    def test_pytorch_policy(self):
        self.view("pytorch")


def check_layout_blocks(data):
    """(address, size, state) of every block: what two snapshots of one moment share."""
    return sorted((b["address"], b["size"], b["state"]) for s in data["segments"]
                  for b in s["blocks"])


class SnapshotNeverLost(Base):
    """snapshot_on_oom loses no snapshot: a directory it would refuse at the out of memory is
    refused at start; a taken name gets a number; the failure that ends the run has its snapshot
    (the last of the 8 files is replaced by each later failure's) and its line."""

    def oom_probe(self, tpl, *sizes, lenient=False):
        """Failures of these sizes, with snapshot_on_oom:tpl in TESSERA_ALLOC_CONF (strict) or
        PYTORCH_CUDA_ALLOC_CONF (lenient)."""
        conf = "history_events:256,snapshot_on_oom:" + tpl
        return self.env.run(it.probe("oom_probe") + list(sizes), memory="256M",
                            conf=None if lenient else conf,
                            extra={"PYTORCH_CUDA_ALLOC_CONF": conf} if lenient else None)

    def refused_dirs(self):
        """Directories snapshot_on_oom must refuse, with the reason said for each."""
        shared = os.path.join(self.env.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        group = os.path.join(self.env.tmp, "group")
        os.mkdir(group)
        os.chmod(group, 0o770)
        real = os.path.join(self.env.tmp, "real")
        os.mkdir(real, 0o700)
        link = os.path.join(self.env.tmp, "link")
        os.symlink(real, link)
        other = os.path.join(self.env.tmp, "other")
        os.mkdir(other, 0o700)
        os.chown(other, 65534, 65534)
        return [(shared, "writable by other users"), (group, "writable by other users"),
                (link, "not a directory (or a symbolic link)"), (other, "another user's")]

    def test_refused_at_start(self):
        for d, why in self.refused_dirs():
            run = self.oom_probe(os.path.join(d, "oom-%n.pickle"), "1G")
            # strict: stopped before main, as for any bad key; the program never ran
            self.assertEqual(run.rc, 1, (d, run))
            self.assertNotIn("RESULT", run.stdout, d)
            self.assertIn("tessera: TESSERA_ALLOC_CONF: key 'snapshot_on_oom': %s is %s"
                          % (d, why), run.stderr)
            self.assertIn("stopping before the program starts", run.stderr)
            self.assertEqual(os.listdir(os.path.realpath(d)), [], d)
        # a program that loads CUDA itself (not linked with it) stops at its first CUDA call
        shared = os.path.join(self.env.tmp, "shared")
        code = ("import ctypes, sys; print('started', flush=True); "
                "rt = ctypes.CDLL('libcudart.so.13'); p = ctypes.c_void_p(); "
                "print('cudaMalloc', rt.cudaMalloc(ctypes.byref(p), 1 << 20), flush=True)")
        run = self.env.run([sys.executable, "-c", code], memory="256M",
                           conf="snapshot_on_oom:" + os.path.join(shared, "oom.pickle"))
        self.assertEqual(run.rc, 1, run)
        self.assertEqual(run.stdout, "started\n", run)
        self.assertIn("key 'snapshot_on_oom': %s is writable by other users" % shared, run.stderr)
        self.assertIn("stopping at the first CUDA call", run.stderr)
        # lenient (the PyTorch variables): said, and the run goes on without snapshots
        run = self.oom_probe(os.path.join(shared, "oom-%n.pickle"), "1G", lenient=True)
        self.assertEqual(run.rc, 0, run)
        self.assertIn("OOM 1073741824", run.stdout)
        self.assertIn("tessera: PYTORCH_CUDA_ALLOC_CONF: key 'snapshot_on_oom': %s is writable "
                      "by other users" % shared, run.stderr)
        self.assertIn("; ignored (no snapshots)", run.stderr)
        self.assertEqual(os.listdir(shared), [])
        # a missing directory is created at start, mode 0700: then it is this user's
        fresh = os.path.join(self.env.tmp, "fresh")
        run = self.oom_probe(os.path.join(fresh, "oom.pickle"), "1G")
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(stat.S_IMODE(os.stat(fresh).st_mode), 0o700)
        self.assertEqual(os.listdir(fresh), ["oom.pickle"])

    def test_taken_names_get_a_number(self):
        d = os.path.join(self.env.tmp, "oom")
        os.mkdir(d, 0o700)
        with open(os.path.join(d, "oom.pickle"), "w") as f:
            f.write("keep me")
        # no %n: the first failure's name is taken (an earlier run's file), the next ones too
        run = self.oom_probe(os.path.join(d, "oom.pickle"), "1G", "2G", "3G")
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(sorted(os.listdir(d)), ["oom-2.pickle", "oom-3.pickle", "oom-4.pickle",
                                                 "oom.pickle"])
        with open(os.path.join(d, "oom.pickle")) as f:
            self.assertEqual(f.read(), "keep me")
        for name, size in (("oom-2.pickle", 1), ("oom-3.pickle", 2), ("oom-4.pickle", 3)):
            data = self.check_layout(os.path.join(d, name))
            self.assertEqual(data["device_traces"][0][-1]["size"], size << 30, name)
            self.assertIn("memory snapshot written to " + os.path.join(d, name), run.stderr)
        # a name without an extension gets its number at the end
        bare = os.path.join(self.env.tmp, "bare")
        os.mkdir(bare, 0o700)
        run = self.oom_probe(os.path.join(bare, "oom"), "1G", "2G")
        self.assertEqual(sorted(os.listdir(bare)), ["oom", "oom-2"])

    def test_the_last_failure_has_its_snapshot(self):
        d = os.path.join(self.env.tmp, "oom")
        os.mkdir(d, 0o700)
        sizes = ["%dM" % (1024 + i) for i in range(1, 12)]  # 11 failures, each its own size
        run = self.oom_probe(os.path.join(d, "oom-%n.pickle"), *sizes)
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(sorted(os.listdir(d)), ["oom-%d.pickle" % n for n in range(1, 9)])
        self.assertIn("snapshot_on_oom: 8 snapshots written; each later out of memory replaces "
                      "the last one, %s/oom-8.pickle" % d, run.stderr)
        for n in range(1, 8):
            data = self.check_layout(os.path.join(d, "oom-%d.pickle" % n))
            self.assertEqual(data["device_traces"][0][-1]["size"], (1024 + n) << 20)
        # the eighth file holds the eleventh failure, the one that ended the run
        data = self.check_layout(os.path.join(d, "oom-8.pickle"))
        ooms = [e["size"] for e in data["device_traces"][0] if e["action"] == "oom"]
        self.assertEqual(ooms, [(1024 + n) << 20 for n in range(1, 12)])
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, "oom-8.pickle")).st_mode), 0o600)

    def test_the_last_and_a_larger_failure_have_their_line(self):
        # many failures at once: one line a second, but a larger failure is always said, and
        # the last one (the failure that ends the run) is said at exit when it was held back
        sizes = ["1G"] * 40 + ["8G"] + ["1G"] * 40 + ["1536M"]
        run = self.env.run(it.probe("oom_probe") + sizes, memory="256M")
        self.assertEqual(run.rc, 0, run)
        lines = [l for l in run.stderr.splitlines() if "out of memory on device" in l]
        self.assertLess(len(lines), 40, lines)
        self.assertTrue([l for l in lines if "tried to allocate 8.00 GiB" in l], lines)
        self.assertIn("tried to allocate 1.50 GiB", lines[-1], lines)
        m = re.match(r"tessera: (\d+) more out-of-memory (reports?) suppressed; the last: out of "
                     r"memory on device 0: tried to allocate 1.50 GiB", lines[-1])
        if m:  # held back: said at exit, with its count
            self.assertEqual(m.group(2), "report" if m.group(1) == "1" else "reports", lines[-1])
        # the last failure said when it happened: nothing is left to say at exit
        run = self.env.run(it.probe("oom_probe") + ["1G"] * 40 + ["8G"], memory="256M")
        lines = [l for l in run.stderr.splitlines() if l.startswith("tessera: ")]
        self.assertIn("tried to allocate 8.00 GiB", lines[-1], lines)
        self.assertNotIn("suppressed; the last", run.stderr)

    def test_symbolize_says_how_to_get_frames(self):
        d = os.path.join(self.env.tmp, "oom")
        os.mkdir(d, 0o700)
        self.oom_probe(os.path.join(d, "oom.pickle"), "1G")
        path = os.path.join(d, "oom.pickle")
        r = subprocess.run([it.STAT, "symbolize", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(path + ": no frames: the snapshot was taken without them; run the program "
                      "with history_events:N,history_frames:True", r.stdout)


class SnapshotWhileBusy(Base):
    """A snapshot of a process that keeps allocating: layout and history are one instant."""

    def test_layout_and_history_agree(self):
        env = self.env.base(memory="1G", conf="history_events:20000")
        p = subprocess.Popen(it.prog("churn", "--iters", "1000000", "--max-size", "64K"), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out = os.path.join(self.env.tmp, "busy.pickle")
            for _ in range(200):  # until the page exists and has a map
                pages = [f for f in os.listdir(self.env.stats_dir) if f == "tessera.%d" % p.pid]
                if pages:
                    break
                time.sleep(0.05)
            # well into the loop: 200 allocations made (counted, not a pause; 60 s: a hang guard)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and p.poll() is None:
                st = self.env.page_stats(p.pid)
                if st and st.get("allocation.all.allocated", 0) >= 200:
                    break
                time.sleep(0.05)
            snap = subprocess.run([it.STAT, "--dir", self.env.stats_dir, "snapshot", str(p.pid),
                                   "-o", out, "--wait", "20"], capture_output=True, text=True)
            self.assertEqual(snap.returncode, 0, snap.stderr)
            self.assertIsNone(p.poll(), "the program must still be running")
        finally:
            p.kill()
            p.wait()
        self.assertIn("device 0: exact", snap.stdout)
        data = self.check_layout(out)
        events = data["device_traces"][0]
        self.assertGreater(len(events), 100)
        # the last event of each address says what the layout must show there
        last = {}
        for e in events:
            if e["action"] in ("alloc", "free_requested", "free_completed"):
                last[e["addr"]] = e
        # an alloc's size is what the program asked for, as in PyTorch's traces
        allocated = {b["address"]: b["requested_size"] for seg in data["segments"]
                     for b in seg["blocks"] if b["state"] == "active_allocated"}
        live = {a: e["size"] for a, e in last.items() if e["action"] == "alloc"}
        freed = {a for a, e in last.items() if e["action"] != "alloc"}
        self.assertGreater(len(live), 0)
        for a, size in live.items():
            self.assertEqual(allocated.get(a), size,
                             "0x%x: allocated in the history, not in the layout" % a)
        for a in freed:
            self.assertNotIn(a, allocated, "0x%x: freed in the history, allocated in the layout" % a)
        # the viewer's allocated total at the last event is the layout's
        self.assertEqual(sum(s["requested_size"] for s in data["segments"]),
                         sum(allocated.values()))
        self.assertEqual(snapcheck.history_problems(data), [])


if __name__ == "__main__":
    unittest_main.run(sys.modules[__name__], sys.argv[1:])
