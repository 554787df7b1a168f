#!/usr/bin/env bash
# `cdc run` as the shared bench's MariaDB connector under test (../shared/bench, bench/cut.sh
# and bench/run_all.sh): it streams the bench's 1M-change workload on `bench.orders` from the
# binlog into an embedded log and exits once every change is durable there.
#
#   tests/bench/cut_mysql.sh prime   # CUT_MYSQL_PRE_HOOK: before the workload, store a start
#                                    # position (a captured marker row), then stop
#   tests/bench/cut_mysql.sh stream  # CUT_MYSQL_CMD: resume there, stream the workload, stop once
#                                    # BENCH_EXPECTED_EVENTS records are appended (its /metrics),
#                                    # exit when they are durable (checked in the topic)
#   tests/bench/cut_mysql.sh snapshot  # CUT_MYSQL_CMD: snapshot orders_snap (SNAPSHOT_TABLE=1) into a
#                                    # fresh log, snapshot.mode = initial_only, CUT_CONNECTIONS
#                                    # readers (default 2); exits when the snapshot is durable
#
# One run in the bench, from the repository root, with a release build:
#
#   cargo build --release -p cdc-connector --bin cdc
#   cd ../shared/bench && BENCH_WORK=/tmp/cdc-bench ONLY=mysql \
#     CUT_MYSQL_PRE_HOOK="$OLDPWD/tests/bench/cut_mysql.sh prime" \
#     CUT_MYSQL_CMD="$OLDPWD/tests/bench/cut_mysql.sh stream" bench/run_all.sh
#
# Repeat a timing without the rest (the workload must be written again: a stored position is
# consumed by one run): `bench/workload_mysql.sh` with PRE_WORKLOAD_HOOKS set to the prime
# command, then `CUT_MYSQL_CMD=... bench/cut.sh mysql`.
#
# CDC_BIN (default target/release/cdc of this checkout), CUT_DIR (default
# $BENCH_WORK/cdc-cut-mysql: config, log, connector output). Tombstones are off so that the
# records are exactly the workload's changes; the JSON envelope and durable flushes as in the
# default configuration. Uses MYHOST MYPORT MYUSER MYPASS MYDB (set by the bench).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CDC_BIN:-$repo/target/release/cdc}
dir=${CUT_DIR:-${BENCH_WORK:-/tmp/cdc-bench}/cdc-cut-mysql}
mode=${1:?usage: $0 prime|stream|snapshot}
# The bench's defaults (bench/lib.sh) where a hook's environment lacks them.
MYHOST=${MYHOST:-127.0.0.1} MYPORT=${MYPORT:-53306} MYUSER=${MYUSER:-bench} MYPASS=${MYPASS:-bench} MYDB=${MYDB:-bench}
my() { mariadb -h"$MYHOST" -P"$MYPORT" -u"$MYUSER" -p"$MYPASS" -N -B "$MYDB" "$@"; }
topic="bench.$MYDB.orders"
marker="bench.$MYDB.cdc_prime"

config() {
  cat >"$dir/cdc.toml" <<EOF
name = "bench"
[source]
type = "mysql"
url = "mysql://$MYUSER:$MYPASS@$MYHOST:$MYPORT/$MYDB?sslmode=disable"
tables = ["$MYDB.orders", "$MYDB.cdc_prime"]
server_id = 7400
[format]
tombstones_on_delete = false
[snapshot]
mode = "never"
[log]
dir = "$dir/log"
partitions = 1
[admin]
listen = "127.0.0.1:0"
EOF
}

high_watermark() {
  "$bin" log describe "$1" --data-dir "$dir/log" 2>/dev/null |
    awk 'f && NF >= 6 && $1 ~ /^[0-9]+$/ {s += $3} /^PARTITION/ {f = 1} /^Consumer/ {f = 0} END {print s + 0}'
}

wait_for() { # topic count pid
  while [ "$(high_watermark "$1")" -lt "$2" ]; do
    kill -0 "$3" 2>/dev/null || { echo "cdc exited early; see $dir/connector.log" >&2; exit 1; }
    sleep 0.1
  done
}

case "$mode" in
  prime)
    rm -rf "$dir"; mkdir -p "$dir"
    my -e "CREATE TABLE IF NOT EXISTS cdc_prime (id INT PRIMARY KEY) ENGINE=InnoDB; DELETE FROM cdc_prime"
    config
    CDC_LOG_LEVEL=info "$bin" run --config "$dir/cdc.toml" >"$dir/connector.log" 2>&1 &
    pid=$!
    until grep -q "binlog stream started" "$dir/connector.log"; do
      kill -0 "$pid" 2>/dev/null || { cat "$dir/connector.log" >&2; exit 1; }
      sleep 0.1
    done
    my -e "INSERT INTO cdc_prime VALUES (1)"
    wait_for "$marker" 1 "$pid"
    kill -TERM "$pid"; wait "$pid"
    ;;
  stream)
    want=${BENCH_EXPECTED_EVENTS:?}
    # Done when the connector's own counter of appended records reaches the workload's
    # (its records come in transactions of 1,000, the marker table's are a few: the
    # counter cannot reach `want` before the last transaction is in); SIGTERM then drains
    # and makes everything durable before the exit the bench times. Polling /metrics costs
    # next to nothing, where `cdc log describe` ten times a second opened and scanned the
    # whole log each time (~30 ms of CPU each) beside the connector it was timing.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    sed -i "s/^listen = .*/listen = \"127.0.0.1:$port\"/" "$dir/cdc.toml"
    CDC_LOG_LEVEL=warn "$bin" run --config "$dir/cdc.toml" >>"$dir/connector.log" 2>&1 &
    pid=$!
    trap 'kill -TERM $pid 2>/dev/null || true' EXIT
    appended() {
      curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null |
        awk '$1 == "cdc_log_appended_records_total" {print int($2)} END {print 0}' | head -1
    }
    while [ "$(appended)" -lt "$want" ]; do
      kill -0 "$pid" 2>/dev/null || { echo "cdc exited early; see $dir/connector.log" >&2; exit 1; }
      sleep 0.1
    done
    kill -TERM "$pid"; wait "$pid"; trap - EXIT
    got=$(high_watermark "$topic")
    [ "$got" -ge "$want" ] || { echo "the topic holds $got records after the drain, not $want" >&2; exit 1; }
    if [ -n "${BENCH_OUT:-}" ]; then
      bytes=$(du -sb "$dir/log" | cut -f1)
      printf '{"events":%s,"bytes":%s}\n' "$want" "$bytes" >"$BENCH_OUT/stats.json"
    fi
    ;;
  snapshot)
    rm -rf "$dir"; mkdir -p "$dir"
    cat >"$dir/cdc.toml" <<EOF
name = "bench"
[source]
type = "mysql"
url = "mysql://$MYUSER:$MYPASS@$MYHOST:$MYPORT/$MYDB?sslmode=disable"
tables = ["$MYDB.orders_snap"]
server_id = 7401
[snapshot]
mode = "initial_only"
connections = ${CUT_CONNECTIONS:-2}
[log]
dir = "$dir/log"
partitions = 1
[admin]
listen = "127.0.0.1:0"
EOF
    CDC_LOG_LEVEL=warn exec "$bin" run --config "$dir/cdc.toml" 2>"$dir/connector.log"
    ;;
  *) echo "usage: $0 prime|stream|snapshot" >&2; exit 2 ;;
esac
