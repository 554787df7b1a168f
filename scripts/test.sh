#!/usr/bin/env bash
# The README's test command: installs the database servers if missing, then runs every
# test of the workspace (what `cargo test --workspace --locked` runs), three test binaries
# at a time (scripts/run-tests.py: most of a binary's time is spent waiting on the servers
# it starts). The suite starts its own private servers; none need be running.
#   scripts/test.sh [--jobs N] [--only NAME,...] [-- TEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
exec python3 scripts/run-tests.py "$@"
