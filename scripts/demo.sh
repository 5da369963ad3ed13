#!/usr/bin/env bash
# README command 1: the main job end to end on this machine. A throwaway PostgreSQL, the fake
# provider (500/s, burst 20, 80±20 ms, the standard fault profile), 4 workers sharing its limit
# through PostgreSQL draining a
# generated campaign of 20 000 targets, and a printed report. Everything on 127.0.0.1; the
# database is deleted afterwards. Arguments go to the drain harness (`--targets 50000`,
# `--workers 8`, `--faults none`, ...; see `target/release/drain --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cargo build --locked --release --workspace --bins
exec scripts/with-pg.sh target/release/drain "$@"
