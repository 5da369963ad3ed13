#!/usr/bin/env bash
# The end of every cargo-mutants script: prints the tally of OUT/mutants.out under LABEL and
# exits with what the run means — 0 when no mutant survived, otherwise cargo mutants' code with
# the survivors listed. A run cut only by timeouts (exit 3: hangs, the suite did not pass)
# counts as all caught.
#   scripts/mutants-report.sh OUT RC LABEL
set -euo pipefail
out=$1 rc=$2 label=$3
m=$out/mutants.out
count() { [ -f "$m/$1.txt" ] && wc -l <"$m/$1.txt" || echo 0; }
echo "$label: $(count caught) caught, $(count timeout) timed out (caught), $(count missed) missed, $(count unviable) unviable" >&2
# Exit 2 = some mutants survived (listed in missed.txt); 3 = only timeouts (hangs: caught).
case "$rc" in
  0) ;;
  3) [ "$(count missed)" = 0 ] && rc=0 ;;
esac
if [ "$rc" != 0 ]; then
  echo "$label: survivors (exit $rc):" >&2
  cat "$m/missed.txt" >&2 2>/dev/null || true
fi
exit "$rc"
