#!/usr/bin/env bash
# The table-growth benchmark (loadtest/src/bin/bloat/, docs/BENCHMARKS.md "The table grows") on
# a throwaway PostgreSQL: 10 finished campaigns of 1.2 M rows plus one of 1.2 M drained, table
# and index growth per sent row, HOT share, claim latency against a fresh table, status, and an
# archive under load. Extra arguments go to the harness (`scripts/bloat.sh --tuning
# fillfactor=80`); at the default 4 000 rows/s the server's autovacuum_naptime is scaled to
# 7.5 s (60 s at the provider's 500/s: `--rate 500` runs in real time, about 50 minutes); about
# 7 minutes at the defaults; loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release -p campaign-sender-loadtest --bin bloat --quiet
mkdir -p target/bloat
exec scripts/with-pg.sh target/release/bloat "$@" >>target/bloat/report.jsonl
