#!/usr/bin/env python3
"""Four processes on one shared simulated device, cycling through a PyTorch-like cache pattern
(tests/integration/lend_cycle: live peak 9 units each, 16 units cached under PyTorch's policy),
run at the same time, side by side in one run:

- under pressure: a device of 40 units, so that their live peaks sum to 90% of it and what they
  would cache to 160%, the processes in turns, one cycle each, each idle with its cache kept
  while the others run (as workers between requests: processes that all work at once free
  their own caches when they need memory, and PyTorch's own release-and-retry is then enough):
  PyTorch's policy without lending, with lending, and tessera's default;
- without pressure: a device of 128 units (everything fits), lending on and off, for the time per
  cycle (the median of the four processes' times, over the repetitions).

Every run checks every byte it wrote (lend_cycle exits non-zero otherwise) and the simulator's
count of unordered accesses (must be 0). The simulator's copies and memsets are host memcpy and
memset: their cost is the host's memory bandwidth, not a GPU's.
Usage: lending_four.py BUILD_DIR OUT_PREFIX [--quick]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid

args = sys.argv[1:]
build, out = args[0], args[1]
quick = "--quick" in args
UNIT = 4  # MiB
CYCLES = 10 if quick else 30
REPS = 3 if quick else 7
prog = os.path.join(build, "tests", "integration", "lend_cycle")
stat = os.path.join(build, "tools", "tessera-stat")
PYTORCH = "expandable_segments:False"


def four(conf, units, turns=False):
    """Run four lend_cycle processes at once; their RESULT fields and lending counters."""
    name = "bench-lend-" + uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as d:
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "tests", "sim"),
                   TESSERA_SIM_MEMORY=f"{units * UNIT}M", TESSERA_SIM_SHARED=name,
                   TESSERA_STATS_DIR=d, TESSERA_STATS_KEEP="1", TESSERA_ALLOC_CONF=conf,
                   TESSERA_SIM_REPORT=os.path.join(d, "report.json"),
                   LD_PRELOAD=os.path.join(build, "shim", "libtessera.so"))
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        try:
            ps = [subprocess.Popen([prog, str(UNIT), str(CYCLES)] + (["turns"] if turns else []),
                                   env=env, text=True, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                  for _ in range(4)]
            for _ in range(CYCLES if turns else 0):
                for p in ps:  # one cycle each, in turns
                    p.stdin.write("go\n")
                    p.stdin.flush()
                    if not p.stdout.readline().startswith("done"):
                        sys.exit(f"lending_four.py: a process stopped under '{conf}'")
            res = []
            for p in ps:
                # not communicate(): it reads the pipes beneath the lines already buffered
                p.stdin.close()
                o, e = p.stdout.read(), p.stderr.read()
                _, status, use = os.wait4(p.pid, 0)  # its CPU time: steadier than wall time
                p.returncode = os.waitstatus_to_exitcode(status)
                line = [l for l in o.splitlines() if l.startswith("RESULT ")]
                if p.returncode != 0 or not line:
                    sys.exit(f"lending_four.py: under '{conf}': rc {p.returncode}\n{o}{e[-2000:]}")
                res.append(dict(kv.split("=", 1) for kv in line[-1].split()[1:]))
                res[-1]["cpu_us"] = (use.ru_utime + use.ru_stime) * 1e6
            races = sum(json.loads(l).get("races", 0) for l in open(env["TESSERA_SIM_REPORT"]))
            if races:
                sys.exit(f"lending_four.py: {races} unordered accesses under '{conf}'")
            j = json.loads(subprocess.run([stat, "--dir", d, "--json"], capture_output=True,
                                          text=True).stdout)
            devs = [v["0"] for v in j.values() if isinstance(v, dict) and "0" in v]
        finally:
            try:
                os.unlink(f"/dev/shm/tessera-sim.{name}")
            except FileNotFoundError:
                pass
    keys = ("num_lend_asks", "num_lend_asks_served", "lend_received_bytes", "lend_wait_time")
    return res, {k: sum(v.get(k, 0) for v in devs) for k in keys}


md = ["Under pressure: device of 40 units of 4 MiB (160 MiB), four processes, each "
      f"{CYCLES} cycles, in turns (each idle with its cache kept while the others run a cycle, as "
      "workers between requests); live peaks 90% of the device, caches 160%.", "",
      "| configuration | cycles run out of memory (of 4 x cycles) | bytes written and read back "
      "| asks (served) | received | waited |", "|---|---:|---:|---:|---:|---:|"]
report = {"unit_mib": UNIT, "cycles": CYCLES, "reps": REPS, "pressure": [], "no_pressure": []}
for name, conf in (("PyTorch's policy, lending:False", PYTORCH + ",lending:False"),
                   ("PyTorch's policy, lending", PYTORCH), ("tessera's default, lending", "")):
    res, lend = four(conf, 40, turns=True)
    ooms = sum(int(r["ooms"]) for r in res)
    moved = sum(int(r["bytes"]) for r in res)
    md.append(f"| {name} | {ooms} | {moved / 2**20:.0f} MiB | {lend['num_lend_asks']} "
              f"({lend['num_lend_asks_served']}) | {lend['lend_received_bytes'] / 2**20:.0f} MiB | "
              f"{lend['lend_wait_time'] / 1000:.1f} ms |")
    report["pressure"].append({"name": name, "conf": conf, "ooms": ooms, "bytes": moved, **lend})

times, cpu = {}, {}
for _ in range(REPS):
    for name, conf in (("PyTorch's policy, lending:False", PYTORCH + ",lending:False"),
                       ("PyTorch's policy, lending", PYTORCH),
                       ("tessera's default, lending:False", "lending:False"),
                       ("tessera's default, lending", "")):
        res, lend = four(conf, 128)
        if any(int(r["ooms"]) for r in res) or lend["num_lend_asks"]:
            sys.exit(f"lending_four.py: an out-of-memory or an ask without pressure: {res} {lend}")
        times.setdefault(name, []).extend(int(r["us"]) / CYCLES for r in res)
        cpu.setdefault(name, []).extend(r["cpu_us"] / CYCLES for r in res)
md += ["", f"Without pressure: device of 128 units (512 MiB), the same four processes; time per "
       f"cycle, median of 4 processes x {REPS} runs (configurations alternate within each run): the "
       "wall time of the cycles, and the process's CPU time (user + system, its start-up "
       "included) over its cycles.",
       "", "| configuration | wall per cycle | ratio | CPU per cycle | ratio |",
       "|---|---:|---:|---:|---:|"]
for pol in ("PyTorch's policy", "tessera's default"):
    off = statistics.median(times[f"{pol}, lending:False"])
    coff = statistics.median(cpu[f"{pol}, lending:False"])
    for suffix in ("lending:False", "lending"):
        t = statistics.median(times[f"{pol}, {suffix}"])
        c = statistics.median(cpu[f"{pol}, {suffix}"])
        md.append(f"| {pol}, {suffix} | {t / 1000:.2f} ms | {t / off:.3f} | {c / 1000:.2f} ms | "
                  f"{c / coff:.3f} |")
        report["no_pressure"].append({"name": f"{pol}, {suffix}", "us_per_cycle": t,
                                      "ratio": t / off, "cpu_us_per_cycle": c,
                                      "cpu_ratio": c / coff})
with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
