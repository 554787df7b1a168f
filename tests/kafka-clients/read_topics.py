#!/usr/bin/env python3
"""Reads Kafka topics back with Confluent's Python client (librdkafka inside), as a
consumer of the connector's output would: every partition from its start to its end,
`read_committed` unless --uncommitted. Prints one JSON object per record:
{"topic", "partition", "offset", "key", "value", "headers": [[name, value], ...]}, keys,
values and header values as text (UTF-8) or null. A topic that does not exist (yet) has
no records.

    read_topics.py --brokers 127.0.0.1:P TOPIC [TOPIC ...]

Used by tests/tests/kafka_log.rs (the venv of tests/registry-clients/setup-python.sh).
"""
import argparse
import json
import sys

from confluent_kafka import Consumer, KafkaError, TopicPartition, OFFSET_BEGINNING


def text(b):
    return None if b is None else b.decode("utf-8")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--brokers", required=True)
    p.add_argument("--uncommitted", action="store_true")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("topics", nargs="+")
    a = p.parse_args()
    c = Consumer({
        "bootstrap.servers": a.brokers,
        "group.id": "cdc-test-reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_uncommitted" if a.uncommitted else "read_committed",
        "session.timeout.ms": 6000,
    })
    parts = []
    for t in a.topics:
        md = c.list_topics(t, timeout=a.timeout)
        tm = md.topics[t]
        if tm.error is not None:
            if tm.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                # Not created yet: nothing to read (a caller polling for records retries).
                print(f"topic {t}: not there (yet)", file=sys.stderr)
                continue
            print(f"topic {t}: {tm.error}", file=sys.stderr)
            sys.exit(2)
        parts += [TopicPartition(t, p, OFFSET_BEGINNING) for p in sorted(tm.partitions)]
    if not parts:
        return
    c.assign(parts)
    left = {(tp.topic, tp.partition) for tp in parts}
    out = sys.stdout
    import time
    deadline = time.time() + a.timeout
    while left:
        if time.time() > deadline:
            print(f"timed out; partitions not at their end: {sorted(left)}", file=sys.stderr)
            sys.exit(3)
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                left.discard((m.topic(), m.partition()))
                continue
            print(f"error: {m.error()}", file=sys.stderr)
            sys.exit(4)
        out.write(json.dumps({
            "topic": m.topic(),
            "partition": m.partition(),
            "offset": m.offset(),
            "key": text(m.key()),
            "value": text(m.value()),
            "headers": [[k, text(v)] for k, v in (m.headers() or [])],
        }) + "\n")
    c.close()


if __name__ == "__main__":
    main()
