#!/usr/bin/env bash
# Runs every test: unit tests, the conformance suite (fault cases included) against memory,
# SQLite, PostgreSQL, MariaDB, Redis, Redlock (five local masters) and ZooKeeper (a local
# server), the `dlock conformance` tool against each, and the doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-test-env.sh
cargo fmt --all --check
cargo nextest run --workspace --no-fail-fast "$@"
cargo test --workspace --doc
