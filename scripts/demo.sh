#!/usr/bin/env bash
# README command 1: the main job end to end on this machine. A throwaway PostgreSQL, the fake
# provider (500/s, burst 20, 80±20 ms, the standard fault profile), 4 workers sharing its limit
# through PostgreSQL draining a
# generated campaign of 20 000 targets, and a printed report. Everything on 127.0.0.1; the
# database is deleted afterwards. Arguments go to the drain harness (`--targets 50000`,
# `--workers 8`, `--faults none`, ...; see `target/debug/drain --help`).
#
# It builds only what it runs — the worker, the fake provider and the drain harness — in the dev
# profile, which the tests share, so a fresh clone reaches the summary in minutes and the test
# command compiles little more after it; the rate, the 429s and the duplicates are a release
# build's, the CPU and memory figures are not: DEMO_PROFILE=release for those
# (docs/BENCHMARKS.md "Build time"). DEMO_BUILD_ONLY=1 stops after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
profile=${DEMO_PROFILE:-dev}
cargo build --locked --profile "$profile" -p campaign-sender --bin campaign-sender \
  -p fake-provider --bin fake-provider -p campaign-sender-loadtest --bin drain
[ -z "${DEMO_BUILD_ONLY:-}" ] || exit 0
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
exec scripts/with-pg.sh "target/$dir/drain" "$@"
