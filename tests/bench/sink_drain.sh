#!/usr/bin/env bash
# Sink drain benchmark: the changes already in a log (the bench's 1M-change workload, as
# `cdc run` wrote it with tests/bench/bench-cdc.toml) applied to a target by `cdc sink`,
# beside the target's own bulk tool applying the same effects:
#
#   redis:     `redis-cli --pipe` of the equivalent commands (SET <key> <after-image JSON>
#              for creates and updates, DEL <key> for deletes), the limit; and (unless
#              SAME_COMMANDS=0) `redis-cli --pipe` of the very commands the sink sent, as
#              MONITOR recorded them in one more drain (tests/bench/monitor_to_resp.py);
#   typesense: Typesense's own JSONL import (action=upsert) of the same documents, plus
#              its delete-by-ids for the deletes.
#
#   tests/bench/sink_drain.sh redis     [LOG_DIR]   # default /tmp/cdc-bench-cut/log
#   tests/bench/sink_drain.sh typesense [LOG_DIR]
#
# Each target is a private server on a free-by-default port in $SINK_WORK (default
# /tmp/cdc-sink-bench), emptied before each run. Prints one line per run: label, wall s,
# records, records/s, peak RSS MB (for Redis also the server's own CPU of each drain). CDC_BIN: default target/release/cdc of this checkout.
# REDIS_PORT (default 56379), TYPESENSE_BIN (default: tests/fetch-typesense.sh),
# TYPESENSE_PORT (default 58108).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CDC_BIN:-$repo/target/release/cdc}
target=${1:?usage: $0 redis|typesense [LOG_DIR]}
src_log=${2:-/tmp/cdc-bench-cut/log}
work=${SINK_WORK:-/tmp/cdc-sink-bench}
topic=${SINK_TOPIC:-bench.public.orders}
rm -rf "$work"; mkdir -p "$work"
# The sink commits its group offsets next to the log: work on a copy.
cp -a "$src_log" "$work/log"
records=$("$bin" log describe "$topic" --data-dir "$work/log" |
  awk 'f && NF >= 6 && $1 ~ /^[0-9]+$/ {s += $3} /^PARTITION/ {f = 1} /^Consumer/ {f = 0} END {print s + 0}')
echo "records in $topic: $records"

metrics_port=${METRICS_PORT:-58391}
# Runs `cdc sink` until its lag is 0 with every record applied; prints label, wall, rate, RSS.
time_sink() { # label
  local label=$1 start end pid
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$work/$label.time" "$bin" sink --config "$work/cdc.toml" --sink bench \
    --listen "127.0.0.1:$metrics_port" >"$work/$label.log" 2>&1 &
  pid=$!
  while :; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/$label.log" >&2; exit 1; }
    m=$(curl -s "http://127.0.0.1:$metrics_port/metrics" || true)
    lag=$(awk '/^cdc_sink_lag_records/ {print $2}' <<<"$m")
    commits=$(awk '/^cdc_sink_commits_total/ {print $2}' <<<"$m")
    [ "${lag:-1}" = 0 ] && [ "${commits:-0}" != 0 ] && break
    sleep 0.05
  done
  end=$(date +%s.%N)
  # SIGTERM to `cdc sink` itself (the child of /usr/bin/time), so that time reports.
  pkill -TERM -P "$pid" || true; wait "$pid" || true
  rss=$(awk -F: '/Maximum resident/ {print int($2 / 1024)}' "$work/$label.time")
  python3 -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); print(f'$label\t{w:.2f} s\t$records\t{int($records/w)}/s\t${rss} MB')" "$start" "$end"
}

# JSONL of (op, key text, document) from the log, in log order.
extract() {
  "$bin" log tail "$topic" --data-dir "$work/log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    v = r["value"]
    if v is None:
        continue
    v = v.get("payload", v)
    k = r["key"]
    k = k.get("payload", k)
    key = ":".join(str(x) if not isinstance(x, str) else x for x in k.values())
    print(json.dumps([v["op"], key, v.get("after")], separators=(",", ":")))
' >"$work/changes.jsonl"
}

config() { # target keys
  cat >"$work/cdc.toml" <<EOF
name = "bench"
[source]
type = "postgres"
url = "postgres://unused@127.0.0.1:1/unused"
[log]
dir = "$work/log"
[admin]
listen = "127.0.0.1:0"
[[sink]]
name = "bench"
$1
EOF
}

case "$target" in
  redis)
    port=${REDIS_PORT:-56379}
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
      --daemonize yes --logfile "$work/redis.log" --pidfile "$work/redis.pid"
    # Waited for, so that a run right after this one does not find it still on the port.
    trap 'rpid=$(cat "$work/redis.pid" 2>/dev/null) && kill "$rpid" 2>/dev/null &&
      while kill -0 "$rpid" 2>/dev/null; do sleep 0.05; done; true' EXIT
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
    extract
    python3 - "$work/changes.jsonl" >"$work/commands.resp" <<'EOF'
import json, sys
out = sys.stdout.buffer
def cmd(*args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        b = a.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(b), b))
for line in open(sys.argv[1]):
    op, key, after = json.loads(line)
    k = "bench:orders:" + key
    if op == "d":
        cmd("DEL", k)
    else:
        cmd("SET", k, json.dumps(after, separators=(",", ":")))
