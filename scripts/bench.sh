#!/usr/bin/env bash
# bench.sh: every tessera benchmark that runs without a GPU, in one go, side by side.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: scripts/bench.sh [options]

Builds tessera (release, in build-bench/ unless --build-dir) if needed, then runs:
  1. bench-core: the allocator core's cached malloc+free path over the device model
     (ns per pair: p50/p99/p99.9/mean; 1 and 2 threads; default and defragment:True)
  2. tessera-replay --compare --json on every trace in tests/data/traces/*.pickle and every
     synthetic workload (tools/workloads/gen_workloads.py), for the configurations below,
     on an unlimited device and on an 80 GiB one
  3. driver calls and estimated driver time per step in steady state for the synthetic
     multi-step workloads
  4. the LD_PRELOAD path on the simulated device: tests/programs/churn with and without
     libtessera.so, and with TESSERA_TRACE recording
  5. stream-ordered reuse through LD_PRELOAD (tests/bench/stream_order.py): the tight
     cudaMalloc/cudaFree loop against a glibc pair, the host-runs-ahead loop against
     reuse_fence:none, the multi-stream variants against reuse_fence:sync, and streams that
     overlap without per-round synchronisation (device time from event timestamps)
  6. pinned host memory through LD_PRELOAD (tests/bench/pinned.py): the cudaHostAlloc,
     cudaMallocHost and cuMemHostAlloc + free pair of tests/programs/staging without tessera,
     with its pinned cache (and another tree's, --baseline) and with pinned_cache:False; and
     the pinned bytes of tests/programs/offload against the bytes it asks for
  7. the cudaMallocAsync + cudaFreeAsync pair through LD_PRELOAD (tests/bench/async_pair.py):
     without tessera, with its defaults and with expandable_segments:True
  8. the default at the floor: tessera's default beside PyTorch's policy, expandable segments
     and the former default (a handle per page) with the default's targets checked, on every trace
     and workload (tests/bench/floor.py; host instructions counted under valgrind where it is
     installed: apt-get install valgrind); loops that repeat one step, replayed on every device
     size around their edge (tests/bench/edge.py); and the programs of tests/bench/live_fit.sh
  9. the counters read from Python (tests/bench/py_stats.py): tessera.stats() in a process
     under tessera run --sim, beside tessera.stats(pid) and tessera-stat --json run and parsed
  10. CUDA IPC through LD_PRELOAD (tests/bench/ipc_cost.py): cudaIpcGetMemHandle and
      cudaIpcOpenMemHandle of tests/programs/ipc_share without tessera and under tessera's
      default, PyTorch's policy and expandable segments
  11. memory lent between processes (tests/bench/lending_four.py): four processes of
     tests/integration/lend_cycle on one shared simulated device, live peaks 90% of it and
     caches 160%, in turns, under PyTorch's policy without and with lending and tessera's
     default (cycles run out of memory, bytes read back); then, without pressure, the time per
     cycle with lending on and off
  12. pause and resume (tests/bench/pause.py): a process holding 8 GiB on a shared simulated
     device paused and resumed with tessera-stat; the device memory given back (read by another
     process), the time per GiB each way, every byte checked at its old address
and writes Markdown tables to stdout and BUILD/bench-results.md, JSON to
BUILD/bench-results.json (raw outputs in BUILD/bench-raw/). Each part takes well under 2 minutes
on 2 cores.

Options:
  --build-dir DIR   build directory (default: build-bench at the repository root)
  --quick           shorter runs (bench-core --quick, fewer churn iterations, one replay pass)
  --skip-build      use the build directory as it is
  --only LIST       comma-separated parts to run: core,replay,steady,shim,stream,pinned,async,
                    floor,python,ipc,lending,pause (default:
                    all)
  --traces DIR      part 8 also replays the *.pickle of DIR (those not already in the run)
  --driver-costs NAME|FILE  price the replays' driver calls with a built-in table (h100, the
                    default; h200; a100, the published figures) or with FILE (tessera-costs
                    writes it on a GPU)
  --baseline DIR    another tree's build directory (e.g. the tree before a change, built with
                    --buildtype=release): the pinned part runs its libtessera.so beside this
                    tree's, in one run
  -h, --help
USAGE
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bd="$root/build-bench"
quick=0
skip_build=0
only="core,replay,steady,shim,stream,pinned,async,floor,python,ipc,lending,pause"
traces_extra=()
costs=()
baseline=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) bd=$(realpath -m "$2"); shift 2 ;;
    --build-dir=*) bd=$(realpath -m "${1#*=}"); shift ;;
    --quick) quick=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --only) only=$2; shift 2 ;;
    --only=*) only=${1#*=}; shift ;;
    --traces) [ -d "${2:-}" ] || { echo "bench.sh: --traces: '${2:-}' is not a directory" >&2; exit 2; }
        traces_extra+=(--traces "$(realpath "$2")"); shift 2 ;;
    --driver-costs)
        case "${2:-}" in
        h100 | h200 | a100) costs=(--driver-costs "$2") ;;
        *) [ -f "${2:-}" ] || { echo "bench.sh: --driver-costs: '${2:-}' is neither h100, h200, a100 nor a file" >&2; exit 2; }
            costs=(--driver-costs "$(realpath "$2")") ;;
        esac
        shift 2 ;;
    --baseline) [ -e "${2:-}/shim/libtessera.so" ] || { echo "bench.sh: --baseline: '${2:-}' has no shim/libtessera.so" >&2; exit 2; }
        baseline=(--baseline "$(realpath "$2")"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
want() { [[ ",$only," == *",$1,"* ]]; }

cd "$root"
rel() { realpath -m --relative-to="$root" "$1"; }
B=$(rel "$bd") # how commands are shown: relative to the repository root

# --- build ------------------------------------------------------------------------------------
if [ "$skip_build" -eq 0 ]; then
    if [ ! -f "$bd/build.ninja" ]; then
        meson setup "$bd" --buildtype=release -Dwerror=true >/dev/null
    fi
    ninja -C "$bd" >/dev/null
fi
for f in tools/tessera-replay tests/bench/bench-core; do
    [ -x "$bd/$f" ] || { echo "bench.sh: $bd/$f is missing (build failed?)" >&2; exit 1; }
done

raw="$bd/bench-raw"
rm -rf "$raw"
mkdir -p "$raw"
: >"$raw/commands.txt"
note_cmd() { printf '%s\t%s\n' "$1" "$2" >>"$raw/commands.txt"; }

# machine, recorded before anything runs (the load average says whether others were busy)
python3 - "$raw/machine.json" "$B" <<'PY'
import json, os, platform, subprocess, sys, time
cpu = "unknown"
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
try:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip() != ""
except OSError:
    rev, dirty = "unknown", False
with open("/proc/loadavg") as f:
    load = " ".join(f.read().split()[:3])
try:
    with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
        cs = f.read().strip()
except OSError:
    cs = "unknown"
json.dump(dict(nproc=os.cpu_count(), cpu=cpu, kernel=platform.release(), loadavg_at_start=load,
               clocksource=cs, date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               git=rev + ("+dirty" if dirty else ""), build_dir=sys.argv[2]),
          open(sys.argv[1], "w"), indent=1)
PY

# shellcheck disable=SC2054 # the comma belongs to the configuration string
# pytorch: PyTorch's policy; tessera's default is defragment:True,stitch_when:pressure (coarse
# handles, stitched by the page); the last is the former default (a handle per page)
CONFS=(pytorch expandable_segments:False,max_split_size_mb:128
    expandable_segments:False,max_split_size_mb:512 expandable_segments:True defragment:True
    defragment:True,handle_policy:geometric defragment:True,stitch_when:pressure
    defragment:True,handle_policy:page defragment:True,handle_policy:page,stitch_when:pressure)

# --- 1. core microbenchmark -------------------------------------------------------------------
if want core; then
    echo "bench.sh: bench-core ..." >&2
    args=()
    [ "$quick" -eq 1 ] && args+=(--quick)
    [ "$quick" -eq 0 ] && args+=(--repeat 5)
    note_cmd core "$B/tests/bench/bench-core ${args[*]} --json-file $B/bench-raw/core.json"
    "$bd/tests/bench/bench-core" "${args[@]}" --json-file "$raw/core.json" >"$raw/core.md"
fi

# --- 2. replays -------------------------------------------------------------------------------
traces=(tests/data/traces/*.pickle)
if want replay || want steady || want floor; then
    echo "bench.sh: generating the synthetic workloads ..." >&2
    note_cmd workloads "python3 tools/workloads/gen_workloads.py -o $B/workloads"
    python3 tools/workloads/gen_workloads.py -o "$bd/workloads" 2>"$raw/workloads.txt"
fi
workloads=()
if [ -f "$bd/workloads/index.json" ]; then
    while IFS= read -r w; do workloads+=("$B/workloads/$w.csv"); done < <(python3 -c '
import json, sys
for w in json.load(open(sys.argv[1]))["workloads"]:
    print(w["name"])' "$bd/workloads/index.json")
fi

if want replay; then
    passes=2
    [ "$quick" -eq 1 ] && passes=1
    for t in "${traces[@]}" "${workloads[@]}"; do
        name=$(basename "$t"); name=${name%.*}
        echo "bench.sh: replaying $name ..." >&2
        # The first 'default' is a warm-up column: the first replay in a process runs cold
        # (page faults, empty caches) and would make the first configuration look slower.
        # bench-results drops it. Memory figures are deterministic; ns/op is the lower of the
        # passes.
        for pass in $(seq 1 $passes); do
            cmd=("$B/tools/tessera-replay" "${costs[@]}" --json --compare "$t" pytorch "${CONFS[@]}")
            [ "$pass" -eq 1 ] && note_cmd "replay:$name" "${cmd[*]}"
            TESSERA_REPLAY_QUIET=1 "${cmd[@]}" >"$raw/replay-$name.$pass.json" 2>"$raw/replay-$name.$pass.err"
        done
        cmd=("$B/tools/tessera-replay" "${costs[@]}" --json --capacity 80G --compare "$t" pytorch "${CONFS[@]}")
        note_cmd "replay80:$name" "${cmd[*]}"
        rc=0
        TESSERA_REPLAY_QUIET=1 "${cmd[@]}" >"$raw/replay80-$name.json" 2>"$raw/replay80-$name.err" || rc=$?
        # 3: some configuration ran out of memory on 80 GiB (reported in the table)
        [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "bench.sh: $name: tessera-replay failed ($rc)" >&2; exit 1; }
    done
fi

# where defragment's driver calls come from: the page size alone (stitching off) versus stitching
if want replay; then
    echo "bench.sh: driver-call attribution ..." >&2
    note_cmd attribution "$B/tools/tessera-replay --json --conf C TRACE"
    : >"$raw/attribution.jsonl"
    for t in "${traces[@]}" "${workloads[@]}"; do
        name=$(basename "$t"); name=${name%.*}
        for c in expandable_segments:True defragment:True,stitching:False defragment:True \
            defragment:True,handle_policy:geometric defragment:True,stitch_when:pressure \
            defragment:True,handle_policy:page defragment:True,handle_policy:page,stitch_when:pressure; do
            TESSERA_REPLAY_QUIET=1 "$bd/tools/tessera-replay" "${costs[@]}" --json --conf "$c" "$t" 2>/dev/null |
                python3 -c 'import json,sys; r=json.load(sys.stdin); r["name"]=sys.argv[1]; print(json.dumps(r))' "$name" \
                >>"$raw/attribution.jsonl"
        done
    done
fi

# --- 3. driver calls per step in steady state -------------------------------------------------
if want steady && [ ${#workloads[@]} -gt 0 ]; then
    echo "bench.sh: steady-state driver calls ..." >&2
    note_cmd steady "head -n LINE $B/workloads/W.csv > PREFIX.csv; $B/tools/tessera-replay ${costs[*]} --json --conf C PREFIX.csv (LINE = index.json step_end_lines[k])"
    : >"$raw/steady.jsonl"
    for t in "${workloads[@]}"; do
        name=$(basename "$t" .csv)
        # cut points: set-up + 1 step, set-up + k steps (k = steps/2), everything
        read -r steps l1 lk k < <(python3 -c '
import json, sys
for w in json.load(open(sys.argv[1]))["workloads"]:
    if w["name"] == sys.argv[2]:
        s = w["steps"]; k = s // 2; e = w["step_end_lines"]
        print(s, e[1], e[k], k)' "$bd/workloads/index.json" "$name")
        head -n "$l1" "$t" >"$raw/$name.first-1.csv"
        head -n "$lk" "$t" >"$raw/$name.first-$k.csv"
        for c in "${CONFS[@]}"; do
            for part in "1:$raw/$name.first-1.csv" "$k:$raw/$name.first-$k.csv" "$steps:$t"; do
                n=${part%%:*}
                f=${part#*:}
                read -r calls ms < <("$bd/tools/tessera-replay" "${costs[@]}" --json --conf "$c" "$f" 2>/dev/null |
                    python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["device_calls"], r["driver_ms"])')
                printf '{"workload": "%s", "conf": "%s", "steps_replayed": %d, "steps": %d, "device_calls": %d, "driver_ms": %s}\n' \
                    "$name" "$c" "$n" "$steps" "$calls" "$ms" >>"$raw/steady.jsonl"
            done
        done
    done
fi

# --- 4. the LD_PRELOAD path on the simulated device -----------------------------------------------
if want shim; then
    if [ -x "$bd/tests/programs/churn" ] && [ -e "$bd/tests/sim/libcuda.so.1" ] && [ -e "$bd/shim/libtessera.so" ]; then
        echo "bench.sh: churn on the simulated device ..." >&2
        reps=3
        small_iters=30000
        big_iters=200
        if [ "$quick" -eq 1 ]; then reps=1; small_iters=5000; big_iters=50; fi
        : >"$raw/churn.jsonl"
        trace_file=$(mktemp /tmp/tessera-bench-trace.XXXXXX.csv)
        run_churn() { # label workload env... -- args...
            local label=$1 wl=$2; shift 2
            local envs=()
            while [ "$1" != "--" ]; do envs+=("$1"); shift; done
            shift
            local cmd=(env "${envs[@]}" scripts/with-sim --build-dir "$B" -q "$B/tests/programs/churn" "$@")
            note_cmd "churn:$wl:$label" "${cmd[*]}"
            for r in $(seq 1 $reps); do
                local line
                line=$(TESSERA_BUILD_DIR="$bd" "${cmd[@]}" 2>>"$raw/churn.err" | grep '^RESULT' | tail -1)
                printf '{"workload": "%s", "label": "%s", "rep": %d, "result": "%s"}\n' "$wl" "$label" "$r" "$line" >>"$raw/churn.jsonl"
                rm -f "$trace_file"
            done
        }
        shim="$B/shim/libtessera.so"
        for wl in small default; do
            if [ "$wl" = small ]; then
                args=(--iters "$small_iters" --max-size 4K --small-max 4K --large-pct 0)
            else
                args=(--iters "$big_iters")
            fi
            run_churn "no tessera" "$wl" TESSERA_ALLOC_CONF= -- "${args[@]}"
            run_churn "tessera" "$wl" LD_PRELOAD="$shim" TESSERA_ALLOC_CONF= -- "${args[@]}"
            run_churn "tessera + TESSERA_TRACE" "$wl" LD_PRELOAD="$shim" TESSERA_ALLOC_CONF= TESSERA_TRACE="$trace_file" -- "${args[@]}"
            run_churn "tessera defragment:True" "$wl" LD_PRELOAD="$shim" TESSERA_ALLOC_CONF=defragment:True -- "${args[@]}"
        done
        rm -f "$trace_file"
    else
        echo "bench.sh: churn, the simulator or libtessera.so is not built: skipping the LD_PRELOAD part" >&2
    fi
fi

# --- 5 to 7: the parts that drive sample programs through LD_PRELOAD from a Python script -----
# preload_part PART SCRIPT PROGRAM WHAT: runs tests/bench/SCRIPT when PROGRAM and libtessera.so
# are built (--quick passed on), its raw output in bench-raw/PART.{md,json}
preload_part() {
    local part=$1 script=$2 prog=$3 what=$4
    want "$part" || return 0
    if [ -x "$bd/tests/programs/$prog" ] && [ -e "$bd/shim/libtessera.so" ]; then
        echo "bench.sh: $what on the simulated device ..." >&2
        local args=()
        [ "$quick" -eq 1 ] && args+=(--quick)
        [ "$part" = pinned ] && args+=("${baseline[@]}")
        note_cmd "$part" "python3 tests/bench/$script $B $B/bench-raw/$part ${args[*]}"
        python3 "tests/bench/$script" "$bd" "$raw/$part" "${args[@]}" >/dev/null
    else
        echo "bench.sh: $prog or libtessera.so is not built: skipping $what" >&2
    fi
}
preload_part stream stream_order.py tight_loop "stream-ordered reuse"
preload_part pinned pinned.py staging "pinned host memory"
preload_part async async_pair.py staging "cudaMallocAsync/cudaFreeAsync pairs"
preload_part ipc ipc_cost.py ipc_share "CUDA IPC export and open"

# --- 8. the default at the floor --------------------------------------------------------------
if want floor; then
    echo "bench.sh: the default at the floor ..." >&2
    qa=()
    [ "$quick" -eq 1 ] && qa+=(--quick)
    note_cmd floor "python3 tests/bench/floor.py $B $B/bench-raw/floor ${qa[*]} ${traces_extra[*]}"
    python3 tests/bench/floor.py "$bd" "$raw/floor" "${qa[@]}" "${traces_extra[@]}" >/dev/null
    note_cmd edge "python3 tests/bench/edge.py $B $B/bench-raw/edge ${qa[*]}"
    python3 tests/bench/edge.py "$bd" "$raw/edge" "${qa[@]}" >/dev/null
    if [ -e "$bd/tests/sim/libcuda.so.1" ] && [ -e "$bd/shim/libtessera.so" ]; then
        note_cmd live_fit "tests/bench/live_fit.sh $B expandable_segments:False expandable_segments:True defragment:True,handle_policy:page,stitch_when:pressure default"
        tests/bench/live_fit.sh "$bd" expandable_segments:False expandable_segments:True \
            defragment:True,handle_policy:page,stitch_when:pressure default >"$raw/live_fit.md"
    fi
fi

# bench_script PART SCRIPT WHAT: a part run by tests/bench/SCRIPT over the build (--quick passed on),
# its raw output in bench-raw/PART
bench_script() {
    local args=()
    [ "$quick" -eq 1 ] && args+=(--quick)
    echo "bench.sh: $3 ..." >&2
    note_cmd "$1" "python3 tests/bench/$2 $B $B/bench-raw/$1 ${args[*]}"
    python3 "tests/bench/$2" "$bd" "$raw/$1" "${args[@]}" >/dev/null
}

# --- 11. memory lent between processes (a probe of tests/integration, not a sample program) ------
if want lending; then
    if [ -x "$bd/tests/integration/lend_cycle" ] && [ -e "$bd/shim/libtessera.so" ]; then
        bench_script lending lending_four.py "four processes lending on one shared device"
    else
        echo "bench.sh: lend_cycle or libtessera.so is not built: skipping lending" >&2
    fi
fi

# --- 12. pause and resume (a probe of tests/integration) ------------------------------------------
if want pause; then
    if [ -x "$bd/tests/integration/ipc_peer" ] && [ -e "$bd/shim/libtessera.so" ]; then
        bench_script pause pause.py "pause and resume of a process holding 8 GiB"
    else
        echo "bench.sh: ipc_peer or libtessera.so is not built: skipping pause" >&2
    fi
fi

# --- 9. the counters from Python -------------------------------------------------------------------
if want python; then
    if [ -d "$bd/python/tessera" ] && [ -x "$bd/tools/tessera" ] && [ -d "$bd/tests/sim" ]; then
        bench_script python py_stats.py "tessera.stats() from Python"
    else
        echo "bench.sh: the Python module, tessera or the simulator is not built: skipping" >&2
    fi
fi

# --- report -------------------------------------------------------------------------------------
TS_BENCH_DRIVER_COSTS="${costs[1]:-}" python3 tests/bench/report.py "$bd" "$B" | tee "$bd/bench-results.md"
# report_part PART TITLE: a part's Markdown, under its title and command
report_part() {
    [ -f "$raw/$1.md" ] || return 0
    { printf '\n## %s\n\n' "$2"
      printf 'Command: `%s`\n\n' "$(grep "^$1"$'\t' "$raw/commands.txt" | cut -f2)"
      cat "$raw/$1.md"; } | tee -a "$bd/bench-results.md"
}
report_part stream "Stream-ordered reuse through LD_PRELOAD (simulated device)"
report_part pinned "Pinned host memory through LD_PRELOAD (simulated device)"
report_part async "cudaMallocAsync + cudaFreeAsync through LD_PRELOAD (simulated device)"
report_part floor "The default at the floor: targets on every trace and workload"
report_part edge "At the edge: loops that repeat one step, on every device size around their edge"
report_part live_fit "Programs that fit the simulated device without tessera"
report_part python "The counters from Python: tessera.stats() every step"
report_part ipc "CUDA IPC: export and open through LD_PRELOAD (simulated device)"
report_part lending "Memory lent between processes: four processes on one shared simulated device"
report_part pause "Pause and resume: a process holding 8 GiB on a shared simulated device"
echo "bench.sh: wrote $B/bench-results.md and $B/bench-results.json" >&2
