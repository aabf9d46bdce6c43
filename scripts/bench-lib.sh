# Sourced by the bench scripts: `bench_run LABEL URL RTT CASES ROUND [VAR=value ...]` runs one
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
