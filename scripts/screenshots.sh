#!/usr/bin/env bash
# Makes docs/img/web-index.png and docs/img/web-campaign.png (1280×800) and the unsubscribe
# pages' docs/img/unsubscribe-{ja,en}[-done].png (a phone, 390×844) anew: the browser tests
# (tests/it/web_browser.rs, tests/browser/*.test.mjs) run with SCREENSHOTS set, over a
# throwaway PostgreSQL. The Japanese pages need a Japanese font (Debian's fonts-ipafont-gothic,
# installed here as root when missing). Look at them before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! fc-list 2>/dev/null | grep -qi 'ipa\|noto sans cjk\|noto sans jp'; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-ipafont-gothic >/dev/null
  else
    echo "screenshots.sh: no Japanese font; install Debian's fonts-ipafont-gothic" >&2
    exit 1
  fi
fi
mkdir -p docs/img
SCREENSHOTS=$PWD/docs/img exec scripts/test.sh --test it web_browser::
