#!/usr/bin/env bash
# Mutation check: apply small bugs to the sources one at a time, run the tests that should catch
# each, and report how many were caught (the kill rate) and which survived.
#
#   scripts/mutate.sh --generate [--base REV] [--whole] [FILE.c ...]   mechanical mutants
#   scripts/mutate.sh [--list FILE] [--build DIR] [--only TEXT]         the hand-written list
#
# --generate mutates every comparison, refusal, release and order point of the C files a change
# touched (scripts/mutants.py; `scripts/mutate.sh --generate --help`): nobody picks the mutants,
# and each runs the tests that execute its line. It is the judge of a change; the list below is
# kept for the rules it names.
#
# The list (default scripts/mutants.txt) has one mutant per line, four fields separated by " @@ ":
#   file @@ original text @@ replacement @@ tests
# The original text must occur exactly once in the file; {NL} in either text stands for a line
# break. tests is a space-separated list of
# meson test names or suites ("core", "suite:config"); "quick" means the whole main-build
# run, as `scripts/test.sh --quick`. Lines starting with # and blank lines are ignored.
# --only runs the mutants whose line contains TEXT. The build directory (default build) must be
# configured already (scripts/test.sh --quick does it).
#
# Each mutant: copy the file aside, apply the replacement, rebuild, run its tests, restore the
# copy. A mutant that does not compile is reported and left out of the rate. The tree is
# restored on every exit (trap), and rebuilt at the end. Not run in CI: it takes a while.
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = --generate ]; then
  shift
  exec python3 scripts/mutants.py "$@"
fi
list=scripts/mutants.txt
build=build
only=
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutate.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$list" ] || { echo "mutate.sh: no list $list" >&2; exit 2; }
[ -f "$build/build.ninja" ] || { echo "mutate.sh: $build is not configured" >&2; exit 2; }

backup=$(mktemp -d)
current=
restore() {
  if [ -n "$current" ] && [ -f "$backup/orig" ]; then
    # Not cp -p: the restored file must look newer than the mutant's objects, or the build
    # would keep them.
    cat "$backup/orig" >"$current"
    touch "$current"
    current=
  fi
}
finish() {
  restore
  rm -rf "$backup"
}
trap finish EXIT
trap 'finish; exit 130' INT TERM HUP

# Apply one literal replacement with python (no regex, exactly one occurrence). Exit 3 when the
# original text is absent or ambiguous.
apply() {
  python3 - "$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace("{NL}", "\n"), sys.argv[3].replace("{NL}", "\n")
text = open(path).read()
if text.count(old) != 1:
    sys.exit(3)
open(path, "w").write(text.replace(old, new))
EOF
}

run_tests() {
  local t args=()
  for t in $1; do
    case "$t" in
      quick) args=() ; break ;;
      suite:*) args+=(--suite "${t#suite:}") ;;
      *) args+=("$t") ;;
    esac
  done
  nice meson test -C "$build" --no-rebuild -q "${args[@]}" >"$backup/test.log" 2>&1
}

# The tests must pass on the tree as it is, or every mutant would look caught.
declare -A baseline_ok=()
baseline() {
  [ -n "${baseline_ok[$1]:-}" ] && return 0
  # the previous mutant's objects must not be what is tested
  nice ninja -C "$build" >"$backup/build.log" 2>&1 || { echo "mutate.sh: $build does not build" >&2; exit 1; }
  if ! run_tests "$1"; then
    echo "mutate.sh: the unmutated tree fails [$1]:" >&2
    tail -20 "$backup/test.log" >&2
    exit 1
  fi
  baseline_ok[$1]=1
}
nice ninja -C "$build" >"$backup/build.log" 2>&1 || { echo "mutate.sh: $build does not build" >&2; exit 1; }

total=0 killed=0 invalid=0 n=0
survivors=()
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*) continue ;; esac
  if [ -n "$only" ] && [[ "$line" != *"$only"* ]]; then continue; fi
  n=$((n + 1))
  sep=' @@ '
  file=${line%%"$sep"*}; rest=${line#*"$sep"}
  old=${rest%%"$sep"*}; rest=${rest#*"$sep"}
  new=${rest%%"$sep"*}; tests=${rest#*"$sep"}
  new=${new# }   # an empty replacement is written "@@  @@"
  label="$file: '$old' -> '$new'"
  if [ ! -f "$file" ]; then
    echo "[$n] MISSING FILE  $label"; invalid=$((invalid + 1)); continue
  fi
  baseline "$tests"
  cp "$file" "$backup/orig"
  current=$file
  if ! apply "$file" "$old" "$new"; then
    restore
    echo "[$n] NOT FOUND     $label"; invalid=$((invalid + 1)); continue
  fi
  if ! nice ninja -C "$build" >"$backup/build.log" 2>&1; then
    restore
    echo "[$n] NO BUILD      $label"; invalid=$((invalid + 1)); continue
  fi
  total=$((total + 1))
  if run_tests "$tests"; then
    survivors+=("$label [$tests]")
    echo "[$n] SURVIVED      $label"
  else
    killed=$((killed + 1))
    echo "[$n] killed        $label"
  fi
  restore
done <"$list"

restore
nice ninja -C "$build" >"$backup/build.log" 2>&1 || echo "mutate.sh: the restored tree does not build" >&2
echo
if [ $total -gt 0 ]; then
  echo "mutants: $total run, $killed killed, $((total - killed)) survived, $invalid not applicable;" \
       "kill rate $((killed * 1000 / total / 10)).$((killed * 1000 / total % 10))%"
else
  echo "mutants: none run ($invalid not applicable)"
fi
for s in "${survivors[@]}"; do echo "survivor: $s"; done
[ ${#survivors[@]} -eq 0 ]
