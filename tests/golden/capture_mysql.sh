#!/usr/bin/env bash
# Regenerates the Debezium golden files of the MySQL source (see README.md, "MySQL / MariaDB"):
#   debezium_my_default.jsonl         Debezium 3.6.3 MySQL connector, default value modes
#   debezium_my_schema_changes.jsonl  the schema change records of that capture (topic "golden")
#   debezium_my_modes.jsonl           decimal string, binary hex, time connect, bigint unsigned precise
# Each capture: a fresh private MariaDB started by the shared bench scripts, my_schema.sql
# loaded, Debezium started with snapshot.mode=initial, my_changes.sql applied once every
# snapshot record is out, Debezium stopped after DUMP_IDLE_S quiet seconds.
#
#   tests/golden/capture_mysql.sh                # BENCH=../shared/bench relative to the repo
#
# Environment: BENCH (the bench directory), BENCH_WORK (default /tmp/cdc-golden), MYPORT
# (default 53316: not the bench's 53306 nor the machine's 3306), DUMP_IDLE_S (default 20).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BENCH=${BENCH:-$repo/../shared/bench}
# Debezium's MySQL connector (there is no MariaDB connector in the bundle) only talks to
# MariaDB 10.11 when @@version looks like MySQL 5.7 (bench README, "MariaDB and Debezium").
export BENCH_WORK=${BENCH_WORK:-/tmp/cdc-golden} MYPORT=${MYPORT:-53316} MY_FAKE_VERSION=5.7.19-golden
export MY_DIR=$BENCH_WORK/mysql-golden
cd "$BENCH"
. bench/lib.sh

dump_pid=
cleanup() {
  # The dump runs in its own process group (setsid): stop it and its JVM together.
  if [ -n "$dump_pid" ] && kill -0 "$dump_pid" 2>/dev/null; then
    kill -TERM -- "-$dump_pid" 2>/dev/null || true
    wait "$dump_pid" 2>/dev/null || true
  fi
  bench/mysql_up.sh down
}
trap cleanup EXIT

tables=golden.types,golden.no_pk,golden.composite,golden.zero_dates,golden.ddl,golden.ddl_renamed,golden.created
# Comparable output: truncates are emitted (skipped by default) and records carry the
# transaction block.
common='skipped.operations=none
provide.transaction.metadata=true'
export DUMP_DB=mysql DUMP_TABLES=$tables DUMP_SNAPSHOT_MODE=initial DUMP_SCHEMAS=true \
  DUMP_PREFIX=golden DUMP_IDLE_S=${DUMP_IDLE_S:-20}

# capture OUT EXTRA_PROPERTIES: one run on a fresh server; the raw dump goes to OUT.
capture() {
  local out=$1 extra=$2 snap n rc=0
  bench/mysql_up.sh
  # As the test harness's servers (tests/src/mariadb.rs) run.
  myq -e "SET GLOBAL binlog_row_metadata = FULL"
  myq <"$here/my_schema.sql"
  snap=$(myq -e "SELECT (SELECT COUNT(*) FROM golden.types) + (SELECT COUNT(*) FROM golden.no_pk)
    + (SELECT COUNT(*) FROM golden.composite) + (SELECT COUNT(*) FROM golden.zero_dates)
    + (SELECT COUNT(*) FROM golden.ddl)")
  rm -f "$out"
  DUMP_OUT=$out DBZ_EXTRA="$common
$extra" setsid bench/debezium_dump.sh &
  dump_pid=$!
  # The snapshot's binlog position is taken before its first row is read, so changes written
  # after the last snapshot record are streamed, never part of the snapshot.
  for _ in $(seq 600); do
    n=$(grep -c '"op":"r"' "$out" 2>/dev/null || true)
    [ "${n:-0}" -ge "$snap" ] && break
    kill -0 "$dump_pid" 2>/dev/null || { log "debezium stopped during the snapshot"; wait "$dump_pid" || true; exit 1; }
    sleep 0.5
  done
  [ "${n:-0}" -ge "$snap" ] || { log "snapshot incomplete: $n of $snap records"; exit 1; }
  log "snapshot out ($n records); applying my_changes.sql"
  myq <"$here/my_changes.sql"
  wait "$dump_pid" || rc=$?
  dump_pid=
  [ "$rc" = 0 ] || { log "debezium dump failed ($rc)"; exit "$rc"; }
  bench/mysql_up.sh down
}

capture "$here/debezium_my_default.jsonl" 'include.schema.changes=true'
# Keep the schema change records (topic = the prefix) apart from the data records.
python3 - "$here/debezium_my_default.jsonl" "$here/debezium_my_schema_changes.jsonl" <<'PY'
import json, sys
data, ddl = [], []
for line in open(sys.argv[1], encoding="utf-8"):
    (ddl if json.loads(line)["destination"] == "golden" else data).append(line)
open(sys.argv[1], "w", encoding="utf-8").writelines(data)
open(sys.argv[2], "w", encoding="utf-8").writelines(ddl)
PY

capture "$here/debezium_my_modes.jsonl" 'include.schema.changes=false
decimal.handling.mode=string
binary.handling.mode=hex
time.precision.mode=connect
bigint.unsigned.handling.mode=precise'
