#!/usr/bin/env python3
"""Commit-to-visible latency of a Redis view, read off Redis's own MONITOR stream.

    redis_latency.py PORT SECONDS WARMUP OUT

Connects to Redis on 127.0.0.1:PORT, sends MONITOR, and for SECONDS seconds reads every
command Redis executes. Each row value the sink writes (SET/MSET of `lat:lat:<id>`)
carries the row's `ts_us`, the microsecond clock_timestamp() of the UPDATE that wrote it;
MONITOR prefixes each command with the time Redis executed it (inside an EXEC: when the
EXEC ran, which is when a reader can first see it). Latency = that time - ts_us, on one
machine's clock. Changes of the first WARMUP seconds are left out. Writes one latency in
microseconds per line to OUT, then prints count, rate and percentiles in milliseconds.
"""
import re
import socket
import sys
import time

port, seconds, warmup, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
TS = re.compile(rb'\\"ts_us\\":(\d+)')

s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
s.settimeout(1.0)
start = time.time()
buf = b""
lat = []
first_ts = None
span_from = span_to = None
while time.time() - start < seconds:
    try:
        data = s.recv(1 << 20)
    except socket.timeout:
        continue
    if not data:
        break
    buf += data
    *lines, buf = buf.split(b"\r\n")
    for line in lines:
        # +1733200000.123456 [0 127.0.0.1:5000] "MSET" "lat:lat:1" "{\"id\":1,...}" ...
        if not line.startswith(b"+") or b"ts_us" not in line:
            continue
        sp = line.find(b" ")
        try:
            at_us = int(float(line[1:sp]) * 1e6)
        except ValueError:
            continue
        for m in TS.finditer(line):
            ts = int(m.group(1))
            if ts < 1e12:
                continue  # the script's first marker update
            if first_ts is None:
                first_ts = ts
            if ts - first_ts >= warmup * 1e6:
                lat.append(at_us - ts)
                span_from = ts if span_from is None else min(span_from, ts)
                span_to = ts if span_to is None else max(span_to, ts)
s.close()

with open(out, "w") as f:
    f.write("\n".join(str(x) for x in lat))
    f.write("\n")
if not lat:
    print("no changes seen")
    sys.exit(1)
lat.sort()
n = len(lat)


def pct(p):
    return lat[min(n - 1, int(p / 100.0 * n))] / 1000.0


span = (span_to - span_from) / 1e6
print(
    f"changes {n} in {span:.1f} s ({n / max(span, 1e-9):.0f}/s)  "
    f"p50 {pct(50):.1f} ms  p90 {pct(90):.1f} ms  p99 {pct(99):.1f} ms  "
    f"p99.9 {pct(99.9):.1f} ms  max {lat[-1] / 1000.0:.1f} ms"
)
