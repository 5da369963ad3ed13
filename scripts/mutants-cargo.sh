#!/usr/bin/env bash
# `cargo mutants` (crates.io) over the Rust decision code that has unit tests of its own, against
# the library's unit tests:
#   src/outcome.rs     status classification, backoff, the retry budget, Retry-After, the address
#                      check, the stored class names, the unreachable-provider pause
#   src/pacer.rs       the quota and burst, grants that lapse, lowering, pauses, acquiring
#   src/outage.rs      riding out a database outage: the waits, their cap, giving up at the limit
#   src/rate_share.rs  the pure planning of a round (`plan_round`, `PodRow`): fair shares, the
#                      handover second, AIMD, expiry. The coordinator's database round trips
#                      and its inputs (`Coordinator::*`, `limits_of_campaign`, `members`, `Signals::*`) are
#                      excluded here: only the integration tests reach them, and
#                      scripts/mutants-sql.sh breaks them by hand.
# Fails if any mutant survives. A mutant that makes a test hang is cut at --timeout and counted
# as caught (the suite did not pass). Installs cargo-mutants if it is missing.
#   scripts/mutants-cargo.sh   # ~25 min on 2 cores (a ~2.5-min baseline build, then ~8 s a mutant),
#                              # + ~3.5 min the first time to install cargo-mutants
# Runs in a copy of the tree with target/ copied, so the working tree is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
out=target/mutants-cargo
rm -rf "$out" && mkdir -p "$out"
rc=0
# -C --lib: build and run only the library's unit-test binary for each mutant.
cargo mutants --file src/outcome.rs --file src/pacer.rs --file src/outage.rs --file src/rate_share.rs \
  --exclude-re 'Coordinator::|limits_of_campaign|Signals::|members' \
  --copy-target=true --timeout 20 --build-timeout 900 -C --lib --output "$out" || rc=$?
exec scripts/mutants-report.sh "$out" "$rc" "cargo mutants"
