#!/usr/bin/env bash
# End-to-end latency of a Redis view: from the UPDATE in Postgres to the value visible in
# Redis, at a fixed rate of changes, through `cdc run` with a Redis `[[sink]]` (the
# sidecar case: source, log and sink in one process).
#
#   tests/bench/redis_latency.sh            # 5000 changes/s for 60 s (10 s warm-up)
#
# Needs the bench's Postgres up (../shared/bench: bench/pg_up.sh; 127.0.0.1:55432, db
# bench). Table public.lat (10,000 rows) is (re)created with its own publication and
# slot; a private Redis runs on REDIS_PORT (default 56381) in $LAT_WORK (default
# /tmp/cdc-lat-bench). pgbench updates random rows at RATE changes/s (ROWS_PER_TX rows
# per transaction, CLIENTS connections), each setting ts_us to the statement's
# clock_timestamp() in microseconds; redis_latency.py reads Redis's MONITOR stream and
# takes, per row value written, the time Redis executed the write minus its ts_us (the
# same machine's clock). Both sides are conservative: ts_us is taken before the commit.
#
# Settings: CDC_BIN (default target/release/cdc), RATE (5000), ROWS_PER_TX (1), CLIENTS
# (16), DURATION (60 s), WARMUP (10 s), PGBIN (/usr/lib/postgresql/15/bin),
# GROUP_COMMIT_MS (the connector's source.group_commit_ms; default: its default, 50).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CDC_BIN:-$repo/target/release/cdc}
work=${LAT_WORK:-/tmp/cdc-lat-bench}
port=${REDIS_PORT:-56381}
rate=${RATE:-5000} rows=${ROWS_PER_TX:-1} clients=${CLIENTS:-16}
seconds=${DURATION:-60} warmup=${WARMUP:-10}
pgbin=${PGBIN:-/usr/lib/postgresql/15/bin}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-55432} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-bench}
psqlq() { "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"; }

rm -rf "$work"; mkdir -p "$work"
cleanup() {
  [ -n "${cdc_pid:-}" ] && kill -TERM "$cdc_pid" 2>/dev/null && wait "$cdc_pid" 2>/dev/null || true
  # Waited for: a run right after this one must not find this server still on the port.
  if [ -f "$work/redis.pid" ]; then
    rpid=$(cat "$work/redis.pid")
    kill "$rpid" 2>/dev/null || true
    while kill -0 "$rpid" 2>/dev/null; do sleep 0.05; done
  fi
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

redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --daemonize yes --logfile "$work/redis.log" --pidfile "$work/redis.pid"
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

cat >"$work/cdc.toml" <<EOF
name = "lat"
[source]
type = "postgres"
url = "postgres://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE?sslmode=disable"
slot = "lat_slot"
publication = "lat_pub"
tables = ["public.lat"]
${GROUP_COMMIT_MS:+group_commit_ms = $GROUP_COMMIT_MS}
[snapshot]
mode = "never"
[log]
dir = "$work/log"
[admin]
listen = "127.0.0.1:0"
[[sink]]
name = "cache"
type = "redis"
url = "redis://127.0.0.1:$port/0"
prefix = "lat"
EOF
CDC_LOG_LEVEL=warn "$bin" run --config "$work/cdc.toml" >"$work/cdc.log" 2>&1 &
cdc_pid=$!
# Streaming once the slot is active; the sink once its first change is in Redis.
until [ "$(psqlq -c "select active from pg_replication_slots where slot_name = 'lat_slot'")" = t ]; do
  kill -0 "$cdc_pid" 2>/dev/null || { cat "$work/cdc.log" >&2; exit 1; }
  sleep 0.2
done
psqlq -c "update lat set ts_us = 1 where id = 1" >/dev/null
until [ "$(redis-cli -p "$port" exists lat:lat:1)" = 1 ]; do
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

python3 "$repo/tests/bench/redis_latency.py" "$port" "$((seconds + 5))" "$warmup" "$work/latencies_us.txt" \
  >"$work/latency.txt" &
watch_pid=$!
sleep 0.5
cpu0=$(awk '{print $14 + $15}' "/proc/$cdc_pid/stat")
"$pgbin/pgbench" -n -c "$clients" -j 2 -R $((rate / rows)) -T "$seconds" -f "$work/update.sql" \
  "$PGDATABASE" >"$work/pgbench.txt" 2>&1
cpu1=$(awk '{print $14 + $15}' "/proc/$cdc_pid/stat")
wait "$watch_pid" || true
rss=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$cdc_pid/status")
tps=$(awk '/^tps/ {print $3; exit}' "$work/pgbench.txt")
lag=$(awk '/schedule lag/ {print}' "$work/pgbench.txt")
echo "pgbench: $tps transactions/s x $rows rows (asked: $((rate / rows))/s); $lag"
echo "cdc run: $(awk -v a="$cpu0" -v b="$cpu1" -v t="$(getconf CLK_TCK)" -v s="$seconds" 'BEGIN {printf "%.0f", 100 * (b - a) / t / s}') % of a core, peak RSS $rss MB"
cat "$work/latency.txt"
