#!/usr/bin/env bash
# Dry run of scripts/gpu/run-all.sh without a GPU, for developing the scripts: a fake
# nvidia-smi, a fake nvcc (gcc -x c against the toolkit's headers and shared libcudart) and
# tessera's simulated CUDA device (build/tests/sim: libcuda.so.1 + libcudart.so.13 on host
# memory) stand in for the GPU machine.
#
#   scripts/gpu/dev/sim-dry-run.sh [run-all.sh options...]
#
# Needs the simulator built in build/ (meson setup build && ninja -C build
# tests/sim/libcuda.so.1 tests/sim/libcudart.so.13) and a CUDA toolkit's headers. Uses
# --sizes small, its own build directory (build-gpu-sim) and report directory
# (build-gpu-sim/gpu-results). PyTorch runs on the CPU when $PYTHON (default: /usr/bin/python3
# if it has torch, else python3) can import torch; otherwise step f fails cleanly.
#
# What this cannot show: nvcc itself, the static cudart (the fake nvcc links every program
# against the shared cudart, as the simulator needs), real timings and real memory behaviour.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
SIM="${TESSERA_BUILD_DIR:-$REPO/build}/tests/sim"
if [ ! -e "$SIM/libcuda.so.1" ] || [ ! -e "$SIM/libcudart.so.13" ]; then
    echo "sim-dry-run: the simulator is not built ($SIM); run: ninja -C build tests/sim/libcuda.so.1 tests/sim/libcudart.so.13" >&2
    exit 2
fi
CUDA_HOME=${CUDA_HOME:-$(sh "$REPO/scripts/find-cuda.sh")} || exit 2
export CUDA_HOME
FAKE=$(mktemp -d "${TMPDIR:-/tmp}/tessera-gpu-fake.XXXXXX")
trap 'rm -rf "$FAKE"' EXIT

cat >"$FAKE/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
# fake nvidia-smi for scripts/gpu/dev/sim-dry-run.sh
case " $* " in
*" -L "*) echo "GPU 0: Simulated tessera device (UUID: GPU-00000000-sim)" ;;
*"--query-compute-apps"*) ;;
*"memory.used"*"-lms"*)
    ms=$(sed -n 's/.*-lms \([0-9]*\).*/\1/p' <<<"$*")
    while :; do echo 0; sleep "$(awk -v m="${ms:-20}" 'BEGIN{print m/1000}')"; done ;;
*"--query-gpu=memory.total"*) echo "${TESSERA_SIM_MEMORY_MIB:-4096}" ;;
*"--query-gpu="*) echo "Simulated tessera device, 0.0.sim, ${TESSERA_SIM_MEMORY_MIB:-4096} MiB, 9.0" ;;
*) echo "| NVIDIA-SMI 0.0 (fake)   Driver Version: 0.0.sim   CUDA Version: 13.0 |" ;;
esac
SMI

cat >"$FAKE/nvcc" <<'NVCC'
#!/usr/bin/env bash
# fake nvcc for scripts/gpu/dev/sim-dry-run.sh: gcc -x c, shared cudart always
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --version) echo "Cuda compilation tools, release 13.0, fake nvcc (gcc -x c) for the simulator"; exit 0 ;;
    -x) args+=(-x c); shift 2 ;;
    -Xcompiler) IFS=, read -ra f <<<"$2"; args+=("${f[@]}"); shift 2 ;;
    -cudart=*) shift ;;
    *) args+=("$1"); shift ;;
    esac
done
exec gcc -std=gnu11 -I"$CUDA_HOME/include" "${args[@]}" -Wl,--as-needed -L"$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$CUDA_HOME/lib64"
NVCC
chmod +x "$FAKE/nvidia-smi" "$FAKE/nvcc"

if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    /usr/bin/python3 -c 'import torch' 2>/dev/null && PYTHON=/usr/bin/python3
fi
export PYTHON
export PATH="$FAKE:$PATH"
export NVCC="$FAKE/nvcc"
export LD_LIBRARY_PATH="$SIM${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TESSERA_SIM_MEMORY=${TESSERA_SIM_MEMORY:-4G}
export TESSERA_SIM_MEMORY_MIB=$(( ${TESSERA_SIM_MEMORY%G} * 1024 ))
cd "$REPO" || exit 1
"$REPO/scripts/gpu/run-all.sh" --sizes small --torch-device cpu --build-dir build-gpu-sim \
    --out "$REPO/build-gpu-sim/gpu-results" "$@"
