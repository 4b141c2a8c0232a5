#!/usr/bin/env python3
"""Tests of scripts/snapshot2trace (python3 stdlib unittest).

Synthetic snapshots are built here as plain dicts and pickled; the three real traces in
tests/data/traces are checked against counts taken with an independent restricted load.

Environment (set by meson, with defaults relative to this file):
  SNAPSHOT2TRACE   path of the script
  TESSERA_TRACES   directory of the real traces
"""

import datetime
import os
import pickle
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = Path(os.environ.get("SNAPSHOT2TRACE", HERE.parents[1] / "scripts" / "snapshot2trace"))
TRACES = Path(os.environ.get("TESSERA_TRACES", HERE.parents[1] / "tests" / "data" / "traces"))

MiB = 1 << 20
ZERO_DIVS = "0," * 15 + "0"


def run(*args):
    """Run the script; returns (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def ev(action, addr, size, stream=0, time_us=0, **extra):
    d = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": time_us,
         "frames": [{"filename": "x.py", "line": 1, "name": "f"}]}
    d.update(extra)
    return d


def seg(address, total, blocks, device=0, stream=0, seg_type="large", expandable=False,
        with_addresses=True):
    bl = []
    a = address
    for size, req, state in blocks:
        b = {"size": size, "requested_size": req, "state": state, "frames": []}
        if with_addresses:
            b["address"] = a
        bl.append(b)
        a += size
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": 0, "active_size": 0, "requested_size": 0, "stream": stream,
            "segment_type": seg_type, "segment_pool_id": (0, 0), "is_expandable": expandable,
            "frames": [], "blocks": bl}


def parse_summary(stderr):
    out = {}
    for line in stderr.splitlines():
        m = re.match(r"^\s+([^:]+): (\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class Refuser(pickle.Unpickler):
    """The tests' own restricted loader (independent of the script's)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}")


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self._td = tempfile.TemporaryDirectory(prefix="snapshot2trace-test-")
        self.dir = Path(self._td.name)

    def tearDown(self):
        self._td.cleanup()

    def write_pickle(self, obj, name="snap.pickle", protocol=pickle.HIGHEST_PROTOCOL):
        p = self.dir / name
        p.write_bytes(pickle.dumps(obj, protocol=protocol))
        return p

    def write_bytes(self, data, name="snap.pickle"):
        p = self.dir / name
        p.write_bytes(data)
        return p

    def assert_clean_error(self, rc, out, err, *needles):
        self.assertEqual(rc, 1, err)
        self.assertEqual(out, "")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("snapshot2trace: "), err)
        self.assertNotIn("Traceback", err)
        for n in needles:
            self.assertIn(n, lines[0])


