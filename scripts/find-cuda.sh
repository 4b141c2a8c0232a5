#!/bin/sh
# Print the CUDA toolkit prefix whose include/cuda.h exists. Used by meson.build.
# Order: explicit argument (-Dcuda-toolkit), $CUDA_HOME, $CUDA_PATH, nvcc on PATH, /usr/local/cuda.
tried=""
try() {
  [ -n "$1" ] || return 1
  tried="$tried $1"
  if [ -f "$1/include/cuda.h" ] && [ -f "$1/include/cuda_runtime_api.h" ]; then
    echo "$1"; exit 0
  fi
  return 1
}
try "$1"
try "$CUDA_HOME"
try "$CUDA_PATH"
if command -v nvcc >/dev/null 2>&1; then
  try "$(dirname "$(dirname "$(command -v nvcc)")")"
fi
try /usr/local/cuda
for d in /usr/local/cuda-*; do [ -d "$d" ] && try "$d"; done
echo "tessera: CUDA toolkit headers not found (need include/cuda.h and include/cuda_runtime_api.h)." >&2
echo "tessera: looked in:${tried:- (nothing set)}" >&2
echo "tessera: pass -Dcuda-toolkit=/path/to/cuda, or set CUDA_HOME, or put nvcc on PATH." >&2
exit 1
