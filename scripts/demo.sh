#!/usr/bin/env bash
# tessera's demo: unmodified CUDA programs with and without tessera, on the real GPU when there
# is one, otherwise on the simulated CUDA device (tests/sim), saying which.
#   1. allocation churn: driver calls with and without tessera (exact counts), data verified;
#   2. fragmentation: a request PyTorch's policy and its expandable segments cannot serve,
#      served by tessera's default and by defragment:True;
#   3. what tessera-stat shows of a running process.
# Builds first if needed (build/). Options: --sim (use the simulator even with a GPU).
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
force_sim=0
[ "${1:-}" = "--sim" ] && force_sim=1

scripts/setup.sh || exit 1
if [ ! -f build/build.ninja ]; then
  echo "demo: configuring build/ (meson)"
  # the options scripts/test.sh gives its main build, so that the tests after the demo reuse
  # this build instead of compiling everything again
  meson setup build -Dwerror=true >/dev/null || exit 1
fi
# Build, showing progress every 10% (a first build takes minutes on a small machine); nothing
# is printed when everything is up to date.
buildlog=$(mktemp)
ninja -C build 2>&1 | tee "$buildlog" | awk -F'[][/]' '
  /^\[[0-9]+\/[0-9]+\]/ {
    if (!started) { print "demo: building tessera (" $3 " steps)"; started = 1 }
    p = int(100 * $2 / $3)
    if (p >= next_p) { printf "   build: %3d%% (%d of %d)\n", p, $2, $3; fflush(); next_p = p - p % 10 + 10 }
  }'
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  tail -20 "$buildlog"
  echo "demo: build failed (above): run 'ninja -C build' to see everything"
  rm -f "$buildlog"
  exit 1
fi
rm -f "$buildlog"

P=build/tests/programs
TESSERA=$root/build/tools/tessera   # tessera run: preloads build/shim/libtessera.so
SHIM=$root/build/shim/libtessera.so
STAT=build/tools/tessera-stat
stats=$(mktemp -d)
trap 'rm -rf "$stats"' EXIT
export TESSERA_STATS_DIR=$stats

