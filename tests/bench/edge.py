#!/usr/bin/env python3
"""At the edge of the device: loops that repeat one training-like step (parameters and biases
once; per step workspaces, activations and small temporaries, then workspaces and gradients,
every gradient freed at the end: tests/programs/repeat_step's shape, sizes drawn from a seed),
replayed on every device size around their edge, 2 MiB apart, under each configuration. For
each loop and configuration: the smallest device from which every larger one runs the loop; the
devices where the second step fails after the first ran (the first step grows from an empty
device, later ones start from what the first left); the devices where a later step fails after
two or more ran ("late": the out of memory a job meets after hours); and the devices that fail
although a smaller one ran ("not monotone").

usage: edge.py BUILD_DIR OUT_PREFIX [--quick] [CONF ...]

Writes OUT_PREFIX.json and OUT_PREFIX.md and prints the Markdown.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

LAYERS, STEPS = 12, 30
ALLOCS_PER_STEP = 6 * LAYERS + 1
PARAMS = 2 * LAYERS


def loop(seed):
    """The RMM log of the loop of this seed."""
    rnd = random.Random(seed)
    mib = 1 << 20

    def size(lo, hi):
        return int(rnd.uniform(lo, hi) * mib) // 4 * 4
    psize = [size(2, 9) for _ in range(LAYERS)]
    bsize = [rnd.randrange(4096, 200000) // 4 * 4 for _ in range(LAYERS)]
    asize = [size(5, 17) for _ in range(LAYERS)]
    wsize = [size(1, 12) for _ in range(LAYERS)]
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    state = {"ptr": 0x7f0000000000, "t": 0}

    def alloc(n):
        state["ptr"] += 512
        state["t"] += 1
        rows.append(f"0,00:00:{state['t'] / 1e6:09.6f},allocate,{hex(state['ptr'])},{n},0x0")
        return (state["ptr"], n)

    def free(a):
        state["t"] += 1
        rows.append(f"0,00:00:{state['t'] / 1e6:09.6f},free,{hex(a[0])},{a[1]},0x0")
    for n in psize + bsize:
        alloc(n)
    for _ in range(STEPS):
        acts = []
        for i in range(LAYERS):
            ws = alloc(wsize[i])
            acts.append(alloc(asize[i]))
            tmp = alloc(bsize[i])
            free(ws)
            free(tmp)
        grads = []
        for i in reversed(range(LAYERS)):
            ws = alloc(wsize[i])
            grads += [alloc(psize[i]), alloc(bsize[i])]
            free(acts[i])
            free(ws)
        free(alloc(4))  # a loss read back
        for g in grads:
            free(g)
    return "\n".join(rows) + "\n"


def sweep(build, path, conf, lo, hi):
    """capacity (MiB) -> the step of the first out of memory (0: none)."""
    out = {}
    for mib in range(lo, hi + 1, 2):
        p = subprocess.run([os.path.join(build, "tools", "tessera-replay"), "--json", "--conf",
                            conf, "--capacity", f"{mib}M", path], capture_output=True, text=True,
                           env=dict(os.environ, TESSERA_REPLAY_QUIET="1"))
        r = json.loads(p.stdout)
        first = r.get("first_oom_allocation", 0)
        out[mib] = (first - PARAMS - 1) // ALLOCS_PER_STEP + 1 if first else 0
    return out


def main():
    build, prefix = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    confs = [a for a in sys.argv[3:] if not a.startswith("--")] or \
        ["default", "defragment:True,handle_policy:page,stitch_when:pressure",
         "expandable_segments:True"]
    seeds = range(1, 5) if quick else range(1, 12)
    results = {}
    with tempfile.TemporaryDirectory(prefix="tessera-edge-") as d:
        for seed in seeds:
            path = os.path.join(d, f"loop-{seed}.csv")
            with open(path, "w") as f:
                f.write(loop(seed))
            r = json.loads(subprocess.run([os.path.join(build, "tools", "tessera-replay"),
                                           "--json", path], capture_output=True, text=True,
                                          env=dict(os.environ, TESSERA_REPLAY_QUIET="1")).stdout)
            lo = (r["peak_requested_bytes"] >> 20) // 2 * 2
            for conf in confs:
                s = sweep(build, path, conf, lo, lo + 60)
                ok = [m for m in sorted(s) if s[m] == 0]
                runs_from = None
                for m in sorted(s, reverse=True):
                    if s[m]:
                        break
                    runs_from = m
                results.setdefault(conf, []).append({
                    "seed": seed, "peak_requested_mib": r["peak_requested_bytes"] / 2**20,
                    "runs_from": runs_from,
                    "second": [m for m in sorted(s) if s[m] == 2],
                    "late": [(m, s[m]) for m in sorted(s) if s[m] >= 3],
                    "not_monotone": [m for m in sorted(s) if s[m] and ok and m > ok[0]]})
    md = ["| configuration | loops | devices checked | sum of smallest devices (MiB) | "
          "second step fails (devices) | late failures (device MiB: step) | "
          "not monotone (device MiB) |",
          "|---|---:|---:|---:|---:|---|---|"]
    for conf in confs:
        rs = results[conf]
        late = [f"loop {r['seed']}: " + ", ".join(f"{m}: {st}" for m, st in r["late"])
                for r in rs if r["late"]]
        nm = [f"loop {r['seed']}: " + ", ".join(str(m) for m in r["not_monotone"])
              for r in rs if r["not_monotone"]]
        md.append(f"| {conf} | {len(rs)} | {31 * len(rs)} | "
                  f"{sum(r['runs_from'] or 0 for r in rs)} | "
                  f"{sum(len(r['second']) for r in rs)} | {'; '.join(late) or '-'} | "
                  f"{'; '.join(nm) or '-'} |")
    text = "\n".join(md) + "\n"
    with open(prefix + ".md", "w") as f:
        f.write(text)
    with open(prefix + ".json", "w") as f:
        json.dump(results, f, indent=1)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
