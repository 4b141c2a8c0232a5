#!/usr/bin/env python3
"""A small GPT-style training run for tessera's GPU checks (scripts/gpu/run-all.sh, step f).

Trains a decoder-only transformer built from torch.nn (no downloads) on random tokens with
VARIABLE sequence lengths drawn from a fixed, seeded schedule, at a fixed batch size, and reports:

  * step time: median over the steps after the warm-up, and their total;
  * peak memory, from the source that works in the current mode:
      - torch.cuda.max_memory_reserved / max_memory_allocated (torch's caching allocator);
      - tessera's stats page (`tessera-stat --json <own pid>`: reserved_bytes.all.peak,
        allocated_bytes.all.peak) when libtessera.so is preloaded, or tessera.stats() when
        PyTorch allocates through tessera's pluggable allocator (TESSERA_TORCH=1 with tessera's
        sitecustomize, or --tessera-torch: torch.cuda's own statistics raise in that mode);
      - nvidia-smi memory.used sampled every 20 ms in a side process, minus the value right
        after CUDA initialisation (the only source with PYTORCH_NO_CUDA_MEMORY_CACHING=1 and no
        tessera; reported for every mode so that the modes can be compared on one scale);
  * a loss checksum: every step's loss with full precision (float.hex) and their SHA-256.

Runs are deterministic (seeded init on the CPU, seeded data, cudnn.deterministic,
torch.use_deterministic_algorithms with CUBLAS_WORKSPACE_CONFIG=:4096:8), so two allocators
that hand out correct memory must produce bit-identical losses.

--find-max-batch: binary search for the largest batch that trains without running out of
memory. Each probe runs a few steps (lengths --probe-lengths, which include the longest) in a
fresh process: by default a fork of this one, which never initialises CUDA itself (falls back
to spawning `python3 torch_train.py --probe B` if a forked child cannot use CUDA). The search
stops when it has converged or at --time-cap.

Output: human-readable progress on stdout, then one line `TORCH_RESULT {json}` (training) or
`MAXBATCH_RESULT {json}` (search); --json-out FILE writes the same JSON to FILE.
Exit: 0 success (including a search that did not converge), 3 out of memory during training,
1 any other error.

Developer options for a dry run without a GPU: --device cpu, and --simulate-capacity N (a probe
with a batch above N raises an out-of-memory error) to exercise the search logic.
"""
import os
import sys

# Must be in the environment before cuBLAS initialises (deterministic cuBLAS workspaces).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_OOM = 3

T0 = time.monotonic()


def log(msg):
    print("[torch_train +%6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default="unnamed", help="label for the report (free text)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--min-len", type=int, default=64)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--len-step", type=int, default=64)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--time-cap", type=float, default=0.0,
                   help="seconds: training stops after the step that passes it (result marked "
                        "incomplete); --find-max-batch stops probing (0: no cap)")
    p.add_argument("--tessera-torch", action="store_true",
                   help="make PyTorch allocate through tessera (tessera.torch.enable()) first")
    p.add_argument("--tessera-stat", default="",
                   help="path of tessera-stat: read this process's stats page at the end")
    p.add_argument("--no-smi", action="store_true", help="do not sample nvidia-smi")
    p.add_argument("--smi-interval-ms", type=int, default=20)
    p.add_argument("--json-out", default="")
    # maximum batch search
    p.add_argument("--find-max-batch", action="store_true")
    p.add_argument("--hint-batch", type=int, default=0,
                   help="a batch size whose peak memory is --hint-peak (from a training run)")
    p.add_argument("--hint-peak", type=int, default=0, help="bytes")
    p.add_argument("--probe-lengths", default="",
                   help="comma-separated sequence lengths of a probe (default: 3/4, 1/4, 1, "
                        "1/2, 1 x --max-len)")
    p.add_argument("--probe-timeout", type=float, default=60.0)
    p.add_argument("--probe-method", default="fork", choices=["fork", "spawn"])
    p.add_argument("--max-batch-limit", type=int, default=4096)
    p.add_argument("--probe", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--simulate-capacity", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")
    if not (0 < a.min_len <= a.max_len) or a.len_step <= 0:
        p.error("need 0 < --min-len <= --max-len and --len-step > 0")
    if a.steps < 1 or a.warmup < 0 or a.batch < 1:
        p.error("need --steps >= 1, --warmup >= 0, --batch >= 1")
    return a


