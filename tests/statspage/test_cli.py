#!/usr/bin/env python3
"""tessera-stat against pages with known contents (tests/statspage/fixture.c).

usage: test_cli.py TESSERA_STAT FIXTURE SOURCE_ROOT [--prometheus-only]

Checks real values in every output: table, per-process detail, JSON (parsed), Prometheus (a
strict parser here, and promtool in the 'prometheus' mode: exit 77 when promtool is absent),
the segment map of a known layout, stale pages and --gc, pid reuse, damaged pages, --watch.
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import fixture_server

STAT, FIXTURE, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
PROM_ONLY = "--prometheus-only" in sys.argv
MiB = 1 << 20
failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, env_dir=None, timeout=20):
    env = dict(os.environ)
    if env_dir is not None:
        env["TESSERA_STATS_DIR"] = env_dir
    p = subprocess.run([STAT, *args], capture_output=True, text=True, env=env, timeout=timeout,
                       errors="replace")
    return p.returncode, p.stdout, p.stderr


# ---- the counter names, straight from the X-macros ----
def xmacro_names():
    text = open(os.path.join(SRC, "include/tessera/stats_fields.h")).read()

    def block(macro):
        m = re.search(r"#define %s\(X\)(.*?)\n\n" % macro, text, re.S)
        return re.findall(r"X\((\w+),", m.group(1))
    keys = []
    for n in block("TESSERA_STAT_ARRAYS"):
        for pool in ("all", "small_pool", "large_pool"):
            for sub in ("current", "peak", "allocated", "freed"):
                keys.append("%s.%s.%s" % (n, pool, sub))
    for n in block("TESSERA_STAT_SINGLES"):
        for sub in ("current", "peak", "allocated", "freed"):
            keys.append("%s.%s" % (n, sub))
    keys += block("TESSERA_COUNTERS") + block("TESSERA_GAUGES")
    for n in block("TESSERA_HOST_STATS"):
        for sub in ("current", "peak", "allocated", "freed"):
            keys.append("%s.%s" % (n, sub))
    keys += block("TESSERA_HOST_COUNTERS")
    counters = block("TESSERA_COUNTERS") + block("TESSERA_HOST_COUNTERS")
    return keys, counters, block("TESSERA_GAUGES")


KEYS, COUNTERS, GAUGES = xmacro_names()

# ---- the known contents of the fixture (slot 0: device 0, slot 1: device 1) ----
KNOWN0 = {
    "allocated_bytes.small_pool.current": 1 * MiB,
    "allocated_bytes.large_pool.current": 768 * MiB,
    "allocated_bytes.all.current": 769 * MiB,
    "allocated_bytes.all.peak": 900 * MiB,
    "allocated_bytes.large_pool.allocated": 768 * MiB + 1000,
    "allocated_bytes.all.freed": 1100,
    "reserved_bytes.all.current": 1026 * MiB,
    "reserved_bytes.large_pool.peak": 1198 * MiB,
    "allocation.all.current": 43,
    "segment.large_pool.current": 9,
    "oversize_allocations.current": 2,
    "oversize_allocations.freed": 7,
    "num_alloc_retries": 3,
    "num_ooms": 1,
    "num_ops": 12345,
    "num_alloc_calls": 7000,
    "max_split_size": -1,
    "largest_free_block_bytes": 16 * MiB,
    "device_total_bytes": 80 * 1024 * MiB,
    "num_device_free": 0,
}
KNOWN1 = {"allocated_bytes.all.current": 100 * MiB, "reserved_bytes.all.current": 100 * MiB,
          "num_ops": 77, "max_split_size": 256 * MiB, "num_ooms": 0}


def Server(d, *extra):
    """A fixture process publishing the known page."""
    return fixture_server.Server(FIXTURE, d, *extra)


def forge(d, kind, pid):
    env = dict(os.environ, TESSERA_STATS_DIR=d)
    subprocess.run([FIXTURE, "forge", kind, str(pid)], check=True, env=env)


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---- a strict reader of the Prometheus text format (version 0.0.4) ----
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")


def parse_labels(s):
    labels, i = {}, 0
    while i < len(s):
        m = re.match(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", s[i:])
        if not m:
            raise ValueError("bad label at %r" % s[i:])
        name = m.group(1)
        i += m.end()
        val = []
        while True:
            if i >= len(s):
                raise ValueError("unterminated label value")
            c = s[i]
            if c == "\\":
                nxt = s[i + 1]
                if nxt not in "\\\"n":
                    raise ValueError("bad escape \\%s" % nxt)
                val.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ValueError("raw newline in a label value")
            else:
                val.append(c)
                i += 1
        if name in labels:
            raise ValueError("label %s twice" % name)
        labels[name] = "".join(val)
        if i < len(s):
            if s[i] != ",":
                raise ValueError("expected , at %r" % s[i:])
            i += 1
    return labels


def strict_prometheus(text):
    """Returns {family: {"type":..., "help":..., "samples": [(labels, value)]}}; raises."""
    fams, order, cur = {}, [], None
    seen_series = set()
    if not text.endswith("\n"):
        raise ValueError("no final newline")
    for ln, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            if not NAME.match(name) or name in fams:
                raise ValueError("line %d: HELP for %s again or bad name" % (ln, name))
            if re.search(r"\\[^\\n]", help_):
                raise ValueError("line %d: bad escape in HELP" % ln)
            fams[name] = {"help": help_, "type": None, "samples": []}
            order.append(name)
            cur = name
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            if name != cur or fams[name]["type"] is not None or fams[name]["samples"]:
                raise ValueError("line %d: TYPE of %s out of place" % (ln, name))
            if typ not in ("counter", "gauge"):
                raise ValueError("line %d: type %s" % (ln, typ))
            fams[name]["type"] = typ
        elif line.startswith("#") or not line.strip():
            raise ValueError("line %d: unexpected %r" % (ln, line))
        else:
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
            if not m:
                raise ValueError("line %d: bad sample %r" % (ln, line))
            name, labels = m.group(1), parse_labels(m.group(3) or "")
            if name != cur or fams[name]["type"] is None:
                raise ValueError("line %d: sample of %s outside its family" % (ln, name))
            v = m.group(4)
            value = float(v)  # raises on garbage; allows NaN/+Inf spellings float() knows
            key = (name, tuple(sorted(labels.items())))
            if key in seen_series:
                raise ValueError("line %d: duplicate series %s" % (ln, key))
            seen_series.add(key)
            fams[name]["samples"].append((labels, value))
    for name in order:
        f = fams[name]
        if not name.startswith("tessera_"):
            raise ValueError("%s lacks the tessera_ prefix" % name)
        if f["type"] == "counter" and not name.endswith("_total"):
            raise ValueError("counter %s must end in _total" % name)
        if f["type"] == "gauge" and name.endswith("_total"):
            raise ValueError("gauge %s ends in _total" % name)
        if not f["help"]:
            raise ValueError("%s has no help" % name)
    return fams


def sample(fams, name, **labels):
    got = [v for (l, v) in fams[name]["samples"] if all(l.get(k) == w for k, w in labels.items())]
    return got[0] if len(got) == 1 else got


# ======================================================================================

def test_prometheus(d, a, sleeper):
    rc, out, err = run("--prometheus", env_dir=d)
    check(rc == 0, "prometheus rc %d: %s" % (rc, err))
    try:
        fams = strict_prometheus(out)
    except ValueError as e:
        check(False, "strict Prometheus format: %s" % e)
        return
    pa = str(a.pid)
    check(sample(fams, "tessera_allocated_bytes", pid=pa, device="0", pool="all") == 769 * MiB,
          "tessera_allocated_bytes all")
    check(sample(fams, "tessera_allocated_bytes", pid=pa, device="0", pool="small_pool") == MiB,
          "tessera_allocated_bytes small")
    check(sample(fams, "tessera_allocated_peak_bytes", pid=pa, device="0", pool="all") == 900 * MiB,
          "tessera_allocated_peak_bytes")
    check(sample(fams, "tessera_reserved_peak_bytes", pid=pa, device="0", pool="large_pool")
          == 1198 * MiB, "tessera_reserved_peak_bytes large")
    check(sample(fams, "tessera_allocated_allocated_bytes_total", pid=pa, device="0",
                 pool="large_pool") == 768 * MiB + 1000, "allocated_total")
    check(fams["tessera_allocated_allocated_bytes_total"]["type"] == "counter", "counter type")
    check(fams["tessera_allocated_bytes"]["type"] == "gauge", "gauge type")
    check(sample(fams, "tessera_alloc_retries_total", pid=pa, device="0") == 3, "retries")
    check(sample(fams, "tessera_ooms_total", pid=pa, device="0") == 1, "ooms")
    check(sample(fams, "tessera_ops_total", pid=pa, device="1") == 77, "ops device 1")
    check(sample(fams, "tessera_max_split_size_bytes", pid=pa, device="0") == -1, "max_split_size")
    check(sample(fams, "tessera_max_split_size_bytes", pid=pa, device="1") == 256 * MiB,
          "max_split_size 1")
    check(sample(fams, "tessera_largest_free_block_bytes", pid=pa, device="0") == 16 * MiB,
          "largest free")
    check(sample(fams, "tessera_oversize_allocations_peak", pid=pa, device="0") == 4, "oversize")
    check(abs(sample(fams, "tessera_utilization_ratio", pid=pa, device="0") - 0.75) < 1e-9,
          "utilization_ratio 900/1200")
    check(sample(fams, "tessera_utilization_ratio", pid=pa, device="1") == 1.0, "utilization 1")
    # how far above the floor: peak reserved 1200 MiB, peak allocated 900 MiB
    check(sample(fams, "tessera_peak_reserved_above_allocated_bytes", pid=pa, device="0")
          == 300 * MiB, "above the floor, bytes")
    check(abs(sample(fams, "tessera_peak_reserved_above_allocated_ratio", pid=pa, device="0")
              - 1 / 3) < 1e-6, "above the floor, ratio")
    check(sample(fams, "tessera_peak_reserved_above_allocated_ratio", pid=pa, device="1") == 0,
          "above the floor, device 1")
    # every counter and gauge of the X-macros has its family, and pool labels where they belong
    for c in COUNTERS:
        check("tessera_%s_total" % re.sub(r"^num_", "", c) in fams, "family for %s" % c)
    for g in GAUGES:
        name = "tessera_" + g + ("" if g.endswith("_bytes") or g == "num_ops" else "_bytes")
        check(name in fams, "family %s" % name)
    pools = {l.get("pool") for (l, v) in fams["tessera_reserved_bytes"]["samples"]}
    check(pools == {"all", "small_pool", "large_pool"}, "pools %s" % pools)
    check(all("pool" not in l for (l, v) in fams["tessera_ooms_total"]["samples"]), "no pool on counters")
    # labels: command escaped (the serve tag holds a quote and a backslash)
    labels = [l for (l, v) in fams["tessera_allocated_bytes"]["samples"] if l["pid"] == pa][0]
    check(labels["command"].endswith('serve --tag a"b\\c'), "command label %r" % labels["command"])
    check('command="' in out and 'a\\"b\\\\c' in out, "escaped command in the text")
    info = sample(fams, "tessera_page_info", pid=pa)
    check(info == 1, "page_info")
    il = [l for (l, v) in fams["tessera_page_info"]["samples"] if l["pid"] == pa][0]
    check(il["version"] == "0.1.0" and il["config"].startswith("max_split_size:unlimited"),
          "page_info labels %s" % il)
    # a forged command with a newline, a quote and a backslash
    nl = [l for (l, v) in fams["tessera_page_info"]["samples"] if l["pid"] == str(sleeper)]
    check(nl and nl[0]["command"] == 'evil "quoted" back\\slash\nnext line??[2J',
          "newline command %r" % (nl[0]["command"] if nl else None))
    check('evil \\"quoted\\" back\\\\slash\\nnext line??[2J' in out, "newline escaped in text")
    check("\x01" not in out and "\x1b" not in out, "no control byte in the Prometheus text")
    check(sample(fams, "tessera_pages", state="live") == 3, "pages live")

    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=out, capture_output=True,
                           text=True)
        check(p.returncode == 0, "promtool: %s %s" % (p.stdout, p.stderr))
        # the empty case too
        empty = tempfile.mkdtemp(prefix="tessera-cli-empty-")
        rc, out2, _ = run("--prometheus", env_dir=empty)
        p = subprocess.run(["promtool", "check", "metrics"], input=out2, capture_output=True,
                           text=True)
        check(rc == 0 and p.returncode == 0, "promtool on no pages: %s" % p.stdout)
        strict_prometheus(out2)
        os.rmdir(empty)


def main():
    if PROM_ONLY and not shutil.which("promtool"):
        print("promtool not found: skipping")
        return 77
    d = tempfile.mkdtemp(prefix="tessera-cli-")
    servers = []
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # ---- empty directory ----
        rc, out, err = run(env_dir=d)
        check(rc == 0 and out.startswith("no tessera processes"), "empty table: %r" % out)
        rc, out, err = run("--json", env_dir=d)
        check(rc == 0 and json.loads(out) == {}, "empty json %r" % out)
        rc, out, err = run("--gc", env_dir=d)
        check(rc == 0 and "no stale pages" in out, "empty gc %r" % out)

        a = Server(d, "--tag", 'a"b\\c')
        b = Server(d)
        servers += [a, b]
        forge(d, "newline-command", sleeper.pid)

        if PROM_ONLY:
            test_prometheus(d, a, sleeper.pid)
            return 0

        # ---- table ----
        rc, out, err = run(env_dir=d)
        check(rc == 0, "table rc")
        rows = [l.split() for l in out.splitlines() if l.split() and l.split()[0] == str(a.pid)]
        check(len(rows) == 2, "two rows for pid a: %s" % out)
        if len(rows) == 2:
            r0 = " ".join(rows[0])
            # FRAG: the fixture records no holes (inactive_split_bytes 0): its 257 MiB of free
            # cache can serve one request whole
            # ABOVE FLOOR: peak reserved 1200 MiB over peak allocated 900 MiB
            check("769.00 MiB 1.00 GiB 257.00 MiB 0.0% +33.3% 3 1" in r0, "row device 0: %s" % r0)
            r1 = " ".join(rows[1])
            check(" 1 100.00 MiB 100.00 MiB 0 B 0.0% +0.0% 0 0" in r1, "row device 1: %s" % r1)
        check(out.splitlines()[0].split() == ["PID", "COMMAND", "DEVICE", "ALLOCATED", "RESERVED",
                                              "UNALLOCATED", "FRAG", "ABOVE", "FLOOR", "RETRIES",
                                              "OOMS"], "header")
        check("ABOVE FLOOR: how far peak reserved was above peak allocated" in out, "floor note")
        check(str(b.pid) in out and str(sleeper.pid) in out, "all live pids listed")
        check("stale" not in out and "unreadable" not in out, "nothing stale yet")
        rc2, out2, _ = run("--dir", d, env_dir="/nonexistent")
        check(rc2 == 0 and out2 == out, "--dir equals TESSERA_STATS_DIR")

        # ---- detail ----
        rc, out, err = run(str(a.pid), env_dir=d)
        check(rc == 0, "detail rc %d %s" % (rc, err))
        vals = {}
        for line in out.splitlines():
            f = line.split()
            if len(f) == 2 and line.startswith("  "):
                vals.setdefault(f[0], []).append(int(f[1]))
        for k in KEYS:
            check(k in vals and len(vals[k]) == 2, "detail shows %s for both devices" % k)
        for k, v in KNOWN0.items():
            check(vals.get(k, [None])[0] == v, "detail %s = %s, want %s" % (k, vals.get(k), v))
        for k, v in KNOWN1.items():
            check(vals.get(k, [None, None])[1] == v, "detail device 1 %s" % k)
        check("command   %s serve --tag a\"b\\c" % FIXTURE in out, "detail command")
        check("config    max_split_size:unlimited,expandable_segments:True,stats:True" in out,
              "detail config")
        check(re.search(r"tessera   0\.1\.0 \(page layout 3, created \d{4}-", out) is not None,
              "detail version")
        check(re.search(r"started   \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(start time \d+ ticks", out)
              is not None, "detail start time")
        check("(live: process %d is running)" % a.pid in out, "detail liveness")
        check("device 0  context 0x1000  slot 0" in out and "device 1  context 0x2000  slot 1" in out,
              "detail slots")
        check("segment map: 4 segments, 10 blocks, taken at op 12345" in out, "detail map line")
        check("peak reserved above peak allocated (the floor): %d bytes, +33.3%%" % (300 * MiB)
              in out, "detail floor line")

        # ---- JSON ----
        rc, out, err = run("--json", env_dir=d)
        check(rc == 0, "json rc")
        data = json.loads(out)
        check(set(data) == {str(a.pid), str(b.pid), str(sleeper.pid)}, "json pids %s" % list(data))
        ja = data[str(a.pid)]
        check(ja["stale"] is False and ja["state"] == "live", "json stale flag")
        check(ja["command"] == '%s serve --tag a"b\\c' % FIXTURE, "json command %r" % ja["command"])
        check(ja["config"] == "max_split_size:unlimited,expandable_segments:True,stats:True",
              "json config")
        check(ja["version"] == "0.1.0", "json version")
        check(set(k for k in ja if k.isdigit()) == {"0", "1"}, "json devices")
        for dev, known in (("0", KNOWN0), ("1", KNOWN1)):
            for k in KEYS:
                check(k in ja[dev], "json %s has %s" % (dev, k))
            for k, v in known.items():
                check(ja[dev].get(k) == v, "json %s %s = %s want %s" % (dev, k, ja[dev].get(k), v))
        check(ja["0"]["segment_map"]["largest_free_block"] == 16 * MiB, "json map summary")
        check((ja["0"]["peak_reserved_above_allocated_bytes"],
               round(ja["0"]["peak_reserved_above_allocated_percent"], 3)) == (300 * MiB, 33.333),
              "json above the floor")
        check(data[str(sleeper.pid)]["command"] == 'evil "quoted" back\\slash\nnext line\x01\x1b[2J',
              "json escapes a newline command")
        rc, out, err = run("--json", str(b.pid), env_dir=d)
        one = json.loads(out)
        check(rc == 0 and list(one) == [str(b.pid)], "json one pid")

        test_prometheus(d, a, sleeper.pid)

        # ---- map ----
        rc, out, err = run("map", str(a.pid), env_dir=d)
        check(rc == 0, "map rc %s" % err)
        bars = re.findall(r"\|([^|]*)\|", out)
        check(bars == ["XXXXXXXX----ppXXXXXX", "X-", "X" * 32 + "-" * 16 + "." * 16, "s" * 8],
              "map bars %s" % bars)
        check("scale: 1 character = 1.00 MiB" in out, "map scale")
        check("legend: X allocated  p pending free  - free  . unmapped (address space, no memory)"
              "  s stitched" in out, "legend")
        check("\n        ~ unmapped range too long to draw at this scale: its size follows the bar\n"
              in out, "legend ~")
        # the 16 MiB unmapped tail fits the bar at the mapped scale: drawn with dots, not collapsed
        check(re.search(r"2  0x7f0010000000\s+64\.00 MiB  expandable large \|[^|]*\|  "
                        r"48\.00 MiB mapped, 16\.00 MiB unmapped\n", out) is not None,
              "map expandable line: %s" % out)
        check(re.search(r"0  0x7f0000000000\s+20\.00 MiB  plain\s+large", out) is not None,
              "map segment line")
        check(re.search(r"3  0x7f0020000000\s+8\.00 MiB  stitched\s+large", out) is not None,
              "map stitched line")
        check("largest free block 16.00 MiB: a request above it needs a new segment although "
              "21.00 MiB are free in 3 pieces" in out, "map sentence: %s" % out)
        # reserved: mapped memory but the stitched range's 8 MiB (pages of the other segments)
        check("reserved 70.00 MiB (mapped memory: what reserved_bytes counts) in 4 segments of "
              "94.00 MiB address space: allocated 55.00 MiB, pending free 2.00 MiB, free 21.00 "
              "MiB in 3 blocks, unmapped 16.00 MiB" in out, "map totals: %s" % out)
        check("segments: 2 plain, 1 expandable, 1 stitched; segment.all.current counts the plain "
              "ones only" in out, "map segment kinds")
        check("no segment map published yet" in out, "device 1 has no map")
        rc, out, err = run("map", str(a.pid), "--device", "0", "--width", "32", env_dir=d)
        bars = re.findall(r"\|([^|]*)\|", out)
        check(rc == 0 and bars[:2] == ["XXXX--pXXX", "X"] and "1 character = 2.00 MiB" in out,
              "map width 32: %s" % bars)
        rc, out, err = run("map", str(a.pid), "--device", "5", env_dir=d)
        check(rc == 1 and "no slot for device 5" in err, "map missing device")
        forge(d, "truncated-map", sleeper.pid)
        rc, out, err = run("map", str(sleeper.pid), "--device", "0", env_dir=d)
        check(rc == 0 and "map truncated: 4 of 7 segments and 10 of 20 blocks recorded" in out
              and "3 more segments not recorded" in out, "truncated map: %s" % out)

        # ---- damaged pages: message and non-zero exit ----
        damaged = {
            "corrupt": "corrupt: total size",
            "truncated": "truncated: 1000 bytes, the header alone needs 4096",
            "foreign": "not a tessera stats page (magic 0x",
            "newer": "written by a newer tessera (layout 99, this reader understands up to 3)",
            "notready": "not published yet (magic is 0)",
        }
        for kind, msg in damaged.items():
            forge(d, kind, sleeper.pid)
            for args in ([str(sleeper.pid)], ["--json", str(sleeper.pid)], ["map", str(sleeper.pid)]):
                rc, out, err = run(*args, env_dir=d)
                check(rc == 1 and msg in err and "tessera.%d" % sleeper.pid in err,
                      "%s via %s: rc %d err %r" % (kind, args, rc, err))
            rc, out, err = run(env_dir=d)
            check(rc == 0 and "unreadable pages:" in out and msg in out,
                  "%s listed as unreadable: %s" % (kind, out))
            check(str(a.pid) in out, "%s: the other pages are still listed" % kind)
            rc, out, err = run("--prometheus", env_dir=d)
            check(rc == 0 and 'tessera_pages{state="unreadable"} 1' in out and msg in err,
                  "%s in prometheus: %s" % (kind, err))
            rc, out, err = run("--gc", env_dir=d)
            check(os.path.exists(os.path.join(d, "tessera.%d" % sleeper.pid)),
                  "%s page of a live pid survives --gc" % kind)
        # ---- a layout 2 page (the tessera before lending) still reads, without the new fields ----
        forge(d, "layout2", sleeper.pid)
        rc, out, err = run("--json", str(sleeper.pid), env_dir=d)
        doc = json.loads(out)[str(sleeper.pid)] if rc == 0 else {}
        dev0 = doc.get("0", {}) if isinstance(doc, dict) else {}
        check(rc == 0 and "num_ooms" in dev0 and "num_lend_asks" not in dev0,
              "layout 2 page: rc %d %r %r" % (rc, err, sorted(dev0)[:5]))
        forge(d, "corrupt-slot", sleeper.pid)
        rc, out, err = run(str(sleeper.pid), env_dir=d)
        check(rc == 1 and "slot 1: corrupt: slot state 9" in err and "device 0" in out,
              "corrupt slot: rc %d %r" % (rc, err))
        forge(d, "corrupt-map", sleeper.pid)
        rc, out, err = run("map", str(sleeper.pid), env_dir=d)
        check(rc == 1 and "checksum mismatch" in err, "corrupt map: %r" % err)
        rc, out, err = run("12345678", env_dir=d)
        check(rc == 1 and "no stats page for pid 12345678" in err, "missing pid")
        forge(d, "valid", sleeper.pid)

        # ---- stale pages: SIGKILL, pid reuse, reboot, newer layout of a dead process ----
        c = Server(d)
        os.kill(c.pid, signal.SIGKILL)
        c.p.wait()
        check(os.path.exists(c.path), "a killed writer leaves its page")
        reused = subprocess.Popen(["sleep", "60"])
        forge(d, "reused", reused.pid)
        rebooted = subprocess.Popen(["sleep", "60"])
        forge(d, "rebooted", rebooted.pid)
        gone = dead_pid()
        forge(d, "newer", gone)
        rc, out, err = run(env_dir=d)
        stale_part = out.split("stale pages")[1] if "stale pages" in out else ""
        check(rc == 0 and "`tessera-stat --gc`" in out, "stale hint: %s" % out)
        check(re.search(r"%d\s+stale .*process %d is gone" % (c.pid, c.pid), stale_part),
              "killed writer listed stale: %s" % out)
        check(re.search(r"%d\s+stale .*now belongs to another process" % reused.pid, stale_part),
              "pid reuse listed stale")
        check(re.search(r"%d\s+stale .*reboot" % rebooted.pid, stale_part), "reboot listed stale")
        check(re.search(r"%d\s+stale" % gone, stale_part), "newer layout of a dead pid is stale")
        # a readable stale page still shows the last numbers its process published, marked
        exited = [l for l in stale_part.splitlines()
                  if l.split()[:1] == [str(c.pid)] and "exited" in l]
        check(len(exited) == 2 and "769.00 MiB 1.00 GiB 257.00 MiB 0.0% +33.3% 3 1 exited"
              in " ".join(exited[0].split()), "stale page's last numbers: %s" % out)
        live_part = out.split("stale pages")[0]
        check(str(a.pid) in live_part and str(c.pid) not in live_part, "live part")
        rc, out, err = run(str(c.pid), env_dir=d)
        check(rc == 0 and "(STALE: process %d is gone)" % c.pid in out, "detail of stale page")
        rc, out, err = run("--json", env_dir=d)
        data = json.loads(out)
        check(data[str(c.pid)]["stale"] is True and data[str(a.pid)]["stale"] is False,
              "json stale flags")
        check(data[str(reused.pid)]["stale"] is True, "json reuse stale")
        rc, out, err = run("--prometheus", env_dir=d)
        check('pid="%d"' % c.pid not in out and 'tessera_pages{state="stale"} 4' in out,
              "stale pages are not exported as metrics")
        rc, out, err = run("--gc", env_dir=d)
        check(rc == 0, "gc rc %d %s" % (rc, out))
        for pid in (c.pid, reused.pid, rebooted.pid, gone):
            check("removed %s/tessera.%d" % (d, pid) in out, "gc removed %d: %s" % (pid, out))
            check(not os.path.exists(os.path.join(d, "tessera.%d" % pid)), "gone: %d" % pid)
        check("removed 4 stale pages" in out, "gc count")
        for s in (a, b):
            check(os.path.exists(s.path), "live page survives --gc")
        check(os.path.exists(os.path.join(d, "tessera.%d" % sleeper.pid)), "live forged page survives")
        rc, out, err = run("--gc", env_dir=d)
        check("no stale pages" in out, "second gc")
        for p in (reused, rebooted):
            p.kill()
            p.wait()

        # ---- watch ----
        rc, out, err = run("--watch", "0.1", "--count", "3", env_dir=d)
        check(rc == 0 and out.count("PID      COMMAND") == 3 and out.count("every 0.1s") == 3,
              "watch count 3: %s" % out[:200])
        env = dict(os.environ, TESSERA_STATS_DIR=d)
        w = subprocess.Popen([STAT, "--watch", "0.2"], stdout=subprocess.PIPE, env=env, text=True)
        first = w.stdout.readline()  # the first table is drawn (flushed each time): then Ctrl-C
        w.send_signal(signal.SIGINT)
        try:
            wout = first + w.stdout.read()  # to its end: it stopped
            w.wait(timeout=60)  # a hang guard
            check(w.returncode == 0 and "PID" in wout, "watch stops on SIGINT (rc %s)" % w.returncode)
        except subprocess.TimeoutExpired:
            w.kill()
            check(False, "watch did not stop on SIGINT")

        # ---- a writer that exits normally removes its page ----
        b.stop()
        check(not os.path.exists(b.path), "closed page removed")

        # ---- usage ----
        rc, out, err = run("--help")
        check(rc == 0 and "usage:" in out and "--prometheus" in out, "help")
        rc, out, err = run("--version")
        check(rc == 0 and out.strip() == "tessera-stat 0.1.0 (stats page layout 3)", "version %r" % out)
        for args in (["--bogus"], ["notapid"], ["1", "2"], ["--prometheus", "5"], ["map"],
                     ["--watch", "0"], ["--watch", "x"], ["--count", "2"], ["--device", "1"],
                     ["map", "1", "--width", "3"], ["--json", "--prometheus"]):
            rc, out, err = run(*args, env_dir=d)
            check(rc == 2 and err, "usage error for %s: rc %d" % (args, rc))
        rc, out, err = run(env_dir="/nonexistent/dir")
        check(rc == 1 and "cannot read /nonexistent/dir" in err, "missing directory")
    finally:
        for s in servers:
            try:
                s.stop()
            except Exception:
                s.p.kill()
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(d, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    rc = main()
    if rc == 0:
        print("all %d checks passed" % checks[0])
    elif rc == 1:
        print("%d checks failed" % len(failures), file=sys.stderr)
    sys.exit(rc)
