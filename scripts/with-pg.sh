#!/usr/bin/env bash
# Runs a command with DATABASE_URL pointing at a fresh throwaway PostgreSQL (scripts/pg.sh),
# stopped and deleted afterwards, whatever happens. From the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'scripts/pg.sh stop "$dir"' EXIT
DATABASE_URL=$(scripts/pg.sh start "$dir")
export DATABASE_URL
"$@"
