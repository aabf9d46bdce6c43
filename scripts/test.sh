#!/usr/bin/env bash
# Runs every test: formatting and lints, the doc tests, unit tests, the conformance suite (fault
# cases and nemesis included) against memory, SQLite, PostgreSQL, MariaDB, Redis, Redlock (five
# local masters) and ZooKeeper (a local server), and the `dlock conformance` tool against each.
# Extra arguments go to `cargo nextest run` (e.g. `scripts/test.sh -E 'package(lock-redis)'`).
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean build gains nothing from incremental caches, and they double the target's size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

bash scripts/setup-test-env.sh
cargo fmt --all --check
# The library compiles neither the conformance suite nor the test servers (dlock-testkit is a
# dev-dependency only) nor what only the tool needs (its own package, dlock-cli): no argument
# parser, progress bars or signal forwarding, and tokio without `process` and `signal`.
for features in redis postgres,mysql,sqlite,redis,zk; do
  if cargo tree -p dlock-rs -e normal --no-default-features --features "$features" --prefix none \
      | grep -E '^(lock-conformance|dlock-testkit|testcontainers|tempfile|clap|indicatif|nix|tracing-subscriber|dlock-cli) '; then
    echo "the dlock library ($features) depends on the test suite, the test servers or the tool again (see above)" >&2
    exit 1
  fi
  if cargo tree -p dlock-rs -e normal,features --no-default-features --features "$features" -i tokio --prefix none \
      | grep -E '^tokio feature "(process|signal)"'; then
    echo "the dlock library ($features) turns on tokio's process or signal again (only dlock-cli needs them)" >&2
    exit 1
  fi
done
# Each database alone: the library builds with one backend and only that database's SQL driver
# (about 5 min from cold on 2 busy cores, seconds once built).
for db in postgres mysql sqlite redis zk etcd; do
  cargo check -p dlock-rs --no-default-features --features "$db" --quiet
  # (`|| true`: no driver at all is a valid answer, and grep then exits 1 under pipefail)
  drivers=$({ cargo tree -p dlock-rs -e normal --no-default-features --features "$db" --prefix none \
    | grep -oE '^sqlx-(postgres|mysql|sqlite)' || true; } | sort -u | xargs)
  case "$db" in postgres | mysql | sqlite) want="sqlx-$db" ;; *) want="" ;; esac
  if [ "$drivers" != "$want" ]; then
    echo "dlock-rs with only the $db feature compiles the SQL drivers [$drivers], expected [$want]" >&2
    exit 1
  fi
done
# Every published crate packages with the metadata crates.io needs, in dependency order (reads
# the registry index, uploads nothing; the builds it would verify are the ones below).
cargo publish --workspace --dry-run --no-verify --allow-dirty --quiet
# `etcd` is off by default (its client needs protoc, which setup-test-env.sh installs); the
# tests build it, in the library and in the tool, so `dlock conformance --url etcd://…` runs here too.
features=dlock-rs/metrics,dlock-rs/etcd,dlock-cli/etcd
cargo clippy --workspace --all-targets --features "$features" --quiet -- -D warnings
# Supply chain: sources and licenses are checked offline by tests/architecture/supply_chain.rs;
# where cargo-deny is installed, its own check of the same policy (deny.toml) runs too.
if cargo deny --version >/dev/null 2>&1; then
  cargo deny --offline check bans licenses sources
else
  echo "cargo-deny not installed: deny.toml checked by tests/architecture/supply_chain.rs only" >&2
fi
# Every public doc link resolves and no doc has a warning.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --features "$features" --quiet
# The Docker provisioning path cannot run here (no engine); keep it compiling.
cargo check -p dlock-testkit --features containers --quiet
cargo test --workspace --doc --features "$features" --quiet
# `metrics` is off by default (the library's users opt in); its tests and example run here.
cargo nextest run --workspace --features "$features" --no-fail-fast "$@"
# ZooKeeper over TLS needs lock-zk's `tls` feature (the facade's `zk-tls`), whose rustls builds
# aws-lc from C source (about 2 min on 2 cores): a build of its own, run in a full run only.
if [ "$#" -eq 0 ]; then
  cargo nextest run -p lock-zk --features tls -E 'binary(zk_tls)'
else
  echo "NOT RUN (a filtered run): lock-zk's TLS test; run it with:" >&2
  echo "  cargo nextest run -p lock-zk --features tls -E 'binary(zk_tls)'" >&2
fi
