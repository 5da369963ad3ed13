#!/usr/bin/env bash
# The chaos harness (loadtest/src/bin/chaos/) on a throwaway PostgreSQL, one scenario after another:
#   scripts/chaos.sh                       # kill pg-restart blackhole dark dark-one provider scale all, 50 000 targets each
#   scripts/chaos.sh kill all -- --targets 20000
# Prints each scenario's Markdown row (docs/RELIABILITY.md) and exits 1 if any check failed.
# Loopback only; each scenario bounded by --timeout-s (default 900 s). The workers log at `warn`;
# CHAOS_WORKER_LOG sets their RUST_LOG (e.g. warn,campaign_sender::rate=debug) to follow one run.
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do scenarios+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#scenarios[@]} -gt 0 ] || scenarios=(kill pg-restart blackhole dark dark-one provider scale all)
cargo build --locked --release --workspace --bins --quiet
dir=$(mktemp -d)
trap 'scripts/pg.sh stop "$dir"' EXIT
DATABASE_URL=$(scripts/pg.sh start "$dir")
export DATABASE_URL
out=target/chaos
mkdir -p "$out"
rc=0
for s in "${scenarios[@]}"; do
  echo "== chaos: $s" >&2
  if target/release/chaos --scenario "$s" --pg-dir "$dir" "$@" >"$out/$s.json" 2>"$out/$s.log"; then :; else rc=1; fi
  grep -A1 '^| scenario' "$out/$s.log" | tail -n 1 || tail -n 20 "$out/$s.log" >&2
done
echo "reports: $out/*.json, logs: $out/*.log" >&2
exit $rc
