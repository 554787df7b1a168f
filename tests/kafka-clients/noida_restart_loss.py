#!/usr/bin/env python3
"""Shows, without the connector, that noida-db (the Kafka-protocol emulator of the Kafka
tests) can lose transactions it acknowledged when it is restarted: a transactional
producer commits transactions of 20 records as fast as it can, the broker gets SIGINT
(Ctrl-C, its graceful stop) after about a second, and is started again on the same data
directory; a read_committed consumer then looks for every record of every transaction
whose commit_transaction() returned. Prints, per trial, the commits acknowledged and those
missing after the restart.

    tests/kafka-clients/noida_restart_loss.py [TRIALS]     (default 10)

The binary: $CDC_TEST_NOIDA_BIN, else tests/fetch-noida.sh's. Python: the venv of
tests/registry-clients/setup-python.sh (confluent-kafka). On 2026-12-07 (noida-db 0.2.3,
the 2-core machine of BENCHMARKS.md): 6 of 10 trials lost their last 1 to 3
acknowledged transactions. tests/tests/kafka_log.rs's broker-restart test meets this in
about one run in twenty.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, KafkaError, OFFSET_BEGINNING, Producer, TopicPartition

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("CDC_TEST_NOIDA_BIN") or subprocess.run(
    [os.path.join(HERE, "..", "fetch-noida.sh")], check=True, capture_output=True, text=True
).stdout.strip().splitlines()[-1]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(d, port):
    log = open(os.path.join(d, "noida.log"), "a")
    p = subprocess.Popen([BIN, "start", "--data-dir", os.path.join(d, "data"), "--host", "127.0.0.1",
                          "--only", "kafka", "--kafka-port", str(port)], stdout=log, stderr=log, cwd=d)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p
        except OSError:
            time.sleep(0.1)
    sys.exit("noida-db did not start")


def trial(n, d):
    port = free_port()
    brokers = f"127.0.0.1:{port}"
    broker = start(d, port)
    producer = Producer({"bootstrap.servers": brokers, "transactional.id": "x", "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 2000, "log_level": 0})
    producer.init_transactions(10)
    acknowledged = []

    def stop_broker():
        time.sleep(1.0 + (n % 7) * 0.037)
        broker.send_signal(signal.SIGINT)
        broker.wait(20)

    stopper = threading.Thread(target=stop_broker)
    stopper.start()
    i = 0
    while stopper.is_alive():
        try:
            producer.begin_transaction()
            for k in range(20):
                producer.produce("topic", key=str(i * 20 + k).encode(), value=b"v")
            producer.commit_transaction(2)
            acknowledged.append(i)
        except Exception:
            break
        i += 1
    stopper.join()
    broker = start(d, port)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "r", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("topic", 0, OFFSET_BEGINNING)])
    seen = set()
    while True:
        m = consumer.poll(5)
        if m is None:
            break
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        seen.add(int(m.key()))
    consumer.close()
    broker.send_signal(signal.SIGINT)
    broker.wait(20)
    lost = [t for t in acknowledged if any(t * 20 + k not in seen for k in range(20))]
    print(f"trial {n}: {len(acknowledged)} commits acknowledged, missing after the restart: {lost}", flush=True)
    return bool(lost)


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    lossy = 0
    for n in range(trials):
        with tempfile.TemporaryDirectory() as d:
            lossy += trial(n, d)
    print(f"trials that lost acknowledged commits: {lossy} of {trials}")


if __name__ == "__main__":
    main()
