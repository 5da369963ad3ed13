#!/usr/bin/env bash
# README command 2: every test (unit, integration on real PostgreSQL, end-to-end with real
# processes). Starts a throwaway PostgreSQL unless DATABASE_URL already points at one that
# allows CREATE DATABASE (sqlx::test makes a fresh database per test).
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh e2e::`).
set -euo pipefail
cd "$(dirname "$0")/.."

[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/test.sh "$@"
# moto's SES (tests/it/ses_moto.rs), from PyPI into target/ on first use.
MOTO_BIN=${MOTO_BIN:-$(scripts/moto.sh)}
export MOTO_BIN
# The status page in headless Chromium (tests/it/web_browser.rs): Debian's chromium, npm packages.
BROWSER_TESTS=${BROWSER_TESTS:-$(scripts/browser.sh)}
export BROWSER_TESTS
cargo test --workspace --locked "$@"
