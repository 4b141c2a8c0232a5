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
  # chromium, node and npm: PyTorch's memory viewer opens tessera's snapshots in a headless
  # browser (tests/integration/test_snapshot.py SnapshotViewer, tests/viz/); optional.
  if [ "${TESSERA_SETUP_VIEWER:-1}" = 1 ]; then
    have_cmd chromium || { apt-cache show chromium >/dev/null 2>&1 && need_pkgs+=(chromium); } || true
    have_cmd node || need_pkgs+=(nodejs)
    have_cmd npm || need_pkgs+=(npm)
  fi
  # the Python module (import tessera: Python's headers) and the wheel (pyproject.toml, built
  # by meson-python with python-build, installed into a venv by tests/python/test_wheel.py)
  for p in python3-dev python3-venv python3-mesonpy python3-build; do
    have_pkg "$p" || need_pkgs+=("$p")
  done
  # prometheus: promtool checks the Prometheus output with the real parser, and the server
  # scrapes tessera-stat --serve in tests/integration/test_prometheus.py; optional.
  if [ "${TESSERA_SETUP_PROMTOOL:-1}" = 1 ] && { ! have_cmd promtool || ! have_cmd prometheus; }; then
    apt-cache show prometheus >/dev/null 2>&1 && need_pkgs+=(prometheus) || true
  fi
fi

# A decimal-comma locale, so that tests/config's test_locale runs (numbers must read and print
# the same under LC_NUMERIC=de_DE): Debian's locales package, then de_DE.UTF-8 generated.
have_comma_locale() { locale -a 2>/dev/null | grep -qiE '^(de_DE|fr_FR|ru_RU)\.utf-?8$'; }
if have_cmd dpkg-query && ! have_comma_locale; then
  have_pkg locales || need_pkgs+=(locales)
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif have_cmd sudo && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1
  fi
}

make_comma_locale() {
  have_comma_locale && return 0
  have_cmd localedef || return 0
  if ! as_root localedef -i de_DE -f UTF-8 de_DE.UTF-8 >/dev/null 2>&1; then
    echo "tessera setup: could not generate de_DE.UTF-8 (test_locale will be skipped);" \
         "as root: localedef -i de_DE -f UTF-8 de_DE.UTF-8" >&2
  fi
}

# d3 and playwright-core from the npm registry, for the viewer test, into build-viz/ (ignored,
# never committed); the versions are tests/viz/package.json's. Without them that test skips.
viewer_modules() {
  [ "${TESSERA_SETUP_VIEWER:-1}" = 1 ] && have_cmd npm || return 0
  local root dir
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=$root/build-viz
  cmp -s "$root/tests/viz/package.json" "$dir/package.json" &&
    [ -d "$dir/node_modules/d3" ] && [ -d "$dir/node_modules/playwright-core" ] && return 0
  mkdir -p "$dir" && cp "$root/tests/viz/package.json" "$dir/package.json" &&
    (cd "$dir" && npm install --no-audit --no-fund --silent >/dev/null 2>&1) ||
    { rm -f "$dir/package.json"; echo "tessera setup: npm could not install d3 and" \
      "playwright-core into $dir (the memory viewer test will be skipped)" >&2; }
  return 0
}

if [ ${#need_pkgs[@]} -eq 0 ]; then
  make_comma_locale
  viewer_modules
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
  # prometheus and the viewer's browser are optional: retry without them rather than failing
  # the whole setup
  rest=()
  for p in "${need_pkgs[@]}"; do
    case "$p" in prometheus|chromium|nodejs|npm) ;; *) rest+=("$p") ;; esac
  done
  $SUDO apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
fi

make_comma_locale
viewer_modules
