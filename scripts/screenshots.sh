#!/usr/bin/env bash
# Makes docs/img/web-index.png and docs/img/web-campaign.png anew (1280×800): the browser test
# (tests/it/web_browser.rs, tests/browser/web.test.mjs) run with SCREENSHOTS set, over a
# throwaway PostgreSQL while a campaign sends. Look at them before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/img
SCREENSHOTS=$PWD/docs/img exec scripts/test.sh --test it web_browser::
