#!/bin/sh
# Run a sample program and check its exit code and its RESULT line.
#
#   expect.sh CODE [-e VAR=VALUE]... [-r key=value]... [-s FILE] -- PROGRAM [ARGS...]
#
# -e sets an environment variable for the program (on top of the test's environment);
# -r requires `key=value` among the fields of the last stdout line, which must start with
# "RESULT "; -s requires stdout to be exactly the contents of FILE (a diff is shown if not).
# The program's output is passed through. Exit 0 when everything matches, 1 if not.
set -u
[ $# -ge 3 ] || { echo "usage: expect.sh CODE [-e VAR=VALUE]... [-r key=value]... [-s FILE] -- PROGRAM [ARGS...]" >&2; exit 1; }
want=$1
shift
checks=""
same_as=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    -e) [ $# -ge 2 ] || { echo "expect.sh: -e needs VAR=VALUE" >&2; exit 1; }
        export "${2?}"; shift 2 ;;
    -r) [ $# -ge 2 ] || { echo "expect.sh: -r needs key=value" >&2; exit 1; }
        checks="$checks $2"; shift 2 ;;
    -s) [ $# -ge 2 ] || { echo "expect.sh: -s needs FILE" >&2; exit 1; }
        same_as=$2; shift 2 ;;
    *) echo "expect.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
[ $# -ge 2 ] || { echo "expect.sh: missing '-- PROGRAM'" >&2; exit 1; }
shift
out=$(mktemp "${TMPDIR:-/tmp}/tessera-expect.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
"$@" >"$out"
rc=$?
cat "$out"
status=0
if [ "$rc" -ne "$want" ]; then
  echo "expect.sh: $1 exited with $rc, expected $want" >&2
  status=1
fi
last=$(tail -n 1 "$out")
case "$last" in
  "RESULT "*) ;;
  *) echo "expect.sh: the last line of stdout is not a RESULT line: '$last'" >&2; status=1 ;;
esac
for kv in $checks; do
  case " $last " in
    *" $kv "*) ;;
    *) echo "expect.sh: RESULT line lacks '$kv'" >&2; status=1 ;;
  esac
done
if [ -n "$same_as" ] && ! diff -u "$same_as" "$out" >&2; then
  echo "expect.sh: stdout differs from $same_as (diff above: - expected, + got)" >&2
  status=1
fi
exit $status
