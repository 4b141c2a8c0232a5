#!/usr/bin/env bash
# scripts/gpu/run-all.sh: tessera on a real NVIDIA GPU, in one command that stays within a time
# budget (default 510 s; 330 s with --quick). See scripts/gpu/README.md.
#
#   a. detect the GPU (none: say so and exit 0, or 77 with --require-gpu)
#   b. build libtessera.so, tessera-stat, tessera-replay (Meson, release, no tests)
#   c. build the sample programs with nvcc, -cudart=shared and static cudart
#   d. correctness: every program, both builds, without and with LD_PRELOAD=libtessera.so
#   e. allocation churn throughput, without and with tessera
#   f. PyTorch: five allocator modes, loss checksums, peak memory, largest batch
#   k. two PyTorch processes whose caches exceed the GPU, with and without lending (lend_pair.py);
#      a PyTorch training process paused and resumed between two steps (pause_torch.py)
#   i. a tessera snapshot_on_oom pickle rendered by torch.cuda._memory_viz (snapshot_viz.sh)
#   j. driver-call latencies (tessera-costs) and the replays priced with them
#   h. other frameworks (frameworks.py: JAX, CuPy, Numba, ONNX Runtime, transformers)
#   g. the report: $OUT/gpu-results.md, gpu-results.json, gpu-log.txt, gpu-runs.tar.gz
#
# Every step reports PASS/FAIL/SKIP with its reason and never stops the others. Every command
# runs under `timeout`, inside its step's share of the budget; what does not fit is skipped
# (SKIP: time budget), never left running.
set -u
set -o pipefail

if [ "${BASH_VERSINFO[0]}" -lt 4 ] || { [ "${BASH_VERSINFO[0]}" -eq 4 ] && [ "${BASH_VERSINFO[1]}" -lt 4 ]; }; then
    echo "run-all.sh: needs bash >= 4.4 (this is $BASH_VERSION)" >&2
    exit 2
fi
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
cd "$REPO" || exit 1
ORIG_CMD="scripts/gpu/run-all.sh${*:+ $*}"

usage() {
    cat <<'EOF'
usage: scripts/gpu/run-all.sh [options]

  --quick            reduced set (second attempt when the full run was too long): ~5 min
  --require-gpu      exit 77 (instead of 0) when no NVIDIA GPU is found
  --budget SECONDS   total time budget (default 510, --quick 330); steps are scheduled in it
  --skip LIST        comma-separated steps to leave out: correctness,churn,torch,maxbatch,
                     lending,frameworks
  --programs LIST    step d runs only these programs (comma-separated, e.g. ipc_share,staging):
                     a short rerun of what changed
  --torch-modes LIST step f runs only these modes (comma-separated; default native,expandable,
                     nocache,tessera,tessera-defrag,tessera-torch,tessera-floor)
  environment: TESSERA_GPU_FLOOR_LIMIT (bytes): the cap of mode tessera-floor when mode nocache
                     did not run first (else its peak reserved + 1%)
  --build-dir DIR    build directory (default build-gpu)
  --out DIR          where the report goes (default $OUT, else BUILD_DIR/gpu-results)
  --selftest         check the report writer and the option parsing with made-up data; no GPU
  -h, --help         this text

Developer options (dry runs on the simulated device, scripts/gpu/dev/sim-dry-run.sh):
  --sizes small      scale the memory-heavy program arguments down (default: real)
  --torch-device D   pass --device D to torch_train.py (cpu: no GPU needed)
  environment: PYTHON (default python3), NVCC, CUDA_HOME, NVIDIA_SMI (default nvidia-smi)
EOF
}

# --- options ---------------------------------------------------------------------------------
QUICK=0
REQUIRE_GPU=0
BUDGET=""
SKIP=","
BUILD_DIR="build-gpu"
OUT_DIR="${OUT:-}"
SIZES=real
TORCH_DEVICE=cuda
SELFTEST=0
ONLY_PROGRAMS=""
TORCH_MODES_ARG=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; shift ;;
    --require-gpu) REQUIRE_GPU=1; shift ;;
    --budget) [ $# -ge 2 ] || { echo "run-all.sh: --budget needs a value" >&2; exit 2; }
        BUDGET=$2; shift 2 ;;
    --budget=*) BUDGET=${1#*=}; shift ;;
    --skip) [ $# -ge 2 ] || { echo "run-all.sh: --skip needs a value" >&2; exit 2; }
        SKIP=",$2,"; shift 2 ;;
    --skip=*) SKIP=",${1#*=},"; shift ;;
    --programs) [ $# -ge 2 ] || { echo "run-all.sh: --programs needs a value" >&2; exit 2; }
        ONLY_PROGRAMS=",$2,"; shift 2 ;;
    --programs=*) ONLY_PROGRAMS=",${1#*=},"; shift ;;
    --torch-modes) [ $# -ge 2 ] || { echo "run-all.sh: --torch-modes needs a value" >&2; exit 2; }
        TORCH_MODES_ARG=$2; shift 2 ;;
    --torch-modes=*) TORCH_MODES_ARG=${1#*=}; shift ;;
    --build-dir) [ $# -ge 2 ] || { echo "run-all.sh: --build-dir needs a value" >&2; exit 2; }
        BUILD_DIR=$2; shift 2 ;;
    --build-dir=*) BUILD_DIR=${1#*=}; shift ;;
    --out) [ $# -ge 2 ] || { echo "run-all.sh: --out needs a value" >&2; exit 2; }
        OUT_DIR=$2; shift 2 ;;
    --out=*) OUT_DIR=${1#*=}; shift ;;
    --sizes) [ $# -ge 2 ] || { echo "run-all.sh: --sizes needs a value" >&2; exit 2; }
        SIZES=$2; shift 2 ;;
    --sizes=*) SIZES=${1#*=}; shift ;;
    --torch-device) [ $# -ge 2 ] || { echo "run-all.sh: --torch-device needs a value" >&2; exit 2; }
        TORCH_DEVICE=$2; shift 2 ;;
    --torch-device=*) TORCH_DEVICE=${1#*=}; shift ;;
    --selftest) SELFTEST=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run-all.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ -n "$BUDGET" ] && ! [[ "$BUDGET" =~ ^[0-9]+$ && "$BUDGET" -ge 60 ]]; then
    echo "run-all.sh: --budget: expected a number of seconds >= 60, got '$BUDGET'" >&2; exit 2
fi
[ -n "$BUDGET" ] || { [ "$QUICK" = 1 ] && BUDGET=330 || BUDGET=510; }
case "$SIZES" in real | small) ;; *) echo "run-all.sh: --sizes: real or small" >&2; exit 2 ;; esac
case "$TORCH_DEVICE" in cuda | cpu) ;; *) echo "run-all.sh: --torch-device: cuda or cpu" >&2; exit 2 ;; esac
for m in ${TORCH_MODES_ARG//,/ }; do
    case "$m" in native | expandable | nocache | tessera | tessera-defrag | tessera-torch | tessera-floor) ;;
    *) echo "run-all.sh: --torch-modes: unknown mode '$m'" >&2; exit 2 ;;
    esac
done
for s in ${SKIP//,/ }; do
    case "$s" in correctness | churn | torch | maxbatch | lending | frameworks) ;;
    *) echo "run-all.sh: --skip: unknown step '$s' (correctness, churn, torch, maxbatch, lending, frameworks)" >&2; exit 2 ;;
    esac
done
skipped() { [[ "$SKIP" == *",$1,"* ]]; }

PYTHON=${PYTHON:-python3}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
GPULIB="$SCRIPT_DIR/gpulib.py"

if [ "$SELFTEST" = 1 ]; then
    rc=0
    bash -n "$SCRIPT_DIR/run-all.sh" || rc=1
    "$PYTHON" -m py_compile "$SCRIPT_DIR/gpulib.py" "$SCRIPT_DIR/torch_train.py" "$SCRIPT_DIR/lend_pair.py" "$SCRIPT_DIR/pause_torch.py" || rc=1
    "$PYTHON" "$GPULIB" selftest || rc=1
    fw_out=$(mktemp -d) && "$PYTHON" "$SCRIPT_DIR/frameworks.py" --dry-run --out "$fw_out" >/dev/null || rc=1
    rm -rf "$fw_out"
    # option parsing: bad values must be usage errors (exit 2)
    for bad in "--budget 5" "--budget x" "--skip nothing" "--sizes huge" "--bogus"; do
        # shellcheck disable=SC2086
        "$SCRIPT_DIR/run-all.sh" $bad >/dev/null 2>&1
        r=$?
        if [ "$r" -ne 2 ]; then echo "selftest: '$bad' exited $r, expected 2"; rc=1; fi
    done
    echo "run-all.sh selftest: $([ $rc = 0 ] && echo ok || echo FAILED)"
    exit $rc
fi

