#!/usr/bin/env bash
# BENCHMARKS.md's tables: every backend, three rounds with no delay, then every networked backend
# (all but SQLite, which has no network to delay) with 0.5 and 2 ms round trips (`--rtt`). Build first:
#   cargo build --release -p dlock-cli --features etcd --bin dlock
# Starts three Redis masters (26391-26393), a ZooKeeper (21811) and an etcd (23791) of its own and
# stops them by PID; PostgreSQL, MariaDB and Redis are the machine's, on their usual ports.
set -u
cd "$(dirname "$0")/.."
B="${DLOCK_BIN:-target/release/dlock}"
T=/tmp/benchq; rm -rf $T; mkdir -p $T/zk $T/etcd
pids=()
# ZooKeeper, full JIT, default tickTime
cat > $T/zk.cfg <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$T/zk
clientPort=21811
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
CFG
java -Xmx512m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain $T/zk.cfg > $T/zk.log 2>&1 & pids+=($!)
etcd --data-dir $T/etcd --listen-client-urls http://127.0.0.1:23791 --advertise-client-urls http://127.0.0.1:23791 --listen-peer-urls http://127.0.0.1:23801 > $T/etcd.log 2>&1 & pids+=($!)
. scripts/bench-lib.sh
bench_redlock_masters
sleep 6
bench_init_redis
run() { # name url rtt round
  bench_run "$1" "$2" "$3" baseline,uncontended,contended "$4" DLOCK_SQL__TABLE=dlock_bench_q
}
for r in 1 2 3; do
  run redis redis://127.0.0.1:6379/0 0s $r
  run redlock $RL 0s $r
  run postgres postgres://postgres@127.0.0.1:5432/test 0s $r
  run mysql mysql://root@127.0.0.1:3306/test 0s $r
  run sqlite "sqlite://$T/bench.db" 0s $r
  run zk zk://127.0.0.1:21811/benchq 0s $r
  run etcd etcd://127.0.0.1:23791/benchq 0s $r
done
for rtt in 500us 2ms; do
  run redlock $RL $rtt 1
  run zk zk://127.0.0.1:21811/benchq $rtt 1
  run etcd etcd://127.0.0.1:23791/benchq $rtt 1
  run redis redis://127.0.0.1:6379/0 $rtt 1
  run postgres postgres://postgres@127.0.0.1:5432/test $rtt 1
  run mysql mysql://root@127.0.0.1:3306/test $rtt 1
done
kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null || true
