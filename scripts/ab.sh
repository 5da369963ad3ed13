#!/usr/bin/env bash
# Compares two builds in one session, on one throwaway PostgreSQL: the working tree against git
# revision REV, runs of scripts/benchmarks.sh alternating between them (REV, tree, REV, tree, …)
# so that a noisy shared host weighs on both alike. Prints one line per run; the JSON lines go to
# target/ab.jsonl (with "build": REV or "tree").
#   scripts/ab.sh REV ROUNDS NAME…        e.g. scripts/ab.sh 0907168 2 fleet-4w unlimited-4w rss-10k
# REV is built once in target/ab/REV (a git worktree; ~5 min); AB_BASE_BIN=DIR uses binaries
# already built from REV instead (DIR holds drain, campaign-sender, fake-provider).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: ab.sh REV ROUNDS NAME…}; rounds=${2:?usage: ab.sh REV ROUNDS NAME…}; shift 2
[ $# -gt 0 ] || { echo "ab.sh: name at least one run of scripts/benchmarks.sh" >&2; exit 2; }
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bins
  base=${AB_BASE_BIN:-}
  if [ -z "$base" ]; then
    wt=target/ab/$rev
    [ -d "$wt" ] || git worktree add --detach "$wt" "$rev" >/dev/null
    (cd "$wt" && cargo build --locked --release --bins --workspace 2>/dev/null || cargo build --locked --release --bins)
    base=$wt/target/release
  fi
  AB_BASE_BIN=$base exec scripts/with-pg.sh "$0" "$rev" "$rounds" "$@"
fi
out=target/ab.jsonl
: >"$out"
for r in $(seq "$rounds"); do
  for name in "$@"; do
    DRAIN=$AB_BASE_BIN/drain BENCH_TAG=$rev BENCH_OUT=$out BENCH_APPEND=1 scripts/benchmarks.sh "$name"
    DRAIN=target/release/drain BENCH_TAG=tree BENCH_OUT=$out BENCH_APPEND=1 scripts/benchmarks.sh "$name"
  done
done
python3 - "$out" <<'PY'
import json, sys
print(f"{'run':<14} {'build':<10} {'delivered/s':>11} {'of limit':>9} {'of ceiling':>10} {'peak RSS MiB':>14} {'429s':>5} {'mailed twice':>12}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    util = "" if r.get("utilisation") is None else f"{r['utilisation']*100:.1f} %"
    print(f"{r['name']:<14} {r['build']:<10} {r['delivered_per_s_steady']:>11.0f} {util:>9} {r['of_db_ceiling']*100:>9.0f} % {max(r['peak_rss_mib']):>14.1f} {r['throttled_429']:>5} {r['members_delivered_more_than_once']:>12}")
PY
