#!/usr/bin/env python3
"""Pause and resume of a PyTorch training process between two steps (scripts/gpu/run-all.sh,
step k): the losses must be bit-identical to a run never paused.

Two workers run the same deterministic training (an MLP of DEPTH layers of WIDTH x WIDTH with
Adam: weights, gradients and optimizer state hold several GiB), under tessera
(LD_PRELOAD=libtessera.so, PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that every tensor is tessera's).
Between steps PAUSE_AT and PAUSE_AT + 1 the first one is paused with `tessera-stat pause PID`
(its device memory copied to its host memory, the GPU's pages given back, every address kept)
and resumed with `tessera-stat resume PID`; the second never is. Reported: the device memory
the worker held before the pause and after it (nvidia-smi), the pause's and the resume's time
per GiB (tessera's own figures), and whether every loss, printed as float.hex, is the same.

  pause_torch.py --stat TESSERA_STAT [--width 8192] [--depth 8] [--steps 6] [--pause-at 3]
                 [--json-out FILE]
Prints one RESULT line (verdict=PASS when the losses are identical and the pause gave back at
least 90% of what the worker held) and writes JSON.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

GIB = 1 << 30


def worker(width, depth, steps, pause_at):
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(512, width, device="cuda")
    y = torch.randn(512, width, device="cuda")
    print("ready %d" % os.getpid(), flush=True)
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print("step %d %s" % (step, float(loss.item()).hex()), flush=True)
        if step == pause_at:
            torch.cuda.synchronize()
            print("between", flush=True)
            if sys.stdin.readline().strip() != "go":
                return 1
    return 0


def smi_used_mib(pid):
    """The device memory nvidia-smi says pid uses, in MiB (None when it cannot say)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        f = [s.strip() for s in line.split(",")]
        if len(f) == 2 and f[0] == str(pid):
            return int(f[1])
    return None


def run(a, pause):
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                          "--width", str(a.width), "--depth", str(a.depth), "--steps",
                          str(a.steps), "--pause-at", str(a.pause_at)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    res = {"losses": [], "paused": pause}
    try:
        head = p.stdout.readline().split()
        if not head or head[0] != "ready":
            raise RuntimeError("the worker did not start: %r" % head)
        pid = int(head[1])
        for line in p.stdout:
            w = line.split()
            if w and w[0] == "step":
                res["losses"].append(w[2])
            elif w and w[0] == "between":
                if pause:
                    res["held_mib"] = smi_used_mib(pid)
                    for verb in ("pause", "resume"):
                        t = time.monotonic()
                        r = subprocess.run([a.stat, verb, str(pid)], capture_output=True,
                                           text=True, timeout=600)
                        res[verb + "_out"] = (r.stdout + r.stderr).strip()
                        res[verb + "_wall_s"] = time.monotonic() - t
                        if r.returncode != 0:
                            raise RuntimeError("tessera-stat %s: %s" % (verb, res[verb + "_out"]))
                        m = re.search(r" in ([0-9.]+) ms", r.stdout)
                        res[verb + "_ms"] = float(m.group(1)) if m else None
                        m = re.search(r": ([0-9.]+) (B|KiB|MiB|GiB) copied", r.stdout)
                        if m:
                            k = {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]
                            res[verb + "_bytes"] = float(m.group(1)) * (1 << k)
                        if verb == "pause":
                            res["paused_mib"] = smi_used_mib(pid)
                p.stdin.write("go\n")
                p.stdin.flush()
        p.wait(timeout=600)
        res["exit"] = p.returncode
    except Exception as e:
        res["error"] = str(e)
        p.kill()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stat")
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--pause-at", type=int, default=3)
    ap.add_argument("--json-out")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.width, a.depth, a.steps, a.pause_at)
    if not a.stat:
        ap.error("--stat is needed")
    paused, plain = run(a, True), run(a, False)
    same = paused["losses"] == plain["losses"] and len(plain["losses"]) == a.steps
    held, after = paused.get("held_mib"), paused.get("paused_mib")
    gave = (held - after) / held if held and after is not None else None
    per_gib = {}
    for verb in ("pause", "resume"):
        b, ms = paused.get(verb + "_bytes"), paused.get(verb + "_ms")
        per_gib[verb] = ms / (b / GIB) if b and ms is not None else None
    ok = same and not paused.get("error") and not plain.get("error") and gave is not None and gave >= 0.9
    out = {"identical_losses": same, "paused": paused, "plain": plain, "given_share": gave,
           "ms_per_gib": per_gib, "verdict": "PASS" if ok else "FAIL"}
    print("RESULT verdict=%s identical_losses=%s held_mib=%s paused_mib=%s pause_ms_per_gib=%s "
          "resume_ms_per_gib=%s%s" % (out["verdict"], same, held, after,
                                      "%.1f" % per_gib["pause"] if per_gib["pause"] else None,
                                      "%.1f" % per_gib["resume"] if per_gib["resume"] else None,
                                      " error='%s'" % (paused.get("error") or plain.get("error"))
                                      if paused.get("error") or plain.get("error") else ""),
          flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
