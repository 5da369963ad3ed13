#!/usr/bin/env bash
# docs/BENCHMARKS.md "Campaigns side by side": two campaigns under one 500/s key on 127.0.0.1
# (loadtest/src/bin/shares.rs), release build, a throwaway PostgreSQL (scripts/pg.sh). A table
# on stderr, one JSON line on stdout; exits 1 if a part is off, a 429 or a duplicate was seen.
#   scripts/bench-shares.sh [extra args of the `shares` harness, e.g. --a-workers 8]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bin campaign-sender --bin fake-provider --bin shares
  exec scripts/with-pg.sh scripts/bench-shares.sh "$@"
fi
exec target/release/shares "$@"
