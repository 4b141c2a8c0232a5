#!/usr/bin/env python3
"""What a training loop pays to log tessera's numbers every step, side by side in one run: a
Python process under `tessera run --sim` (tessera serving its cudaMalloc through the preload)
reads its own counters with tessera.stats() (one call; one call and three keys; one call and
to_dict()), another process's with tessera.stats(pid), and, as a script had to before the module,
by running `tessera-stat --json PID` and parsing its output. Microseconds per call, CPU and wall
time (the CPU time of the calling process; for tessera-stat, only the caller's share: the
subprocess is in the wall time), medians of the repetitions, each ratio taken within one
repetition against tessera.stats().
Usage: py_stats.py BUILD_DIR OUT_PREFIX [--quick]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

build, out = sys.argv[1], sys.argv[2]
quick = "--quick" in sys.argv[3:]
reps = 3 if quick else 5
calls = 50000 if quick else 200000

CHILD = r"""
import ctypes, json, os, subprocess, sys, time
import tessera
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(3 << 20)) == 0
reps, calls, stat = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
# another process under tessera, for stats(pid): this one's child, same user
peer = subprocess.Popen([sys.executable, "-c",
    "import ctypes,sys; rt=ctypes.CDLL('libcudart.so.13'); p=ctypes.c_void_p(); "
    "rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1<<20)); print('up', flush=True); "
    "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert peer.stdout.readline() == "up\n"
tessera.stats(peer.pid)

# (CPU, wall) microseconds per call: CPU time is what the call costs on a shared machine, where
# another process's time slices land in the wall time
def per_call(fn, n):
    c, t = time.process_time(), time.perf_counter()
    fn(n)
    return ((time.process_time() - c) / n * 1e6, (time.perf_counter() - t) / n * 1e6)

def own(n):
    s = tessera.stats
    for _ in range(n):
        s()

def own_keys(n):
    s = tessera.stats
    for _ in range(n):
        x = s()
        x["allocated_bytes.all.current"]; x["reserved_bytes.all.peak"]; x["num_alloc_retries"]

def own_dict(n):
    s = tessera.stats
    for _ in range(n):
        s().to_dict()

def other(n):
    s, pid = tessera.stats, peer.pid
    for _ in range(n):
        s(pid)

def cli(n):
    for _ in range(n):
        out = subprocess.run([stat, "--json", str(peer.pid)], capture_output=True, text=True)
        json.loads(out.stdout)[str(peer.pid)]["0"]["allocated_bytes.all.current"]

rows = {k: [] for k in ("own", "own_keys", "own_dict", "other", "cli")}
for _ in range(reps):
    rows["own"].append(per_call(own, calls))
    rows["own_keys"].append(per_call(own_keys, calls))
    rows["own_dict"].append(per_call(own_dict, calls // 10))
    rows["other"].append(per_call(other, calls // 100))
    rows["cli"].append(per_call(cli, 20))
peer.stdin.close()
peer.wait()
print(json.dumps(rows))
"""

env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTORCH_"))}
pages = tempfile.mkdtemp(prefix="tessera-bench-pages-")
env.update(TESSERA_STATS_DIR=pages, TESSERA_SIM_MEMORY="1G",
           PYTHONPATH=os.path.join(build, "python"))
run = subprocess.run([os.path.join(build, "tools", "tessera"), "run", "--sim", "--",
                      sys.executable, "-c", CHILD, str(reps), str(calls),
                      os.path.join(build, "tools", "tessera-stat")],
                     env=env, capture_output=True, text=True, timeout=1800)
os.rmdir(pages)
if run.returncode != 0:
    sys.exit(f"py_stats.py: the child failed: {run.stderr[-2000:]}")
rows = json.loads(run.stdout.strip().splitlines()[-1])
labels = {
    "own": "tessera.stats(): this process's counters",
    "own_keys": "tessera.stats() and three keys read",
    "own_dict": "tessera.stats().to_dict(): every counter in a dict",
    "other": "tessera.stats(pid): another process's page (opened, trusted, judged)",
    "cli": "tessera-stat --json PID, run and parsed",
}
md = ["| reading the counters from Python | CPU us per call | wall us per call | "
      "/ tessera.stats() (CPU) |", "|---|---|---|---|"]
for k, label in labels.items():
    cpu = [c for c, _ in rows[k]]
    wall = [w for _, w in rows[k]]
    ratio = statistics.median(a / b[0] for a, b in zip(cpu, rows["own"]))
    md.append(f"| {label} | {statistics.median(cpu):,.2f} | {statistics.median(wall):,.2f} | "
              f"{ratio:,.1f}x |")
with open(out + ".json", "w") as f:
    json.dump({"reps": reps, "calls": calls, "us_per_call": rows}, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
