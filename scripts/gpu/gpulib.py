#!/usr/bin/env python3
"""Helpers for scripts/gpu/run-all.sh (standard library only; never imports torch).

  gpulib.py report RECORDS OUTDIR          write OUTDIR/gpu-results.md and gpu-results.json
  gpulib.py stats-summary DIR TESSERA_STAT  one line of key=value from the stats pages in DIR
  gpulib.py json-get FILE KEY [DEFAULT]     print one top-level value of a JSON file
  gpulib.py torch-compare RECORDS           print the loss-checksum checks (PASS/FAIL lines)
  gpulib.py selftest                        write a report from made-up records and check it

RECORDS is the file run-all.sh appends to: one record per line, fields `key=value` separated
by the ASCII unit separator (0x1f). Every record has a `type`:
  meta      facts about the run (command, date, GPU, versions)
  step      one of the steps a-g: name, status (PASS/FAIL/SKIP), reason, seconds
  build     one sample program built by nvcc: variant, program, status, seconds, reason
  prog      one run of a sample program (step d): build, program, args, mode, rc, status,
            reason, seconds, result (its RESULT line), allocs (allocate rows in TESSERA_TRACE),
            stats (a stats-summary line), msgs (tessera's stderr lines)
  churn     one throughput run (step e): variant, threads, mode, rc, status, reason, seconds,
            ops_per_s, result
  torch     one training mode (step f): mode, label, env, rc, status, reason, seconds, json
  maxbatch  one maximum-batch search (step f): mode, rc, status, reason, seconds, json
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

SEP = "\x1f"

TORCH_MODES = [
    ("native", "1", "torch caching allocator"),
    ("expandable", "2", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    ("nocache", "3", "PYTORCH_NO_CUDA_MEMORY_CACHING=1"),
    ("tessera", "4", "PYTORCH_NO_CUDA_MEMORY_CACHING=1 + LD_PRELOAD=libtessera.so"),
    ("tessera-defrag", "5",
     "PYTORCH_NO_CUDA_MEMORY_CACHING=1 + LD_PRELOAD=libtessera.so + TESSERA_ALLOC_CONF=defragment:True"),
    ("tessera-torch", "6",
     "TESSERA_TORCH=1 + tessera's sitecustomize: PyTorch's pluggable allocator over libtessera.so"),
]


# ---------------------------------------------------------------------------------------------
# records

def read_records(path):
    recs = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                r = {}
                for field in line.split(SEP):
                    k, _, v = field.partition("=")
                    r[k] = v
                recs.append(r)
    except FileNotFoundError:
        pass
    return recs


def load_json(path):
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fnum(x, default=None):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def gib(n):
    if n is None or n == "":
        return "-"
    try:
        return "%.2f GiB" % (float(n) / (1 << 30))
    except (TypeError, ValueError):
        return str(n)


def md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(md_escape(c) for c in r) + " |")
    return "\n".join(out)


def result_fields(line):
    out = {}
    for tok in (line or "").split()[1:]:
        k, eq, v = tok.partition("=")
        if eq:
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# torch checks

def torch_results(recs):
    """mode -> (record, json or None)"""
    res = {}
    for r in recs:
        if r.get("type") == "torch":
            res[r.get("mode")] = (r, load_json(r.get("json")))
    return res


def torch_checks(recs):
    """The issue's requirement: tessera's loss checksums (modes 4, 5) equal mode 3's.
    Returns a list of (status, name, detail); informational comparisons use INFO."""
    tr = torch_results(recs)
    checks = []

    def cs(mode):
        r, j = tr.get(mode, (None, None))
        if not j or not j.get("ok") or not j.get("complete"):
            return None
        return j.get("loss_checksum")

    # the reference: the run with no cache at all; PyTorch's own allocator where that one did
    # not complete (cut by the time budget: every step is slower without a cache)
    ref = "nocache" if cs("nocache") is not None or cs("native") is None else "native"
    base = cs(ref)
    for mode in ("tessera", "tessera-defrag", "tessera-torch", "tessera-floor"):
        if mode in ("tessera-torch", "tessera-floor") and mode not in tr:
            continue  # modes added later: absent from older runs and selftests
        name = "loss checksum %s == %s" % (mode, ref)
        c = cs(mode)
        skipped = (tr.get(mode, ({}, None))[0] or {}).get("status") == "SKIP"
        if skipped:
            checks.append(("SKIP", name, "mode %s did not run" % mode))
        elif base is None:
            checks.append(("FAIL" if mode in tr else "SKIP", name,
                           "neither mode 3 (nocache) nor mode 1 (native) completed: nothing to compare with"))
        elif c is None:
            checks.append(("FAIL" if mode in tr else "SKIP", name,
                           "mode %s did not complete" % mode))
        elif c == base:
            checks.append(("PASS", name, "identical (%s)" % c[:16]))
        else:
            checks.append(("FAIL", name, "%s != %s%s" % (c[:16], base[:16],
                                                          first_diff(tr, mode, ref))))
    for mode in ("native", "expandable"):
        c = cs(mode)
        if base is not None and c is not None and mode != ref:
            checks.append(("INFO", "loss checksum %s == %s" % (mode, ref),
                           "identical" if c == base else "differs: %s vs %s%s" % (
                               c[:16], base[:16], first_diff(tr, mode, ref))))
    checks.extend(floor_checks(tr))
    return checks


def floor_checks(tr):
    """tessera's default at the floor (INFO): peak reserved against the no-cache run's (what the
    program needs with no caching at all), target at most +1%, and the median step against
    PyTorch's allocator's, target within 1%."""
    def done(mode):
        j = tr.get(mode, (None, None))[1]
        return j if j and j.get("ok") and j.get("complete") else None
    out = []
    t, floor, native = done("tessera"), done("nocache"), done("native")
    # one scale for both: the sampled nvidia-smi peak where both runs have it (the no-cache run
    # has no allocator counters; tessera's stats page leaves out what the driver holds besides)
    key, unit, scale = "peak_reserved", "stats page against nvidia-smi", 1
    if t and floor and t.get("smi_peak_delta_mib") and floor.get("smi_peak_delta_mib"):
        key, unit, scale = "smi_peak_delta_mib", "nvidia-smi peaks", 1 << 20
    if t and floor and t.get(key) and floor.get(key):
        ratio = t[key] / floor[key]
        out.append(("INFO", "tessera peak reserved <= nocache floor + 1%",
                    "%s: %.2f GiB against %.2f GiB (%+.2f%%, %s)" % (
                        "met" if ratio <= 1.01 else "missed", t[key] * scale / 2**30,
                        floor[key] * scale / 2**30, 100 * (ratio - 1), unit)))
    if t and native and t.get("step_ms_median") and native.get("step_ms_median"):
        ratio = t["step_ms_median"] / native["step_ms_median"]
        out.append(("INFO", "tessera median step within 1% of native",
                    "%s: %.2f ms against %.2f ms (%+.2f%%)" % (
                        "met" if abs(ratio - 1) <= 0.01 else "missed", t["step_ms_median"],
                        native["step_ms_median"], 100 * (ratio - 1))))
    return out


def first_diff(tr, m1, m2):
    a = (tr.get(m1, (None, None))[1] or {}).get("losses") or []
    b = (tr.get(m2, (None, None))[1] or {}).get("losses") or []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return " (first difference at step %d: %s vs %s)" % (i, float.fromhex(x),
                                                                  float.fromhex(y))
    return ""


def torch_mode_verdict(rec, j):
    """PASS/FAIL of one training run, with the reason."""
    if rec.get("status") in ("SKIP",):
        return "SKIP", rec.get("reason", "")
    cut = rec.get("cut") == "1"  # its time was limited by the budget, not by its own cap
    if not j and cut and rec.get("rc") in ("124", "137"):
        return "SKIP", "cut short by the time budget"
    if not j:
        return "FAIL", rec.get("reason") or "no result (exit %s)" % rec.get("rc")
    if not j.get("ok"):
        return "FAIL", j.get("error", "failed")
    if not j.get("complete"):
        return ("SKIP" if cut else "FAIL"), "stopped after %s of %s steps (time cap%s)" % (
            j.get("steps_done"), j.get("steps"), ", limited by the budget" if cut else "")
    if rec.get("mode", "").startswith("tessera"):
        t = j.get("tessera") or {}
        if t.get("error"):
            return "FAIL", "tessera stats: " + t["error"]
        if not t.get("num_alloc_calls"):
            return "FAIL", "tessera served no allocation (num_alloc_calls = 0)"
    return "PASS", ""


# ---------------------------------------------------------------------------------------------
# the report

def verdicts(recs):
    """Every PASS/FAIL/SKIP item: (section, name, status, reason)."""
    items = []
    for r in recs:
        t = r.get("type")
        if t == "step":
            continue
        if t == "build":
            items.append(("c", "nvcc %s/%s" % (r.get("variant"), r.get("program")),
                          r.get("status"), r.get("reason", "")))
        elif t == "prog":
            items.append(("d", "%s/%s %s [%s]" % (r.get("build"), r.get("program"),
                                                  r.get("args", ""), r.get("mode")),
                          r.get("status"), r.get("reason", "")))
        elif t == "churn":
            items.append(("e", "churn %s x%s [%s]" % (r.get("variant"), r.get("threads"),
                                                      r.get("mode")),
                          r.get("status"), r.get("reason", "")))
        elif t == "torch":
            st, why = torch_mode_verdict(r, load_json(r.get("json")))
            items.append(("f", "torch %s" % r.get("mode"), st, why))
        elif t == "maxbatch":
            items.append(("f", "max batch %s" % r.get("mode"), r.get("status"),
                          r.get("reason", "")))
        elif t == "lib":
            items.append(("b", "build %s" % r.get("what"), r.get("status"), r.get("reason", "")))
    for st, name, detail in torch_checks(recs):
        if st != "INFO":
            items.append(("f", name, st, detail))
    return items


def write_report(records_path, outdir):
    recs = read_records(records_path)
    meta = {}
    for r in recs:
        if r.get("type") == "meta":
            meta.update({k: v for k, v in r.items() if k != "type"})
    steps = [r for r in recs if r.get("type") == "step"]
    items = verdicts(recs)
    fails = [i for i in items if i[2] not in ("PASS", "SKIP")]
    skips = [i for i in items if i[2] == "SKIP"]
    step_fail = [s for s in steps if s.get("status") == "FAIL"]
    overall = "FAIL" if fails or step_fail else "PASS"
    npass = sum(1 for i in items if i[2] == "PASS")

    L = []
    L.append("# tessera on a real GPU: results")
    L.append("")
    L.append("**OVERALL: %s** (%d checks passed, %d failed, %d skipped%s)" % (
        overall, npass, len(fails), len(skips),
        "; partial: the run did not finish" if meta.get("finished") != "1" else ""))
    L.append("")
    for k, label in (("command", "Command"), ("date", "Date (UTC)"), ("host", "Host"),
                     ("duration_s", "Duration (s)"), ("smi_L", "nvidia-smi -L"),
                     ("gpu", "GPU (name, driver, memory, compute capability)"),
                     ("gpu_modes", "GPU modes"), ("cuda_driver", "CUDA (driver)"), ("nvcc", "nvcc"),
                     ("cuda_home", "CUDA toolkit"), ("torch", "torch"),
                     ("torch_cudart", "torch's libcudart (ldd libc10_cuda.so)"),
                     ("python", "python"), ("meson", "meson"), ("ninja", "ninja"),
                     ("commit", "tessera commit"), ("gpu_other_procs", "other GPU processes"),
                     ("quick", "--quick"), ("budget_s", "time budget (s)"),
                     ("env_cleared", "environment cleared")):
        if meta.get(k):
            L.append("- %s: `%s`" % (label, meta[k]))
    L.append("")

    # steps
    L.append("## Steps")
    L.append("")
    L.append(table(["step", "status", "seconds", "reason"],
                   [[s.get("name"), s.get("status"), s.get("seconds", ""), s.get("reason", "")]
                    for s in steps]))
    L.append("")
    if fails:
        L.append("### Failures")
        L.append("")
        for sec, name, st, why in fails:
            L.append("- %s: %s %s: %s" % (st, sec, name, why))
        L.append("")

    # b
    libs = [r for r in recs if r.get("type") == "lib"]
    if libs:
        L.append("## b. Build")
        L.append("")
        L.append(table(["what", "status", "seconds", "how / reason"],
                       [[r.get("what"), r.get("status"), r.get("seconds", ""),
                         r.get("reason", "")] for r in libs]))
        L.append("")

    # c
    builds = [r for r in recs if r.get("type") == "build"]
    if builds:
        L.append("## c. Sample programs built with nvcc")
        L.append("")
        progs = sorted({r.get("program") for r in builds})
        by = {(r.get("variant"), r.get("program")): r for r in builds}
        rows = []
        for p in progs:
            row = [p]
            for v in ("shared", "static"):
                r = by.get((v, p))
                row.append("-" if not r else r.get("status") + (
                    " (%s)" % r.get("reason") if r.get("reason") else ""))
            rows.append(row)
        L.append(table(["program", "-cudart=shared", "static cudart"], rows))
        L.append("")

    # d
    runs = [r for r in recs if r.get("type") == "prog"]
    if runs:
        L.append("## d. Correctness of the sample programs")
        L.append("")
        L.append("One row per run. `allocs`: `allocate` rows in the run's TESSERA_TRACE (> 0 "
                 "proves tessera served the program; for the static cudart build it proves the "
                 "dlsym + cuGetProcAddress path). `tessera stats`: the run's stats page, kept at "
                 "exit (TESSERA_STATS_KEEP=1).")
        L.append("")
        rows = []
        for r in runs:
            rows.append([r.get("build"), r.get("program"), r.get("args", ""), r.get("mode"),
                         r.get("rc", ""), r.get("status"), r.get("seconds", ""),
                         r.get("allocs", "") if r.get("mode") != "native" else "",
                         (r.get("result", "") or "")[7:],
                         r.get("stats", ""), r.get("reason", "")])
        L.append(table(["build", "program", "args", "mode", "exit", "verdict", "s", "allocs",
                        "RESULT", "tessera stats", "reason"], rows))
        L.append("")
        seeds = [r for r in runs if r.get("program", "").startswith("seed_")
                 and r.get("status") in ("PASS", "FAIL")]
        if seeds:
            L.append("Seed experiments, final request:")
            L.append("")
            rows = []
            for r in seeds:
                f = result_fields(r.get("result"))
                rows.append([r.get("build"), r.get("program"), r.get("args", ""), r.get("mode"),
                             f.get("final_alloc", "-"), gib(f.get("bytes")),
                             gib(f.get("live_bytes")), gib(f.get("free_before")),
                             gib(f.get("largest_hole")) if "largest_hole" in f else "-"])
            L.append(table(["build", "program", "args", "mode", "final request", "size",
                            "live", "free before", "largest hole"], rows))
            L.append("")

    # e
    churn = [r for r in recs if r.get("type") == "churn"]
    if churn:
        L.append("## e. Allocation churn throughput")
        L.append("")
        L.append("ops/s from churn's RESULT line (allocations + frees per second, each with its "
                 "data written and verified).")
        L.append("")
        keys = []
        for r in churn:
            k = (r.get("variant"), r.get("threads"), r.get("args", ""))
            if k not in keys:
                keys.append(k)
        rows = []
        for k in keys:
            nat = next((r for r in churn if (r.get("variant"), r.get("threads"),
                                             r.get("args", "")) == k
                        and r.get("mode") == "native"), {})
            tes = next((r for r in churn if (r.get("variant"), r.get("threads"),
                                             r.get("args", "")) == k
                        and r.get("mode") == "tessera"), {})
            a, b = fnum(nat.get("ops_per_s")), fnum(tes.get("ops_per_s"))
            ratio = "%.2fx" % (b / a) if a and b else "-"
            rows.append([k[0], k[1], k[2], nat.get("ops_per_s") or nat.get("status", "-"),
                         tes.get("ops_per_s") or tes.get("status", "-"), ratio,
                         "%s / %s" % (nat.get("status", "-"), tes.get("status", "-"))])
        L.append(table(["variant", "threads", "args", "native ops/s", "tessera ops/s",
                        "tessera / native", "verdicts"], rows))
        L.append("")

    # f
    tr = torch_results(recs)
    if tr:
        L.append("## f. PyTorch training")
        L.append("")
        any_j = next((j for _, j in tr.values() if j), None)
        if any_j:
            m = any_j.get("model", {})
            L.append("Model: %s layers, d_model %s, %s heads, vocab %s; batch %s; %s steps "
                     "(median over the %s after %s warm-up steps); sequence lengths %s..%s "
                     "from a seeded schedule. Peak memory: torch's max_memory_reserved/"
                     "allocated in modes 1-2; tessera's stats page (reserved_bytes.all.peak, "
                     "allocated_bytes.all.peak via tessera-stat --json <pid>) in modes 4-5; in "
                     "mode 3 nothing tracks it, so the column `smi peak` (nvidia-smi "
                     "memory.used sampled every 20 ms, minus its value after CUDA "
                     "initialisation) is the source; it is shown for every mode." % (
                         m.get("layers"), m.get("d_model"), m.get("heads"), m.get("vocab"),
                         any_j.get("batch"), any_j.get("steps"),
                         max(0, (any_j.get("steps") or 0) - (any_j.get("warmup") or 0)),
                         any_j.get("warmup"), m.get("min_len"), m.get("max_len")))
            L.append("")
        rows = []
        for mode, num, label in TORCH_MODES:
            if mode not in tr:
                continue
            r, j = tr[mode]
            st, why = torch_mode_verdict(r, j)
            j = j or {}
            t = j.get("tessera") or {}
            if mode.startswith("tessera"):
                retries = t.get("num_alloc_retries", "-")
            else:
                retries = j.get("torch_num_alloc_retries", "-") if j.get("torch_caching") else "-"
            rows.append([num, mode, label, st, "%s/%s" % (j.get("steps_done", "-"),
                                                          j.get("steps", "-")),
                         "%.2f" % j["step_ms_median"] if "step_ms_median" in j else "-",
                         "%.2f" % j["timed_total_s"] if "timed_total_s" in j else "-",
                         gib(j.get("peak_reserved")), gib(j.get("peak_allocated")),
                         j.get("peak_source", "-"),
                         "%s MiB" % j["smi_peak_delta_mib"] if "smi_peak_delta_mib" in j else "-",
                         (j.get("loss_checksum") or "-")[:16],
                         t.get("num_alloc_calls", "-") if mode.startswith("tessera") else "",
                         retries, why])
        L.append(table(["#", "mode", "setting", "verdict", "steps", "median step ms",
                        "timed total s", "peak reserved", "peak allocated", "peak source",
                        "smi peak", "loss checksum", "tessera alloc calls", "alloc retries",
                        "reason"], rows))
        L.append("")
        for mode, (r, j) in tr.items():
            for w in (j or {}).get("nondeterminism_warnings") or []:
                L.append("- nondeterminism warning in mode %s: %s" % (mode, w))
        if any((j or {}).get("nondeterminism_warnings") for _, j in tr.values()):
            L.append("")
        L.append("Correctness (loss checksums: every step's loss, float.hex, SHA-256):")
        L.append("")
        for st, name, detail in torch_checks(recs):
            L.append("- %s: %s: %s" % (st, name, detail))
        L.append("")
        mbs = [r for r in recs if r.get("type") == "maxbatch"]
        if mbs:
            L.append("Largest batch that trains (binary search, each probe a few steps at "
                     "lengths including the longest, in a fresh process):")
            L.append("")
            rows = []
            for r in mbs:
                j = load_json(r.get("json")) or {}
                rows.append([r.get("mode"), r.get("status"), j.get("max_fit", "-"),
                             j.get("first_oom", "-") if j.get("first_oom") is not None else "-",
                             "yes" if j.get("converged") else "no",
                             j.get("stop_reason", r.get("reason", "")),
                             " ".join("%s:%s" % (p[0], p[1]) for p in j.get("probes", [])),
                             j.get("seconds", r.get("seconds", ""))])
            L.append(table(["mode", "verdict", "largest fitting", "smallest failing",
                            "converged", "stopped", "probes (batch:result)", "s"], rows))
            L.append("")

    L.append("## All checks")
    L.append("")
    for sec, name, st, why in items:
        L.append("- %s: %s %s%s" % (st, sec, name, (": " + why) if why else ""))
    L.append("")
    md = "\n".join(L) + "\n"

    doc = {"overall": overall, "passed": npass, "failed": len(fails), "skipped": len(skips),
           "meta": meta, "steps": steps,
           "checks": [{"section": s, "name": n, "status": st, "reason": w}
                      for s, n, st, w in items],
           "builds": builds, "runs": runs, "churn": churn,
           "torch": {"modes": {m: {"record": r, "result": j} for m, (r, j) in tr.items()},
                     "checks": [{"status": s, "name": n, "detail": d}
                                for s, n, d in torch_checks(recs)],
                     "maxbatch": [dict(r, result=load_json(r.get("json")))
                                  for r in recs if r.get("type") == "maxbatch"]}}
    os.makedirs(outdir, exist_ok=True)
    for name, text in (("gpu-results.md", md),
                       ("gpu-results.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")):
        tmp = os.path.join(outdir, "." + name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(outdir, name))
    return overall


# ---------------------------------------------------------------------------------------------
# small commands

def stats_summary(d, stat):
    """The stats page with the most allocation calls in DIR (kept at exit), as key=value."""
    try:
        r = subprocess.run([stat, "--dir", d, "--json"], capture_output=True, text=True,
                           timeout=20)
        doc = json.loads(r.stdout or "{}")
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return "error=%s" % str(e).replace(" ", "_")[:80]
    best = None
    for pid, proc in doc.items():
        if not isinstance(proc, dict):
            continue
        for k, v in proc.items():
            if isinstance(v, dict) and "num_alloc_calls" in v:
                if best is None or v["num_alloc_calls"] > best[1]["num_alloc_calls"]:
                    best = (pid, v)
    if not best:
        return "pages=0"
    v = best[1]
    keys = (("alloc_calls", "num_alloc_calls"), ("device_allocs", "num_device_alloc"),
            ("reserved_peak", "reserved_bytes.all.peak"),
            ("allocated_peak", "allocated_bytes.all.peak"), ("retries", "num_alloc_retries"),
            ("ooms", "num_ooms"), ("stitches", "num_stitches"))
    # pinned host memory, only where the program used it
    host = (("host_calls", "num_host_alloc_calls"), ("host_pins", "num_host_alloc"),
            ("host_reserved_peak", "host_allocated_bytes.peak"))
    out = ["%s=%s" % (a, v.get(b)) for a, b in keys if b in v]
    if v.get("num_host_alloc_calls"):
        out += ["%s=%s" % (a, v.get(b)) for a, b in host if b in v]
    return " ".join(out)


def cmd_torch_compare(records):
    recs = read_records(records)
    rc = 0
    for st, name, detail in torch_checks(recs):
        print("%s: %s: %s" % (st, name, detail))
        if st == "FAIL":
            rc = 1
    return rc


# ---------------------------------------------------------------------------------------------
# selftest: made-up records through the report

def selftest():
    tmp = tempfile.mkdtemp(prefix="gpulib-selftest.")
    rec_path = os.path.join(tmp, "records")

    def rec(**kw):
        with open(rec_path, "a", encoding="utf-8") as f:
            f.write(SEP.join("%s=%s" % (k, v) for k, v in kw.items()) + "\n")

    def tjson(mode, losses, ok=True, tessera=None, **extra):
        j = {"kind": "train", "mode": mode, "ok": ok, "complete": ok, "steps": 4,
             "steps_done": 4 if ok else 1, "warmup": 1, "batch": 32,
             "model": {"layers": 6, "d_model": 512, "heads": 8, "vocab": 8192,
                       "min_len": 64, "max_len": 1024},
             "losses": [float(x).hex() for x in losses],
             "loss_checksum": hashlib.sha256(",".join(float(x).hex() for x in losses)
                                             .encode()).hexdigest(),
             "step_ms_median": 41.5, "timed_total_s": 0.2, "peak_reserved": 3 << 30,
             "peak_allocated": 2 << 30, "peak_source": "x", "smi_peak_delta_mib": 3100}
        if tessera is not None:
            j["tessera"] = tessera
        j.update(extra)
        p = os.path.join(tmp, "torch-%s.json" % mode)
        with open(p, "w") as f:
            json.dump(j, f)
        return p

    rec(type="meta", command="scripts/gpu/run-all.sh", date="2030-01-01T00:00:00Z",
        smi_L="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)", finished="1")
    rec(type="step", name="a detect", status="PASS", seconds="0.1", reason="")
    rec(type="lib", what="libtessera.so", status="PASS", seconds="9.0", reason="meson")
    rec(type="build", variant="shared", program="churn", status="PASS", seconds="2")
    rec(type="build", variant="static", program="churn", status="FAIL", seconds="2",
        reason="nvcc exit 1")
    rec(type="prog", build="shared", program="seed_every5th", args="--unit 1G", mode="native",
        rc="0", status="PASS", seconds="9.1",
        result="RESULT status=ok final_alloc=ok bytes=2147483648 live=32 live_bytes=1 "
               "free0=1 free_before=1 free_after=1 free_end=1 total=1 count=39",
        allocs="", stats="", reason="")
    rec(type="prog", build="static", program="bad_input", args="", mode="tessera", rc="0",
        status="FAIL", seconds="0.5", result="RESULT status=ok steps=20", allocs="0",
        stats="pages=0", reason="tessera served no allocation | pipe")
    rec(type="churn", variant="small", threads="8", args="--iters 10", mode="native", rc="0",
        status="PASS", ops_per_s="1000", seconds="1")
    rec(type="churn", variant="small", threads="8", args="--iters 10", mode="tessera", rc="0",
        status="PASS", ops_per_s="25000", seconds="1")
    same = [9.1, 9.0, 8.9, 8.8]
    rec(type="torch", mode="native", rc="0", status="PASS", json=tjson("native", same))
    rec(type="torch", mode="nocache", rc="0", status="PASS",
        json=tjson("nocache", same, smi_peak_delta_mib=3000, step_ms_median=40.0))
    rec(type="torch", mode="tessera", rc="0", status="PASS",
        json=tjson("tessera", same, tessera={"num_alloc_calls": 1234,
                                             "reserved_bytes.all.peak": 5 << 30,
                                             "allocated_bytes.all.peak": 4 << 30}))
    rec(type="torch", mode="tessera-defrag", rc="0", status="PASS",
        json=tjson("tessera-defrag", [9.1, 9.0, 8.9, 8.7],
                   tessera={"num_alloc_calls": 99}))
    mb = os.path.join(tmp, "mb.json")
    with open(mb, "w") as f:
        json.dump({"max_fit": 150, "first_oom": 151, "converged": True,
                   "stop_reason": "converged", "probes": [[160, "oom", 3], [150, "fit", 3]],
                   "seconds": 6}, f)
    rec(type="maxbatch", mode="native", rc="0", status="PASS", json=mb, seconds="7")
    rec(type="step", name="g report", status="PASS", seconds="0", reason="")

    overall = write_report(rec_path, tmp)
    md = open(os.path.join(tmp, "gpu-results.md")).read()
    doc = json.load(open(os.path.join(tmp, "gpu-results.json")))
    problems = []

    def want(cond, what):
        if not cond:
            problems.append(what)

    want(overall == "FAIL", "overall should be FAIL (a failed build and a failed run)")
    want(doc["overall"] == "FAIL", "json overall")
    want("PASS: loss checksum tessera == nocache: identical" in md, "tessera checksum PASS line")
    want("FAIL: loss checksum tessera-defrag == nocache" in md, "defrag checksum FAIL line")
    want("first difference at step 3" in md, "first differing step")
    want("INFO: tessera peak reserved <= nocache floor + 1%: missed: 3.03 GiB against 2.93 GiB "
         "(+3.33%, nvidia-smi peaks)" in md, "the floor check on one scale")
    want("INFO: tessera median step within 1% of native: met: 41.50 ms against 41.50 ms" in md,
         "the step time check")
    want("25.00x" in md, "churn ratio")
    want("tessera served no allocation \\| pipe" in md, "pipe escaped in a table cell")
    want("| 150 | 151 | yes |" in md, "max batch row")
    want("GPU 0: NVIDIA H100" in md, "nvidia-smi -L line")
    want(any(c["status"] == "FAIL" and c["name"].startswith("nvcc static/churn")
             for c in doc["checks"]), "nvcc failure in checks")
    want(doc["torch"]["modes"]["tessera"]["result"]["tessera"]["num_alloc_calls"] == 1234,
         "torch json embedded")
    # torch-compare's exit status
    want(cmd_torch_compare(rec_path) == 1, "torch-compare must fail on a checksum mismatch")
    # a record file that does not exist: an empty PASS report, no crash
    empty = os.path.join(tmp, "empty")
    want(write_report(os.path.join(tmp, "nonexistent"), empty) == "PASS", "empty report")
    if problems:
        print("gpulib selftest: FAILED:\n  " + "\n  ".join(problems))
        print("(files in %s)" % tmp)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("gpulib selftest: ok")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "report":
        print(write_report(argv[1], argv[2]))
        return 0
    if len(argv) == 3 and argv[0] == "stats-summary":
        print(stats_summary(argv[1], argv[2]))
        return 0
    if len(argv) in (3, 4) and argv[0] == "json-get":
        j = load_json(argv[1]) or {}
        v = j.get(argv[2])
        print(argv[3] if v is None and len(argv) == 4 else ("" if v is None else v))
        return 0
    if len(argv) == 2 and argv[0] == "torch-compare":
        return cmd_torch_compare(argv[1])
    if argv == ["selftest"]:
        return selftest()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
