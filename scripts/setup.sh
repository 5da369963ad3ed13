#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine with Rust: PostgreSQL
# server binaries (a throwaway cluster is started per run by scripts/pg.sh; none is left running).
set -euo pipefail
if ! ls -d /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "setup.sh: PostgreSQL server binaries missing; install the 'postgresql' package (or set PG_BIN)" >&2
    exit 1
  fi
fi
command -v python3 >/dev/null || { echo "setup.sh: python3 is needed to pick a free port" >&2; exit 1; }
echo "setup: PostgreSQL $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
