#!/usr/bin/env python3
"""Stream-ordered reuse through LD_PRELOAD on the simulated device, side by side in one run.

1. tight loop: cudaMalloc(1 MiB) + cudaFree pairs, ns per pair and as a ratio to a glibc
   malloc + free pair of the same size measured in the same process (tests/programs/tight_loop);
2. host-runs-ahead training loop on the legacy stream (tests/programs/train_loop): peak reserved
   (from the stats page) and wall time, relative to reuse_fence:none (stream order taken for
   granted), for the defaults and for defragment:True;
3. the multi-stream variants of tests/programs/reuse_order: wall time against reuse_fence:sync;
4. streams that should overlap, never synchronised per round (tests/programs/overlap): device
   time from the simulator's event timestamps, scratch from cudaMalloc and stream-ordered.
Configurations alternate within each repetition, so drift affects all alike; medians are shown.
Usage: stream_order.py BUILD_DIR OUT_PREFIX [--quick]
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
progs = os.path.join(build, "tests", "programs")


def run(argv, conf, extra=None, preload=True, ok_rcs=(0,)):
    """Run a program on the simulator; return (RESULT dict, peak reserved bytes or None)."""
    return simrun.run(build, argv, conf, extra, preload, ok_rcs, who="stream_order.py")


def median(xs):
    return statistics.median(xs)


report = {"reps": reps}
md = []

# 1. tight loop
tight = {"no tessera": None, "defaults (order)": "", "reuse_fence:events": "reuse_fence:events",
         "reuse_fence:none": "reuse_fence:none"}
pairs = "20000" if quick else "50000"
rows = {k: [] for k in tight}
for _ in range(reps):
    for label, conf in tight.items():
        n = "1000" if conf is None else pairs  # the simulator's own cudaFree is slow
        r, _ = run([os.path.join(progs, "tight_loop"), "--pairs", n, "--rounds", "5"], conf,
                   preload=conf is not None)
        rows[label].append((float(r["cuda_ns"]), float(r["glibc_ns"]), float(r["ratio"])))
report["tight_loop"] = rows
md.append("| tight loop, 1 MiB cudaMalloc+cudaFree | ns per pair | glibc pair, same run | ratio |")
md.append("|---|---|---|---|")
for label, v in rows.items():
    md.append(f"| {label} | {median([x[0] for x in v]):,.0f} | {median([x[1] for x in v]):.1f} | "
              f"{median([x[2] for x in v]):.1f}x |")

# 2. host-runs-ahead loop
slow = {"TESSERA_SIM_OP_DELAY_US": "200"}
train = ["reuse_fence:none", "", "reuse_fence:events", "defragment:True,reuse_fence:none",
         "defragment:True", "defragment:True,reuse_fence:events"]
res = {c: {"peak": [], "ms": []} for c in train}
steps = "16" if quick else "32"
for _ in range(reps):
    for conf in train:
        r, peak = run([os.path.join(progs, "train_loop"), "--steps", steps], conf, slow)
        res[conf]["peak"].append(peak)
        res[conf]["ms"].append(float(r["wall_ms"]))
report["train_loop"] = res
md.append("")
md.append("| host-runs-ahead loop (legacy stream) | peak reserved | wall ms | peak / base | time / base |")
md.append("|---|---|---|---|---|")
for conf in train:
    base = "defragment:True,reuse_fence:none" if conf.startswith("defragment") else "reuse_fence:none"
    pk, ms = median(res[conf]["peak"]), median(res[conf]["ms"])
    ratios_p = [a / b for a, b in zip(res[conf]["peak"], res[base]["peak"])]
    ratios_t = [a / b for a, b in zip(res[conf]["ms"], res[base]["ms"])]
    md.append(f"| {conf or 'defaults (order)'} | {pk / 2**20:.0f} MiB | {ms:.0f} | "
              f"{median(ratios_p):.2f}x | {median(ratios_t):.2f}x |")

# 3. multi-stream variants against reuse_fence:sync
variants = ["nb-to-legacy", "legacy-to-nb", "two-blocking", "new-stream", "ptds-threads", "host-func",
            "graph"]
vres = {v: {"": [], "reuse_fence:sync": []} for v in variants}
for _ in range(reps):
    for v in variants:
        for conf in ("", "reuse_fence:sync"):
            import time
            t0 = time.monotonic()
            r, _ = run([os.path.join(progs, "reuse_order"), "--variant", v, "--rounds", "8"], conf,
                       {"TESSERA_SIM_OP_DELAY_US": "1000"})
            vres[v][conf].append(time.monotonic() - t0)
            if r["status"] != "ok":
                sys.exit(f"stream_order.py: {v} under '{conf}' corrupted")
report["variants"] = vres
md.append("")
md.append("| multi-stream variant (8 rounds) | defaults (order) s | reuse_fence:sync s | ratio |")
md.append("|---|---|---|---|")
for v in variants:
    a, b = vres[v][""], vres[v]["reuse_fence:sync"]
    md.append(f"| {v} | {median(a):.2f} | {median(b):.2f} | "
              f"{median([x / y for x, y in zip(a, b)]):.2f}x |")

# 4. overlapping streams: device time from event timestamps
ov_cases = [("driver alone", [], None, False), ("tessera default", [], "", True),
            ("tessera, reuse_fence:none", [], "reuse_fence:none", True),
            ("driver alone", ["--async"], None, False), ("tessera default", ["--async"], "", True)]
ores = {i: [] for i in range(len(ov_cases))}
for _ in range(reps):
    for i, (label, args, conf, pre) in enumerate(ov_cases):
        argv = [os.path.join(progs, "overlap"), "--rounds", "16"] + args
        r, _ = run(argv, conf, {"TESSERA_SIM_OP_DELAY_US": "1000"}, preload=pre, ok_rcs=(0, 3))
        ores[i].append(r)
report["overlap"] = {f"{c[0]} {' '.join(c[1]) or 'cudaMalloc'}": v for c, v in zip(ov_cases, ores.values())}
md.append("")
md.append("| 2 streams x 16 rounds, no sync per round | scratch | device span ms | overlap | bytes |")
md.append("|---|---|---|---|---|")
for i, (label, args, conf, pre) in enumerate(ov_cases):
    v = ores[i]
    bad = sum(r["status"] != "ok" for r in v)
    md.append(f"| {label} | {'cudaMallocAsync' if args else 'cudaMalloc'} | "
              f"{median([float(r['span_ms']) for r in v]):.0f} | "
              f"{median([float(r['overlap']) for r in v]):.2f} | "
              f"{'ok' if not bad else f'corrupt in {bad} of {len(v)}'} |")

with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
