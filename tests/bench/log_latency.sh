#!/usr/bin/env bash
# Commit-to-readable latency of `cdc run` into the embedded log: from the UPDATE in
# Postgres to the record read by a tailing reader (`cdc log tail --follow`), at a fixed
# rate of changes, with the connector's default settings.
#
#   tests/bench/log_latency.sh                    # 1000 changes/s for 60 s (10 s warm-up)
#   RATE=5000 tests/bench/log_latency.sh
#
# Needs the bench's Postgres up (../shared/bench: bench/pg_up.sh; 127.0.0.1:55432, db
# bench). Table public.lat (10,000 rows) is (re)created with its own publication and
# slot, in $LAT_WORK (default /tmp/cdc-log-lat-bench). pgbench updates random rows at RATE
# changes/s (ROWS_PER_TX rows per transaction, CLIENTS connections), each setting ts_us to
# clock_timestamp() in microseconds; log_latency.py takes, per record the tail prints, the
# time it read it minus its ts_us. The connector's own view, its
# cdc_commit_to_durable_seconds histogram, is printed beside it.
#
# Settings: CDC_BIN (default target/release/cdc), RATE (1000), ROWS_PER_TX (1), CLIENTS
# (8), DURATION (60 s), WARMUP (10 s), PGBIN (/usr/lib/postgresql/15/bin), and
# GROUP_COMMIT_MS / STATUS_INTERVAL_MS to try the connector's knobs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CDC_BIN:-$repo/target/release/cdc}
work=${LAT_WORK:-/tmp/cdc-log-lat-bench}
rate=${RATE:-1000} rows=${ROWS_PER_TX:-1} clients=${CLIENTS:-8}
seconds=${DURATION:-60} warmup=${WARMUP:-10}
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-55432} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-bench}
psqlq() { "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"; }
admin_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

rm -rf "$work"; mkdir -p "$work"
cleanup() {
  [ -n "${tail_pid:-}" ] && kill "$tail_pid" 2>/dev/null || true
  [ -n "${cdc_pid:-}" ] && kill -TERM "$cdc_pid" 2>/dev/null && wait "$cdc_pid" 2>/dev/null || true
  psqlq -c "select pg_drop_replication_slot('lat_slot') from pg_replication_slots where slot_name = 'lat_slot'" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psqlq >/dev/null <<SQL
select pg_drop_replication_slot('lat_slot') from pg_replication_slots where slot_name = 'lat_slot';
drop publication if exists lat_pub;
drop table if exists lat;
create table lat (id int primary key, ts_us bigint not null, pad text);
insert into lat select g, 0, repeat('x', 100) from generate_series(1, 10000) g;
create publication lat_pub for table lat;
SQL

cat >"$work/cdc.toml" <<EOF2
name = "lat"
[source]
type = "postgres"
url = "postgres://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE?sslmode=disable"
slot = "lat_slot"
publication = "lat_pub"
tables = ["public.lat"]
${GROUP_COMMIT_MS:+group_commit_ms = $GROUP_COMMIT_MS}
${STATUS_INTERVAL_MS:+status_interval_ms = $STATUS_INTERVAL_MS}
[snapshot]
mode = "never"
[log]
dir = "$work/log"
[admin]
listen = "127.0.0.1:$admin_port"
EOF2
CDC_LOG_LEVEL=warn "$bin" run --config "$work/cdc.toml" >"$work/cdc.log" 2>&1 &
cdc_pid=$!
until [ "$(psqlq -c "select active from pg_replication_slots where slot_name = 'lat_slot'")" = t ]; do
  kill -0 "$cdc_pid" 2>/dev/null || { cat "$work/cdc.log" >&2; exit 1; }
  sleep 0.2
done
psqlq -c "update lat set ts_us = 1 where id = 1" >/dev/null
until "$bin" log --data-dir "$work/log" topics 2>/dev/null | grep -q '^lat.public.lat'; do
  kill -0 "$cdc_pid" 2>/dev/null || { cat "$work/cdc.log" >&2; exit 1; }
  sleep 0.2
done

{
  echo "\\set id random(1, 10000)"
  echo "BEGIN;"
  for i in $(seq "$rows"); do
    [ "$i" -gt 1 ] && echo "\\set id random(1, 10000)"
    echo "UPDATE lat SET ts_us = (extract(epoch from clock_timestamp()) * 1000000)::bigint WHERE id = :id;"
  done
  echo "COMMIT;"
} >"$work/update.sql"

# The tailing reader, from the start of the topic; only records after the warm-up count.
mkfifo "$work/records"
CDC_LOG_LEVEL=warn "$bin" log --data-dir "$work/log" tail lat.public.lat --follow >"$work/records" &
tail_pid=$!
python3 "$repo/tests/bench/log_latency.py" "$((seconds + 5))" "$warmup" "$work/latencies_us.txt" \
  <"$work/records" >"$work/latency.txt" &
reader_pid=$!
sleep 0.5
cpu0=$(awk '{print $14 + $15}' "/proc/$cdc_pid/stat")
"$pgbin/pgbench" -n -c "$clients" -j 2 -R $((rate / rows)) -T "$seconds" -f "$work/update.sql" \
  "$PGDATABASE" >"$work/pgbench.txt" 2>&1
cpu1=$(awk '{print $14 + $15}' "/proc/$cdc_pid/stat")
wait "$reader_pid" || true
kill "$tail_pid" 2>/dev/null || true
rss=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$cdc_pid/status")
tps=$(awk '/^tps/ {print $3; exit}' "$work/pgbench.txt")
lag=$(awk '/schedule lag/ {print}' "$work/pgbench.txt")
echo "pgbench: $tps transactions/s x $rows rows (asked: $((rate / rows))/s); $lag"
echo "cdc run: $(awk -v a="$cpu0" -v b="$cpu1" -v t="$(getconf CLK_TCK)" -v s="$seconds" 'BEGIN {printf "%.0f", 100 * (b - a) / t / s}') % of a core, peak RSS $rss MB"
cat "$work/latency.txt"
# The connector's own histogram (whole run, warm-up included; bucket bounds, not exact).
curl -s "http://127.0.0.1:$admin_port/metrics" | awk '
  /^cdc_commit_to_durable_seconds_bucket/ { match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5); n[++k] = $2; b[k] = le }
  /^cdc_commit_to_durable_seconds_count/ { total = $2 }
  END { if (!total) exit; split("0.5 0.99", q, " "); out = "cdc_commit_to_durable_seconds (bucket bound):";
        for (j = 1; j <= 2; j++) { for (i = 1; i <= k; i++) if (n[i] >= q[j] * total) { out = out sprintf("  p%s <= %s s", q[j] * 100, b[i]); break } }
        print out " (" total " transactions)" }'
