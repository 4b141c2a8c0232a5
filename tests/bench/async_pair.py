#!/usr/bin/env python3
"""The cudaMallocAsync + cudaFreeAsync pair through LD_PRELOAD on the simulated device, side by
side in one run: tests/programs/staging --mode async (a 4 MiB stream-ordered scratch buffer per
step on a non-blocking stream, memset and copied on it, freed on it), without tessera, with its
defaults and with expandable_segments:True. The program times the allocation and free calls
alone (async_pair_ns). Configurations alternate within each repetition; medians are shown, and
each ratio is taken within one repetition.
Usage: async_pair.py BUILD_DIR OUT_PREFIX [--quick]
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
steps = "1000" if quick else "4000"
prog = os.path.join(build, "tests", "programs", "staging")
CONFS = {"no tessera": None, "tessera defaults": "", "expandable_segments:True":
         "expandable_segments:True"}


def pair_ns(conf):
    r, _ = simrun.run(build, [prog, "--mode", "async", "--steps", steps], conf,
                      preload=conf is not None, who="async_pair.py")
    if r.get("async_bad") != "0":
        sys.exit(f"async_pair.py: staging under '{conf}' saw wrong bytes: {r}")
    return float(r["async_pair_ns"])


rows = {k: [] for k in CONFS}
for _ in range(reps):
    for label, conf in CONFS.items():
        rows[label].append(pair_ns(conf))
md = ["| cudaMallocAsync + cudaFreeAsync, 4 MiB, one stream | ns per pair | / no tessera |",
      "|---|---|---|"]
for label, v in rows.items():
    ratio = statistics.median(a / b for a, b in zip(v, rows["no tessera"]))
    md.append(f"| {label} | {statistics.median(v):,.0f} | {ratio:.2f}x |")
with open(out + ".json", "w") as f:
    json.dump({"reps": reps, "steps": int(steps), "pair_ns": rows}, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