# --- time ------------------------------------------------------------------------------------
now_ms() {
    if [ -n "${EPOCHREALTIME:-}" ]; then
        local t=${EPOCHREALTIME/[.,]/}
        echo $((10#$t / 1000))
    else
        date +%s%3N
    fi
}
START_MS=$(now_ms)
END_MS=$((START_MS + BUDGET * 1000))
secs_since() { # MS -> "12.34"
    local d=$(($(now_ms) - $1))
    printf '%d.%02d' $((d / 1000)) $((d % 1000 / 10))
}
log() { printf '[+%6ss %s] %s\n' "$(secs_since "$START_MS")" "$(date -u +%H:%M:%S)" "$*"; }

# --- a. the GPU ------------------------------------------------------------------------------
SMI_L=""
if command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
    SMI_L=$(timeout -k 5 30 "$NVIDIA_SMI" -L 2>/dev/null | grep '^GPU ' || true)
fi
if [ -z "$SMI_L" ]; then
    echo "scripts/gpu: no NVIDIA GPU found (nvidia-smi -L); nothing to do"
    [ "$REQUIRE_GPU" = 1 ] && exit 77
    exit 0
fi

# --- output, log, records --------------------------------------------------------------------
[ -n "$OUT_DIR" ] || OUT_DIR="$BUILD_DIR/gpu-results"
mkdir -p "$OUT_DIR" "$BUILD_DIR" || { echo "run-all.sh: cannot create $OUT_DIR" >&2; exit 1; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD_ABS=$(cd "$BUILD_DIR" && pwd)
WORK="$BUILD_ABS/gpu-work"
rm -rf "$WORK"
mkdir -p "$WORK/runs"
RECORDS="$WORK/records"
: >"$RECORDS"
LOG="$OUT_DIR/gpu-log.txt"
: >"$LOG"
exec 3>&1 4>&2
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!

# rec key=value ...: one record for gpulib.py (values lose tabs, newlines and 0x1f)
rec() {
    local line="" kv
    for kv in "$@"; do
        kv=${kv//$'\n'/ }
        kv=${kv//$'\r'/ }
        kv=${kv//$'\x1f'/ }
        line+="$kv"$'\x1f'
    done
    printf '%s\n' "${line%$'\x1f'}" >>"$RECORDS"
}

report() { # write the report from the records so far (also after every step)
    timeout -k 2 60 "$PYTHON" "$GPULIB" report "$RECORDS" "$OUT_DIR" >/dev/null 2>"$WORK/report.err" ||
        { log "report writer failed:"; tail -5 "$WORK/report.err"; }
}
# Interrupted (the caller's own time limit): say so and leave the report of what ran.
on_signal() {
    log "interrupted by a signal: writing the report of what ran so far"
    rec type=step "name=${STEP_NAME:-?}" status=FAIL "reason=interrupted by a signal"
    report
    exec 1>&3 2>&4
    exit 143
}
trap on_signal TERM INT HUP

STEP_START=0
STEP_NAME=""
STEP_FAILS=0
STEP_RUNS=0
STEP_SKIPS=0
STEP_DEADLINE=0
step_begin() { # NAME CAP_SECONDS RESERVE_AFTER_SECONDS
    STEP_NAME=$1
    STEP_START=$(now_ms)
    STEP_FAILS=0
    STEP_RUNS=0
    STEP_SKIPS=0
    local cap_end=$((STEP_START + $2 * 1000)) budget_end=$((END_MS - $3 * 1000))
    STEP_DEADLINE=$((cap_end < budget_end ? cap_end : budget_end))
    log "=== $STEP_NAME (up to $(((STEP_DEADLINE - STEP_START) / 1000)) s)"
}
step_end() { # [STATUS REASON]: default from the counts
    local status=${1:-} reason=${2:-}
    if [ -z "$status" ]; then
        if [ "$STEP_FAILS" -gt 0 ]; then
            status=FAIL
            reason="$STEP_FAILS of $STEP_RUNS failed"
        elif [ "$STEP_RUNS" -eq 0 ]; then
            status=SKIP
            reason="nothing ran"
        else
            status=PASS
            reason="$STEP_RUNS passed"
        fi
        [ "$STEP_SKIPS" -eq 0 ] || reason+=", $STEP_SKIPS skipped"
    fi
    local secs
    secs=$(secs_since "$STEP_START")
    rec type=step "name=$STEP_NAME" "status=$status" "reason=$reason" "seconds=$secs"
    log "=== $STEP_NAME: $status${reason:+ ($reason)} in ${secs}s"
    report
}
left_s() { # seconds left before the step's deadline
    local l=$(((STEP_DEADLINE - $(now_ms)) / 1000))
    [ "$l" -gt 0 ] && echo "$l" || echo 0
}
time_for() { # CAP: the timeout for the next command: min(CAP, time left in the step), >= 1
    # (never 0: `timeout 0` would mean no time limit at all)
    local l
    l=$(left_s)
    [ "$1" -lt "$l" ] && l=$1
    [ "$l" -ge 1 ] && echo "$l" || echo 1
}
tail_file() { # FILE LINES PREFIX
    [ -s "$1" ] && tail -n "$2" "$1" | sed "s/^/$3/"
}

# Clear what would change the allocators' behaviour; remember what was set.
CLEARED=""
for v in LD_PRELOAD PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING \
    TESSERA_ALLOC_CONF TESSERA_TRACE TESSERA_TRACE_LIMIT TESSERA_STATS_DIR TESSERA_STATS_KEEP \
    CUDA_LAUNCH_BLOCKING; do
    if [ -n "${!v+x}" ]; then
        CLEARED+="$v=${!v} "
        unset "$v"
    fi
done
export CUBLAS_WORKSPACE_CONFIG=:4096:8

log "tessera GPU checks: $ORIG_CMD (budget ${BUDGET}s, quick=$QUICK, sizes=$SIZES)"
log "repository: $REPO; report: $OUT_DIR"
[ -z "$CLEARED" ] || log "cleared from the environment: $CLEARED"
# kept as it is (the machine's own device selection, MIG included)
[ -z "${CUDA_VISIBLE_DEVICES+x}" ] || log "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES (kept)"

# a. -------------------------------------------------------------------------------------------
step_begin "a detect" 60 0
GPU_INFO=$(timeout -k 5 30 "$NVIDIA_SMI" --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2>/dev/null | head -n1)
# persistence mode off: every process pays the driver's start-up (slower step d)
PERSIST=$(timeout -k 5 30 "$NVIDIA_SMI" --query-gpu=persistence_mode,mig.mode.current \
    --format=csv,noheader 2>/dev/null | head -n1)
CUDA_DRIVER=$(timeout -k 5 30 "$NVIDIA_SMI" 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -n1 |
    sed 's/CUDA Version: *//')
OTHER_PROCS=$(timeout -k 5 30 "$NVIDIA_SMI" --query-compute-apps=pid,process_name,used_memory \
    --format=csv,noheader 2>/dev/null | tr '\n' ';')
CUDA_HOME=${CUDA_HOME:-}
if [ -z "$CUDA_HOME" ] || [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
    CUDA_HOME=$(sh "$REPO/scripts/find-cuda.sh" 2>/dev/null || true)
fi
NVCC=${NVCC:-${CUDA_HOME:+$CUDA_HOME/bin/nvcc}}
[ -n "$NVCC" ] && [ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
NVCC_VER=""
[ -z "$NVCC" ] || NVCC_VER=$(timeout -k 5 30 "$NVCC" --version 2>/dev/null | grep -i release | head -n1)
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$COMMIT" != unknown ] && [ -n "$(git -C "$REPO" status --porcelain 2>/dev/null | head -n1)" ]; then
    COMMIT+=" (with uncommitted changes)"
fi
while IFS= read -r l; do log "GPU: $l"; done <<<"$SMI_L"
log "GPU: ${GPU_INFO:-?}; CUDA (driver) ${CUDA_DRIVER:-?}; persistence mode, MIG: ${PERSIST:-?}"
log "toolkit: ${CUDA_HOME:-not found}; nvcc: ${NVCC_VER:-not found}"
log "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo 2>/dev/null) memory"
[ -z "$OTHER_PROCS" ] || log "WARNING: other processes use the GPU (memory results are disturbed): $OTHER_PROCS"
rec type=meta "command=$ORIG_CMD" "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "host=$(uname -n)" \
    "smi_L=$SMI_L" "gpu=$GPU_INFO" "gpu_modes=persistence, MIG: $PERSIST" "cuda_driver=$CUDA_DRIVER" "nvcc=$NVCC_VER" \
    "cuda_home=$CUDA_HOME" "commit=$COMMIT" "gpu_other_procs=$OTHER_PROCS" "quick=$QUICK" \
    "budget_s=$BUDGET" "env_cleared=$CLEARED" "sizes=$SIZES" "finished=0"
step_end PASS "$(echo "$SMI_L" | head -n1)"

# --- budget plan (seconds): [cap of the step, time kept back for the steps after it] --------
if [ "$QUICK" = 1 ]; then
    CAP_B=100 CAP_C=100 CAP_D=110 CAP_E=25 CAP_F=140
    RES_E=15 RES_F=100
else
    CAP_B=120 CAP_C=120 CAP_D=230 CAP_E=40 CAP_F=200
    RES_E=20 RES_F=120
fi
RES_G=8
CAP_H=$([ "$QUICK" = 1 ] && echo 60 || echo 150)
RES_H=$([ "$QUICK" = 1 ] && echo 30 || echo 60)
skipped frameworks && { CAP_H=0; RES_H=0; }
CAP_K=$([ "$QUICK" = 1 ] && echo 100 || echo 150)
RES_K=$([ "$QUICK" = 1 ] && echo 80 || echo 115)
skipped lending && { CAP_K=0; RES_K=0; }
skipped correctness && CAP_D=0
skipped churn && { CAP_E=0; RES_E=0; }
skipped torch && { CAP_F=0; RES_F=0; }
NEED_PROGRAMS=1
skipped correctness && skipped churn && NEED_PROGRAMS=0

# b. build tessera -------------------------------------------------------------------------------
LIB="$BUILD_ABS/shim/libtessera.so"
STAT="$BUILD_ABS/tools/tessera-stat"
MESON=()
NINJA=""
find_meson() {
    if command -v meson >/dev/null 2>&1 && meson --version >/dev/null 2>&1; then
        MESON=(meson)
    elif "$PYTHON" -c 'import mesonbuild' >/dev/null 2>&1; then
        MESON=("$PYTHON" -m mesonbuild.mesonmain)
    elif [ -x "$HOME/.local/bin/meson" ]; then
        MESON=("$HOME/.local/bin/meson")
    fi
    NINJA=$(command -v ninja || command -v samu || true)
    if [ -z "$NINJA" ]; then
        local d
        d=$("$PYTHON" -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null || true)
        [ -n "$d" ] && [ -x "$d/ninja" ] && NINJA="$d/ninja"
        [ -z "$NINJA" ] && [ -x "$HOME/.local/bin/ninja" ] && NINJA="$HOME/.local/bin/ninja"
    fi
    [ -z "$NINJA" ] || export NINJA
}
gcc_fallback() { # build libtessera.so and tessera-stat without Meson
    local cc=${CC:-cc} ver
    ver=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$REPO/meson.build" | head -n1)
    local flags=(-std=c11 -O2 -DNDEBUG -D_GNU_SOURCE -fPIC -fno-strict-aliasing
        -fvisibility=hidden -I"$REPO" -I"$REPO/include" -isystem "$CUDA_HOME/include"
        "-DTESSERA_VERSION=\"${ver:-unknown}\"" -pthread)
    mkdir -p "$BUILD_ABS/shim" "$BUILD_ABS/tools"
    # the version script comes from the hook list, as in shim/meson.build
    "$cc" -E -P -x c -I"$REPO" -o "$BUILD_ABS/shim/libtessera.map" "$REPO/shim/libtessera.map.in" &&
    timeout -k 5 "$(time_for 120)" "$cc" "${flags[@]}" -fno-semantic-interposition -shared \
        -o "$LIB" "$REPO"/shim/*.c "$REPO"/core/*.c "$REPO"/config/*.c \
        -Wl,--version-script="$BUILD_ABS/shim/libtessera.map" -Wl,-z,defs -Wl,-z,nodelete \
        -Wl,--no-undefined -ldl -lrt -lm &&
        timeout -k 5 "$(time_for 120)" "$cc" "${flags[@]}" -o "$STAT" "$REPO/tools/tessera-stat.c" \
            "$REPO/tools/stat/snapshot.c" "$REPO/tools/stat/serve_none.c" "$REPO"/core/*.c "$REPO"/config/*.c -lrt -lm -ldl
}

BUILD_HOW=""
if [ -z "$CUDA_HOME" ]; then
    step_begin "b build tessera" 1 0
    rec type=lib what=libtessera.so status=FAIL reason="CUDA toolkit headers not found" seconds=0
    step_end FAIL "CUDA toolkit headers not found (set CUDA_HOME)"
else
    step_begin "b build tessera" "$CAP_B" $((RES_G + RES_F + RES_E + RES_K + 60))
    find_meson
    MESON_VER=""
    [ ${#MESON[@]} -eq 0 ] || MESON_VER=$(timeout -k 2 30 "${MESON[@]}" --version 2>/dev/null)
    NINJA_VER=""
    [ -z "$NINJA" ] || NINJA_VER=$(timeout -k 2 30 "$NINJA" --version 2>/dev/null)
    log "meson: ${MESON[*]:-not found} ${MESON_VER}; ninja: ${NINJA:-not found} ${NINJA_VER}"
    rec type=meta "meson=${MESON[*]:-none} $MESON_VER" "ninja=${NINJA:-none} $NINJA_VER"
    B_LOG="$WORK/build-tessera.log"
    # the library, the tools, and the Python package (tessera-torch mode) where Meson found the
    # Python headers to build it with (asked once the build directory is set up)
    build_targets() {
        echo shim/libtessera.so tools/tessera-stat tools/tessera-replay tools/tessera-costs
        grep -q "^build tessera-python:" "$BUILD_ABS/build.ninja" 2>/dev/null && echo tessera-python
    }
    ok=0
    if [ ${#MESON[@]} -gt 0 ] && [ -n "$NINJA" ]; then
        if [ -f "$BUILD_ABS/build.ninja" ]; then
            log "reusing $BUILD_DIR (ninja)"
            timeout -k 5 "$(time_for 110)" "$NINJA" -C "$BUILD_ABS" $(build_targets) >"$B_LOG" 2>&1 && ok=1
            if [ "$ok" = 0 ]; then
                log "ninja in the existing $BUILD_DIR failed; reconfiguring (--wipe)"
                timeout -k 5 "$(time_for 60)" "${MESON[@]}" setup --wipe "$BUILD_ABS" -Dtests=disabled \
                    -Dbuildtype=release "-Dcuda-toolkit=$CUDA_HOME" >>"$B_LOG" 2>&1 &&
                    timeout -k 5 "$(time_for 110)" "$NINJA" -C "$BUILD_ABS" $(build_targets) >>"$B_LOG" 2>&1 && ok=1
            fi
        else
            log "meson setup $BUILD_DIR -Dtests=disabled -Dbuildtype=release"
            timeout -k 5 "$(time_for 60)" "${MESON[@]}" setup "$BUILD_ABS" -Dtests=disabled \
                -Dbuildtype=release "-Dcuda-toolkit=$CUDA_HOME" >"$B_LOG" 2>&1 &&
                timeout -k 5 "$(time_for 110)" "$NINJA" -C "$BUILD_ABS" $(build_targets) >>"$B_LOG" 2>&1 && ok=1
        fi
        [ "$ok" = 1 ] && BUILD_HOW="meson + ninja"
        [ "$ok" = 1 ] || { log "meson build failed:"; tail_file "$B_LOG" 25 "  | "; }
    else
        log "meson or ninja not found (meson on PATH, python3 -m mesonbuild.mesonmain, ~/.local/bin)"
    fi
    if [ "$ok" = 0 ]; then
        log "building libtessera.so and tessera-stat directly with ${CC:-cc} (no Meson)"
        if gcc_fallback >>"$B_LOG" 2>&1; then
            ok=1
            BUILD_HOW="direct ${CC:-cc} fallback (Meson unavailable or failed; see the log)"
        else
            tail_file "$B_LOG" 25 "  | "
        fi
    fi
    b_secs=$(secs_since "$STEP_START")
    if [ "$ok" = 1 ] && [ -f "$LIB" ] && [ -x "$STAT" ]; then
        hooks=$(nm -D --defined-only "$LIB" 2>/dev/null | grep -cE ' (cudaMalloc|cuMemAlloc_v2|dlsym|cuGetProcAddress_v2)$')
        rec type=lib what=libtessera.so status=PASS "reason=$BUILD_HOW; exports $hooks of 4 key hooks" "seconds=$b_secs"
        rec type=lib what=tessera-stat status=PASS "reason=$("$STAT" --version 2>&1 | head -n1)" "seconds=$b_secs"
        log "built $LIB ($BUILD_HOW)"
        step_end PASS "$BUILD_HOW"
    else
        rec type=lib what=libtessera.so status=FAIL "reason=build failed (log: build-tessera.log)" "seconds=$b_secs"
        step_end FAIL "build failed"
    fi
fi
HAVE_LIB=0
[ -f "$LIB" ] && [ -x "$STAT" ] && HAVE_LIB=1

# c. sample programs -------------------------------------------------------------------------
# every program of tests/programs, from the one list in Makefile.nvcc (RUNTIME_ and DRIVER_PROGRAMS)
mapfile -t PROGRAMS < <(awk '/\\$/ { sub(/\\$/, ""); buf = buf $0; next }
    { line = buf $0; buf = "" }
    line ~ /^(RUNTIME|DRIVER)_PROGRAMS :=/ { sub(/^[A-Z_]+ :=/, "", line); n = split(line, w, " ");
        for (k = 1; k <= n; k++) print w[k] }' "$REPO/tests/programs/Makefile.nvcc")
# probes of tests/integration whose RESULT line must be the same with and without tessera
PROBES=(pinned_probe pointer_probe free_async_probe)
PDIR_shared="$BUILD_ABS/programs-shared"
PDIR_static="$BUILD_ABS/programs-static"
pdir() { [ "$1" = shared ] && echo "$PDIR_shared" || echo "$PDIR_static"; }
if [ "$NEED_PROGRAMS" = 1 ]; then
    step_begin "c build programs (nvcc)" "$CAP_C" $((RES_G + RES_F + RES_E + RES_K + 40))
    if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
        step_end FAIL "nvcc not found (set CUDA_HOME or NVCC)"
    else
        SRC="$REPO/tests/programs"
        CUDA_LIB=""
        for d in "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib" "$CUDA_HOME/lib"; do
            [ -e "$d/libcudart.so" ] || [ -e "$d/libcudart_static.a" ] || continue
            CUDA_LIB=$d
            break
        done
        STUBS=""
        for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs" "$CUDA_HOME/lib/stubs"; do
            [ -e "$d/libcuda.so" ] && { STUBS=$d; break; }
        done
        mkdir -p "$PDIR_shared" "$PDIR_static" "$WORK/nvcc"
        NVCCFLAGS=(-O2 -D_GNU_SOURCE -Xcompiler "-Wall,-Wextra")
        jobs_max=$(nproc 2>/dev/null || echo 4)
        NVCC_PIDS=()
        running() { # PIDS...: how many are still running
            local n=0 p
            for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
            echo "$n"
        }
        t=$(time_for 100)
        log "nvcc $NVCC_VER: ${#PROGRAMS[@]} programs x {-cudart=shared, static}, $jobs_max in parallel"
        for variant in shared static; do
            for p in "${PROGRAMS[@]}"; do
                src="$SRC/$p.c"
                extra=()
                [ "$p" = driver_linked ] && src="$SRC/driver_api.c" && extra=(-DTESSERA_DRIVER_LINKED=1)
                [ "$variant" = shared ] && extra+=(-cudart=shared)
                # the toolkit's libcudart.so.13 for the shared build, as Meson's RUNPATH does
                [ "$variant" = shared ] && [ -n "$CUDA_LIB" ] && [ "$p" != driver_linked ] &&
                    extra+=(-Xlinker "-rpath=$CUDA_LIB")
                libs=(-lpthread -ldl)
                if [ "$p" = driver_linked ]; then
                    libs=(-lcuda)
                    [ -n "$STUBS" ] && libs=(-L"$STUBS" -lcuda)
                fi
                bin="$(pdir "$variant")/$p"
                key="$variant-$p"
                if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$SRC/common.h" ]; then
                    echo 0 >"$WORK/nvcc/$key.rc"
                    echo "up to date" >"$WORK/nvcc/$key.log"
                    continue
                fi
                while [ "$(running "${NVCC_PIDS[@]}")" -ge "$jobs_max" ]; do sleep 0.1; done
                (
                    s=$(now_ms)
                    timeout -k 5 "$t" "$NVCC" -x cu "${NVCCFLAGS[@]}" "${extra[@]}" -o "$bin" "$src" \
                        "${libs[@]}" >"$WORK/nvcc/$key.log" 2>&1
                    echo $? >"$WORK/nvcc/$key.rc"
                    echo $(($(now_ms) - s)) >"$WORK/nvcc/$key.ms"
                ) &
                NVCC_PIDS+=($!)
            done
        done
        # (a plain `wait` would also wait for the log's tee)
        for pid in "${NVCC_PIDS[@]}"; do wait "$pid"; done
        for variant in shared static; do
            for p in "${PROGRAMS[@]}"; do
                key="$variant-$p"
                rc=$(cat "$WORK/nvcc/$key.rc" 2>/dev/null || echo 124)
                ms=$(cat "$WORK/nvcc/$key.ms" 2>/dev/null || echo 0)
                secs=$(printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)))
                STEP_RUNS=$((STEP_RUNS + 1))
                if [ "$rc" = 0 ] && [ -x "$(pdir "$variant")/$p" ]; then
                    rec type=build "variant=$variant" "program=$p" status=PASS "seconds=$secs" \
                        "reason=$(grep -q 'up to date' "$WORK/nvcc/$key.log" && echo 'up to date')"
                else
                    STEP_FAILS=$((STEP_FAILS + 1))
                    why="nvcc exit $rc"
                    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="nvcc timed out"
                    rec type=build "variant=$variant" "program=$p" status=FAIL "seconds=$secs" \
                        "reason=$why: $(grep -m1 -iE 'error|fatal' "$WORK/nvcc/$key.log" | cut -c1-200)"
                    log "FAIL nvcc $variant/$p: $why"
                    tail_file "$WORK/nvcc/$key.log" 10 "  | "
                fi
            done
        done
        # the integration probes (plain C, compared with and without tessera in step d), with
        # the C compiler against the shared cudart, as Meson builds them
        for p in "${PROBES[@]}"; do
            STEP_RUNS=$((STEP_RUNS + 1))
            if timeout -k 5 "$(time_for 30)" cc -O2 -D_GNU_SOURCE -isystem "$CUDA_HOME/include" \
                 -I"$REPO/tests/integration" -o "$PDIR_shared/$p" "$REPO/tests/integration/$p.c" \
                 -L"$CUDA_LIB" -lcudart -Wl,-rpath,"$CUDA_LIB" -ldl -lpthread \
                 >"$WORK/nvcc/probe-$p.log" 2>&1; then
                rec type=build variant=shared "program=$p" status=PASS seconds=0 reason=cc
            else
                STEP_FAILS=$((STEP_FAILS + 1))
                rec type=build variant=shared "program=$p" status=FAIL seconds=0 \
                    "reason=cc: $(grep -m1 -iE 'error' "$WORK/nvcc/probe-$p.log" | cut -c1-200)"
                log "FAIL cc $p"
                tail_file "$WORK/nvcc/probe-$p.log" 10 "  | "
            fi
        done
        # the shared programs must find libcudart.so.13; the static ones must not need it
        if [ -x "$PDIR_shared/churn" ]; then
            log "ldd programs-shared/churn: $(ldd "$PDIR_shared/churn" 2>&1 | grep -E 'cudart|not found' | tr -s ' \t' ' ' | tr '\n' ';')"
        fi
        if [ -x "$PDIR_static/churn" ]; then
            n=$(ldd "$PDIR_static/churn" 2>&1 | grep -c cudart)
            log "ldd programs-static/churn: $n libcudart entries (static cudart: expect 0)"
        fi
        step_end
    fi
fi

# d. correctness -----------------------------------------------------------------------------
EXPECTED_BAD="$REPO/tests/programs/expected/bad_input.cuda13-h100.txt"
RUN_SEQ=0

# run_prog BUILD MODE PROGRAM CAP CHECKS -- ARGS...
#   MODE: native | tessera | tessera-defrag
#   CHECKS: space-separated; r:key=value (in the RESULT line), same:FILE (stdout equals FILE),
#           rc:N (expected exit code, default 0)
#   Sets RUN_STATUS (PASS/FAIL/SKIP) and RUN_SECS.
run_prog() {
    local build=$1 mode=$2 prog=$3 cap=$4 checks=$5
    shift 6
    local args=("$@")
    local bin
    bin="$(pdir "$build")/$prog"
    RUN_SEQ=$((RUN_SEQ + 1))
    local id
    id=$(printf 'd%03d-%s-%s-%s' "$RUN_SEQ" "$build" "$prog" "$mode")
    local dir="$WORK/runs/$id"
    mkdir -p "$dir/stats"
    local label="$build/$prog${args[*]:+ ${args[*]}} [$mode]"
    RUN_STATUS=SKIP
    RUN_SECS=0
    # --programs: the others are not part of this run (no record, so no SKIP in the report)
    if [ -n "$ONLY_PROGRAMS" ] && [[ "$ONLY_PROGRAMS" != *",$prog,"* ]]; then
        RUN_SEQ=$((RUN_SEQ - 1))
        return
    fi
    local base=(type=prog "build=$build" "program=$prog" "args=${args[*]}" "mode=$mode")
    if [ ! -x "$bin" ]; then
        RUN_STATUS=FAIL
        STEP_RUNS=$((STEP_RUNS + 1))
        STEP_FAILS=$((STEP_FAILS + 1))
        rec "${base[@]}" status=FAIL "reason=not built"
        log "FAIL $label: not built"
        return
    fi
    if [ "$mode" != native ] && [ "$HAVE_LIB" = 0 ]; then
        RUN_STATUS=FAIL
        STEP_RUNS=$((STEP_RUNS + 1))
        STEP_FAILS=$((STEP_FAILS + 1))
        rec "${base[@]}" status=FAIL "reason=libtessera.so not built"
        log "FAIL $label: libtessera.so not built"
        return
    fi
    local need=${MIN_NEED:-5}
    local t
    t=$(time_for "$cap")
    if [ "$t" -lt "$need" ]; then
        STEP_SKIPS=$((STEP_SKIPS + 1))
        rec "${base[@]}" status=SKIP "reason=time budget (${t}s left in the step, needs ~${need}s)"
        log "SKIP $label: time budget (${t}s left, needs ~${need}s)"
        return
    fi
    local envs=()
    case "$mode" in
    tessera) envs=(LD_PRELOAD="$LIB" TESSERA_TRACE="$dir/trace.csv" TESSERA_STATS_DIR="$dir/stats"
        TESSERA_STATS_KEEP=1) ;;
    tessera-defrag) envs=(LD_PRELOAD="$LIB" TESSERA_TRACE="$dir/trace.csv" TESSERA_STATS_DIR="$dir/stats"
        TESSERA_STATS_KEEP=1 TESSERA_ALLOC_CONF=defragment:True) ;;
    esac
    local s rc
    s=$(now_ms)
    timeout -k 5 "$t" env "${envs[@]}" "$bin" "${args[@]}" >"$dir/stdout" 2>"$dir/stderr" </dev/null
    rc=$?
    RUN_SECS=$(secs_since "$s")
    echo "$bin ${args[*]} (${envs[*]}) -> exit $rc in ${RUN_SECS}s" >"$dir/cmd"
    local result last want_rc=0 why="" c cut=0
    result=$(grep '^RESULT ' "$dir/stdout" | tail -n1)
    last=$(tail -n1 "$dir/stdout" 2>/dev/null)
    for c in $checks; do [[ "$c" == rc:* ]] && want_rc=${c#rc:}; done
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        if [ "$t" -lt "$cap" ]; then
            cut=1
            why="cut short by the time budget after ${t}s (its own limit is ${cap}s)"
        else
            why="timed out after ${t}s"
        fi
    elif [ "$rc" != "$want_rc" ]; then
        why="exit $rc (expected $want_rc)"
    elif [[ "$last" != "RESULT "* ]]; then
        why="the last stdout line is not a RESULT line"
    else
        for c in $checks; do
            case "$c" in
            r:*) [[ " $result " == *" ${c#r:} "* ]] || { why="RESULT lacks ${c#r:}"; break; } ;;
            same:*)
                if ! diff -u "${c#same:}" "$dir/stdout" >"$dir/diff" 2>&1; then
                    why="stdout differs from $(basename "${c#same:}")"
                    break
                fi ;;
            esac
        done
    fi
    local allocs="" stats="" msgs=""
    if [ "$mode" != native ]; then
        if [ -f "$dir/trace.csv" ]; then
            allocs=$(grep -c ',allocate,' "$dir/trace.csv")
        else
            allocs=0
        fi
        stats=$(timeout -k 2 20 "$PYTHON" "$GPULIB" stats-summary "$dir/stats" "$STAT" 2>/dev/null)
        # ALLOCS_OPTIONAL=1: a program that makes no allocation tessera serves (the driver's
        # virtual-memory API alone): what it checks is that it runs unchanged under tessera
        if [ -z "$why" ] && [ "$allocs" -eq 0 ] && [ "${ALLOCS_OPTIONAL:-0}" != 1 ]; then
            why="tessera served no allocation (0 allocate rows in TESSERA_TRACE$([ -f "$dir/trace.csv" ] || echo ': no trace file, tessera not loaded?'))"
        fi
    fi
    msgs=$(grep -m3 '^tessera' "$dir/stderr" | tr '\n' ';' | cut -c1-300)
    if [ "$cut" = 1 ]; then
        RUN_STATUS=SKIP
        STEP_SKIPS=$((STEP_SKIPS + 1))
    elif [ -z "$why" ]; then
        RUN_STATUS=PASS
        STEP_RUNS=$((STEP_RUNS + 1))
    else
        RUN_STATUS=FAIL
        STEP_RUNS=$((STEP_RUNS + 1))
        STEP_FAILS=$((STEP_FAILS + 1))
    fi
    rec "${base[@]}" "status=$RUN_STATUS" "rc=$rc" "seconds=$RUN_SECS" "result=$result" \
        "allocs=$allocs" "stats=$stats" "msgs=$msgs" "reason=$why"
    log "$RUN_STATUS $label: exit $rc, ${RUN_SECS}s${allocs:+, $allocs allocations served}${why:+: $why}"
    [ -z "$result" ] || log "     ${result}"
    [ -z "$stats" ] || [ "$stats" = pages=0 ] || log "     tessera stats: $stats"
    if [ "$RUN_STATUS" != PASS ]; then
        tail_file "$dir/stdout" 12 "  out| "
        tail_file "$dir/stderr" 12 "  err| "
        [ -s "$dir/diff" ] && head -n 30 "$dir/diff" | sed 's/^/ diff| /'
    fi
}

# pair BUILDS PROGRAM CAP CHECKS -- ARGS: native then tessera for each build. The native run
# starts only with PAIR_NEED seconds left (default 5); the tessera run is skipped when the time
# left is less than 1.5 x what the native run took.
pair() {
    local builds=$1 prog=$2 cap=$3 checks=$4 b
    shift 5
    for b in $builds; do
        MIN_NEED=${PAIR_NEED:-5} run_prog "$b" native "$prog" "$cap" "$checks" -- "$@"
        local n=${RUN_SECS%.*} need=${PAIR_NEED:-5}
        [ "$RUN_STATUS" = SKIP ] || need=$((n * 3 / 2 + 3))
        MIN_NEED=$need run_prog "$b" tessera "$prog" "$cap" "$checks" -- "$@"
    done
}

if [ "$CAP_D" -gt 0 ]; then
    step_begin "d correctness" "$CAP_D" $((RES_G + RES_F + RES_E + RES_K))
    BOTH="shared static"
    [ "$QUICK" = 1 ] && STATIC_SUBSET=1 || STATIC_SUBSET=0
    if [ "$SIZES" = small ]; then
        U=64M; U2=128M; U3=192M; MEMINFO_U=64M; REUSE=8M; DITERS=200; HEAVY=5; CYC_NEED=10
        DRV=(--count 60 --max-size 64K)
    else
        U=1G; U2=2G; U3=3G; MEMINFO_U=1G; REUSE=64M; DITERS=1000; HEAVY=40; CYC_NEED=60
        DRV=()
    fi
    # cheap programs first, each in both builds (the static build proves the driver-level path)
    pair "$BOTH" bad_input 60 "same:$EXPECTED_BAD r:status=ok" --
    pair "$BOTH" driver_api 60 "r:status=ok r:mode=dlopen r:contexts=1" -- "${DRV[@]}"
    pair "$BOTH" driver_api 60 "r:status=ok r:mode=dlopen r:contexts=2" -- --own-context "${DRV[@]}"
    pair "$BOTH" driver_linked 60 "r:status=ok r:mode=linked r:contexts=1" -- "${DRV[@]}"
    pair "$BOTH" device_reset 60 "r:status=ok" --
    pair "$BOTH" fork_child 60 "r:status=ok r:child_exit=0 r:child_cuda=1" -- --child-cuda
    pair "$BOTH" churn 90 "r:status=ok r:ooms=0 r:streams=1" -- --threads 8 --streams --iters "$DITERS"
    pair "$BOTH" reuse_race 60 "r:status=ok r:corrupt_rounds=0" -- --size "$REUSE"
    # stream-ordered reuse (reuse_fence:order, the default): every way a freed block's old work
    # can still run when the new owner's starts, graph launches included
    for variant in nb-to-legacy legacy-to-nb two-blocking new-stream ptds-threads host-func graph; do
        pair shared reuse_order 60 "r:status=ok r:corrupt_rounds=0" -- --variant "$variant" --size "$REUSE" --copies 16
    done
    # CUDA IPC and pointer queries for every block: the default, PyTorch's policy, expandable
    # segments; a block freed while open; the exporter gone; an importer without tessera. The
    # RESULT lines carry export_us/open_us, native against tessera, for the cost of sharing.
    IPC_OK="r:status=ok r:attr_bad=0 r:opened=9 r:bytes_bad=0 r:seen_back=9"
    pair shared ipc_share 60 "$IPC_OK" -- --mode basic
    pair "$BOTH" pitched 60 "r:status=ok r:rows_bad=0" -- --limit-probe
    # pinned staging buffers and stream-ordered scratch allocated and freed per step, a queued
    # copy still reading each one at its free: bytes checked, and the pair cost native against
    # tessera (RESULT <mode>_pair_ns) for docs/BENCHMARKS.md, "Pinned host memory"
    STAGING_OK="r:status=ok r:host_bad=0 r:mallochost_bad=0 r:driver_bad=0 r:async_bad=0"
    pair shared staging 60 "$STAGING_OK" -- --size 4M --steps 200
    pair shared staging 60 "$STAGING_OK" -- --size 64M --steps 48
    # CPU offload with pinned memory of mixed sizes: bytes checked; the pinned bytes (the stats
    # line's host_allocated_bytes.peak) against the RESULT's peak_requested, and pair_ns
    pair shared offload 120 "r:status=ok r:bad=0" --
    # stream-ordered allocation, pools and managed memory (never --limit-probe here: it asks for
    # managed memory until refused, which a GPU may grant past its memory); and streams that
    # should overlap, with cudaMalloc and with stream-ordered scratch (device time from events)
    pair "$BOTH" async_pool 60 "r:status=ok r:bytes_bad=0" --
    pair shared async_pool 60 "r:status=ok" -- --mode cross --rounds 200
    pair shared overlap 60 "r:status=ok r:bad_slots=0" -- --rounds 32
    pair shared overlap 60 "r:status=ok r:bad_slots=0" -- --rounds 32 --async
    # programs that share memory: interprocess events, an exported pool, driver VMM handles with
    # a module, limits, 3-D arrays, graph memory nodes (same RESULT natively and under tessera)
    pair shared ipc_events 60 "r:status=ok r:ordered=2 r:back=2" --
    pair shared pool_ipc 60 "r:status=ok r:child_saw=1 r:parent_saw=1" --
    ALLOCS_OPTIONAL=1 pair shared vmm_ipc_drv 60 "r:status=ok r:kernel_effect=1" --
    pair shared limits 60 "r:status=ok r:window=1 r:same=1" --
    pair shared array3d 60 "r:status=ok r:counted=4 r:given_back=1" --
    pair shared graph_mem 60 "r:status=ok r:graph_ok=3" --
    # the driver's answers, natively and under tessera: the same RESULT line
    for p in "${PROBES[@]}"; do
        MIN_NEED=5 run_prog shared native "$p" 30 "r:status=ok" --
        [ "$RUN_STATUS" = PASS ] || continue
        native_out=$(ls -td "$WORK"/runs/d*-shared-"$p"-native | head -n 1)/stdout
        MIN_NEED=5 run_prog shared tessera "$p" 30 "r:status=ok same:$native_out" --
    done
    # defragment:True stitches the 6 MiB block from parts of one handle: maps from an offset
    for ipc_conf in expandable_segments:False expandable_segments:True defragment:True; do
        TESSERA_ALLOC_CONF=$ipc_conf MIN_NEED=5 run_prog shared tessera ipc_share 60 "$IPC_OK" -- --mode basic
    done
    MIN_NEED=5 run_prog shared tessera ipc_share 60 "$IPC_OK r:held_ok=1" -- --mode reuse
    MIN_NEED=5 run_prog shared tessera ipc_share 60 "r:status=ok r:opened=9" -- --mode exit
    MIN_NEED=5 run_prog shared tessera ipc_share 60 "r:status=ok r:opened=0 r:open_failed=9" -- --plain-child
    if [ "$(grep -c '^GPU ' <<<"$SMI_L")" -ge 2 ]; then
        pair "$BOTH" multi_device 60 "r:status=ok r:wrong_device=0" -- --threads
        # a peer's kernels touch memory tessera mapped itself (granted at cudaDeviceEnablePeerAccess)
        TESSERA_ALLOC_CONF=expandable_segments:True pair shared peer_access 60 "r:status=ok r:denied=0 r:check=kernel" --
        # a peer's kernel touches stream-ordered memory after cudaMemPoolSetAccess on the pool
        pair shared pool_p2p 60 "r:status=ok r:check=kernel" --
    else
        log "multi_device, peer_access, pool_p2p: not run (one GPU visible; they need two)"
    fi
    if [ "$STATIC_SUBSET" = 1 ]; then
        pair shared driver_linked 60 "r:status=ok r:mode=linked r:contexts=2" -- --own-context "${DRV[@]}"
        pair shared fork_child 60 "r:status=ok r:child_exit=0 r:child_cuda=0" --
        pair shared meminfo 60 "r:status=ok" -- --unit "$MEMINFO_U" --count 4
        pair shared seed_even 60 "r:status=ok r:final_alloc=ok" --
        pair shared seed_middle 90 "r:status=ok r:final_alloc=ok" -- --first "$U" --middle "$U2" --last "$U" --request "$U3"
        PAIR_NEED=$HEAVY pair shared seed_every5th 120 "r:status=ok r:final_alloc=ok" -- --unit "$U" --count 39 --request "$U2"
    else
        pair "$BOTH" driver_linked 60 "r:status=ok r:mode=linked r:contexts=2" -- --own-context "${DRV[@]}"
        pair "$BOTH" fork_child 60 "r:status=ok r:child_exit=0 r:child_cuda=0" --
        pair "$BOTH" meminfo 60 "r:status=ok" -- --unit "$MEMINFO_U" --count 4
        pair "$BOTH" seed_even 60 "r:status=ok r:final_alloc=ok" --
        pair "$BOTH" seed_middle 90 "r:status=ok r:final_alloc=ok" -- --first "$U" --middle "$U2" --last "$U" --request "$U3"
        PAIR_NEED=$HEAVY pair shared seed_every5th 120 "r:status=ok r:final_alloc=ok" -- --unit "$U" --count 39 --request "$U2"
        # the static build at a quarter of the size: the point there is the interposition path
        [ "$SIZES" = small ] && SU=16M SU2=32M || SU=256M SU2=512M
        pair static seed_every5th 90 "r:status=ok r:final_alloc=ok" -- --unit "$SU" --count 39 --request "$SU2"
    fi
    # the heavy ones last: seed_cyclic fills the whole device (~79 GiB written, read twice)
    if [ "$SIZES" = small ]; then CYC=(--min 32M --max 128M); else CYC=(); fi
    MIN_NEED=$CYC_NEED run_prog shared native seed_cyclic 150 "r:status=ok r:final_alloc=ok" -- "${CYC[@]}"
    need=$CYC_NEED
    [ "$RUN_STATUS" = SKIP ] || need=$((${RUN_SECS%.*} * 3 / 2 + 5))
    MIN_NEED=$need run_prog shared tessera seed_cyclic 150 "r:status=ok r:final_alloc=ok" -- "${CYC[@]}"
    MIN_NEED=$need run_prog shared tessera-defrag seed_cyclic 150 "r:status=ok r:final_alloc=ok" -- "${CYC[@]}"
    if [ "$QUICK" = 0 ]; then
        MIN_NEED=$HEAVY run_prog shared tessera-defrag seed_every5th 120 "r:status=ok r:final_alloc=ok" -- --unit "$U" --count 39 --request "$U2"
    fi
    step_end
fi

# e. churn throughput -------------------------------------------------------------------------
# run_churn VARIANT THREADS -- ARGS: native then tessera (default configuration, no trace)
run_churn() {
    local variant=$1 threads=$2 mode
    shift 3
    local bin="$PDIR_shared/churn"
    for mode in native tessera; do
        RUN_SEQ=$((RUN_SEQ + 1))
        local dir
        dir="$WORK/runs/$(printf 'e%03d-churn-%s-%s-%s' "$RUN_SEQ" "$variant" "$threads" "$mode")"
        mkdir -p "$dir/stats"
        local base=(type=churn "variant=$variant" "threads=$threads" "args=$*" "mode=$mode")
        if [ ! -x "$bin" ] || { [ "$mode" = tessera ] && [ "$HAVE_LIB" = 0 ]; }; then
            STEP_RUNS=$((STEP_RUNS + 1))
            STEP_FAILS=$((STEP_FAILS + 1))
            rec "${base[@]}" status=FAIL "reason=$([ -x "$bin" ] && echo 'libtessera.so' || echo churn) not built"
            continue
        fi
        local t
        t=$(time_for 60)
        if [ "$t" -lt 5 ]; then
            STEP_SKIPS=$((STEP_SKIPS + 1))
            rec "${base[@]}" status=SKIP "reason=time budget"
            log "SKIP churn $variant x$threads [$mode]: time budget"
            continue
        fi
        local envs=()
        [ "$mode" = tessera ] && envs=(LD_PRELOAD="$LIB" TESSERA_STATS_DIR="$dir/stats")
        local s rc
        s=$(now_ms)
        timeout -k 5 "$t" env "${envs[@]}" "$bin" --threads "$threads" "$@" >"$dir/stdout" 2>"$dir/stderr" </dev/null
        rc=$?
        local secs result ops why=""
        secs=$(secs_since "$s")
        result=$(grep '^RESULT ' "$dir/stdout" | tail -n1)
        ops=$(sed -n 's/.* ops_per_s=\([0-9.]*\).*/\1/p' <<<"$result")
        local cut=0
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            why="timed out after ${t}s"
            [ "$t" -lt 60 ] && cut=1 && why="cut short by the time budget after ${t}s"
        elif [ "$rc" != 0 ]; then why="exit $rc"
        elif [ -z "$ops" ]; then why="no ops_per_s in the RESULT line"
        fi
        local st=PASS
        if [ "$cut" = 1 ]; then
            st=SKIP
            STEP_SKIPS=$((STEP_SKIPS + 1))
        else
            STEP_RUNS=$((STEP_RUNS + 1))
            [ -z "$why" ] || { st=FAIL; STEP_FAILS=$((STEP_FAILS + 1)); }
        fi
        rec "${base[@]}" "status=$st" "rc=$rc" "seconds=$secs" "ops_per_s=$ops" "result=$result" "reason=$why"
        log "$st churn $variant x$threads [$mode]: ${ops:-?} ops/s (${secs}s)${why:+: $why}"
        if [ "$st" != PASS ]; then
            tail_file "$dir/stdout" 8 "  out| "
            tail_file "$dir/stderr" 8 "  err| "
        fi
    done
}
if [ "$CAP_E" -gt 0 ]; then
    step_begin "e churn throughput" "$CAP_E" $((RES_G + RES_F + RES_K))
    SMALL=(--max-size 64K --small-max 64K --large-pct 0 --live 32)
    DEF=()  # churn's defaults: up to 64 MiB, 10% above 1 MiB
    [ "$SIZES" = small ] && DEF=(--max-size 4M --small-max 256K)
    if [ "$QUICK" = 1 ]; then
        run_churn small 8 -- "${SMALL[@]}" --iters 1000
        run_churn default 8 -- "${DEF[@]}" --streams --iters 500
    else
        run_churn small 1 -- "${SMALL[@]}" --iters 4000
        run_churn small 8 -- "${SMALL[@]}" --iters 2000
        run_churn default 1 -- "${DEF[@]}" --iters 2000
        run_churn default 8 -- "${DEF[@]}" --streams --iters 1000
    fi
    step_end
fi

# f. PyTorch ---------------------------------------------------------------------------------
TORCH_PY="$SCRIPT_DIR/torch_train.py"
if [ "$CAP_F" -gt 0 ]; then
    step_begin "f pytorch" "$CAP_F" "$((RES_G + RES_H + RES_K))"
    FDIR="$WORK/runs/torch"
    mkdir -p "$FDIR"
    # versions, and which libcudart torch uses (also warms the page cache for the runs)
    TINFO=$(timeout -k 5 "$(time_for 60)" "$PYTHON" -c '
import os, torch
d = os.path.dirname(torch.__file__)
print(torch.__version__, torch.version.cuda, d, sep="\t")' 2>"$FDIR/import.err")
    if [ -z "$TINFO" ]; then
        log "FAIL: torch cannot be imported by $PYTHON:"
        tail_file "$FDIR/import.err" 5 "  | "
        rec type=torch mode=native status=FAIL "reason=torch cannot be imported ($(tail -n1 "$FDIR/import.err" | cut -c1-150))"
        step_end FAIL "torch cannot be imported"
    else
        IFS=$'\t' read -r TV TCUDA TDIR <<<"$TINFO"
        TCUDART=$(ldd "$TDIR/lib/libc10_cuda.so" 2>/dev/null | grep -E 'cudart' | awk '{print $1, $2, $3}' | tr '\n' ';')
        log "torch $TV (CUDA $TCUDA) at $TDIR; libc10_cuda.so -> ${TCUDART:-no libcudart in ldd (static cudart?)}"
        rec type=meta "torch=$TV (CUDA $TCUDA) $TDIR" "torch_cudart=${TCUDART:-none (ldd)}" \
            "python=$("$PYTHON" --version 2>&1)"
        if [ "$QUICK" = 1 ]; then STEPS=20 WARM=4 MB_CAP=30; else STEPS=40 WARM=5 MB_CAP=45; fi
        TT_COMMON=(--steps "$STEPS" --warmup "$WARM" --batch 32 --device "$TORCH_DEVICE")
        [ "$TORCH_DEVICE" = cpu ] && TT_COMMON+=(--layers 2 --d-model 64 --heads 4 --vocab 512 --max-len 128 --min-len 16 --len-step 16 --batch 4)
        torch_env() { # MODE -> the environment of that mode, one VAR=VALUE per line
            case "$1" in
            native) ;;
            expandable) echo PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ;;
            nocache) echo PYTORCH_NO_CUDA_MEMORY_CACHING=1 ;;
            tessera) printf '%s\n' PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$LIB" ;;
            tessera-defrag) printf '%s\n' PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$LIB" \
                TESSERA_ALLOC_CONF=defragment:True ;;
            # PyTorch's pluggable allocator over the library (docs/python.md): PyTorch's cache
            # is not switched off, it is replaced; the optional sitecustomize enables it
            tessera-torch) printf '%s\n' TESSERA_TORCH=1 \
                "PYTHONPATH=$BUILD_ABS/python/tessera/site:$BUILD_ABS/python${PYTHONPATH:+:$PYTHONPATH}" ;;
            # the default on a device cut to the floor + 1%: tessera's reserved bytes capped at
            # what the no-cache run held at its peak, plus 1% (docs/BENCHMARKS.md, the floor)
            tessera-floor) printf '%s\n' PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$LIB" \
                "TESSERA_ALLOC_CONF=memory_limit:$FLOOR_LIMIT" ;;
            esac
        }
        floor_limit() { # the cap of tessera-floor, in bytes (empty: unknown)
            if [ -n "${TESSERA_GPU_FLOOR_LIMIT:-}" ]; then echo "$TESSERA_GPU_FLOOR_LIMIT"; return; fi
            local p
            p=$("$PYTHON" "$GPULIB" json-get "$FDIR/nocache/result.json" peak_reserved "")
            [[ "$p" =~ ^[0-9]+$ ]] && [ "$p" -gt 0 ] && echo $((p + p / 100))
        }
        TORCH_MODES=(native expandable nocache tessera tessera-defrag tessera-torch tessera-floor)
        [ -z "$TORCH_MODES_ARG" ] || read -ra TORCH_MODES <<<"${TORCH_MODES_ARG//,/ }"
        modes_left=${#TORCH_MODES[@]}
        for mode in "${TORCH_MODES[@]}"; do
            modes_left=$((modes_left - 1))
            mdir="$FDIR/$mode"
            mkdir -p "$mdir/stats"
            FLOOR_LIMIT=""
            if [ "$mode" = tessera-floor ]; then
                FLOOR_LIMIT=$(floor_limit)
                if [ -z "$FLOOR_LIMIT" ]; then
                    STEP_SKIPS=$((STEP_SKIPS + 1))
                    rec type=torch "mode=$mode" status=SKIP "reason=no floor: mode nocache did not run and TESSERA_GPU_FLOOR_LIMIT is unset"
                    log "SKIP torch $mode: no floor known"
                    continue
                fi
            fi
            mapfile -t envs < <(torch_env "$mode")
            envs+=("TESSERA_STATS_DIR=$mdir/stats")
            js="$mdir/result.json"
            base=(type=torch "mode=$mode" "env=${envs[*]}" "json=$js")
            if [[ "$mode" == tessera* ]] && [ "$HAVE_LIB" = 0 ]; then
                STEP_RUNS=$((STEP_RUNS + 1)); STEP_FAILS=$((STEP_FAILS + 1))
                rec "${base[@]}" status=FAIL "reason=libtessera.so not built"
                continue
            fi
            # at most 90 s, and keep 20 s for each mode after this one
            l=$(left_s)
            t=$((l - 20 * modes_left))
            [ "$t" -le 90 ] || t=90
            [ "$t" -ge 20 ] || t=$((l < 20 ? l : 20))
            if [ "$t" -lt 20 ]; then
                STEP_SKIPS=$((STEP_SKIPS + 1))
                rec "${base[@]}" status=SKIP "reason=time budget"
                log "SKIP torch $mode: time budget"
                continue
            fi
            cut=0
            [ "$t" -lt 90 ] && cut=1  # limited by the budget, not by the mode's own cap
            log "torch $mode (up to ${t}s): ${envs[*]}"
            s=$(now_ms)
            timeout -k 10 "$t" env "${envs[@]}" "$PYTHON" "$TORCH_PY" --mode "$mode" "${TT_COMMON[@]}" \
                --time-cap $((t - 15)) --tessera-stat "$STAT" --json-out "$js" \
                >"$mdir/stdout" 2>"$mdir/stderr" </dev/null
            rc=$?
            secs=$(secs_since "$s")
            STEP_RUNS=$((STEP_RUNS + 1))
            v=$("$PYTHON" -c '
import json, sys
sys.path.insert(0, sys.argv[1])
import gpulib
st, why = gpulib.torch_mode_verdict({"mode": sys.argv[3], "rc": sys.argv[4], "cut": sys.argv[5]},
                                   gpulib.load_json(sys.argv[2]))
print(st + "\t" + why)' "$SCRIPT_DIR" "$js" "$mode" "$rc" "$cut" 2>/dev/null)
            st=${v%%$'\t'*}
            why=${v#*$'\t'}
            [ -n "$st" ] || { st=FAIL; why="exit $rc"; }
            if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
                why="timed out after ${t}s${why:+; $why}"
                [ "$cut" = 1 ] && st=SKIP && why="cut short by the time budget after ${t}s"
            fi
            case "$st" in
            FAIL) STEP_FAILS=$((STEP_FAILS + 1)) ;;
            SKIP) STEP_SKIPS=$((STEP_SKIPS + 1)); STEP_RUNS=$((STEP_RUNS - 1)) ;;
            esac
            rec "${base[@]}" "status=$st" "rc=$rc" "seconds=$secs" "cut=$cut" "reason=$why"
            grep '^\[torch_train' "$mdir/stdout" | tail -n 4 | sed 's/^/     /'
            log "$st torch $mode: exit $rc, ${secs}s${why:+: $why}"
            [ "$st" = PASS ] || { tail_file "$mdir/stderr" 15 "  err| "; }
            report
        done
        log "loss checksums:"
        "$PYTHON" "$GPULIB" torch-compare "$RECORDS" | sed 's/^/     /'
        # largest batch, most interesting modes first, while the step has time
        if ! skipped maxbatch; then
            for mode in native tessera-defrag tessera-torch tessera expandable nocache; do
                js="$FDIR/$mode/result.json"
                mb="$FDIR/$mode/maxbatch.json"
                base=(type=maxbatch "mode=$mode" "json=$mb")
                [ -f "$js" ] || continue
                ok=$("$PYTHON" "$GPULIB" json-get "$js" ok False)
                [ "$ok" = True ] || continue
                t=$(time_for $((MB_CAP + 15)))
                if [ "$t" -lt 25 ]; then
                    STEP_SKIPS=$((STEP_SKIPS + 1))
                    rec "${base[@]}" status=SKIP "reason=time budget"
                    log "SKIP max batch $mode: time budget"
                    continue
                fi
                peak=$("$PYTHON" "$GPULIB" json-get "$js" peak_reserved 0)
                hb=$("$PYTHON" "$GPULIB" json-get "$js" batch 0)
                mapfile -t envs < <(torch_env "$mode")
                envs+=("TESSERA_STATS_DIR=$FDIR/$mode/stats")
                log "max batch $mode (up to $((t - 12))s)"
                s=$(now_ms)
                timeout -k 10 "$t" env "${envs[@]}" "$PYTHON" "$TORCH_PY" --find-max-batch --mode "$mode" \
                    "${TT_COMMON[@]}" --hint-batch "$hb" --hint-peak "${peak:-0}" --time-cap $((t - 12)) \
                    --probe-timeout 40 --json-out "$mb" >"$FDIR/$mode/maxbatch.out" 2>&1 </dev/null
                rc=$?
                secs=$(secs_since "$s")
                STEP_RUNS=$((STEP_RUNS + 1))
                mf=$("$PYTHON" "$GPULIB" json-get "$mb" max_fit "")
                fo=$("$PYTHON" "$GPULIB" json-get "$mb" first_oom "")
                sr=$("$PYTHON" "$GPULIB" json-get "$mb" stop_reason "")
                if [ -n "$mf" ] && [ "$mf" != 0 ]; then
                    st=PASS
                    why="largest fitting batch $mf${fo:+, $fo does not fit} ($sr)"
                else
                    st=FAIL
                    why="no batch found to fit (exit $rc${sr:+, $sr})"
                    STEP_FAILS=$((STEP_FAILS + 1))
                    tail_file "$FDIR/$mode/maxbatch.out" 15 "  | "
                fi
                rec "${base[@]}" "status=$st" "rc=$rc" "seconds=$secs" "reason=$why"
                log "$st max batch $mode: $why, ${secs}s"
                report
            done
        fi
        step_end
    fi
fi

# k. memory lent between processes (scripts/gpu/lend_pair.py): two PyTorch processes take turns
# filling 60% of the GPU; each keeps its cache while the other works. PyTorch's allocator and
# tessera with lending:False must run out of memory; tessera's default must not. Then
# scripts/gpu/pause_torch.py: a training paused and resumed between two steps must give the
# losses of a run never paused, bit for bit -------------------------------------------------------

# k_run NAME BASE SECONDS ENV... -- SCRIPT ARGS...: one run of step k under SECONDS, its RESULT
# line judged (verdict=PASS and exit 0), its output in $KDIR/BASE.{out,err}
k_run() {
    local name=$1 base=$2 t=$3 envs=() s rc res st
    shift 3
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    log "$name (up to ${t}s): ${envs[*]}"
    s=$(now_ms)
    timeout -k 5 "$t" env "${envs[@]}" "$PYTHON" "$@" \
        >"$KDIR/$base.out" 2>"$KDIR/$base.err" </dev/null
    rc=$?
    STEP_RUNS=$((STEP_RUNS + 1))
    sed 's/^/     /' "$KDIR/$base.out"
    res=$(grep '^RESULT' "$KDIR/$base.out" | tail -n1)
    if [ "$rc" = 0 ] && [[ "$res" == *"verdict=PASS"* ]]; then st=PASS; else
        st=FAIL; STEP_FAILS=$((STEP_FAILS + 1)); tail_file "$KDIR/$base.err" 15 "  err| "
    fi
    log "$st $name: exit $rc, $(secs_since "$s")s: ${res:-no RESULT line}"
    rec type=step "name=k $name" "status=$st" "reason=${res:-exit $rc}" "seconds=$(secs_since "$s")"
}

if [ "$CAP_K" -gt 0 ]; then
    step_begin "k lending" "$CAP_K" "$((RES_G + RES_H))"
    KDIR="$WORK/runs/lending"
    mkdir -p "$KDIR/stats"
    for mode in tessera native tessera-nolend pause; do
        case "$mode" in
        native) envs=() ;;
        tessera | pause) envs=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$LIB") ;;
        tessera-nolend) envs=(PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$LIB" TESSERA_ALLOC_CONF=lending:False) ;;
        esac
        envs+=("TESSERA_STATS_DIR=$KDIR/stats")
        if [ "$mode" != native ] && [ "$HAVE_LIB" = 0 ]; then
            STEP_RUNS=$((STEP_RUNS + 1)); STEP_FAILS=$((STEP_FAILS + 1))
            rec type=step "name=k $([ "$mode" = pause ] || echo "lending ")$mode" status=FAIL \
                "reason=libtessera.so not built"
            continue
        fi
        need=$([ "$mode" = pause ] && echo 30 || echo 20)
        t=$(time_for $([ "$mode" = pause ] && echo 50 || echo 45))
        if [ "$t" -lt "$need" ]; then
            STEP_SKIPS=$((STEP_SKIPS + 1))
            log "SKIP $mode: time budget"
            continue
        fi
        if [ "$mode" = pause ]; then
            k_run pause pause "$t" "${envs[@]}" -- "$SCRIPT_DIR/pause_torch.py" \
                --stat "$STAT" --json-out "$KDIR/pause.json"
        else
            k_run "lending $mode" "$mode" "$t" "${envs[@]}" -- "$SCRIPT_DIR/lend_pair.py" \
                --mode "$mode" --stat "$STAT" --json-out "$KDIR/$mode.json"
        fi
    done
    step_end
fi

# i. a tessera memory snapshot in PyTorch's viewer (scripts/gpu/snapshot_viz.sh) --------------
step_begin "i snapshot viewer" 120 0; timeout -k 5 "$(time_for 110)" bash "$SCRIPT_DIR/snapshot_viz.sh" "$LIB" "$PYTHON" "$WORK/runs/snapshot" >"$WORK/runs/snapshot.log" 2>&1; cat "$WORK/runs/snapshot.log"; SV=$(tail -n1 "$WORK/runs/snapshot.log"); case "$SV" in PASS:* | FAIL:* | SKIP:*) ;; *) SV="FAIL: snapshot_viz.sh did not finish" ;; esac; step_end "${SV%%:*}" "${SV#*: }"

