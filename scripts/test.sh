#!/usr/bin/env bash
# Runs every test: formatting and lints, the doc tests, unit tests, the conformance suite (fault
# cases and nemesis included) against memory, SQLite, PostgreSQL, MariaDB, Redis, Redlock (five
# local masters) and ZooKeeper (a local server), and the `dlock conformance` tool against each.
# Extra arguments go to `cargo nextest run` (e.g. `scripts/test.sh -E 'package(lock-redis)'`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-test-env.sh
cargo fmt --all --check
# The library compiles neither the conformance suite nor its test servers; only the CLI (the
# `cli` feature) does.
if cargo tree -p dlock-rs -e normal --no-default-features --features redis --prefix none \
    | grep -E '^(lock-conformance|testcontainers|tempfile) '; then
  echo "the dlock library depends on the test suite again (see the cargo tree above)" >&2
  exit 1
fi
# Every published crate packages with the metadata crates.io needs, in dependency order (reads
# the registry index, uploads nothing; the builds it would verify are the ones below).
cargo publish --workspace --dry-run --no-verify --allow-dirty --quiet
cargo clippy --workspace --all-targets --features dlock-rs/metrics --quiet -- -D warnings
# The Docker provisioning path cannot run here (no engine); keep it compiling.
cargo check -p lock-conformance --features containers --quiet
cargo test --workspace --doc --features dlock-rs/metrics --quiet
# `metrics` is off by default (the library's users opt in); its tests and example run here.
cargo nextest run --workspace --features dlock-rs/metrics --no-fail-fast "$@"
