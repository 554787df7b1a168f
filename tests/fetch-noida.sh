#!/usr/bin/env bash
# Fetch noida-db (0.2.3), a multi-protocol emulator whose Elasticsearch API reports 8.15.3,
# for the Elasticsearch sink's tests (no real Elasticsearch is installable here).
#
# The PyPI wheel `noida-db` carries one static-ish binary, `noida_db/noida-db`. We only
# download and unzip it (no pip install, no Python import), check that it runs, and print
# its path:
#
#   export CDC_TEST_NOIDA_BIN="$(tests/fetch-noida.sh)"
#
# It prints a warning about the C library's version (`GLIBC_2.39' not found`, a weak
# symbol) on older systems and runs anyway. The harness starts it with only its
# Elasticsearch API: `noida-db start --data-dir D --only elasticsearch --elasticsearch-port P`.
#
# Cache dir: $CDC_TEST_CACHE/noida if CDC_TEST_CACHE is set, else /var/cache/cdc-test/noida.
# Idempotent: a second run reuses the binary.
set -euo pipefail

VERSION=0.2.3
. "$(dirname "$0")/fetch-lib.sh"
fetch_dest noida
BIN="$DEST/noida-db-$VERSION"

log() { echo "fetch-noida: $*" >&2; }

if [[ ! -x "$BIN" ]]; then
    log "downloading noida-db==$VERSION into $DEST/download"
    pip_download "$DEST/download" \
        --platform manylinux_2_17_x86_64 --python-version 3.11 --implementation cp \
        "noida-db==$VERSION" >&2
    WHEEL=$(ls "$DEST"/download/noida_db-"$VERSION"-*.whl | head -n1)
    log "unpacking $WHEEL"
    TMP=$(mktemp -d "$DEST/unpack.XXXXXX")
    unzip_members "$WHEEL" 'noida_db/noida-db' "$TMP"
    chmod a+rx "$TMP/noida_db/noida-db"
    mv "$TMP/noida_db/noida-db" "$BIN"
    rm -rf "$TMP" "$DEST/download"
fi

VER=$("$BIN" version 2>/dev/null | head -n1) || { log "$BIN version failed"; exit 1; }
log "ok: $VER"
echo "$BIN"
