#!/usr/bin/env bash
# Two (or more) builds of `dlock`, alternating, in one run: for each of ROUNDS rounds, each
# binary's `baseline,contended` against the machine's Redis (6379) and Redlock over three fresh
# local masters (26391-26393), one line per run (`scripts/bench-lib.sh`'s `bench_run`).
#   ROUNDS=5 scripts/bench-ab.sh /tmp/dlock-before /tmp/dlock-after
set -u
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-5}"
T=/tmp/bench-ab; rm -rf $T; mkdir -p $T
pids=()
B="$1"
. scripts/bench-lib.sh
bench_redlock_masters
sleep 2
bench_init_redis
for r in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    B=$bin
    echo "== $bin"
    bench_run "redis-$(basename "$bin")" redis://127.0.0.1:6379/0 0s baseline,contended "$r"
    bench_run "redlock-$(basename "$bin")" "$RL" 0s baseline,contended "$r"
  done
done
kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null || true
