#!/usr/bin/env bash
# Regenerates the Debezium golden files of tests/tests/pg_golden.rs:
#   debezium_pg_default.jsonl  Debezium 3.6.3, default value modes
#   debezium_pg_modes.jsonl    decimal string, binary hex, interval string, time connect
# on a private Postgres 15 started by the shared bench scripts (see README.md).
#
#   tests/golden/capture.sh                      # BENCH=../shared/bench relative to the repo
#
# Environment: BENCH (the bench directory), BENCH_WORK (default /tmp/cdc-golden),
# PGPORT (default 55440) — chosen not to collide with the bench's own cluster on 55432.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BENCH=${BENCH:-$repo/../shared/bench}
export BENCH_WORK=${BENCH_WORK:-/tmp/cdc-golden} PGPORT=${PGPORT:-55440}
cd "$BENCH"
. bench/lib.sh

bench/pg_up.sh
trap 'bench/pg_up.sh down' EXIT
psqlq -f "$here/pg_schema.sql"
# Publications and slots exist before the changes, so both captures stream them (no snapshot).
psqlq >/dev/null <<'SQL'
CREATE PUBLICATION golden_default FOR TABLE golden_types, golden_toast, golden_full, golden_special;
CREATE PUBLICATION golden_modes FOR TABLE golden_types, golden_toast, golden_full, golden_special;
SELECT 1 FROM pg_create_logical_replication_slot('golden_default', 'pgoutput');
SELECT 1 FROM pg_create_logical_replication_slot('golden_modes', 'pgoutput');
SQL
psqlq -f "$here/pg_changes.sql" >/dev/null

# Comparable output: truncates are emitted (Debezium skips them by default) and records
# carry the transaction block (our connector always fills it).
common='skipped.operations=none
provide.transaction.metadata=true'
export DUMP_SNAPSHOT_MODE=no_data DUMP_SCHEMAS=true DUMP_PREFIX=golden DUMP_IDLE_S=${DUMP_IDLE_S:-8}

DUMP_OUT="$here/debezium_pg_default.jsonl" DUMP_SLOT=golden_default DUMP_PUBLICATION=golden_default \
DUMP_TABLES=public.golden_types,public.golden_toast,public.golden_full,public.golden_special \
DBZ_EXTRA="$common" bench/debezium_dump.sh

DUMP_OUT="$here/debezium_pg_modes.jsonl" DUMP_SLOT=golden_modes DUMP_PUBLICATION=golden_modes \
DUMP_TABLES=public.golden_types,public.golden_toast,public.golden_full,public.golden_special \
DBZ_EXTRA="$common
decimal.handling.mode=string
binary.handling.mode=hex
interval.handling.mode=string
time.precision.mode=connect" bench/debezium_dump.sh
