#!/usr/bin/env python3
"""gen_workloads.py: synthetic multi-step allocation traces (RMM CSV logs) for tessera-replay.

    python3 tools/workloads/gen_workloads.py [-o DIR] [--seed N] [--only NAME[,NAME...]] [--list]

Writes, into DIR (default build-bench/workloads/):
    NAME.csv      an RMM replay log: Thread,Time,Action,Pointer,Size,Stream
    index.json    per workload: file, description, parameters, events, allocations, frees,
                  steps, step_end_lines (1-based line of the last row of each step; line 1 is the
                  header, so `head -n step_end_lines[k-1] NAME.csv` is exactly the first k
                  steps), peak_live_bytes (the most requested bytes live at once) and
                  static_bytes (what stays allocated for the whole run)

Python 3 standard library only. Deterministic: the same --seed gives byte-identical files on any
Python 3 (only random.Random.random() is used, whose sequence is stable across versions; no
hashing order, no floating-point formatting in the output). See tools/workloads/README.md for
what each workload models.

Rows: `0,HH:MM:SS.ffffff,allocate,0xPTR,SIZE,0x0` and `0,...,free,0xPTR,SIZE,0x0` (the free row
carries the allocation's size). Time advances 1 us per row. Pointers are unique for the whole
file (never reused): 0x7f0000000000 + 512 * serial. They are only names: tessera-replay maps each
allocation to its own slot and never looks at the recorded addresses.
"""

import argparse
import json
import math
import os
import random
import sys

MiB = 1 << 20
GiB = 1 << 30
BF16 = 2
FP32 = 4
I64 = 8


