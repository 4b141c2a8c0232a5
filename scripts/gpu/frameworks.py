#!/usr/bin/env python3
"""scripts/gpu/frameworks.py: other frameworks than PyTorch under tessera, on a real GPU.

For each framework a small real workload runs natively, under tessera's defaults and under
`defragment:True`; each run prints a checksum of what it computed, which must match the native
run's. Recorded per run: exit status, seconds, peak reserved (tessera's stats page through
tessera-stat, and nvidia-smi's view of the process), allocations served and driver calls.

  jax           XLA_PYTHON_CLIENT_ALLOCATOR=platform (every buffer a cudaMalloc), an MLP trained
  cupy-nopool   cupy.cuda.set_allocator(None): every array a cudaMalloc
  cupy-pool     CuPy's own memory pool on top of tessera
  numba         numba.cuda kernels over device arrays
  onnxruntime   the CUDA execution provider on a model built in-process with onnx.helper
  transformers  a GPT-2 built from a config (no weights download), inference with
                PYTORCH_NO_CUDA_MEMORY_CACHING=1 under tessera

Every step is skippable (--skip), time-boxed (--budget, shared by the steps left), and skipped
with its reason when its module is missing or there is no GPU. --dry-run plans every run (command,
environment, workload script) and reports each step as skipped without touching a GPU; the test
suite runs it. Writes OUT/frameworks.json and OUT/frameworks.md; one line per run on stdout.

usage: frameworks.py [--dry-run] [--out DIR] [--lib libtessera.so] [--stat tessera-stat]
                     [--budget SECONDS] [--skip a,b] [--python PYTHON]
"""
import argparse
import json
import os
import py_compile
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODES = [("native", None), ("tessera", ""), ("tessera-defrag", "defragment:True")]
REL_TOLERANCE = 1e-4  # checksums are float sums: the same kernels, possibly another order

