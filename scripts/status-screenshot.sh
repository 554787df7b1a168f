#!/usr/bin/env bash
# A picture of a running connector's status page, as a phone shows it, with headless
# Chromium (Debian's `chromium`; scripts/install-deps.sh installs it).
#   scripts/status-screenshot.sh [ADDR] [OUT.png]
# ADDR is the [admin] listen address (default 127.0.0.1:8083); with an admin token set,
# export CDC_ADMIN_TOKEN and the page gets it through its URL fragment (never sent).
# WIDTHxHEIGHT from STATUS_WINDOW (default 390x1400: a phone's width).
set -euo pipefail
addr=${1:-127.0.0.1:8083}
out=${2:-cdc-status.png}
window=${STATUS_WINDOW:-390x1400}
url="http://$addr/"
[ -n "${CDC_ADMIN_TOKEN:-}" ] && url="$url#token=$CDC_ADMIN_TOKEN"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
out_abs=$(realpath -m "$out")
chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --hide-scrollbars --user-data-dir="$profile" --virtual-time-budget=5000 \
  --window-size="${window/x/,}" --screenshot="$out_abs" "$url" 2>/dev/null
echo "$out_abs"
