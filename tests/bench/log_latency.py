#!/usr/bin/env python3
"""Commit-to-readable latency of the embedded log, as a tailing reader sees it.

    cdc log --data-dir DIR tail TOPIC --follow | log_latency.py SECONDS WARMUP OUT

Reads `cdc log tail --follow` JSON lines on stdin for SECONDS seconds. Each record's value
is the Debezium envelope of an UPDATE of the bench table `lat`, whose `after.ts_us` is the
microsecond clock_timestamp() taken by the UPDATE (before its commit). Latency = the time
the line was read here - ts_us, on one machine's clock (conservative: it includes the
time between the statement and its commit, and the tail's printing). Records of the first
WARMUP seconds (by ts_us) and rows the setup wrote (ts_us < 10) are left out. Writes one
latency in microseconds per line to OUT, then prints count, rate and percentiles in ms.
"""
import json
import select
import sys
import time

seconds, warmup, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
start = time.time()
lat = []
first = None
span = [None, None]
fd = sys.stdin.buffer
buf = b""
import os
while time.time() - start < seconds:
    r, _, _ = select.select([fd], [], [], 0.5)
    if not r:
        continue
    chunk = os.read(fd.fileno(), 1 << 16)
    if not chunk:
        break
    now = time.time()
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        try:
            rec = json.loads(line)
            ts = rec["value"]["after"]["ts_us"]
        except (ValueError, KeyError, TypeError):
            continue
        if ts < 10:
            continue
        if first is None:
            first = ts
        if ts < first + warmup * 1e6:
            continue
        lat.append(now * 1e6 - ts)
        span[0] = ts if span[0] is None else min(span[0], ts)
        span[1] = ts if span[1] is None else max(span[1], ts)
with open(out, "w") as f:
    f.write("\n".join(str(int(x)) for x in lat))
if not lat:
    print("no records measured")
    sys.exit(1)
lat.sort()
n = len(lat)
pct = lambda p: lat[min(n - 1, int(p * n))] / 1000
rate = n / max((span[1] - span[0]) / 1e6, 1e-9)
print(f"changes measured: {n} ({rate:.0f}/s)")
print(f"latency ms: p50 {pct(0.5):.1f}  p90 {pct(0.9):.1f}  p99 {pct(0.99):.1f}  p99.9 {pct(0.999):.1f}  max {lat[-1] / 1000:.1f}")
