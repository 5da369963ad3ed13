#!/usr/bin/env bash
# Runs a command with DATABASE_URL pointing at a fresh throwaway PostgreSQL (scripts/pg.sh),
# stopped and deleted afterwards, whatever happens. From the repository root.
# Tests that start a server of their own (tests/it/helpers.rs `OwnServer`: TLS, pg_hba) make it
# under CS_OWN_PG_ROOT; what is still running there at the end — a test process killed before
# its Drop ran, as a mutation run's timeout does — is stopped here too.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
export CS_OWN_PG_ROOT=$dir/own
cleanup() {
  for own in "$CS_OWN_PG_ROOT"/*/; do
    pid=$(head -n 1 "$own/data/postmaster.pid" 2>/dev/null) || continue
    kill -INT "$pid" 2>/dev/null || continue # fast shutdown, whichever PostgreSQL version it is
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  scripts/pg.sh stop "$dir"
}
trap cleanup EXIT
DATABASE_URL=$(scripts/pg.sh start "$dir")
export DATABASE_URL
mkdir -p "$CS_OWN_PG_ROOT"
"$@"
