#!/usr/bin/env bash
# Criterion benches (benches/engine.rs) with a throwaway PostgreSQL for the database bench.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/bench.sh "$@"
cargo bench --locked --bench engine -- "$@"
