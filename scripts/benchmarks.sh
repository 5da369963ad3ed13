#!/usr/bin/env bash
# Every drain figure in docs/BENCHMARKS.md, in one go (about 14 minutes on 2 cores), on one
# throwaway PostgreSQL. Each run appends its JSON line to target/benchmarks.jsonl (BENCH_OUT),
# prints its summary on stderr, and draws target/bench-<name>.svg. Everything on 127.0.0.1,
# every run bounded.
#   scripts/benchmarks.sh                 # every run
#   scripts/benchmarks.sh fleet-4w …      # only these
# DRAIN=path/to/drain runs another build's harness (scripts/ab.sh does); BENCH_TAG labels its lines.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bins
  exec scripts/with-pg.sh scripts/benchmarks.sh "$@"
fi
out=${BENCH_OUT:-target/benchmarks.jsonl}
drain=${DRAIN:-target/release/drain}
tag=${BENCH_TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo tree)}
[ "${BENCH_APPEND:-0}" = 1 ] || : >"$out"
only=" $* "
run() {
  local name=$1; shift
  [ "$only" = "  " ] || [[ "$only" == *" $name "* ]] || return 0
  echo "== $name ($tag): drain $*" >&2
  # A killed or stopped worker is expected in the kill and event runs; drain's own exit code says
  # if anything else failed.
  "$drain" --chart "target/bench-$name.svg" "$@" | sed "s/^{/{\"name\":\"$name\",\"build\":\"$tag\",/" >>"$out"
}
# Every worker is told the provider's whole limit (500/s) and they share it through PostgreSQL.
run fleet-1w        --targets 30000 --workers 1 --faults none
run fleet-4w        --targets 30000 --workers 4 --faults none
run fleet-8w        --targets 30000 --workers 8 --faults none
run fleet-churn     --targets 40000 --workers 4 --faults none --event 15:join --event 15:join --event 30:term --event 45:kill
run limit-4w-faults --targets 30000 --workers 4 --faults standard
run unlimited-4w    --targets 100000 --workers 4 --provider-rate 0 --latency-ms 0 --jitter-ms 0 --faults none
run rss-10k         --targets 10000 --workers 4 --provider-rate 0 --latency-ms 0 --jitter-ms 0 --faults none
run rss-1.2m        --targets 1200000 --workers 4 --provider-rate 0 --latency-ms 0 --jitter-ms 0 --faults none --timeout-s 600
run one-pod-http    --targets 30000 --workers 1 --jitter-ms 20 --faults none
run one-pod-tls     --targets 30000 --workers 1 --jitter-ms 20 --faults none --tls
run sigkill         --targets 30000 --workers 4 --faults none --kill-after-s 15 --kill-signal KILL
run sigterm         --targets 30000 --workers 4 --faults none --kill-after-s 15 --kill-signal TERM
echo "results: $out" >&2