class CsvTests(TempDirCase):
    def test_rows_exactly(self):
        t0 = 1748729391819440  # 2025-05-31 22:09:51.819440 UTC
        snap = {
            "segments": [seg(0x10000000, 2 * MiB, [(2 * MiB, 0, "inactive")])],
            "device_traces": [[
                ev("segment_alloc", 0x10000000, 2 * MiB, time_us=t0),
                ev("alloc", 0x10000000, 1000, time_us=t0 + 1),
                ev("alloc", 0x10000400, 3000, stream=0x7F00AB, time_us=t0 + 2),
                ev("free_requested", 0x10000000, 999, time_us=t0 + 3),
                ev("free_completed", 0x10000000, 1000, time_us=t0 + 4),
                {"action": "oom", "device_free": 12345, "size": 4 * MiB, "stream": 0,
                 "time_us": t0 + 5},
                ev("snapshot", 0, 3000, time_us=t0 + 6),
                ev("free_requested", 0x10000400, 3000, stream=0x7F00AB, time_us=t0 + 1000007),
                ev("free_completed", 0x10000400, 3000, stream=0x7F00AB, time_us=t0 + 1000008),
                ev("segment_free", 0x10000000, 2 * MiB, time_us=t0 + 1000009),
            ]],
            "allocator_settings": {},
        }
        rc, out, err = run(self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, (
            "Thread,Time,Action,Pointer,Size,Stream\n"
            "0,22:09:51.819441,allocate,0x10000000,1000,0x0\n"
            "0,22:09:51.819442,allocate,0x10000400,3000,0x7f00ab\n"
            "0,22:09:51.819443,free,0x10000000,1000,0x0\n"
            "0,22:09:51.819445,allocate failure,0x0,4194304,0x0\n"
            "0,22:09:52.819447,free,0x10000400,3000,0x7f00ab\n"))
        s = parse_summary(err)
        self.assertEqual(s["events read"], 10)
        self.assertEqual(s["allocations"], 2)
        self.assertEqual(s["frees"], 2)
        self.assertEqual(s["skipped frees of unknown addresses"], 0)
        self.assertEqual(s["pre-existing segments"], 0)
        self.assertEqual(s["allocations never freed"], 0)
        # the request that failed is a row, as RMM writes one; never dropped
        self.assertIn("failed requests (oom, written as allocate failure): 1", err)
        self.assertIn("events not emitted (free_completed, segment_*, snapshot): 5", err)

    def test_capacity_note(self):
        # a tessera snapshot says what the device had: the CSV's first row carries it in a Note
        # column (RMM's parser ignores it) and the dump in capacity and conf lines
        snap = {
            "segments": [],
            "device_traces": [[ev("alloc", 4096, 512, time_us=1),
                               {"action": "oom", "device_free": 0, "size": 4 * MiB, "stream": 0,
                                "time_us": 2}]],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "memory_limit:1G,defragment:True"},
            "tessera": {"devices": [{"device": 0, "total_bytes": 2 << 30,
                                     "memory_limit_bytes": 1 << 30}]},
        }
        path = self.write_pickle(snap)
        rc, out, err = run(path)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "Thread,Time,Action,Pointer,Size,Stream,Note")
        self.assertEqual(lines[1], '0,00:00:00.000001,allocate,0x1000,512,0x0,"device=0 total=%d '
                         'limit=%d conf=memory_limit:1G,defragment:True"' % (2 << 30, 1 << 30))
        self.assertEqual(lines[2], "0,00:00:00.000002,allocate failure,0x0,4194304,0x0")
        rc, out, err = run(path, "--format", "dump")
        self.assertEqual(rc, 0, err)
        self.assertIn("capacity %d %d\nconf memory_limit:1G,defragment:True\n"
                      % (2 << 30, 1 << 30), out)

    def test_time_of_day_is_utc(self):
        for t in (0, 999999, 86399999999, 86400000000, 1738780408787504, 1748732594962743):
            snap = {"segments": [], "device_traces": [[ev("alloc", 4096, 8, time_us=t)]]}
            rc, out, err = run(self.write_pickle(snap))
            self.assertEqual(rc, 0, err)
            d = datetime.datetime.fromtimestamp(t // 1000000, tz=datetime.timezone.utc)
            want = f"{d:%H:%M:%S}.{t % 1000000:06d}"
            self.assertEqual(out.splitlines()[1], f"0,{want},allocate,0x1000,8,0x0")

    def test_free_uses_size_recorded_at_allocate(self):
        snap = {"segments": [], "device_traces": [[
            ev("alloc", 0x2000, 513), ev("free_requested", 0x2000, 1),
            ev("alloc", 0x2000, 77), ev("free_requested", 0x2000, 0)]]}
        rc, out, err = run(self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        rows = [r.split(",") for r in out.splitlines()[1:]]
        self.assertEqual([(r[2], r[4]) for r in rows],
                         [("allocate", "513"), ("free", "513"), ("allocate", "77"),
                          ("free", "77")])

    def test_late_starting_ring_buffer(self):
        # The trace starts after the process did: frees of addresses it never saw allocated,
        # a segment (S1) that exists at the end but was never segment_alloc'ed, and a segment
        # (S0) freed without ever being allocated in the trace.
        s1, s2, s0 = 0x7F0000000000, 0x7F0000200000, 0x7F0000400000
        snap = {
            "segments": [
                seg(s2, 2 * MiB, [(512, 500, "active_allocated"), (2 * MiB - 512, 0, "inactive")]),
                seg(s1, 2 * MiB, [(2 * MiB, 0, "inactive")]),
            ],
            "device_traces": [[
                ev("free_requested", s1 + 1024, 100),        # allocated before the trace
                ev("free_completed", s1 + 1024, 100),
                ev("free_requested", s1, 4096),              # allocated before the trace
                ev("segment_free", s0, 2 * MiB),             # a pre-existing segment goes
                ev("segment_alloc", s2, 2 * MiB),
                ev("alloc", s2, 500),                        # never freed
                ev("alloc", s2 + 512, 10),
                ev("free_requested", s2 + 512, 10),
                ev("free_completed", s2 + 512, 10),
                ev("free_requested", s2 + 512, 10),          # a double free: unknown by now
            ]],
        }
        rc, out, err = run(self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        s = parse_summary(err)
        self.assertEqual(s["events read"], 10)
        self.assertEqual(s["allocations"], 2)
        self.assertEqual(s["frees"], 1)
        self.assertEqual(s["skipped frees of unknown addresses"], 3)
        self.assertEqual(s["pre-existing segments"], 1)
        self.assertEqual(s["pre-existing segments freed during the trace"], 1)
        self.assertEqual(s["allocations never freed"], 1)
        rows = out.splitlines()[1:]
        self.assertEqual(len(rows), 3)
        self.assertEqual(sum(r.split(",")[2] == "allocate" for r in rows), s["allocations"])
        self.assertEqual(sum(r.split(",")[2] == "free" for r in rows), s["frees"])

    def test_device_selection(self):
        snap = {
            "segments": [seg(0x1000000, 2 * MiB, [(2 * MiB, 0, "inactive")], device=0),
                         seg(0x9000000, 2 * MiB, [(2 * MiB, 0, "inactive")], device=1),
                         seg(0xA000000, 2 * MiB, [(2 * MiB, 0, "inactive")], device=1)],
            "device_traces": [[ev("alloc", 0x1000000, 1)],
                              [ev("segment_alloc", 0x9000000, 2 * MiB),
                               ev("alloc", 0x9000000, 2), ev("alloc", 0x9000200, 3)]],
        }
        p = self.write_pickle(snap)
        rc, out, err = run("--device", 1, p)
        self.assertEqual(rc, 0, err)
        self.assertEqual([r.split(",")[4] for r in out.splitlines()[1:]], ["2", "3"])
        s = parse_summary(err)
        self.assertEqual(s["pre-existing segments"], 1)
        self.assertIn("device 1", err)
        rc, out, err = run("--device", 2, p)
        self.assert_clean_error(rc, out, err, "no trace for device 2")

    def test_output_file(self):
        snap = {"segments": [], "device_traces": [[ev("alloc", 0x1000, 5)]]}
        dest = self.dir / "out.csv"
        rc, out, err = run("-o", dest, self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "")
        self.assertEqual(dest.read_text(),
                         "Thread,Time,Action,Pointer,Size,Stream\n"
                         "0,00:00:00.000000,allocate,0x1000,5,0x0\n")
        self.assertFalse((self.dir / "out.csv.tmp").exists())

    def test_unknown_action_is_counted_not_emitted(self):
        snap = {"segments": [], "device_traces": [[
            ev("alloc", 0x1000, 5), {"action": "annotate", "addr": 0x1000, "time_us": 3}]]}
        rc, out, err = run(self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out.splitlines()), 2)
        self.assertIn("unknown actions (not emitted): annotate", err)


class DumpTests(TempDirCase):
    def test_exact_dump(self):
        a, b, c = 0x7F0000000000, 0x7F0000800000, 0x7F0001000000
        snap = {
            # Out of address order, one of another device, blocks with and without address.
            "segments": [
                seg(b, 2 * MiB, [(512, 500, "active_allocated"), (1024, 1000, "active_awaiting_free"),
                                 (2 * MiB - 1536, 0, "inactive")], seg_type="small",
                    stream=0x55, with_addresses=False),
                seg(c, 4 * MiB, [(4 * MiB, 0, "inactive")], device=1),
                seg(a, 20 * MiB, [(20 * MiB, 20 * MiB - 7, "active_pending_free")],
                    expandable=True),
            ],
            "device_traces": [[
                ev("segment_alloc", a, 20 * MiB),
                ev("alloc", a, 20 * MiB - 7, stream=0),
                ev("segment_map", b, 2 * MiB, stream=0x55),
                ev("segment_unmap", b, 2 * MiB, stream=0x55),
                {"action": "oom", "device_free": 1048576, "size": 64 * MiB, "stream": 7,
                 "time_us": 1},
                ev("snapshot", 0, 20 * MiB - 7),
                ev("free_requested", a, 20 * MiB - 7),
                ev("free_completed", a, 20 * MiB - 7),
                ev("segment_free", a, 20 * MiB),
            ], []],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256",
                "max_split_size": 256 * MiB,
                "garbage_collection_threshold": 0.8,
                "expandable_segments": True,
                "roundup_power2_divisions": {str(1 << i): (i % 4) for i in reversed(range(16))},
            },
            "external_annotations": [],
        }
        path = self.write_pickle(snap, name="my run.pickle")
        rc, out, err = run("--format", "dump", path)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        want = "\n".join([
            "tessera-snapshot 1",
            "source my_run.pickle",
            "device 0",
            f"setting max_split_size {256 * MiB}",
            "setting garbage_collection_threshold 0.8",
            "setting expandable_segments 1",
            "setting roundup_power2_divisions 0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3",
            f"segment {a} {20 * MiB} 0 large 1",
            f"block {a} {20 * MiB} {20 * MiB - 7} active_pending_free",
            f"segment {b} {2 * MiB} {0x55} small 0",
            f"block {b} 512 500 active_allocated",
            f"block {b + 512} 1024 1000 active_pending_free",
            f"block {b + 1536} {2 * MiB - 1536} 0 inactive",
            f"event segment_alloc {a} {20 * MiB} 0",
            f"event alloc {a} {20 * MiB - 7} 0",
            f"event segment_map {b} {2 * MiB} {0x55}",
            f"event segment_unmap {b} {2 * MiB} {0x55}",
            f"event oom 1048576 {64 * MiB} 7",
            f"event snapshot 0 {20 * MiB - 7} 0",
            f"event free_requested {a} {20 * MiB - 7} 0",
            f"event free_completed {a} {20 * MiB - 7} 0",
            f"event segment_free {a} {20 * MiB} 0",
            "end 9",
        ]) + "\n"
        self.assertEqual(out, want)

        rc, out, err = run("--format", "dump", "--device", 1, path)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[7:], [
            f"segment {c} {4 * MiB} 0 large 0", f"block {c} {4 * MiB} 0 inactive", "end 0"])

    def test_blocks_sorted_by_address(self):
        s = seg(0x100000, 3072, [])
        s["blocks"] = [{"address": 0x100800, "size": 1024, "requested_size": 1, "state": "inactive"},
                       {"address": 0x100000, "size": 2048, "requested_size": 2,
                        "state": "active_allocated"}]
        rc, out, err = run("--format", "dump",
                           self.write_pickle({"segments": [s], "device_traces": [[]]}))
        self.assertEqual(rc, 0, err)
        self.assertEqual([ln for ln in out.splitlines() if ln.startswith("block")],
                         [f"block {0x100000} 2048 2 active_allocated",
                          f"block {0x100800} 1024 1 inactive"])

    def test_old_format_defaults(self):
        # eor-nn style: no allocator_settings at all.
        snap = {"segments": [seg(0x200000, 2 * MiB, [(2 * MiB, 0, "inactive")])],
                "device_traces": [[ev("snapshot", 0, 0), ev("alloc", 0x200000, 100)]]}
        rc, out, err = run("--format", "dump", self.write_pickle(snap, protocol=2))
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[3:7], [
            "setting max_split_size -1",
            "setting garbage_collection_threshold 0.0",
            "setting expandable_segments 0",
            "setting roundup_power2_divisions " + ZERO_DIVS])
        self.assertEqual(out.splitlines()[-1], "end 2")

    def test_partial_settings(self):
        snap = {"segments": [], "device_traces": [[]],
                "allocator_settings": {"max_split_size": None,
                                       "roundup_power2_divisions": {"1": 4, "32768": 8}}}
        rc, out, err = run("--format", "dump", self.write_pickle(snap))
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[3:7], [
            "setting max_split_size -1",
            "setting garbage_collection_threshold 0.0",
            "setting expandable_segments 0",
            "setting roundup_power2_divisions 4" + ",0" * 14 + ",8"])

    def test_every_line_matches_the_grammar(self):
        rc, out, err = run("--format", "dump", TRACES / "cs336-ctx256-fullstep.pickle")
        self.assertEqual(rc, 0, err)
        grammar = [
            r"tessera-snapshot 1", r"source \S+", r"device \d+",
            r"setting max_split_size -?\d+", r"setting garbage_collection_threshold \S+",
            r"setting expandable_segments [01]",
            r"setting roundup_power2_divisions \d+(,\d+){15}",
            r"segment \d+ \d+ \d+ (small|large) [01]",
            r"block \d+ \d+ \d+ (active_allocated|active_pending_free|inactive)",
            r"event (alloc|free_requested|free_completed|segment_alloc|segment_free|"
            r"segment_map|segment_unmap|oom|snapshot) \d+ \d+ \d+",
            r"end \d+"]
        rx = re.compile("^(" + "|".join(grammar) + ")$")
        for line in out.splitlines():
            self.assertRegex(line, rx)