def length_schedule(a):
    """Deterministic sequence lengths: uniform multiples of len_step in [min_len, max_len], with
    the longest forced at the middle step (after shorter ones have populated the caches)."""
    rnd = random.Random(a.seed)
    choices = list(range(a.min_len, a.max_len + 1, a.len_step)) or [a.max_len]
    lengths = [rnd.choice(choices) for _ in range(a.steps)]
    lengths[a.steps // 2] = a.max_len
    return lengths


def probe_lengths(a):
    if a.probe_lengths:
        return [int(x) for x in a.probe_lengths.split(",") if x.strip()]
    m = a.max_len
    r = lambda x: max(a.min_len, x // a.len_step * a.len_step)  # noqa: E731
    return [r(m * 3 // 4), r(m // 4), m, r(m // 2), m]


# ---------------------------------------------------------------------------------------------
# the model

def build_model(torch, a):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x, mask):
            B, T, C = x.shape
            hd = C // self.h
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, self.h, hd).transpose(1, 2)
            k = k.view(B, T, self.h, hd).transpose(1, 2)
            v = v.view(B, T, self.h, hd).transpose(1, 2)
            # Explicit attention (not scaled_dot_product_attention): the same deterministic
            # kernels on every allocator, and realistic activation memory (B x H x T x T).
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(mask[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.d_model)
            self.pos = nn.Embedding(a.max_len, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.d_model)
            self.head = nn.Linear(a.d_model, a.vocab, bias=False)
            self.register_buffer(
                "mask", torch.triu(torch.ones(a.max_len, a.max_len, dtype=torch.bool), 1),
                persistent=False)

        def forward(self, idx):
            T = idx.shape[1]
            pos = torch.arange(T, device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for b in self.blocks:
                x = b(x, self.mask)
            return self.head(self.ln_f(x))

    torch.manual_seed(a.seed)  # initialised on the CPU: identical whatever the device
    return GPT()


def batch_for_step(torch, a, step, T, batch, device):
    g = torch.Generator()
    g.manual_seed(a.seed * 1000003 + step)
    x = torch.randint(0, a.vocab, (batch, T + 1), generator=g)
    return x[:, :-1].to(device), x[:, 1:].to(device)


def is_oom(torch, e):
    for name in ("OutOfMemoryError",):
        cls = getattr(torch, name, None) or getattr(torch.cuda, name, None)
        if cls is not None and isinstance(e, cls):
            return True
    s = str(e).lower()
    return any(k in s for k in ("out of memory", "cudaerrormemoryallocation", "alloc_failed",
                                "cuda_error_out_of_memory"))


class SimulatedOOM(RuntimeError):
    pass


def setup_torch(a):
    import torch
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except TypeError:  # very old torch
        torch.use_deterministic_algorithms(True)
    return torch


def train_steps(torch, a, batch, lengths, device, on_step=None, time_cap=0.0):
    """Build the model and optimizer on `device` and run one step per entry of `lengths`.
    Returns (losses, step_seconds, model)."""
    F = torch.nn.functional
    if a.simulate_capacity and batch > a.simulate_capacity:
        raise SimulatedOOM("simulated CUDA out of memory (batch %d > --simulate-capacity %d)"
                           % (batch, a.simulate_capacity))
    model = build_model(torch, a).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    losses, times = [], []
    start = time.monotonic()
    for i, T in enumerate(lengths):
        x, y = batch_for_step(torch, a, i, T, batch, device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, a.vocab), y.reshape(-1))
        del logits
        loss.backward()
        opt.step()
        lv = loss.item()  # synchronises: the step time includes all its device work
        times.append(time.perf_counter() - t0)
        losses.append(lv)
        del x, y, loss
        if on_step:
            on_step(i, T, lv, times[-1])
        if time_cap and time.monotonic() - start > time_cap and i + 1 < len(lengths):
            log("time cap of %.0f s reached after %d of %d steps" % (time_cap, i + 1, len(lengths)))
            break
    return losses, times, model


# ---------------------------------------------------------------------------------------------
# memory sources

def env_without_preload():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


class SmiSampler:
    """nvidia-smi --query-gpu=memory.used -lms N in a side process: device memory as the driver
    sees it (whole GPU, MiB), without touching this process's CUDA state."""

    def __init__(self, interval_ms, gpu_index="0"):
        self.samples = []
        self.proc = None
        self.error = None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", gpu_index, "--query-gpu=memory.used",
                 "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env=env_without_preload())
        except OSError as e:
            self.error = str(e)
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            try:
                self.samples.append((time.monotonic(), int(float(line))))
            except ValueError:
                pass

    def wait_samples(self, n, timeout):
        end = time.monotonic() + timeout
        while self.proc and len(self.samples) < n and time.monotonic() < end:
            time.sleep(0.01)

    def mark(self):
        return len(self.samples)

    def stop(self):
        if self.proc:
            try:
                self.proc.terminate()
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                try:
                    self.proc.kill()
                except Exception:  # noqa: BLE001
                    pass


def tessera_stats(path, pid):
    """This process's stats page, through tessera-stat --json PID (docs/stats-page.md)."""
    out = {"source": "tessera-stat --json %d" % pid}
    try:
        r = subprocess.run([path, "--json", str(pid)], capture_output=True, text=True,
                           timeout=20, env=env_without_preload())
    except (OSError, subprocess.TimeoutExpired) as e:
        out["error"] = "cannot run %s: %s" % (path, e)
        return out
    if r.returncode != 0:
        out["error"] = "tessera-stat exited %d: %s" % (r.returncode, r.stderr.strip()[:300])
        return out
    try:
        doc = json.loads(r.stdout)
        proc = doc[str(pid)]
    except (ValueError, KeyError) as e:
        out["error"] = "unexpected tessera-stat output (%s)" % e
        return out
    out["config"] = proc.get("config", "")
    devs = [v for k, v in proc.items() if isinstance(v, dict) and "reserved_bytes.all.peak" in v]
    if not devs:
        out["error"] = "the stats page has no device slot (tessera served nothing?)"
        return out
    d = max(devs, key=lambda v: v.get("reserved_bytes.all.peak", 0))
    for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "reserved_bytes.all.current",
              "allocated_bytes.all.current", "num_alloc_calls", "num_free_calls",
              "num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms",
              "num_stitches", "num_passthrough_calls", "segment.all.peak"):
        if k in d:
            out[k] = d[k]
    out["slots"] = len(devs)
    return out


def tessera_pluggable():
    """Does PyTorch allocate through tessera's pluggable allocator in this process?"""
    mod = sys.modules.get("tessera.torch")
    return bool(mod and getattr(mod, "_enabled", None) is not None)


def tessera_own_stats():
    """This process's counters through import tessera (the pluggable allocator's mode)."""
    out = {"source": "tessera.stats()"}
    try:
        import tessera
        s = tessera.stats()
    except Exception as e:  # noqa: BLE001
        out["error"] = "tessera.stats(): %s" % e
        return out
    out["config"] = tessera.check_config()[0]
    for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "reserved_bytes.all.current",
              "allocated_bytes.all.current", "num_alloc_calls", "num_free_calls",
              "num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms",
              "num_stitches", "num_passthrough_calls", "segment.all.peak"):
        out[k] = s[k]
    out["slots"] = 1
    return out


def torch_info(torch):
    info = {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None),
            "torch_file": torch.__file__, "python": sys.version.split()[0]}
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        info["cudnn"] = None
    return info


