#!/usr/bin/env bash
# Breaks the safety-critical code on purpose, one hand-written mutation at a time
# (scripts/mutations.txt: each keyed to a named fn or const, not to exact text; scripts/mutate.py
# applies it), runs that mutation's tests, and fails if any mutant survives (every test green).
#   scripts/mutants-named.sh                      # every mutation
#   scripts/mutants-named.sh --changed-since REV  # only those whose item differs from git revision REV (CI)
#   scripts/mutants-named.sh --check              # only check that every mutation still applies (no build)
#   MUTANTS_ONLY=regex scripts/mutants-named.sh   # the mutations whose name matches
# Needs DATABASE_URL like scripts/test.sh (starts a throwaway PostgreSQL when unset). Works on a
# copy of the tree (target/mutants-named/tree, its own target dir), so the working tree is never
# touched. About a minute a mutation on 2 cores (an incremental build and its tests).
set -euo pipefail
cd "$(dirname "$0")/.."
list=scripts/mutations.txt
if [ "${1:-}" = --check ]; then exec python3 scripts/mutate.py check "$list"; fi
[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh "$0" "$@"
python3 scripts/mutate.py check "$list"

selected=()
if [ "${1:-}" = --changed-since ]; then
  base=${2:?--changed-since needs a git revision}
  mapfile -t selected < <(python3 scripts/mutate.py changed "$list" "$base")
  echo "mutations whose item changed since $base: ${#selected[@]}"
else
  mapfile -t selected < <(python3 scripts/mutate.py list "$list" | cut -f1)
fi
[ ${#selected[@]} -gt 0 ] || { echo "mutants: none to run"; exit 0; }

# A copy of the tree to mutate, sharing nothing with the working tree but the registry. A mutated
# file is put back (and touched, so cargo rebuilds it) after its tests.
work=target/mutants-named
tree=$work/tree
rm -rf "$tree" && mkdir -p "$tree"
tar -cf - --exclude=./target --exclude=./.git . | tar -C "$tree" -xf -
export CARGO_TARGET_DIR=$PWD/$work/target
root=$PWD
survived=0 ran=0
printf '%-52s %s\n' "mutation" "tests that went red"
for i in "${selected[@]}"; do
  IFS=$'\t' read -r _ name tests file < <(python3 scripts/mutate.py list "$list" | sed -n "$((i + 1))p")
  if [ -n "${MUTANTS_ONLY:-}" ] && ! grep -Eq "$MUTANTS_ONLY" <<<"$name"; then continue; fi
  ran=$((ran + 1))
  (cd "$tree" && python3 "$root/scripts/mutate.py" apply "$root/$list" "$i")
  red=""
  for t in $tests; do
    case "$t" in
      lib) args=(-p campaign-sender --lib) ;;
      it:*) args=(-p campaign-sender --test it -- "${t#it:}") ;;
      fleet:*) args=(-p campaign-sender --test fleet -- "${t#fleet:}") ;;
      sh:*) # A check script of scripts/, on a throwaway PostgreSQL of its own.
        (cd "$tree" && env -u DATABASE_URL "scripts/${t#sh:}" >/dev/null 2>&1) && continue
        red="scripts/${t#sh:}"
        break ;;
      *) echo "mutation '$name': unknown test filter '$t'" >&2; exit 1 ;;
    esac
    out=$(cd "$tree" && cargo test --locked -q "${args[@]}" 2>&1) && continue
    if grep -q "could not compile" <<<"$out"; then
      echo "mutation '$name' does not compile; fix $list" >&2
      grep -E "^error" -A 5 <<<"$out" | head -20 >&2
      exit 1
    fi
    red="$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p; s/^    \([a-z_0-9]*::[a-z_0-9:]*\)$/\1/p' <<<"$out" | sort -u | tr '\n' ' ')"
    red=${red:-"(the run failed: $t)"}
    break # one red test is enough
  done
  cp "$file" "$tree/$file" && touch "$tree/$file"
  if [ -z "$red" ]; then
    printf '%-52s %s\n' "$name" "NONE — the mutant survived"
    survived=$((survived + 1))
  else
    printf '%-52s %s\n' "$name" "$red"
  fi
done
echo "mutants: $ran run, $((ran - survived)) killed, $survived survived"
[ "$survived" = 0 ]