class ErrorTests(TempDirCase):
    def test_missing_file(self):
        self.assert_clean_error(*run(self.dir / "nope.pickle"), "nope.pickle")

    def test_directory(self):
        self.assert_clean_error(*run(self.dir))

    def test_not_a_pickle(self):
        self.assert_clean_error(*run(self.write_bytes(b"Thread,Time,Action\n0,1,2\n")),
                                "not a pickle")
        self.assert_clean_error(*run(self.write_bytes(b"")), "not a pickle")
        full = pickle.dumps({"segments": [], "device_traces": [[ev("alloc", 1, 2)]]}, protocol=4)
        self.assert_clean_error(*run(self.write_bytes(full[:-10])), "not a pickle")

    def test_wrong_top_level_shape(self):
        self.assert_clean_error(*run(self.write_pickle([1, 2, 3])), "top level is a list")
        self.assert_clean_error(*run(self.write_pickle({"segments": []})), "device_traces")
        self.assert_clean_error(*run(self.write_pickle({"device_traces": [[]]})), "segments")
        self.assert_clean_error(
            *run(self.write_pickle({"segments": [], "device_traces": {"0": []}})),
            "'device_traces' is a dict")
        self.assert_clean_error(
            *run(self.write_pickle({"segments": [], "device_traces": [None]})),
            "device_traces[0]")
        self.assert_clean_error(
            *run(self.write_pickle({"segments": [], "device_traces": []})), "no device traces")

    def test_bad_entries(self):
        self.assert_clean_error(*run(self.write_pickle(
            {"segments": [], "device_traces": [[{"action": "alloc", "size": 4}]]})),
            "device_traces[0][0]", "missing 'addr'")
        self.assert_clean_error(*run(self.write_pickle(
            {"segments": [], "device_traces": [[ev("alloc", "0x10", 4)]]})),
            "'addr' is a str")
        self.assert_clean_error(*run(self.write_pickle(
            {"segments": [], "device_traces": [[ev("free requested", 1, 4)]]})), "bad action")
        s = seg(0x1000, 4096, [(4096, 0, "allocated?")])
        self.assert_clean_error(*run("--format", "dump", self.write_pickle(
            {"segments": [s], "device_traces": [[]]})), "unknown block state")

    def test_size_limit(self):
        p = self.write_pickle({"segments": [], "device_traces": [[ev("alloc", 1, 2)] * 50]})
        self.assert_clean_error(*run("--max-bytes", 100, p), "more than the limit")
        rc, _, err = run("--max-bytes", p.stat().st_size, p)
        self.assertEqual(rc, 0, err)

    def test_default_size_limit_is_2gib(self):
        rc, out, _ = run("--help")
        self.assertEqual(rc, 0)
        self.assertIn("2 GiB", out)

    def test_usage_error(self):
        rc, out, err = run("--format", "xml", "x.pickle")
        self.assertEqual(rc, 1)
        self.assertIn("snapshot2trace: argument --format", err)


