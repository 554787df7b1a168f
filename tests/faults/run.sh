#!/usr/bin/env bash
# The fault suite: the whole product through faults, against real servers the test
# harness starts (Postgres, MariaDB), counting lost, duplicated and reordered changes,
# the highest retained WAL and the time to recover, per scenario.
#
#   tests/faults/run.sh                 # short form (CI): 6 kills, 4 network faults, 4 damaged segments,
#                                       # a 10 s sink outage; each database restarted once
#   tests/faults/run.sh --long          # the report's form: 100 kills, 40 network faults per source,
#                                       # 10-minute outages, 10,000,000 fuzz executions per target
#   tests/faults/run.sh --long --write  # ... and rewrite RELIABILITY.md with the figures
#
# KILLS, NET_FAULTS, SEGMENT_FAULTS (damaged segments per scenario: short 4, long 20),
# FAILOVERS (short 3, long 20), SINK_OUTAGE_SECS (short 10, long 600), KAFKA_KILLS (short 5,
# long 30), BROKER_OUTAGE_SECS (short 3, long 600) and BULK_CHANGES (the bench-shaped
# workload the kills also run under: short 100,000, long 1,000,000) override the sizes. Scenarios: SIGKILL of `cdc run`
# at random moments (Postgres; MariaDB inside the snapshot and while streaming), the
# database server restarted mid-stream (Postgres fast and immediate shutdown; MariaDB), a
# failover-like restart (Postgres, MariaDB: back at a new address under the same host name:
# needs root),
# SIGKILLs while Postgres and MariaDB stream the bench's workload shape (transactions of
# 1,000 rows; MariaDB's on a server of its own with rotating, expiring binlogs: binlog behind
# and margin reported),
# network faults through a TCP proxy the suite starts (cut, stall, slow, and a black hole
# longer than the connector's silence limit), torn segment tails after a SIGKILL, durable
# segments damaged while stopped (found by `cdc log verify`, cut by `cdc log repair`,
# snapshotted again), the log's file system full (a tmpfs: needs root), a Redis and a
# Typesense sink's target down while the source writes, and Kafka as the log: SIGKILLs with and without
# transactions (duplicates counted, not failed, without them) and the broker down. Each is a test of the suite (tests/tests/
# faults_bulk.rs, faults_bulk_mysql.rs, pg_source_e2e.rs, pg_source_resilience.rs, my_source_crash.rs, my_source_e2e.rs,
# faults_network.rs, faults_network_mysql.rs, faults_segments.rs, pg_source_disk.rs,
# faults_sink.rs, faults_failover.rs, faults_failover_mysql.rs, kafka_log.rs) that checks, at the end, that the table rebuilt from the log (and the
# sink's view, with `cdc verify --sink`) equals the database and that every key's history
# is exactly its committed versions; the figures come from `cdc_harness::faults`
# (CDC_FAULT_REPORT). Exit status: the tests'.
set -euo pipefail
cd "$(dirname "$0")/../.."
long=0 write=0
for a in "$@"; do
  case "$a" in
    --long) long=1 ;;
    --write) write=1 ;;
    *) echo "usage: tests/faults/run.sh [--long] [--write]" >&2; exit 2 ;;
  esac
done
kills=${KILLS:-$([ "$long" = 1 ] && echo 100 || echo 6)}
net=${NET_FAULTS:-$([ "$long" = 1 ] && echo 40 || echo 4)}
segfaults=${SEGMENT_FAULTS:-$([ "$long" = 1 ] && echo 20 || echo 4)}
outage=${SINK_OUTAGE_SECS:-$([ "$long" = 1 ] && echo 600 || echo 10)}
failovers=${FAILOVERS:-$([ "$long" = 1 ] && echo 20 || echo 3)}
kafka_kills=${KAFKA_KILLS:-$([ "$long" = 1 ] && echo 30 || echo 5)}
broker_outage=${BROKER_OUTAGE_SECS:-$([ "$long" = 1 ] && echo 600 || echo 3)}
bulk=${BULK_CHANGES:-$([ "$long" = 1 ] && echo 1000000 || echo 100000)}
mode=$([ "$long" = 1 ] && echo long || echo short)
# The scenario and fuzzing lines, kept for re-rendering (`tests/faults/report.py --markdown
# < target/fault-report.jsonl`).
mkdir -p target
report=$PWD/target/fault-report.jsonl
: >"$report"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
rc=0
CDC_FAULT_REPORT="$report" CDC_TEST_KILLS="$kills" MY_CRASH_KILLS="$kills" CDC_TEST_NET_FAULTS="$net" \
  CDC_TEST_SEGMENT_FAULTS="$segfaults" CDC_TEST_SINK_OUTAGE_SECS="$outage" CDC_TEST_FAILOVERS="$failovers" \
  CDC_TEST_KAFKA_KILLS="$kafka_kills" CDC_TEST_BROKER_OUTAGE_SECS="$broker_outage" CDC_TEST_BULK_CHANGES="$bulk" \
  python3 scripts/run-tests.py \
  --only faults_bulk,faults_bulk_mysql,pg_source_e2e,pg_source_resilience,my_source_crash,my_source_e2e,faults_network,faults_network_mysql,faults_segments,faults_sink,pg_source_disk,faults_failover,faults_failover_mysql,kafka_log \
  -- sigkill_at_random_moments sigkill_while_streaming_the_bench postgres_restart_mid_stream mariadb_restarted_mid_stream through_cuts \
     torn_segment_tails damaged_durable_segments enospc down_for_long_holds_no_wal failover_to_a_new_address \
     killed_mid_stream the_broker_restarted || rc=$?
# Fuzzing of the decoders (pgoutput, binlog events, segments and recovery, config): the
# short form about 1,000,000 executions in all, the long form 10,000,000 per target.
# FUZZ=0 skips it; FUZZ_EXECS=N runs N per target instead.
if [ "${FUZZ:-1}" != 0 ]; then
  fuzz_args=()
  [ "$long" = 1 ] && fuzz_args+=(--long)
  CDC_FAULT_REPORT="$report" EXECS="${FUZZ_EXECS:-}" scripts/fuzz.sh "${fuzz_args[@]+"${fuzz_args[@]}"}" || rc=1
fi
elapsed=$(( $(date +%s) - t0 ))
# The exact command: the size overrides it ran with, then the script and its arguments.
overrides=$(env | grep -E '^(KILLS|NET_FAULTS|SEGMENT_FAULTS|SINK_OUTAGE_SECS|FAILOVERS|KAFKA_KILLS|BROKER_OUTAGE_SECS|BULK_CHANGES|FUZZ|FUZZ_EXECS)=' | sort | tr '\n' ' ' || true)
args=(--mode "$mode" --kills "$kills" --net "$net" --started "$started" --seconds "$elapsed"
      --command "${overrides}tests/faults/run.sh $*")
python3 tests/faults/report.py "${args[@]}" <"$report"
if [ "$write" = 1 ]; then
  # Rendered before the file is replaced: the report names the commit, clean or not.
  python3 tests/faults/report.py "${args[@]}" --markdown <"$report" >"$report.md"
  mv "$report.md" RELIABILITY.md
  echo "wrote RELIABILITY.md"
fi
exit "$rc"
