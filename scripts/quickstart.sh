#!/usr/bin/env bash
# The README's first command: installs Postgres if missing, builds the connector, starts a
# sandbox Postgres with sample tables and runs the connector against it.
# Pass --keep to leave the sandbox running until Ctrl-C, --mariadb for a MariaDB source.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The first build compiles the whole workspace (a few minutes on 2 cores): show it.
echo "building the connector and the sandbox (cargo build; the first time takes a few minutes)..." >&2
cargo build -p cdc-harness --bin cdc-sandbox
exec "${CARGO_TARGET_DIR:-target}/debug/cdc-sandbox" "$@"
