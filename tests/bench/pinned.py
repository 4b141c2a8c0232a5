#!/usr/bin/env python3
"""Pinned host memory through LD_PRELOAD on the simulated device, side by side in one run.

tests/programs/staging allocates a pinned buffer per step (cudaHostAlloc, cudaMallocHost or
cuMemHostAlloc), fills it, queues a copy of it on a non-blocking stream and frees it at once. The
mean ns of one allocate + free pair is compared without tessera, with tessera's pinned cache
(the default) and with pinned_cache:False, with free device work (TESSERA_SIM_OP_DELAY_US=0) and
with copies of 100 us each. On the simulator a pin costs what the simulator charges (an mmap and
its bookkeeping, and a cuMemFreeHost that waits for the queued copies), not what a GPU driver
charges. Configurations alternate within each repetition; medians are shown.
Usage: pinned.py BUILD_DIR OUT_PREFIX [--quick]
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simrun  # noqa: E402

build, out = sys.argv[1], sys.argv[2]
quick = "--quick" in sys.argv[3:]
reps = 3 if quick else 5
steps = "200" if quick else "800"
staging = os.path.join(build, "tests", "programs", "staging")
CONFIGS = [("no tessera", None), ("tessera", ""), ("tessera pinned_cache:False", "pinned_cache:False")]
MODES = ["host", "mallochost", "driver"]


def run(conf, delay, size):
    argv = [staging, "--steps", steps, "--size", str(size)]
    for m in MODES:
        r, _ = simrun.run(build, argv + ["--mode", m], conf, {"TESSERA_SIM_OP_DELAY_US": str(delay)},
                          preload=conf is not None, who="pinned.py")
        if r[m + "_bad"] != "0":
            sys.exit(f"pinned.py: {m} under '{conf}': {r[m + '_bad']} bad slots")
        yield m, float(r[m + "_pair_ns"])


cases = [(0, 64 << 10), (100, 64 << 10), (100, 4 << 20)]
report = {"reps": reps, "steps": int(steps), "cases": []}
md = ["| op delay | size | call | " + " | ".join(n for n, _ in CONFIGS) +
      " | no tessera / tessera |", "|---|---|---|" + "---|" * len(CONFIGS) + "---|"]
for delay, size in cases:
    samples = {(n, m): [] for n, _ in CONFIGS for m in MODES}
    for _ in range(reps):
        for name, conf in CONFIGS:
            for m, ns in run(conf, delay, size):
                samples[(name, m)].append(ns)
    for m in MODES:
        med = {n: statistics.median(samples[(n, m)]) for n, _ in CONFIGS}
        call = {"host": "cudaHostAlloc", "mallochost": "cudaMallocHost", "driver": "cuMemHostAlloc"}[m]
        ratio = med["no tessera"] / med["tessera"] if med["tessera"] else 0.0
        md.append(f"| {delay} us | {size >> 10} KiB | {call} + free | " +
                  " | ".join(f"{med[n] / 1000:.1f} us" for n, _ in CONFIGS) + f" | {ratio:.0f}x |")
        report["cases"].append({"op_delay_us": delay, "size": size, "call": call,
                                "pair_ns_median": med})
with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write(f"Mean ns of one allocate + free pair over {steps} steps, median of {reps} runs; "
            "simulated device (a pin costs what the simulator charges).\n\n" + "\n".join(md) + "\n")
print("\n".join(md))
