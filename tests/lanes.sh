#!/usr/bin/env bash
# make test's lanes: groups of make targets run at the same time, the targets of one group one
# after another.
#
#   tests/lanes.sh NAME[@niced]=ARGS ...
#
# Each lane is one `make -k ARGS` (targets and VAR=value assignments), its output in
# target/test-lanes/NAME.log, printed whole when the lane ends so that lanes do not interleave.
# A lane marked @niced runs under `nice -n 19`, pinned to every CPU but the first (on a
# machine with two, the last one): the CPU-bound checks (compiling, loom, fuzzing, valgrind)
# then take what the end-to-end suites leave, and the first CPU is always theirs, as it is
# beside the busy neighbour those suites are tested with (NEIGHBOUR=1). On a machine with one
# CPU the lanes run one after another.
# Every lane runs to its end (make -k); the exit status is 1 if any target of any lane failed.
set -uo pipefail

[ $# -gt 0 ] || { echo "usage: tests/lanes.sh NAME[@niced]=ARGS ..." >&2; exit 2; }
make=${MAKE:-make}
dir=target/test-lanes
mkdir -p "$dir"
cpus=$(nproc)
last=$((cpus - 1))

start() { # name niced args...
  local name=$1 niced=$2
  shift 2
  local wrap=()
  if [ "$niced" = 1 ]; then
    wrap=(nice -n 19)
    [ "$cpus" -gt 1 ] && wrap=(taskset -c "1-$last" "${wrap[@]}")
  fi
  "${wrap[@]}" "$make" --no-print-directory -k "$@" >"$dir/$name.log" 2>&1
}

report() { # name status seconds
  echo "===== lane $1: $(if [ "$2" = 0 ]; then echo passed; else echo "FAILED (exit $2)"; fi) in $3 s" \
    "(log: $dir/$1.log) ====="
  cat "$dir/$1.log"
  echo "===== end of lane $1 ====="
}

declare -A names=() started=()
failed=()
t0=$(date +%s)
for spec in "$@"; do
  name=${spec%%=*}
  args=${spec#*=}
  niced=0
  case $name in *@niced) niced=1; name=${name%@niced} ;; esac
  [ -n "$name" ] && [ "$name" != "$spec" ] || { echo "tests/lanes.sh: '$spec' is not NAME[@niced]=ARGS" >&2; exit 2; }
  # shellcheck disable=SC2086 # ARGS is a list of make words
  if [ "$cpus" -gt 1 ]; then
    start "$name" "$niced" $args &
    names[$!]=$name
    started[$!]=$(date +%s)
    echo "lane $name started (pid $!): make $args$([ "$niced" = 1 ] && echo ", niced on CPUs 1-$last")"
  else
    s=$(date +%s)
    start "$name" "$niced" $args
    rc=$?
    report "$name" "$rc" $(($(date +%s) - s))
    [ "$rc" = 0 ] || failed+=("$name")
  fi
done

while [ ${#names[@]} -gt 0 ]; do
  wait -n -p pid
  rc=$?
  [ -n "${pid:-}" ] && [ -n "${names[$pid]:-}" ] || continue
  report "${names[$pid]}" "$rc" $(($(date +%s) - started[$pid]))
  [ "$rc" = 0 ] || failed+=("${names[$pid]}")
  unset "names[$pid]"
done

echo "lanes: $# in $(($(date +%s) - t0)) s, $(if [ ${#failed[@]} = 0 ]; then echo "all passed"; else echo "FAILED: ${failed[*]}"; fi)"
[ ${#failed[@]} = 0 ]
