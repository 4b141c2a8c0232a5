#!/usr/bin/env python3
"""report.py BUILD_DIR SHOWN_BUILD_DIR: turn scripts/bench.sh's raw outputs (BUILD/bench-raw/)
into Markdown (stdout) and BUILD/bench-results.json. Standard library only."""

import glob
import json
import os
import statistics
import sys

# where the replays' driver latencies came from (bench.sh --driver-costs), set by main()
costs_source = "published A100 latencies, devmodel/costs.c"

GiB = float(1 << 30)
MiB = float(1 << 20)

# "pytorch": PyTorch's policy; tessera's default is defragment:True,stitch_when:pressure (coarse
# handles), the last line the former default, a handle per page (docs/BENCHMARKS.md)
CONFS = ["pytorch", "expandable_segments:False,max_split_size_mb:128",
         "expandable_segments:False,max_split_size_mb:512", "expandable_segments:True",
         "defragment:True", "defragment:True,handle_policy:geometric",
         "defragment:True,stitch_when:pressure", "defragment:True,handle_policy:page",
         "defragment:True,handle_policy:page,stitch_when:pressure"]
DEFRAG = ["defragment:True", "defragment:True,handle_policy:geometric",
          "defragment:True,stitch_when:pressure", "defragment:True,handle_policy:page",
          "defragment:True,handle_policy:page,stitch_when:pressure"]


def size(v):
    return "%.2f GiB" % (v / GiB) if v >= GiB else "%.1f MiB" % (v / MiB)


def table_head(w, title, columns, rule):
    """A section title, a blank line and a Markdown table's header rows."""
    w(title)
    w("")
    w("| " + " | ".join(columns) + " |")
    w(rule)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def commands(raw):
    out = {}
    path = os.path.join(raw, "commands.txt")
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.rstrip("\n").partition("\t")
            out[k] = v
    return out


