#!/usr/bin/env bash
# docs/BENCHMARKS.md "Each vendor's contract": the drain at 500/s through every MAIL_PROVIDER
# profile against the fake (which serves them all), in alternating order, ROUNDS times (default
# 2), on one throwaway PostgreSQL; prints each run's steady rate and CPU per sent mail, and each
# vendor's ratio to the JSON contract of the same round. Everything on 127.0.0.1, bounded.
#   scripts/bench-vendors.sh [ROUNDS] [TARGETS]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/setup.sh >/dev/null
  cargo build --locked --release --workspace --bins
  exec scripts/with-pg.sh scripts/bench-vendors.sh "$@"
fi
rounds=${1:-2} targets=${2:-15000}
out=target/bench-vendors.jsonl
: >"$out"
for r in $(seq "$rounds"); do
  for p in json sendgrid ses postmark mailgun resend; do
    echo "== round $r: $p" >&2
    how=(--workers 4)
    [ "${CALLGRIND:-0}" = 1 ] && how=(--workers 1 --provider-rate 50 --callgrind)
    target/release/drain --targets "$targets" "${how[@]}" --faults none --provider "$p" \
      --chart "target/bench-vendor-$p.svg" 2>/dev/null | tail -n 1 | sed "s/^{/{\"round\":$r,/" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
base = {r["round"]: r for r in runs if r["provider"]["contract"] == "json"}
unit = "instr./mail" if runs[0].get("instructions") else "CPU µs/mail"
print(f"{'round':>5} {'provider':<9} {'delivered/s':>11} {unit:>11} {'rate vs json':>12} {'CPU vs json':>11} {'twice':>5}")
def per_mail(r):
    # Instructions per mail under callgrind, else CPU µs per mail.
    if r.get("instructions"):
        return sum(r["instructions"]) / max(r["delivered"], 1)
    return sum(r["cpu_s"]) / max(r["delivered"], 1) * 1e6
for r in runs:
    cpu = per_mail(r)
    b = base[r["round"]]
    bcpu = per_mail(b)
    print(f"{r['round']:>5} {r['provider']['contract']:<9} {r['delivered_per_s_steady']:>11.0f} {cpu:>11.0f}"
          f" {r['delivered_per_s_steady'] / b['delivered_per_s_steady']:>12.3f} {cpu / bcpu:>11.3f}"
          f" {r['members_delivered_more_than_once']:>5}")
PY
