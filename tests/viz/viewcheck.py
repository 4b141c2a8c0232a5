#!/usr/bin/env python3
"""Memory snapshots opened in PyTorch's own viewer (MemoryViz.js) in headless Chromium, every
event of every view clicked (memoryviz.mjs beside this file does the clicking).

    viewcheck.py [--viewer MemoryViz.js] SNAPSHOT.pickle...

Prints one line per snapshot and view, then "PASS: ..." or "FAIL: ..." (exit 0 or 1); "SKIP:
needs ..." (exit 77) when the viewer, Chromium, node or the node modules are missing. The viewer
is PyTorch's file, never part of tessera: --viewer, else TESSERA_MEMORYVIZ_JS, else the one of
the PyTorch this python has. The node modules (d3 5, playwright-core) are scripts/setup.sh's, in
build-viz/node_modules (TESSERA_VIZ_MODULES to use others); Chromium is `chromium` on PATH
(TESSERA_CHROMIUM). Used by tests/integration/test_snapshot.py (SnapshotViewer) and
scripts/gpu/snapshot_viz.sh.
"""
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
ACTIVE = ("active_allocated", "active_pending_free")


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):  # a snapshot holds no class: refuse any
        raise pickle.UnpicklingError("a class in a memory snapshot: %s.%s" % (module, name))


def load(path):
    with open(path, "rb") as f:
        return _Plain(f).load()


def memoryviz_js(given=None):
    path = given or os.environ.get("TESSERA_MEMORYVIZ_JS")
    if path:
        return path
    spec = importlib.util.find_spec("torch")  # found without importing it
    if spec and spec.origin:
        return os.path.join(os.path.dirname(spec.origin), "utils", "viz", "MemoryViz.js")
    return None


def tools(viewer=None):
    """The plan's tools, and what is missing (a line, or None)."""
    mods = os.environ.get("TESSERA_VIZ_MODULES", os.path.join(SOURCE, "build-viz", "node_modules"))
    plan = {
        "viewer": memoryviz_js(viewer),
        "d3": os.path.join(mods, "d3", "dist", "d3.js"),
        "playwright": os.path.join(mods, "playwright-core"),
        "chromium": os.environ.get("TESSERA_CHROMIUM", shutil.which("chromium") or ""),
        "node": shutil.which("node") or "",
    }
    missing = [what for what, ok in (
        ("PyTorch's MemoryViz.js (TESSERA_MEMORYVIZ_JS=path, or PyTorch installed)",
         plan["viewer"] and os.path.isfile(plan["viewer"])),
        ("chromium", os.path.isfile(plan["chromium"])),
        ("node", plan["node"]),
        ("d3 5 and playwright-core in %s (scripts/setup.sh)" % mods,
         os.path.isfile(plan["d3"]) and os.path.isdir(plan["playwright"])))
        if not ok]
    return plan, ("needs " + ", ".join(missing) if missing else None)


def viewer_events(trace):
    """The events the viewer lists: a free_requested followed by its free_completed is one."""
    n = 0
    for i, e in enumerate(trace):
        prev = trace[i - 1] if i else None
        if e["action"] == "free_completed" and prev and prev["action"] == "free_requested" \
                and prev["addr"] == e["addr"]:
            continue
        n += 1
    return n


def check(paths, plan, timeout=600):
    """Open each snapshot in the viewer; returns (lines, problems)."""
    snaps = []
    for path in paths:
        data = load(path)
        devices = {s["device"] for s in data["segments"]} | \
            {d for d, t in enumerate(data["device_traces"]) if t}
        snaps.append({"path": path, "expected": {str(d): sorted(
            b["address"] for s in data["segments"] if s["device"] == d for b in s["blocks"]
            if b["state"] in ACTIVE) for d in sorted(devices)},
            "events": {str(d): viewer_events(data["device_traces"][d])
                       if d < len(data["device_traces"]) else 0 for d in devices}})
    with tempfile.TemporaryDirectory(prefix="tessera-viewcheck-") as tmp:
        plan_path, result_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "result.json")
        with open(plan_path, "w") as f:
            json.dump(dict(plan, snapshots=snaps), f)
        r = subprocess.run([plan["node"], os.path.join(HERE, "memoryviz.mjs"), plan_path,
                            result_path], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or not os.path.exists(result_path):
            return [], ["memoryviz.mjs failed: " + (r.stdout + r.stderr).strip()[-2000:]]
        with open(result_path) as f:
            result = json.load(f)
    lines, problems = [], []
    if result["refused"]:
        problems.append("the page asked the network for " + ", ".join(result["refused"][:3]))
    views = {(v["snapshot"], str(v["device"]), v["view"]): v for v in result["runs"]}
    for snap in snaps:
        for dev in snap["expected"]:
            for view in ("Active Memory Timeline", "Allocator State History",
                         "Active Cached Segment Timeline"):
                what = "%s device %s, %s" % (os.path.basename(snap["path"]), dev, view)
                v = views.get((snap["path"], dev, view))
                if not v:
                    problems.append(what + ": not shown")
                    continue
                lines.append("%s: %d of %d events clicked, %d errors, %d blocks misplaced" % (
                    what, v["clicked"], v["events"], len(v["errors"]),
                    len(v["misplaced"]) + len(v["missing"])))
                problems += ["%s: %s" % (what, e) for e in v["errors"][:3] + v["misplaced"][:3]]
                if v["missing"] or v["extra"]:
                    problems.append("%s: at the last event, blocks drawn at %s instead of %s" % (
                        what, [hex(a) for a in v["extra"][:3]], [hex(a) for a in v["missing"][:3]]))
                if v["clicked"] != v["events"] or v["events"] == 0:
                    problems.append("%s: %d of %d events clicked" % (what, v["clicked"],
                                                                    v["events"]))
                if view == "Allocator State History" and v["events"] != snap["events"][dev]:
                    problems.append("%s: %d events listed, the trace has %d" % (
                        what, v["events"], snap["events"][dev]))
    return lines, problems


def main(argv):
    viewer = None
    if len(argv) > 1 and argv[0] == "--viewer":
        viewer, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    plan, missing = tools(viewer)
    if missing:
        print("SKIP: " + missing)
        return 77
    lines, problems = check(argv, plan)
    for line in lines:
        print(line)
    if problems:
        for p in problems[:20]:
            print("  " + p)
        print("FAIL: PyTorch's viewer: %d problems" % len(problems))
        return 1
    print("PASS: PyTorch's viewer shows %d snapshots, every event of every view clicked, no "
          "error, every block where its address says" % len(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