def main():
    bd, shown = sys.argv[1], sys.argv[2]
    global costs_source
    f = os.environ.get("TS_BENCH_DRIVER_COSTS")
    costs_source = (f"latencies: {f} (--driver-costs)" if f
                    else "latencies measured on an H100, tests/data/driver-costs/h100.txt")
    raw = os.path.join(bd, "bench-raw")
    cmds = commands(raw)
    machine = load_json(os.path.join(raw, "machine.json"))
    result = {"machine": machine, "commands": cmds}
    md = []
    w = md.append
    mline = ("machine: `nproc` = %d, CPU: %s (/proc/cpuinfo), kernel %s, clocksource %s; load "
             "average when the run started: %s; %s; tessera %s"
             % (machine["nproc"], machine["cpu"], machine["kernel"], machine["clocksource"],
                machine["loadavg_at_start"], machine["date"], machine["git"]))
    w("# tessera benchmark results")
    w("")
    w(mline)
    w("")
    w("Produced by `scripts/bench.sh` (raw outputs in `%s/bench-raw/`). No GPU was used: the "
      "core and the replays run over a model of the device, the LD_PRELOAD part over the "
      "simulated CUDA device." % shown)
    w("")
    goals = []

    # --- core ---------------------------------------------------------------------------------
    core_path = os.path.join(raw, "core.json")
    core = None
    if os.path.exists(core_path):
        core = load_json(core_path)
        result["core"] = core
        w("## 1. Core: cached malloc+free pair (bench-core)")
        w("")
        w("command: `%s`  " % cmds.get("core", "?"))
        w(mline)
        w("")
        p = core["params"]
        w("ns per pair. A sample is one batch of %d pairs timed with clock_gettime, divided by "
          "%d (batch-1 rows: every pair timed alone, the clock read included, and the clock "
          "ticks in steps of about 10 ns here). %d timed pairs per row (batch-1: a quarter); "
          "mix: %d live allocations (split between threads) with sizes drawn from the %d "
          "allocations of tests/data/traces. Two-thread rows: both threads on one allocator; "
          "percentiles over both threads' samples, 'aggregate' is wall time / all pairs. The "
          "whole list ran %d times, interleaved; each row is the round with the median p50, and "
          "'p50, all rounds' shows every round's p50 (sorted): their spread is the run-to-run "
          "noise." % (p["batch"], p["batch"], p["pairs"], p["live"], p["trace_sizes"],
                      p.get("repeat", 1)))
        w("")
        w("| scenario | config | threads | batch | p50 | p50, all rounds | p99 | p99.9 | mean | "
          "per-thread mean | aggregate ns/pair | device calls while timing | "
          "targets (p50 <= 60, p99 <= 1000) |")
        w("|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|")
        for r in core["results"]:
            verdict = ""
            if "p50_target_met" in r:
                verdict = ("p50 %s, p99 %s" % ("met" if r["p50_target_met"] else "MISSED",
                                               "met" if r["p99_target_met"] else "MISSED"))
            w("| %s | %s | %d | %d | %.1f | %s | %.1f | %.1f | %.1f | %s | %.1f | %d | %s |"
              % (r["scenario"], r["conf"], r["threads"], r["batch"], r["p50_ns"],
                 " ".join("%.1f" % x for x in r.get("rounds_p50_ns", [])), r["p99_ns"],
                 r["p999_ns"], r["mean_ns"], " / ".join("%.1f" % x for x in r["thread_mean_ns"]),
                 r["aggregate_ns_per_pair"], r["device_calls_while_timing"], verdict))
        w("")

        def find(scen, conf, threads=1, batch=None):
            for r in core["results"]:
                if (r["scenario"] == scen and r["conf"] == conf and r["threads"] == threads
                        and (batch is None or r["batch"] == batch)):
                    return r
            return None

        bsz = p["batch"]
        for scen in ("fixed 4 KiB", "fixed 64 MiB", "trace mix, live set"):
            for conf in ("default", "defragment:True"):
                r = find(scen, conf, 1, bsz)
                if r:
                    goals.append(dict(goal="p50 <= 60 ns per cached pair (%s, %s)" % (scen, conf),
                                      value="%.1f ns" % r["p50_ns"], met=r["p50_ns"] <= 60.0))
                    goals.append(dict(goal="p99 <= 1 us per cached pair (%s, %s)" % (scen, conf),
                                      value="%.1f ns" % r["p99_ns"], met=r["p99_ns"] <= 1000.0))
            d, f = find(scen, "default", 1, bsz), find(scen, "defragment:True", 1, bsz)
            if d and f:
                ratio = f["p50_ns"] / d["p50_ns"]
                dr = d.get("rounds_p50_ns") or [d["p50_ns"]]
                fr = f.get("rounds_p50_ns") or [f["p50_ns"]]
                # within noise: defragment's best round is no slower than default's median round
                met = (True if ratio <= 1.0
                       else "within noise" if min(fr) <= statistics.median(dr) else False)
                goals.append(dict(goal="no slower cached path: defragment:True p50 / default p50 "
                                       "(%s)" % scen,
                                  value="%.3f (%.1f vs %.1f ns; rounds %.1f-%.1f vs %.1f-%.1f)"
                                        % (ratio, f["p50_ns"], d["p50_ns"], min(fr), max(fr),
                                           min(dr), max(dr)),
                                  met=met))

    # --- replays ------------------------------------------------------------------------------
    replays = {}
    names = [k[len("replay:"):] for k in cmds if k.startswith("replay:")]
    for name in names:
        if not os.path.exists(os.path.join(raw, "replay-%s.1.json" % name)):
            continue
        passes = []
        for pf in sorted(glob.glob(os.path.join(raw, "replay-%s.*.json" % name))):
            arr = load_json(pf)
            if len(arr) != len(CONFS) + 1:
                raise SystemExit("report.py: %s: expected %d entries" % (pf, len(CONFS) + 1))
            passes.append(arr[1:])  # [0] is the warm-up column
        cap = None
        cf = os.path.join(raw, "replay80-%s.json" % name)
        if os.path.exists(cf):
            cap = load_json(cf)[1:]
        rows = []
        for i, conf in enumerate(CONFS):
            r = dict(passes[0][i])
            for ps in passes[1:]:
                for k in ("peak_allocated_bytes", "peak_reserved_bytes", "device_calls",
                          "min_capacity_bytes"):
                    if ps[i].get(k) != r.get(k):
                        raise SystemExit("report.py: %s %s: %s differs between passes"
                                         % (name, conf, k))
            r["ns_per_op_passes"] = [ps[i]["ns_per_op"] for ps in passes]
            r["ns_per_op"] = min(r["ns_per_op_passes"])
            if cap:
                r["cap80"] = cap[i]
            rows.append(r)
        replays[name] = rows
    result["replay"] = replays

    if replays:
        w("## 2. Replays: memory, device operations, driver calls, host time (tessera-replay)")
        w("")
        w("Every configuration replays the same trace from an empty device in one process, side "
          "by side. 'min capacity' is the smallest device (2 MiB steps) the trace runs on without "
          "an out-of-memory error (`--compare` bisects it); 'margin' is min capacity / peak "
          "allocated - 1. 'driver calls' counts every backend call that reaches the driver "
          "(segment alloc/free, VM reserve/release/create/destroy/map/unmap, synchronise). "
          "'ns/op' is host time per replayed event (the lower of the passes; the first column "
          "of each run, a warm-up `default`, is dropped). Peak reserved on an unlimited "
          "device is what the policy would hold if memory never ran out (PyTorch's allocator "
          "only gives cached segments back when an allocation fails); the 80 GiB columns "
          "replay the trace on an 80 GiB device.")
        w("")
        for name, rows in replays.items():
            r0 = rows[0]
            w("### %s" % name)
            w("")
            w("command: `%s` (and with `--capacity 80G`)  " % cmds.get("replay:" + name, "?"))
            w(mline)
            w("")
            w("%d events, %d allocations. Peak requested %s."
              % (r0["events"], r0["allocations"], size(r0["peak_requested_bytes"])))
            w("")
            w("| configuration | peak allocated | peak reserved | utilization | min capacity | "
              "margin | device allocs / frees | driver calls | est. driver ms growing | ns/op | "
              "80 GiB: peak reserved | 80 GiB: utilization | 80 GiB: retries / OOMs |")
            w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                c = r.get("cap80")
                margin = r["min_capacity_bytes"] / r["peak_allocated_bytes"] - 1
                w("| %s | %s | %s | %.2f%% | %s | %.2f%% | %d / %d | %d | %.1f | %.1f | %s | %s "
                  "| %s |"
                  % (r["conf"], size(r["peak_allocated_bytes"]), size(r["peak_reserved_bytes"]),
                     100 * r["utilization"], size(r["min_capacity_bytes"]), 100 * margin,
                     r["num_device_alloc"], r["num_device_free"], r["device_calls"],
                     r["driver_ms_growth"], r["ns_per_op"],
                     size(c["peak_reserved_bytes"]) if c else "-",
                     "%.2f%%" % (100 * c["utilization"]) if c else "-",
                     "%d / %d" % (c["num_alloc_retries"], c["num_ooms"]) if c else "-"))
            w("")
            # goals for this trace
            by = {r["conf"]: r for r in rows}
            exp = by["expandable_segments:True"]
            for conf in DEFRAG:
                r = by[conf]
                margin = r["min_capacity_bytes"] / r["peak_allocated_bytes"] - 1
                # the memory goals are set for traces above 1 GiB
                scope = r0["peak_allocated_bytes"] > GiB
                goals.append(dict(target="utilization >= 99% and >= expandable's", trace=name,
                                  conf=conf,
                                  goal="utilization >= 99%% and >= expandable segments "
                                       "(%s, %s)" % (name, conf),
                                  value="%.2f%% (expandable %.2f%%)"
                                        % (100 * r["utilization"], 100 * exp["utilization"]),
                                  met=(r["utilization"] >= 0.99
                                       and r["utilization"] >= exp["utilization"])
                                  if scope else "n/a (below 1 GiB)"))
                goals.append(dict(target="smallest device <= 1.005x peak allocated", trace=name,
                                  conf=conf,
                                  goal="min capacity within 0.5%% of peak allocated (%s, %s)"
                                       % (name, conf),
                                  value="+%.2f%% (expandable +%.2f%%)"
                                        % (100 * margin,
                                           100 * (exp["min_capacity_bytes"]
                                                  / exp["peak_allocated_bytes"] - 1)),
                                  met=margin <= 0.005 if scope else "n/a (below 1 GiB)"))
                goals.append(dict(target="driver time growing <= 1.5x expandable's", trace=name,
                                  conf=conf,
                                  goal="est. driver time while growing <= 1.5x expandable "
                                       "segments' (%s, %s)" % (name, conf),
                                  value="%.1f ms vs %.1f ms" % (r["driver_ms_growth"],
                                                                exp["driver_ms_growth"]),
                                  met=r["driver_ms_growth"] <= 1.5 * exp["driver_ms_growth"]))
                dflt = by["pytorch"]
                goals.append(dict(target="host ns/op <= 2x the default's", trace=name, conf=conf,
                                  goal="host ns per replayed op <= 2x the default's (%s, %s)"
                                       % (name, conf),
                                  value="%.1f vs %.1f" % (r["ns_per_op"], dflt["ns_per_op"]),
                                  met=r["ns_per_op"] <= 2 * dflt["ns_per_op"]))

        w("### Host time per replayed event (ns/op), all traces")
        w("")
        w("| trace | " + " | ".join(CONFS) + " |")
        w("|---|" + "---:|" * len(CONFS))
        for name, rows in replays.items():
            w("| %s | %s |" % (name, " | ".join("%.1f" % r["ns_per_op"] for r in rows)))
        w("")
        w("### Driver calls, all traces")
        w("")
        w("| trace | " + " | ".join(CONFS) + " |")
        w("|---|" + "---:|" * len(CONFS))
        for name, rows in replays.items():
            w("| %s | %s |" % (name, " | ".join("%d" % r["device_calls"] for r in rows)))
        w("")

    # --- attribution ---------------------------------------------------------------------------
    ap = os.path.join(raw, "attribution.jsonl")
    if os.path.exists(ap) and os.path.getsize(ap):
        recs = [json.loads(l) for l in open(ap) if l.strip()]
        result["attribution"] = recs
        w("### Where the driver calls come from")
        w("")
        w("command: `%s` for each configuration below  " % cmds.get("attribution", "?"))
        w(mline)
        w("")
        w("Unlimited device. 'maps' and 'unmaps' are cuMemMap/cuMemUnmap; 'other' is everything "
          "else that reaches the driver (cuMemCreate/Release, address reserve/free, plain "
          "segment alloc/free, synchronise). `defragment:True,stitching:False` isolates the cost "
          "of defragment's finer pages (one 2 MiB handle per page) from that of stitching.")
        w("")
        w("| trace | configuration | driver calls | maps | unmaps | other | stitches | "
          "device allocs / frees | peak reserved | utilization |")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in recs:
            other = r["device_calls"] - r["vm_maps"] - r["vm_unmaps"]
            w("| %s | %s | %d | %d | %d | %d | %d | %d / %d | %s | %.2f%% |"
              % (r["name"], r["conf"], r["device_calls"], r["vm_maps"], r["vm_unmaps"], other,
                 r["num_stitches"], r["num_device_alloc"], r["num_device_free"],
                 size(r["peak_reserved_bytes"]), 100 * r["utilization"]))
        w("")

    # --- steady state ---------------------------------------------------------------------------
    sp = os.path.join(raw, "steady.jsonl")
    if os.path.exists(sp) and os.path.getsize(sp):
        recs = [json.loads(l) for l in open(sp) if l.strip()]
        table = {}
        for r in recs:
            table.setdefault(r["workload"], {}).setdefault(r["conf"], {})[r["steps_replayed"]] = r
        steady = []
        w("## 3. Driver calls per step in steady state (synthetic workloads)")
        w("")
        w("command: `%s`  " % cmds.get("steady", "?"))
        w(mline)
        w("")
        w("Method: the generator records where every step ends (`index.json`, "
          "`step_end_lines`). A replay is deterministic and causal, so replaying the first k "
          "steps makes exactly the driver calls the full replay makes in those steps. With N "
          "steps and k = N/2: steady calls per step = (calls(all N) - calls(first k)) / (N - k). "
          "'set-up + step 1' is the cost of the first step (parameters, first growth).")
        w("")
        w("| workload | configuration | set-up + step 1 | first k steps | all N steps | "
          "steady calls per step (last N-k) | est. driver ms per step |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for wl, confs in table.items():
            for conf in CONFS:
                if conf not in confs:
                    continue
                parts = confs[conf]
                ks = sorted(parts)
                one, k, n = ks[0], ks[1], ks[-1]
                per = (parts[n]["device_calls"] - parts[k]["device_calls"]) / float(n - k)
                ms = (parts[n]["driver_ms"] - parts[k]["driver_ms"]) / float(n - k)
                steady.append(dict(workload=wl, conf=conf, steps=n, k=k,
                                   calls_first_step=parts[one]["device_calls"],
                                   calls_first_k=parts[k]["device_calls"],
                                   calls_all=parts[n]["device_calls"], steady_per_step=per,
                                   steady_driver_ms_per_step=ms))
                w("| %s | %s | %d | %d (k=%d) | %d (N=%d) | %.2f | %.3f |"
                  % (wl, conf, parts[one]["device_calls"], parts[k]["device_calls"], k,
                     parts[n]["device_calls"], n, per, ms))
        w("")
        result["steady"] = steady
        by = {(s["workload"], s["conf"]): s for s in steady}
        for wl in table:
            e = by.get((wl, "expandable_segments:True"))
            for conf in DEFRAG:
                s = by.get((wl, conf))
                if e and s:
                    goals.append(dict(target="driver calls per step <= expandable's", trace=wl,
                                      conf=conf,
                                      goal="driver calls per step <= expandable segments (%s, %s)"
                                           % (wl, conf),
                                      value="%.2f vs %.2f" % (s["steady_per_step"],
                                                              e["steady_per_step"]),
                                      met=s["steady_per_step"] <= e["steady_per_step"]))

    # --- one table: every trace and workload, memory against driver time ----------------------
    if replays:
        sby = {(s["workload"], s["conf"]): s for s in result.get("steady", [])}
        w("### Memory against driver time, every trace and workload")
        w("")
        w("Unlimited device, from the tables above. 'smallest device' is min capacity / peak "
          "allocated - 1; 'driver ms growing' is the estimated driver time until memory stopped "
          "growing (" + costs_source + "); the per-step columns are the "
          "steady state of section 3 (synthetic workloads only).")
        w("")
        w("| trace | configuration | smallest device | utilization | driver ms growing | "
          "driver ms per step | driver calls per step | ns/op |")
        w("|---|---|---:|---:|---:|---:|---:|---:|")
        for name, rows in replays.items():
            for r in rows:
                st = sby.get((name, r["conf"]))
                w("| %s | %s | +%.2f%% | %.2f%% | %.1f | %s | %s | %.1f |"
                  % (name, r["conf"], 100 * (r["min_capacity_bytes"] / r["peak_allocated_bytes"] - 1),
                     100 * r["utilization"], r["driver_ms_growth"],
                     "%.3f" % st["steady_driver_ms_per_step"] if st else "-",
                     "%.2f" % st["steady_per_step"] if st else "-", r["ns_per_op"]))
        w("")

    # --- churn --------------------------------------------------------------------------------
    cp = os.path.join(raw, "churn.jsonl")
    if os.path.exists(cp) and os.path.getsize(cp):
        runs = {}
        for line in open(cp):
            if not line.strip():
                continue
            r = json.loads(line)
            kv = dict(x.split("=", 1) for x in r["result"].split()[1:] if "=" in x)
            runs.setdefault((r["workload"], r["label"]), []).append(kv)
        churn = []
        w("## 4. The LD_PRELOAD path on the simulated device (tests/programs/churn)")
        w("")
        w(mline)
        w("")
        w("ops/s is churn's own figure (iterations per second; each iteration is a cudaMalloc "
          "or cudaFree plus the program's cudaMemset/cudaMemcpy writes and read-back checks), "
          "the median of the repetitions. **The simulator's cudaMalloc/cudaFree are host "
          "mmap/munmap-style operations and its copies are memcpy: its costs are not a GPU's, so "
          "these ratios measure tessera's interposed path against the simulator's, not a "
          "speed-up on a GPU.** 'small' uses 4 KiB-or-less allocations so that the allocator "
          "path, not the data copies, dominates; 'default' is churn's default size mix (up to "
          "64 MiB, every byte written and read back).")
        w("")
        w("| sizes | run | ops/s (median) | reps | ratio to no tessera | ratio to tessera | "
          "command |")
        w("|---|---|---:|---:|---:|---:|---|")
        for wl in ("small", "default"):
            base = runs.get((wl, "no tessera"))
            ts = runs.get((wl, "tessera"))
            med = lambda rs: statistics.median(float(x.get("ops_per_s", 0)) for x in rs)
            for label in ("no tessera", "tessera", "tessera + TESSERA_TRACE",
                          "tessera defragment:True"):
                rs = runs.get((wl, label))
                if not rs:
                    continue
                ok = all(x.get("status") == "ok" for x in rs)
                m = med(rs)
                r1 = m / med(base) if base else 0
                r2 = m / med(ts) if ts else 0
                churn.append(dict(sizes=wl, run=label, ops_per_s=m, reps=len(rs), ok=ok,
                                  ratio_to_no_tessera=r1, ratio_to_tessera=r2,
                                  all_ops_per_s=[float(x.get("ops_per_s", 0)) for x in rs],
                                  command=cmds.get("churn:%s:%s" % (wl, label), "?")))
                w("| %s | %s%s | %.0f | %d | %.2f | %.3f | `%s` |"
                  % (wl, label, "" if ok else " (FAILED)", m, len(rs), r1, r2,
                     cmds.get("churn:%s:%s" % (wl, label), "?")))
        w("")
        result["churn"] = churn

    # --- goals ----------------------------------------------------------------------------------
    if goals:
        table_head(w, "## Goals", ["goal", "measured", "met"], "|---|---|---|")
        for g in goals:
            m = g["met"]
            w("| %s | %s | %s |" % (g["goal"], g["value"],
                                    "yes" if m is True else "**no**" if m is False else m))
        w("")
        result["goals"] = goals
        # per configuration: which traces miss which target (the decision on the default)
        tagged = [g for g in goals if "target" in g]
        if tagged:
            table_head(w, "### Targets per configuration",
                       ["configuration", "target", "met", "missed on"], "|---|---|---:|---|")
            for conf in DEFRAG:
                targets = []
                for g in tagged:
                    if g["conf"] == conf and g["target"] not in targets:
                        targets.append(g["target"])
                for t in targets:
                    gs = [g for g in tagged if g["conf"] == conf and g["target"] == t]
                    scoped = [g for g in gs if g["met"] in (True, False)]
                    miss = [g for g in scoped if g["met"] is False]
                    w("| %s | %s | %d of %d | %s |"
                      % (conf, t, len(scoped) - len(miss), len(scoped),
                         ", ".join("%s (%s)" % (g["trace"], g["value"]) for g in miss) or "-"))
            w("")

    with open(os.path.join(bd, "bench-results.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    sys.stdout.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