class Rng:
    """random.Random with only version-stable primitives."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def random(self):
        return self.r.random()

    def below(self, n):
        return min(int(self.r.random() * n), n - 1)

    def uniform_int(self, lo, hi):  # inclusive
        return lo + self.below(hi - lo + 1)

    def expo(self, mean):
        return -mean * math.log(1.0 - self.r.random())

    def lognormal(self, median, sigma):
        # Box-Muller from two uniforms
        u1 = 1.0 - self.r.random()
        u2 = self.r.random()
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return median * math.exp(sigma * z)

    def poisson(self, lam):
        # Knuth: fine for the small rates used here
        limit, k, p = math.exp(-lam), 0, 1.0
        while True:
            p *= self.r.random()
            if p <= limit:
                return k
            k += 1


class Log:
    """Collects rows; tracks live bytes, steps and the static set."""

    def __init__(self):
        self.rows = []
        self.serial = 0
        self.live = {}
        self.live_bytes = 0
        self.peak_live = 0
        self.allocs = 0
        self.frees = 0
        self.step_ends = []

    def alloc(self, size):
        size = int(size)
        if size <= 0:
            raise ValueError("size must be positive")
        self.serial += 1
        ptr = 0x7F0000000000 + 512 * self.serial
        self.live[ptr] = size
        self.live_bytes += size
        self.peak_live = max(self.peak_live, self.live_bytes)
        self.allocs += 1
        self.rows.append((0, ptr, size))
        return ptr

    def free(self, ptr):
        size = self.live.pop(ptr)
        self.live_bytes -= size
        self.frees += 1
        self.rows.append((1, ptr, size))

    def free_all(self, ptrs):
        for p in ptrs:
            self.free(p)

    def end_step(self):
        self.step_ends.append(len(self.rows) + 1)  # +1: the header is line 1

    def write(self, path):
        with open(path, "w", newline="\n") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            out = []
            for i, (kind, ptr, size) in enumerate(self.rows):
                us = i
                s, us = divmod(us, 1000000)
                m, s = divmod(s, 60)
                h, m = divmod(m, 60)
                out.append("0,%02d:%02d:%02d.%06d,%s,0x%x,%d,0x0\n"
                           % (h % 24, m, s, us, "allocate" if kind == 0 else "free", ptr, size))
                if len(out) >= 65536:
                    f.write("".join(out))
                    out = []
            f.write("".join(out))


# --- (a) transformer training with variable sequence lengths ---------------------------------------

def transformer_varlen(rng, log, p):
    L, d, h, V, b = p["layers"], p["d_model"], p["heads"], p["vocab"], p["batch"]
    ffn = 4 * d
    # Parameters (fp32 master weights) and Adam state, allocated once at start.
    per_layer = [("ln1", 2 * d), ("qkv", d * 3 * d + 3 * d), ("proj", d * d + d), ("ln2", 2 * d),
                 ("fc1", d * ffn + ffn), ("fc2", ffn * d + d)]
    params = [("embed", V * d), ("pos", p["max_seq"] * d)]
    for i in range(L):
        params += [("%s.%d" % (n, i), c) for n, c in per_layer]
    params += [("lnf", 2 * d)]  # the LM head is tied to the embedding
    static = []
    for _, count in params:
        static.append(log.alloc(count * FP32))
    for _, count in params:  # Adam exp_avg, exp_avg_sq
        static.append(log.alloc(count * FP32))
        static.append(log.alloc(count * FP32))
    static_bytes = log.live_bytes
    log.end_step()  # step 0: set-up

    for step in range(p["steps"]):
        s = 16 * rng.uniform_int(p["min_seq"] // 16, p["max_seq"] // 16)
        bsd = b * s * d * BF16
        bhss = b * h * s * s * BF16
        tokens = log.alloc(b * s * I64)
        targets = log.alloc(b * s * I64)
        # autocast keeps a bf16 copy of every weight it casts until the forward ends
        casts = []
        saved = []  # per layer: tensors kept for backward
        x = log.alloc(bsd)  # embedding output
        for i in range(L):
            for _, c in per_layer[1:2] + per_layer[2:3] + per_layer[4:6]:
                casts.append(log.alloc(c * BF16))
            ln1 = log.alloc(bsd)
            qkv = log.alloc(3 * bsd)
            scores = log.alloc(bhss)
            probs = log.alloc(bhss)
            log.free(scores)
            ctx = log.alloc(bsd)
            proj = log.alloc(bsd)
            x1 = log.alloc(bsd)  # residual add
            ln2 = log.alloc(bsd)
            fc1 = log.alloc(4 * bsd)
            act = log.alloc(4 * bsd)
            fc2 = log.alloc(bsd)
            x2 = log.alloc(bsd)
            log.free(proj)
            log.free(fc2)
            saved.append(dict(x=x, ln1=ln1, qkv=qkv, probs=probs, ctx=ctx, x1=x1, ln2=ln2,
                              fc1=fc1, act=act))
            x = x2
        lnf = log.alloc(bsd)
        logits = log.alloc(b * s * V * BF16)
        logits32 = log.alloc(b * s * V * FP32)
        loss = log.alloc(FP32)
        log.free_all(casts)  # autocast cache cleared when the forward ends

        # backward
        grads = []
        g32 = log.alloc(b * s * V * FP32)
        log.free(logits32)
        g16 = log.alloc(b * s * V * BF16)
        log.free(g32)
        log.free(logits)
        grads.append(log.alloc(V * d * FP32))  # tied embedding / LM head weight grad
        g = log.alloc(bsd)
        log.free(g16)
        gx = log.alloc(bsd)  # through the final layer norm
        log.free(g)
        log.free(lnf)
        log.free(x)
        g = gx
        for i in reversed(range(L)):
            t = saved[i]
            g_act = log.alloc(4 * bsd)
            grads.append(log.alloc(ffn * d * FP32 + d * FP32))  # fc2
            log.free(t["act"])
            g_fc1 = log.alloc(4 * bsd)
            log.free(g_act)
            log.free(t["fc1"])
            g_ln2 = log.alloc(bsd)
            grads.append(log.alloc(d * ffn * FP32 + ffn * FP32))  # fc1
            log.free(g_fc1)
            log.free(t["ln2"])
            g_x1 = log.alloc(bsd)
            grads.append(log.alloc(2 * d * FP32))  # ln2
            log.free(g_ln2)
            log.free(t["x1"])
            g_ctx = log.alloc(bsd)
            grads.append(log.alloc(d * d * FP32 + d * FP32))  # proj
            log.free(t["ctx"])
            g_probs = log.alloc(bhss)
            g_scores = log.alloc(bhss)
            log.free(g_probs)
            log.free(t["probs"])
            g_qkv = log.alloc(3 * bsd)
            log.free(g_scores)
            log.free(g_ctx)
            log.free(t["qkv"])
            g_ln1 = log.alloc(bsd)
            grads.append(log.alloc(d * 3 * d * FP32 + 3 * d * FP32))  # qkv
            log.free(g_qkv)
            log.free(t["ln1"])
            g_in = log.alloc(bsd)
            grads.append(log.alloc(2 * d * FP32))  # ln1
            log.free(g_ln1)
            log.free(g_x1)
            log.free(g)
            log.free(t["x"])
            g = g_in
        grads.append(log.alloc(p["max_seq"] * d * FP32))  # positional embedding
        log.free(g)
        log.free(loss)
        log.free(tokens)
        log.free(targets)
        # optimizer: foreach Adam makes one temporary per parameter (the denominator)
        for _, count in params:
            tmp = log.alloc(count * FP32)
            log.free(tmp)
        log.free_all(grads)  # zero_grad(set_to_none=True)
        log.end_step()
    return static_bytes


# --- (b) batch size drifting N -> N+1 -------------------------------------------------------------

RESNET_STAGES = [(3, 256, 56), (4, 512, 28), (6, 1024, 14), (3, 2048, 7)]  # blocks, channels, hw


def batch_drift(rng, log, p):
    res = p["resolution"] / 224.0
    # ResNet-50 parameters (25.6 M) and SGD momentum, fp32
    param_sizes = []
    for blocks, c, _ in RESNET_STAGES:
        mid = c // 4
        for blk in range(blocks):
            cin = c if blk else c // 2
            param_sizes += [cin * mid, mid * mid * 9, mid * c, 2 * mid, 2 * mid, 2 * c]
            if blk == 0:
                param_sizes += [cin * c, 2 * c]
    param_sizes += [64 * 3 * 49, 2 * 64, 2048 * 1000, 1000]
    static = [log.alloc(n * FP32) for n in param_sizes]
    static += [log.alloc(n * FP32) for n in param_sizes]  # momentum
    static_bytes = log.live_bytes
    log.end_step()

    for step in range(p["steps"]):
        b = p["batch0"] + step  # the drift: one more sample every step
        images = log.alloc(b * 3 * p["resolution"] ** 2 * BF16)
        labels = log.alloc(b * I64)

        def act(c, hw):
            return int(b * c * (hw * res) ** 2) * BF16

        saved = []
        stem = log.alloc(act(64, 112))
        pool = log.alloc(act(64, 56))
        saved += [stem, pool]
        x = pool
        for blocks, c, hw in RESNET_STAGES:
            mid = c // 4
            for blk in range(blocks):
                ws = log.alloc(min(act(mid, hw) // 2 + MiB, 256 * MiB))  # cuDNN workspace
                a1 = log.alloc(act(mid, hw))
                n1 = log.alloc(act(mid, hw))
                log.free(ws)
                a2 = log.alloc(act(mid, hw))
                n2 = log.alloc(act(mid, hw))
                a3 = log.alloc(act(c, hw))
                n3 = log.alloc(act(c, hw))
                if blk == 0:
                    ds = log.alloc(act(c, hw))
                    dn = log.alloc(act(c, hw))
                    saved += [ds, dn]
                out = log.alloc(act(c, hw))  # residual add + relu
                saved += [a1, n1, a2, n2, a3, n3]
                x = out
                saved.append(out)
        pooled = log.alloc(b * 2048 * BF16)
        logits = log.alloc(b * 1000 * FP32)
        loss = log.alloc(FP32)
        # backward: walk the saved activations in reverse, one gradient alive at a time
        g = log.alloc(b * 1000 * FP32)
        log.free(logits)
        grads = [log.alloc(2048 * 1000 * FP32)]
        gp = log.alloc(b * 2048 * BF16)
        log.free(g)
        log.free(pooled)
        g = log.alloc(act(2048, 7))
        log.free(gp)
        pi = len(param_sizes) - 5
        for t in reversed(saved[2:]):
            size = log.live[t]
            ws = log.alloc(min(size // 2 + MiB, 256 * MiB))
            gn = log.alloc(size)
            log.free(ws)
            if pi >= 0:
                grads.append(log.alloc(param_sizes[pi] * FP32))
                pi -= 1
            log.free(t)
            log.free(g)
            g = gn
        for t in reversed(saved[:2]):
            gn = log.alloc(log.live[t])
            log.free(t)
            log.free(g)
            g = gn
        log.free(g)
        log.free(loss)
        log.free(images)
        log.free(labels)
        log.free_all(grads)
        log.end_step()
    return static_bytes


# --- (c) mixture of experts: per-expert buffers sized by the routed token count -------------------

def moe(rng, log, p):
    L, d, ffn, E, k = p["layers"], p["d_model"], p["ffn"], p["experts"], p["top_k"]
    T = p["batch"] * p["seq"]
    # bf16 parameters and gradients' home; fp32 master + Adam sharded over p["zero"] ranks
    layer_params = [4 * d * d, 2 * d, d * E] + [3 * d * ffn] * E
    params = [p["vocab"] * d] + layer_params * L
    static = [log.alloc(n * BF16) for n in params]
    static += [log.alloc(max(n * 12 // p["zero"], 512)) for n in params]
    static_bytes = log.live_bytes
    log.end_step()

    tsd = T * d * BF16
    for step in range(p["steps"]):
        tokens = log.alloc(T * I64)
        x = log.alloc(tsd)
        saved = []
        for layer in range(L):
            ln = log.alloc(tsd)
            qkv = log.alloc(3 * tsd)
            attn = log.alloc(tsd)  # flash attention: no s x s tensor
            lse = log.alloc(p["batch"] * p["heads"] * p["seq"] * FP32)
            o = log.alloc(tsd)
            x1 = log.alloc(tsd)
            ln2 = log.alloc(tsd)
            logits = log.alloc(T * E * FP32)
            probs = log.alloc(T * E * FP32)
            topi = log.alloc(T * k * I64)
            topw = log.alloc(T * k * FP32)
            log.free(logits)
            # skewed routing: Dirichlet(alpha) weights, T*k assignments
            w = [rng.expo(1.0) ** (1.0 / p["alpha"]) for _ in range(E)]
            tot = sum(w)
            counts = [int(T * k * wi / tot) for wi in w]
            counts[0] += T * k - sum(counts)
            perm = log.alloc(T * k * I64)
            experts = []
            for n in counts:
                if n == 0:
                    experts.append(None)
                    continue
                xe = log.alloc(n * d * BF16)
                gate = log.alloc(n * ffn * BF16)
                up = log.alloc(n * ffn * BF16)
                h = log.alloc(n * ffn * BF16)
                ye = log.alloc(n * d * BF16)
                experts.append((n, xe, gate, up, h, ye))
            comb = log.alloc(tsd)
            x2 = log.alloc(tsd)
            saved.append(dict(x=x, ln=ln, qkv=qkv, attn=attn, lse=lse, o=o, x1=x1, ln2=ln2,
                              probs=probs, topi=topi, topw=topw, perm=perm, experts=experts,
                              comb=comb))
            x = x2
        out = log.alloc(T * p["vocab"] * BF16)
        loss = log.alloc(FP32)
        # backward
        g = log.alloc(T * p["vocab"] * BF16)
        log.free(out)
        gx = log.alloc(tsd)
        log.free(g)
        log.free(x)
        g = gx
        for layer in reversed(range(L)):
            t = saved[layer]
            gcomb = log.alloc(tsd)
            log.free(t["comb"])
            for e in reversed(t["experts"]):
                if e is None:
                    continue
                n, xe, gate, up, h, ye = e
                gye = log.alloc(n * d * BF16)
                gh = log.alloc(n * ffn * BF16)
                log.free(ye)
                log.free(gye)
                ggu = log.alloc(2 * n * ffn * BF16)
                log.free(h)
                log.free(gate)
                log.free(up)
                log.free(gh)
                gxe = log.alloc(n * d * BF16)
                log.free(ggu)
                log.free(xe)
                log.free(gxe)
            glog = log.alloc(T * E * FP32)
            log.free(t["perm"])
            log.free(t["topw"])
            log.free(t["topi"])
            log.free(t["probs"])
            gln2 = log.alloc(tsd)
            log.free(glog)
            log.free(gcomb)
            log.free(t["ln2"])
            gx1 = log.alloc(tsd)
            log.free(gln2)
            log.free(t["x1"])
            go = log.alloc(tsd)
            log.free(t["o"])
            gqkv = log.alloc(3 * tsd)
            log.free(go)
            log.free(t["attn"])
            log.free(t["lse"])
            log.free(t["qkv"])
            gln = log.alloc(tsd)
            log.free(gqkv)
            log.free(t["ln"])
            gin = log.alloc(tsd)
            log.free(gln)
            log.free(gx1)
            log.free(g)
            log.free(t["x"])
            g = gin
        log.free(g)
        log.free(loss)
        log.free(tokens)
        # optimizer: gradients were reduce-scattered into a flat bf16 bucket per layer
        for n in [p["vocab"] * d] + [sum(layer_params)] * L:
            bucket = log.alloc(n * BF16 // p["zero"])
            log.free(bucket)
        log.end_step()
    return static_bytes


# --- (d) serving: KV caches that grow by reallocation ---------------------------------------------

def serving(rng, log, p):
    d, ffn, V, layers = p["d_model"], p["ffn"], p["vocab"], p["layers"]
    kv_per_token = 2 * layers * p["kv_heads"] * p["head_dim"] * BF16
    chunk = p["grow_tokens"]
    # weights, bf16, one tensor per matrix
    weights = [V * d]
    for _ in range(layers):
        weights += [d * (d + 2 * p["kv_heads"] * p["head_dim"]), d * d, 2 * d * ffn, ffn * d, 2 * d]
    weights += [d, V * d]
    static = [log.alloc(n * BF16) for n in weights]
    static_bytes = log.live_bytes
    log.end_step()

    active = []  # [tokens, capacity_tokens, remaining_output, ptr]
    queue = []
    it_per_step = p["iters_per_step"]
    for it in range(p["steps"] * it_per_step):
        # arrivals
        for _ in range(rng.poisson(p["arrival_rate"])):
            prompt = int(min(max(rng.lognormal(p["prompt_median"], 0.9), 16), p["max_prompt"]))
            out = int(min(max(rng.lognormal(p["output_median"], 0.8), 4), p["max_output"]))
            queue.append((prompt, out))
        # admit and prefill (one prompt per iteration, as chunked schedulers do)
        if queue and len(active) < p["max_batch"]:
            prompt, out = queue.pop(0)
            cap = (prompt + 1 + chunk - 1) // chunk * chunk
            kv = log.alloc(cap * kv_per_token)
            h = log.alloc(prompt * d * BF16)
            qkv = log.alloc(prompt * (d + 2 * p["kv_heads"] * p["head_dim"]) * BF16)
            a = log.alloc(prompt * d * BF16)
            log.free(qkv)
            m = log.alloc(prompt * 2 * ffn * BF16)
            log.free(m)
            log.free(a)
            lg = log.alloc(V * FP32)
            log.free(lg)
            log.free(h)
            active.append([prompt + 1, cap, out - 1, kv])
        # one decode iteration over the running batch
        B = len(active)
        if B:
            h = log.alloc(B * d * BF16)
            qkv = log.alloc(B * (d + 2 * p["kv_heads"] * p["head_dim"]) * BF16)
            attn = log.alloc(B * d * BF16)
            log.free(qkv)
            m = log.alloc(B * 2 * ffn * BF16)
            log.free(m)
            log.free(attn)
            logits = log.alloc(B * V * FP32)
            nxt = log.alloc(B * I64)
            log.free(logits)
            log.free(h)
            log.free(nxt)
            still = []
            for r in active:
                r[0] += 1
                r[2] -= 1
                if r[2] <= 0:
                    log.free(r[3])
                    continue
                if r[0] >= r[1]:
                    # grow: allocate the larger buffer, copy, free the old one
                    r[1] += chunk
                    new = log.alloc(r[1] * kv_per_token)
                    log.free(r[3])
                    r[3] = new
                still.append(r)
            active = still
        if (it + 1) % it_per_step == 0:
            log.end_step()
    return static_bytes


WORKLOADS = [
    ("transformer_varlen", transformer_varlen,
     "GPT-style decoder (24 layers, d_model 2048, 16 heads, ~1.3 B parameters) trained in bf16 "
     "autocast with fp32 master weights and Adam; batch 8, sequence length drawn uniformly from "
     "256..2048 (multiple of 16) every step; attention without flash (b x h x s x s probs "
     "kept for backward)",
     dict(layers=24, d_model=2048, heads=16, vocab=50304, batch=8, min_seq=256, max_seq=2048,
          steps=80)),
    ("batch_drift", batch_drift,
     "ResNet-50 at 384x384, bf16 activations, SGD with momentum; the batch grows by one sample "
     "every step (144 -> 144+steps-1), so every activation is slightly larger than last step's",
     dict(batch0=144, resolution=384, steps=120)),
    ("moe", moe,
     "Mixture-of-experts decoder (12 layers, d_model 2048, 8 experts of ffn 5632, top-2, "
     "dropless), 8 x 2048 tokens per step; per layer and expert the buffers are proportional "
     "to the tokens routed there (skewed, Dirichlet(0.5)-like weights drawn every layer)",
     dict(layers=12, d_model=2048, ffn=5632, experts=8, top_k=2, heads=16, batch=8, seq=2048,
          vocab=32000, alpha=0.5, zero=8, steps=40)),
    ("serving_kv", serving,
     "LLM serving (Llama-3-8B shapes: 32 layers, 8 KV heads x 128, 128 KiB of KV per token): "
     "Poisson arrivals, lognormal prompt and output lengths, continuous batching up to 128 "
     "requests; each request's KV buffer grows by reallocation (allocate larger by 256 tokens, "
     "free the old) as tokens are generated; a step is 50 decode iterations",
     dict(layers=32, d_model=4096, ffn=14336, vocab=128256, kv_heads=8, head_dim=128,
          grow_tokens=256, max_batch=128, arrival_rate=0.25, prompt_median=1500, max_prompt=16384,
          output_median=300, max_output=4096, iters_per_step=50, steps=120)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", default=None,
                    help="output directory (default: build-bench/workloads at the repository root)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = ap.parse_args()
    if args.list:
        for name, _, desc, params in WORKLOADS:
            print("%-20s %s" % (name, desc))
        return 0
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = args.out or os.path.join(root, "build-bench", "workloads")
    os.makedirs(out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    index = {"generator": "tools/workloads/gen_workloads.py", "seed": args.seed, "workloads": []}
    for i, (name, fn, desc, params) in enumerate(WORKLOADS):
        if only and name not in only:
            continue
        rng = Rng(args.seed * 1000 + i)
        log = Log()
        static = fn(rng, log, params)
        path = os.path.join(out, name + ".csv")
        log.write(path)
        entry = dict(name=name, file=name + ".csv", description=desc, params=params,
                     events=len(log.rows), allocations=log.allocs, frees=log.frees,
                     steps=len(log.step_ends) - 1, step_end_lines=log.step_ends,
                     peak_live_bytes=log.peak_live, static_bytes=static)
        index["workloads"].append(entry)
        print("%-20s %7d events, %4d steps (+ set-up), peak live %.2f GiB, static %.2f GiB -> %s"
              % (name, len(log.rows), entry["steps"], log.peak_live / GiB, static / GiB, path),
              file=sys.stderr)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
