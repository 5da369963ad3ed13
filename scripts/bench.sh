#!/usr/bin/env bash
# Criterion benches: benches/engine.rs (with a throwaway PostgreSQL for the database bench) and
# benches/profiles.rs (each vendor profile's share of a mail's CPU; no database).
#   scripts/bench.sh [CRITERION ARGS]    e.g. scripts/bench.sh profile/ to run only the profiles
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/bench.sh "$@"
cargo bench --locked --bench engine --bench profiles -- "$@"
