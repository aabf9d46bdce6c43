#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine and makes sure the shared database
# services answer. Idempotent: on a prepared machine it only checks.
set -euo pipefail

log() { printf '[setup] %s\n' "$*" >&2; }

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
dpkg -s zookeeper >/dev/null 2>&1 || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# lock-etcd: the server and etcdctl for its tests, protoc for etcd-client's generated gRPC code.
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/descriptor.proto): only recommended by
# protobuf-compiler, so --no-install-recommends leaves them out and etcd-client's build fails.
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "missing: ${missing[*]} — install them (Debian: apt-get install ${missing[*]})"
    exit 1
  fi
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

# PostgreSQL and MariaDB are machine services; start them if they are down.
pg_up() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
my_up() { (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; }
if [ -z "${DLOCK_TEST_POSTGRES_URL:-}" ] && ! pg_up; then
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi
if [ -z "${DLOCK_TEST_MYSQL_URL:-}" ] && ! my_up; then
  log "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
for _ in $(seq 1 60); do
  { [ -n "${DLOCK_TEST_POSTGRES_URL:-}" ] || pg_up; } && { [ -n "${DLOCK_TEST_MYSQL_URL:-}" ] || my_up; } && break
  sleep 0.5
done
[ -n "${DLOCK_TEST_POSTGRES_URL:-}" ] || pg_up || { log "PostgreSQL does not answer on 127.0.0.1:5432"; exit 1; }
[ -n "${DLOCK_TEST_MYSQL_URL:-}" ] || my_up || { log "MariaDB does not answer on 127.0.0.1:3306"; exit 1; }
log "ready: redis-server $(redis-server --version | awk '{print $3}'), zookeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '?'), etcd $(dpkg-query -W -f='${Version}' etcd-server 2>/dev/null || echo '?'), PostgreSQL and MariaDB up"
