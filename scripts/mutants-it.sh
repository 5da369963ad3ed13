#!/usr/bin/env bash
# `cargo mutants` (crates.io) over the safety-critical Rust only the integration suite can judge
# — the pipeline (src/worker/), the work queue's and the kill switch's statements, the retry
# rule and connecting (src/store/), the coordinator's rounds, the provider client — against
# `tests/it` (real PostgreSQL, worker processes), on a throwaway PostgreSQL of its own
# (scripts/with-pg.sh) unless DATABASE_URL is set. Fails if any mutant survives; a mutant that
# makes a test hang is cut and counted caught. (The operator commands' wording and parsing are
# guarded by the hand-written mutations of scripts/mutations.txt and by process tests.)
#   scripts/mutants-it.sh --in-diff REV         # mutants on lines of the core changed since REV (CI)
#   scripts/mutants-it.sh src/worker/finish.rs  # every mutant of these files (by hand: ~1 min a mutant)
#   MUTANTS_RE='Store::claim' MUTANTS_TESTS='claim:: sending::' scripts/mutants-it.sh src/store/targets.rs
# MUTANTS_TESTS narrows the tests (nextest filters: substrings of `module::test`); a mutant caught
# by a subset is caught by the whole suite, so a filtered run can only under-count what is caught.
# Tests run under cargo-nextest with the `mutants` profile of .config/nextest.toml: the run stops at
# the first red test, and a test a mutant makes hang is ended after 60 s. Works on a copy of the
# tree (target/ copied): the working tree is untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then exec scripts/with-pg.sh "$0" "$@"; fi
# The files scripts/mutants-cargo.sh judges with the unit tests are left to it.
unit=(src/outcome.rs src/rate/plan.rs src/rate/pacer.rs src/exit.rs src/main.rs
  src/provider/answer.rs src/provider/json.rs src/provider/sendgrid.rs src/provider/ses.rs
  src/provider/postmark.rs src/provider/mailgun.rs src/provider/resend.rs src/provider/profile.rs
  src/provider/kind.rs src/provider/tests.rs src/provider/answer_tests.rs src/worker/held.rs
  src/store/outage.rs)
# The safety-critical core.
core=(src/worker src/store/targets.rs src/store/failed.rs src/store/suppressions.rs
  src/store/archive.rs src/store/campaigns.rs src/store/rate.rs src/store/outage.rs src/store/connect.rs
  src/rate/coordinator.rs src/provider/mod.rs src/provider/aws.rs)
args=(--test-tool=nextest --copy-target=true --timeout "${MUTANTS_TIMEOUT:-300}" --build-timeout 900
  -p campaign-sender -C --test=it)
if [ "${1:-}" = --in-diff ]; then
  diff=target/mutants-it.diff
  mkdir -p target
  git diff "${2:?--in-diff needs a git revision}" -- "${core[@]}" >"$diff"
  if [ ! -s "$diff" ]; then echo "cargo mutants: nothing the integration suite judges changed since $2"; exit 0; fi
  args+=(--in-diff "$diff")
  shift 2
fi
for f in "$@"; do args+=(--file "$f"); done
for f in "${unit[@]}"; do args+=(--exclude "$f"); done
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
command -v cargo-nextest >/dev/null || cargo install cargo-nextest --locked
export NEXTEST_PROFILE=mutants
out=${MUTANTS_OUT:-target/mutants-it}
rm -rf "$out" && mkdir -p "$out"
args+=(--output "$out")
[ -n "${MUTANTS_RE:-}" ] && args+=(--re "$MUTANTS_RE")
tests=()
if [ -n "${MUTANTS_TESTS:-}" ]; then
  read -r -a names <<<"$MUTANTS_TESTS"
  tests=(-- "${names[@]}")
fi
rc=0
cargo mutants "${args[@]}" "${tests[@]}" || rc=$?
exec scripts/mutants-report.sh "$out" "$rc" "cargo mutants (integration)"
