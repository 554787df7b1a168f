#!/usr/bin/env bash
# Paired snapshot timing: per round, `COPY orders_snap TO STDOUT` (the limit), then an
# initial snapshot (`tests/bench/bench-cdc-snap.toml`) by each binary given, alternating,
# each timed from process start to exit with its CPU time and peak RSS. Needs the bench's
# Postgres with orders_snap (../shared/bench: bench/pg_up.sh; bench/workload_pg.sh).
#
#   tests/bench/snapshot_ab.sh ROUNDS BIN [BIN...]
#
# Prints one line per run: label, wall seconds, then user s, sys s, peak RSS KiB, and for
# the snapshots the bytes the log's directory holds afterwards (`du -sb`). A BIN may be a
# wrapper script (e.g. one that sets CDC_LOG__COMPRESSION and execs the binary).
set -euo pipefail
rounds=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-55432} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-bench}
psql_() { psql -X -q -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$PGDATABASE" "$@"; }
now() { date +%s.%N; }
for _ in $(seq "$rounds"); do
  s=$(now); psql_ -c "copy orders_snap to stdout" | wc -c >/dev/null; e=$(now)
  echo "copy $(echo "$e - $s" | bc)"
  for bin in "$@"; do
    rm -rf /tmp/cdc-bench-snap
    psql_ -c "select pg_drop_replication_slot('bench_cut_snap') from pg_replication_slots where slot_name = 'bench_cut_snap'" >/dev/null
    s=$(now)
    CDC_LOG_LEVEL=warn CDC_SOURCE__URL="postgres://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE?sslmode=disable" \
      /usr/bin/time -f "%U %S %M" -o /tmp/snapshot_ab.time "$bin" run --config "$here/bench-cdc-snap.toml" >/dev/null
    e=$(now)
    echo "$bin $(echo "$e - $s" | bc) $(cat /tmp/snapshot_ab.time) $(du -sb /tmp/cdc-bench-snap | cut -f1)"
  done
done