if [ $force_sim -eq 0 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  mode=gpu
  echo "demo: running on the real GPU: $(nvidia-smi -L | head -1)"
  run() { "$@"; }
  sim_flag=""
else
  mode=sim
  echo "demo: no GPU found (or --sim): running on the simulated CUDA device (host memory), 2 GiB"
  export TESSERA_SIM_MEMORY=2G
  run() { scripts/with-sim -q "$@"; }
  sim_flag="--sim"
fi

# The device-memory driver calls a run made (cuMemAlloc/cuMemFree, and cuMemCreate/cuMemMap/...
# for expandable segments), counted exactly: by the simulator's report on the simulated device;
# on a GPU, without tessera, every cudaMalloc/cudaFree is one driver call.
report=$stats/sim-report
sim_driver_calls() { # the report's last line
  tail -1 "$report" | python3 -c "import json,sys; d=json.load(sys.stdin); \
print(sum(d[k] for k in ('alloc_calls', 'free_calls', 'create_calls', 'release_calls', 'map_calls', 'unmap_calls')))"
}

# tessera's counters of a finished process (TESSERA_STATS_KEEP=1 keeps its page)
counter() { # pid key
  $STAT --json "$1" | python3 -c "import json,sys; d=json.load(sys.stdin)['$1']; \
print(sum(v.get('$2', 0) for v in d.values() if isinstance(v, dict)))"
}
field() { sed -n "s/.*RESULT.* $1=\([^ ]*\).*/\1/p" | tail -1; }

echo
echo "== 1. allocation churn: 4 threads, 3000 random allocations each (1 KiB - 8 MiB), every byte verified"
args="--threads 4 --iters 3000 --max-size 8M"
without=$(TESSERA_SIM_REPORT=$report run $P/churn $args | tail -1)
if [ "$mode" = sim ]; then
  device0=$(sim_driver_calls)
else
  device0=$(( $(echo "$without" | field allocs) + $(echo "$without" | field frees) ))
fi
with=$(TESSERA_STATS_KEEP=1 TESSERA_SIM_REPORT=$report run env LD_PRELOAD=$SHIM $P/churn $args | tail -1)
pid=$(ls "$stats" | sed -n 's/^tessera\.//p' | head -1)
calls=$(( $(counter "$pid" num_alloc_calls) + $(counter "$pid" num_free_calls) ))
if [ "$mode" = sim ]; then
  device=$(sim_driver_calls)
else
  device=$(( $(counter "$pid" num_device_alloc) + $(counter "$pid" num_device_free) ))
fi
printf '   without tessera: status %s, %s device-memory driver calls\n' \
  "$(echo "$without" | field status)" "$device0"
printf '   with tessera:    status %s (%s allocations verified), %s device-memory driver calls\n' \
  "$(echo "$with" | field status)" "$(echo "$with" | field verified)" "$device"
printf '   the program made %s cudaMalloc/cudaFree calls: %s driver calls avoided (%.1fx fewer)\n' \
  "$calls" "$((device0 - device))" "$(python3 -c "print($device0 / max($device, 1))")"
echo "   (exact counts, unlike a speed ratio: on a GPU each driver call costs microseconds and"
echo "    cudaFree synchronises the device)"
$STAT --gc >/dev/null 2>&1

echo
echo "== 2. fragmentation: 100 x 4 MiB, the even ones freed (200 MiB free in 4 MiB holes), then 100 MiB"
echo "   on a device limited to 420 MiB (TESSERA_ALLOC_CONF memory_limit:420M)"
args="--unit 4M --count 100 --request 100M"
for conf in "memory_limit:420M,expandable_segments:False" "memory_limit:420M,expandable_segments:True" \
    "memory_limit:420M" "memory_limit:420M,defragment:True"; do
  out=$(TESSERA_STATS_KEEP=1 $TESSERA run $sim_flag --conf "$conf" -- $P/seed_even $args 2>"$stats/err" | tail -1)
  pid=$(ls "$stats" | sed -n 's/^tessera\.//p' | head -1)
  st=$(echo "$out" | field status)
  printf '   %-48s %-4s (stitches %s, retries %s)\n' "$conf" "$([ "$st" = ok ] && echo served || echo OOM)" \
    "$(counter "$pid" num_stitches)" "$(counter "$pid" num_alloc_retries)"
  # what the program printed on stderr: tessera's out-of-memory line, with its advice
  fold -s -w 92 "$stats/err" | sed 's/^/      /'
  rm -f "$stats"/tessera.* "$stats/err"
done
echo "   PyTorch's policy and its expandable segments (the first two) cannot: the free memory is in"
echo "   holes inside segments or pages. tessera's default (the third: no key but the cap) and"
echo "   defragment map the holes' pages into one new range (stitching), copying nothing."

echo
echo "== 3. tessera-stat on a running process"
probe=build/tests/integration/stats_probe
fifo=$stats/go
mkfifo "$fifo"
( $TESSERA run $sim_flag -- $probe < "$fifo" > "$stats/probe.out" 2>&1 ) &
exec 3>"$fifo"
for _ in $(seq 1 100); do grep -q READY "$stats/probe.out" 2>/dev/null && break; sleep 0.1; done
pid=$(sed -n 's/^READY //p' "$stats/probe.out")
$STAT
echo
$STAT map "$pid" --width 60
echo go >&3; sleep 0.3; echo go >&3; exec 3>&-
wait
echo
if [ "$mode" = sim ]; then
  # without a GPU a program only runs on the simulated device (built with the shared runtime)
  echo "demo: done ($mode). Try:  build/tools/tessera run --sim --summary -- your-program   and   $STAT"
else
  echo "demo: done ($mode). Try:  build/tools/tessera run --summary -- your-program   and   $STAT"
fi
