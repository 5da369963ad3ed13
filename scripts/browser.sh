#!/usr/bin/env bash
# Prints the directory of the browser tests (tests/browser), ready to run: Debian's Chromium
# installed if it is missing (as root; /usr/bin/chromium, `CHROMIUM` overrides) and the npm
# packages of tests/browser/package-lock.json (playwright-core, axe-core; no browser download)
# installed into tests/browser/node_modules when missing or older than the lock.
# For tests/it/web_browser.rs and scripts/screenshots.sh; scripts/test.sh exports it as
# BROWSER_TESTS.
set -euo pipefail
cd "$(dirname "$0")/.."
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "browser.sh: Chromium is missing; install Debian's 'chromium' package (or set CHROMIUM)" >&2
    exit 1
  fi
fi
command -v npm >/dev/null || { echo "browser.sh: Node.js and npm are needed (Debian: nodejs npm)" >&2; exit 1; }
# playwright-core (tests/browser/package.json) needs Node.js 20 or later.
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || { echo "browser.sh: Node.js $(node --version) is too old: playwright-core needs 20 or later" >&2; exit 1; }
dir=$PWD/tests/browser
if [ ! -d "$dir/node_modules/playwright-core" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2 && touch node_modules)
fi
echo "$dir"
