#!/usr/bin/env bash
# Run tests again and again while busy loops take the CPUs, to show they do not depend on timing.
#   scripts/loaded.sh [--runs N] [--loops N] [--build DIR] [--full] [TEST ...]
# Each run is `meson test -C DIR TEST...` (default: the tests that once failed on load alone:
# integration_Overlap, integration_StreamOrder, integration_UnsafeReuse, integration_Ipc,
# hardening_Sharing, sim-op_delay, sim-ipc); --full runs `scripts/test.sh` instead. N busy
# loops (default 4) run the whole time, at normal priority. Prints one line per run and
# "loaded: R runs, F failed, under L busy loops on C CPUs"; exit status 0 only when none failed.
set -u
cd "$(dirname "$0")/.." || exit 1
runs=20 loops=4 dir=build full=0 tests=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    --build) dir=$2; shift 2 ;;
    --full) full=1; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "loaded.sh: unknown option $1" >&2; exit 2 ;;
    *) tests+=("$1"); shift ;;
  esac
done
case "$runs$loops" in *[!0-9]*) echo "loaded.sh: --runs and --loops take numbers" >&2; exit 2 ;; esac
[ ${#tests[@]} -gt 0 ] || tests=(integration_Overlap integration_StreamOrder integration_UnsafeReuse
  integration_Ipc hardening_Sharing sim-op_delay sim-ipc)
if [ $full -eq 0 ] && [ ! -f "$dir/build.ninja" ]; then
  echo "loaded.sh: $dir is not a build directory (meson setup $dir first)" >&2
  exit 2
fi

pids=()
stop_loops() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_loops EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$loops"); do
  (while :; do :; done) &
  pids+=($!)
done

failed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  if [ $full -eq 1 ]; then
    out=$(scripts/test.sh 2>&1); rc=$?
    summary=$(printf '%s\n' "$out" | tail -1)
  else
    out=$(meson test -C "$dir" --print-errorlogs "${tests[@]}" 2>&1); rc=$?
    summary=$(printf '%s\n' "$out" | grep -E '^(Ok|Fail|Timeout):' | tr -s ' \n' ' ')
  fi
  [ $rc -eq 0 ] || { failed=$((failed + 1)); printf '%s\n' "$out" | tail -60; }
  echo "run $i: exit $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1 /proc/loadavg): $summary"
done
echo "loaded: $runs runs, $failed failed, under $loops busy loops on $(nproc) CPUs"
[ $failed -eq 0 ]
