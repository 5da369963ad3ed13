#!/usr/bin/env bash
# What a newcomer's first two commands spend compiling, on a fresh clone of REV (default HEAD)
# with an empty target/ (the crates already downloaded: `cargo fetch` first): the build step of
# scripts/demo.sh (README command 1), then that of scripts/test.sh (README command 2) on the same
# target/, as a newcomer runs them, and the tests' build again on an empty target/ of its own. With --run, then each whole command, built (the demo to its
# report, the tests to their end): a newcomer waits for the build and the run. Prints one line per step: seconds, crates
# compiled. docs/BENCHMARKS.md "Build time" keeps the figures.
#   scripts/bench-build.sh [--run] [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
run=false
[ "${1:-}" = --run ] && { run=true; shift; }
rev=${1:-HEAD}
root=$PWD
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
git clone --quiet --no-checkout "$root" "$dir/clone"
git -C "$dir/clone" checkout --quiet "$(git rev-parse "$rev")"
cd "$dir/clone"
cargo fetch --locked --quiet
scripts/setup.sh >/dev/null

# step NAME CMD...: runs CMD, prints its seconds and the crates it compiled.
step() {
  local name=$1 t0 t1 n
  shift
  t0=$(date +%s%N)
  "$@" >"$dir/$name.log" 2>&1 || { tail -20 "$dir/$name.log" >&2; exit 1; }
  t1=$(date +%s%N)
  n=$(grep -c '^ *Compiling ' "$dir/$name.log" || true)
  ms=$(((t1 - t0) / 1000000))
  printf '%-30s %4d.%d s  %4d crates compiled\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$n"
}

echo "build time of $(git log -1 --format='%h %s' | cut -c1-60) ($(nproc) cores)"
# The demo's build as that revision's script does it (DEMO_BUILD_ONLY where it has it, else its
# `cargo build` line).
if grep -q DEMO_BUILD_ONLY scripts/demo.sh; then
  step "demo: build" env DEMO_BUILD_ONLY=1 scripts/demo.sh
else
  step "demo: build" bash -c "$(grep -E '^cargo build' scripts/demo.sh)"
fi
step "tests: build, after the demo" cargo test --workspace --locked --no-run
# A newcomer who runs the tests first: the same build on an empty target/ of its own.
step "tests: build, alone" env CARGO_TARGET_DIR="$dir/alone" cargo test --workspace --locked --no-run
if $run; then
  step "demo: the command, built" scripts/demo.sh
  step "tests: the command, built" scripts/test.sh
fi
