#!/usr/bin/env bash
# docs/BENCHMARKS.md "The vendors' events": `campaign-sender events` (release build) on
# 127.0.0.1 with a throwaway PostgreSQL beside it (scripts/pg.sh: durability off, as for every
# load run here), posted SendGrid-style signed batches and then Resend-style signed single
# events for SECONDS each (loadtest/src/bin/events.rs); one JSON line per phase, and the check
# that every event answered 200 is stored exactly once.
#   scripts/bench-events.sh [SECONDS] [extra args of the `events` harness]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bin campaign-sender --bin events
  exec scripts/with-pg.sh scripts/bench-events.sh "$@"
fi
seconds=${1:-20}
shift || true
exec target/release/events --seconds "$seconds" "$@"
