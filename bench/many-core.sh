#!/usr/bin/env bash
# The figures of a machine with many cores, in one run and one file (`make many-core`; not part
# of `make test`):
#
#   bench/many-core.sh [--out FILE]          (default target/many-core.json)
#
# builds the harness and the edge, runs the harness's hot-rule and standard groups at 1, 2, 4,
# 8 and 16 threads, then the edge with 16 workers against SIPp on loopback
# (tests/e2e/edge_many_core.py), and writes the machine line, the harness's JSON and tables and
# the edge's steps to FILE (intermediate files in target/many-core/). Thread counts above the
# usable cores (nproc) are left out and the edge's workers capped at them; FILE says what was
# asked and what ran. A timing run: run it alone (flock /tmp/loadctl-traffic.lock ...).
#
# Budget on 16 cores, under 8 minutes:
#   build       about 1 min from a clean target/, seconds when built
#   harness     2 s per figure (--seconds 2, in 5 rounds of 0.4 s). Standard group: 5 figures
#               per thread count (loadctl, limiter, governor keyed and direct, locked) × 5
#               counts + 5 one-thread figures = 30; hot group, say 4 per count = 20;
#               50 × 2 s = 100 s, + ~20 s workload and one-off figures: ~2 min
#   edge        at most 5 steps (tests/e2e/edge_many_core.py's --rates) × (6 s of load, 8 when
#               SIPp falls behind, + ~3 s to start and stop), stopping early when one fails or
#               SIPp falls short; a failing step waits for SIPp's 16 s timeout: ≤ 1.5 min
# about 4 min in all; FILE's "seconds" has each part, and the script says when it took over 8.
set -euo pipefail
trap 'echo "bench/many-core.sh: failed (exit $?) at line $LINENO" >&2' ERR

out=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a file}; shift 2 ;;
    *) echo "usage: bench/many-core.sh [--out FILE]" >&2; exit 2 ;;
  esac
done
case $out in "" | /*) ;; *) out=$PWD/$out ;; esac
cd "$(dirname "$0")/.."
out=${out:-target/many-core.json}
started=$(date +%s)

need() { command -v "$1" >/dev/null || { echo "bench/many-core.sh: $1 is not installed ($2)" >&2; exit 2; }; }
need cargo "https://rustup.rs"
need make "apt-get install make"
need cc "apt-get install gcc"
need python3 "make e2e-tools"
need sipp "make e2e-tools"
need taskset "make e2e-tools"

cores=$(nproc)
threads=""
for t in 1 2 4 8 16; do
  if [ "$t" -le "$cores" ]; then threads=${threads:+$threads,}$t; fi
done
workers=$((cores < 16 ? cores : 16))
[ "$threads" = 1,2,4,8,16 ] ||
  echo "bench/many-core.sh: $cores usable cores: harness threads $threads (of 1,2,4,8,16), edge workers $workers (of 16)" >&2
dir=target/many-core
mkdir -p "$dir"

make edge
cargo build --release -p loadctl-bench
build_s=$SECONDS

# the JSON to a file, the tables to the terminal and a file
{ target/release/loadctl-bench --json --groups hot,standard --threads "$threads" --seconds 2 --rounds 5 \
  2>&1 >"$dir/harness.json" | tee "$dir/harness.log" >&2; }
harness_s=$((SECONDS - build_s))

python3 tests/e2e/edge_many_core.py --workers "$workers" --out "$out" \
  --harness "$dir/harness.json" --harness-log "$dir/harness.log" \
  --threads-asked 1,2,4,8,16 --threads "$threads" --workers-asked 16 \
  --started "$started" --build-s "$build_s" --harness-s "$harness_s"

echo "bench/many-core.sh: $SECONDS s in all (build $build_s s, harness $harness_s s); results in $out"
if [ "$SECONDS" -gt 480 ]; then
  echo "bench/many-core.sh: over the 8-minute budget; lower the harness's --seconds or the edge's steps" >&2
fi
