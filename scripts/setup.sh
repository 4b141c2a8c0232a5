#!/usr/bin/env bash
# Install what tessera's build and tests need, if it is missing.
# Debian/Ubuntu: uses apt-get, as root or through sudo. Anywhere else it says what is needed.
set -euo pipefail

need_pkgs=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

have_cmd meson      || need_pkgs+=(meson)
have_cmd ninja      || need_pkgs+=(ninja-build)
have_cmd pkg-config || need_pkgs+=(pkg-config)
have_cmd cc         || need_pkgs+=(gcc)
have_cmd python3    || need_pkgs+=(python3)
if have_cmd dpkg-query; then
  have_pkg libcmocka-dev || need_pkgs+=(libcmocka-dev)
  # clang + compiler-rt: libFuzzer targets and the sanitizer runs
  have_cmd clang || need_pkgs+=(clang)
  if have_cmd clang; then
    v=$(clang -dumpversion | cut -d. -f1)
    have_pkg "libclang-rt-${v}-dev" || apt-cache show "libclang-rt-${v}-dev" >/dev/null 2>&1 \
      && { have_pkg "libclang-rt-${v}-dev" || need_pkgs+=("libclang-rt-${v}-dev"); } || true
  fi
  # libmicrohttpd: the HTTP server of tessera-stat --serve (without it --serve says so)
  have_pkg libmicrohttpd-dev || need_pkgs+=(libmicrohttpd-dev)
  # prometheus: promtool checks the Prometheus output with the real parser, and the server
  # scrapes tessera-stat --serve in tests/integration/test_prometheus.py; optional.
  if [ "${TESSERA_SETUP_PROMTOOL:-1}" = 1 ] && { ! have_cmd promtool || ! have_cmd prometheus; }; then
    apt-cache show prometheus >/dev/null 2>&1 && need_pkgs+=(prometheus) || true
  fi
fi

if [ ${#need_pkgs[@]} -eq 0 ]; then
  exit 0
fi

if ! have_cmd apt-get; then
  echo "tessera setup: missing: ${need_pkgs[*]}" >&2
  echo "tessera setup: this is not a Debian-like system; install meson (>= 1.0), ninja, pkg-config," >&2
  echo "               cmocka (headers + pkg-config file) and clang with compiler-rt yourself." >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if have_cmd sudo && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "tessera setup: missing packages: ${need_pkgs[*]}" >&2
    echo "tessera setup: run as root, or:  sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
fi

echo "tessera setup: installing ${need_pkgs[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A stale package index is the usual cause of 404s on a fresh machine.
$SUDO apt-get update -qq >/dev/null 2>&1 || $SUDO apt-get update -qq
if ! $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null; then
  # prometheus is optional: retry without it rather than failing the whole setup
  rest=()
  for p in "${need_pkgs[@]}"; do [ "$p" = prometheus ] || rest+=("$p"); done
  $SUDO apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
fi