class MaliciousTests(TempDirCase):
    """Pickles that would run a command: refused, and nothing is executed."""

    def marker(self):
        return self.dir / "PWNED"

    def check_refused(self, data, *needles):
        p = self.write_bytes(data, name="evil.pickle")
        for fmt in ("csv", "dump"):
            rc, out, err = run("--format", fmt, p)
            self.assert_clean_error(rc, out, err, "refusing", *needles)
            self.assertFalse(self.marker().exists(), "the payload ran")

    def cmd(self):
        return f"touch {self.marker()}".encode()

    def test_global_opcode(self):
        # protocol 0: GLOBAL 'os system', MARK, STRING, TUPLE, REDUCE
        self.check_refused(b"cos\nsystem\n(S'" + self.cmd() + b"'\ntR.", "os.system")

    def test_stack_global_opcode(self):
        marker = str(self.marker())

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        data = pickle.dumps(Evil(), protocol=4)
        self.assertIn(b"\x93", data)  # STACK_GLOBAL
        self.check_refused(data, "system")

    def test_inst_opcode(self):
        self.check_refused(b"(S'" + self.cmd() + b"'\nios\nsystem\n.", "os.system")

    def test_builtins_eval(self):
        code = f"open({str(self.marker())!r}, 'w')".encode()
        self.check_refused(b"cbuiltins\neval\n(S'" + code + b"'\ntR.", "builtins.eval")

    def test_nested_inside_a_valid_snapshot(self):
        marker = str(self.marker())

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        snap = {"segments": [], "device_traces": [[ev("alloc", 1, 2, frames=[Evil()])]]}
        self.check_refused(pickle.dumps(snap, protocol=2), "system")

    def test_persistent_id(self):
        self.check_refused(b"Pos.system\n.", "persistent id")

    def test_shared_references_refused_before_any_work(self):
        # 4 KB standing for a million blocks (one block dict, one segment, each referenced
        # 1000 times through the memo): refused by count, not expanded
        blk = {"address": 0, "size": 512, "requested_size": 512, "state": "active_allocated"}
        seg = {"device": 0, "address": 1 << 24, "total_size": 512 * 1000, "stream": 0,
               "segment_type": "large", "blocks": [blk] * 1000}
        data = pickle.dumps({"segments": [seg] * 1000, "device_traces": [[]]}, protocol=4)
        self.assertLess(len(data), 8192)
        p = self.write_bytes(data, name="bomb.pickle")
        for fmt in ("csv", "dump"):
            rc, out, err = run("--format", fmt, p)
            self.assert_clean_error(rc, out, err, "1001000 events, segments and blocks",
                                    "shared references")