# CuPy's workload: the same loop with its memory pool off (every array a cudaMalloc) and on.
CUPY_LOOP = """
cp.random.seed(0)
acc = 0.0
for i in range(100):
    a = cp.random.random((512 + i, 512), dtype=cp.float32)
    b = cp.random.random((512, 256 + i), dtype=cp.float32)
    c = cp.tanh(a @ b) * 2 + 1
    acc += float(c.sum(dtype=cp.float64))
print("CHECKSUM", acc)
"""
# Each workload prints "CHECKSUM <float>" last. Small: seconds on a GPU, a few hundred MiB.
WORKLOADS = {
    "jax": ("jax", """
import jax, jax.numpy as jnp
assert jax.devices()[0].platform == "gpu", jax.devices()
key = jax.random.PRNGKey(0)
k1, k2, k3, k4 = jax.random.split(key, 4)
x = jax.random.normal(k1, (4096, 256)); y = jax.random.normal(k2, (4096, 1))
params = [jax.random.normal(k3, (256, 512)) * 0.05, jnp.zeros(512),
          jax.random.normal(k4, (512, 1)) * 0.05, jnp.zeros(1)]
def loss(p, x, y):
    h = jax.nn.relu(x @ p[0] + p[1])
    return jnp.mean((h @ p[2] + p[3] - y) ** 2)
step = jax.jit(lambda p, x, y: [w - 0.01 * g for w, g in zip(p, jax.grad(loss)(p, x, y))])
for i in range(200):
    params = step(params, x, y)
print("CHECKSUM", float(loss(params, x, y)) + float(sum(jnp.sum(w) for w in params)))
"""),
    "cupy-nopool": ("cupy", "import cupy as cp\ncp.cuda.set_allocator(None)\n" + CUPY_LOOP),
    "cupy-pool": ("cupy", "import cupy as cp\n" + CUPY_LOOP),
    "numba": ("numba", """
import numpy as np
from numba import cuda
@cuda.jit
def saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]
rng = np.random.default_rng(0)
acc = 0.0
for i in range(60):
    n = 100000 + 4096 * i
    x = cuda.to_device(rng.random(n, dtype=np.float32))
    y = cuda.to_device(rng.random(n, dtype=np.float32))
    out = cuda.device_array(n, dtype=np.float32)
    saxpy[(n + 255) // 256, 256](np.float32(1.5), x, y, out)
    acc += float(out.copy_to_host().astype(np.float64).sum())
print("CHECKSUM", acc)
"""),
    "onnxruntime": ("onnxruntime", """
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "w1")
b1 = numpy_helper.from_array(rng.standard_normal(512).astype(np.float32), "b1")
w2 = numpy_helper.from_array(rng.standard_normal((512, 64)).astype(np.float32), "w2")
nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], [w1, b1, w2])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
s = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
assert s.get_providers()[0] == "CUDAExecutionProvider", s.get_providers()
acc = 0.0
for i in range(50):
    x = rng.standard_normal((64 + 16 * i, 256)).astype(np.float32)
    acc += float(s.run(None, {"x": x})[0].astype(np.float64).sum())
print("CHECKSUM", acc)
"""),
    "transformers": ("transformers", """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
cfg = GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=2000, n_positions=512)
model = GPT2LMHeadModel(cfg).cuda().eval()
acc = 0.0
with torch.no_grad():
    for i in range(30):
        ids = torch.randint(0, 2000, (4, 32 + 8 * i), device="cuda")
        acc += float(model(ids).logits.double().sum())
print("CHECKSUM", acc)
"""),
}
# Variables each framework needs in every mode, and only under tessera.
ENV_ALL = {"jax": {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
ENV_TESSERA = {"transformers": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}}


def workload_path(workdir, step):
    """The workload script of a step. Never the framework's own name: the script's folder comes
    first on sys.path, and a jax.py there would be imported in place of jax."""
    return os.path.join(workdir, "workload_" + step.replace("-", "_") + ".py")


def plan_run(step, mode, conf, args, workdir):
    """The command and environment changes of one run."""
    env = dict(ENV_ALL.get(step, {}))
    rundir = os.path.join(workdir, step, mode)
    if conf is not None:
        env.update(ENV_TESSERA.get(step, {}))
        env["LD_PRELOAD"] = args.lib
        env["TESSERA_STATS_DIR"] = os.path.join(rundir, "stats")
        env["TESSERA_STATS_KEEP"] = "1"
        if conf:
            env["TESSERA_ALLOC_CONF"] = conf
    script = workload_path(workdir, step)
    return {"step": step, "mode": mode, "conf": conf, "argv": [args.python, script], "env": env,
            "dir": rundir}


def have_module(python, module, timeout):
    try:
        p = subprocess.run([python, "-c", "import " + module], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "importing %s took over %d s" % (module, timeout)
    return None if p.returncode == 0 else "python module '%s' not importable: %s" % (
        module, (p.stderr.strip().splitlines() or ["?"])[-1][:200])


def gpu_present(smi):
    try:
        p = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        return p.returncode == 0 and "GPU " in p.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


class SmiPoller:
    """Peak GPU memory of one process (nvidia-smi's per-process view), polled while it runs;
    the device's used memory above the starting point when the process is not listed (another
    pid namespace)."""

    def __init__(self, smi):
        self.smi, self.pid, self.peak_proc, self.peak_dev = smi, None, 0, 0
        self.base = self.device_used() or 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def query(self, args):
        try:
            return subprocess.run([self.smi] + args, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def device_used(self):
        out = self.query(["--query-gpu=memory.used", "--format=csv,noheader,nounits"]).split()
        return int(out[0]) if out and out[0].isdigit() else None

    def loop(self):
        while not self.stop.wait(0.25):
            for line in self.query(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]).splitlines():
                f = [x.strip() for x in line.split(",")]
                if len(f) == 2 and f[0] == str(self.pid) and f[1].isdigit():
                    self.peak_proc = max(self.peak_proc, int(f[1]))
            used = self.device_used()
            if used is not None:
                self.peak_dev = max(self.peak_dev, used - self.base)

    def peak_mib(self):
        return self.peak_proc or self.peak_dev


def tessera_counters(stat, stats_dir):
    """Sums over the devices of the run's stats pages: peak reserved, allocations, driver calls."""
    out = {}
    if not os.path.isdir(stats_dir):
        return out
    for name in os.listdir(stats_dir):
        if not name.startswith("tessera."):
            continue
        pid = name.split(".", 1)[1]
        p = subprocess.run([stat, "--dir", stats_dir, "--json", pid], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            continue
        for dev in json.loads(p.stdout).get(pid, {}).values():
            if not isinstance(dev, dict):
                continue
            for key, src in (("peak_reserved_bytes", "reserved_bytes.all.peak"),
                             ("allocations_served", "num_alloc_calls"),
                             ("driver_calls", "num_device_alloc"), ("driver_calls", "num_device_free")):
                out[key] = out.get(key, 0) + int(dev.get(src, 0))
    return out


def execute(run, args, deadline):
    os.makedirs(os.path.join(run["dir"], "stats"), exist_ok=True)
    left = int(deadline - time.monotonic())
    if left < 10:
        return dict(run, status="SKIP", reason="time budget")
    env = dict(os.environ)
    env.update(run["env"])
    poller = SmiPoller(args.smi)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(run["argv"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        poller.pid = proc.pid
        poller.thread.start()
        out, err = proc.communicate(timeout=min(left, args.run_timeout))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = None
    finally:
        poller.stop.set()
    secs = round(time.monotonic() - t0, 2)
    with open(os.path.join(run["dir"], "output.txt"), "w") as f:
        f.write(out + "\n--- stderr ---\n" + err)
    sums = [l.split()[1] for l in out.splitlines() if l.startswith("CHECKSUM ")]
    res = dict(run, rc=rc, seconds=secs, smi_peak_mib=poller.peak_mib(),
               checksum=float(sums[-1]) if sums else None)
    res.update(tessera_counters(args.stat, os.path.join(run["dir"], "stats")))
    if rc is None:
        res.update(status="FAIL", reason="timed out after %d s" % min(left, args.run_timeout))
    elif rc != 0 or res["checksum"] is None:
        res.update(status="FAIL", reason="exit %s: %s" % (rc, (err.strip().splitlines() or ["no output"])[-1][:300]))
    else:
        res.update(status="PASS", reason="")
    return res


def compare(runs):
    """Each tessera run's checksum against the native run's."""
    native = next((r for r in runs if r["mode"] == "native" and r.get("status") == "PASS"), None)
    for r in runs:
        if r["mode"] == "native" or r.get("status") != "PASS":
            continue
        if native is None:
            r.update(checksum_match=None)
            continue
        a, b = native["checksum"], r["checksum"]
        r["checksum_match"] = abs(a - b) <= REL_TOLERANCE * max(1.0, abs(a))
        if not r["checksum_match"]:
            r.update(status="FAIL", reason="checksum %r differs from native %r" % (b, a))


def step_verdict(runs):
    """A step's status and reason from its runs (native first). A framework that fails without
    tessera says nothing about tessera: the step is skipped, with the native run's reason."""
    native = runs[0]
    if native["status"] != "PASS":
        return {"status": "SKIP",
                "reason": "fails without tessera on this machine, not compared: %s" % native.get("reason")}
    compare(runs)
    fails = [r for r in runs if r["status"] == "FAIL"]
    return {"status": "FAIL" if fails else "PASS",
            "reason": "; ".join("%s: %s" % (r["mode"], r["reason"]) for r in fails)}


def write_report(out_dir, doc):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "frameworks.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    lines = ["## Frameworks under tessera", "", doc["note"], "",
             "| step | mode | status | seconds | checksum | peak reserved (tessera-stat) | peak (nvidia-smi, MiB) | allocations served | driver calls | reason |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in doc["steps"]:
        for r in s["runs"] or [{"mode": "-", "status": s["status"], "reason": s["reason"]}]:
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                s["name"], r["mode"], r.get("status", s["status"]), r.get("seconds", ""), r.get("checksum", ""),
                r.get("peak_reserved_bytes", ""), r.get("smi_peak_mib", ""), r.get("allocations_served", ""),
                r.get("driver_calls", ""), (r.get("reason") or s["reason"]).replace("|", "/")))
    with open(os.path.join(out_dir, "frameworks.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    ap = argparse.ArgumentParser(description="frameworks under tessera on a real GPU")
    ap.add_argument("--dry-run", action="store_true", help="plan every run, run none (no GPU needed)")
    ap.add_argument("--out", default=os.environ.get("OUT", "frameworks-results"))
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "shim", "libtessera.so"))
    ap.add_argument("--stat", default=os.path.join(REPO, "build", "tools", "tessera-stat"))
    ap.add_argument("--budget", type=int, default=300, help="seconds for every step together")
    ap.add_argument("--run-timeout", type=int, default=120, help="seconds for one run at most")
    ap.add_argument("--skip", default="", help="comma-separated steps: " + ",".join(WORKLOADS))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--smi", default=os.environ.get("NVIDIA_SMI", "nvidia-smi"))
    args = ap.parse_args(argv)
    args.lib, args.stat = os.path.abspath(args.lib), os.path.abspath(args.stat)
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(WORKLOADS)
    if unknown:
        ap.error("--skip: unknown step(s) %s (steps: %s)" % (",".join(sorted(unknown)), ",".join(WORKLOADS)))
    deadline = time.monotonic() + args.budget
    # workload scripts, outputs and stats pages of every run, kept next to the report
    workdir = os.path.join(os.path.abspath(args.out), "frameworks-work")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    gpu = not args.dry_run and gpu_present(args.smi)
    tools_missing = [p for p in (args.lib, args.stat) if not os.path.exists(p)]
    doc = {"dry_run": args.dry_run, "gpu": gpu, "lib": args.lib, "budget_s": args.budget, "steps": [],
           "note": "Checksums must match the native run's within a relative %g; peak reserved is "
                   "reserved_bytes.all.peak, driver calls num_device_alloc + num_device_free." % REL_TOLERANCE}
    for name, (module, source) in WORKLOADS.items():
        script = workload_path(workdir, name)
        with open(script, "w") as f:
            f.write(source.lstrip())
        py_compile.compile(script, doraise=True)  # a broken workload fails here, GPU or not
        runs = [plan_run(name, mode, conf, args, workdir) for mode, conf in MODES]
        step = {"name": name, "module": module, "planned": runs, "runs": []}
        if name in skip:
            step.update(status="SKIP", reason="--skip")
        elif args.dry_run:
            # the orchestration (run, time, poll nvidia-smi, read stats pages, compare) end to
            # end, with a stand-in for the workload that needs no GPU
            # (without LD_PRELOAD: nothing to serve, and a sanitizer build's library would
            # refuse to load into an uninstrumented python)
            stand_in = [dict(r, argv=[args.python, "-c", "print('CHECKSUM', 1.5)"],
                             env={k: v for k, v in r["env"].items() if k != "LD_PRELOAD"})
                        for r in runs]
            step["dry_runs"] = [execute(r, args, deadline) for r in stand_in]
            compare(step["dry_runs"])
            bad = [r for r in step["dry_runs"] if r["status"] != "PASS"]
            step.update(status="FAIL" if bad else "SKIP",
                        reason="dry run: planned %d runs; the orchestration ran them with a stand-in "
                               "workload: %s" % (len(runs), "; ".join(r["reason"] for r in bad) or "ok"))
        elif not gpu:
            step.update(status="SKIP", reason="no NVIDIA GPU (%s -L)" % args.smi)
        elif tools_missing:
            step.update(status="SKIP", reason="not built: " + ", ".join(tools_missing))
        elif deadline - time.monotonic() < 30:
            step.update(status="SKIP", reason="time budget")
        else:
            why = have_module(args.python, module, 60)
            if why:
                step.update(status="SKIP", reason=why)
            else:
                # the steps left share what is left of the budget
                left = [n for n in WORKLOADS if n not in skip]
                share = (deadline - time.monotonic()) / max(1, len(left) - left.index(name))
                step_deadline = time.monotonic() + share
                step["runs"] = [execute(runs[0], args, step_deadline)]
                if step["runs"][0]["status"] == "PASS":
                    step["runs"] += [execute(r, args, step_deadline) for r in runs[1:]]
                step.update(step_verdict(step["runs"]))
        print("[frameworks] %s %s%s" % (step["status"], name, ": " + step["reason"] if step["reason"] else ""))
        for r in step["runs"]:
            print("[frameworks]   %-14s %s %6ss checksum=%s peak_reserved=%s smi_peak_mib=%s allocs=%s driver_calls=%s"
                  % (r["mode"], r["status"], r.get("seconds"), r.get("checksum"), r.get("peak_reserved_bytes"),
                     r.get("smi_peak_mib"), r.get("allocations_served"), r.get("driver_calls")))
        doc["steps"].append(step)
    write_report(args.out, doc)
    return 1 if any(s["status"] == "FAIL" for s in doc["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
