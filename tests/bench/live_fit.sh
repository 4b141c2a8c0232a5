#!/usr/bin/env bash
# live_fit.sh: does a program that fits the device without tessera still fit under a policy?
# Runs sample programs near the simulated device's capacity with no tessera and under each
# configuration given (default: PyTorch's policy and expandable segments), and prints the exit
# statuses side by side (0: served, 2: out of memory). The check behind the choice of default
# (docs/BENCHMARKS.md, "Programs that fit the device without tessera"). CONF "default"
# is tessera's default (no configuration string).
#   tests/bench/live_fit.sh [BUILD_DIR] [CONF ...]
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
shift || true
confs=("$@")
[ ${#confs[@]} -eq 0 ] && confs=(expandable_segments:False expandable_segments:True)
run() { # memory conf program args...
    local mem=$1 conf=$2
    shift 2
    [ "$conf" = default ] && conf=
    if [ "$conf" = none ]; then
        TESSERA_SIM_MEMORY=$mem LD_LIBRARY_PATH=$build/tests/sim timeout 120 "$@" >/dev/null 2>&1
    else
        TESSERA_ALLOC_CONF=$conf TESSERA_SIM_MEMORY=$mem LD_PRELOAD=$build/shim/libtessera.so \
            LD_LIBRARY_PATH=$build/tests/sim timeout 120 "$@" >/dev/null 2>&1
    fi
    printf ' %s' "$?"
}
printf '| program | device | no tessera |'
printf ' %s |' "${confs[@]}"
printf '\n|---|---|---:|'
for _ in "${confs[@]}"; do printf -- '---:|'; done
printf '\n'
while read -r mem prog args; do
    printf '| %s %s | %s |' "$prog" "$args" "$mem"
    for c in none "${confs[@]}"; do
        # shellcheck disable=SC2086
        run "$mem" "$c" "$build/tests/programs/$prog" $args
        printf ' |'
    done
    printf '\n'
done <<'CASES'
512M seed_every5th --unit 8M --count 39 --request 16M
512M seed_middle --first 16M --middle 32M --last 16M --request 48M
512M seed_even --unit 2M --count 40 --request 20M
512M seed_cyclic --min 12M --max 32M
512M churn --threads 2 --iters 300 --max-size 4M
400M seed_every5th --unit 10M --count 39 --request 20M
220M seed_even --unit 2M --count 100 --request 50M
256M seed_cyclic --min 4M --max 16M
CASES
