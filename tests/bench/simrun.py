"""Running a sample program on the simulated device for the benchmarks: one place for the
environment (the simulator's libraries, its memory, tessera preloaded or not, a clean stats
directory), the RESULT line and the stats page's peak."""
import json
import os
import subprocess
import sys
import tempfile


def run(build, argv, conf=None, extra=None, preload=True, ok_rcs=(0,), who="bench", lines=None):
    """Run argv (a program of BUILD/tests/programs and its arguments) on the simulator, under
    tessera with TESSERA_ALLOC_CONF=conf when preload is true. Returns (the RESULT line's fields,
    the peak reserved bytes of the stats page, or None without tessera). A run that exits with a
    status outside ok_rcs, or prints no RESULT line, stops the benchmark with its output. lines:
    a list that gets the program's other stdout lines."""
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as d:
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "tests", "sim"),
                   TESSERA_SIM_MEMORY="8G", TESSERA_STATS_DIR=d, TESSERA_STATS_KEEP="1",
                   TESSERA_ALLOC_CONF=conf or "")
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = os.path.join(build, "shim", "libtessera.so")
        env.update(extra or {})
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        out_lines, lines = lines, [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode not in ok_rcs or not lines:
            sys.exit(f"{who}: {' '.join(argv)} under '{conf}' failed: rc {p.returncode}\n"
                     f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
        result = dict(kv.split("=", 1) for kv in lines[-1].split()[1:])
        if out_lines is not None:
            out_lines.extend(l for l in p.stdout.splitlines() if not l.startswith("RESULT "))
        peak = None
        pages = [f for f in os.listdir(d) if f.startswith("tessera.")]
        if preload and pages:
            j = subprocess.run([os.path.join(build, "tools", "tessera-stat"), "--dir", d, "--json",
                                pages[0].split(".", 1)[1]], capture_output=True, text=True)
            page = next(iter(json.loads(j.stdout).values()))
            # one object per device slot, keyed by the device number
            peak = sum(v["reserved_bytes.all.peak"] for k, v in page.items() if k.isdigit())
        return result, peak
