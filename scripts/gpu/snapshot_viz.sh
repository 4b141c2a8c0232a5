#!/usr/bin/env bash
# scripts/gpu/snapshot_viz.sh LIB PYTHON OUTDIR: a tessera memory snapshot opened by PyTorch's
# own viewer. A small PyTorch program (its cache off, so tessera serves every tensor) runs out
# of memory under LD_PRELOAD=LIB with snapshot_on_oom and history_events; the pickle it writes
# is rendered with `python -m torch.cuda._memory_viz` (trace_plot, segment_plot, stats).
# Prints its progress and, last, one line "PASS: ...", "FAIL: ..." or "SKIP: ..." (run-all.sh
# records that line as its step). Exit status 0 unless FAIL.
set -u
LIB=${1:?usage: snapshot_viz.sh LIB PYTHON OUTDIR}
PY=${2:?}
OUT=${3:?}
mkdir -p "$OUT/stats" || { echo "FAIL: cannot create $OUT"; exit 1; }
rm -f "$OUT"/oom-*.pickle "$OUT"/*.html

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>"$OUT/import.err"; then
    echo "SKIP: no PyTorch with a usable GPU ($(tail -n1 "$OUT/import.err" | cut -c1-120))"
    exit 0
fi
[ -f "$LIB" ] || { echo "FAIL: $LIB not built"; exit 1; }

# 8 x 64 MiB, every other one freed, then a request no device has: the out of memory.
LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 TESSERA_STATS_DIR="$OUT/stats" \
TESSERA_ALLOC_CONF="history_events:4096,snapshot_on_oom:$OUT/oom-%p-%n.pickle" \
    "$PY" -c '
import torch
xs = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
del xs[::2]
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    print("no out of memory?")
except torch.OutOfMemoryError:
    print("out of memory, as intended")
' >"$OUT/program.out" 2>"$OUT/program.err"
cat "$OUT/program.out"
grep '^tessera:' "$OUT/program.err" | head -n 3
snap=$(ls "$OUT"/oom-*.pickle 2>/dev/null | head -n1)
[ -n "$snap" ] || { echo "FAIL: no snapshot written (see $OUT/program.err)"; exit 1; }

fails=""
for cmd in trace_plot segment_plot; do
    if "$PY" -m torch.cuda._memory_viz "$cmd" "$snap" -o "$OUT/$cmd.html" >"$OUT/$cmd.log" 2>&1 &&
        [ -s "$OUT/$cmd.html" ]; then
        echo "rendered $cmd: $OUT/$cmd.html ($(stat -c %s "$OUT/$cmd.html") bytes)"
    else
        fails+=" $cmd"
        tail -n 5 "$OUT/$cmd.log" | sed 's/^/  | /'
    fi
done
"$PY" -m torch.cuda._memory_viz stats "$snap" >"$OUT/stats.txt" 2>&1 || fails+=" stats"
head -n 5 "$OUT/stats.txt" | sed 's/^/  /'
# PyTorch's interactive viewer (its MemoryViz.js, from this PyTorch) in headless Chromium: every
# event of every view clicked (tests/viz/viewcheck.py; needs node, chromium and build-viz/).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$PY" "$ROOT/tests/viz/viewcheck.py" "$snap" >"$OUT/viewcheck.log" 2>&1
vc=$?
sed 's/^/  /' "$OUT/viewcheck.log" | tail -n 8
viewer=$(tail -n1 "$OUT/viewcheck.log")
[ $vc -eq 0 ] || [ $vc -eq 77 ] || fails+=" MemoryViz.js"
if [ -n "$fails" ]; then
    echo "FAIL: PyTorch's viewers could not show the snapshot:$fails"
    exit 1
fi
echo "PASS: the snapshot_on_oom pickle renders in torch.cuda._memory_viz (trace_plot, segment_plot, stats); MemoryViz.js: ${viewer#*: }"
