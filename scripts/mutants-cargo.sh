#!/usr/bin/env bash
# `cargo mutants` (crates.io) over the Rust that decides without a database, against the
# library's unit tests:
#   src/outcome.rs        status classification, backoff, the retry budget, Retry-After, the
#                         address check, the stored class names, the unreachable pause, when to
#                         count failures
#   src/rate/plan.rs      the pure round: fair shares, the handover second, AIMD, expiry
#   src/rate/pacer.rs     the quota and burst, grants that lapse, lowering, pauses, acquiring
#   src/store/outage.rs   the one database retry rule: the waits, their cap, each attempt's bound,
#                         giving up at the limit (on a paused clock)
#   src/exit.rs           the one exit-code rule
#   src/provider/*        each vendor's request and answer table (not mod.rs: the client, judged
#                         by the integration suite)
#   src/worker/held.rs    the rows a pass holds: counting, room, the early-write mark
# Fails if any mutant survives; a mutant that makes a test hang is cut
# at --timeout and counted caught (the suite did not pass).
#   scripts/mutants-cargo.sh                 # every mutant (~25 min on 2 cores)
#   scripts/mutants-cargo.sh --in-diff REV   # only mutants on lines changed since git revision REV (CI)
# Installs cargo-mutants if it is missing (~3.5 min). Works on a copy of the tree (target/ copied).
set -euo pipefail
cd "$(dirname "$0")/.."
files=(src/outcome.rs src/rate/plan.rs src/rate/pacer.rs src/store/outage.rs src/exit.rs
  src/provider/answer.rs src/provider/json.rs src/provider/sendgrid.rs src/provider/ses.rs
  src/provider/postmark.rs src/provider/mailgun.rs src/provider/resend.rs src/provider/profile.rs
  src/provider/kind.rs src/worker/held.rs)
args=()
if [ "${1:-}" = --in-diff ]; then
  diff=target/mutants-cargo.diff
  mkdir -p target
  git diff "${2:?--in-diff needs a git revision}" -- "${files[@]}" >"$diff"
  if [ ! -s "$diff" ]; then echo "cargo mutants: nothing changed in ${files[*]} since $2"; exit 0; fi
  args+=(--in-diff "$diff")
fi
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
out=target/mutants-cargo
rm -rf "$out" && mkdir -p "$out"
for f in "${files[@]}"; do args+=(--file "$f"); done
rc=0
# -C --lib: build and run only the library's unit-test binary for each mutant.
cargo mutants "${args[@]}" -p campaign-sender \
  --copy-target=true --timeout 20 --build-timeout 900 -C --lib --output "$out" || rc=$?
exec scripts/mutants-report.sh "$out" "$rc" "cargo mutants (unit)"
