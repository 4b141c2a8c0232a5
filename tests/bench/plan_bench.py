#!/usr/bin/env python3
"""plan:True beside PyTorch's policy, expandable segments, defragment:True and tessera's default,
side by side in one run: every real trace repeated as a loop (tessera-replay --repeat) and every
synthetic workload. Steady state: the driver calls of the last step, host ns/op over the last
quarter of the steps.

usage: plan_bench.py BUILD_DIR OUT_PREFIX [--repeat N] [--quick]

Writes OUT_PREFIX.json (every replay's JSON) and OUT_PREFIX.md (the tables, and the issue's
targets with whether each is met), and prints the Markdown.
"""
import glob
import json
import os
import subprocess
import sys

# default: tessera's default policy, which is also what plan:True falls back on
CONFS = [("pytorch", "expandable_segments:False"), ("expandable", "expandable_segments:True"),
         ("defragment", "defragment:True"), ("default", "default"), ("plan", "plan:True")]
DRIFTING = ("batch_drift", "serving_kv", "transformer_varlen")


def replay(build, args):
    cmd = [os.path.join(build, "tools", "tessera-replay"), "--json", "--compare"] + args + \
        [c for _, c in CONFS]
    env = dict(os.environ, TESSERA_REPLAY_QUIET="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode not in (0, 3):
        sys.exit(f"plan_bench: {' '.join(cmd)} failed ({out.returncode}): {out.stderr[-500:]}")
    return cmd, json.loads(out.stdout)


def steady(build, path, steps, end_lines, conf):
    """Driver calls and time per step in steady state for a workload: the replay of the set-up
    and the first k = steps/2 steps, subtracted from the whole (exact step boundaries)."""
    k = steps // 2
    cut = path + f".first-{k}.csv"
    with open(path) as f, open(cut, "w") as g:
        for i, line in enumerate(f, 1):
            if i > end_lines[k]:
                break
            g.write(line)
    rs = []
    for p in (cut, path):
        out = subprocess.run([os.path.join(build, "tools", "tessera-replay"), "--json", "--conf",
                              conf, p], capture_output=True, text=True,
                             env=dict(os.environ, TESSERA_REPLAY_QUIET="1"))
        rs.append(json.loads(out.stdout))
    os.unlink(cut)
    n = steps - k
    return ((rs[1]["device_calls"] - rs[0]["device_calls"]) / n,
            (rs[1]["driver_ms"] - rs[0]["driver_ms"]) / n)


def mib(b):
    return f"{b / 2**20:,.0f} MiB" if b < 10 * 2**30 else f"{b / 2**30:,.2f} GiB"


def main():
    build, prefix = sys.argv[1], sys.argv[2]
    repeat = 8
    if "--repeat" in sys.argv:
        repeat = int(sys.argv[sys.argv.index("--repeat") + 1])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subjects = []
    for t in sorted(glob.glob(os.path.join(root, "tests", "data", "traces", "*.pickle"))):
        subjects.append((os.path.basename(t)[:-7], t, ["--repeat", str(repeat)], None))
    index = os.path.join(build, "workloads", "index.json")
    if os.path.exists(index):
        for w in json.load(open(index))["workloads"]:
            p = os.path.join(build, "workloads", w["name"] + ".csv")
            subjects.append((w["name"], p, ["--steps", str(w["steps"])], w))
    rows, raw, cmds = [], {}, []
    for name, path, args, w in subjects:
        cmd, res = replay(build, args + [path])
        cmds.append(" ".join(os.path.relpath(c, root) if c.startswith("/") else c for c in cmd))
        raw[name] = res
        for (label, conf), r in zip(CONFS, res):
            if w is not None:
                r["device_calls_per_step"], r["driver_ms_per_step"] = steady(
                    build, path, w["steps"], w["step_end_lines"], conf)
            rows.append((name, label, r))
    json.dump(raw, open(prefix + ".json", "w"), indent=1)

    md = ["| trace | policy | util | min device | calls grow | calls/step | calls last step | "
          "drv ms grow | drv ms/step | ns/op | ns/op steady | plan hits / misses / re-plans | "
          "range / lower bound |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label, r in rows:
        plan = "-"
        rng = "-"
        if label == "plan":
            plan = f"{r.get('plan_hits', 0)} / {r.get('plan_misses', 0)} / {r.get('plan_replans', 0)}"
            if r.get("plan_range_bytes"):
                rng = f"{mib(r['plan_range_bytes'])} / {mib(r['plan_lower_bound_bytes'])}"
        per_step = r.get("device_calls_per_step")
        ms_step = r.get("driver_ms_per_step")
        last = r.get("device_calls_last_step")
        md.append(f"| {name} | {label} | {100 * r['utilization']:.2f}% | "
                  f"{mib(r.get('min_capacity_bytes', 0))} | {r['device_calls_growth']} | "
                  f"{'-' if per_step is None else f'{per_step:.1f}'} | "
                  f"{'-' if last is None else last} | {r['driver_ms_growth']:.1f} | "
                  f"{'-' if ms_step is None else f'{ms_step:.3f}'} | {r['ns_per_op']:.0f} | "
                  f"{r.get('ns_per_op_tail', 0):.0f} | {plan} | {rng} |")

    # the targets
    by = {}
    for name, label, r in rows:
        by.setdefault(name, {})[label] = r
    md.append("")
    md.append("Targets (plan:True):")
    real = [n for n, _, _, w in subjects if w is None]
    for n in real:
        p, e = by[n]["plan"], by[n]["expandable"]
        ok = p["utilization"] >= 0.995 and p["utilization"] >= e["utilization"]
        md.append(f"- {n} (x{repeat}): utilization {100 * p['utilization']:.2f}% against 99.5% and "
                  f"expandable segments' {100 * e['utilization']:.2f}%: "
                  f"{'met' if ok else 'missed'}")
    for n in by:
        p = by[n]["plan"]
        s = p.get("device_calls_last_step")
        h, hp = p.get("ns_per_op_tail", 0), by[n]["pytorch"].get("ns_per_op_tail", 0)
        md.append(f"- {n}: steady-state driver calls (the last step) {'-' if s is None else s}"
                  f" (target 0: {'met' if s == 0 else 'missed' if s is not None else 'no steady step'});"
                  f" host {h:.0f} ns/op in the steady state against PyTorch's policy's {hp:.0f} "
                  f"({'met' if h <= hp else f'missed by {100 * (h / hp - 1):.0f}%'}; the whole run "
                  f"{p['ns_per_op']:.0f} against {by[n]['pytorch']['ns_per_op']:.0f})")
    for n in DRIFTING:
        if n in by:
            p, e = by[n]["plan"], by[n]["expandable"]
            ok = p.get("min_capacity_bytes", 0) <= e.get("min_capacity_bytes", 0)
            md.append(f"- {n} (drifting): smallest device {mib(p.get('min_capacity_bytes', 0))} "
                      f"against expandable segments' {mib(e.get('min_capacity_bytes', 0))}: "
                      f"{'met' if ok else 'missed'}")
    md.append("")
    md.append("Commands:")
    md += [f"- `{c}`" for c in cmds]
    text = "\n".join(md) + "\n"
    open(prefix + ".md", "w").write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
