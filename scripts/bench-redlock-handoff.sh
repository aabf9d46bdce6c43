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
for p in 26391 26392 26393; do redis-server --port $p --bind 127.0.0.1 --save '' --appendonly no --daemonize no > $T/redis$p.log 2>&1 & pids+=($!); done
sleep 2
RL=redlock://127.0.0.1:26391,127.0.0.1:26392,127.0.0.1:26393
$B init --url redis://127.0.0.1:6379/0 >/dev/null 2>&1
$B init --url $RL >/dev/null 2>&1
run() { # label url rtt cases round [VAR=value]
  local name=$1 url=$2 rtt=$3 cases=$4 r=$5
  env ${6:-DLOCK_BENCH_AB=1} timeout 180 $B bench --url "$url" --duration 3s --cases "$cases" --rtt $rtt --json 2>/dev/null > $T/$name-$rtt-$r.json
  python3 - "$T/$name-$rtt-$r.json" "$name" "$rtt" <<'PY'
import json,sys
try:
    r=json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], sys.argv[3], "FAILED", e); sys.exit()
c={x['name']:x for x in r['cases']}
g=lambda n,k: c.get(n,{}).get(k) or 0
print(f"{sys.argv[2]:12} rtt {sys.argv[3]:6} base p50 {g('baseline','p50_us'):6.0f} unc p50 {g('uncontended','p50_us'):6.0f} ho p50 {g('contended','handoff_p50_us'):6.0f} acq/s {g('contended','ops_per_s'):5.0f} other {c.get('contended',{}).get('other_client_pct')} excl {c.get('contended',{}).get('exclusion_ok')} ratios {r['ratios']}", flush=True)
PY
}
for r in $(seq 1 $ROUNDS); do
  run redis redis://127.0.0.1:6379/0 0s baseline,contended $r
  run redlock $RL 0s baseline,contended $r
  run redlock-hint $RL 0s baseline,contended $r DLOCK_REDIS__BLOCKING_HANDOFF=false
done
for rtt in 500us 2ms; do
  run redis redis://127.0.0.1:6379/0 $rtt baseline,uncontended,contended 1
  run redlock $RL $rtt baseline,uncontended,contended 1
  run redlock-hint $RL $rtt baseline,uncontended,contended 1 DLOCK_REDIS__BLOCKING_HANDOFF=false
done
kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null || true
