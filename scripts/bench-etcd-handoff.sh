#!/usr/bin/env bash
# Hand-off latency of `dlock run` next to `etcdctl lock`, the operators' reference, in one run
# against one local etcd (BENCHMARKS.md, etcd).
#
# Both tools run the same holder command, `bash -c 'stamp start; sleep HOLD; stamp end'`, from
# CONTENDERS loops on one lock name, so a waiter is always queued when the holder's command ends.
# A hand-off is the time from one holder's "end" stamp to the next holder's "start" stamp: the
# tool noticing its command exited, releasing, the waiter's wake-up and grant, and its start of
# bash (the same bash for both tools). Rounds alternate the tools so both see the same machine.
#
# Usage: scripts/bench-etcd-handoff.sh [DLOCK_BINARY]
#   env: ROUNDS (4), HANDOFFS per round and tool (100), CONTENDERS (3), HOLD (0.05 s),
#        ETCD_ENDPOINT (host:port of a running etcd; default: start a local one on free ports).
# Needs etcd and etcdctl (Debian etcd-server, etcd-client) and a dlock built with `--features etcd`.
set -euo pipefail

DLOCK=${1:-target/release/dlock}
ROUNDS=${ROUNDS:-4}
HANDOFFS=${HANDOFFS:-100}
CONTENDERS=${CONTENDERS:-3}
HOLD=${HOLD:-0.05}
export ETCDCTL_API=3

work=$(mktemp -d /tmp/dlock-etcd-handoff.XXXXXX)
etcd_pid=""
cleanup() {
    if [[ -n "$etcd_pid" ]]; then kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [[ -z "${ETCD_ENDPOINT:-}" ]]; then
    client=$(free_port); peer=$(free_port)
    etcd --name bench --data-dir "$work/data" \
        --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "bench=http://127.0.0.1:$peer" --log-level warn >"$work/etcd.log" 2>&1 &
    etcd_pid=$!
    ETCD_ENDPOINT="127.0.0.1:$client"
    for _ in $(seq 100); do
        etcdctl --endpoints "$ETCD_ENDPOINT" endpoint health >/dev/null 2>&1 && break
        sleep 0.1
    done
fi
etcdctl --endpoints "$ETCD_ENDPOINT" endpoint health >/dev/null

# The holder's command: stamps in µs from bash's own clock, no extra process.
holder="echo \"s \${EPOCHREALTIME/./}\" >> \"\$0\"; sleep $HOLD; echo \"e \${EPOCHREALTIME/./}\" >> \"\$0\""

# One contender: takes the lock `turns` times with `tool`, appending stamps to `log`.
contend() {
    local tool=$1 name=$2 log=$3 turns=$4
    for _ in $(seq "$turns"); do
        case $tool in
            etcdctl) etcdctl --endpoints "$ETCD_ENDPOINT" lock "$name" -- bash -c "$holder" "$log" >/dev/null ;;
            dlock) "$DLOCK" run --url "etcd://$ETCD_ENDPOINT/dlock-bench" --name "$name" --wait 60s --ttl 10s \
                -- bash -c "$holder" "$log" ;;
        esac
    done
}

# Hand-offs of one log in µs, one a line: each "s" after an "e", dropping the first and last
# few (contenders still starting, or already done, so no waiter may be queued then).
handoffs() {
    awk '$1 == "e" { end = $2; next } $1 == "s" && end { print $2 - end; end = 0 }' "$1" |
        tail -n +"$CONTENDERS" | head -n -"$CONTENDERS"
}

# p50 and p99 of a column of numbers.
percentiles() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
        i50 = int(NR * 0.50); if (i50 < 1) i50 = 1; i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
        printf "%d %d\n", v[i50], v[i99] }'
}

turns=$(( (HANDOFFS + CONTENDERS) / CONTENDERS + 1 ))
echo "etcd $ETCD_ENDPOINT; $ROUNDS rounds x ~$HANDOFFS hand-offs per tool, $CONTENDERS contenders, hold ${HOLD}s"
echo "round tool handoff_p50_us handoff_p99_us n"
for round in $(seq "$ROUNDS"); do
    for tool in etcdctl dlock; do
        log="$work/$tool-$round.log"
        : >"$log"
        pids=()
        for c in $(seq "$CONTENDERS"); do
            contend "$tool" "bench-$tool-$round" "$log" "$turns" &
            pids+=($!)
        done
        wait "${pids[@]}"
        handoffs "$log" >"$log.us"
        read -r p50 p99 < <(percentiles <"$log.us")
        echo "$round $tool $p50 $p99 $(wc -l <"$log.us")"
        cat "$log.us" >>"$work/$tool.all"
    done
done
for tool in etcdctl dlock; do
    read -r p50 p99 < <(percentiles <"$work/$tool.all")
    echo "all $tool $p50 $p99 $(wc -l <"$work/$tool.all")"
done
