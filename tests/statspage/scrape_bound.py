#!/usr/bin/env python3
"""The work of one listing (tessera-stat --prometheus, and a scrape of --serve) with 500 pages in
the directory: genuine pages (500 processes of one user, one slot each) and hostile ones (500
processes of another user whose pages have 16 slots in use each, always mid-write or readable),
with one genuine page beside the hostile ones. Prints wall time, body size and peak memory.

Usage (as root: the hostile processes run as nobody):  scrape_bound.py BUILD_DIR [RUNS]
Numbers are in docs/BENCHMARKS.md ("Bounded work per scrape").
"""
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HEADER, SLOT, N = 4096, 94208, 500
NOBODY = 65534


def start_ticks(pid):
    text = open(f"/proc/{pid}/stat").read()
    return int(text[text.rindex(")") + 2:].split()[19])


def real_page(build, d):
    env = dict(os.environ, LD_PRELOAD=os.path.join(build, "shim", "libtessera.so"),
               TESSERA_STATS_DIR=d, TESSERA_STATS_KEEP="1", TESSERA_SIM_MEMORY="512M",
               LD_LIBRARY_PATH=os.path.join(build, "tests", "sim"))
    subprocess.run([os.path.join(build, "tests", "programs", "meminfo"), "--unit", "4M"], env=env,
                   check=True, capture_output=True)
    name = [f for f in os.listdir(d) if f.startswith("tessera.")][0]
    data = open(os.path.join(d, name), "rb").read()
    os.unlink(os.path.join(d, name))
    return data


def write_page(path, page, pid, slots=1, busy=False, uid=0):
    hdr = bytearray(page[:HEADER])
    struct.pack_into("<iIQ", hdr, 32, pid, 0, start_ticks(pid))
    struct.pack_into("<IQ", hdr, 20, max(slots, 16), HEADER + max(slots, 16) * SLOT)
    head = bytearray(page[HEADER:HEADER + 2240])
    with open(path, "wb") as f:
        f.write(hdr)
        for i in range(slots):
            struct.pack_into("<i", head, 4, i)
            if busy:
                struct.pack_into("<Q", head, 16, 1)
            f.seek(HEADER + i * SLOT)
            f.write(head)
        f.truncate(HEADER + max(slots, 16) * SLOT)
    os.chown(path, uid, uid)
    os.chmod(path, 0o644)


def listing(stat, d, runs):
    times, size, rss = [], 0, 0
    for _ in range(runs):
        t0 = time.monotonic()
        p = subprocess.Popen([stat, "--dir", d, "--prometheus"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        out = p.stdout.read()
        _, _, ru = os.wait4(p.pid, 0)
        times.append(time.monotonic() - t0)
        size, rss = len(out), max(rss, ru.ru_maxrss)
    return times, size, rss, out.decode(errors="replace")


def scrape(stat, d, runs):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([stat, "--dir", d, "--serve", f"127.0.0.1:{port}"],
                         stderr=subprocess.DEVNULL)
    times = []
    try:
        time.sleep(0.5)
        for _ in range(runs):
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
                c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                while c.recv(1 << 20):
                    pass
            times.append(time.monotonic() - t0)
    finally:
        p.terminate()
        p.wait()
    return times


def main():
    build = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    stat = os.path.join(build, "tools", "tessera-stat")
    tmp = tempfile.mkdtemp(prefix="scrape-bound-")
    os.chmod(tmp, 0o1777)
    procs = []
    try:
        page = real_page(build, tmp)
        mine = subprocess.Popen(["sleep", "600"])
        procs.append(mine)
        for name, uid, slots, busy in (("500 genuine pages (one user, 1 slot each)", 0, 1, False),
                                       ("500 hostile pages, 16 busy slots each", NOBODY, 16, True),
                                       ("500 hostile pages, 16 readable slots each", NOBODY, 16, False)):
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
            batch = [subprocess.Popen(["sleep", "600"], user=uid, group=uid) for _ in range(N)]
            procs += batch
            for p in batch:
                write_page(os.path.join(tmp, f"tessera.{p.pid}"), page, p.pid, slots, busy, uid)
            if uid:
                write_page(os.path.join(tmp, f"tessera.{mine.pid}"), page, mine.pid)
            t, size, rss, out = listing(stat, tmp, runs)
            st = scrape(stat, tmp, runs)
            live = [l for l in out.splitlines() if l.startswith('tessera_pages{state="live"}')]
            skipped = [l for l in out.splitlines() if l.startswith('tessera_pages{state="skipped"}')]
            exported = ('pid="%d"' % mine.pid) in out
            print(f"{name}:")
            print(f"  --prometheus: median {statistics.median(t):.3f} s, max {max(t):.3f} s; "
                  f"body {size / 1e6:.2f} MB; peak RSS {rss / 1024:.1f} MiB; "
                  f"{live[0].split()[-1]} live, {skipped[0].split()[-1]} skipped"
                  + (f"; the genuine page exported: {exported}" if uid else ""))
            print(f"  --serve scrape: median {statistics.median(st):.3f} s, max {max(st):.3f} s")
            for p in batch:
                p.kill()
                p.wait()
            procs = [mine]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
