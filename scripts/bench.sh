#!/usr/bin/env bash
# Criterion benches (benches/engine.rs) with a throwaway PostgreSQL for the database bench.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'scripts/pg.sh stop "$dir"' EXIT
DATABASE_URL=$(scripts/pg.sh start "$dir")
export DATABASE_URL
cargo bench --locked --bench engine -- "$@"
