#!/usr/bin/env python3
"""Pinned host memory through LD_PRELOAD on the simulated device, side by side in one run.

Speed: tests/programs/staging allocates a pinned buffer per step (cudaHostAlloc, cudaMallocHost
or cuMemHostAlloc), fills it, queues a copy of it on a non-blocking stream and frees it at once.
The mean ns of one allocate + free pair is compared without tessera, with tessera's pinned cache
(the default), with another tree's libtessera.so (--baseline BUILD: the tree before a change)
and with pinned_cache:False, with free device work (TESSERA_SIM_OP_DELAY_US=0) and with copies of
100 us each. On the simulator a pin costs what the simulator charges (an mmap and its
bookkeeping, and a cuMemFreeHost that waits for the queued copies), not what a GPU driver
charges. Configurations alternate within each repetition; medians are shown.

Memory: tests/programs/offload (weights of mixed sizes kept, activations of a cycle of sizes per
step) under the same configurations: the driver's own peak of pinned bytes (the simulator's
counter) against the most bytes the program held at once, and the pair's ns in its last cycle.
Core: tests/bench/host_pair.c, the core's own work for one ts_host_alloc + ts_host_free over the
device model (no driver, no simulator): ns per pair, best of 7 rounds, median of the repetitions,
built against BUILD's core and, with --baseline, against the other tree's core libraries
(core/libts_core.a, devmodel/libts_devmodel.a, config/libts_config.a, with this tree's headers).
Usage: pinned.py BUILD_DIR OUT_PREFIX [--quick] [--baseline OTHER_BUILD_DIR]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simrun  # noqa: E402

build, out = sys.argv[1], sys.argv[2]
opts = sys.argv[3:]
quick = "--quick" in opts
baseline = opts[opts.index("--baseline") + 1] if "--baseline" in opts else None
reps = 3 if quick else 5
steps = "200" if quick else "800"
staging = os.path.join(build, "tests", "programs", "staging")
offload = os.path.join(build, "tests", "programs", "offload")
# (name, TESSERA_ALLOC_CONF or None for no tessera, the libtessera.so to preload)
CONFIGS = [("no tessera", None, None), ("tessera", "", None)]
if baseline:
    CONFIGS.append(("baseline tree", "", os.path.join(os.path.abspath(baseline), "shim", "libtessera.so")))
CONFIGS.append(("tessera pinned_cache:False", "pinned_cache:False", None))
NAMES = [n for n, _, _ in CONFIGS]
MODES = ["host", "mallochost", "driver"]


def run(argv, conf, shim, delay=0):
    return simrun.run(build, argv, conf, {"TESSERA_SIM_OP_DELAY_US": str(delay)},
                      preload=conf is not None, who="pinned.py", shim=shim)[0]


def pairs(conf, shim, delay, size):
    argv = [staging, "--steps", steps, "--size", str(size)]
    for m in MODES:
        r = run(argv + ["--mode", m], conf, shim, delay)
        if r[m + "_bad"] != "0":
            sys.exit(f"pinned.py: {m} under '{conf}': {r[m + '_bad']} bad slots")
        yield m, float(r[m + "_pair_ns"])


cases = [(0, 64 << 10), (100, 64 << 10), (0, 4 << 20), (100, 4 << 20)]
report = {"reps": reps, "steps": int(steps), "baseline": baseline, "cases": [], "offload": {}}
speed_cols = "no tessera / tessera" + (" | baseline / tessera" if baseline else "")
md = ["| op delay | size | call | " + " | ".join(NAMES) + f" | {speed_cols} |",
      "|---|---|---|" + "---|" * len(NAMES) + ("---|---|" if baseline else "---|")]
for delay, size in cases:
    samples = {(n, m): [] for n in NAMES for m in MODES}
    for _ in range(reps):
        for name, conf, shim in CONFIGS:
            for m, ns in pairs(conf, shim, delay, size):
                samples[(name, m)].append(ns)
    for m in MODES:
        med = {n: statistics.median(samples[(n, m)]) for n in NAMES}
        call = {"host": "cudaHostAlloc", "mallochost": "cudaMallocHost", "driver": "cuMemHostAlloc"}[m]
        ratios = [med["no tessera"] / med["tessera"]]
        if baseline:
            ratios.append(med["baseline tree"] / med["tessera"])
        md.append(f"| {delay} us | {size >> 10} KiB | {call} + free | " +
                  " | ".join(f"{med[n] / 1000:.1f} us" for n in NAMES) + " | " +
                  " | ".join(f"{x:.2f}x" for x in ratios) + " |")
        report["cases"].append({"op_delay_us": delay, "size": size, "call": call,
                                "pair_ns_median": med})

# the offload pattern: pinned bytes against the bytes asked for
md += ["", "offload (tests/programs/offload, 20 steps, 12 layers): the driver's peak of pinned "
       "bytes against the most bytes the program held at once; the pair's ns in the last cycle",
       "", "| configuration | peak requested | driver's peak pinned | ratio | pair (median) |",
       "|---|---|---|---|---|"]
for name, conf, shim in CONFIGS:
    rs = [run([offload], conf, shim) for _ in range(1 if quick else 3)]
    if any(r["bad"] != "0" for r in rs):
        sys.exit(f"pinned.py: offload under '{conf}': bad bytes")
    worst = max(rs, key=lambda r: float(r["ratio"]))
    pair = statistics.median(float(r["pair_ns"]) for r in rs)
    report["offload"][name] = {"peak_requested": int(worst["peak_requested"]),
                               "driver_peak": int(worst["driver_peak"]),
                               "ratio": float(worst["ratio"]), "pair_ns_median": pair}
    md.append(f"| {name} | {int(worst['peak_requested']) / 2**20:.1f} MiB | "
              f"{int(worst['driver_peak']) / 2**20:.1f} MiB | {float(worst['ratio']):.3f}x | "
              f"{pair / 1000:.1f} us |")

# the core alone: the same source against both trees' core libraries
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cores = [("tessera", os.path.join(build, "tests", "bench", "host-pair"))]
tmp = tempfile.mkdtemp(prefix="tessera-host-pair-")
if baseline:
    b = os.path.abspath(baseline)
    libs = [os.path.join(b, d, f) for d, f in (("core", "libts_core.a"), ("devmodel", "libts_devmodel.a"),
                                                ("config", "libts_config.a"), ("core", "libts_core.a"))]
    exe = os.path.join(tmp, "host-pair-baseline")
    cc = subprocess.run(["cc", "-O2", "-D_GNU_SOURCE", "-I", src, "-I", os.path.join(src, "include"), "-I", b,
                         "-o", exe, os.path.join(src, "tests", "bench", "host_pair.c")] + libs +
                        ["-lpthread", "-lm"], capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"pinned.py: cannot build host_pair.c against {baseline}:\n{cc.stderr[-2000:]}")
    cores.append(("baseline tree", exe))
md += ["", "The core alone (tests/bench/host_pair.c over the device model): ns per ts_host_alloc + "
       "ts_host_free pair, best of 7 rounds of 200000, median of the repetitions", "",
       "| size | " + " | ".join(n for n, _ in cores) + (" | tessera / baseline |" if baseline else " |"),
       "|---|" + "---|" * len(cores) + ("---|" if baseline else "")]
report["core"] = {}
for size in (64 << 10, 4 << 20):
    samples = {n: [] for n, _ in cores}
    for _ in range(reps):
        for name, exe in cores:
            r = subprocess.run([exe, str(size), "200000"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"pinned.py: {exe} failed")
            samples[name].append(float(r.stdout))
    med = {n: statistics.median(v) for n, v in samples.items()}
    report["core"][str(size)] = med
    md.append(f"| {size >> 10} KiB | " + " | ".join(f"{med[n]:.0f} ns" for n, _ in cores) +
              (f" | {med['tessera'] / med['baseline tree']:.2f}x |" if baseline else " |"))

with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write(f"Mean ns of one allocate + free pair over {steps} steps, median of {reps} runs; "
            "simulated device (a pin costs what the simulator charges). Ratios above 1: tessera "
            "is faster.\n\n" + "\n".join(md) + "\n")
print("\n".join(md))
