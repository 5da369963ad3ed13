#!/usr/bin/env bash
# The key-retention and suppression-list comparison (loadtest/src/bin/forget/) on a throwaway
# PostgreSQL: one campaign over 3 scaled days, run three ways — (a) the provider's own
# suppression only, (b) its list imported before each run, (c) (b) plus the idempotency window
# rule. Prints the table of docs/BENCHMARKS.md; about 6 minutes; loopback only. Extra arguments
# go to the harness (`scripts/forget.sh --scenario c --targets 1000`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --workspace --bins --quiet
mkdir -p target/forget
exec scripts/with-pg.sh target/release/forget "$@" >target/forget/report.json
