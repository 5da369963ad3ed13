#!/usr/bin/env bash
# `cargo mutants` (crates.io) over the Rust decision code that has unit tests of its own:
# outcome classification, backoff, the retry budget, the address check, the stored class names
# (src/outcome.rs). Fails if any mutant survives. Installs cargo-mutants if it is missing.
#   scripts/mutants-cargo.sh   # ~10 min on 2 cores (a 2.5-min baseline build, then ~15 s a mutant),
#                              # + ~3.5 min the first time to install cargo-mutants
# Runs in a copy of the tree with target/ copied, so the working tree is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
out=target/mutants-cargo
rm -rf "$out" && mkdir -p "$out"
rc=0
cargo mutants --file src/outcome.rs --copy-target=true --timeout 120 --output "$out" -- --lib || rc=$?
# Exit 2 = some mutants survived (listed in mutants.out/missed.txt); 3 = a timeout.
if [ "$rc" != 0 ]; then
  echo "cargo mutants: survivors (exit $rc):" >&2
  cat "$out/mutants.out/missed.txt" "$out/mutants.out/timeout.txt" 2>/dev/null >&2 || true
fi
exit "$rc"