# ---------------------------------------------------------------------------------------------
# training run

def checksum(losses):
    return hashlib.sha256(",".join(float(x).hex() for x in losses).encode()).hexdigest()


def run_train(a):
    res = {"kind": "train", "mode": a.mode, "ok": False, "batch": a.batch, "steps": a.steps,
           "warmup": a.warmup, "pid": os.getpid(),
           "model": {"layers": a.layers, "d_model": a.d_model, "heads": a.heads,
                     "vocab": a.vocab, "min_len": a.min_len, "max_len": a.max_len},
           "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF",
                                                   "PYTORCH_NO_CUDA_MEMORY_CACHING",
                                                   "TESSERA_ALLOC_CONF", "LD_PRELOAD",
                                                   "TESSERA_TORCH",
                                                   "CUBLAS_WORKSPACE_CONFIG")}}
    rc = EXIT_ERROR
    sampler = None
    nd_warnings = []
    try:
        torch = setup_torch(a)
        if a.tessera_torch and not tessera_pluggable():
            import tessera.torch
            tessera.torch.enable()  # before CUDA starts: PyTorch swaps no allocator in use
        res["tessera_pluggable"] = tessera_pluggable()
        res.update(torch_info(torch))
        device = a.device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            torch.cuda.init()
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            res["gpu"] = torch.cuda.get_device_name(0)
            free0, total = torch.cuda.mem_get_info()
            res["mem_get_info_start"] = [free0, total]
            if not a.no_smi:
                sampler = SmiSampler(a.smi_interval_ms)
                sampler.wait_samples(3, 5.0)
                if sampler.samples:
                    res["smi_baseline_mib"] = sampler.samples[-1][1]
        lengths = length_schedule(a)
        res["lengths"] = lengths
        log("mode=%s batch=%d steps=%d lengths %d..%d (schedule %s...)" % (
            a.mode, a.batch, a.steps, min(lengths), max(lengths),
            ",".join(map(str, lengths[:8]))))

        def on_step(i, T, lv, dt):
            if i < 3 or i % 10 == 0 or i == a.steps - 1:
                log("step %3d T=%4d loss=%.6f %.1f ms" % (i, T, lv, dt * 1e3))

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses, times, model = train_steps(torch, a, a.batch, lengths, device, on_step,
                                               a.time_cap)
            nd_warnings = sorted({str(w.message)[:200] for w in caught
                                  if "determinis" in str(w.message).lower()})
        if device == "cuda":
            torch.cuda.synchronize()
        res["steps_done"] = len(losses)
        res["complete"] = len(losses) == a.steps
        res["losses"] = [float(x).hex() for x in losses]
        res["losses_repr"] = [repr(float(x)) for x in losses]
        res["loss_checksum"] = checksum(losses)
        log("losses (full precision): " + " ".join(repr(float(x)) for x in losses))
        res["loss_first"] = losses[0]
        res["loss_last"] = losses[-1]
        timed = times[a.warmup:] if len(times) > a.warmup else times
        res["step_ms_median"] = statistics.median(timed) * 1e3
        res["step_ms_mean"] = statistics.mean(timed) * 1e3
        res["timed_total_s"] = sum(timed)
        res["train_total_s"] = sum(times)
        res["step_ms"] = [round(t * 1e3, 3) for t in times]
        res["nondeterminism_warnings"] = nd_warnings
        res["params"] = sum(p.numel() for p in model.parameters())
        if device == "cuda":
            caching = (os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1" and
                       not res["tessera_pluggable"])
            res["torch_caching"] = caching
            if not res["tessera_pluggable"]:  # PyTorch keeps none for a pluggable allocator
                res["torch_max_reserved"] = torch.cuda.max_memory_reserved()
                res["torch_max_allocated"] = torch.cuda.max_memory_allocated()
                st = torch.cuda.memory_stats()
                res["torch_num_alloc_retries"] = st.get("num_alloc_retries", 0)
                res["torch_num_ooms"] = st.get("num_ooms", 0)
            res["mem_get_info_end"] = list(torch.cuda.mem_get_info())
        if sampler:
            sampler.wait_samples(sampler.mark() + 2, 2.0)
            sampler.stop()
            if sampler.samples and "smi_baseline_mib" in res:
                peak = max(v for _, v in sampler.samples)
                res["smi_peak_mib"] = peak
                res["smi_peak_delta_mib"] = peak - res["smi_baseline_mib"]
                res["smi_samples"] = len(sampler.samples)
            sampler = None
        if res["tessera_pluggable"]:
            res["tessera"] = tessera_own_stats()
        elif a.tessera_stat and "libtessera" in os.environ.get("LD_PRELOAD", ""):
            res["tessera"] = tessera_stats(a.tessera_stat, os.getpid())
        # the peak used for the report and the max-batch prediction
        if "tessera" in res and "reserved_bytes.all.peak" in res["tessera"]:
            res["peak_source"] = "tessera stats page"
            res["peak_reserved"] = res["tessera"]["reserved_bytes.all.peak"]
            res["peak_allocated"] = res["tessera"]["allocated_bytes.all.peak"]
        elif res.get("torch_caching") and res.get("torch_max_reserved"):
            res["peak_source"] = "torch.cuda.max_memory_reserved/allocated"
            res["peak_reserved"] = res["torch_max_reserved"]
            res["peak_allocated"] = res["torch_max_allocated"]
        elif "smi_peak_delta_mib" in res:
            res["peak_source"] = "nvidia-smi memory.used peak - baseline (sampled)"
            res["peak_reserved"] = res["smi_peak_delta_mib"] << 20
            res["peak_allocated"] = None
        res["ok"] = True
        rc = EXIT_OK
        log("done: %d steps, median %.2f ms, checksum %s, peak reserved %s (%s)" % (
            len(losses), res["step_ms_median"], res["loss_checksum"][:16],
            res.get("peak_reserved"), res.get("peak_source", "n/a")))
    except BaseException as e:  # noqa: BLE001
        try:
            oom = is_oom(sys.modules["torch"], e) or isinstance(e, SimulatedOOM)
        except Exception:  # noqa: BLE001
            oom = False
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
        res["oom"] = oom
        traceback.print_exc()
        rc = EXIT_OOM if oom else EXIT_ERROR
    finally:
        if sampler:
            sampler.stop()
    res["seconds"] = time.monotonic() - T0
    emit("TORCH_RESULT", res, a.json_out)
    return rc


def emit(tag, res, path):
    text = json.dumps(res, sort_keys=True)
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    print("%s %s" % (tag, text), flush=True)


# ---------------------------------------------------------------------------------------------
# maximum batch search

def probe_in_process(a, batch):
    """One probe in this (fresh) process: returns the exit code."""
    try:
        torch = setup_torch(a)
        device = a.device
        if device == "cuda":
            torch.cuda.init()
        lengths = probe_lengths(a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train_steps(torch, a, batch, lengths, device)
        if device == "cuda":
            torch.cuda.synchronize()
        return EXIT_OK
    except BaseException as e:  # noqa: BLE001
        torch = sys.modules.get("torch")
        if isinstance(e, SimulatedOOM) or (torch is not None and is_oom(torch, e)):
            print("probe batch=%d: out of memory (%s)" % (batch, str(e).splitlines()[0][:160]),
                  flush=True)
            return EXIT_OOM
        traceback.print_exc()
        return EXIT_ERROR


def wait_child(pid, timeout):
    end = time.monotonic() + timeout
    while True:
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid == pid:
            if os.WIFEXITED(status):
                return os.WEXITSTATUS(status)
            return 128 + os.WTERMSIG(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def probe(a, batch, method, timeout):
    """Run one probe in a new process. Returns 'fit', 'oom', 'error' or 'timeout'."""
    sys.stdout.flush()
    sys.stderr.flush()
    if method == "fork":
        pid = os.fork()
        if pid == 0:
            code = EXIT_ERROR
            try:
                code = probe_in_process(a, batch)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        code = wait_child(pid, timeout)
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--probe", str(batch)] + \
            passthrough_args(a)
        try:
            code = subprocess.run(cmd, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code is None:
        return "timeout"
    return {EXIT_OK: "fit", EXIT_OOM: "oom"}.get(code, "error")


def passthrough_args(a):
    out = ["--device", a.device, "--layers", str(a.layers), "--d-model", str(a.d_model),
           "--heads", str(a.heads), "--vocab", str(a.vocab), "--min-len", str(a.min_len),
           "--max-len", str(a.max_len), "--len-step", str(a.len_step), "--seed", str(a.seed),
           "--lr", repr(a.lr)]
    if a.probe_lengths:
        out += ["--probe-lengths", a.probe_lengths]
    if a.simulate_capacity:
        out += ["--simulate-capacity", str(a.simulate_capacity)]
    return out


def gpu_total_bytes():
    try:
        r = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=20, env=env_without_preload())
        return int(float(r.stdout.strip().splitlines()[0])) << 20
    except Exception:  # noqa: BLE001
        return 0


def initial_guess(a):
    if a.hint_batch > 0 and a.hint_peak > 0:
        total = gpu_total_bytes() or (80 << 30)
        usable = max(total - (2 << 30), 1 << 30)  # context, cuBLAS, headroom
        return max(1, min(a.max_batch_limit, int(a.hint_batch * usable / a.hint_peak)))
    return min(64, a.max_batch_limit)


def run_find_max_batch(a):
    start = time.monotonic()
    cap = a.time_cap if a.time_cap > 0 else 240.0
    deadline = start + cap
    method = a.probe_method
    res = {"kind": "maxbatch", "mode": a.mode, "method": method, "probes": [],
           "probe_lengths": probe_lengths(a), "time_cap_s": cap}
    lo, hi = 0, None  # lo: largest batch seen to fit; hi: smallest seen not to fit
    guess = initial_guess(a)
    res["initial_guess"] = guess
    log("find-max-batch mode=%s: first probe at %d (hint batch %d, peak %d bytes), cap %.0f s, %s"
        % (a.mode, guess, a.hint_batch, a.hint_peak, cap, method))
    b = guess
    same, last = 0, None
    stop_reason = ""
    while True:
        left = deadline - time.monotonic()
        if left < 3:
            stop_reason = "time cap"
            break
        t0 = time.monotonic()
        r = probe(a, b, method, min(a.probe_timeout, left))
        if r == "error" and method == "fork" and not res["probes"]:
            log("probe batch=%d failed in a forked child; retrying it with spawn" % b)
            method = res["method"] = "spawn"
            r = probe(a, b, method, min(a.probe_timeout, max(3.0, deadline - time.monotonic())))
        dt = time.monotonic() - t0
        res["probes"].append([b, r, round(dt, 2)])
        log("probe batch=%d: %s (%.1f s)" % (b, r, dt))
        if r == "fit":
            lo = b
        elif r == "oom":
            hi = b
        else:
            stop_reason = "probe %s at batch %d" % (r, b)
            break
        if hi is not None and hi - lo <= 1:
            stop_reason = "converged"
            break
        if lo >= a.max_batch_limit:
            stop_reason = "fits at --max-batch-limit"
            break
        # Bracket first, with steps that grow while the answers keep going the same way
        # (x1.25, x1.56, x2.44, ... up; x0.8, x0.64, x0.41, ... down), then bisect.
        same = same + 1 if r == last else 1
        last = r
        if hi is None:  # everything fitted so far
            b = min(a.max_batch_limit, max(lo + 1, int(lo * 1.25 ** (2 ** (same - 1)))))
        elif lo == 0:  # nothing fitted so far
            if hi <= 1:
                stop_reason = "batch 1 does not fit"
                break
            b = max(1, min(hi - 1, int(hi * 0.8 ** (2 ** (same - 1)))))
        else:
            b = (lo + hi) // 2
    res["max_fit"] = lo
    res["first_oom"] = hi
    res["converged"] = stop_reason == "converged"
    res["stop_reason"] = stop_reason
    res["seconds"] = round(time.monotonic() - start, 2)
    log("find-max-batch mode=%s: largest fitting batch %d, smallest failing %s (%s)" % (
        a.mode, lo, hi, stop_reason))
    emit("MAXBATCH_RESULT", res, a.json_out)
    return EXIT_OK if lo > 0 or hi is not None else EXIT_ERROR


def main(argv=None):
    a = parse_args(argv)
    if a.probe:
        return probe_in_process(a, a.probe)
    if a.find_max_batch:
        return run_find_max_batch(a)
    return run_train(a)


if __name__ == "__main__":
    sys.exit(main())
