#!/usr/bin/env bash
# Re-run the capture: installs the vendors' official Node SDKs into a scratch dir (npm), starts
# the recorder, sends one email per provider through each SDK, writes <provider>.jsonl into OUT.
# The committed fixtures src/provider/tests.rs compares our requests with were made by
#   scripts/capture/run-all.sh tests/fixtures/providers
# (CI does not need Node: it reads the committed files). verify_sigv4.py, the stdlib-only SigV4
# checker, is the independent oracle of those tests. From ../shared/providers/capture/.
# Usage: scripts/capture/run-all.sh [OUT_DIR] [PORT]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$(realpath -m "${1:-$PWD/captures}")"; PORT="${2:-8025}"
WORK="${WORK:-/tmp/sdkcap}"
mkdir -p "$WORK" "$OUT"
cd "$WORK"
[ -f package.json ] || npm init -y >/dev/null
[ -d node_modules/@aws-sdk/client-sesv2 ] || npm i @sendgrid/mail postmark resend mailgun.js form-data @aws-sdk/client-sesv2
rm -f "$OUT"/{sendgrid,postmark,resend,mailgun,ses,other}.jsonl
node "$HERE/recorder.js" "$PORT" "$OUT" & REC=$!
trap 'kill $REC' EXIT
sleep 0.5
for p in sendgrid postmark resend mailgun ses; do
  NODE_PATH="$WORK/node_modules" node "$HERE/send.js" "$p" "http://127.0.0.1:$PORT"
done
npm ls --depth=0 2>/dev/null | tee "$OUT/sdk-versions.txt"
