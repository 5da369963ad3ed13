#!/usr/bin/env bash
# `cargo mutants` (crates.io) over the modules whose decisions only the integration suite can
# see — claim and finish (src/store.rs), the pipeline and its shutdown (src/worker.rs,
# src/shutdown.rs), and with MUTANTS_RE the coordinator's database rounds
# (src/rate_share.rs: 'Coordinator::|limits_of_campaign|Signals::|members'; its pure planning is
# scripts/mutants-cargo.sh's) — against the integration tests (`tests/it`, real PostgreSQL, worker
# processes), with a throwaway PostgreSQL of its own (scripts/with-pg.sh) unless DATABASE_URL
# is set. Fails if any mutant survives; a mutant that makes a test hang is cut at --timeout and
# counted as caught (the suite did not pass).
#   scripts/mutants-it.sh                       # all three files
#   scripts/mutants-it.sh src/store.rs          # one file
#   MUTANTS_RE='in connect' MUTANTS_TESTS='wrong_password unreachable_database' \
#     scripts/mutants-it.sh src/store.rs        # some mutants, against the tests that reach them
#   MUTANTS_SHARD=1/4 scripts/mutants-it.sh     # a quarter of them (cargo mutants --shard)
#   MUTANTS_TIMEOUT=120 MUTANTS_OUT=target/m1 …   # cut hangs sooner; results elsewhere
# A mutant caught by a subset of the tests is caught by the whole suite, so a filtered run can
# only under-count what is caught, never hide a survivor.
# Tests run under cargo-nextest (on the machine image; installed if missing) with the `mutants`
# profile of .config/nextest.toml: the run stops at the first red test, and a test a mutant
# makes hang is ended after 60 s and counts as red. So a caught mutant costs ~12 s of build and
# seconds of tests, a missed one the whole (filtered) suite; docs/RELIABILITY.md has the runs.
# Too long for CI all the same (the store.rs pass took ~1 h, worker.rs and the coordinator ~2 h
# together); run it when these files change. Not in .ci/run: scripts/mutants-sql.sh breaks the
# same statements by hand there. Runs in a copy of the tree with target/ copied: the working
# tree is untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  exec scripts/with-pg.sh "$0" "$@"
fi
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
command -v cargo-nextest >/dev/null || cargo install cargo-nextest --locked
export NEXTEST_PROFILE=mutants
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(src/store.rs src/worker.rs src/shutdown.rs)
out=${MUTANTS_OUT:-target/mutants-it}
rm -rf "$out" && mkdir -p "$out"
# A mutant that makes the whole run hang (past nextest's per-test limit) is cut here
# (MUTANTS_TIMEOUT seconds, default 300: ~4x the whole suite); a filtered run can use less.
args=(--test-tool=nextest --copy-target=true --timeout "${MUTANTS_TIMEOUT:-300}" --build-timeout 900
  -C --test=it --output "$out")
for f in "${files[@]}"; do args+=(--file "$f"); done
[ -n "${MUTANTS_RE:-}" ] && args+=(--re "$MUTANTS_RE")
[ -n "${MUTANTS_SHARD:-}" ] && args+=(--shard "$MUTANTS_SHARD")
# MUTANTS_SKIP_BASELINE=1 when the tree's tests are known to pass (saves ~3 min).
[ "${MUTANTS_SKIP_BASELINE:-0}" = 1 ] && args+=(--baseline=skip)
# Test-name filters go to nextest (substrings of `module::test`): `cargo nextest run … NAME…`.
tests=()
if [ -n "${MUTANTS_TESTS:-}" ]; then
  read -r -a names <<<"$MUTANTS_TESTS"
  tests=(-- "${names[@]}")
fi
rc=0
cargo mutants "${args[@]}" "${tests[@]}" || rc=$?
exec scripts/mutants-report.sh "$out" "$rc" "cargo mutants (integration)"
