#!/usr/bin/env bash
# The multi-day harness (loadtest/src/bin/days/) on a throwaway PostgreSQL: a campaign over
# scaled days (1 day = 60 s, a 20-s window, provider 100/s, 3 days) with SIGKILLs, opt-outs and a
# pause across one window. Prints the per-day table (docs/BENCHMARKS.md) and exits 1 if a check
# failed. Extra arguments go to the harness (`scripts/days.sh --days 2 --day-s 40`); about
# --days × --day-s seconds; loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --workspace --bins --quiet
mkdir -p target/days
exec scripts/with-pg.sh target/release/days "$@" >target/days/report.json
