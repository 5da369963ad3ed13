#!/usr/bin/env bash
# docs/BENCHMARKS.md "The status page": `campaign-sender web` (release build) on 127.0.0.1 over
# a throwaway PostgreSQL of 13.2 M rows in 11 campaigns (loadtest/src/bin/web.rs): the first
# round of reads, one read of a live and of a finished campaign, and the pages' latencies from
# several viewers at once. About 4 minutes, most of it seeding. One JSON line.
#   scripts/bench-web.sh [extra args of the `web` harness, e.g. --rows 120000]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bin campaign-sender --bin web
  exec scripts/with-pg.sh scripts/bench-web.sh "$@"
fi
exec target/release/web "$@"
