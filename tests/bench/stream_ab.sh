#!/usr/bin/env bash
# Paired stream timing: one run of the bench's 1M-change workload with a slot per run, then
# per round `pg_recvlogical` (the limit) and each binary given, alternating, each draining
# its own slot through the bench's `measure` (bench/cut.sh, CUT_STOP=slot) with
# `tests/bench/bench-cdc.toml`. Needs the bench's Postgres up (bench/pg_up.sh); the
# workload is written here (SNAPSHOT_TABLE=0: orders_snap is left as it is).
#
#   tests/bench/stream_ab.sh ROUNDS BIN [BIN...]
#
# A BIN may be a wrapper script (e.g. one that sets CDC_LOG__COMPRESSION and execs the
# binary); runs are labelled by its file name. Prints the `measure` line of each run (label,
# wall s, events, events/s, source MB/s, output MB/s, user s, sys s, walsender CPU s, peak
# RSS MB, steady s, rc) and the bytes the log's directory holds afterwards. Slots are
# dropped at the end. BENCH_DIR: the shared bench (default ../shared/bench of the main
# checkout); BENCH_WORK as for the bench (default /tmp/cdc-bench).
set -euo pipefail
rounds=$1; shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
BENCH_DIR=${BENCH_DIR:-$(cd "$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)/../.." && pwd)/shared/bench}
export BENCH_WORK=${BENCH_WORK:-/tmp/cdc-bench} RESULTS=${BENCH_WORK:-/tmp/cdc-bench}/results-stream-ab REPO=$repo
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
cd "$BENCH_DIR"
key() { basename "$1" | tr -c 'a-zA-Z0-9\n' '_'; }
slots=""
for r in $(seq "$rounds"); do
  slots="$slots bench_r${r}_pg:pgoutput"
  for b in "$@"; do slots="$slots bench_r${r}_$(key "$b"):pgoutput"; done
done
SNAPSHOT_TABLE=0 PG_SLOTS="$slots" bench/workload_pg.sh >/dev/null 2>&1
for r in $(seq "$rounds"); do
  (
    . bench/lib.sh
    export BENCH_SLOT=bench_r${r}_pg
    measure "limit_pg_pgoutput_r$r" pg exit -- bash -c \
      '"$0" -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$PGDATABASE" --slot="$BENCH_SLOT" --start --no-loop \
          --endpos="$BENCH_END_LSN" -o proto_version=1 -o publication_names="$BENCH_PUBLICATION" -f - \
       | wc -c >"$BENCH_OUT/bytes"' "$PGBIN/pg_recvlogical"
  ) 2>/dev/null
  for b in "$@"; do
    rm -rf /tmp/cdc-bench-cut
    line=$(CUT_SLOT="bench_r${r}_$(key "$b")" CUT_LABEL="cut_$(basename "$b")_r$r" CUT_STOP=slot CUT_BIN=$b \
      CUT_PG_CMD='CDC_LOG_LEVEL=warn CDC_SOURCE__SLOT="$BENCH_SLOT" CDC_SOURCE__URL="postgres://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE?sslmode=disable" exec "$CUT_BIN" run --config "$REPO/tests/bench/bench-cdc.toml"' \
      bench/cut.sh pg 2>/dev/null)
    echo "$line	log_bytes=$(du -sb /tmp/cdc-bench-cut 2>/dev/null | cut -f1)"
  done
done
. bench/lib.sh
for s in $slots; do psqlq -c "select pg_drop_replication_slot('${s%%:*}')" >/dev/null; done
