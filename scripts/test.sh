#!/usr/bin/env bash
# The README's test command: installs the database servers if missing, then runs every
# test of the workspace. The suite starts its own private servers; none need be running.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --locked "$@"
