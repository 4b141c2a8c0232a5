#!/usr/bin/env bash
# Install what is missing, build, and run every test:
#   build        gcc, -Werror: every suite (unit, config, sim, statspage, scripts, fuzz
#                corpora, replay, python, soak; with --quick also programs and integration,
#                which otherwise run once, in build-ubsan)
#   build-asan   gcc, ASan + UBSan: the C suites that do not preload tessera (only what they
#                need is compiled)
#   build-ubsan  gcc, UBSan: the integration suite (tessera preloaded into the programs; ASan's
#                and TSan's runtimes cannot share a process with a preloaded dlsym hook; only
#                what it needs is compiled)
#   build-tsan   clang, -Werror, TSan: compiles everything with clang; runs the threaded suites
#                (core, stats page, simulator; not the programs that race on purpose)
#   build-fuzz   clang, libFuzzer + ASan + UBSan: each fuzz target for a few seconds
# Options: --quick (main build only), --no-fuzz. TESSERA_FUZZ_SECONDS (default 10) per target.
# The last line is "tests: N passed, N failed, N skipped"; the exit status is 0 only when nothing
# failed.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
quick=0
fuzz=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-fuzz) fuzz=0 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

scripts/setup.sh || { echo "test.sh: setup failed (see above)" >&2; exit 1; }

passed=0 failed=0 skipped=0
log() { printf '\n=== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

# configure (or reconfigure) a build directory
configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1
  else
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1
  fi || { cat "$dir.setup.log"; return 1; }
}

build() {
  local dir=$1
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    grep -E 'error|FAILED' "$dir.build.log" | head -30
    echo "test.sh: $dir does not build (full log: $dir.build.log)"
    failed=$((failed + 1))
    return 1
  fi
}

