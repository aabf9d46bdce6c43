#!/usr/bin/env bash
# BENCHMARKS.md's Redlock hand-off rows (issue 31 item 4): a single Redis (the machine's, 6379)
# and Redlock over three fresh local masters (26391-26393), with blocking delivery (the default)
# and without (`DLOCK_REDIS__BLOCKING_HANDOFF=false`), alternating, ROUNDS rounds on loopback
# (baseline and contended), then one round each with a 0.5 and a 2 ms round trip. Build first:
#   cargo build --release -p dlock-cli --bin dlock
set -u
cd "$(dirname "$0")/.."
B="${DLOCK_BIN:-target/release/dlock}"
ROUNDS="${ROUNDS:-5}"
T=/tmp/bench-redlock-handoff; rm -rf $T; mkdir -p $T
pids=()
. scripts/bench-lib.sh
bench_redlock_masters
sleep 2
bench_init_redis
for r in $(seq 1 $ROUNDS); do
  bench_run redis redis://127.0.0.1:6379/0 0s baseline,contended $r
  bench_run redlock $RL 0s baseline,contended $r
  bench_run redlock-hint $RL 0s baseline,contended $r DLOCK_REDIS__BLOCKING_HANDOFF=false
done
for rtt in 500us 2ms; do
  bench_run redis redis://127.0.0.1:6379/0 $rtt baseline,uncontended,contended 1
  bench_run redlock $RL $rtt baseline,uncontended,contended 1
  bench_run redlock-hint $RL $rtt baseline,uncontended,contended 1 DLOCK_REDIS__BLOCKING_HANDOFF=false
done
kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null || true