class RealTraceTests(unittest.TestCase):
    """The three real traces: the script's counts match an independent restricted load."""

    KNOWN = {
        "cs336-ctx128-forward.pickle": {"alloc": 2058, "free_requested": 1155,
                                        "segment_alloc": 289},
        "cs336-ctx256-fullstep.pickle": {"alloc": 6769, "free_requested": 5894,
                                         "segment_alloc": 791, "segment_free": 780},
        "eor-nn-snapshot.pickle": {"alloc": 1935, "free_requested": 1926, "snapshot": 9,
                                   "segment_alloc": 7},
    }

    def load(self, name):
        with open(TRACES / name, "rb") as f:
            return Refuser(f).load()

    def test_traces_present(self):
        for name in self.KNOWN:
            self.assertTrue((TRACES / name).is_file(), f"{TRACES / name} is missing")

    def check_trace(self, name):
        snap = self.load(name)
        trace = snap["device_traces"][0]
        counts = {}
        for e in trace:
            counts[e["action"]] = counts.get(e["action"], 0) + 1
        for action, n in self.KNOWN[name].items():
            self.assertEqual(counts.get(action, 0), n, f"{name}: {action}")

        # dump: one event line per entry, per action; segments and blocks of device 0
        rc, out, err = run("--format", "dump", TRACES / name)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        dumped = {}
        for ln in lines:
            if ln.startswith("event "):
                a = ln.split()[1]
                dumped[a] = dumped.get(a, 0) + 1
        self.assertEqual(dumped, counts)
        self.assertEqual(lines[-1], f"end {len(trace)}")
        segs = [s for s in snap["segments"] if s["device"] == 0]
        self.assertEqual(sum(ln.startswith("segment ") for ln in lines), len(segs))
        self.assertEqual(sum(ln.startswith("block ") for ln in lines),
                         sum(len(s["blocks"]) for s in segs))
        self.assertEqual(lines[1], f"source {name}")
        # every event line carries the entry's fields, in order
        evs = [ln.split() for ln in lines if ln.startswith("event ")]
        for e, f in zip(trace, evs):
            addr = e["device_free"] if e["action"] == "oom" else e["addr"]
            self.assertEqual(f, ["event", e["action"], str(addr), str(e["size"]),
                                 str(e["stream"])])

        # csv: rows match the summary and the trace
        rc, out, err = run("--format", "csv", TRACES / name)
        self.assertEqual(rc, 0, err)
        s = parse_summary(err)
        rows = [r.split(",") for r in out.splitlines()[1:]]
        n_alloc = sum(r[2] == "allocate" for r in rows)
        n_free = sum(r[2] == "free" for r in rows)
        self.assertEqual(len(rows), n_alloc + n_free)
        self.assertEqual(s["events read"], len(trace))
        self.assertEqual(s["allocations"], n_alloc)
        self.assertEqual(s["frees"], n_free)
        self.assertEqual(n_alloc, counts.get("alloc", 0))
        self.assertEqual(n_free + s["skipped frees of unknown addresses"],
                         counts.get("free_requested", 0))
        self.assertEqual(s["allocations never freed"], n_alloc - n_free)
        ever = {e["addr"] for e in trace if e["action"] in ("segment_alloc", "segment_map")}
        self.assertEqual(s["pre-existing segments"],
                         sum(1 for sg in segs if sg["address"] not in ever))
        # every free carries the size of its allocate
        live = {}
        for r in rows:
            if r[2] == "allocate":
                live[r[3]] = r[4]
            else:
                self.assertEqual(live.pop(r[3]), r[4])
        return s

    def test_cs336_ctx128_forward(self):
        s = self.check_trace("cs336-ctx128-forward.pickle")
        self.assertEqual(s["pre-existing segments"], 227)

    def test_cs336_ctx256_fullstep(self):
        s = self.check_trace("cs336-ctx256-fullstep.pickle")
        self.assertEqual(s["pre-existing segments"], 230)
        self.assertEqual(s["pre-existing segments freed during the trace"], 780)

    def test_eor_nn_snapshot(self):
        self.check_trace("eor-nn-snapshot.pickle")
        rc, out, err = run("--format", "dump", TRACES / "eor-nn-snapshot.pickle")
        self.assertEqual(out.splitlines()[3:7], [
            "setting max_split_size -1",
            "setting garbage_collection_threshold 0.0",
            "setting expandable_segments 0",
            "setting roundup_power2_divisions " + ZERO_DIVS])


if __name__ == "__main__":
    unittest.main()
