#!/usr/bin/env bash
# run.sh -- the browser test of the web page: installs playwright-core (the version pinned in
# tests/browser/package.json, into the git-ignored tests/browser/node_modules; no browser download)
# when it is missing, then runs test_page.mjs against Debian's /usr/bin/chromium (install-deps.sh
# installs chromium and, when none is on PATH, Node.js and npm).
#   bash tests/browser/run.sh [build/vbmemd] [screenshot dir, default build/browser]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/vbmemd}
OUT=${2:-$(dirname "$BIN")/browser}
want=$(node -p 'require("./tests/browser/package.json").dependencies["playwright-core"]')
have=$(node -p 'try { require("./tests/browser/node_modules/playwright-core/package.json").version } catch (e) { "" }')
if [ "$want" != "$have" ]; then
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --loglevel=error)
fi
node tests/browser/test_page.mjs "$BIN" "$OUT"
# --cors-origin from pages of other loopback origins
node tests/browser/test_cors.mjs "$BIN"