# build only what the selected tests need (their programs and the targets they declare): a
# sanitizer build runs a few suites and compiles for them alone. Arguments: the directory, then
# the --suite / --no-suite options that run_tests gets.
build_for() {
  local dir=$1; shift
  local targets
  mapfile -t targets < <(python3 - "$dir" "$@" <<'EOF'
import json, os, sys
d, args = sys.argv[1], sys.argv[2:]
want = {args[i + 1] for i, a in enumerate(args) if a == "--suite"}
drop = {args[i + 1] for i, a in enumerate(args) if a == "--no-suite"}
def info(kind):
    with open(os.path.join(d, "meson-info", f"intro-{kind}.json")) as f:
        return json.load(f)
files = {t["id"]: t["filename"] for t in info("targets")}
need = set()
for t in info("tests"):
    suites = {s.split(":", 1)[-1] for s in t["suite"]}
    if (want and not suites & want) or suites & drop:
        continue
    for dep in t["depends"]:
        need.update(os.path.relpath(f, d) for f in files[dep])
print("\n".join(sorted(need)))
EOF
  )
  if [ ${#targets[@]} -eq 0 ]; then
    echo "test.sh: $dir: no test selected by $*"
    failed=$((failed + 1))
    return 1
  fi
  if ! ninja -C "$dir" "${targets[@]}" >"$dir.build.log" 2>&1; then
    grep -E 'error|FAILED' "$dir.build.log" | head -30
    echo "test.sh: $dir does not build (full log: $dir.build.log)"
    failed=$((failed + 1))
    return 1
  fi
}

# run meson test, show its summary, add its counts to the totals
run_tests() {
  local dir=$1; shift
  local out
  out=$(meson test -C "$dir" --print-errorlogs "$@" 2>&1)
  local rc=$?
  printf '%s\n' "$out" | grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):' || true
  if [ $rc -ne 0 ]; then
    # each failing test's command, stdout and stderr (meson prints them after a '>>> ' line and
    # before its summary), so that a log of this script alone says why
    printf '%s\n' "$out" | awk '/^>>> /{on=1} /^Summary of Failures:/{on=0} on' | tail -120
  fi
  local ok fail xpass skip tout
  ok=$(printf '%s\n' "$out" | sed -n 's/^Ok: *\([0-9]*\).*/\1/p' | tail -1)
  fail=$(printf '%s\n' "$out" | sed -n 's/^Fail: *\([0-9]*\).*/\1/p' | tail -1)
  xpass=$(printf '%s\n' "$out" | sed -n 's/^Unexpected Pass: *\([0-9]*\).*/\1/p' | tail -1)
  tout=$(printf '%s\n' "$out" | sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' | tail -1)
  skip=$(printf '%s\n' "$out" | sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' | tail -1)
  passed=$((passed + ${ok:-0}))
  failed=$((failed + ${fail:-0} + ${xpass:-0} + ${tout:-0}))
  skipped=$((skipped + ${skip:-0}))
  if [ -z "$ok" ] && [ $rc -ne 0 ]; then failed=$((failed + 1)); fi
}

log "main build (gcc, -Werror)"
if configure build -Dwerror=true && build build; then
  if [ $quick -eq 1 ]; then
    run_tests build
  else
    # the programs and integration suites run below, under UBSan: the same programs with
    # tessera preloaded, checked for undefined behaviour as well
    run_tests build --no-suite integration --no-suite programs
  fi
else
  failed=$((failed + 1))
fi

if [ $quick -eq 0 ]; then
  log "ASan + UBSan (gcc)"
  asan_suites=(--suite unit --suite config --suite sim --suite statspage --suite fuzz)
  if configure build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false \
       -Dfuzz=disabled && build_for build-asan "${asan_suites[@]}"; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      run_tests build-asan --timeout-multiplier 3 "${asan_suites[@]}"
  fi

  log "UBSan: tessera preloaded into the programs (gcc)"
  ubsan_suites=(--suite integration --suite programs)
  if configure build-ubsan -Dwerror=true -Db_sanitize=undefined -Db_lundef=false \
       -Dfuzz=disabled && build_for build-ubsan "${ubsan_suites[@]}"; then
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      TS_SANITIZER_RUNTIME=$(gcc -print-file-name=libubsan.so) \
      run_tests build-ubsan --timeout-multiplier 3 "${ubsan_suites[@]}"
  fi

  if command -v clang >/dev/null 2>&1; then
    # this build is also the clang -Werror build: every target, compiled by clang
    log "TSan (clang, -Werror): every target; the threaded suites run"
    if CC=clang CXX=clang++ configure build-tsan -Dwerror=true -Db_sanitize=thread \
         -Db_lundef=false -Dfuzz=disabled && build build-tsan; then
      TSAN_OPTIONS=halt_on_error=1 \
        run_tests build-tsan --timeout-multiplier 3 --suite unit --suite statspage --suite sim \
          --no-suite single-threaded --no-suite unordered
    fi
  fi

  if [ $fuzz -eq 1 ] && command -v clang >/dev/null 2>&1; then
    log "libFuzzer (clang, ASan + UBSan)"
    secs=${TESSERA_FUZZ_SECONDS:-10}
    if CC=clang CXX=clang++ configure build-fuzz -Dfuzz=enabled -Dtests=enabled \
         && ninja -C build-fuzz tests/fuzz/fuzz_config tests/fuzz/fuzz_statspage \
              >build-fuzz.build.log 2>&1; then
      for target in config statspage; do
        work=$(mktemp -d)
        cp "$root/tests/fuzz/corpus/$target/"* "$work/" 2>/dev/null
        if build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$secs" -timeout=10 \
             -print_final_stats=1 "$work" >build-fuzz/fuzz_$target.log 2>&1; then
          echo "fuzz_$target: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' \
            build-fuzz/fuzz_$target.log | awk '{print $2}') runs in ${secs}s, no crash"
          passed=$((passed + 1))
        else
          tail -40 build-fuzz/fuzz_$target.log
          echo "fuzz_$target: FAILED (crash input kept in build-fuzz/)"
          mv crash-* leak-* timeout-* build-fuzz/ 2>/dev/null
          failed=$((failed + 1))
        fi
        rm -rf "$work"
      done
    else
      grep -E 'error' build-fuzz.build.log | head
      echo "test.sh: libFuzzer targets not built (see build-fuzz.build.log)"
      failed=$((failed + 1))
    fi
  fi
fi

echo
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
