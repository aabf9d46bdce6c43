# Sourced by the bench scripts (after setting $B, $T and `pids=()`).
# `bench_redlock_masters` starts three Redlock masters on 26391-26393 (their PIDs into `pids`)
# and sets $RL; once they are up, `bench_init_redis` marks them and the machine's Redis fresh.
bench_redlock_masters() {
  local p
  for p in 26391 26392 26393; do
    redis-server --port $p --bind 127.0.0.1 --save '' --appendonly no --daemonize no > "$T/redis$p.log" 2>&1 & pids+=($!)
  done
  RL=redlock://127.0.0.1:26391,127.0.0.1:26392,127.0.0.1:26393
}
bench_init_redis() {
  "$B" init --url redis://127.0.0.1:6379/0 >/dev/null 2>&1
  "$B" init --url "$RL" >/dev/null 2>&1
}

# `bench_run LABEL URL RTT CASES ROUND [VAR=value ...]` runs one
# `dlock bench` ($B, 3 s per case, JSON into $T) with the variables given and prints one line:
# the p50s, the contended rate, the share handed to another client, exclusion and the ratios.
bench_run() {
  local name=$1 url=$2 rtt=$3 cases=$4 r=$5
  shift 5
  env "$@" timeout 180 "$B" bench --url "$url" --duration 3s --cases "$cases" --rtt "$rtt" --json 2>/dev/null > "$T/$name-$rtt-$r.json"
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
