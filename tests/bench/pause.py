#!/usr/bin/env python3
"""Pause and resume of a process holding GIB GiB on a shared simulated device (8, or 2 with
--quick): tests/integration/ipc_peer under tessera's default allocates it in 1 GiB blocks, each
filled with its own byte; `tessera-stat pause` copies it to host memory and gives the device
its pages back; a second process on the same device reads cudaMemGetInfo before and after (what
the device got back); `tessera-stat resume` maps pages at the same addresses again and copies the
bytes back; every byte of every block is then checked at its old address.

The times are tessera's own (the process's answer: copying, unmapping, mapping), per GiB. Also
what the gate costs every launch, copy, memset, synchronise, allocation and free while nothing is
paused (tests/bench/gate_cost.c: an enter and a leave, CPU time, one thread and two at once). The
simulator's copies are host memcpy between a memfd and anonymous memory: their cost is this
machine's memory bandwidth, not a GPU's PCIe link (about 25 GB/s each way on an H100 with
pageable host memory at best).
Usage: pause.py BUILD_DIR OUT_PREFIX [--quick]
"""
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import uuid

args = sys.argv[1:]
build, out = args[0], args[1]
GIB = 2 if "--quick" in args else 8
peer = os.path.join(build, "tests", "integration", "ipc_peer")
gate_cost = os.path.join(build, "tests", "bench", "gate-cost")
stat = os.path.join(build, "tools", "tessera-stat")


class Peer:
    def __init__(self, env):
        self.p = subprocess.Popen([peer], env=env, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def ask(self, line, timeout=600):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        words = self.p.stdout.readline().split() if ready else []
        if not words:
            sys.exit(f"pause.py: no answer to {line!r}: {self.p.stderr.read()[-2000:]}")
        return words

    def quit(self):
        self.p.communicate("quit\n", timeout=600)


def act(verb, pid, d):
    t = time.monotonic()
    r = subprocess.run([stat, "--dir", d, verb, str(pid)], capture_output=True, text=True)
    wall = time.monotonic() - t
    if r.returncode != 0:
        sys.exit(f"pause.py: tessera-stat {verb}: {r.stdout}{r.stderr}")
    ms = float(re.search(r" in ([0-9.]+) ms", r.stdout).group(1))
    return r.stdout.strip(), ms, wall


name = "bench-pause-" + uuid.uuid4().hex[:12]
with tempfile.TemporaryDirectory(prefix="tessera-bench-") as d:
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "tests", "sim"),
               TESSERA_SIM_MEMORY=f"{GIB + 1}G", TESSERA_SIM_SHARED=name,
               TESSERA_STATS_DIR=d, TESSERA_ALLOC_CONF="",
               LD_PRELOAD=os.path.join(build, "shim", "libtessera.so"))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    try:
        a, b = Peer(env), Peer(env)
        blocks = []
        for i in range(GIB):
            got = a.ask(f"alloc {1 << 30}")
            if got[0] != "ok":
                sys.exit(f"pause.py: allocation {i} failed: {got}")
            idx = int(got[1])
            if a.ask(f"fill {idx} {i + 1:#x}") != ["fill", "cudaSuccess"]:
                sys.exit("pause.py: fill failed")
            blocks.append((idx, a.ask(f"addr {idx}")[1]))
        free_before = int(b.ask("meminfo")[1])
        paused, pause_ms, pause_wall = act("pause", a.p.pid, d)
        free_after = int(b.ask("meminfo")[1])
        resumed, resume_ms, resume_wall = act("resume", a.p.pid, d)
        intact = sum(a.ask(f"check {idx} {i + 1:#x}") == ["check", "1"]
                     for i, (idx, _) in enumerate(blocks))
        same = sum(a.ask(f"addr {idx}")[1] == addr for idx, addr in blocks)
        j = json.loads(subprocess.run([stat, "--dir", d, "--json", str(a.p.pid)],
                                      capture_output=True, text=True).stdout)
        a.quit()
        b.quit()
    finally:
        try:
            os.unlink(f"/dev/shm/tessera-sim.{name}")
        except FileNotFoundError:
            pass

# RESULT threads=1 ns_per_call=X threads=2 ns_per_call_each=Y
words = subprocess.run([gate_cost, "2", "20000000"], capture_output=True, text=True,
                       check=True).stdout.split()
gate = {"alone_ns": float(words[2].split("=")[1]), "two_threads_ns": float(words[4].split("=")[1])}
held = GIB << 30
given = free_after - free_before
report = {"gib": GIB, "given_bytes": given, "held_bytes": held, "given_share": given / held,
          "pause_ms": pause_ms, "resume_ms": resume_ms, "pause_ms_per_gib": pause_ms / GIB,
          "resume_ms_per_gib": resume_ms / GIB, "pause_wall_s": pause_wall,
          "resume_wall_s": resume_wall, "blocks_intact": intact, "blocks_same_address": same,
          "blocks": GIB, "gate": gate, "stats": j}
md = [f"One process holding {GIB} GiB live (tessera's default, {GIB} blocks of 1 GiB, each "
      "filled with its own byte) on a shared simulated device; a second process reads "
      "cudaMemGetInfo before and after the pause.", "",
      "| | value |", "|---|---:|",
      f"| device memory the pause gave back | {given / 2**30:.3f} GiB of {GIB} GiB held "
      f"({100 * given / held:.2f}%) |",
      f"| pause: copy to host, unmap, release | {pause_ms:.0f} ms ({pause_ms / GIB:.0f} ms per GiB) |",
      f"| resume: create, map, copy back | {resume_ms:.0f} ms ({resume_ms / GIB:.0f} ms per GiB) |",
      f"| blocks read back intact after the resume | {intact} of {GIB} |",
      f"| blocks at the same address | {same} of {GIB} |",
      f"| the gate, per launch, copy, memset, synchronise, allocation or free, nothing paused "
      f"| {gate['alone_ns']:.1f} ns (two threads at once: {gate['two_threads_ns']:.1f} ns each) |",
      "",
      "The simulator's copies are host memcpy (this machine's memory bandwidth), not a GPU's "
      "PCIe link."]
with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
if intact != GIB or same != GIB or given < 0.99 * held:
    sys.exit("pause.py: a target was missed")
