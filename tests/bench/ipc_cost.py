#!/usr/bin/env python3
"""What CUDA IPC of tessera's blocks costs, on the simulated device, side by side in one run.

tests/programs/ipc_share exports 9 blocks of 512 B to 64 MiB (cudaIpcGetMemHandle, timed one by
one) and a child process opens them (cudaIpcOpenMemHandle, the mean per open). Runs without
tessera (the simulator's own legacy IPC of each driver allocation) and under tessera's default,
PyTorch's policy and expandable segments; with --against LIB, also under another
libtessera.so (an older tree's), so that two trees are compared in the same run. Configurations
alternate within each repetition; medians are shown, and the slowest single export (the first
one starts tessera's control channel). On the simulator a driver export costs a dup(2), not
what a GPU driver charges.
Usage: ipc_cost.py BUILD_DIR OUT_PREFIX [--quick] [--reps N] [--against LIB]
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simrun  # noqa: E402

args = sys.argv[1:]
build, out = args[0], args[1]
reps = 5 if "--quick" in args else 15
if "--reps" in args:
    reps = int(args[args.index("--reps") + 1])
other = args[args.index("--against") + 1] if "--against" in args else None
prog = os.path.join(build, "tests", "programs", "ipc_share")
POLICIES = [("default", ""), ("PyTorch's policy", "expandable_segments:False"),
            ("expandable segments", "expandable_segments:True")]
LIBS = [("this tree", None)] + ([("--against", other)] if other else [])
configs = [("no tessera", None, None)] + [(f"{lib}, {pol}", conf, path)
                                          for pol, conf in POLICIES for lib, path in LIBS]


def run(conf, lib):
    lines = []
    extra = {"TESSERA_SIM_MEMORY": "1G"}
    if lib:
        extra["LD_PRELOAD"] = lib
    r, _ = simrun.run(build, [prog, "--mode", "basic"], conf, extra, preload=conf is not None,
                      who="ipc_cost.py", lines=lines)
    if r["opened"] != "9" or r["bytes_bad"] != "0":
        sys.exit(f"ipc_cost.py: under '{conf}' ({lib or 'this tree'}): {r}")
    each = [float(m.group(1)) for m in (re.search(r"export: block \d+ of \d+ bytes: ([\d.]+) us", l)
                                        for l in lines) if m]
    return (float(r["export_us"]), float(r["open_us"]), max(each), each[0],
            float(r.get("open_first_us", "nan")))


samples = {name: [] for name, _, _ in configs}
for _ in range(reps):
    for name, conf, lib in configs:
        samples[name].append(run(conf, lib))
report = {"reps": reps, "against": other, "configs": []}
md = ["| | export, mean of 9 | first export | slowest export | open, mean of 9 | first open |",
      "|---|---:|---:|---:|---:|---:|"]
for name, conf, lib in configs:
    s = samples[name]
    med = [statistics.median(x[i] for x in s) for i in range(5)]
    md.append(f"| {name} | {med[0]:.1f} us | {med[3]:.1f} us | {med[2]:.1f} us | {med[1]:.1f} us "
              f"| {med[4]:.1f} us |")
    report["configs"].append({"name": name, "conf": conf, "lib": lib, "export_us": med[0],
                              "open_us": med[1], "slowest_export_us": med[2],
                              "first_export_us": med[3], "first_open_us": med[4]})
with open(out + ".json", "w") as f:
    json.dump(report, f, indent=1)
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
