#!/usr/bin/env bash
# Fetch a second Postgres major version (16.2) for the test harness.
#
# The PyPI wheel `pgserver==0.1.4` bundles a complete Postgres 16 install under
# `pgserver/pginstall/` (bin/postgres, initdb, pg_ctl, lib/postgresql/pgoutput.so).
# We only download and unzip it (no pip install, no Python import), make it usable by
# the `postgres` OS user (Postgres refuses to run as root, so the harness runs it as
# that user), check that it really runs, and print the bindir on stdout:
#
#   export CDC_TEST_PG_BINDIR="$(tests/fetch-pg16.sh)"     # or: CDC_TEST_PG=16
#
# Cache dir: $CDC_TEST_CACHE/pg16 if CDC_TEST_CACHE is set, else /var/cache/cdc-test/pg16.
# Idempotent: a second run reuses the unpacked tree.
set -euo pipefail

VERSION=0.1.4
if [[ -n "${CDC_TEST_CACHE:-}" ]]; then
    DEST="$CDC_TEST_CACHE/pg16"
else
    DEST=/var/cache/cdc-test/pg16
fi
BINDIR="$DEST/pgserver/pginstall/bin"

log() { echo "fetch-pg16: $*" >&2; }

if [[ ! -x "$BINDIR/postgres" ]]; then
    mkdir -p "$DEST/download"
    PIP=pip3
    command -v "$PIP" >/dev/null 2>&1 || PIP=pip
    if ! command -v "$PIP" >/dev/null 2>&1; then
        PIP="python3 -m pip"
    fi
    log "downloading pgserver==$VERSION into $DEST/download"
    # --only-binary: the sdist would try to build Postgres; we want the prebuilt wheel.
    # The target tags are pinned so the local Python's version does not matter (we never
    # import the package; only its bundled Postgres is used).
    $PIP download --quiet --no-deps --only-binary=:all: --dest "$DEST/download" \
        --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp \
        "pgserver==$VERSION" >&2
    WHEEL=$(ls "$DEST"/download/pgserver-"$VERSION"-*.whl | head -n1)
    log "unpacking $WHEEL"
    TMP=$(mktemp -d "$DEST/unpack.XXXXXX")
    # unzip is not always installed; Python's zipfile is (pip needs Python).
    if command -v unzip >/dev/null 2>&1; then
        unzip -q -o "$WHEEL" 'pgserver/pginstall/*' 'pgserver.libs/*' -d "$TMP"
    else
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$WHEEL" "$TMP"
    fi
    # auditwheel moved the shared libraries the binaries need (libpq-<hash>.so, ...)
    # into the wheel's top-level `pgserver.libs/` and set RPATH=$ORIGIN/../../../pgserver.libs,
    # so the two directories must stay siblings exactly as in the wheel.
    rm -rf "$DEST/pgserver" "$DEST/pgserver.libs"
    mv "$TMP/pgserver" "$DEST/pgserver"
    mv "$TMP/pgserver.libs" "$DEST/pgserver.libs"
    rm -rf "$TMP"
fi

# Zip archives do not always carry Unix modes: make every binary executable and the
# whole tree readable (and directories traversable) by everyone, including `postgres`.
chmod -R a+rX "$DEST"
chmod a+rx "$BINDIR"/*
# Every ancestor must be traversable by the postgres user too (say so when we change one:
# e.g. a cache under /root makes /root world-traversable).
d="$DEST"
while [[ "$d" != "/" ]]; do
    if [[ $(( 0$(stat -c %a "$d") & 01 )) -eq 0 ]]; then
        log "chmod a+x $d (so that the postgres user can reach the binaries)"
        chmod a+x "$d"
    fi
    d=$(dirname "$d")
done

# Verify it runs. The binaries find pgserver.libs/ through their RPATH; the server's own
# libpq etc. live in pginstall/lib, which we add to LD_LIBRARY_PATH (the harness does too).
LIBDIR="$DEST/pgserver/pginstall/lib"
run() {
    if [[ $(id -u) -eq 0 ]] && id postgres >/dev/null 2>&1; then
        runuser -u postgres -- env LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
    else
        env LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
    fi
}
VER=$(run "$BINDIR/postgres" --version) || { log "postgres --version failed"; exit 1; }
run "$BINDIR/initdb" --version >/dev/null || { log "initdb --version failed"; exit 1; }
[[ -f "$LIBDIR/postgresql/pgoutput.so" ]] || { log "pgoutput.so missing under $LIBDIR/postgresql"; exit 1; }
log "ok: $VER"
echo "$BINDIR"
