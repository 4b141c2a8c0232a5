#!/usr/bin/env bash
# tessera's demo: unmodified CUDA programs with and without tessera, on the real GPU when there
# is one, otherwise on the simulated CUDA device (tests/sim), saying which.
#   1. allocation churn: driver calls avoided, speed, and data verified;
#   2. fragmentation: a request PyTorch's policy cannot serve, served with defragment:True;
#   3. what tessera-stat shows of a running process.
# Builds first if needed (build/). Options: --sim (use the simulator even with a GPU).
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
force_sim=0
[ "${1:-}" = "--sim" ] && force_sim=1

scripts/setup.sh || exit 1
if [ ! -f build/build.ninja ]; then
  meson setup build >/dev/null || exit 1
fi
ninja -C build >/dev/null || { echo "demo: build failed: run 'ninja -C build' to see why"; exit 1; }

P=build/tests/programs
TESSERA=$root/build/tools/tessera   # tessera run: preloads build/shim/libtessera.so
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

# tessera's counters of a finished process (TESSERA_STATS_KEEP=1 keeps its page)
counter() { # pid key
  $STAT --json "$1" | python3 -c "import json,sys; d=json.load(sys.stdin)['$1']; \
print(sum(v.get('$2', 0) for v in d.values() if isinstance(v, dict)))"
}
field() { sed -n "s/.*RESULT.* $1=\([^ ]*\).*/\1/p" | tail -1; }

echo
echo "== 1. allocation churn: 4 threads, 3000 random allocations each (1 KiB - 8 MiB), every byte verified"
args="--threads 4 --iters 3000 --max-size 8M"
without=$(run $P/churn $args | tail -1)
with=$($TESSERA run --summary $sim_flag -- $P/churn $args 2>"$stats/summary" | tail -1)
calls=$(( $(grep '(num_alloc_calls)' "$stats/summary" | awk '{print $4}') + $(grep '(num_free_calls)' "$stats/summary" | awk '{print $4}') ))
device=$(grep '(num_device_alloc + num_device_free' "$stats/summary" | awk '{print $4}')
ops0=$(echo "$without" | field ops_per_s); ops1=$(echo "$with" | field ops_per_s)
printf '   without tessera: %s ops/s, status %s\n' "$ops0" "$(echo "$without" | field status)"
printf '   with tessera:    %s ops/s, status %s (%s allocations verified)\n' "$ops1" \
  "$(echo "$with" | field status)" "$(echo "$with" | field verified)"
printf '   driver calls:    %s allocation calls served with %s device calls: %s avoided (%.1fx fewer)\n' \
  "$calls" "$device" "$((calls - device))" "$(python3 -c "print($calls / max($device, 1))")"
echo "   what tessera run --summary printed:"
sed 's/^/     /' "$stats/summary"
[ "$mode" = sim ] && echo "   (the simulator's cudaMalloc/cudaFree cost little: on a GPU each costs microseconds and cudaFree synchronises the device)"
$STAT --gc >/dev/null 2>&1

echo
echo "== 2. fragmentation: 100 x 4 MiB, the even ones freed (200 MiB free in 4 MiB holes), then 100 MiB"
echo "   on a device limited to 420 MiB (TESSERA_ALLOC_CONF memory_limit:420M)"
args="--unit 4M --count 100 --request 100M"
for conf in "memory_limit:420M" "memory_limit:420M,expandable_segments:True" "memory_limit:420M,defragment:True"; do
  out=$(TESSERA_STATS_KEEP=1 $TESSERA run $sim_flag --conf "$conf" -- $P/seed_even $args 2>/dev/null | tail -1)
  pid=$(ls "$stats" | sed -n 's/^tessera\.//p' | head -1)
  st=$(echo "$out" | field status)
  printf '   %-48s %-4s (stitches %s, retries %s)\n' "$conf" "$([ "$st" = ok ] && echo served || echo OOM)" \
    "$(counter "$pid" num_stitches)" "$(counter "$pid" num_alloc_retries)"
  rm -f "$stats"/tessera.*
done
echo "   PyTorch's policy (the first two) cannot: the free memory is in holes inside segments;"
echo "   defragment maps the holes' pages into one new range (stitching), copying nothing."

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
echo "demo: done ($mode). Try:  build/tools/tessera run --summary -- your-program   and   $STAT"