EOF
    redis-cli -p "$port" flushall >/dev/null
    # Redis's own CPU (user + sys) for each drain: INFO cpu before and after it (it counts
    # since the server started, so only the difference is one drain's).
    rcpu() { redis-cli -p "$port" info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {print s}'; }
    # Times `redis-cli --pipe` of a RESP file; prints label, wall, rate, Redis's CPU.
    time_pipe() { # label file
      local c0 c1 start end
      c0=$(rcpu)
      start=$(date +%s.%N)
      redis-cli -p "$port" --pipe <"$2" >"$2.out"
      end=$(date +%s.%N)
      c1=$(rcpu)
      python3 -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); print(f'$1\t{w:.2f} s\t$records\t{int($records/w)}/s\tredis cpu {float(sys.argv[4])-float(sys.argv[3]):.2f} s')" "$start" "$end" "$c0" "$c1"
    }
    time_pipe limit_redis_cli_pipe "$work/commands.resp"
    keys_limit=$(redis-cli -p "$port" dbsize)
    redis-cli -p "$port" flushall >/dev/null
    config "type = \"redis\"
url = \"redis://127.0.0.1:$port/0\"
prefix = \"bench\""
    c0=$(rcpu)
    time_sink cdc_sink_redis
    c1=$(rcpu)
    echo "redis cpu for the sink's drain: $(python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.2f} s')" "$c0" "$c1")"
    # The sink also keeps its offsets hash and the table's rows set: two keys more than the limit's.
    echo "keys: limit $keys_limit, sink $(redis-cli -p "$port" dbsize)"
    # The second limit, the one issue 14 names: `redis-cli --pipe` of the sink's own
    # commands (its reads under WATCH, MULTI/EXEC, MSET, the rows set, the offsets), as
    # MONITOR saw them during one more drain (not timed: MONITOR slows Redis down).
    # SAME_COMMANDS=0 skips it.
    if [ "${SAME_COMMANDS:-1}" = 1 ]; then
      redis-cli -p "$port" flushall >/dev/null
      rm -rf "$work/log"; cp -a "$src_log" "$work/log"
      redis-cli -p "$port" config set client-output-buffer-limit "normal 0 0 0" >/dev/null
      redis-cli -p "$port" monitor >"$work/monitor.txt" &
      mon=$!
      time_sink cdc_sink_redis_under_monitor >/dev/null
      sleep 1; kill "$mon"; wait "$mon" 2>/dev/null || true
      python3 "$repo/tests/bench/monitor_to_resp.py" <"$work/monitor.txt" >"$work/same.resp"
      rm -f "$work/monitor.txt"
      redis-cli -p "$port" flushall >/dev/null
      time_pipe limit_redis_cli_pipe_same_commands "$work/same.resp"
      echo "keys after the same commands: $(redis-cli -p "$port" dbsize)"
    fi
    ;;
  typesense)
    tbin=${TYPESENSE_BIN:-$("$repo/tests/fetch-typesense.sh")}
    port=${TYPESENSE_PORT:-58108}
    mkdir -p "$work/ts"
    "$tbin" --data-dir "$work/ts" --api-key bench --api-address 127.0.0.1 --api-port "$port" \
      --peering-address 127.0.0.1 --peering-port $((port + 1)) >"$work/typesense.log" 2>&1 &
    tpid=$!
    # Waited for, so that a run right after this one does not find it still on the port.
    trap 'kill "$tpid" 2>/dev/null && while kill -0 "$tpid" 2>/dev/null; do sleep 0.1; done; true' EXIT
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.2; done
    extract
    ts() { curl -sf -H "X-TYPESENSE-API-KEY: bench" "$@"; }
    python3 - "$work/changes.jsonl" "$work" <<'EOF'
import json, sys
up = open(sys.argv[2] + "/upserts.jsonl", "w")
dels = []
for line in open(sys.argv[1]):
    op, key, after = json.loads(line)
    if op == "d":
        dels.append(key)
    else:
        d = dict(after); d["id"] = key
        up.write(json.dumps(d, separators=(",", ":")) + "\n")
# Deletes by id filter, 1000 ids a request (a URL holds no more).
with open(sys.argv[2] + "/deletes.txt", "w") as f:
    for i in range(0, len(dels), 1000):
        f.write("id:[" + ",".join(dels[i:i + 1000]) + "]\n")
EOF
    ts -X POST "http://127.0.0.1:$port/collections" -d '{"name":"orders","fields":[{"name":".*","type":"auto"}]}' >/dev/null
    start=$(date +%s.%N)
    ts -X POST --data-binary @"$work/upserts.jsonl" "http://127.0.0.1:$port/collections/orders/documents/import?action=upsert&batch_size=1000" >"$work/import.out"
    while read -r filter; do
      ts -G -X DELETE --data-urlencode "filter_by=$filter" "http://127.0.0.1:$port/collections/orders/documents" >/dev/null
    done <"$work/deletes.txt"
    end=$(date +%s.%N)
    python3 -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); print(f'limit_typesense_import\t{w:.2f} s\t$records\t{int($records/w)}/s')" "$start" "$end"
    ts -X DELETE "http://127.0.0.1:$port/collections/orders" >/dev/null
    config "type = \"typesense\"
url = \"http://127.0.0.1:$port\"
api_key = \"bench\""
    time_sink cdc_sink_typesense
    ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac
