#!/usr/bin/env python3
"""Two PyTorch processes on one GPU whose caches together exceed it (scripts/gpu/run-all.sh, step k).

Each process, in turns, fills FRACTION of the device with tensors (1 GiB each, every byte written
and its sum checked), then frees them. With PyTorch's own cache, or tessera's, the freed memory
stays reserved by its process while the other one works. With FRACTION above one half, the second
process's turn runs out of memory unless the first gives its cache back: tessera's lending
(docs/configuration.md, "Memory lent between processes") does that without the program's help.

  lend_pair.py --mode MODE [--fraction 0.6] [--turns 4] [--json-out FILE] [--stat TESSERA_STAT]

MODE names the environment the caller set (native, tessera, tessera-nolend); the verdict expects
no out-of-memory under tessera and at least one elsewhere. Prints one RESULT line and writes JSON.
"""
import argparse
import json
import os
import subprocess
import sys
import time

GIB = 1 << 30


def worker(fraction):
    import torch
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    n = max(1, int(fraction * total) // GIB)
    print("ready %d %d %d" % (os.getpid(), total, n), flush=True)
    turn = 0
    for line in sys.stdin:
        if line.strip() != "go":
            break
        turn += 1
        t0 = time.perf_counter()
        held, ok_bytes, oom, bad = [], 0, 0, 0
        try:
            for i in range(n):
                x = torch.empty(GIB // 4, dtype=torch.int32, device="cuda")
                v = 7 * turn + i
                x.fill_(v)
                held.append((x, v))
            for x, v in held:
                # every element equals v: the sum is checked exactly (int64 accumulation)
                if int(x.sum(dtype=torch.int64).item()) != v * x.numel():
                    bad += 1
                else:
                    ok_bytes += x.numel() * 4
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            # without PyTorch's cache (PYTORCH_NO_CUDA_MEMORY_CACHING=1) a failed cudaMalloc
            # raises torch.AcceleratorError ("CUDA error: out of memory"), not OutOfMemoryError
            if "out of memory" not in str(e):
                raise
            oom = 1
        held.clear()
        torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved()
        ms = (time.perf_counter() - t0) * 1000.0
        print("done %d %d %d %.1f %d" % (oom, bad, ok_bytes, ms, reserved), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--json-out")
    ap.add_argument("--stat", help="tessera-stat, to read each process's lending counters")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    if a.worker:
        return worker(a.fraction)

    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--mode",
                               a.mode, "--fraction", str(a.fraction)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
             for _ in range(2)]
    res = {"mode": a.mode, "fraction": a.fraction, "turns": [], "ooms": 0, "bad": 0,
           "bytes_checked": 0, "error": None}
    try:
        for p in procs:
            head = p.stdout.readline().split()
            if not head or head[0] != "ready":
                raise RuntimeError("a worker did not start: %r" % head)
            res.setdefault("pids", []).append(int(head[1]))
            res["device_bytes"], res["tensors_per_turn"] = int(head[2]), int(head[3])
        for t in range(a.turns):
            who = t % 2
            p = procs[who]
            p.stdin.write("go\n")
            p.stdin.flush()
            ans = p.stdout.readline().split()
            if not ans or ans[0] != "done":
                raise RuntimeError("worker %d stopped in turn %d: %r" % (who, t + 1, ans))
            oom, bad, nb, ms, reserved = int(ans[1]), int(ans[2]), int(ans[3]), float(ans[4]), int(ans[5])
            res["turns"].append({"process": who, "oom": oom, "bad": bad, "bytes": nb, "ms": ms,
                                 "torch_reserved": reserved})
            res["ooms"] += oom
            res["bad"] += bad
            res["bytes_checked"] += nb
            print("[lend_pair] %s turn %d, process %d: %s, %d bytes checked, %.1f ms"
                  % (a.mode, t + 1, who, "OUT OF MEMORY" if oom else "ok", nb, ms), flush=True)
        if a.stat and a.mode.startswith("tessera"):
            res["lending"] = []
            for pid in res["pids"]:
                r = subprocess.run([a.stat, "--json", str(pid)], capture_output=True, text=True,
                                   timeout=20)
                try:
                    d = json.loads(r.stdout)
                except ValueError:
                    d = {"error": (r.stderr or r.stdout)[-300:]}
                res["lending"].append({k: v for k, v in _flat(d) if "lend" in k or k.endswith("reserved_bytes.all.current")})
    except Exception as e:  # the verdict says what went wrong
        res["error"] = str(e)
    finally:
        for p in procs:
            try:
                p.stdin.close()
                p.wait(timeout=a.timeout)
            except Exception:
                p.kill()
    res["exit_codes"] = [p.returncode for p in procs]
    expect_oom = not a.mode.startswith("tessera") or a.mode == "tessera-nolend"
    if res["error"] or res["bad"]:
        verdict = "FAIL"
    elif expect_oom:
        verdict = "PASS" if res["ooms"] > 0 else "FAIL"
    else:
        verdict = "PASS" if res["ooms"] == 0 and len(res["turns"]) == a.turns else "FAIL"
    res["verdict"] = verdict
    res["expected"] = "an out-of-memory" if expect_oom else "no out-of-memory"
    print("RESULT mode=%s verdict=%s ooms=%d bad=%d turns=%d bytes_checked=%d expected='%s'%s"
          % (a.mode, verdict, res["ooms"], res["bad"], len(res["turns"]), res["bytes_checked"],
             res["expected"], " error='%s'" % res["error"] if res["error"] else ""), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if verdict == "PASS" else 1


def _flat(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flat(v, prefix + str(k) + ".")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _flat(v, prefix + str(i) + ".")
    else:
        yield prefix.rstrip("."), d


if __name__ == "__main__":
    sys.exit(main())
