#!/usr/bin/env bash
# The README's first command: installs Postgres if missing, builds the connector, starts a
# sandbox Postgres with sample tables and runs the connector against it.
# Pass --keep to leave the sandbox running until Ctrl-C, --mariadb for a MariaDB source.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo run -q -p cdc-harness --bin cdc-sandbox -- "$@"
