#!/usr/bin/env bash
# The fault suite: the whole product through faults, against real servers the test
# harness starts (Postgres, MariaDB), counting lost, duplicated and reordered changes,
# the highest retained WAL and the time to recover, per scenario.
#
#   tests/faults/run.sh                 # short form (CI): 6 kills and 4 network faults per source,
#                                       # each database restarted once
#   tests/faults/run.sh --long          # the report's form: 100 kills, 40 network faults per source
#   tests/faults/run.sh --long --write  # ... and rewrite RELIABILITY.md with the figures
#
# KILLS=N and NET_FAULTS=N override the counts. Scenarios today: SIGKILL of `cdc run` at
# random moments (Postgres; MariaDB inside the snapshot and while streaming), the database
# server restarted mid-stream (Postgres fast and immediate shutdown; MariaDB), and network
# faults through a TCP proxy the suite starts (cut, stall, slow, and a black hole longer
# than the connector's silence limit). Each is a test of the suite
# (tests/tests/pg_source_e2e.rs, pg_source_resilience.rs, my_source_crash.rs,
# my_source_e2e.rs, faults_network.rs, faults_network_mysql.rs) that checks, at the end, that the table rebuilt from the log equals the
# database and that every key's history is exactly its committed versions; the figures
# come from `cdc_harness::faults` (CDC_FAULT_REPORT). Exit status: the tests'.
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
mode=$([ "$long" = 1 ] && echo long || echo short)
report=$(mktemp /tmp/cdc-faults-XXXXXX.jsonl)
trap 'rm -f "$report"' EXIT
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
rc=0
CDC_FAULT_REPORT="$report" CDC_TEST_KILLS="$kills" MY_CRASH_KILLS="$kills" CDC_TEST_NET_FAULTS="$net" \
  python3 scripts/run-tests.py \
  --only pg_source_e2e,pg_source_resilience,my_source_crash,my_source_e2e,faults_network,faults_network_mysql \
  -- sigkill_at_random_moments postgres_restart_mid_stream mariadb_restarted_mid_stream through_cuts || rc=$?
elapsed=$(( $(date +%s) - t0 ))
args=(--mode "$mode" --kills "$kills" --net "$net" --started "$started" --seconds "$elapsed"
      --command "tests/faults/run.sh $*")
python3 tests/faults/report.py "${args[@]}" <"$report"
if [ "$write" = 1 ]; then
  # Rendered before the file is replaced: the report names the commit, clean or not.
  python3 tests/faults/report.py "${args[@]}" --markdown <"$report" >"$report.md"
  mv "$report.md" RELIABILITY.md
  echo "wrote RELIABILITY.md"
fi
exit "$rc"