# j. driver-call latencies: the costs file tessera-replay prices driver calls with, measured
# here, and the shared traces replayed with it (docs/BENCHMARKS.md, "Driver time") -------------
COSTS_BIN="$BUILD_ABS/tools/tessera-costs"
REPLAY_BIN="$BUILD_ABS/tools/tessera-replay"
step_begin "j driver costs" 90 "$RES_G"
if [ ! -x "$COSTS_BIN" ] || [ ! -x "$REPLAY_BIN" ]; then
    step_end SKIP "tessera-costs or tessera-replay not built (the Meson build is needed)"
elif ! timeout -k 5 "$(time_for 60)" "$COSTS_BIN" -o "$OUT_DIR/driver-costs.txt" >"$WORK/runs/costs.log" 2>&1; then
    tail_file "$WORK/runs/costs.log" 10 "  | "
    step_end FAIL "tessera-costs failed (runs/costs.log)"
else
    cat "$OUT_DIR/driver-costs.txt"
    : >"$OUT_DIR/replay-measured-costs.txt"
    for t in "$REPO"/tests/data/traces/*.pickle; do
        timeout -k 5 "$(time_for 20)" "$REPLAY_BIN" --driver-costs "$OUT_DIR/driver-costs.txt" \
            --compare "$t" pytorch default expandable_segments:True defragment:True \
            >>"$OUT_DIR/replay-measured-costs.txt" 2>&1 || log "replay of $(basename "$t") failed"
    done
    cat "$OUT_DIR/replay-measured-costs.txt"
    step_end PASS "driver-costs.txt and replay-measured-costs.txt in $OUT_DIR"
fi

# h. other frameworks (scripts/gpu/frameworks.py: JAX, CuPy, Numba, ONNX Runtime, transformers)
if ! skipped frameworks; then
    step_begin "h frameworks" "$CAP_H" "$RES_G"
    timeout -k 5 "$(time_for "$CAP_H")" "$PYTHON" "$SCRIPT_DIR/frameworks.py" --lib "$LIB" --stat "$STAT" \
        --out "$OUT_DIR" --budget "$(left_s)" --python "$PYTHON" --smi "$NVIDIA_SMI" >"$WORK/frameworks.out" 2>&1
    rc=$?
    sed 's/^/  /' "$WORK/frameworks.out"
    n_run=$(grep -c '^\[frameworks\] \(PASS\|FAIL\)' "$WORK/frameworks.out")
    [ "$rc" = 0 ] && [ "$n_run" -gt 0 ] && step_end PASS "$n_run frameworks ran (frameworks.md)"
    [ "$rc" = 0 ] && [ "$n_run" -eq 0 ] && step_end SKIP "every framework skipped (frameworks.md says why)"
    [ "$rc" != 0 ] && step_end FAIL "exit $rc (frameworks.md)"
fi

# g. report ----------------------------------------------------------------------------------
step_begin "g report" 60 0
rec type=meta "finished=1" "duration_s=$(secs_since "$START_MS")"
# raw outputs of every run (not the traces or stats pages), kept small
TAR_ITEMS=()
for i in runs records build-tessera.log nvcc; do [ -e "$WORK/$i" ] && TAR_ITEMS+=("$i"); done
if tar -C "$WORK" -czf "$OUT_DIR/gpu-runs.tar.gz" --exclude='*.csv' --exclude='stats' --exclude='*.tmp' \
    "${TAR_ITEMS[@]}" 2>/dev/null; then
    sz=$(stat -c %s "$OUT_DIR/gpu-runs.tar.gz" 2>/dev/null || echo 0)
    if [ "$sz" -gt $((15 * 1024 * 1024)) ]; then
        rm -f "$OUT_DIR/gpu-runs.tar.gz"
        log "gpu-runs.tar.gz was over 15 MiB: not kept"
    fi
fi
step_end PASS "written to $OUT_DIR"
OVERALL=$(timeout -k 2 60 "$PYTHON" "$GPULIB" report "$RECORDS" "$OUT_DIR" 2>&1 | tail -n1)
# a short summary at the end of the output (what a caller that keeps only the tail sees)
MD="$OUT_DIR/gpu-results.md"
echo
echo "---- summary (full report: $MD) ----"
awk '/^## Steps/ {on = 1} /^### Failures/ || /^## b\./ {on = 0} on && /^\|/' "$MD" 2>/dev/null
awk '/^\| build \| program \| args \| mode \| final/ {on = 1} on && !/^\|/ {on = 0} on {n = split($0, c, "|"); print c[2] "|" c[3] "|" c[5] "|" c[6] "|" c[7]}' "$MD" 2>/dev/null
awk '/^\| variant \| threads/ {on = 1} on && !/^\|/ {on = 0} on' "$MD" 2>/dev/null
awk '/^\| # \| mode/ {on = 1} on && !/^\|/ {on = 0} on {n = split($0, c, "|"); print c[3] "|" c[5] "|" c[7] "|" c[9] "|" c[12] "|" c[13]}' "$MD" 2>/dev/null
grep -E '^- (PASS|FAIL|SKIP|INFO): loss checksum' "$MD" 2>/dev/null
awk '/^\| mode \| verdict \| largest/ {on = 1} on && !/^\|/ {on = 0} on {n = split($0, c, "|"); print c[2] "|" c[3] "|" c[4] "|" c[5] "|" c[6]}' "$MD" 2>/dev/null
log "OVERALL: ${OVERALL:-unknown} (report: $MD)"
awk '/^### Failures/ {on = 1; next} /^#/ {on = 0} on && /^- / {print "  " $0}' "$MD" 2>/dev/null | head -n 40
n=$(grep -c '^- SKIP:' "$MD" 2>/dev/null)
[ "${n:-0}" = 0 ] || log "$n checks skipped (time budget or missing prerequisites): see the report"
log "finished in $(secs_since "$START_MS")s of a ${BUDGET}s budget"
exec 1>&3 2>&4
# tee ends when the last writer closes the pipe; do not hang on a stray process holding it
( sleep 10; kill "$TEE_PID" 2>/dev/null ) &
wait "$TEE_PID" 2>/dev/null
[ "$OVERALL" = PASS ] && exit 0
exit 1
